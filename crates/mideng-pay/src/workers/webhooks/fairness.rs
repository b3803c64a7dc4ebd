//! The fairness rule's bookkeeping: which endpoint and tenant each attempt in flight holds a
//! slot of, the caps on them, and the endpoints held back after failures. No I/O.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{HELD_ENDPOINTS_MAX, WebhookSettings};
use crate::store::webhooks::Delivery;

/// Which endpoint and tenant an attempt in flight holds a slot of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) endpoint_id: String,
    pub(super) tenant_id: String,
}

impl Slot {
    pub(super) fn of(delivery: &Delivery) -> Self {
        Slot {
            endpoint_id: delivery.endpoint_id.clone(),
            tenant_id: delivery.tenant_id.clone(),
        }
    }
}

/// The caps on attempts in flight, each at least one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caps {
    pub(super) total: usize,
    pub(super) endpoint: usize,
    pub(super) tenant: usize,
}

impl Caps {
    pub(super) fn of(settings: &WebhookSettings) -> Self {
        Caps {
            total: settings.concurrency.max(1),
            endpoint: settings.in_flight_per_endpoint_max.max(1),
            tenant: settings.in_flight_per_tenant_max.max(1),
        }
    }
}

/// Attempts in flight, counted in all, per endpoint and per tenant. Its maps hold only what
/// is in flight, so they are bounded by `concurrency`.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    pub(super) total: usize,
    pub(super) endpoints: HashMap<String, usize>,
    pub(super) tenants: HashMap<String, usize>,
}

impl InFlight {
    /// Whether the caps admit one more attempt to `delivery`'s endpoint.
    pub(super) fn admits(&self, delivery: &Delivery, caps: Caps) -> bool {
        let of = |counts: &HashMap<String, usize>, key: &str| counts.get(key).copied();
        self.total < caps.total
            && of(&self.endpoints, &delivery.endpoint_id).unwrap_or(0) < caps.endpoint
            && of(&self.tenants, &delivery.tenant_id).unwrap_or(0) < caps.tenant
    }

    pub(super) fn add(&mut self, slot: &Slot) {
        self.total += 1;
        *self.endpoints.entry(slot.endpoint_id.clone()).or_default() += 1;
        *self.tenants.entry(slot.tenant_id.clone()).or_default() += 1;
    }

    pub(super) fn remove(&mut self, slot: &Slot) {
        fn release(counts: &mut HashMap<String, usize>, key: &str) {
            let count = counts
                .get_mut(key)
                .expect("an attempt ends only once, and was counted when it started");
            *count -= 1;
            if *count == 0 {
                counts.remove(key);
            }
        }
        self.total = self
            .total
            .checked_sub(1)
            .expect("an attempt ends only once, and was counted when it started");
        release(&mut self.endpoints, &slot.endpoint_id);
        release(&mut self.tenants, &slot.tenant_id);
    }

    /// The tenants at their cap: a read leaves them out.
    pub(super) fn full_tenants(&self, caps: Caps) -> Vec<String> {
        self.tenants
            .iter()
            .filter(|(_, count)| **count >= caps.tenant)
            .map(|(tenant, _)| tenant.clone())
            .collect()
    }
}

/// An endpoint's failures in a row, and until when it is held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) failures: u32,
    pub(super) until: Instant,
}

/// The endpoints held back after failures, at most [`HELD_ENDPOINTS_MAX`].
#[derive(Debug)]
pub(super) struct Backoffs {
    pub(super) first: Duration,
    pub(super) max: Duration,
    pub(super) endpoints: HashMap<String, Held>,
}

impl Backoffs {
    pub(super) fn new(settings: &WebhookSettings) -> Self {
        Backoffs {
            first: settings.endpoint_backoff,
            max: settings.endpoint_backoff_max.max(settings.endpoint_backoff),
            endpoints: HashMap::new(),
        }
    }

    /// An attempt to `endpoint_id` failed at `now`: how long the endpoint is held back.
    pub(super) fn failed(&mut self, endpoint_id: &str, now: Instant) -> Duration {
        let failures = self
            .endpoints
            .get(endpoint_id)
            .map_or(1, |held| held.failures.saturating_add(1));
        let wait = self
            .first
            .saturating_mul(2_u32.saturating_pow(failures - 1))
            .min(self.max);
        if !self.endpoints.contains_key(endpoint_id) {
            self.forget(now);
        }
        self.endpoints.insert(
            endpoint_id.to_owned(),
            Held {
                failures,
                until: now + wait,
            },
        );
        wait
    }

    /// An attempt to `endpoint_id` got a 2xx: it is no longer held back, its failures forgotten.
    pub(super) fn answered(&mut self, endpoint_id: &str) {
        self.endpoints.remove(endpoint_id);
    }

    /// Whether `endpoint_id` waits at `now`.
    pub(super) fn holds(&self, endpoint_id: &str, now: Instant) -> bool {
        self.endpoints
            .get(endpoint_id)
            .is_some_and(|held| held.until > now)
    }

    /// The endpoints that wait at `now`, for a read to leave out.
    pub(super) fn held(&self, now: Instant) -> Vec<String> {
        self.endpoints
            .iter()
            .filter(|(_, held)| held.until > now)
            .map(|(endpoint, _)| endpoint.clone())
            .collect()
    }

    /// Makes room for one more endpoint: forgets those whose wait ended the longest wait ago
    /// (an endpoint quiet that long starts over), then, if still full, those whose wait ends
    /// soonest.
    pub(super) fn forget(&mut self, now: Instant) {
        let max = self.max;
        self.endpoints
            .retain(|_, held| now.saturating_duration_since(held.until) < max);
        while self.endpoints.len() >= HELD_ENDPOINTS_MAX {
            let soonest = self
                .endpoints
                .iter()
                .min_by_key(|(_, held)| held.until)
                .map(|(endpoint, _)| endpoint.clone())
                .expect("a full map has an entry");
            self.endpoints.remove(&soonest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(endpoint_id: &str, tenant_id: &str) -> Delivery {
        Delivery {
            delivery_id: format!("W-{endpoint_id}"),
            tenant_id: tenant_id.to_owned(),
            endpoint_id: endpoint_id.to_owned(),
            event_id: "evt_1".to_owned(),
            event_type: "payment.succeeded".to_owned(),
            payload: "{}".to_owned(),
            status: crate::store::webhooks::DeliveryStatus::Pending,
            step: 0,
            attempts: 0,
            next_attempt_at_ms: 0,
            created_at_ms: 0,
        }
    }

    #[test]
    fn an_endpoint_and_a_tenant_take_no_more_than_their_caps() {
        let caps = Caps::of(&WebhookSettings::default());
        let mut in_flight = InFlight::default();
        let stalled = delivery("E-stalled", "t-a");
        in_flight.add(&Slot::of(&stalled));
        assert!(in_flight.admits(&stalled, caps));
        in_flight.add(&Slot::of(&stalled));
        assert!(!in_flight.admits(&stalled, caps), "two to one endpoint");
        // The tenant's other endpoints take its two slots left, then nothing.
        let other = delivery("E-other", "t-a");
        in_flight.add(&Slot::of(&other));
        in_flight.add(&Slot::of(&other));
        assert!(!in_flight.admits(&delivery("E-third", "t-a"), caps));
        assert_eq!(in_flight.full_tenants(caps), vec!["t-a".to_owned()]);
        // Another tenant takes the rest, up to the total.
        for index in 0..4 {
            let theirs = delivery(&format!("E-b{index}"), "t-b");
            assert!(in_flight.admits(&theirs, caps));
            in_flight.add(&Slot::of(&theirs));
        }
        assert!(
            !in_flight.admits(&delivery("E-c", "t-c"), caps),
            "eight in all"
        );
        in_flight.remove(&Slot::of(&stalled));
        assert!(in_flight.admits(&stalled, caps));
        assert!(in_flight.full_tenants(caps).contains(&"t-b".to_owned()));
        assert!(!in_flight.full_tenants(caps).contains(&"t-a".to_owned()));
    }

    #[test]
    fn a_failing_endpoint_waits_twice_as_long_each_time_until_a_2xx() {
        let mut backoffs = Backoffs::new(&WebhookSettings::default());
        let now = Instant::now();
        let waits: Vec<_> = (0..8)
            .map(|_| backoffs.failed("E1", now).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert!(backoffs.holds("E1", now + Duration::from_secs(59)));
        assert!(!backoffs.holds("E1", now + Duration::from_secs(60)));
        assert!(!backoffs.holds("E2", now), "another endpoint does not wait");
        assert_eq!(backoffs.held(now), vec!["E1".to_owned()]);
        backoffs.answered("E1");
        assert!(!backoffs.holds("E1", now));
        assert_eq!(backoffs.failed("E1", now), Duration::from_secs(1));
    }

    #[test]
    fn the_endpoints_held_back_are_bounded() {
        let mut backoffs = Backoffs::new(&WebhookSettings::default());
        let now = Instant::now();
        for index in 0..HELD_ENDPOINTS_MAX + 10 {
            backoffs.failed(
                &format!("E{index}"),
                now + Duration::from_millis(index as u64),
            );
        }
        assert_eq!(backoffs.endpoints.len(), HELD_ENDPOINTS_MAX);
        // The newest are kept; the soonest to end went first.
        assert!(backoffs.holds(&format!("E{}", HELD_ENDPOINTS_MAX + 9), now));
        assert!(!backoffs.holds("E0", now));
        // Quiet for the longest wait after their wait ended: forgotten.
        let later = now + Duration::from_secs(200);
        backoffs.failed("E-new", later);
        assert_eq!(backoffs.endpoints.len(), 1);
    }
}

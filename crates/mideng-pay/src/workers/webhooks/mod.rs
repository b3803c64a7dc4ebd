//! The webhook dispatcher: posts each due delivery to its endpoint, signed after the Standard
//! Webhooks specification, and records the attempt.
//!
//! It runs continuously, not in rounds: up to `concurrency` attempts are in flight at once (a
//! [`JoinSet`]), each recorded as soon as it ends, and while they run the dispatcher keeps
//! reading due deliveries and starting those its fairness rule admits, oldest due first:
//! - an endpoint has at most `in_flight_per_endpoint_max` attempts in flight, and a tenant at
//!   most `in_flight_per_tenant_max` over all its endpoints. An endpoint that accepts a
//!   connection and never answers holds its own few slots until the timeout; every other
//!   endpoint and tenant keeps the rest. (Rounds that waited for their slowest attempt let one
//!   such endpoint, twenty of its events queued, hold every tenant's webhooks back for 31 s.)
//! - an endpoint whose attempts fail is held back by a backoff of its own: after `n` failures
//!   in a row (a timeout, which holds a slot longest, above all) its due deliveries wait
//!   `endpoint_backoff` × 2ⁿ⁻¹, at most `endpoint_backoff_max`, and a 2xx ends the wait. This
//!   is on top of each delivery's retry schedule, so a failing endpoint slows itself and not
//!   the queue. It is kept in memory, for at most [`HELD_ENDPOINTS_MAX`] endpoints.
//! - a read returns at most a few due deliveries of each endpoint and none of the endpoints
//!   held back or the tenants at their cap ([`Webhooks::due`]), so that neither one endpoint's
//!   backlog nor many failing endpoints fill it with deliveries that cannot start.
//!
//! The caps and the backoff are each instance's: two instances may have twice the cap in
//! flight to one endpoint.
//!
//! Each delivery is claimed by compare-and-set just before its attempt (so a dispatcher on
//! every instance is safe: a delivery is attempted by one of them), for twice the `timeout`;
//! the attempt is cut off at one and a half, so the claim outlasts it with room for the write.
//! Only a 2xx acknowledges; anything else (another status, a redirect, a refused connection, a
//! timeout) schedules the next attempt after the schedule's next delay, and the schedule's last
//! failure fails the delivery and disables its endpoint, its deliveries kept. A dispatcher that
//! dies mid-attempt leaves the delivery due again once its claim runs out: delivery is at least
//! once, and the unchanged `webhook-id` lets the receiver apply it once. One whose attempt or
//! write outlasts its claim finds the delivery claimed again: its 2xx still settles it, its
//! failure is only recorded (it would otherwise undo a later `DELIVERED`, or fail the delivery
//! and disable the endpoint). A stop starts nothing more and records the attempts in flight.
//!
//! Every connection passes the outbound-address guard ([`crate::domain::outbound`]'s
//! [`TargetPolicy`]): the resolver drops every answer that is not globally routable (unless
//! private targets are allowed), an IP-literal URL is judged with its port before it is sent
//! (the operator's allowed pairs pass), and no proxy stands in between.
//! A refused target records what a closed port records, "connection refused".

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mideng::StoreError;
use tokio::task::{Id, JoinError, JoinSet};

mod fairness;
mod send;

pub use send::client;

use self::fairness::{Backoffs, Caps, InFlight, Slot};
use self::send::{TIMED_OUT, attempt, ms};
use crate::domain::clock::Clock;
use crate::domain::outbound::TargetPolicy;
use crate::domain::webhook::{SCHEDULE, next_delay};
use crate::store::Webhooks;
use crate::store::webhooks::{Attempt, AttemptOutcome, Delivery, DueDelivery, DueQuery};

/// How the dispatcher runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Delay before each attempt, the first counted from the event (default
    /// [`SCHEDULE`]: at once, then 5 s … 10 h, about 27.6 hours in all).
    pub schedule: Vec<Duration>,
    /// Whole-attempt timeout (default 10 s).
    pub timeout: Duration,
    /// Pause between reads that found nothing to start (default 1 s); also how long deliveries
    /// read and not yet started are kept before they are read again.
    pub interval: Duration,
    /// Deliveries read at once (default 100).
    pub batch: u32,
    /// Attempts in flight at once (default 8).
    pub concurrency: usize,
    /// Attempts in flight at once to one endpoint (default 2): the most of the `concurrency`
    /// slots an endpoint that never answers can hold. More than one, so that one slow message
    /// does not queue a healthy endpoint's others behind it.
    pub in_flight_per_endpoint_max: usize,
    /// Attempts in flight at once to one tenant's endpoints (default 4): a tenant may register
    /// many endpoints, and with every one of them stalled it still holds only half of the
    /// default `concurrency`.
    pub in_flight_per_tenant_max: usize,
    /// How long an endpoint is held back after a failure (default 1 s); it doubles with each
    /// failure in a row. Long enough that an endpoint that times out does not take its slots
    /// back at once, short enough that one failure delays the endpoint's other deliveries
    /// little. Zero: no endpoint is held back.
    pub endpoint_backoff: Duration,
    /// The longest an endpoint is held back (default 60 s): an endpoint that recovers is found
    /// within a minute, however long it failed.
    pub endpoint_backoff_max: Duration,
    /// Where the dispatcher may connect (default: globally routable addresses only, never
    /// loopback, private, link-local or any special-purpose range; [`crate::domain::outbound`]).
    /// The application sets it from the policy registration obeys
    /// ([`crate::flows::PaymentSettings::webhook_targets`]), so that the two never disagree.
    pub targets: TargetPolicy,
    /// Names resolved to these addresses instead of by the system resolver (default none), a
    /// pinning and testing aid: the answers are judged like any other, so a test can make a
    /// name resolve to loopback without /etc/hosts or DNS and see it refused. The URL's port,
    /// when it has one, replaces an entry's.
    pub hosts: Vec<(String, SocketAddr)>,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            schedule: SCHEDULE.to_vec(),
            timeout: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            batch: 100,
            concurrency: 8,
            in_flight_per_endpoint_max: 2,
            in_flight_per_tenant_max: 4,
            endpoint_backoff: Duration::from_secs(1),
            endpoint_backoff_max: Duration::from_secs(60),
            targets: TargetPolicy::default(),
            hosts: Vec::new(),
        }
    }
}

/// Endpoints held back at once at most (those with failures in a row are remembered): a bound on
/// the dispatcher's memory and on the list a read leaves out. Past it, the endpoints whose wait
/// ends soonest are forgotten first; a forgotten endpoint is attempted again and, failing,
/// held back again.
pub const HELD_ENDPOINTS_MAX: usize = 1_000;

/// Due deliveries read per endpoint, as a multiple of `in_flight_per_endpoint_max`: enough that
/// when an attempt ends the endpoint's next delivery starts without a read, few enough that one
/// endpoint's backlog takes a small share of a read.
const READ_PER_ENDPOINT_SLOT: usize = 2;

/// What the dispatcher did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Deliveries attempted.
    pub attempted: u32,
    /// Acknowledged with a 2xx.
    pub delivered: u32,
    /// Failed, to be attempted again.
    pub retried: u32,
    /// Failed for good (their endpoints disabled).
    pub exhausted: u32,
    /// Attempted, but the result could not be written (the delivery is due again when its
    /// claim runs out).
    pub unrecorded: u32,
}

/// What the attempt of one delivery comes to under `schedule`.
fn outcome_of(
    schedule: &[Duration],
    delivery: &Delivery,
    attempt: &Attempt,
    delivered: bool,
) -> AttemptOutcome {
    let step = usize::try_from(delivery.step.saturating_add(1)).unwrap_or(usize::MAX);
    if delivered {
        AttemptOutcome::Delivered
    } else if let Some(delay) = next_delay(schedule, step) {
        // Counted from the attempt's end: an endpoint that answers in 29 s still gets its
        // whole pause before the next one.
        AttemptOutcome::Retry {
            next_at_ms: attempt
                .at_ms
                .saturating_add(attempt.duration_ms.max(0))
                .saturating_add(ms(delay)),
        }
    } else {
        AttemptOutcome::Exhausted
    }
}

/// An attempt that `attempt` did not finish within the dispatcher's own deadline.
fn cut_off(delivery: &Delivery, at_ms: i64, started: Instant) -> Attempt {
    Attempt {
        attempt: delivery.attempts.saturating_add(1),
        at_ms,
        status_code: None,
        error: Some(TIMED_OUT.to_owned()),
        duration_ms: ms(started.elapsed()),
    }
}

/// One attempt, whole: the POST, cut off at `deadline`, and its record.
async fn attempt_and_record(
    store: Arc<dyn Webhooks>,
    at_ms: i64,
    client: reqwest::Client,
    schedule: Arc<[Duration]>,
    deadline: Duration,
    targets: TargetPolicy,
    due: DueDelivery,
) -> Finished {
    let started = Instant::now();
    let (attempt, delivered) =
        tokio::time::timeout(deadline, attempt(&client, &due, &targets, at_ms))
            .await
            .unwrap_or_else(|_| (cut_off(&due.delivery, at_ms, started), false));
    let delivery = &due.delivery;
    let outcome = outcome_of(&schedule, delivery, &attempt, delivered);
    let label = match outcome {
        AttemptOutcome::Delivered => "delivered",
        AttemptOutcome::Retry { .. } => "retried",
        AttemptOutcome::Exhausted => {
            tracing::error!(
                tenant = %delivery.tenant_id, endpoint_id = %delivery.endpoint_id,
                delivery_id = %delivery.delivery_id,
                "webhook delivery exhausted its schedule; the endpoint is disabled"
            );
            "exhausted"
        }
    };
    metrics::counter!(crate::metrics::WEBHOOK_ATTEMPTS, "outcome" => label).increment(1);
    tracing::info!(
        delivery_id = %delivery.delivery_id, webhook_id = %delivery.event_id,
        event_type = %delivery.event_type, attempt = attempt.attempt,
        status = ?attempt.status_code, error = ?attempt.error, outcome = label,
        "webhook attempt"
    );
    let recorded = store.finish(delivery, &attempt, outcome).await;
    Finished { outcome, recorded }
}

/// What an attempt came to.
#[derive(Debug)]
struct Finished {
    outcome: AttemptOutcome,
    /// Whether its result was written.
    recorded: Result<(), StoreError>,
}

/// The dispatcher's state: the attempts in flight, what was read and not yet started, the
/// counts and the backoffs of the fairness rule.
struct Dispatcher {
    store: Arc<dyn Webhooks>,
    /// The service's clock: claims, due times and each attempt's time are read from it.
    clock: Arc<dyn Clock>,
    client: reqwest::Client,
    settings: WebhookSettings,
    schedule: Arc<[Duration]>,
    caps: Caps,
    attempts: JoinSet<Finished>,
    /// The slot each attempt in flight holds, by task, so that even an attempt that panicked
    /// gives its slot back.
    slots: HashMap<Id, Slot>,
    in_flight: InFlight,
    backoffs: Backoffs,
    /// Read, not yet started, oldest due first (at most `batch`).
    waiting: VecDeque<DueDelivery>,
    /// When `waiting` was read.
    read_at: Option<Instant>,
    /// The last read was full: more may be due than it returned.
    read_was_full: bool,
    /// An attempt ended since the last read: its endpoint and tenant may take another.
    ended_since_read: bool,
    /// No read before this (after a failed read).
    read_not_before: Option<Instant>,
    report: DispatchReport,
}

impl Dispatcher {
    fn new(
        store: Arc<dyn Webhooks>,
        clock: Arc<dyn Clock>,
        client: reqwest::Client,
        settings: WebhookSettings,
    ) -> Self {
        Dispatcher {
            store,
            clock,
            client,
            schedule: settings.schedule.clone().into(),
            caps: Caps::of(&settings),
            backoffs: Backoffs::new(&settings),
            settings,
            attempts: JoinSet::new(),
            slots: HashMap::new(),
            in_flight: InFlight::default(),
            waiting: VecDeque::new(),
            read_at: None,
            read_was_full: false,
            ended_since_read: false,
            read_not_before: None,
            report: DispatchReport::default(),
        }
    }

    /// Reads the due deliveries that may start, in place of those waiting.
    async fn read(&mut self) -> Result<(), StoreError> {
        let now = Instant::now();
        let skip_endpoints = self.backoffs.held(now);
        let skip_tenants = self.in_flight.full_tenants(self.caps);
        let limit = self.settings.batch.max(1);
        let per_endpoint = self.caps.endpoint.saturating_mul(READ_PER_ENDPOINT_SLOT);
        let query = DueQuery {
            now_ms: self.clock.now_ms(),
            limit,
            per_endpoint: u32::try_from(per_endpoint).unwrap_or(u32::MAX),
            skip_endpoints: &skip_endpoints,
            skip_tenants: &skip_tenants,
        };
        let due = self.store.due(&query).await?;
        assert!(
            due.len() <= limit as usize,
            "a read returns at most its limit"
        );
        self.read_was_full = due.len() == limit as usize;
        self.waiting = due.into();
        self.read_at = Some(now);
        self.ended_since_read = false;
        Ok(())
    }

    /// Whether a delivery read may start now, by the fairness rule.
    fn may_start(&self, delivery: &Delivery, now: Instant) -> bool {
        !self.backoffs.holds(&delivery.endpoint_id, now)
            && self.in_flight.admits(delivery, self.caps)
    }

    /// Claims and starts the waiting deliveries the fairness rule admits, oldest due first;
    /// how many it started. Those of endpoints held back are let go (a read after the wait
    /// finds them), as are those another dispatcher took; the others keep waiting.
    async fn start_waiting(&mut self) -> Result<usize, StoreError> {
        let now = Instant::now();
        let mut started = 0;
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        while let Some(mut due) = self.waiting.pop_front() {
            if self.in_flight.total >= self.caps.total {
                kept.push_back(due);
                kept.append(&mut self.waiting);
                break;
            }
            if self.backoffs.holds(&due.delivery.endpoint_id, now) {
                continue;
            }
            if !self.in_flight.admits(&due.delivery, self.caps) {
                kept.push_back(due);
                continue;
            }
            // The claim outlasts the attempt (cut off at 1.5 × `timeout`) and its write, so
            // that no other dispatcher takes the delivery meanwhile.
            let until_ms = self
                .clock
                .now_ms()
                .saturating_add(ms(self.settings.timeout.saturating_mul(2)));
            if !self.store.claim(&due.delivery, until_ms).await? {
                continue;
            }
            // The claim is its mark: the attempt's result counts only while it is still there.
            due.delivery.next_attempt_at_ms = until_ms;
            self.start(due);
            started += 1;
        }
        self.waiting = kept;
        Ok(started)
    }

    fn start(&mut self, due: DueDelivery) {
        let slot = Slot::of(&due.delivery);
        let deadline = self.settings.timeout.saturating_mul(3) / 2;
        let handle = self.attempts.spawn(attempt_and_record(
            self.store.clone(),
            self.clock.now_ms(),
            self.client.clone(),
            self.schedule.clone(),
            deadline,
            self.settings.targets.clone(),
            due,
        ));
        self.in_flight.add(&slot);
        self.slots.insert(handle.id(), slot);
        self.report.attempted += 1;
    }

    /// An attempt ended: its slot given back, its outcome counted and fed to its endpoint's
    /// backoff.
    fn ended(&mut self, ended: Result<(Id, Finished), JoinError>) {
        let id = match &ended {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        let slot = self
            .slots
            .remove(&id)
            .expect("every attempt started holds a slot until it ends");
        self.in_flight.remove(&slot);
        self.ended_since_read = true;
        let finished = match ended {
            Ok((_, finished)) => finished,
            Err(error) => {
                // Its claim runs out and the delivery is due again: at least once still holds.
                tracing::error!(%error, endpoint_id = %slot.endpoint_id, "a webhook attempt ended without a result");
                self.report.unrecorded += 1;
                return;
            }
        };
        match finished.outcome {
            AttemptOutcome::Delivered => {
                self.report.delivered += 1;
                self.backoffs.answered(&slot.endpoint_id);
            }
            AttemptOutcome::Retry { .. } | AttemptOutcome::Exhausted => {
                if finished.outcome == AttemptOutcome::Exhausted {
                    self.report.exhausted += 1;
                } else {
                    self.report.retried += 1;
                }
                let wait = self.backoffs.failed(&slot.endpoint_id, Instant::now());
                tracing::info!(
                    endpoint_id = %slot.endpoint_id, tenant_id = %slot.tenant_id,
                    wait_ms = ms(wait), "webhook endpoint failed; its deliveries wait"
                );
            }
        }
        if let Err(error) = finished.recorded {
            tracing::warn!(%error, endpoint_id = %slot.endpoint_id, "a webhook attempt was made but not recorded");
            self.report.unrecorded += 1;
        }
    }

    /// When the next read is due: at once when nothing read can start and more may be due (the
    /// last read was full, or an attempt ended since), else when what was read grows stale;
    /// `None` while every slot is taken (an attempt's end comes first).
    fn read_due_at(&self, now: Instant) -> Option<Instant> {
        if self.in_flight.total >= self.caps.total {
            return None;
        }
        let startable = self
            .waiting
            .iter()
            .any(|due| self.may_start(&due.delivery, now));
        let at = match self.read_at {
            None => now,
            Some(_) if !startable && (self.read_was_full || self.ended_since_read) => now,
            Some(read_at) => read_at + self.settings.interval,
        };
        Some(
            self.read_not_before
                .map_or(at, |not_before| at.max(not_before)),
        )
    }

    /// Starts what may start, reading first when a read is due.
    async fn step(&mut self) -> Result<(), StoreError> {
        self.start_waiting().await?;
        let now = Instant::now();
        if self.read_due_at(now).is_some_and(|at| at <= now) {
            self.read().await?;
            if self.start_waiting().await? == 0 {
                // A full read of which nothing could start: the next read waits for an
                // attempt's end or the interval, not for nothing.
                self.read_was_full = false;
            }
        }
        Ok(())
    }

    /// Waits for every attempt in flight, each bounded by its deadline, and records it.
    async fn drain(&mut self) {
        while let Some(ended) = self.attempts.join_next_with_id().await {
            self.ended(ended);
        }
    }
}

/// Reads the due deliveries once, starts those the fairness rule admits and waits for their
/// attempts to end: a pass of the dispatcher, for tests and tools.
pub async fn dispatch_once(
    store: &Arc<dyn Webhooks>,
    clock: &Arc<dyn Clock>,
    client: &reqwest::Client,
    settings: &WebhookSettings,
) -> Result<DispatchReport, StoreError> {
    let mut dispatcher = Dispatcher::new(
        store.clone(),
        clock.clone(),
        client.clone(),
        settings.clone(),
    );
    dispatcher.read().await?;
    let started = dispatcher.start_waiting().await;
    dispatcher.drain().await;
    started?;
    Ok(dispatcher.report)
}

/// Dispatches until `stop` turns true, then records the attempts in flight; waits while
/// `guard` says this instance's clock is off.
pub async fn run(
    store: Arc<dyn Webhooks>,
    clock: Arc<dyn Clock>,
    guard: Arc<crate::flows::clock_guard::ClockGuard>,
    settings: WebhookSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let client = match client(&settings) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "no webhook dispatcher: its HTTP client cannot be built");
            return;
        }
    };
    let failure_pause = settings.interval.max(Duration::from_secs(1));
    let mut dispatcher = Dispatcher::new(store, clock, client, settings);
    while !*stop.borrow() {
        if guard.refuses() {
            // Signatures carry this clock's time, which merchants check: not while it is off.
            if super::pause_or_stop(failure_pause, &mut stop).await {
                break;
            }
            continue;
        }
        if let Err(error) = dispatcher.step().await {
            tracing::warn!(%error, "webhook dispatch failed");
            dispatcher.read_not_before = Some(Instant::now() + failure_pause);
        }
        let read_at = dispatcher.read_due_at(Instant::now());
        tokio::select! {
            Some(ended) = dispatcher.attempts.join_next_with_id() => dispatcher.ended(ended),
            () = tokio::time::sleep_until(read_at.unwrap_or_else(Instant::now).into()),
                if read_at.is_some() => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    dispatcher.drain().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::webhooks::DeliveryStatus;

    fn delivery(step: i64) -> Delivery {
        Delivery {
            delivery_id: "W1".to_owned(),
            tenant_id: "t".to_owned(),
            endpoint_id: "E1".to_owned(),
            event_id: "msg_1".to_owned(),
            event_type: "payment.succeeded".to_owned(),
            payload: "{}".to_owned(),
            status: DeliveryStatus::Pending,
            step,
            attempts: step,
            next_attempt_at_ms: 0,
            created_at_ms: 0,
        }
    }

    fn failed_attempt(at_ms: i64, duration_ms: i64) -> Attempt {
        Attempt {
            attempt: 1,
            at_ms,
            status_code: Some(503),
            error: Some("HTTP 503".to_owned()),
            duration_ms,
        }
    }

    #[test]
    fn the_next_attempt_counts_from_the_end_of_the_failed_one() {
        let schedule = [0, 5_000, 60_000].map(Duration::from_millis);
        // Started at 1 000, answered 503 after 29 s: the 5 s pause follows the answer.
        let outcome = outcome_of(
            &schedule,
            &delivery(0),
            &failed_attempt(1_000, 29_000),
            false,
        );
        assert_eq!(
            outcome,
            AttemptOutcome::Retry {
                next_at_ms: 1_000 + 29_000 + 5_000
            }
        );
        // The schedule's last attempt failed: exhausted; a 2xx is delivered whatever the step.
        let last = outcome_of(&schedule, &delivery(2), &failed_attempt(0, 10), false);
        assert_eq!(last, AttemptOutcome::Exhausted);
        let delivered = outcome_of(&schedule, &delivery(2), &failed_attempt(0, 10), true);
        assert_eq!(delivered, AttemptOutcome::Delivered);
    }
}

//! Merchant webhooks in storage: endpoints, one delivery per endpoint and event, and every
//! attempt with its answer.
//!
//! Invariants held here:
//! - an event's deliveries are written in the event's own transaction (`fan_out`, beside
//!   the outbox row), one per subscribed endpoint (a unique key on endpoint and event): an event
//!   exists if and only if its deliveries do, and no retry of that transaction makes two;
//! - a delivery is attempted by one dispatcher at a time: claiming it moves its due time
//!   forward by compare-and-set, so a second dispatcher's claim finds it moved and skips it; a
//!   dispatcher that dies mid-attempt leaves it due again when the claim runs out;
//! - its `webhook-id` is the event's id, the same on every attempt and every redelivery.

use async_trait::async_trait;
use mideng::StoreError;

use crate::domain::webhook::Message;

mod endpoint_sql;
mod sql;

pub(crate) use self::sql::fan_out;

/// An endpoint's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointStatus {
    /// Deliveries are attempted.
    Enabled,
    /// A delivery exhausted its schedule, or the tenant disabled it: nothing is attempted
    /// until the tenant enables it again (or redelivers one of its deliveries by hand). Its
    /// deliveries are kept, and new events still write theirs.
    Disabled,
}

impl EndpointStatus {
    /// `ENABLED` or `DISABLED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointStatus::Enabled => "ENABLED",
            EndpointStatus::Disabled => "DISABLED",
        }
    }

    /// The status named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ENABLED" => Some(EndpointStatus::Enabled),
            "DISABLED" => Some(EndpointStatus::Disabled),
            _ => None,
        }
    }
}

/// A tenant's endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Its id.
    pub endpoint_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Where messages are posted.
    pub url: String,
    /// Subscribed event types.
    pub events: Vec<String>,
    /// The signing secret (`whsec_…`).
    pub secret: String,
    /// The secret before the last rotation, and until when it signs too (Unix ms, exclusive):
    /// `None` once no overlap was asked for.
    pub previous_secret: Option<(String, i64)>,
    /// Status.
    pub status: EndpointStatus,
    /// When it was registered (Unix ms).
    pub created_at_ms: i64,
}

/// A delivery's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// An attempt got a 2xx.
    Delivered,
    /// Every attempt of the schedule failed.
    Failed,
}

impl DeliveryStatus {
    /// `PENDING`, `DELIVERED` or `FAILED`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "PENDING",
            DeliveryStatus::Delivered => "DELIVERED",
            DeliveryStatus::Failed => "FAILED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "PENDING" => Some(DeliveryStatus::Pending),
            "DELIVERED" => Some(DeliveryStatus::Delivered),
            "FAILED" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// One event for one endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its id.
    pub delivery_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The event's id: the message's `webhook-id`.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The message body, as sent on every attempt.
    pub payload: String,
    /// Status.
    pub status: DeliveryStatus,
    /// Position in the retry schedule (attempts since the last redelivery by hand).
    pub step: i64,
    /// Attempts so far.
    pub attempts: i64,
    /// When the next attempt is due (Unix ms).
    pub next_attempt_at_ms: i64,
    /// When it was created (Unix ms).
    pub created_at_ms: i64,
}

/// One attempt of a delivery and what the endpoint answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1, 2, …
    pub attempt: i64,
    /// When (Unix ms).
    pub at_ms: i64,
    /// The HTTP status, when an answer came.
    pub status_code: Option<i64>,
    /// Why no acceptable answer came (a timeout, a refused connection, a non-2xx).
    pub error: Option<String>,
    /// How long it took.
    pub duration_ms: i64,
}

/// A delivery due now, with where and how to send it.
#[derive(Clone, Debug)]
pub struct DueDelivery {
    /// The delivery.
    pub delivery: Delivery,
    /// The endpoint's URL.
    pub url: String,
    /// The endpoint's secret.
    pub secret: String,
    /// Its previous secret and until when that one signs too (Unix ms): see
    /// [`crate::domain::webhook::signing_secrets`].
    pub previous_secret: Option<(String, i64)>,
}

/// Which due deliveries to read: see [`Webhooks::due`].
#[derive(Clone, Copy, Debug)]
pub struct DueQuery<'a> {
    /// Due at this time (Unix ms).
    pub now_ms: i64,
    /// Rows at most.
    pub limit: u32,
    /// Rows per endpoint at most: the oldest due of each.
    pub per_endpoint: u32,
    /// Endpoints left out (the dispatcher holds them back).
    pub skip_endpoints: &'a [String],
    /// Tenants left out (at their cap of attempts in flight).
    pub skip_tenants: &'a [String],
}

impl DueQuery<'_> {
    /// Every due delivery at `now_ms`, at most `limit`, oldest due first, none left out.
    pub fn all(now_ms: i64, limit: u32) -> Self {
        DueQuery {
            now_ms,
            limit,
            per_endpoint: limit,
            skip_endpoints: &[],
            skip_tenants: &[],
        }
    }
}

/// What an attempt came to, for the delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx.
    Delivered,
    /// Failed; the next attempt is due at this time (Unix ms).
    Retry {
        /// Unix ms.
        next_at_ms: i64,
    },
    /// Failed, and it was the schedule's last attempt: the delivery fails and its endpoint is
    /// disabled.
    Exhausted,
}

/// What an attempt's outcome makes of its delivery, as the delivery is now (`current`), when
/// the attempt was made under the claim that set its next attempt to `claimed_until_ms`: the
/// new status, step and next attempt, or `None` when the attempt only joins the history.
///
/// A claim is a lease: a dispatcher whose attempt, or whose write of it, outlasted the claim may
/// finish after another dispatcher claimed the delivery again and settled it. Its failure must
/// not undo what came after it (a `DELIVERED` made `PENDING` again, a `FAILED` that disables
/// the endpoint, a redelivery by hand overtaken), so a failure counts only under the claim
/// that is still the delivery's. A 2xx is a fact whatever the claim: the receiver has the
/// message, so it settles any delivery not yet `DELIVERED`.
fn settled_by(
    current: &Delivery,
    claimed_until_ms: i64,
    outcome: AttemptOutcome,
    now_ms: i64,
) -> Option<(DeliveryStatus, i64, i64)> {
    let step = current.step.saturating_add(1);
    let still_ours =
        current.status == DeliveryStatus::Pending && current.next_attempt_at_ms == claimed_until_ms;
    match outcome {
        AttemptOutcome::Delivered => (current.status != DeliveryStatus::Delivered).then_some((
            DeliveryStatus::Delivered,
            step,
            now_ms,
        )),
        AttemptOutcome::Retry { next_at_ms } => {
            still_ours.then_some((DeliveryStatus::Pending, step, next_at_ms))
        }
        AttemptOutcome::Exhausted => still_ours.then_some((DeliveryStatus::Failed, step, now_ms)),
    }
}

/// Attempts per delivery at most, the schedule's and the redeliveries' by hand together: past
/// it a redelivery is refused ([`Redelivery::AttemptsExhausted`]) and the attempt that reaches
/// it ends the schedule it is in. Without the bound a tenant could keep the dispatcher posting
/// one delivery for ever, and its history (listed up to this many attempts) would stop showing
/// what was sent.
pub const ATTEMPTS_PER_DELIVERY_MAX: i64 = 100;

/// `outcome` of the delivery's attempt number `attempt`, within [`ATTEMPTS_PER_DELIVERY_MAX`]:
/// a failure that would be retried past the bound ends the delivery as the schedule's last
/// failure does.
fn within_the_bound(outcome: AttemptOutcome, attempt: i64) -> AttemptOutcome {
    match outcome {
        AttemptOutcome::Retry { .. } if attempt >= ATTEMPTS_PER_DELIVERY_MAX => {
            AttemptOutcome::Exhausted
        }
        AttemptOutcome::Delivered | AttemptOutcome::Retry { .. } | AttemptOutcome::Exhausted => {
            outcome
        }
    }
}

/// A new endpoint.
#[derive(Clone, Copy, Debug)]
pub struct NewEndpoint<'a> {
    /// Tenant.
    pub tenant_id: &'a str,
    /// Its URL, checked.
    pub url: &'a str,
    /// Event types, checked.
    pub events: &'a [String],
    /// Its secret.
    pub secret: &'a str,
    /// Its id, when new.
    pub endpoint_id: &'a str,
}

/// What registering an endpoint did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// A new endpoint.
    New(Endpoint),
    /// The tenant has an endpoint with this URL: that one, unchanged.
    Existing(Endpoint),
    /// The tenant has [`crate::domain::webhook::ENDPOINTS_PER_TENANT_MAX`] endpoints.
    TooMany,
}

/// A change of an endpoint: each field given replaces the endpoint's, checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct EndpointChange<'a> {
    /// A new URL.
    pub url: Option<&'a str>,
    /// New event types.
    pub events: Option<&'a [String]>,
    /// A new status.
    pub status: Option<EndpointStatus>,
}

/// What a change of an endpoint came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// The endpoint as it is now.
    Done(Endpoint),
    /// The tenant has no such endpoint.
    NoEndpoint,
    /// Another of the tenant's endpoints has this URL; nothing changed.
    UrlTaken,
}

/// Webhook endpoints and deliveries.
#[async_trait]
pub trait Webhooks: Send + Sync {
    /// Registers an endpoint, or finds the tenant's endpoint with this URL.
    async fn register(&self, new: &NewEndpoint<'_>) -> Result<Registered, StoreError>;
    /// The tenant's endpoints (at most 100).
    async fn endpoints(&self, tenant_id: &str) -> Result<Vec<Endpoint>, StoreError>;
    /// One of the tenant's endpoints.
    async fn endpoint(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
    ) -> Result<Option<Endpoint>, StoreError>;
    /// Changes one of the tenant's endpoints. Enabling it makes its waiting deliveries go out,
    /// each when due.
    async fn change(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        change: &EndpointChange<'_>,
    ) -> Result<Changed, StoreError>;
    /// Gives one of the tenant's endpoints the secret `secret`; its current one becomes the
    /// previous one, signing too until `previous_until_ms` (none when that is not later than
    /// now). A previous secret of an earlier rotation is forgotten.
    async fn rotate(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        secret: &str,
        previous_until_ms: i64,
    ) -> Result<Option<Endpoint>, StoreError>;
    /// Deletes one of the tenant's endpoints with its deliveries and their attempts, in one
    /// transaction; answers whether it had one. An attempt in flight meanwhile is dropped
    /// when it ends.
    async fn delete(&self, tenant_id: &str, endpoint_id: &str) -> Result<bool, StoreError>;
    /// Deliveries due at `query.now_ms` on enabled endpoints, oldest due first, at most
    /// `query.limit`: at most `query.per_endpoint` of each endpoint (its oldest due), none of
    /// the endpoints and tenants it leaves out.
    ///
    /// Both bounds are there so that a read is never filled by deliveries the dispatcher will
    /// not start. The oldest due deliveries are those of the endpoints that do not answer: a
    /// plain "oldest first, at most `limit`" gave a stalled endpoint's backlog the whole read,
    /// and every other tenant waited behind it. With the per-endpoint bound an endpoint takes
    /// a few rows of a read whatever its backlog; leaving out the endpoints held back (failing,
    /// so waiting for their backoff) and the tenants at their cap keeps even many of those from
    /// filling it, since their number has no bound of its own. An endpoint at its own cap is not
    /// left out: it holds few rows, and they start without a second read when its attempt ends.
    /// The read costs a look at every due delivery not left out (the window numbers them all).
    async fn due(&self, query: &DueQuery<'_>) -> Result<Vec<DueDelivery>, StoreError>;
    /// Claims a due delivery until `until_ms`, if no one moved it since it was read.
    async fn claim(&self, delivery: &Delivery, until_ms: i64) -> Result<bool, StoreError>;
    /// Records an attempt and what it came to: `delivery` as it was claimed (its
    /// `next_attempt_at_ms` the claim's `until_ms`). A failure under a claim that lapsed and
    /// was taken again is recorded without changing the delivery.
    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &Attempt,
        outcome: AttemptOutcome,
    ) -> Result<(), StoreError>;
    /// Deletes up to `limit` deliveries whose last change is at or before
    /// `untouched_since_ms`, with their attempts (the retention purge); answers how many.
    async fn purge_deliveries(
        &self,
        untouched_since_ms: i64,
        limit: u32,
    ) -> Result<u64, StoreError>;
    /// The tenant's deliveries (of one event, or of all), each with its attempts (at most
    /// [`ATTEMPTS_PER_DELIVERY_MAX`]), in the order they were written, after the delivery
    /// `after` (from the first when `None`), at most `limit`; `None` when `after` is no
    /// delivery of the tenant's.
    async fn deliveries(
        &self,
        tenant_id: &str,
        event_id: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<(Delivery, Vec<Attempt>)>>, StoreError>;
    /// The attempts of one of the tenant's deliveries numbered after `after` (0: from the
    /// first), oldest first, at most `limit`; `None` when the delivery is not the tenant's.
    async fn attempts(
        &self,
        tenant_id: &str,
        delivery_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Option<Vec<Attempt>>, StoreError>;
    /// Makes a delivery due now with a fresh schedule (same `webhook-id`), and enables its
    /// endpoint, unless it has [`ATTEMPTS_PER_DELIVERY_MAX`] attempts already.
    async fn redeliver(&self, tenant_id: &str, delivery_id: &str)
    -> Result<Redelivery, StoreError>;
}

/// What a redelivery by hand came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// Due now, as it is now, with the attempts it had so far.
    Due(Box<Delivery>, Vec<Attempt>),
    /// The tenant has no such delivery.
    NoDelivery,
    /// It has as many attempts as a delivery may have; nothing changed, and it stays listed
    /// with its history.
    AttemptsExhausted {
        /// Its attempts.
        attempts: i64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(status: DeliveryStatus, step: i64, next_attempt_at_ms: i64) -> Delivery {
        Delivery {
            delivery_id: "W1".to_owned(),
            tenant_id: "t".to_owned(),
            endpoint_id: "E1".to_owned(),
            event_id: "evt_1".to_owned(),
            event_type: "payment.succeeded".to_owned(),
            payload: "{}".to_owned(),
            status,
            step,
            attempts: step,
            next_attempt_at_ms,
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_lapsed_claims_failure_does_not_undo_what_came_after_it() {
        use AttemptOutcome::{Delivered, Exhausted, Retry};
        use DeliveryStatus::{Failed, Pending};
        let retry = Retry { next_at_ms: 900 };
        // Still under its claim: every outcome counts.
        let ours = delivery(Pending, 3, 500);
        assert_eq!(settled_by(&ours, 500, retry, 700), Some((Pending, 4, 900)));
        assert_eq!(
            settled_by(&ours, 500, Exhausted, 700),
            Some((Failed, 4, 700))
        );
        assert_eq!(
            settled_by(&ours, 500, Delivered, 700),
            Some((DeliveryStatus::Delivered, 4, 700))
        );
        // Claimed again by another dispatcher (a later mark): only a 2xx counts.
        let taken = delivery(Pending, 3, 650);
        assert_eq!(settled_by(&taken, 500, retry, 700), None);
        assert_eq!(settled_by(&taken, 500, Exhausted, 700), None);
        assert!(settled_by(&taken, 500, Delivered, 700).is_some());
        // Delivered meanwhile (seen in a storm: a 204 made PENDING again, then FAILED, by
        // attempts that outlasted their claims): it stays delivered.
        for outcome in [retry, Exhausted, Delivered] {
            let delivered = delivery(DeliveryStatus::Delivered, 4, 500);
            assert_eq!(
                settled_by(&delivered, 500, outcome, 700),
                None,
                "{outcome:?}"
            );
        }
        // Failed meanwhile: a failure leaves it failed; a 2xx proves it arrived.
        let failed = delivery(Failed, 8, 500);
        assert_eq!(settled_by(&failed, 500, retry, 700), None);
        assert_eq!(settled_by(&failed, 500, Exhausted, 700), None);
        assert_eq!(
            settled_by(&failed, 500, Delivered, 700),
            Some((DeliveryStatus::Delivered, 9, 700))
        );
        // Redelivered by hand after the claim (step 0, due at once): the old failure is history.
        let redelivered = delivery(Pending, 0, 680);
        assert_eq!(settled_by(&redelivered, 500, retry, 700), None);
    }

    #[test]
    fn the_attempt_that_reaches_the_bound_ends_its_schedule() {
        use AttemptOutcome::{Delivered, Exhausted, Retry};
        let retry = Retry { next_at_ms: 900 };
        let last = ATTEMPTS_PER_DELIVERY_MAX;
        assert_eq!(within_the_bound(retry, last - 1), retry);
        assert_eq!(within_the_bound(retry, last), Exhausted);
        assert_eq!(within_the_bound(retry, last + 1), Exhausted);
        assert_eq!(within_the_bound(Delivered, last), Delivered);
        assert_eq!(within_the_bound(Exhausted, 1), Exhausted);
    }
}

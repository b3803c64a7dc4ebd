//! The service's metric families: their names, and [`describe`], which tells the process's
//! recorder (with the toolkit's, [`mideng::metrics::describe`]) what each one counts and in
//! which unit, so that `/metrics` has a `# HELP` for every family.

use metrics::Unit;

/// Every request per route, method and status class ([`crate::api`]'s middleware).
pub const HTTP_REQUEST_DURATION: &str = "mideng_http_request_duration_seconds";
/// Each layer's decisions on a money path, per `layer`, `operation` and `outcome`.
pub const SERVICE_DECISIONS: &str = "mideng_service_decisions_total";
/// The last comparison of this host's clock with the database's.
pub const CLOCK_SKEW: &str = "mideng_clock_skew_seconds";
/// One-time tokens refused because a cap was reached, per `cap`.
pub const TOKENS_REFUSED: &str = "mideng_tokens_refused_total";
/// Checkout pages' requests refused over their order's rate or attempt window, per `kind`
/// (`token`, `payment`, `read`, `attempt`, `demo`).
pub const PAGE_REQUESTS_LIMITED: &str = "mideng_page_requests_limited_total";
/// Events the consumer parked after their last failure, per `consumer`.
pub const EVENTS_PARKED: &str = "mideng_events_parked_total";
/// Rows purged past their retention, per `kind`.
pub const PURGED: &str = "mideng_purged_total";
/// Outbox messages the relay published, per `publisher`.
pub const OUTBOX_PUBLISHED: &str = "mideng_outbox_published_total";
/// Outbox messages the relay put off after a failed publication, per `publisher`.
pub const OUTBOX_DEFERRED: &str = "mideng_outbox_deferred_total";
/// Outbox messages not yet published, at the relay's last look.
pub const OUTBOX_UNSENT: &str = "mideng_outbox_unsent_messages";
/// Webhook delivery attempts, per `outcome`.
pub const WEBHOOK_ATTEMPTS: &str = "mideng_webhook_attempts_total";
/// Gauge: reconciliation cases from the channels' daily bills still open, over every tenant
/// (set by the reconciler every round).
pub const RECONCILIATION_CASES_OPEN: &str = "mideng_reconciliation_cases_open";
/// Refund cases whose refund has not succeeded (money owed back), every tenant's, as the
/// reconciler last counted them.
pub const REFUND_CASES_UNSETTLED: &str = "mideng_refund_cases_unsettled";
/// Deducts per group commit (`group-commit` wallet strategy).
pub const GROUP_COMMIT_SIZE: &str = "mideng_group_commit_deducts";

/// Describes every metric family of the service and of the toolkit to the installed recorder.
pub fn describe() {
    mideng::metrics::describe();
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "Time from receiving a request to its answer's head, by route template, method and \
         status class (abandoned: the client hung up first)"
    );
    metrics::describe_counter!(
        SERVICE_DECISIONS,
        Unit::Count,
        "What each idempotency layer decided on a money path (first, duplicate, refused, ...), \
         by layer, operation and outcome"
    );
    metrics::describe_histogram!(
        GROUP_COMMIT_SIZE,
        Unit::Count,
        "First-time deducts sent to the database together, per group (the group-commit wallet \
         strategy): 1 when the service is idle, more as requests queue behind groups in flight"
    );
    metrics::describe_gauge!(
        CLOCK_SKEW,
        Unit::Seconds,
        "This host's clock minus the database's, at the clock guard's last comparison"
    );
    metrics::describe_counter!(
        TOKENS_REFUSED,
        Unit::Count,
        "One-time tokens refused because the tenant's or the service's cap was reached"
    );
    metrics::describe_counter!(
        PAGE_REQUESTS_LIMITED,
        Unit::Count,
        "Checkout pages' requests refused over their order's rate or attempt window, by kind"
    );
    metrics::describe_counter!(
        EVENTS_PARKED,
        Unit::Count,
        "Events the consumer parked after their last failed attempt, by consumer"
    );
    metrics::describe_counter!(
        PURGED,
        Unit::Count,
        "Rows purged past their retention, by kind"
    );
    metrics::describe_counter!(
        OUTBOX_PUBLISHED,
        Unit::Count,
        "Outbox messages the relay published to the broker, by publisher"
    );
    metrics::describe_counter!(
        OUTBOX_DEFERRED,
        Unit::Count,
        "Outbox messages whose publication failed and was put off, by publisher"
    );
    metrics::describe_gauge!(
        OUTBOX_UNSENT,
        Unit::Count,
        "Outbox messages not yet published, at the relay's last look"
    );
    metrics::describe_counter!(
        WEBHOOK_ATTEMPTS,
        Unit::Count,
        "Webhook delivery attempts, by outcome"
    );
    metrics::describe_gauge!(
        RECONCILIATION_CASES_OPEN,
        Unit::Count,
        "Reconciliation cases from the channels' daily bills still open, over every tenant"
    );
    metrics::describe_gauge!(
        REFUND_CASES_UNSETTLED,
        Unit::Count,
        "Refund cases whose refund has not succeeded (money owed back), over every tenant"
    );
}

/// Writes a zero for the series the shipped alerts count increases of, before anything
/// happens: Prometheus' `increase()` sees nothing in a series that first appears at 1, so a
/// counter born with its first event would hide that event from its alert (the first parked
/// event, the first endpoint disabled, the first lost COMMIT). `publisher` is the outbox's
/// broker (`queue`, `rabbitmq`, `nats`), `backend` the database's dialect.
pub fn initialize(publisher: &'static str, backend: &'static str) {
    for outcome in ["delivered", "retried", "exhausted"] {
        metrics::counter!(WEBHOOK_ATTEMPTS, "outcome" => outcome).absolute(0);
    }
    for consumer in [
        crate::domain::events::GRANT_KIND,
        crate::domain::events::REVOKE_KIND,
    ] {
        metrics::counter!(EVENTS_PARKED, "consumer" => consumer).absolute(0);
    }
    metrics::counter!(mideng::metrics::OUTBOX_PARKED, "publisher" => publisher).absolute(0);
    metrics::counter!(mideng::metrics::COMMIT_OUTCOME_UNKNOWN, "backend" => backend).absolute(0);
}

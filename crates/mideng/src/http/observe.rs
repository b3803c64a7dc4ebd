//! Every idempotency decision, logged, counted and timed.
//!
//! Each decision is a `tracing` event on target `mideng::idempotency` with the tenant, the
//! operation, the redacted key and the decision, an increment of the counter
//! `mideng_idempotency_decisions_total{operation, decision}` and an observation of the histogram
//! `mideng_idempotency_request_duration_seconds{operation, decision}`, through the `metrics`
//! facade (any recorder: Prometheus, StatsD, …). Keys and tokens never appear: only their
//! redacted forms.
//!
//! The histogram measures from the layer receiving the request to the decision. For the
//! decisions that end the request (`replay`, `in_flight`, `mismatch`, `key_*`, `token_duplicate`,
//! `token_unknown`, `token_unavailable`, and `stored`, `not_final`, `abandoned`, `lease_lost`,
//! `store_unavailable` after the handler) that is the time to its answer; for those that let
//! the handler run (`proceed`, `proceed_takeover`, `no_key`, `token_consumed`,
//! `token_same_key`, `token_degraded`) it is what the layer cost before the handler started (except on routes
//! whose handler begins the record itself, where `proceed` is known, and timed, only after the
//! handler's commit). Labels are the route's operation and the decision: both bounded by the
//! application's routes.

use std::time::Instant;

/// What the layer decided, as logged and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// First arrival: the handler runs.
    Proceed,
    /// An expired or abandoned lease was taken over: the handler runs.
    ProceedTakeover,
    /// The stored response was sent again.
    Replay,
    /// Another request holds the key: 409.
    InFlight,
    /// Same key, different request: 422.
    Mismatch,
    /// Required key absent: 400.
    KeyMissing,
    /// Key malformed: 400.
    KeyMalformed,
    /// A body whose fields the route reads names a member twice: 400.
    BodyAmbiguous,
    /// Optional key absent: passed through without a record.
    NoKey,
    /// The one-time token was consumed: the handler may run.
    TokenConsumed,
    /// The token was consumed before by a request with the same key (the same submission,
    /// retried): the handler may run.
    TokenSameKey,
    /// The token was consumed before, without a key or under another one: 409.
    TokenDuplicate,
    /// The token is unknown or expired: 400.
    TokenUnknown,
    /// The token store failed and the route degrades: the handler runs unguarded by a token.
    TokenDegraded,
    /// The token store failed and the route fails closed: 503.
    TokenUnavailable,
    /// The handler's response was stored for replay.
    Stored,
    /// The handler failed (5xx, timeout, panic): the key was freed.
    Abandoned,
    /// The handler's answer is not the outcome yet (marked not final, or 408, 425, 429): sent,
    /// not stored, and the key was freed for the retry.
    NotFinal,
    /// The handler finished after its lease was taken over; its response was not stored.
    LeaseLost,
    /// The idempotency store failed: 503.
    StoreUnavailable,
}

impl Outcome {
    /// The label used in logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Proceed => "proceed",
            Outcome::ProceedTakeover => "proceed_takeover",
            Outcome::Replay => "replay",
            Outcome::InFlight => "in_flight",
            Outcome::Mismatch => "mismatch",
            Outcome::KeyMissing => "key_missing",
            Outcome::KeyMalformed => "key_malformed",
            Outcome::BodyAmbiguous => "body_ambiguous",
            Outcome::NoKey => "no_key",
            Outcome::TokenConsumed => "token_consumed",
            Outcome::TokenSameKey => "token_same_key",
            Outcome::TokenDuplicate => "token_duplicate",
            Outcome::TokenUnknown => "token_unknown",
            Outcome::TokenDegraded => "token_degraded",
            Outcome::TokenUnavailable => "token_unavailable",
            Outcome::Stored => "stored",
            Outcome::Abandoned => "abandoned",
            Outcome::NotFinal => "not_final",
            Outcome::LeaseLost => "lease_lost",
            Outcome::StoreUnavailable => "store_unavailable",
        }
    }

    /// Outcomes that mean something went wrong on the server side.
    fn is_warning(self) -> bool {
        matches!(
            self,
            Outcome::TokenDegraded
                | Outcome::TokenUnavailable
                | Outcome::LeaseLost
                | Outcome::StoreUnavailable
                | Outcome::Abandoned
        )
    }
}

pub use crate::metrics::{DECISIONS_COUNTER, REQUEST_DURATION_HISTOGRAM};

/// Logs, counts and times one decision, taken for a request the layer received at `received`.
/// `key` is already redacted (or empty when there is none).
pub(crate) fn record(
    tenant: &str,
    operation: &str,
    redacted_key: &str,
    outcome: Outcome,
    received: Instant,
) {
    if outcome.is_warning() {
        tracing::warn!(
            target: "mideng::idempotency",
            tenant, operation, key = redacted_key, decision = outcome.label(),
            "idempotency decision"
        );
    } else {
        tracing::info!(
            target: "mideng::idempotency",
            tenant, operation, key = redacted_key, decision = outcome.label(),
            "idempotency decision"
        );
    }
    metrics::counter!(
        DECISIONS_COUNTER,
        "operation" => operation.to_owned(),
        "decision" => outcome.label()
    )
    .increment(1);
    metrics::histogram!(
        REQUEST_DURATION_HISTOGRAM,
        "operation" => operation.to_owned(),
        "decision" => outcome.label()
    )
    .record(received.elapsed());
}

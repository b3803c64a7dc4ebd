//! The HTTP layer: IETF `Idempotency-Key` semantics (and one-time `Idempotency-Token`s) for
//! any axum route, on any record store.
//!
//! ```text
//! request ─► tenant ─► key ─► body (bounded) ─► begin(tenant + operation, key, fingerprint)
//!              │        │                          ├─ Replay    ─► stored answer, Idempotent-Replayed: true
//!             401      400                         ├─ InFlight  ─► 409 + Retry-After (or wait, then replay)
//!                                                  ├─ Mismatch  ─► 422
//!                                                  └─ Proceed   ─► token ─► handler ─► store (final) / free (not final, 5xx, panic, timeout)
//! ```
//!
//! - [`RouteConfig`] — per-route settings, validated when the router is built.
//! - [`IdempotencyLayer`] — the tower layer; add it with `route_layer` so that the matched
//!   route is part of the fingerprint.
//! - [`IdempotencyContext`] — an extractor telling the handler its fence and whether it took
//!   over an earlier attempt.
//! - [`IdempotencyDecision`] — for routes built with `handler_decides()`: the handler gets the
//!   decision itself and completes the record in its own transaction.
//! - [`IdempotencyClaim`] — for routes built with `handler_begins()`: the handler begins the
//!   record in the transaction of its effect, so that a first-time request commits once.
//! - [`not_final`] — a handler marks an answer that is not the outcome yet (a 202 "come back
//!   later"): sent, not stored, the key freed for the retry.
//! - [`read_idempotency_key`] — the key headers, read once: a repeated header, both spellings
//!   or a broken structured string is refused, never resolved by picking one.
//! - [`repeats_a_member`] — whether a JSON body names a member twice in one object: refused
//!   (`body-ambiguous`) on routes that read the body's fields.
//! - [`RequestBodyDeadlineLayer`] — a deadline for the whole request body (408 when it passes).
//! - [`request_id`] — every answer names its request (`Request-Id`); a replay also names the
//!   request that had the effect (`Original-Request-Id`).
//! - [`Problem`] — every refusal as `application/problem+json` with a stable `code`.
//! - [`observe`] — every decision is a tracing event, a metrics counter and a latency
//!   histogram.

mod answer;
mod config;
mod deadline;
mod fingerprint;
mod headers;
pub mod observe;
mod problem;
mod request_id;
mod service;

pub use answer::{Finality, IDEMPOTENT_REPLAYED, not_final};
pub use config::{
    BODY_FIELDS_MAX, FUNDS_RETENTION, FingerprintParts, KeyRequirement, ResolveTenant, RouteConfig,
    RouteConfigBuilder, Tenant, TenantSource, TokenGuard, TokenUnavailable,
};
pub use deadline::{
    BodyDeadlineElapsed, RequestBodyDeadline, RequestBodyDeadlineLayer, is_body_deadline,
};
pub use fingerprint::repeats_a_member;
pub use headers::{
    HeaderError, IDEMPOTENCY_KEY, IDEMPOTENCY_TOKEN, IDEMPOTENT_TOKEN, X_IDEMPOTENT_KEY,
    parse_key_value, read_idempotency_key, read_idempotency_token,
};
pub use problem::Problem;
pub use request_id::{ORIGINAL_REQUEST_ID, REQUEST_ID, RequestId, request_id};
pub use service::{
    IdempotencyClaim, IdempotencyContext, IdempotencyDecision, IdempotencyLayer, IdempotencyService,
};

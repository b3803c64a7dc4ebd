//! The tower layer and service: the IETF `Idempotency-Key` semantics around any handler.
//!
//! For each request: resolve the tenant → read the key (and the body, bounded) → `begin` on
//! tenant + operation + key with the request's fingerprint →
//! - `Replay`: the stored status, headers and body, byte for byte, plus
//!   `Idempotent-Replayed: true`;
//! - `InFlight`: 409 with `Retry-After` (or, if the route allows, wait briefly and replay);
//! - `Mismatch`: 422;
//! - `Proceed`: consume the one-time token if the route has a guard, run the handler under the
//!   route's timeout, then store its answer if it is final, or free the key after an answer
//!   that is not (see [`super::answer`]), a 5xx, a timeout or a panic.
//!
//! The key is read before the token on purpose: a client that retries a submission after a
//! timeout, with the same key and the same (now consumed) token, gets the stored answer
//! instead of "duplicate submission". And the token is bound to the key that consumed it: when
//! the first attempt left no answer (a 5xx, a timeout, a lost lease, an answer not final), the
//! retry with the same key and token runs again instead of being refused as a duplicate.
//!
//! A handler that outlives its lease (so that another request took the key over) cannot
//! overwrite the new owner's record: `complete` checks the fence and the owner. Its response is
//! still sent to its own client, and the event is logged and counted as `lease_lost`. A request
//! whose future is dropped mid-handler (client gone, process killed) leaves its lease to
//! expire; the next arrival then takes the key over.

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Request, Response};
use futures_util::FutureExt;
use tracing::Instrument;

use super::answer::{finish, replay, replay_free};
use super::config::{KeyRequirement, RouteConfig, TokenUnavailable};
use super::deadline::is_body_deadline;
use super::fingerprint::{fingerprint_of, key_in_body, repeats_a_member};
use super::headers::{read_idempotency_key, read_idempotency_token};
use super::observe::{Outcome, record};
use super::problem::Problem;
use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Scope, redact};
use crate::record::{Decision, Lease, RecordPolicy, StoredResponse};
use crate::token::Consumption;

/// Pause between polls while a duplicate waits for the first request.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(25);

/// What a handler under the layer may learn about its own execution, as an extractor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyContext {
    /// Tenant + operation.
    pub scope: Scope,
    /// The request's key, if it had one.
    pub key: Option<IdempotencyKey>,
    /// The lease's fence: pass it to the database with the effect so that a stale execution
    /// can be refused there too.
    pub fence: Option<u64>,
    /// True when this execution took over an expired or abandoned earlier attempt: the handler
    /// should look for effects of that attempt before repeating them.
    pub taken_over: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyContext {
    type Rejection = Response<Body>;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<IdempotencyContext>()
            .cloned()
            .ok_or_else(|| {
                tracing::error!(
                    "IdempotencyContext extracted on a route without the idempotency layer"
                );
                Problem::Internal.into_response()
            })
    }
}

/// The decision on a request, for routes configured with
/// [`super::RouteConfigBuilder::handler_decides`]: the handler acts on it itself.
#[derive(Clone)]
pub struct IdempotencyDecision {
    /// Tenant + operation.
    pub scope: Scope,
    /// The key.
    pub key: IdempotencyKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// What `begin` decided. On `Proceed`, the handler must `complete` (or `abandon`) the lease.
    pub decision: Decision,
    records: Arc<dyn crate::record::RecordStore>,
    request_id: Option<super::RequestId>,
}

impl std::fmt::Debug for IdempotencyDecision {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("IdempotencyDecision")
            .field("scope", &self.scope)
            .field("key", &self.key)
            .field("decision", &self.decision.label())
            .finish_non_exhaustive()
    }
}

impl IdempotencyDecision {
    /// The layer's usual answer for every decision but `Proceed`: the replay (with
    /// `Idempotent-Replayed: true`), 409 with `Retry-After`, or 422. `None` on `Proceed`.
    pub fn standard_response(&self) -> Option<Response<Body>> {
        match &self.decision {
            Decision::Proceed(_) => None,
            Decision::Replay(stored) => Some(replay(stored.clone())),
            Decision::InFlight { retry_after } => Some(
                Problem::InProgress {
                    retry_after: *retry_after,
                }
                .into_response(),
            ),
            Decision::Mismatch => Some(Problem::KeyReused.into_response()),
        }
    }

    /// The record store the route uses, for `complete` and `abandon`.
    pub fn records(&self) -> &Arc<dyn crate::record::RecordStore> {
        &self.records
    }

    /// `stored` with this request's id as `Original-Request-Id`, for `complete`: every replay
    /// then names the request that had the effect ([`super::request_id`]).
    pub fn stamp(&self, stored: StoredResponse) -> StoredResponse {
        stamp(self.request_id.as_ref(), stored)
    }
}

/// `stored` with `Original-Request-Id: id` (when the request has an id).
fn stamp(id: Option<&super::RequestId>, mut stored: StoredResponse) -> StoredResponse {
    if let Some(id) = id {
        let header_name = super::ORIGINAL_REQUEST_ID;
        let name = header_name.as_str();
        stored
            .headers
            .retain(|(header, _)| !header.eq_ignore_ascii_case(name));
        stored
            .headers
            .push((name.to_owned(), id.as_str().to_owned()));
    }
    stored
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyDecision {
    type Rejection = Response<Body>;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<IdempotencyDecision>()
            .cloned()
            .ok_or_else(|| {
                tracing::error!(
                    "IdempotencyDecision extracted on a route without handler_decides()"
                );
                Problem::Internal.into_response()
            })
    }
}

/// The layer: wrap a route with it through `route_layer` or `MethodRouter::layer`, so that the
/// matched route is known when the fingerprint is taken.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer {
    config: Arc<RouteConfig>,
}

impl IdempotencyLayer {
    /// The layer for one route.
    pub fn new(config: RouteConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            config: self.config.clone(),
            inner,
        }
    }
}

/// The service the layer produces.
#[derive(Clone, Debug)]
pub struct IdempotencyService<S> {
    config: Arc<RouteConfig>,
    inner: S,
}

impl<S> tower::Service<Request<Body>> for IdempotencyService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The clone that was driven to readiness serves this request; a fresh clone stays
        // behind for the next one (the usual tower pattern).
        // The one clock reading per request: every decision is timed from here.
        let received = Instant::now();
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        // The request runs in a task of its own, so that a client that disconnects (hyper then
        // drops this future) does not cut the handler off between its effect and the stored
        // answer: the work finishes, the record completes, and the client's retry replays
        // instead of waiting out the lease.
        let work = tokio::spawn(
            handle(config, inner, request, received).instrument(tracing::Span::current()),
        );
        Box::pin(async move {
            Ok(work.await.unwrap_or_else(|error| {
                // Cancelled: the runtime is shutting down under the request (the task's own
                // panics are caught inside it), which is the service stopping, not failing.
                if error.is_cancelled() {
                    tracing::warn!("idempotent request abandoned: the service is stopping");
                    Problem::Stopping.into_response()
                } else {
                    tracing::error!(%error, "idempotent request task failed");
                    Problem::Internal.into_response()
                }
            }))
        })
    }
}

/// Whether the request announces a body longer than `limit`: refused before any of it is
/// read, so that a client cannot hold the connection open sending what will be refused anyway.
/// A missing or unreadable `Content-Length` (chunked bodies) is left to the bounded read.
fn announces_more_than(parts: &Parts, limit: usize) -> bool {
    parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse::<u64>().ok())
        .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
}

/// Whether reading a body failed because it exceeded the limit (anywhere in the error chain).
fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if current.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = current.source();
    }
    false
}

fn store_problem(error: &StoreError) -> Problem {
    // A commit without an answer: whatever it did, the retry under the same key finds it.
    if error.is_transient() || matches!(error, StoreError::OutcomeUnknown(_)) {
        Problem::StoreUnavailable
    } else {
        tracing::error!(target: "mideng::idempotency", %error, "idempotency store failure");
        Problem::Internal
    }
}

/// Everything known about the request while it is handled, for logging.
pub(super) struct DecisionLog<'a> {
    config: &'a RouteConfig,
    tenant: String,
    redacted_key: String,
    /// When the layer received the request.
    received: Instant,
    /// The request's id ([`super::request_id`]), stored with its answer.
    pub(super) request_id: Option<super::RequestId>,
}

impl DecisionLog<'_> {
    pub(super) fn record(&self, outcome: Outcome) {
        record(
            &self.tenant,
            &self.config.operation,
            &self.redacted_key,
            outcome,
            self.received,
        );
    }

    fn refuse(&self, outcome: Outcome, problem: Problem) -> Response<Body> {
        self.record(outcome);
        problem.into_response()
    }
}

async fn handle<S>(
    config: Arc<RouteConfig>,
    inner: S,
    request: Request<Body>,
    received: Instant,
) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let (mut parts, body) = request.into_parts();
    let Some(tenant) = config.tenant.resolve(&parts) else {
        return Problem::TenantMissing.into_response();
    };
    let Ok(scope) = Scope::new(&tenant, &config.operation) else {
        return Problem::TenantInvalid.into_response();
    };
    let mut log = DecisionLog {
        config: &config,
        tenant,
        redacted_key: String::new(),
        received,
        request_id: parts.extensions.get::<super::RequestId>().cloned(),
    };
    let key = match read_idempotency_key(&parts.headers) {
        Ok(Some(key)) => Some(key),
        Ok(None) if config.key == KeyRequirement::Required && config.key_from_body.is_none() => {
            return log.refuse(Outcome::KeyMissing, Problem::KeyMissing);
        }
        Ok(None) => None,
        Err(_) => return log.refuse(Outcome::KeyMalformed, Problem::KeyMalformed),
    };
    if announces_more_than(&parts, config.body_bytes_max) {
        return Problem::PayloadTooLarge.into_response();
    }
    let body = match axum::body::to_bytes(body, config.body_bytes_max).await {
        Ok(bytes) => bytes,
        Err(error) => {
            return if is_length_limit(&error) {
                Problem::PayloadTooLarge.into_response()
            } else if is_body_deadline(&error) {
                Problem::BodyTimeout.into_response()
            } else {
                Problem::BodyUnreadable.into_response()
            };
        }
    };
    // The layer reads the body's fields only when the route says so; then a member named twice
    // would let it and the handler read two different requests.
    let reads_fields = config.key_from_body.is_some() || !config.fingerprint.body_fields.is_empty();
    if reads_fields && repeats_a_member(&body) {
        return log.refuse(Outcome::BodyAmbiguous, Problem::BodyAmbiguous);
    }
    let key = match (key, &config.key_from_body) {
        (Some(key), _) => Some(key),
        (None, Some(pointer)) => match key_in_body(&body, pointer) {
            Ok(Some(key)) => Some(key),
            Ok(None) if config.key == KeyRequirement::Required => {
                return log.refuse(Outcome::KeyMissing, Problem::KeyMissing);
            }
            Ok(None) => None,
            Err(()) => return log.refuse(Outcome::KeyMalformed, Problem::KeyMalformed),
        },
        (None, None) => None,
    };
    if let Some(key) = &key {
        log.redacted_key = key.redacted();
    }

    let Some(key) = key else {
        // No key on an optional route: only the token guard applies.
        if let Err(refusal) = check_token(&config, &scope, None, &parts, &log).await {
            return refusal;
        }
        log.record(Outcome::NoKey);
        insert_context(&mut parts, &scope, None, None);
        return run_handler(&config, inner, Request::from_parts(parts, Body::from(body)))
            .await
            .unwrap_or_else(|problem| problem.into_response());
    };

    let fingerprint = fingerprint_of(&config, &parts, &body);
    if config.handler_begins {
        return claim(&config, inner, parts, body, scope, key, fingerprint, &log).await;
    }
    if config.handler_decides {
        return hand_over(&config, inner, parts, body, scope, key, fingerprint, &log).await;
    }
    let lease = match begin(&config, &scope, &key, &fingerprint, &log).await {
        Ok(lease) => lease,
        Err(response) => return response,
    };
    log.record(if lease.taken_over {
        Outcome::ProceedTakeover
    } else {
        Outcome::Proceed
    });

    if let Err(refusal) = check_token(&config, &scope, Some(&key), &parts, &log).await {
        abandon(&config, &lease).await;
        return refusal;
    }
    insert_context(&mut parts, &scope, Some(&key), Some(&lease));
    let response =
        match run_handler(&config, inner, Request::from_parts(parts, Body::from(body))).await {
            Ok(response) => response,
            Err(problem) => {
                abandon(&config, &lease).await;
                log.record(Outcome::Abandoned);
                return problem.into_response();
            }
        };
    finish(&config, &lease, response, &log).await
}

/// `handler_decides` mode: `begin` (with the route's wait for an in-flight duplicate), then the
/// handler runs with the decision whatever it is.
#[allow(clippy::too_many_arguments)]
async fn hand_over<S>(
    config: &RouteConfig,
    inner: S,
    mut parts: Parts,
    body: Bytes,
    scope: Scope,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    log: &DecisionLog<'_>,
) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    // The same bounded wait for an in-flight duplicate as the layer's own routes: the
    // handler then sees the first request's replay rather than a bare 409.
    let decision = match begin_waiting(config, &scope, &key, &fingerprint).await {
        Ok(decision) => decision,
        Err(error) => return log.refuse(Outcome::StoreUnavailable, store_problem(&error)),
    };
    log.record(outcome_of(&decision));
    let lease = match &decision {
        Decision::Proceed(lease) => Some(lease.clone()),
        _ => None,
    };
    insert_context(&mut parts, &scope, Some(&key), lease.as_ref());
    parts.extensions.insert(IdempotencyDecision {
        scope,
        key,
        fingerprint,
        decision,
        records: config.records.clone(),
        request_id: log.request_id.clone(),
    });
    match run_handler(config, inner, Request::from_parts(parts, Body::from(body))).await {
        Ok(response) => response,
        Err(problem) => {
            if let Some(lease) = &lease {
                abandon(config, lease).await;
                log.record(Outcome::Abandoned);
            }
            problem.into_response()
        }
    }
}

/// `handler_begins` mode: a replay or mismatch the store knows without a round trip is
/// answered here; every other request reaches the handler with its claim.
#[allow(clippy::too_many_arguments)]
async fn claim<S>(
    config: &RouteConfig,
    inner: S,
    mut parts: Parts,
    body: Bytes,
    scope: Scope,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    log: &DecisionLog<'_>,
) -> Response<Body>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    match config.records.recall(&scope, &key, &fingerprint) {
        Some(Decision::Replay(stored)) => {
            log.record(Outcome::Replay);
            return replay(stored);
        }
        Some(Decision::Mismatch) => return log.refuse(Outcome::Mismatch, Problem::KeyReused),
        // Only replays and mismatches are recalled; anything else is the store's to decide.
        Some(Decision::Proceed(_) | Decision::InFlight { .. }) | None => {}
    }
    parts.extensions.insert(IdempotencyClaim {
        // Before the handler's transaction: its record completes later, so this reading plus
        // the retention never outlasts the record.
        claimed_at_ms: crate::clock::now_ms(),
        scope,
        key,
        fingerprint,
        policy: config.policy,
        records: config.records.clone(),
        redacted_key: log.redacted_key.clone(),
        received: log.received,
        request_id: log.request_id.clone(),
    });
    run_handler(config, inner, Request::from_parts(parts, Body::from(body)))
        .await
        .unwrap_or_else(|problem| {
            log.record(Outcome::Abandoned);
            problem.into_response()
        })
}

/// A request the handler begins itself, for routes configured with
/// [`super::RouteConfigBuilder::handler_begins`]: what to begin the record with, in the
/// handler's own transaction, and the layer's answers for what that decided.
#[derive(Clone)]
pub struct IdempotencyClaim {
    /// Tenant + operation.
    pub scope: Scope,
    /// The key.
    pub key: IdempotencyKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The route's lease and retention.
    pub policy: RecordPolicy,
    records: Arc<dyn crate::record::RecordStore>,
    redacted_key: String,
    claimed_at_ms: i64,
    /// When the layer received the request: the handler's decisions are timed from there.
    received: Instant,
    request_id: Option<super::RequestId>,
}

impl std::fmt::Debug for IdempotencyClaim {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("IdempotencyClaim")
            .field("scope", &self.scope)
            .field("key", &self.redacted_key)
            .finish_non_exhaustive()
    }
}

impl IdempotencyClaim {
    /// Logs and counts what the handler's `begin` decided, and gives the layer's usual answer
    /// for a duplicate: the replay (with `Idempotent-Replayed: true`, and remembered by a
    /// replay cache in front of the store), 409 with `Retry-After`, or 422. `None` on
    /// `Proceed`: the handler goes on.
    pub async fn decided(&self, decision: &Decision) -> Option<Response<Body>> {
        let outcome = outcome_of(decision);
        record(
            self.scope.tenant(),
            self.scope.operation(),
            &self.redacted_key,
            outcome,
            self.received,
        );
        match decision {
            Decision::Proceed(_) => None,
            Decision::Replay(stored) => {
                self.records
                    .replayed(&self.scope, &self.key, &self.fingerprint, stored)
                    .await;
                Some(replay(stored.clone()))
            }
            Decision::InFlight { retry_after } => Some(
                Problem::InProgress {
                    retry_after: *retry_after,
                }
                .into_response(),
            ),
            Decision::Mismatch => Some(Problem::KeyReused.into_response()),
        }
    }

    /// Logs and counts a first-time request whose transaction began the record, ran and
    /// stored `response` (the handler's `begin` decided `Proceed`, then its commit stored the
    /// answer), and hands the answer to a replay cache in front of the store, if any, so that
    /// a retry arriving here is answered from memory. Call it after the commit only.
    pub fn stored(&self, response: &StoredResponse) {
        self.records.completed(
            &self.scope,
            &self.key,
            &self.fingerprint,
            response,
            self.claimed_at_ms
                .saturating_add(self.policy.retention_ms()),
        );
        for outcome in [Outcome::Proceed, Outcome::Stored] {
            record(
                self.scope.tenant(),
                self.scope.operation(),
                &self.redacted_key,
                outcome,
                self.received,
            );
        }
    }

    /// Stores `response` as the answer to this request without an effect of the handler's
    /// own (a request refused after its key was read: a retry of it gets the same answer),
    /// through the route's record store: `begin`, then `complete`. A duplicate gets the usual
    /// answer instead. Failures to store are logged; the response is sent either way.
    pub async fn answer(&self, response: StoredResponse) -> Response<Body> {
        let decision = match self
            .records
            .begin(&self.scope, &self.key, &self.fingerprint, &self.policy)
            .await
        {
            Ok(decision) => decision,
            Err(error) => return store_problem(&error).into_response(),
        };
        if let Some(answer) = self.decided(&decision).await {
            return answer;
        }
        if let Decision::Proceed(lease) = &decision
            && let Err(error) = self
                .records
                .complete(lease, &self.stamp(response.clone()))
                .await
        {
            tracing::warn!(target: "mideng::idempotency", %error, "could not store a refusal; the key stays leased until it expires");
        }
        replay_free(response)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        self.scope.tenant()
    }

    /// `stored` with this request's id as `Original-Request-Id`, for the answer the handler's
    /// transaction stores: every replay then names the request that had the effect. Send the
    /// first answer without it ([`super::request_id`]).
    pub fn stamp(&self, stored: StoredResponse) -> StoredResponse {
        stamp(self.request_id.as_ref(), stored)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyClaim {
    type Rejection = Response<Body>;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<IdempotencyClaim>()
            .cloned()
            .ok_or_else(|| {
                tracing::error!("IdempotencyClaim extracted on a route without handler_begins()");
                Problem::Internal.into_response()
            })
    }
}

/// How a decision is logged and counted.
fn outcome_of(decision: &Decision) -> Outcome {
    match decision {
        Decision::Proceed(lease) if lease.taken_over => Outcome::ProceedTakeover,
        Decision::Proceed(_) => Outcome::Proceed,
        Decision::Replay(_) => Outcome::Replay,
        Decision::InFlight { .. } => Outcome::InFlight,
        Decision::Mismatch => Outcome::Mismatch,
    }
}

/// Runs `begin`, and while a duplicate is in flight polls again until the route's
/// `in_flight_wait` is over (no wait without one): the first decision that is not `InFlight`,
/// or `InFlight` when the wait ran out.
async fn begin_waiting(
    config: &RouteConfig,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Decision, StoreError> {
    let deadline = config
        .in_flight_wait
        .map(|wait| tokio::time::Instant::now() + wait);
    loop {
        let decision = config
            .records
            .begin(scope, key, fingerprint, &config.policy)
            .await?;
        let now = tokio::time::Instant::now();
        match (&decision, deadline) {
            (Decision::InFlight { .. }, Some(deadline)) if now < deadline => {
                tokio::time::sleep(IN_FLIGHT_POLL.min(deadline - now)).await;
            }
            _ => return Ok(decision),
        }
    }
}

/// Runs `begin`, waiting for an in-flight duplicate if the route allows; the lease, or the
/// response to send instead of running the handler.
async fn begin(
    config: &RouteConfig,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    log: &DecisionLog<'_>,
) -> Result<Lease, Response<Body>> {
    let decision = begin_waiting(config, scope, key, fingerprint)
        .await
        .map_err(|error| log.refuse(Outcome::StoreUnavailable, store_problem(&error)))?;
    match decision {
        Decision::Proceed(lease) => Ok(lease),
        Decision::Replay(stored) => {
            log.record(Outcome::Replay);
            Err(replay(stored))
        }
        Decision::Mismatch => Err(log.refuse(Outcome::Mismatch, Problem::KeyReused)),
        Decision::InFlight { retry_after } => {
            Err(log.refuse(Outcome::InFlight, Problem::InProgress { retry_after }))
        }
    }
}

/// Consumes the request's one-time token if the route has a guard, for the request's key: a
/// token that the same key consumed before passes again (the same submission, retried after a
/// failure, a timeout or a lost lease); with another key or none it is a duplicate.
async fn check_token(
    config: &RouteConfig,
    scope: &Scope,
    key: Option<&IdempotencyKey>,
    parts: &Parts,
    log: &DecisionLog<'_>,
) -> Result<(), Response<Body>> {
    let Some(guard) = &config.token else {
        return Ok(());
    };
    let token = match read_idempotency_token(&parts.headers) {
        Ok(Some(token)) => token,
        Ok(None) if guard.required => return Err(Problem::TokenMissing.into_response()),
        Ok(None) => return Ok(()),
        Err(_) => return Err(Problem::TokenMalformed.into_response()),
    };
    match guard.store.consume_token_for(scope, &token, key).await {
        Ok(Consumption::Consumed) => {
            log.record(Outcome::TokenConsumed);
            Ok(())
        }
        Ok(Consumption::SameKey) => {
            log.record(Outcome::TokenSameKey);
            Ok(())
        }
        Ok(Consumption::AlreadyConsumed) => {
            Err(log.refuse(Outcome::TokenDuplicate, Problem::DuplicateSubmission))
        }
        Ok(Consumption::Unknown) => Err(log.refuse(Outcome::TokenUnknown, Problem::TokenUnknown)),
        Err(error) if error.is_transient() => match guard.on_unavailable {
            TokenUnavailable::Degrade => {
                tracing::warn!(target: "mideng::idempotency", token = %redact(token.as_str()), %error, "token store unavailable, degrading");
                log.record(Outcome::TokenDegraded);
                Ok(())
            }
            TokenUnavailable::FailClosed => {
                Err(log.refuse(Outcome::TokenUnavailable, Problem::TokenStoreUnavailable))
            }
        },
        Err(error) => {
            tracing::error!(target: "mideng::idempotency", %error, "token store failure");
            Err(log.refuse(Outcome::TokenUnavailable, Problem::TokenStoreUnavailable))
        }
    }
}

fn insert_context(
    parts: &mut Parts,
    scope: &Scope,
    key: Option<&IdempotencyKey>,
    lease: Option<&Lease>,
) {
    parts.extensions.insert(IdempotencyContext {
        scope: scope.clone(),
        key: key.cloned(),
        fence: lease.map(|lease| lease.fence),
        taken_over: lease.is_some_and(|lease| lease.taken_over),
    });
}

/// Runs the handler under the route's timeout, turning a panic or a timeout into a problem.
async fn run_handler<S>(
    config: &RouteConfig,
    mut inner: S,
    request: Request<Body>,
) -> Result<Response<Body>, Problem>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let call = AssertUnwindSafe(async move {
        match inner.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    })
    .catch_unwind();
    match tokio::time::timeout(config.handler_timeout, call).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(_panic)) => {
            tracing::error!(target: "mideng::idempotency", operation = %config.operation, "handler panicked");
            Err(Problem::HandlerPanicked)
        }
        Err(_elapsed) => Err(Problem::HandlerTimeout),
    }
}

pub(super) async fn abandon(config: &RouteConfig, lease: &Lease) {
    if let Err(error) = config.records.abandon(lease).await {
        // The lease expires by itself; a failed abandon only delays the retry.
        tracing::warn!(target: "mideng::idempotency", %error, "could not free the key; it frees itself when the lease expires");
    }
}

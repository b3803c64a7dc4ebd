//! Per-route configuration of the layer, validated once when the router is built.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderName;
use axum::http::header;
use axum::http::request::Parts;

use crate::error::InvalidInput;
use crate::key::Scope;
use crate::record::{RecordPolicy, RecordStore};
use crate::token::TokenStore;

/// Whether a route requires `Idempotency-Key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRequirement {
    /// A request without a key gets 400.
    Required,
    /// A request without a key runs the handler without a record (no replay protection).
    Optional,
}

/// The tenant of a request, inserted into the request's extensions by an authentication layer
/// in front of this one (the default [`TenantSource`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(pub String);

/// A function that finds the tenant in a request head.
pub type ResolveTenant = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Where the tenant of a request comes from. Keys are scoped by tenant, so one tenant can never
/// receive another's replay.
#[derive(Clone)]
pub enum TenantSource {
    /// A [`Tenant`] in the request's extensions (put there by authentication). A request without
    /// one gets 401.
    Extension,
    /// A request header (for services behind a gateway that authenticates and sets it).
    Header(HeaderName),
    /// One tenant for every request (single-tenant services).
    Fixed(String),
    /// Any function of the request head.
    Custom(ResolveTenant),
}

impl std::fmt::Debug for TenantSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TenantSource::Extension => formatter.write_str("Extension"),
            TenantSource::Header(name) => write!(formatter, "Header({name})"),
            TenantSource::Fixed(tenant) => write!(formatter, "Fixed({tenant})"),
            TenantSource::Custom(_) => formatter.write_str("Custom"),
        }
    }
}

impl TenantSource {
    pub(crate) fn resolve(&self, parts: &Parts) -> Option<String> {
        match self {
            TenantSource::Extension => parts
                .extensions
                .get::<Tenant>()
                .map(|tenant| tenant.0.clone()),
            TenantSource::Header(name) => parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            TenantSource::Fixed(tenant) => Some(tenant.clone()),
            TenantSource::Custom(resolve) => resolve(parts),
        }
    }
}

/// What to do when the token store cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenUnavailable {
    /// Answer 503: no submission without its token checked.
    FailClosed,
    /// Go on without the token check (the idempotency key and the database constraints still
    /// hold), logging and counting every degradation. The default: the token is a fast path.
    Degrade,
}

/// The one-time token guard of a route.
#[derive(Clone)]
pub struct TokenGuard {
    pub(crate) store: Arc<dyn TokenStore>,
    pub(crate) required: bool,
    pub(crate) on_unavailable: TokenUnavailable,
}

impl TokenGuard {
    /// Tokens from `store`, required on every request, degrading when the store is down.
    pub fn new(store: Arc<dyn TokenStore>) -> Self {
        Self {
            store,
            required: true,
            on_unavailable: TokenUnavailable::Degrade,
        }
    }

    /// Accept requests without a token (they are not checked); a token that is present is
    /// still consumed.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// What to do when the token store cannot be reached.
    pub fn when_unavailable(mut self, policy: TokenUnavailable) -> Self {
        self.on_unavailable = policy;
        self
    }
}

/// Which parts of a request make its fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FingerprintParts {
    /// The method.
    pub method: bool,
    /// The matched route template and the actual path, so that `/orders/1/pay` and
    /// `/orders/2/pay` under one key are a mismatch, not a replay of the other order.
    pub path: bool,
    /// The query string.
    pub query: bool,
    /// The body (canonical JSON when it parses as JSON, else its bytes).
    pub body: bool,
    /// When not empty, only these fields of a JSON body, as JSON pointers (RFC 6901, such as
    /// `/amount` or `/items/0/sku`): a field the client may change between retries (a client
    /// timestamp, a trace id) is then left out, so that the retry replays instead of being
    /// refused as a reused key. A field absent from the body counts as `null`. A body that is
    /// not JSON is fingerprinted whole. Checked when the route is built: at most
    /// [`BODY_FIELDS_MAX`] pointers of at most 256 bytes, each empty or starting with `/`.
    pub body_fields: Vec<String>,
    /// These request headers, by name.
    pub headers: Vec<HeaderName>,
}

/// The most body fields a fingerprint names.
pub const BODY_FIELDS_MAX: usize = 32;

/// Checks one JSON pointer of a route's configuration.
fn check_pointer(what: &'static str, pointer: &str) -> Result<(), InvalidInput> {
    let well_formed = pointer.len() <= 256
        && (pointer.is_empty() || pointer.starts_with('/'))
        // RFC 6901: `~` only as `~0` or `~1`.
        && pointer
            .split('~')
            .skip(1)
            .all(|rest| rest.starts_with('0') || rest.starts_with('1'));
    if well_formed {
        Ok(())
    } else {
        Err(InvalidInput::Malformed {
            what,
            max_bytes: 256,
            alphabet: "a JSON pointer: empty, or `/` and reference tokens (`~0`, `~1` escapes)",
        })
    }
}

impl Default for FingerprintParts {
    fn default() -> Self {
        Self {
            method: true,
            path: true,
            query: true,
            body: true,
            body_fields: Vec::new(),
            headers: Vec::new(),
        }
    }
}

/// Default lease: long enough for a payment call to a channel, short enough that a crashed
/// request's key is free again within a minute.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// Default retention: a day, the longest client retry window we know of outside funds.
const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Retention of a route that moves money ([`RouteConfigBuilder::funds`]): 30 days, the long end
/// of seed 004's "funds: 7 to 30 days", so that a retry delayed by an outage, a reconciliation
/// job or a redelivered message replays instead of running again.
pub const FUNDS_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// Default request body limit. Idempotent write APIs take small JSON documents.
const DEFAULT_BODY_BYTES_MAX: usize = 256 * 1024;
/// Longest body limit accepted.
const BODY_BYTES_MAX_LIMIT: usize = 16 * 1024 * 1024;
/// Longest time a duplicate may wait for the first request before it gets 409.
const IN_FLIGHT_WAIT_MAX: Duration = Duration::from_secs(30);

/// The configuration of one route. Build it with [`RouteConfig::builder`].
#[derive(Clone)]
pub struct RouteConfig {
    pub(crate) operation: String,
    pub(crate) records: Arc<dyn RecordStore>,
    pub(crate) key: KeyRequirement,
    pub(crate) policy: RecordPolicy,
    pub(crate) handler_timeout: Duration,
    pub(crate) fingerprint: FingerprintParts,
    pub(crate) body_bytes_max: usize,
    pub(crate) tenant: TenantSource,
    pub(crate) replay_headers: Vec<HeaderName>,
    pub(crate) in_flight_wait: Option<Duration>,
    pub(crate) token: Option<TokenGuard>,
    pub(crate) handler_decides: bool,
    pub(crate) handler_begins: bool,
    pub(crate) key_from_body: Option<String>,
}

impl std::fmt::Debug for RouteConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RouteConfig")
            .field("operation", &self.operation)
            .field("key", &self.key)
            .field("policy", &self.policy)
            .field("handler_timeout", &self.handler_timeout)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl RouteConfig {
    /// Starts the configuration of `operation` (a name such as `payments.create`; it is part of
    /// every key's scope) on `records`.
    pub fn builder(records: Arc<dyn RecordStore>, operation: &str) -> RouteConfigBuilder {
        RouteConfigBuilder {
            operation: operation.to_owned(),
            records,
            key: KeyRequirement::Required,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            handler_timeout: None,
            fingerprint: FingerprintParts::default(),
            body_bytes_max: DEFAULT_BODY_BYTES_MAX,
            tenant: TenantSource::Extension,
            replay_headers: vec![
                header::CONTENT_TYPE,
                header::CONTENT_ENCODING,
                header::CONTENT_LANGUAGE,
                header::LOCATION,
                header::ETAG,
                header::LAST_MODIFIED,
                header::CACHE_CONTROL,
            ],
            in_flight_wait: None,
            token: None,
            handler_decides: false,
            handler_begins: false,
            key_from_body: None,
        }
    }

    /// The operation name.
    pub fn operation(&self) -> &str {
        &self.operation
    }
}

/// Builder of a [`RouteConfig`].
#[derive(Clone)]
pub struct RouteConfigBuilder {
    operation: String,
    records: Arc<dyn RecordStore>,
    key: KeyRequirement,
    lease: Duration,
    retention: Duration,
    handler_timeout: Option<Duration>,
    fingerprint: FingerprintParts,
    body_bytes_max: usize,
    tenant: TenantSource,
    replay_headers: Vec<HeaderName>,
    in_flight_wait: Option<Duration>,
    token: Option<TokenGuard>,
    handler_decides: bool,
    handler_begins: bool,
    key_from_body: Option<String>,
}

impl RouteConfigBuilder {
    /// Required (the default) or optional `Idempotency-Key`.
    pub fn key(mut self, requirement: KeyRequirement) -> Self {
        self.key = requirement;
        self
    }

    /// How long a request holds its key (default 60 s). It must outlast the handler: the
    /// handler timeout is set below it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long completed responses are replayed (default 24 h; [`Self::funds`] for 30 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// A route that moves money: its answers are replayed for [`FUNDS_RETENTION`] (30 days).
    pub fn funds(self) -> Self {
        self.retention(FUNDS_RETENTION)
    }

    /// How long the handler may run before it is dropped and its key freed (default: half the
    /// lease). Must be shorter than the lease.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = Some(timeout);
        self
    }

    /// Which request parts make the fingerprint (default: method, path, query, body).
    pub fn fingerprint(mut self, parts: FingerprintParts) -> Self {
        self.fingerprint = parts;
        self
    }

    /// Largest accepted request body (default 256 KiB, at most 16 MiB).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_bytes_max = bytes;
        self
    }

    /// Where the tenant comes from (default: a [`Tenant`] extension set by authentication).
    pub fn tenant(mut self, source: TenantSource) -> Self {
        self.tenant = source;
        self
    }

    /// Response headers stored and replayed besides the status and body (default:
    /// content-type, content-encoding, content-language, location, etag, last-modified,
    /// cache-control). Never list `set-cookie` or anything per-session.
    pub fn replay_headers(mut self, headers: Vec<HeaderName>) -> Self {
        self.replay_headers = headers;
        self
    }

    /// Instead of answering 409 at once, let a duplicate wait up to `wait` (at most 30 s) for
    /// the first request to finish and then send its response.
    pub fn wait_for_in_flight(mut self, wait: Duration) -> Self {
        self.in_flight_wait = Some(wait);
        self
    }

    /// Guard the route with one-time tokens (`Idempotency-Token`).
    pub fn token_guard(mut self, guard: TokenGuard) -> Self {
        self.token = Some(guard);
        self
    }

    /// Let the handler act on the decision itself: the layer still validates the tenant, key
    /// and body and calls `begin`, then runs the handler for every decision with an
    /// [`super::IdempotencyDecision`] to extract. The handler answers replays, conflicts and
    /// mismatches (`standard_response` gives the usual answers) and, on `Proceed`, completes
    /// the record itself — typically with a SQL store's `complete_in`, in the same transaction
    /// as its effect. The layer stores nothing in this mode; it still frees the key after a
    /// panic or a timeout, and still lets a duplicate wait ([`Self::wait_for_in_flight`]) so
    /// that the handler sees the first request's replay rather than `InFlight`.
    pub fn handler_decides(mut self) -> Self {
        self.handler_decides = true;
        self
    }

    /// Let the handler begin the record itself, in the transaction of its effect, so that a
    /// first-time request commits once: the record's claim, the effect and the stored answer
    /// together ([`crate::store::sql::SqlStore::begin_in`], then `complete_in`). The layer
    /// validates the tenant, key and body and takes the fingerprint; a replay or a mismatch the
    /// record store knows without a round trip ([`crate::record::RecordStore::recall`], a
    /// replay cache) is answered at once, and every other request reaches the handler with an
    /// [`super::IdempotencyClaim`] to extract. The handler begins the record with the claim's
    /// scope, key, fingerprint and policy, and hands whatever that decided to
    /// [`super::IdempotencyClaim::decided`], which logs and counts it and gives the usual
    /// answer for a duplicate.
    ///
    /// On PostgreSQL and MySQL a concurrent duplicate waits on the record's row lock until the
    /// first transaction ends, then replays; SQLite serialises writers anyway. A handler that
    /// fails rolls its transaction back and leaves no record behind, so there is nothing to
    /// free. Not combinable with a token guard (a token checked before the record would refuse
    /// the retry of a request that went through) nor with [`Self::handler_decides`].
    pub fn handler_begins(mut self) -> Self {
        self.handler_begins = true;
        self
    }

    /// Where the key comes from when the request has no key header: the body's field at
    /// `pointer` (a JSON pointer, RFC 6901), a string or an integer, for callers that cannot
    /// send a header (a queue consumer relaying a message, a webhook whose event id is the
    /// key). A header, when present, wins; a field that is not a valid key is refused as a
    /// malformed key; a body without the field has no key (400 on a route that requires one).
    /// Checked when the route is built.
    pub fn key_from_body(mut self, pointer: &str) -> Self {
        self.key_from_body = Some(pointer.to_owned());
        self
    }

    /// Validates and builds. Refused: an invalid operation name; a malformed JSON pointer among
    /// the fingerprint's body fields or the key's, or more than [`BODY_FIELDS_MAX`] fields; a lease, retention or body
    /// limit out of bounds; a handler timeout not shorter than the lease (a handler that can
    /// outlive its lease could run twice); a wait for in-flight requests over 30 s; a route
    /// where the handler begins the record that also has a token guard or decides on a record
    /// begun by the layer.
    pub fn build(self) -> Result<RouteConfig, InvalidInput> {
        if self.handler_begins && (self.token.is_some() || self.handler_decides) {
            return Err(InvalidInput::Conflicting {
                what: "handler_begins with a token guard or handler_decides",
            });
        }
        Scope::new("t", &self.operation)?;
        if self.fingerprint.body_fields.len() > BODY_FIELDS_MAX {
            return Err(InvalidInput::CountOutOfRange {
                what: "fingerprint body fields",
                min: 0,
                max: BODY_FIELDS_MAX as u64,
            });
        }
        for pointer in &self.fingerprint.body_fields {
            check_pointer("fingerprint body field", pointer)?;
        }
        if let Some(pointer) = &self.key_from_body {
            check_pointer("key field of the body", pointer)?;
        }
        let policy = RecordPolicy::new(self.lease, self.retention)?;
        let handler_timeout = self.handler_timeout.unwrap_or(self.lease / 2);
        if handler_timeout.is_zero() || handler_timeout >= self.lease {
            return Err(InvalidInput::OutOfRange {
                what: "handler timeout (must be shorter than the lease)",
                min_ms: 1,
                max_ms: u64::try_from(self.lease.as_millis())
                    .unwrap_or(u64::MAX)
                    .saturating_sub(1),
            });
        }
        if self.body_bytes_max == 0 || self.body_bytes_max > BODY_BYTES_MAX_LIMIT {
            return Err(InvalidInput::SizeOutOfRange {
                what: "body limit",
                min_bytes: 1,
                max_bytes: BODY_BYTES_MAX_LIMIT,
            });
        }
        if self
            .in_flight_wait
            .is_some_and(|wait| wait > IN_FLIGHT_WAIT_MAX)
        {
            return Err(InvalidInput::OutOfRange {
                what: "wait for in-flight requests",
                min_ms: 0,
                max_ms: u64::try_from(IN_FLIGHT_WAIT_MAX.as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(RouteConfig {
            operation: self.operation,
            records: self.records,
            key: self.key,
            policy,
            handler_timeout,
            fingerprint: self.fingerprint,
            body_bytes_max: self.body_bytes_max,
            tenant: self.tenant,
            replay_headers: self.replay_headers,
            in_flight_wait: self.in_flight_wait,
            token: self.token,
            handler_decides: self.handler_decides,
            handler_begins: self.handler_begins,
            key_from_body: self.key_from_body,
        })
    }
}

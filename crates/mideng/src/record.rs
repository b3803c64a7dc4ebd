//! Idempotency records: one per scope + key, holding the request's fingerprint, a lease while
//! the request runs, and the stored response once it completed.
//!
//! [`RecordStore::begin`] decides what a request arriving with a key must do ([`Decision`]);
//! the rule itself is the pure function [`judge`], shared by every store so that they cannot
//! disagree. A lease carries a fence (a number that grows with every new owner) and an owner
//! nonce; [`RecordStore::complete`] writes only while both are still current, so a request that
//! outlived its lease and was taken over can never overwrite the new owner's record.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{InvalidInput, StoreError};
use crate::key::{Fingerprint, IdempotencyKey, Scope};
use crate::limits::{
    LEASE_MS_MAX, LEASE_MS_MIN, RESPONSE_BODY_BYTES_MAX, RESPONSE_HEADER_BYTES_MAX,
    RESPONSE_HEADERS_MAX, RETENTION_MS_MAX,
};

/// Where a record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// A request holds (or held) the lease and has not finished.
    InProgress,
    /// The request finished; its response is stored for replay.
    Completed,
    /// The owner gave the key back (a 5xx, a timeout): the next request proceeds afresh.
    Abandoned,
}

impl RecordState {
    /// The text stores persist.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::InProgress => "in_progress",
            RecordState::Completed => "completed",
            RecordState::Abandoned => "abandoned",
        }
    }

    /// Parses the persisted text.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "in_progress" => Some(RecordState::InProgress),
            "completed" => Some(RecordState::Completed),
            "abandoned" => Some(RecordState::Abandoned),
            _ => None,
        }
    }
}

/// A response kept for replay: status, the headers chosen for replay, and the body bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredResponse {
    /// Status code.
    pub status: u16,
    /// Headers to replay, in order.
    pub headers: Vec<(String, String)>,
    /// Body, byte for byte.
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// Checks the response against the storage limits.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.body.len() > RESPONSE_BODY_BYTES_MAX {
            return Err(InvalidInput::ResponseTooLarge("body over 1 MiB"));
        }
        if self.headers.len() > RESPONSE_HEADERS_MAX {
            return Err(InvalidInput::ResponseTooLarge("more than 32 headers"));
        }
        if self
            .headers
            .iter()
            .any(|(name, value)| name.len() + value.len() > RESPONSE_HEADER_BYTES_MAX)
        {
            return Err(InvalidInput::ResponseTooLarge("a header over 8 KiB"));
        }
        Ok(())
    }

    /// The headers as the JSON text that SQL stores persist.
    pub(crate) fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned())
    }

    /// Rebuilds a response from persisted columns.
    pub(crate) fn from_columns(
        status: i64,
        headers_json: &str,
        body: Vec<u8>,
    ) -> Result<Self, StoreError> {
        let status = u16::try_from(status)
            .map_err(|_| StoreError::Corrupt(format!("stored status {status} out of range")))?;
        let headers = serde_json::from_str(headers_json)
            .map_err(|error| StoreError::Corrupt(format!("stored headers unreadable: {error}")))?;
        Ok(Self {
            status,
            headers,
            body,
        })
    }
}

/// A stored answer with one hole in its body, for a record written by the same statement that
/// makes the effect, when the answer carries a value only that statement learns (the balance
/// after a debit): the body is kept as the bytes before the hole and the bytes after it, and
/// the statement writes `prefix ‖ value ‖ suffix`
/// ([`postgres_recorded_cte!`](crate::postgres_recorded_cte)). [`AnswerTemplate::fill`] makes
/// the same bytes on the caller's side, so the answer sent and the answer stored are one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerTemplate {
    status: u16,
    headers: Vec<(String, String)>,
    headers_json: String,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
}

/// How many bytes a value filled into an [`AnswerTemplate`] may take (an `i64` in decimal
/// takes at most 20).
pub const TEMPLATE_VALUE_BYTES_MAX: usize = 32;

impl AnswerTemplate {
    /// `response` with the bytes `hole` standing for the value; `None` unless `hole` is not
    /// empty and appears exactly once in the body (a value that could stand in two places is
    /// ambiguous), or when the response with a value filled in would break the storage limits.
    pub fn new(response: &StoredResponse, hole: &[u8]) -> Option<Self> {
        if hole.is_empty() || response.validate().is_err() {
            return None;
        }
        if response.body.len() - hole.len() + TEMPLATE_VALUE_BYTES_MAX > RESPONSE_BODY_BYTES_MAX {
            return None;
        }
        let mut found = response
            .body
            .windows(hole.len())
            .enumerate()
            .filter(|(_, window)| *window == hole)
            .map(|(at, _)| at);
        let at = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(Self {
            status: response.status,
            headers: response.headers.clone(),
            headers_json: response.headers_json(),
            prefix: response.body[..at].to_vec(),
            suffix: response.body[at + hole.len()..].to_vec(),
        })
    }

    /// The answer with `value` in the hole: the bytes the statement stores for the same value.
    pub fn fill(&self, value: &str) -> StoredResponse {
        let mut body = Vec::with_capacity(self.prefix.len() + value.len() + self.suffix.len());
        body.extend_from_slice(&self.prefix);
        body.extend_from_slice(value.as_bytes());
        body.extend_from_slice(&self.suffix);
        StoredResponse {
            status: self.status,
            headers: self.headers.clone(),
            body,
        }
    }

    /// The status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers as stored (JSON).
    pub fn headers_json(&self) -> &str {
        &self.headers_json
    }

    /// The body's bytes before the hole.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The body's bytes after the hole.
    pub fn suffix(&self) -> &[u8] {
        &self.suffix
    }
}

/// How long a request may hold its key, and how long its record is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPolicy {
    lease_ms: u64,
    retention_ms: u64,
}

impl RecordPolicy {
    /// `lease` must outlast the longest execution it guards (set the request timeout below
    /// it); `retention` is how long a completed record is replayed, at least the lease.
    pub fn new(lease: Duration, retention: Duration) -> Result<Self, InvalidInput> {
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
        if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&lease_ms) {
            return Err(InvalidInput::OutOfRange {
                what: "lease",
                min_ms: LEASE_MS_MIN,
                max_ms: LEASE_MS_MAX,
            });
        }
        if !(lease_ms..=RETENTION_MS_MAX).contains(&retention_ms) {
            return Err(InvalidInput::OutOfRange {
                what: "retention (at least the lease)",
                min_ms: lease_ms,
                max_ms: RETENTION_MS_MAX,
            });
        }
        Ok(Self {
            lease_ms,
            retention_ms,
        })
    }

    /// The lease in milliseconds.
    pub fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease_ms).unwrap_or(i64::MAX)
    }

    /// The retention in milliseconds.
    pub fn retention_ms(&self) -> i64 {
        i64::try_from(self.retention_ms).unwrap_or(i64::MAX)
    }
}

/// The right to execute a request and then complete or abandon its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The record's scope.
    pub scope: Scope,
    /// The record's key.
    pub key: IdempotencyKey,
    /// Grows by one with every new owner of the record: a fencing token that a database can
    /// check before applying the guarded effect.
    pub fence: u64,
    /// A random nonce naming this owner; with the fence it identifies the lease even across a
    /// purge that restarts the fence.
    pub owner: String,
    /// When the lease runs out (Unix ms) and another request may take over.
    pub lease_until_ms: i64,
    /// The retention applied when the record completes.
    pub retention_ms: i64,
    /// True when this lease took over an earlier owner's expired lease or an abandoned key.
    pub taken_over: bool,
}

/// What a request arriving with a key must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Execute: first arrival, or the earlier owner's lease expired or was abandoned.
    Proceed(Lease),
    /// Completed earlier with the same fingerprint: answer with this response.
    Replay(StoredResponse),
    /// Another request holds a live lease: come back after `retry_after`.
    InFlight {
        /// Until the current lease runs out (at least 1 ms).
        retry_after: Duration,
    },
    /// The key was used for a different request: refuse (HTTP 422).
    Mismatch,
}

impl Decision {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Proceed(lease) if lease.taken_over => "proceed_takeover",
            Decision::Proceed(_) => "proceed",
            Decision::Replay(_) => "replay",
            Decision::InFlight { .. } => "in_flight",
            Decision::Mismatch => "mismatch",
        }
    }
}

/// A record as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Scope.
    pub scope: Scope,
    /// Key.
    pub key: IdempotencyKey,
    /// Fingerprint of the request that owns the key.
    pub fingerprint: Fingerprint,
    /// State.
    pub state: RecordState,
    /// Current fence.
    pub fence: u64,
    /// Current owner nonce.
    pub owner: String,
    /// End of the current lease (Unix ms).
    pub lease_until_ms: i64,
    /// The stored response, once completed.
    pub response: Option<StoredResponse>,
    /// When the current owner began (Unix ms).
    pub created_at_ms: i64,
    /// When the record may be purged (Unix ms).
    pub expires_at_ms: i64,
}

/// What [`judge`] tells a store to do with an existing record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Take the key: overwrite the record with a new owner, fence + 1.
    TakeOver,
    /// Answer with the stored response.
    Replay,
    /// Another owner holds a live lease.
    InFlight {
        /// Milliseconds until that lease runs out (at least 1).
        retry_after_ms: i64,
    },
    /// Different request under the same key.
    Mismatch,
}

/// The rule every store applies to an existing record, pure so it is tested once here.
///
/// - a record past its retention counts as absent: take over;
/// - an abandoned key is free: take over, whatever the fingerprint;
/// - otherwise a different fingerprint is a mismatch, whether the first request is still
///   running or done (it may have had effects, so its key cannot serve another request);
/// - completed: replay; in progress with a live lease: in flight; with a dead lease: take over.
pub fn judge(
    state: RecordState,
    stored: &Fingerprint,
    lease_until_ms: i64,
    expires_at_ms: i64,
    arriving: &Fingerprint,
    now_ms: i64,
) -> Verdict {
    if expires_at_ms <= now_ms || state == RecordState::Abandoned {
        return Verdict::TakeOver;
    }
    if stored != arriving {
        return Verdict::Mismatch;
    }
    match state {
        RecordState::Completed => Verdict::Replay,
        RecordState::InProgress if lease_until_ms > now_ms => Verdict::InFlight {
            retry_after_ms: (lease_until_ms - now_ms).max(1),
        },
        RecordState::InProgress | RecordState::Abandoned => Verdict::TakeOver,
    }
}

/// A fresh owner nonce: 128 random bits in hex.
pub(crate) fn new_owner() -> String {
    let mut bytes = [0_u8; 16];
    // The operating system's generator failing is a broken machine, not an input error.
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    hex::encode(bytes)
}

/// Converts a retry-after in milliseconds to a duration of at least 1 ms.
pub(crate) fn retry_after(retry_after_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(retry_after_ms.max(1)).unwrap_or(1))
}

/// Storage of idempotency records. Every implementation passes the conformance suite in
/// `tests/conformance.rs`.
#[async_trait]
pub trait RecordStore: Send + Sync {
    /// Decides what a request with `key` and `fingerprint` in `scope` must do, atomically:
    /// among any number of concurrent callers on one key, exactly one gets `Proceed`.
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError>;

    /// Stores the response and completes the record, if `lease` is still current; otherwise
    /// writes nothing and returns [`StoreError::StaleLease`].
    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError>;

    /// Frees the key for a retry (after a 5xx or a timeout), if `lease` is still current;
    /// otherwise writes nothing and returns [`StoreError::StaleLease`].
    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError>;

    /// The record for `key` in `scope`, if any (for inspection; expired ones included until
    /// purged).
    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError>;

    /// Deletes at most `limit` records whose retention ended before `now_ms` and whose lease
    /// is not live, and returns how many it deleted. Call repeatedly until it returns less
    /// than `limit`. Stores with native expiry (Redis) return 0: their records vanish alone.
    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError>;

    /// The decision this store can make without a round trip, if any: a cache in front of the
    /// store ([`crate::store::cached`]) answers a replay or a mismatch of a completed record
    /// from memory. `None` (the default) means "ask the store". Only ever a replay or a
    /// mismatch: who proceeds is decided by `begin` alone.
    fn recall(
        &self,
        _scope: &Scope,
        _key: &IdempotencyKey,
        _fingerprint: &Fingerprint,
    ) -> Option<Decision> {
        None
    }

    /// Tells the store that a `begin` made elsewhere (in the caller's own transaction, such
    /// as [`crate::store::sql::SqlStore::begin_in`]) replayed `response` for this request, so
    /// that a cache in front of it may answer the next replay from memory. Does nothing by
    /// default.
    async fn replayed(
        &self,
        _scope: &Scope,
        _key: &IdempotencyKey,
        _fingerprint: &Fingerprint,
        _response: &StoredResponse,
    ) {
    }

    /// Tells the store that a transaction elsewhere completed this request's record with
    /// `response`, and that the record is kept at least until `kept_until_ms` (its completion
    /// time, or any earlier clock reading, plus its retention), so that a cache in front of it
    /// may answer the first replay from memory. Does nothing by default.
    fn completed(
        &self,
        _scope: &Scope,
        _key: &IdempotencyKey,
        _fingerprint: &Fingerprint,
        _response: &StoredResponse,
        _kept_until_ms: i64,
    ) {
    }
}

/// A shared store is a store, so components can hold `Arc<dyn RecordStore>`.
#[async_trait]
impl<T: RecordStore + ?Sized> RecordStore for std::sync::Arc<T> {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        (**self).begin(scope, key, fingerprint, policy).await
    }
    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        (**self).complete(lease, response).await
    }
    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        (**self).abandon(lease).await
    }
    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        (**self).find_record(scope, key).await
    }
    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        (**self).purge_expired(now_ms, limit).await
    }
    fn recall(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Option<Decision> {
        (**self).recall(scope, key, fingerprint)
    }
    async fn replayed(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
    ) {
        (**self).replayed(scope, key, fingerprint, response).await;
    }
    fn completed(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        kept_until_ms: i64,
    ) {
        (**self).completed(scope, key, fingerprint, response, kept_until_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print(text: &str) -> Fingerprint {
        Fingerprint::of_parts(&[text.as_bytes()])
    }

    #[test]
    fn a_template_has_one_hole_and_fills_it_as_the_statement_does() {
        let rendered = |balance: i64| StoredResponse {
            status: 200,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: format!("{{\"amount\":300,\"balance_after\":{balance}}}").into_bytes(),
        };
        let hole = i64::MIN.to_string();
        let template = AnswerTemplate::new(&rendered(i64::MIN), hole.as_bytes()).expect("one hole");
        for balance in [0, 7, 1_000_000, i64::MAX] {
            assert_eq!(template.fill(&balance.to_string()), rendered(balance));
        }
        assert_eq!(template.prefix(), b"{\"amount\":300,\"balance_after\":");
        assert_eq!(template.suffix(), b"}");
        assert_eq!(
            template.headers_json(),
            r#"[["content-type","application/json"]]"#
        );

        // No hole, two holes, an empty hole: no template (the caller takes the slow way).
        assert_eq!(AnswerTemplate::new(&rendered(5), hole.as_bytes()), None);
        let twice = StoredResponse {
            body: format!("[{hole},{hole}]").into_bytes(),
            ..rendered(0)
        };
        assert_eq!(AnswerTemplate::new(&twice, hole.as_bytes()), None);
        assert_eq!(AnswerTemplate::new(&rendered(5), b""), None);
        // A body that a filled value could push over the limit.
        let mut big = vec![b' '; RESPONSE_BODY_BYTES_MAX - 4];
        big.extend_from_slice(b"HOLE");
        let near = StoredResponse {
            body: big,
            ..rendered(0)
        };
        assert_eq!(AnswerTemplate::new(&near, b"HOLE"), None);
    }

    #[test]
    fn judge_replays_only_the_same_completed_request() {
        let (one, two) = (print("one"), print("two"));
        assert_eq!(
            judge(RecordState::Completed, &one, 0, 100, &one, 50),
            Verdict::Replay
        );
        assert_eq!(
            judge(RecordState::Completed, &one, 0, 100, &two, 50),
            Verdict::Mismatch
        );
    }

    #[test]
    fn judge_respects_live_leases_and_takes_over_dead_ones() {
        let one = print("one");
        assert_eq!(
            judge(RecordState::InProgress, &one, 80, 1000, &one, 50),
            Verdict::InFlight { retry_after_ms: 30 }
        );
        assert_eq!(
            judge(RecordState::InProgress, &one, 50, 1000, &one, 50),
            Verdict::TakeOver
        );
        assert_eq!(
            judge(RecordState::InProgress, &one, 10, 1000, &print("two"), 50),
            Verdict::Mismatch
        );
    }

    #[test]
    fn judge_treats_abandoned_and_expired_records_as_free() {
        let (one, two) = (print("one"), print("two"));
        assert_eq!(
            judge(RecordState::Abandoned, &one, 999, 1000, &two, 50),
            Verdict::TakeOver
        );
        assert_eq!(
            judge(RecordState::Completed, &one, 0, 50, &two, 50),
            Verdict::TakeOver
        );
    }

    #[test]
    fn policy_refuses_leases_out_of_bounds_and_retention_below_the_lease() {
        assert!(RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(86_400)).is_ok());
        assert!(RecordPolicy::new(Duration::from_millis(1), Duration::from_secs(1)).is_err());
        assert!(RecordPolicy::new(Duration::from_secs(60), Duration::from_secs(30)).is_err());
        assert!(
            RecordPolicy::new(Duration::from_secs(60), Duration::from_secs(500 * 86_400)).is_err()
        );
    }

    #[test]
    fn responses_over_the_limits_are_refused() {
        let big = StoredResponse {
            status: 200,
            headers: vec![],
            body: vec![0; RESPONSE_BODY_BYTES_MAX + 1],
        };
        assert!(big.validate().is_err());
        let many = StoredResponse {
            status: 200,
            headers: (0..33).map(|i| (format!("h{i}"), String::new())).collect(),
            body: vec![],
        };
        assert!(many.validate().is_err());
    }
}

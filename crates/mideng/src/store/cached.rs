//! Replays from memory: a bounded, in-process cache of completed answers in front of any
//! [`RecordStore`].
//!
//! A completed record never changes until its retention ends: `begin` answers every later
//! request with its key by the same stored response (or refuses a different request under it).
//! So an answer, once seen completed, can be kept in memory and given again without a round
//! trip, as long as the copy
//!
//! - carries the fingerprint of the request that owns the key, and is checked against it (a
//!   different request under a cached key is refused from memory too);
//! - expires no later than the record itself (its `expires_at_ms`, read from the store once,
//!   when the first replay warms the cache), and no later than the cache's own time to live;
//! - is only ever a *completed* record's: in-flight and abandoned keys always go to the store,
//!   which alone decides who proceeds.
//!
//! Everything else goes to the store: the first request with a key, a duplicate while the
//! first runs, a key on another instance (each instance has its own cache and warms it from
//! the shared store on its first replay). The cache is bounded by entry count; the least
//! recently used entries go first. Hashing uses the standard library's per-process keys, since
//! the keys come from clients.
//!
//! A record begun in the caller's own transaction ([`crate::store::sql::SqlStore::begin_in`])
//! does not pass through here: a route built with
//! [`crate::http::RouteConfigBuilder::handler_begins`] asks the cache first
//! ([`RecordStore::recall`]) and tells it of each answer its transaction stored
//! ([`RecordStore::completed`], with a lower bound of the record's expiry) and of each replay
//! it found ([`RecordStore::replayed`]), so that a retry arriving at the same instance is
//! answered from memory from the first.

use std::time::Duration;

use async_trait::async_trait;
use quick_cache::sync::Cache;

use crate::clock;
use crate::error::{InvalidInput, StoreError};
use crate::key::{Fingerprint, IdempotencyKey, Scope};
use crate::record::{Decision, Record, RecordPolicy, RecordState, RecordStore, StoredResponse};

/// Most entries a cache may be given: about a million answers of a few KiB is already more
/// memory than a cache in front of a database should take.
pub const CACHED_ANSWERS_MAX: usize = 1_000_000;

/// Longest time to live of a cached answer: a day (the record's own retention usually ends
/// later, and bounds it when it ends sooner).
pub const CACHED_ANSWER_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone)]
struct Completed {
    fingerprint: Fingerprint,
    response: StoredResponse,
    until_ms: i64,
}

/// A [`RecordStore`] that answers replays of completed records from memory; see the module
/// documentation.
pub struct CachedRecords<S> {
    inner: S,
    answers: Cache<(Scope, IdempotencyKey), Completed>,
    ttl_ms: i64,
}

impl<S> std::fmt::Debug for CachedRecords<S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CachedRecords")
            .field("entries", &self.answers.len())
            .field("ttl_ms", &self.ttl_ms)
            .finish_non_exhaustive()
    }
}

impl<S: RecordStore> CachedRecords<S> {
    /// `inner` with at most `entries` cached answers (1 ..= [`CACHED_ANSWERS_MAX`]), each kept
    /// at most `ttl` (1 ms ..= [`CACHED_ANSWER_TTL_MAX`]) and never past its record's
    /// retention.
    pub fn new(inner: S, entries: usize, ttl: Duration) -> Result<Self, InvalidInput> {
        if !(1..=CACHED_ANSWERS_MAX).contains(&entries) {
            return Err(InvalidInput::CountOutOfRange {
                what: "cached answers",
                min: 1,
                max: u64::try_from(CACHED_ANSWERS_MAX).unwrap_or(u64::MAX),
            });
        }
        if ttl.is_zero() || ttl > CACHED_ANSWER_TTL_MAX {
            return Err(InvalidInput::OutOfRange {
                what: "cached answer time to live",
                min_ms: 1,
                max_ms: CACHED_ANSWER_TTL_MAX.as_secs() * 1000,
            });
        }
        Ok(Self {
            inner,
            answers: Cache::new(entries),
            ttl_ms: clock::duration_ms(ttl),
        })
    }

    /// Answers held now (expired ones included until they are asked for or pushed out).
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether no answer is held.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Remembers the answer the store just replayed, after reading when its record expires.
    /// Not cached when the record read back is not that completed answer (it was purged and
    /// taken again in between): the next replay asks the store again.
    async fn remember(
        &self,
        id: (Scope, IdempotencyKey),
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        now_ms: i64,
    ) {
        let Ok(Some(record)) = self.inner.find_record(&id.0, &id.1).await else {
            return;
        };
        if record.state != RecordState::Completed
            || record.fingerprint != *fingerprint
            || record.response.as_ref() != Some(response)
        {
            return;
        }
        let until_ms = record.expires_at_ms.min(now_ms.saturating_add(self.ttl_ms));
        if until_ms > now_ms {
            self.answers.insert(
                id,
                Completed {
                    fingerprint: *fingerprint,
                    response: response.clone(),
                    until_ms,
                },
            );
        }
    }
}

#[async_trait]
impl<S: RecordStore> RecordStore for CachedRecords<S> {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        if let Some(decision) = self.recall(scope, key, fingerprint) {
            return Ok(decision);
        }
        let now_ms = clock::now_ms();
        let id = (scope.clone(), key.clone());
        let decision = self.inner.begin(scope, key, fingerprint, policy).await?;
        if let Decision::Replay(response) = &decision {
            self.remember(id, fingerprint, response, now_ms).await;
        }
        Ok(decision)
    }

    async fn complete(
        &self,
        lease: &crate::record::Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        self.inner.complete(lease, response).await
    }

    async fn abandon(&self, lease: &crate::record::Lease) -> Result<(), StoreError> {
        self.inner.abandon(lease).await
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.inner.find_record(scope, key).await
    }

    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_expired(now_ms, limit).await
    }

    fn recall(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
    ) -> Option<Decision> {
        let id = (scope.clone(), key.clone());
        let done = self.answers.get(&id)?;
        if done.until_ms <= clock::now_ms() {
            self.answers.remove(&id);
            return None;
        }
        Some(if done.fingerprint == *fingerprint {
            Decision::Replay(done.response)
        } else {
            Decision::Mismatch
        })
    }

    fn completed(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        kept_until_ms: i64,
    ) {
        let now_ms = clock::now_ms();
        let until_ms = kept_until_ms.min(now_ms.saturating_add(self.ttl_ms));
        if until_ms > now_ms {
            self.answers.insert(
                (scope.clone(), key.clone()),
                Completed {
                    fingerprint: *fingerprint,
                    response: response.clone(),
                    until_ms,
                },
            );
        }
    }

    async fn replayed(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
    ) {
        let id = (scope.clone(), key.clone());
        self.remember(id, fingerprint, response, clock::now_ms())
            .await;
    }
}

//! The dedup table: "have I processed this message already?" for consumers of at-least-once
//! deliveries (queue redeliveries, channel callbacks, reconciliation racing callbacks).
//!
//! An entry is identified by a kind (`entitlement.grant`) and a key (the payment number). It is
//! the idempotency-record table under a reserved tenant, without a stored response: the same
//! atomic claim, the same leases with take-over, the same fencing, one mechanism tested once.
//! Unlike the "processing forever" rows of hand-made dedup tables, a claim whose worker crashed
//! expires and is taken over by the next delivery.
//!
//! Where the effect lives in the same SQL database, claim and complete inside the effect's
//! transaction (the SQL stores' `begin_in` / `complete_in` with [`DedupTable::identity`]), so
//! the effect and its dedup row commit together.

use std::time::Duration;

use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Scope};
use crate::record::{Decision, Lease, RecordPolicy, RecordStore, StoredResponse};

/// What a delivery must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DedupOutcome {
    /// First delivery (or the earlier worker's claim expired): process it, then complete.
    First(Claim),
    /// Processed before: acknowledge and do nothing.
    Done,
    /// Another worker holds a live claim: retry (redeliver) after `retry_after`.
    InProgress {
        /// Until the current claim runs out.
        retry_after: Duration,
    },
}

/// The right to process one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The underlying lease (its fence is the claim's fencing token).
    pub lease: Lease,
}

/// A dedup table over any record store.
#[derive(Clone, Debug)]
pub struct DedupTable<S> {
    store: S,
    retention: Duration,
}

/// Dedup entries carry no request, so all share one fingerprint and never mismatch.
fn entry_fingerprint() -> Fingerprint {
    Fingerprint::of_parts(&[b"mideng.dedup"])
}

/// The body stored for a processed entry; only its presence matters.
fn done_marker() -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

impl<S: RecordStore> DedupTable<S> {
    /// A dedup table on `store` that remembers processed entries for `retention` (longer than
    /// the longest redelivery window of any producer: a day for channel callbacks, 30 days by
    /// default for funds).
    pub fn new(store: S, retention: Duration) -> Self {
        Self { store, retention }
    }

    /// The scope and key under which an entry is stored, for the transactional forms.
    pub fn identity(
        kind: &str,
        key: &str,
    ) -> Result<(Scope, IdempotencyKey, Fingerprint), StoreError> {
        Ok((
            Scope::dedup(kind)?,
            IdempotencyKey::parse(key)?,
            entry_fingerprint(),
        ))
    }

    /// Claims entry `key` of `kind` for `lease` (how long processing may take).
    pub async fn try_process(
        &self,
        kind: &str,
        key: &str,
        lease: Duration,
    ) -> Result<DedupOutcome, StoreError> {
        let (scope, key, fingerprint) = Self::identity(kind, key)?;
        let policy = RecordPolicy::new(lease, self.retention.max(lease))?;
        match self
            .store
            .begin(&scope, &key, &fingerprint, &policy)
            .await?
        {
            Decision::Proceed(lease) => Ok(DedupOutcome::First(Claim { lease })),
            Decision::Replay(_) => Ok(DedupOutcome::Done),
            Decision::InFlight { retry_after } => Ok(DedupOutcome::InProgress { retry_after }),
            Decision::Mismatch => Err(StoreError::Corrupt(
                "a dedup entry has a foreign fingerprint".to_owned(),
            )),
        }
    }

    /// Marks the entry processed; fails with [`StoreError::StaleLease`] if the claim expired and
    /// another worker took it over.
    pub async fn complete(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.complete(&claim.lease, &done_marker()).await
    }

    /// Gives the entry back unprocessed, so the next delivery processes it.
    pub async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.abandon(&claim.lease).await
    }
}

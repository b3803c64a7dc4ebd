//! The effect and its idempotency record in one transaction, as one call:
//! [`SqlStore::write_once`].
//!
//! A money move that must happen once per request key is three steps that only mean something
//! together: claim the key's record, write the effect, store the answer with the record. Done
//! in one local transaction, a crash anywhere leaves either all three or none, and a retry of
//! the request finds either the stored answer or a free key — never a charge without its
//! answer, never an answer without its charge. `write_once` is that transaction, so that a
//! service writes only its effect and its answer.

use sqlx::Transaction;

use super::engine::{BoxFuture, Dialect, SqlStore, back_off, commit, store_error};
use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Scope};
use crate::limits::CONFLICT_RETRIES_MAX;
use crate::record::{Decision, RecordPolicy, StoredResponse};

/// The record a request claims: its key in its scope, the fingerprint of what it asks, and how
/// long it may hold the key and its answer is kept.
#[derive(Clone, Copy, Debug)]
pub struct Claim<'a> {
    /// Tenant and operation.
    pub scope: &'a Scope,
    /// The request's idempotency key.
    pub key: &'a IdempotencyKey,
    /// What the request asks, so that the key reused for another request is refused.
    pub fingerprint: &'a Fingerprint,
    /// Lease and retention.
    pub policy: RecordPolicy,
}

/// What [`SqlStore::write_once`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Once<T> {
    /// The effect ran and committed with its answer (stored with the record, when there was a
    /// claim).
    Ran(T, StoredResponse),
    /// The effect did not run: the key's record decided (a stored answer to replay, a request
    /// in flight, the key used for another request). Nothing was written.
    Decided(Decision),
}

impl<D: Dialect> SqlStore<D> {
    /// Claims `claim`'s record, runs `work` and stores the answer it returns with the record,
    /// all in one write transaction ([`SqlStore::begin_write`]), and commits. Without a claim
    /// (`None`: a request that came without a key) it runs `work` alone, in the same way.
    ///
    /// A key whose record decides otherwise than "proceed" ([`Decision`]) runs nothing and
    /// writes nothing: [`Once::Decided`]. A taken-over lease (the earlier owner's expired)
    /// proceeds with the raised fence, and only this lease can store the answer.
    ///
    /// Transient conflicts are retried whole, as [`SqlStore::write`] does, so `work` must be
    /// safe to re-run: its only effects are statements on the transaction it is given. It
    /// returns its value and the answer to store (the response a replay will get).
    pub async fn write_once<'e, T, F>(
        &self,
        claim: Option<&Claim<'_>>,
        mut work: F,
    ) -> Result<Once<T>, StoreError>
    where
        F: for<'c> FnMut(
                &'c mut Transaction<'e, D::Db>,
            ) -> BoxFuture<'c, Result<(T, StoredResponse), StoreError>>
            + Send,
    {
        let mut attempt = 0;
        loop {
            let outcome = async {
                let mut transaction: Transaction<'e, D::Db> = self.begin_write().await?;
                let lease = match claim {
                    None => None,
                    Some(claim) => {
                        let decision = self
                            .begin_in(
                                &mut transaction,
                                claim.scope,
                                claim.key,
                                claim.fingerprint,
                                &claim.policy,
                            )
                            .await?;
                        match decision {
                            Decision::Proceed(lease) => Some(lease),
                            decided => {
                                transaction.rollback().await.map_err(store_error::<D>)?;
                                // A replay answers with what another transaction stored: it
                                // must survive a failover first (a rollback waits for nothing).
                                if matches!(decided, Decision::Replay(_)) {
                                    self.fence().await?;
                                }
                                return Ok(Once::Decided(decided));
                            }
                        }
                    }
                };
                let (value, response) = work(&mut transaction).await?;
                if let Some(lease) = &lease {
                    self.complete_in(&mut transaction, lease, &response).await?;
                }
                commit::<D>(transaction).await?;
                Ok(Once::Ran(value, response))
            }
            .await;
            match outcome {
                Err(StoreError::Conflict(_)) if attempt < CONFLICT_RETRIES_MAX => {
                    attempt += 1;
                    back_off(attempt).await;
                }
                other => return other,
            }
        }
    }
}

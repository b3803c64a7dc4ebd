//! The grants port: the consumers of `payment.succeeded` and `refund.succeeded`, each event
//! claimed in the dedup table in the transaction of its effect ([`SqlStore::write_once`]).
//!
//! Invariant held here: one grant per paid order, however often `payment.succeeded` is
//! delivered (the dedup claim commits with the grant; the unique payment number is the guard
//! behind it); a grant is revoked at most once, when its payment is refunded in full.

use async_trait::async_trait;
use mideng::StoreError;
use mideng::dedup::DedupTable;
use mideng::record::{Decision, RecordPolicy, StoredResponse};
use mideng::sqlx::Database;
use mideng::store::sql::{Claim, Dialect, Once, SqlStore};

use crate::domain::events::{GRANT_KIND, Grant, PaymentSucceeded, REVOKE_KIND, RefundSucceeded};
use crate::domain::order::OrderStatus;
use crate::limits::{GRANT_LEASE, GRANT_RETENTION};
use crate::store::rows::{grants, orders};
use crate::store::sql::SqlPay;

/// What a `payment.succeeded` delivery did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantOutcome {
    /// The grant was made (or the event asks for none), and the entry recorded as processed.
    Granted,
    /// The event asks for no grant (no entitlement, or a refund case); recorded as processed.
    NothingToGrant,
    /// Processed before: a redelivery.
    Duplicate,
    /// Another consumer holds the claim right now: deliver again later.
    Busy,
    /// No dedup entry said so, but the grant existed: the unique payment number refused a
    /// second one.
    ConstraintHeld,
}

/// What a `refund.succeeded` delivery did to the payment's grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// The grant was revoked now.
    Revoked,
    /// Nothing to revoke: a partial refund, no grant, or revoked already (the compare-and-set
    /// found it set).
    NothingToRevoke,
    /// Processed before: a redelivery.
    Duplicate,
    /// Another consumer holds the claim right now: deliver again later.
    Busy,
}

/// What a consumer's claim answers with: the entry was processed.
fn processed() -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// The dedup entry of `kind` for `id`, claimed with the effect.
fn entry_claim<D: Dialect>(
    kind: &str,
    id: &str,
) -> Result<
    (
        mideng::Scope,
        mideng::IdempotencyKey,
        mideng::Fingerprint,
        RecordPolicy,
    ),
    StoreError,
> {
    let (scope, key, fingerprint) = DedupTable::<SqlStore<D>>::identity(kind, id)?;
    Ok((
        scope,
        key,
        fingerprint,
        RecordPolicy::new(GRANT_LEASE, GRANT_RETENTION)?,
    ))
}

/// A claim that is neither "proceed" nor a replay: busy, or a foreign entry under our key.
fn undecided<T>(decision: Decision, busy: T) -> Result<Option<T>, StoreError> {
    match decision {
        Decision::Replay(_) => Ok(None),
        Decision::InFlight { .. } => Ok(Some(busy)),
        Decision::Proceed(_) | Decision::Mismatch => Err(StoreError::Corrupt(
            "a dedup entry has a foreign fingerprint".to_owned(),
        )),
    }
}

/// The grant `event` asks for, in the caller's transaction. Events arrive unordered: the
/// payment may have been refunded in full before its grant is made (its `refund.succeeded`
/// handled first, with no grant to revoke). The order's row lock orders this grant against the
/// last refund, which moves the order to REFUNDED; a grant made after that is made revoked.
async fn grant_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    now_ms: i64,
) -> Result<GrantOutcome, StoreError> {
    if event.grant().is_none() {
        return Ok(GrantOutcome::NothingToGrant);
    }
    let refunded = orders::find_order::<D>(connection, &event.tenant_id, &event.order_id, true)
        .await?
        .is_some_and(|order| order.status == OrderStatus::Refunded);
    Ok(
        if grants::insert_grant::<D>(connection, event, refunded, now_ms).await? {
            GrantOutcome::Granted
        } else {
            // The unique payment number held although the dedup row was gone (purged early,
            // or no claim): the deeper guard caught a second grant.
            GrantOutcome::ConstraintHeld
        },
    )
}

/// Entitlement grants: one per paid order, claimed in the dedup table in the grant's transaction.
#[async_trait]
pub trait Grants: Send + Sync {
    /// Grants what `event` asks for, claimed in the dedup table (kind `entitlement.grant`, key
    /// the payment number) in the same transaction as the grant.
    async fn grant(
        &self,
        event: &PaymentSucceeded,
        dedup: bool,
    ) -> Result<GrantOutcome, StoreError>;
    /// The user's grants, newest first (at most 100).
    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<Grant>, StoreError>;
    /// Revokes the grant of a payment that `event` refunded in full, claimed in the dedup
    /// table (kind `entitlement.revoke`, key the refund number) in the same transaction.
    async fn revoke(&self, event: &RefundSucceeded) -> Result<RevokeOutcome, StoreError>;
}

#[async_trait]
impl<D: Dialect> Grants for SqlPay<D> {
    async fn grant(
        &self,
        event: &PaymentSucceeded,
        dedup: bool,
    ) -> Result<GrantOutcome, StoreError> {
        let _timer = self.timer("grants.grant");
        let now_ms = self.now_ms();
        // The storm's test switch (`dedup` off): no claim; the grant's unique payment number
        // still holds.
        let entry = entry_claim::<D>(GRANT_KIND, &event.payment_no)?;
        let claim = dedup.then_some(Claim {
            scope: &entry.0,
            key: &entry.1,
            fingerprint: &entry.2,
            policy: entry.3,
        });
        let once = self
            .store
            .write_once(claim.as_ref(), |transaction| {
                Box::pin(async move {
                    let outcome = grant_in::<D>(transaction, event, now_ms).await?;
                    Ok((outcome, processed()))
                })
            })
            .await?;
        Ok(match once {
            Once::Ran(outcome, _) => outcome,
            Once::Decided(decision) => {
                undecided(decision, GrantOutcome::Busy)?.unwrap_or(GrantOutcome::Duplicate)
            }
        })
    }

    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<Grant>, StoreError> {
        let _timer = self.timer("grants.grants");
        let mut connection = self.connection().await?;
        grants::grants_for_user::<D>(&mut connection, tenant_id, user_id).await
    }

    async fn revoke(&self, event: &RefundSucceeded) -> Result<RevokeOutcome, StoreError> {
        let _timer = self.timer("grants.revoke");
        let now_ms = self.now_ms();
        let entry = entry_claim::<D>(REVOKE_KIND, &event.refund_no)?;
        let claim = Claim {
            scope: &entry.0,
            key: &entry.1,
            fingerprint: &entry.2,
            policy: entry.3,
        };
        let once = self
            .store
            .write_once(Some(&claim), |transaction| {
                Box::pin(async move {
                    // Only a refund in full revokes; the compare-and-set finds a grant revoked
                    // already.
                    let revoked = event.payment_refunded
                        && grants::revoke_grant::<D>(
                            transaction,
                            &event.tenant_id,
                            &event.payment_no,
                            now_ms,
                        )
                        .await?;
                    let outcome = if revoked {
                        RevokeOutcome::Revoked
                    } else {
                        RevokeOutcome::NothingToRevoke
                    };
                    Ok((outcome, processed()))
                })
            })
            .await?;
        Ok(match once {
            Once::Ran(outcome, _) => outcome,
            Once::Decided(decision) => {
                undecided(decision, RevokeOutcome::Busy)?.unwrap_or(RevokeOutcome::Duplicate)
            }
        })
    }
}

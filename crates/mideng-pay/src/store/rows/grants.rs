//! Entitlement grants in storage: one per payment, by the primary key (derived from the
//! payment number) and by a unique payment number — the last guards behind the consumer's
//! dedup claim.
//!
//! A grant is revoked at most once, when its payment is refunded in full (the revocation
//! consumer of `refund.succeeded`: a dedup claim per refund and a compare-and-set on
//! `revoked_at`).
//!
//! Invariant held here: one grant per paid order, however often `payment.succeeded` is
//! delivered (the dedup claim commits with the grant; the unique payment number is the guard
//! behind it).

use async_trait::async_trait;
use mideng::dedup::DedupTable;
use mideng::record::{Decision, RecordPolicy, StoredResponse};
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, SqlStore, store_error};
use mideng::{StoreError, dialect_sql};

use super::orders;
use super::sql::SqlPay;
use crate::domain::events::{GRANT_KIND, Grant, PaymentSucceeded, REVOKE_KIND, RefundSucceeded};
use crate::domain::order::OrderStatus;
use crate::limits::{GRANT_LEASE, GRANT_RETENTION};

/// Inserts a grant; a second grant for the payment (primary key or unique payment number)
/// inserts nothing.
const GRANT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_grants (grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

/// Inserts the grant `event` asks for; `false` if the payment had its grant already.
pub async fn insert_grant<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let Some(item) = event.grant() else {
        return Ok(false);
    };
    // Events arrive unordered: the payment may have been refunded in full before its grant is
    // made (its `refund.succeeded` handled first, with no grant to revoke). The order's row
    // lock orders this grant against the last refund, which moves the order to REFUNDED; a
    // grant made after that is made revoked.
    let refunded = orders::find_order::<D>(connection, &event.tenant_id, &event.order_id, true)
        .await?
        .is_some_and(|order| order.status == OrderStatus::Refunded);
    let grant_no = event.grant_no();
    let inserted = connection
        .run(
            GRANT_INSERT.get::<D>(),
            &[
                Arg::Text(&grant_no),
                Arg::Text(&event.tenant_id),
                Arg::Text(&event.user_id),
                Arg::Text(&event.payment_no),
                Arg::Text(&event.order_id),
                Arg::Text(&item.sku),
                Arg::Int(item.quantity),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted == 1 && refunded {
        connection
            .run(
                GRANT_REVOKE.get::<D>(),
                &[
                    Arg::Int(now_ms),
                    Arg::Text(&event.tenant_id),
                    Arg::Text(&event.payment_no),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(inserted == 1)
}

/// The user's grants, newest first, bounded.
const GRANTS_SELECT_BY_USER: PerDialect<&str> = dialect_sql!(
    "SELECT grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at, revoked_at FROM pay_grants"
    " WHERE tenant_id = " ? " AND user_id = " ? " ORDER BY created_at DESC, grant_no LIMIT 100"
);

/// The user's grants, newest first (at most 100).
pub async fn grants_for_user<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
) -> Result<Vec<Grant>, StoreError> {
    let rows = connection
        .rows(
            GRANTS_SELECT_BY_USER.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(user_id)],
        )
        .await
        .map_err(store_error::<D>)?;
    let read =
        |error: mideng::sqlx::Error| StoreError::Corrupt(format!("unreadable grant: {error}"));
    rows.iter()
        .map(|row| {
            Ok(Grant {
                grant_no: row.text(0).map_err(read)?,
                tenant_id: row.text(1).map_err(read)?,
                user_id: row.text(2).map_err(read)?,
                payment_no: row.text(3).map_err(read)?,
                order_id: row.text(4).map_err(read)?,
                sku: row.text(5).map_err(read)?,
                quantity: row.int(6).map_err(read)?,
                created_at_ms: row.int(7).map_err(read)?,
                revoked_at_ms: row.opt_int(8).map_err(read)?,
            })
        })
        .collect()
}

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

/// The consumer's transaction: dedup claim, grant, claim completed — all or nothing, so a
/// crash before the commit leaves neither the grant nor the claim's completion, and a crash
/// after it (before the broker ack) finds the entry done on redelivery.
async fn grant_on<D: Dialect>(
    store: &SqlStore<D>,
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    dedup: bool,
    now_ms: i64,
) -> Result<GrantOutcome, StoreError> {
    if !dedup {
        // The storm's test switch: no claim; the grant's unique payment number still holds.
        return Ok(if event.grant().is_none() {
            GrantOutcome::NothingToGrant
        } else if insert_grant::<D>(connection, event, now_ms).await? {
            GrantOutcome::Granted
        } else {
            GrantOutcome::ConstraintHeld
        });
    }
    let (scope, key, fingerprint) =
        DedupTable::<SqlStore<D>>::identity(GRANT_KIND, &event.payment_no)?;
    let policy = RecordPolicy::new(GRANT_LEASE, GRANT_RETENTION)?;
    let lease = match store
        .begin_in(connection, &scope, &key, &fingerprint, &policy)
        .await?
    {
        Decision::Proceed(lease) => lease,
        Decision::Replay(_) => return Ok(GrantOutcome::Duplicate),
        Decision::InFlight { .. } => return Ok(GrantOutcome::Busy),
        Decision::Mismatch => {
            return Err(StoreError::Corrupt(
                "a dedup entry has a foreign fingerprint".to_owned(),
            ));
        }
    };
    let outcome = if event.grant().is_none() {
        GrantOutcome::NothingToGrant
    } else if insert_grant::<D>(connection, event, now_ms).await? {
        GrantOutcome::Granted
    } else {
        // The unique payment number held although the dedup row was gone (purged early):
        // the deeper guard caught a second grant.
        GrantOutcome::ConstraintHeld
    };
    let processed = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
    };
    store.complete_in(connection, &lease, &processed).await?;
    Ok(outcome)
}

/// Revokes the grant of a payment refunded in full, if it is not revoked yet.
const GRANT_REVOKE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_grants SET revoked_at = " ? " WHERE tenant_id = " ? " AND payment_no = " ?
    " AND revoked_at IS NULL"
);

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

/// The revocation consumer's transaction: dedup claim (kind `entitlement.revoke`, key the
/// refund number), the revocation by compare-and-set, the claim completed.
async fn revoke_on<D: Dialect>(
    store: &SqlStore<D>,
    connection: &mut <D::Db as Database>::Connection,
    event: &RefundSucceeded,
    now_ms: i64,
) -> Result<RevokeOutcome, StoreError> {
    let (scope, key, fingerprint) =
        DedupTable::<SqlStore<D>>::identity(REVOKE_KIND, &event.refund_no)?;
    let policy = RecordPolicy::new(GRANT_LEASE, GRANT_RETENTION)?;
    let lease = match store
        .begin_in(connection, &scope, &key, &fingerprint, &policy)
        .await?
    {
        Decision::Proceed(lease) => lease,
        Decision::Replay(_) => return Ok(RevokeOutcome::Duplicate),
        Decision::InFlight { .. } => return Ok(RevokeOutcome::Busy),
        Decision::Mismatch => {
            return Err(StoreError::Corrupt(
                "a dedup entry has a foreign fingerprint".to_owned(),
            ));
        }
    };
    let outcome = if event.payment_refunded
        && connection
            .run(
                GRANT_REVOKE.get::<D>(),
                &[
                    Arg::Int(now_ms),
                    Arg::Text(&event.tenant_id),
                    Arg::Text(&event.payment_no),
                ],
            )
            .await
            .map_err(store_error::<D>)?
            == 1
    {
        RevokeOutcome::Revoked
    } else {
        RevokeOutcome::NothingToRevoke
    };
    let processed = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
    };
    store.complete_in(connection, &lease, &processed).await?;
    Ok(outcome)
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
        let store = &self.store;
        self.store
            .write(|transaction| Box::pin(grant_on::<D>(store, transaction, event, dedup, now_ms)))
            .await
    }

    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<Grant>, StoreError> {
        let _timer = self.timer("grants.grants");
        let mut connection = self.connection().await?;
        grants_for_user::<D>(&mut connection, tenant_id, user_id).await
    }

    async fn revoke(&self, event: &RefundSucceeded) -> Result<RevokeOutcome, StoreError> {
        let _timer = self.timer("grants.revoke");
        let now_ms = self.now_ms();
        let store = &self.store;
        self.store
            .write(|transaction| Box::pin(revoke_on::<D>(store, transaction, event, now_ms)))
            .await
    }
}

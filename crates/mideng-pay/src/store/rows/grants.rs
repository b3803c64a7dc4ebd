//! The `pay_grants` rows: one grant per payment, by the primary key (derived from the payment
//! number) and by a unique payment number — the last guard behind the consumer's dedup claim;
//! revoked at most once, by compare-and-set on `revoked_at`.

use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use crate::domain::events::{Grant, PaymentSucceeded};

/// Inserts a grant; a second grant for the payment (primary key or unique payment number)
/// inserts nothing.
const GRANT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_grants (grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

/// Inserts the grant `event` asks for, revoked at once when `revoked` (its payment was refunded
/// in full before the grant was made); `false` if the payment had its grant already, or the
/// event asks for none.
pub async fn insert_grant<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    revoked: bool,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let Some(item) = event.grant() else {
        return Ok(false);
    };
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
    if inserted == 1 && revoked {
        revoke_grant::<D>(connection, &event.tenant_id, &event.payment_no, now_ms).await?;
    }
    Ok(inserted == 1)
}

/// Revokes the grant of a payment refunded in full, if it is not revoked yet.
const GRANT_REVOKE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_grants SET revoked_at = " ? " WHERE tenant_id = " ? " AND payment_no = " ?
    " AND revoked_at IS NULL"
);

/// Revokes the payment's grant unless it is revoked already; true when this call revoked it.
pub async fn revoke_grant<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    payment_no: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            GRANT_REVOKE.get::<D>(),
            &[
                Arg::Int(now_ms),
                Arg::Text(tenant_id),
                Arg::Text(payment_no),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
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

//! Entitlement grants in storage: one per payment, by the primary key (derived from the
//! payment number) and by a unique payment number — the last guards behind the consumer's
//! dedup claim.

use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::store::sql::SqlDialect;
use mideng::store::sql::{Arg, SqlConn, SqlRow, store_error};

use super::statements::PayDialect;
use crate::domain::events::PaymentSucceeded;

/// A grant as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantRow {
    /// Grant number.
    pub grant_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// The holder.
    pub user_id: String,
    /// The payment that paid for it.
    pub payment_no: String,
    /// Its order.
    pub order_id: String,
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: i64,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

struct GrantStatements {
    insert: &'static str,
    select_by_user: &'static str,
}

static POSTGRES: GrantStatements = GrantStatements {
    insert: "INSERT INTO pay_grants (grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    select_by_user: "SELECT grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at FROM pay_grants \
        WHERE tenant_id = $1 AND user_id = $2 ORDER BY created_at DESC, grant_no LIMIT 100",
};

static MYSQL: GrantStatements = GrantStatements {
    insert: "INSERT IGNORE INTO pay_grants (grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    select_by_user: "SELECT grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at FROM pay_grants \
        WHERE tenant_id = ? AND user_id = ? ORDER BY created_at DESC, grant_no LIMIT 100",
};

fn statements<D: PayDialect>() -> &'static GrantStatements {
    match D::KIND {
        SqlDialect::MySql => &MYSQL,
        // SQLite takes PostgreSQL's `$n` placeholders and `ON CONFLICT DO NOTHING`.
        SqlDialect::Postgres | SqlDialect::Sqlite => &POSTGRES,
    }
}

/// Inserts the grant `event` asks for; `false` if the payment had its grant already.
pub async fn insert_grant<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let Some(item) = event.grant() else {
        return Ok(false);
    };
    let grant_no = event.grant_no();
    let inserted = connection
        .run(
            statements::<D>().insert,
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
    Ok(inserted == 1)
}

/// The user's grants, newest first (at most 100).
pub async fn grants_for_user<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
) -> Result<Vec<GrantRow>, StoreError> {
    let rows = connection
        .rows(
            statements::<D>().select_by_user,
            &[Arg::Text(tenant_id), Arg::Text(user_id)],
        )
        .await
        .map_err(store_error::<D>)?;
    let read =
        |error: mideng::sqlx::Error| StoreError::Corrupt(format!("unreadable grant: {error}"));
    rows.iter()
        .map(|row| {
            Ok(GrantRow {
                grant_no: row.text(0).map_err(read)?,
                tenant_id: row.text(1).map_err(read)?,
                user_id: row.text(2).map_err(read)?,
                payment_no: row.text(3).map_err(read)?,
                order_id: row.text(4).map_err(read)?,
                sku: row.text(5).map_err(read)?,
                quantity: row.int(6).map_err(read)?,
                created_at_ms: row.int(7).map_err(read)?,
            })
        })
        .collect()
}

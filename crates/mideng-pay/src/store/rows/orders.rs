//! The `pay_orders` rows: created once per order id (the business key: a repeat with another
//! content is told apart by the creating request's fingerprint), moved along their state
//! machine by compare-and-set on the current status.
//!
//! Invariant held here: one order per tenant and order id (primary key).

use mideng::sqlx::Database;
use mideng::state::StateMachine;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::{corrupt, page_after, read};
use crate::domain::keys::ClientSecret;
use crate::domain::order::{Order, OrderStatus};

/// What inserting an order found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderInsert {
    /// This call created it.
    Created,
    /// It existed (compare fingerprints: the same order again, or a different one).
    Existing(Box<Order>),
}

/// The columns of the order selects, written once for both.
macro_rules! order_columns {
    () => {
        "user_id, amount, currency, status, entitlement_sku, entitlement_quantity, fingerprint, version, client_secret, client_secret_expires_at"
    };
}

/// Columns of the order selects: user_id, amount, currency, status, entitlement_sku,
/// entitlement_quantity, fingerprint, version, client_secret, client_secret_expires_at.
fn decode_order<R: SqlRow>(row: &R, tenant_id: &str, order_id: &str) -> Result<Order, StoreError> {
    Ok(Order {
        tenant_id: tenant_id.to_owned(),
        order_id: order_id.to_owned(),
        user_id: row.text(0).map_err(read)?,
        amount_fen: row.int(1).map_err(read)?,
        currency: row.text(2).map_err(read)?,
        status: OrderStatus::parse(&row.text(3).map_err(read)?)
            .ok_or_else(|| corrupt("unknown order status"))?,
        entitlement_sku: row.opt_text(4).map_err(read)?,
        entitlement_quantity: row.opt_int(5).map_err(read)?,
        fingerprint: row.text(6).map_err(read)?,
        version: row.int(7).map_err(read)?,
        client_secret: row.opt_text(8).map_err(read)?.map(ClientSecret::stored),
        client_secret_expires_at_ms: row.opt_int(9).map_err(read)?,
    })
}

const ORDER_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, order_id FROM pay_orders WHERE tenant_id = " ? " AND order_id = " ?
);

/// A page of the tenant's orders; the order id after the order columns.
const ORDERS_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " order_columns!() ", order_id FROM pay_orders WHERE tenant_id = " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND order_id > " ? "))"
    " ORDER BY created_at, order_id LIMIT " ?
);

/// The tenant's orders in the order they were created, after the order `after` (from the
/// first when `None`), at most `limit`; `None` when `after` is no order of the tenant's.
pub async fn tenant_page<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<Order>>, StoreError> {
    page_after::<D, _>(
        connection,
        ORDER_CURSOR.get::<D>(),
        ORDERS_OF_TENANT.get::<D>(),
        &[Arg::Text(tenant_id)],
        after,
        limit,
        |row| decode_order(row, tenant_id, &row.text(10).map_err(read)?),
    )
    .await
}

/// Inserts an order in CREATED; a duplicate order id inserts nothing, so that the caller reads
/// the existing order instead of handling an error.
const ORDER_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_orders (tenant_id, order_id, user_id, amount, currency, status, entitlement_sku, entitlement_quantity, fingerprint, client_secret, client_secret_expires_at, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", 'CREATED', " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

/// Inserts `order` in CREATED unless an order with its id exists in its tenant.
pub async fn insert_order<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    order: &Order,
    now_ms: i64,
) -> Result<OrderInsert, StoreError> {
    let inserted = connection
        .run(
            ORDER_INSERT.get::<D>(),
            &[
                Arg::Text(&order.tenant_id),
                Arg::Text(&order.order_id),
                Arg::Text(&order.user_id),
                Arg::Int(order.amount_fen),
                Arg::Text(&order.currency),
                Arg::OptText(order.entitlement_sku.as_deref()),
                Arg::OptInt(order.entitlement_quantity),
                Arg::Text(&order.fingerprint),
                Arg::OptText(order.client_secret.as_ref().map(ClientSecret::expose)),
                Arg::OptInt(order.client_secret_expires_at_ms),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted == 1 {
        return Ok(OrderInsert::Created);
    }
    find_order::<D>(connection, &order.tenant_id, &order.order_id, true)
        .await?
        .map(|existing| OrderInsert::Existing(Box::new(existing)))
        .ok_or_else(|| StoreError::Conflict("order vanished after a conflicting insert".to_owned()))
}

/// An order by its key.
const ORDER_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT " order_columns!() " FROM pay_orders WHERE tenant_id = " ? " AND order_id = " ?
);

/// An order by its key, locked until the transaction ends (SQLite's write transaction holds
/// the whole file already).
const ORDER_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " order_columns!() " FROM pay_orders WHERE tenant_id = " ? " AND order_id = " ? for_update
);

/// The order, optionally locked for update until the transaction ends.
pub async fn find_order<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
    lock: bool,
) -> Result<Option<Order>, StoreError> {
    let sql = if lock {
        ORDER_SELECT_LOCKED.get::<D>()
    } else {
        ORDER_SELECT.get::<D>()
    };
    match connection
        .row(sql, &[Arg::Text(tenant_id), Arg::Text(order_id)])
        .await
        .map_err(store_error::<D>)?
    {
        None => Ok(None),
        Some(row) => decode_order(&row, tenant_id, order_id).map(Some),
    }
}

/// The order a client secret opens, with its id after the order columns.
const ORDER_BY_CLIENT_SECRET: PerDialect<&str> = dialect_sql!(
    "SELECT " order_columns!() ", order_id FROM pay_orders WHERE tenant_id = " ? " AND client_secret = " ?
);

/// The tenant's order whose client secret is `secret` (unique across all orders), expired or
/// not: the caller judges the expiry.
pub async fn find_order_by_client_secret<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    secret: &ClientSecret,
) -> Result<Option<Order>, StoreError> {
    match connection
        .row(
            ORDER_BY_CLIENT_SECRET.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(secret.expose())],
        )
        .await
        .map_err(store_error::<D>)?
    {
        None => Ok(None),
        Some(row) => decode_order(&row, tenant_id, &row.text(10).map_err(read)?).map(Some),
    }
}

/// Moves an order to a status if it is still in the expected one: one row changed for exactly
/// one of racing callers.
const ORDER_COMPARE_AND_SET: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_orders SET status = " ? ", version = version + 1, updated_at = " ?
    " WHERE tenant_id = " ? " AND order_id = " ? " AND status = " ?
);

/// Moves the order from `from` to `to` if it is in `from`; true for exactly one of racing
/// callers. The caller checks the transition table first.
pub async fn transition_order<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
    from: OrderStatus,
    to: OrderStatus,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            ORDER_COMPARE_AND_SET.get::<D>(),
            &[
                Arg::Text(to.as_str()),
                Arg::Int(now_ms),
                Arg::Text(tenant_id),
                Arg::Text(order_id),
                Arg::Text(from.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// The fence of the order's lock that a write under the lock carries ([`check_fence`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderFence {
    /// The order's tenant.
    pub tenant_id: String,
    /// The order.
    pub order_id: String,
    /// The lock guard's fence.
    pub fence: u64,
    /// Whether a stale fence refuses the write (always, but for the storm's negative control,
    /// [`crate::flows::BrokenLayer::Fences`], which lets it through and counts it).
    pub enforced: bool,
}

/// Raises the order's fence to the write's, unless the order has seen a higher one.
const ORDER_RAISE_FENCE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_orders SET lock_fence = " ? " WHERE tenant_id = " ? " AND order_id = " ?
    " AND lock_fence <= " ?
);

/// Checks, in the caller's transaction, that no later holder of the order's lock has written:
/// raises the order's fence to `fence`'s, or refuses with [`StoreError::StaleFence`] (the
/// caller's transaction then rolls back). Called last in a transaction, after its other
/// statements, so that the order row is locked after the payment row as everywhere else.
/// `None` (a write without the lock: the layer off, the lock store unreachable) checks nothing.
pub async fn check_fence<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    fence: Option<&OrderFence>,
) -> Result<(), StoreError> {
    let Some(fence) = fence else {
        return Ok(());
    };
    let value = i64::try_from(fence.fence).unwrap_or(i64::MAX);
    let changed = connection
        .run(
            ORDER_RAISE_FENCE.get::<D>(),
            &[
                Arg::Int(value),
                Arg::Text(&fence.tenant_id),
                Arg::Text(&fence.order_id),
                Arg::Int(value),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed == 1 {
        return Ok(());
    }
    // A later holder of the order's lock has written: this holder outlived its lease (a
    // stopped process, a long pause) and acts on what it held. Counted either way, so that the
    // storm's layer table shows the fence at work, or, switched off, what it let through.
    let outcome = if fence.enforced {
        "refused-stale"
    } else {
        "written-stale"
    };
    metrics::counter!(
        crate::metrics::SERVICE_DECISIONS,
        "layer" => "fence", "operation" => "order.write", "outcome" => outcome
    )
    .increment(1);
    if fence.enforced {
        tracing::info!(
            tenant = %fence.tenant_id, order = %fence.order_id, fence = fence.fence,
            "stale fence: a later holder of the order's lock has written; write refused"
        );
        Err(StoreError::StaleFence { fence: fence.fence })
    } else {
        tracing::warn!(
            tenant = %fence.tenant_id, order = %fence.order_id, fence = fence.fence,
            "fenced-off write: committed under an order lock a later holder has used (fences off)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_insert_takes_the_twelve_values_insert_order_binds() {
        assert_eq!(ORDER_INSERT.mysql.matches('?').count(), 12);
        assert_eq!(ORDER_INSERT.postgres.matches('$').count(), 12);
        assert_eq!(ORDER_INSERT.sqlite.matches('$').count(), 12);
    }
}

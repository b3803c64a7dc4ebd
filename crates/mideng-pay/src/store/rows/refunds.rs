//! The `pay_refunds` rows: one refund per tenant and request key (a unique key), moved by
//! compare-and-set on its status. Each function is one statement on the caller's connection.

use mideng::sqlx::Database;
use mideng::state::StateMachine;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::{corrupt, cursor_page, page_after, read};
use crate::domain::refund::{Refund, RefundStatus};

/// The columns of the refund selects, in the order `decode_refund` reads them.
macro_rules! refund_columns {
    () => {
        "refund_no, tenant_id, payment_no, order_id, channel, amount, reason, status, channel_refund_no, refunded_at, created_at"
    };
}

pub(crate) fn decode_refund<R: SqlRow>(row: &R) -> Result<Refund, StoreError> {
    Ok(Refund {
        refund_no: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        payment_no: row.text(2).map_err(read)?,
        order_id: row.text(3).map_err(read)?,
        channel: row.text(4).map_err(read)?,
        amount_fen: row.int(5).map_err(read)?,
        reason: row.text(6).map_err(read)?,
        status: RefundStatus::parse(&row.text(7).map_err(read)?)
            .ok_or_else(|| corrupt("unknown refund status"))?,
        channel_refund_no: row.opt_text(8).map_err(read)?,
        refunded_at_ms: row.opt_int(9).map_err(read)?,
        created_at_ms: row.int(10).map_err(read)?,
    })
}

/// The refund a tenant's request key made, locked until the transaction ends.
const REFUND_SELECT_BY_KEY: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE tenant_id = " ? " AND request_key = " ?
    for_update
);

/// A refund by its number.
const REFUND_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE refund_no = " ?
);

/// A refund by its number, locked until the transaction ends.
const REFUND_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE refund_no = " ? for_update
);

/// A payment's refunds, oldest first, bounded.
const REFUND_SELECT_BY_PAYMENT: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE payment_no = " ?
    " ORDER BY created_at, refund_no LIMIT 100"
);

/// A new PROCESSING refund; a taken request key inserts nothing.
const REFUND_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_refunds (" refund_columns!() ", request_key, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", 'PROCESSING', NULL, NULL, " ? ", " ? ", " ? ")"
    on_conflict_ignore
);

/// A payment's refunds still open (processing, or abnormal and waiting for a person).
const REFUND_COUNT_OPEN: PerDialect<&str> = dialect_sql!(
    "SELECT COUNT(*) FROM pay_refunds WHERE payment_no = " ?
    " AND status IN ('PROCESSING', 'ABNORMAL')"
);

/// Moves a refund to a status if it is still in the expected one.
const REFUND_COMPARE_AND_SET: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_refunds SET status = " ? ", channel_refund_no = " ? ", refunded_at = " ?
    ", updated_at = " ? " WHERE refund_no = " ? " AND status = " ?
);

/// One page of a channel's successful refunds in a time window, after a cursor (refund time,
/// number), oldest first: the refunds a day's bill must show.
const REFUND_SELECT_SUCCEEDED_BETWEEN: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE channel = " ? " AND status = 'SUCCESS'"
    " AND refunded_at >= " ? " AND refunded_at < " ?
    " AND (refunded_at > " ? " OR (refunded_at = " ? " AND refund_no > " ? "))"
    " ORDER BY refunded_at, refund_no LIMIT " ?
);

/// One page of open refunds of every tenant created before a time, after a cursor.
const REFUND_SELECT_OPEN_BEFORE: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE status = 'PROCESSING' AND created_at < " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND refund_no > " ? "))"
    " ORDER BY created_at, refund_no LIMIT " ?
);

/// The refund, optionally locked for update until the transaction ends.
pub async fn find_refund<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund_no: &str,
    lock: bool,
) -> Result<Option<Refund>, StoreError> {
    let sql = if lock {
        REFUND_SELECT_LOCKED.get::<D>()
    } else {
        REFUND_SELECT.get::<D>()
    };
    connection
        .row(sql, &[Arg::Text(refund_no)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_refund)
        .transpose()
}

/// The refund `tenant_id`'s `request_key` made, locked until the transaction ends.
pub async fn find_by_key<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    request_key: &str,
) -> Result<Option<Refund>, StoreError> {
    connection
        .row(
            REFUND_SELECT_BY_KEY.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(request_key)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_refund)
        .transpose()
}

/// Inserts `refund` as PROCESSING under `request_key`; false when the key or the number is
/// taken (nothing inserted).
pub async fn insert_refund<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund: &Refund,
    request_key: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let inserted = connection
        .run(
            REFUND_INSERT.get::<D>(),
            &[
                Arg::Text(&refund.refund_no),
                Arg::Text(&refund.tenant_id),
                Arg::Text(&refund.payment_no),
                Arg::Text(&refund.order_id),
                Arg::Text(&refund.channel),
                Arg::Int(refund.amount_fen),
                Arg::Text(&refund.reason),
                Arg::Int(now_ms),
                Arg::Text(request_key),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(inserted == 1)
}

/// How many of the payment's refunds are still open (PROCESSING, or ABNORMAL and waiting for a
/// person).
pub async fn count_open<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
) -> Result<i64, StoreError> {
    connection
        .row(REFUND_COUNT_OPEN.get::<D>(), &[Arg::Text(payment_no)])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("COUNT without a row"))?
        .int(0)
        .map_err(read)
}

/// Moves `refund` to `moved`'s status, number and time if it is still in `refund`'s status;
/// true for exactly one of racing callers.
pub async fn compare_and_set<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund: &Refund,
    moved: &Refund,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            REFUND_COMPARE_AND_SET.get::<D>(),
            &[
                Arg::Text(moved.status.as_str()),
                Arg::OptText(moved.channel_refund_no.as_deref()),
                Arg::OptInt(moved.refunded_at_ms),
                Arg::Int(now_ms),
                Arg::Text(&refund.refund_no),
                Arg::Text(refund.status.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// The payment's refunds, oldest first (at most 100).
pub async fn refunds_of_payment<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
) -> Result<Vec<Refund>, StoreError> {
    connection
        .rows(
            REFUND_SELECT_BY_PAYMENT.get::<D>(),
            &[Arg::Text(payment_no)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_refund)
        .collect()
}

const REFUND_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, refund_no FROM pay_refunds WHERE tenant_id = " ? " AND refund_no = " ?
);

const REFUNDS_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " refund_columns!() " FROM pay_refunds WHERE tenant_id = " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND refund_no > " ? "))"
    " ORDER BY created_at, refund_no LIMIT " ?
);

/// The tenant's refunds in the order they were created, after the refund `after` (from the
/// first when `None`), at most `limit`; `None` when `after` is no refund of the tenant's.
pub async fn tenant_page<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<Refund>>, StoreError> {
    page_after::<D, _>(
        connection,
        REFUND_CURSOR.get::<D>(),
        REFUNDS_OF_TENANT.get::<D>(),
        &[Arg::Text(tenant_id)],
        after,
        limit,
        decode_refund,
    )
    .await
}

/// One page of `channel`'s SUCCESS refunds refunded in `[from_ms, to_ms)`, after the cursor
/// (refund time, number), oldest first.
pub async fn succeeded_between<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    channel: &str,
    (from_ms, to_ms): (i64, i64),
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<Refund>, StoreError> {
    cursor_page::<D, _>(
        connection,
        REFUND_SELECT_SUCCEEDED_BETWEEN.get::<D>(),
        &[Arg::Text(channel), Arg::Int(from_ms), Arg::Int(to_ms)],
        after,
        limit,
        decode_refund,
    )
    .await
}

/// One page of PROCESSING refunds of every tenant created before `created_before_ms`, after
/// the cursor (creation time, number), oldest first.
pub async fn processing_before<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    created_before_ms: i64,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<Refund>, StoreError> {
    cursor_page::<D, _>(
        connection,
        REFUND_SELECT_OPEN_BEFORE.get::<D>(),
        &[Arg::Int(created_before_ms)],
        after,
        limit,
        decode_refund,
    )
    .await
}

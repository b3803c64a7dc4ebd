//! The `pay_refund_cases` rows: money the channel took that this service will not keep, one
//! case per payment (its primary key), OPEN until its refund is asked. A case is **unsettled**
//! until its refund succeeded: OPEN (automatic refunds off, or its asks used up), or asked with
//! a refund still PROCESSING, ABNORMAL or CLOSED. Unsettled cases are listed for the tenant and
//! counted for the operator ([`unsettled_page`], [`unsettled_count`]): money owed back never
//! hides in a log line.

use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::read;
use crate::domain::charge::CaseKind;
use crate::domain::payment::Payment;

/// A refund case: money the channel took that this service will not keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefundCase {
    /// The charged payment.
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Why.
    pub kind: String,
    /// Fen the channel took.
    pub amount_fen: i64,
    /// When it was found (Unix ms).
    pub created_at_ms: i64,
}

/// A case not settled yet, with where its refund stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsettledCase {
    /// The case.
    pub case: RefundCase,
    /// `OPEN` or `REFUND_ASKED`.
    pub status: String,
    /// The refund asked for it, if one was.
    pub refund_no: Option<String>,
    /// That refund's status (PROCESSING, ABNORMAL, CLOSED), if one was asked.
    pub refund_status: Option<String>,
}

/// The condition of an unsettled case, on `c` (the case) joined with `r` (its refund).
macro_rules! unsettled {
    () => {
        "(c.status = 'OPEN' OR r.status IS NULL OR r.status <> 'SUCCESS')"
    };
}

/// The place of a tenant's case in its list, for a cursor.
const UNSETTLED_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, payment_no FROM pay_refund_cases WHERE tenant_id = " ? " AND payment_no = " ?
);

/// A page of a tenant's unsettled cases, oldest first.
const UNSETTLED_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT c.payment_no, c.tenant_id, c.kind, c.amount, c.created_at, c.status, c.refund_no, r.status"
    " FROM pay_refund_cases c LEFT JOIN pay_refunds r ON r.refund_no = c.refund_no"
    " WHERE c.tenant_id = " ? " AND " unsettled!()
    " AND (c.created_at > " ? " OR (c.created_at = " ? " AND c.payment_no > " ? "))"
    " ORDER BY c.created_at, c.payment_no LIMIT " ?
);

/// Every tenant's unsettled cases, oldest first (for the operator).
const UNSETTLED_ALL: PerDialect<&str> = dialect_sql!(
    "SELECT c.payment_no, c.tenant_id, c.kind, c.amount, c.created_at, c.status, c.refund_no, r.status"
    " FROM pay_refund_cases c LEFT JOIN pay_refunds r ON r.refund_no = c.refund_no"
    " WHERE " unsettled!() " ORDER BY c.created_at, c.payment_no LIMIT " ?
);

/// Every tenant's unsettled cases, counted.
const UNSETTLED_COUNT: PerDialect<&str> = dialect_sql!(
    "SELECT COUNT(*) FROM pay_refund_cases c LEFT JOIN pay_refunds r ON r.refund_no = c.refund_no"
    " WHERE " unsettled!()
);

/// Opens a case again when its refund closed without moving money.
const CASE_REOPEN: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_refund_cases SET status = 'OPEN', refund_no = NULL, updated_at = " ?
    " WHERE refund_no = " ? " AND status = 'REFUND_ASKED'"
);

/// A new OPEN case; a payment's second case inserts nothing.
const CASE_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_refund_cases (payment_no, tenant_id, order_id, kind, amount, status, refund_no, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", 'OPEN', NULL, " ? ", " ? ")" on_conflict_ignore
);

/// Open cases, oldest first.
const CASES_OPEN: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE status = 'OPEN'"
    " ORDER BY created_at, payment_no LIMIT " ?
);

/// A payment's case.
const CASE_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE payment_no = "?
);

/// A payment's open case, locked until the transaction ends.
const CASE_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE payment_no = "
    ? " AND status = 'OPEN'" for_update
);

/// Marks a case asked, with its refund.
const CASE_ASKED: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_refund_cases SET status = 'REFUND_ASKED', refund_no = " ? ", updated_at = " ?
    " WHERE payment_no = " ?
);

fn decode_case<R: SqlRow>(row: &R) -> Result<RefundCase, StoreError> {
    Ok(RefundCase {
        payment_no: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        kind: row.text(2).map_err(read)?,
        amount_fen: row.int(3).map_err(read)?,
        created_at_ms: row.int(4).map_err(read)?,
    })
}

/// Records a refund case for `payment` in the caller's transaction (the one that found it);
/// a payment has one case at most.
pub async fn record_case<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
    kind: CaseKind,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
        .run(
            CASE_INSERT.get::<D>(),
            &[
                Arg::Text(&payment.payment_no),
                Arg::Text(&payment.tenant_id),
                Arg::Text(&payment.order_id),
                Arg::Text(kind.as_str()),
                Arg::Int(payment.amount.fen()),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// Opens again the case whose refund `refund_no` closed without moving money, to be asked
/// once more under its next key.
pub async fn reopen<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund_no: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
        .run(
            CASE_REOPEN.get::<D>(),
            &[Arg::Int(now_ms), Arg::Text(refund_no)],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// The payment's case, open or asked; with `open_locked`, only an OPEN one, locked until the
/// transaction ends.
pub async fn find_case<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    open_locked: bool,
) -> Result<Option<RefundCase>, StoreError> {
    let sql = if open_locked {
        CASE_SELECT_LOCKED.get::<D>()
    } else {
        CASE_SELECT.get::<D>()
    };
    connection
        .row(sql, &[Arg::Text(payment_no)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_case)
        .transpose()
}

/// Open cases, oldest first, at most `limit`.
pub async fn open_cases<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    limit: i64,
) -> Result<Vec<RefundCase>, StoreError> {
    connection
        .rows(CASES_OPEN.get::<D>(), &[Arg::Int(limit)])
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_case)
        .collect()
}

/// Marks the payment's case asked, with its refund `refund_no`.
pub async fn mark_asked<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    refund_no: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
        .run(
            CASE_ASKED.get::<D>(),
            &[
                Arg::Text(refund_no),
                Arg::Int(now_ms),
                Arg::Text(payment_no),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// The tenant's unsettled cases after the case of `after` (from the first when `None`), oldest
/// first, at most `limit`; `None` when `after` is no case of the tenant's.
pub async fn unsettled_page<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<UnsettledCase>>, StoreError> {
    crate::store::sql::page_after::<D, _>(
        connection,
        UNSETTLED_CURSOR.get::<D>(),
        UNSETTLED_OF_TENANT.get::<D>(),
        &[Arg::Text(tenant_id)],
        after,
        limit,
        decode_unsettled,
    )
    .await
}

/// Every tenant's unsettled cases, oldest first, at most `limit`.
pub async fn unsettled_oldest<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    limit: i64,
) -> Result<Vec<UnsettledCase>, StoreError> {
    connection
        .rows(UNSETTLED_ALL.get::<D>(), &[Arg::Int(limit)])
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_unsettled)
        .collect()
}

fn decode_unsettled<R: SqlRow>(row: &R) -> Result<UnsettledCase, StoreError> {
    Ok(UnsettledCase {
        case: decode_case(row)?,
        status: row.text(5).map_err(read)?,
        refund_no: row.opt_text(6).map_err(read)?,
        refund_status: row.opt_text(7).map_err(read)?,
    })
}

/// How many cases of every tenant are unsettled.
pub async fn unsettled_count<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
) -> Result<u64, StoreError> {
    let count = connection
        .row(UNSETTLED_COUNT.get::<D>(), &[])
        .await
        .map_err(store_error::<D>)?
        .map_or(Ok(0), |row| row.int(0).map_err(read))?;
    Ok(u64::try_from(count).unwrap_or(0))
}

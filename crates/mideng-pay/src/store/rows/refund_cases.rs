//! The `pay_refund_cases` rows: money the channel took that this service will not keep, one
//! case per payment (its primary key), OPEN until its refund is asked.

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

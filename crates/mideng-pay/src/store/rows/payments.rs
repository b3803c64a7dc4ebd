//! The `pay_payments` rows: payment attempts, one statement per function, each on the
//! caller's connection and inside the caller's write transaction.
//!
//! Duplicates are answers, never errors: inserting a second pending payment for an order
//! returns the existing one. At most one PENDING and at most one PAID payment per order are
//! held by partial unique indexes (generated flags under unique indexes on MySQL), whatever
//! races the application loses. The running refund total (`refunded`) is reserved and given
//! back here too, by statements that fit only when the total stays within the amount.

use mideng::sqlx::Database;
use mideng::state::StateMachine;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use mideng_channel::ChannelKind;

use super::{corrupt, cursor_page, page_after, read};
use crate::domain::money::{Amount, Currency};
use crate::domain::payment::{Payment, PaymentStatus};

/// What inserting a pending payment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentInsert {
    /// This call created it.
    Created,
    /// The order already has a pending payment: this one.
    ExistingPending(Box<Payment>),
}

/// The columns of the payment selects (and of the insert, which adds `updated_at`), in the
/// order `decode_payment` reads them.
macro_rules! payment_columns {
    () => {
        "payment_no, tenant_id, order_id, channel, amount, currency, status, pay_url, expires_at, channel_trade_no, paid_at, created_at"
    };
}

/// Columns of the payment selects, in `payment_columns!` order.
fn decode_payment<R: SqlRow>(row: &R) -> Result<Payment, StoreError> {
    Ok(Payment {
        payment_no: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        order_id: row.text(2).map_err(read)?,
        channel: ChannelKind::parse(&row.text(3).map_err(read)?)
            .map_err(|_| corrupt("unknown payment channel"))?,
        amount: Amount::new(row.int(4).map_err(read)?)
            .map_err(|_| corrupt("payment amount out of range"))?,
        currency: Currency::parse(&row.text(5).map_err(read)?)
            .map_err(|_| corrupt("unknown payment currency"))?,
        status: PaymentStatus::parse(&row.text(6).map_err(read)?)
            .ok_or_else(|| corrupt("unknown payment status"))?,
        pay_url: row.opt_text(7).map_err(read)?,
        expires_at_ms: row.int(8).map_err(read)?,
        channel_trade_no: row.opt_text(9).map_err(read)?,
        paid_at_ms: row.opt_int(10).map_err(read)?,
        created_at_ms: row.int(11).map_err(read)?,
    })
}

/// Inserts a PENDING payment; a second pending payment for the order (the partial unique index)
/// or a taken payment number inserts nothing, so that the caller reads the existing one.
const PAYMENT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_payments (" payment_columns!() ", updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", 'PENDING', " ? ", " ? ", NULL, NULL, " ? ", " ? ")"
    on_conflict_ignore
);

/// The order's pending payment, locked until the transaction ends.
const PAYMENT_SELECT_PENDING_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE tenant_id = " ? " AND order_id = " ?
    " AND status = 'PENDING'" for_update
);

/// One page of a channel's PAID payments paid in a time window, after a cursor (paid time,
/// number), oldest first: the payments a day's bill must show.
const PAYMENT_SELECT_PAID_BETWEEN: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE channel = " ? " AND status = 'PAID'"
    " AND paid_at >= " ? " AND paid_at < " ?
    " AND (paid_at > " ? " OR (paid_at = " ? " AND payment_no > " ? "))"
    " ORDER BY paid_at, payment_no LIMIT " ?
);

/// Inserts `payment` as PENDING, unless its order has a pending payment already: then that one
/// is returned. The partial unique constraint decides among racing callers.
pub async fn insert_pending_payment<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
    now_ms: i64,
) -> Result<PaymentInsert, StoreError> {
    let inserted = connection
        .run(
            PAYMENT_INSERT.get::<D>(),
            &[
                Arg::Text(&payment.payment_no),
                Arg::Text(&payment.tenant_id),
                Arg::Text(&payment.order_id),
                Arg::Text(payment.channel.as_str()),
                Arg::Int(payment.amount.fen()),
                Arg::Text(payment.currency.as_str()),
                Arg::OptText(payment.pay_url.as_deref()),
                Arg::Int(payment.expires_at_ms),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted == 1 {
        return Ok(PaymentInsert::Created);
    }
    let existing = connection
        .row(
            PAYMENT_SELECT_PENDING_LOCKED.get::<D>(),
            &[Arg::Text(&payment.tenant_id), Arg::Text(&payment.order_id)],
        )
        .await
        .map_err(store_error::<D>)?;
    match existing {
        Some(row) => {
            decode_payment(&row).map(|existing| PaymentInsert::ExistingPending(Box::new(existing)))
        }
        // The pending payment that refused ours was closed or paid before we could read it:
        // a transient race, to retry whole.
        None => Err(StoreError::Conflict(
            "the conflicting pending payment moved on".to_owned(),
        )),
    }
}

/// A payment by its number.
const PAYMENT_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE payment_no = " ?
);

/// A payment by its number, locked until the transaction ends.
const PAYMENT_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE payment_no = " ? for_update
);

/// The payment, optionally locked for update until the transaction ends.
pub async fn find_payment<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    lock: bool,
) -> Result<Option<Payment>, StoreError> {
    let sql = if lock {
        PAYMENT_SELECT_LOCKED.get::<D>()
    } else {
        PAYMENT_SELECT.get::<D>()
    };
    match connection
        .row(sql, &[Arg::Text(payment_no)])
        .await
        .map_err(store_error::<D>)?
    {
        None => Ok(None),
        Some(row) => decode_payment(&row).map(Some),
    }
}

/// Moves a payment to PAID with the channel's trade number, if it is still in the status read
/// under its row lock.
const PAYMENT_MARK_PAID: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET status = 'PAID', channel_trade_no = " ? ", paid_at = " ?
    ", updated_at = " ? " WHERE payment_no = " ? " AND status = " ?
);

/// Moves `payment` to PAID with the channel's trade number and time, if it is still in the
/// status it was read in (under its row lock, so it is); true when it moved.
pub async fn mark_paid<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
    channel_trade_no: &str,
    paid_at_ms: i64,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            PAYMENT_MARK_PAID.get::<D>(),
            &[
                Arg::Text(channel_trade_no),
                Arg::Int(paid_at_ms),
                Arg::Int(now_ms),
                Arg::Text(&payment.payment_no),
                Arg::Text(payment.status.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// The order's payments, oldest first, bounded.
const PAYMENT_SELECT_BY_ORDER: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE tenant_id = " ? " AND order_id = " ?
    " ORDER BY created_at, payment_no LIMIT 100"
);

/// The order's payments, oldest first (at most 100).
pub async fn payments_for_order<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
) -> Result<Vec<Payment>, StoreError> {
    connection
        .rows(
            PAYMENT_SELECT_BY_ORDER.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(order_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_payment)
        .collect()
}

/// The order's PAID payment (a unique index allows one).
const PAYMENT_SELECT_PAID_FOR_ORDER: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE tenant_id = " ? " AND order_id = " ?
    " AND status = 'PAID'"
);

/// The order's PAID payment, if any (there is at most one).
pub async fn paid_payment_for_order<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
) -> Result<Option<Payment>, StoreError> {
    connection
        .row(
            PAYMENT_SELECT_PAID_FOR_ORDER.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(order_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_payment)
        .transpose()
}

/// Sets the pay URL of a payment that is still pending.
const PAYMENT_SET_PAY_URL: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET pay_url = " ? ", updated_at = " ? " WHERE payment_no = " ?
    " AND status = 'PENDING'"
);

/// Records the channel's pay URL on a payment that is still pending.
pub async fn set_pay_url<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    pay_url: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            PAYMENT_SET_PAY_URL.get::<D>(),
            &[Arg::Text(pay_url), Arg::Int(now_ms), Arg::Text(payment_no)],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// Moves a payment to a status if it is still in the expected one: one row changed for exactly
/// one of racing callers.
const PAYMENT_COMPARE_AND_SET: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET status = " ? ", updated_at = " ? " WHERE payment_no = " ?
    " AND status = " ?
);

/// Moves the payment from `from` to `to` if it is in `from`; true for exactly one of racing
/// callers. The caller checks the transition table first.
pub async fn transition_payment<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    from: PaymentStatus,
    to: PaymentStatus,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            PAYMENT_COMPARE_AND_SET.get::<D>(),
            &[
                Arg::Text(to.as_str()),
                Arg::Int(now_ms),
                Arg::Text(payment_no),
                Arg::Text(from.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// One page of old pending payments of every tenant, after a (creation time, payment number)
/// cursor; the cursor's time is bound twice because each parameter is used once.
const PAYMENT_SELECT_PENDING_BEFORE: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE status = 'PENDING' AND created_at < " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND payment_no > " ? "))"
    " ORDER BY created_at, payment_no LIMIT " ?
);

/// [`PAYMENT_SELECT_PENDING_BEFORE`] for one tenant.
const PAYMENT_SELECT_PENDING_BEFORE_FOR_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE tenant_id = " ?
    " AND status = 'PENDING' AND created_at < " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND payment_no > " ? "))"
    " ORDER BY created_at, payment_no LIMIT " ?
);

/// Pending payments created before `created_before_ms` (of one tenant, or of all), oldest
/// first, after the `after` cursor (creation time, payment number; `None`: from the start), at
/// most `limit`.
pub async fn pending_before<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: Option<&str>,
    created_before_ms: i64,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<Payment>, StoreError> {
    match tenant_id {
        Some(tenant_id) => {
            cursor_page::<D, _>(
                connection,
                PAYMENT_SELECT_PENDING_BEFORE_FOR_TENANT.get::<D>(),
                &[Arg::Text(tenant_id), Arg::Int(created_before_ms)],
                after,
                limit,
                decode_payment,
            )
            .await
        }
        None => {
            cursor_page::<D, _>(
                connection,
                PAYMENT_SELECT_PENDING_BEFORE.get::<D>(),
                &[Arg::Int(created_before_ms)],
                after,
                limit,
                decode_payment,
            )
            .await
        }
    }
}

const PAYMENT_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, payment_no FROM pay_payments WHERE tenant_id = " ? " AND payment_no = " ?
);

const PAYMENTS_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " payment_columns!() " FROM pay_payments WHERE tenant_id = " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND payment_no > " ? "))"
    " ORDER BY created_at, payment_no LIMIT " ?
);

/// The tenant's payments in the order they were created, after the payment `after` (from the
/// first when `None`), at most `limit`; `None` when `after` is no payment of the tenant's.
pub async fn tenant_page<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<Payment>>, StoreError> {
    page_after::<D, _>(
        connection,
        PAYMENT_CURSOR.get::<D>(),
        PAYMENTS_OF_TENANT.get::<D>(),
        &[Arg::Text(tenant_id)],
        after,
        limit,
        decode_payment,
    )
    .await
}

/// One page of `channel`'s PAID payments paid in `[from_ms, to_ms)`, after the `after` cursor
/// (paid time, payment number), oldest first, at most `limit`.
pub async fn paid_between<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    channel: &str,
    (from_ms, to_ms): (i64, i64),
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<Payment>, StoreError> {
    cursor_page::<D, _>(
        connection,
        PAYMENT_SELECT_PAID_BETWEEN.get::<D>(),
        &[Arg::Text(channel), Arg::Int(from_ms), Arg::Int(to_ms)],
        after,
        limit,
        decode_payment,
    )
    .await
}

// The running refund total.

/// Reserves a refund's amount on a PAID payment, if that keeps its running total within its
/// amount: one row for exactly the refunds that fit.
const PAYMENT_RESERVE_REFUND: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET refunded = refunded + " ? ", updated_at = " ? " WHERE payment_no = " ?
    " AND status = 'PAID' AND refunded + " ? " <= amount"
);

/// Gives a closed refund's amount back.
const PAYMENT_RELEASE_REFUND: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET refunded = refunded - " ? ", updated_at = " ? " WHERE payment_no = " ?
);

/// A payment's running refund total.
const PAYMENT_SELECT_REFUNDED: PerDialect<&str> =
    dialect_sql!("SELECT refunded FROM pay_payments WHERE payment_no = "?);

/// Reserves a case's amount on a charged payment (PAID, or CLOSED or FAILED here but charged
/// at the channel), within its amount.
const PAYMENT_RESERVE_CASE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET refunded = refunded + " ? ", updated_at = " ? " WHERE payment_no = " ?
    " AND status <> 'PENDING' AND refunded + " ? " <= amount"
);

/// Which payments a reservation of refund money fits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// A merchant's refund: the payment must be PAID.
    Paid,
    /// A refund case's refund: any charged payment (PAID, or CLOSED or FAILED here but charged
    /// at the channel).
    Charged,
}

/// Adds `amount_fen` to the payment's running refund total if the payment is of the kind
/// `reserve` names and the total stays within its amount; true when it fit.
pub async fn reserve_refund<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    amount_fen: i64,
    reserve: Reserve,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let sql = match reserve {
        Reserve::Paid => PAYMENT_RESERVE_REFUND.get::<D>(),
        Reserve::Charged => PAYMENT_RESERVE_CASE.get::<D>(),
    };
    let reserved = connection
        .run(
            sql,
            &[
                Arg::Int(amount_fen),
                Arg::Int(now_ms),
                Arg::Text(payment_no),
                Arg::Int(amount_fen),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(reserved == 1)
}

/// Gives a closed refund's `amount_fen` back to the payment's running total.
pub async fn release_refund<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    amount_fen: i64,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
        .run(
            PAYMENT_RELEASE_REFUND.get::<D>(),
            &[
                Arg::Int(amount_fen),
                Arg::Int(now_ms),
                Arg::Text(payment_no),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// The payment's running refund total (`None`: no such payment).
pub async fn refunded<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
) -> Result<Option<i64>, StoreError> {
    connection
        .row(PAYMENT_SELECT_REFUNDED.get::<D>(), &[Arg::Text(payment_no)])
        .await
        .map_err(store_error::<D>)?
        .map(|row| row.int(0).map_err(read))
        .transpose()
}

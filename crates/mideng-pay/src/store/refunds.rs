//! Refunds in storage: the writes whose races the database decides.
//!
//! Invariants held here:
//! - a payment's refunds that are not CLOSED never add up to more than its amount: opening a
//!   refund reserves its amount on the payment's running total (`refunded`) with one
//!   conditional update under the payment's row lock, and a CHECK refuses a total above the
//!   amount whatever any caller read before;
//! - one refund per tenant and request key (a unique key): a retry, or the same request taken
//!   over after a crash, finds the refund it made and re-asks the channel under its number,
//!   never a new one;
//! - a refund moves by compare-and-set along its state machine; a CLOSED refund gives its
//!   amount back in the same transaction, and a refund that SUCCEEDS writes its
//!   `refund.succeeded` event (the outbox) in the same transaction; the one that completes a
//!   full refund also moves the order to REFUNDED.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::state::StateMachine;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::payments::{corrupt, find_payment, read};
use super::{orders, sql::SqlPay};
use crate::domain::events::{REFUND_SUCCEEDED, RefundSucceeded};
use crate::domain::order::OrderStatus;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::refund::{Refund, RefundStatus};

/// A refund to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRefund<'a> {
    /// Tenant (the payment must be this tenant's).
    pub tenant_id: &'a str,
    /// The client's `Idempotency-Key`: the refund's business key.
    pub request_key: &'a str,
    /// The payment to refund.
    pub payment_no: &'a str,
    /// Fen.
    pub amount_fen: i64,
    /// Why.
    pub reason: &'a str,
    /// The number a new refund gets.
    pub refund_no: &'a str,
}

/// What opening a refund found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenRefund {
    /// A new PROCESSING refund, its amount reserved on the payment.
    Created(Box<Refund>),
    /// The refund this request key made before (a retry, or a takeover after a crash).
    Existing(Box<Refund>),
    /// The request key made a refund of another payment or amount before.
    KeyReused(Box<Refund>),
    /// No such payment in this tenant.
    NoPayment,
    /// The payment is not PAID.
    NotPaid(PaymentStatus),
    /// More than is left to refund: what is left.
    Exceeds {
        /// Fen that can still be refunded.
        refundable_fen: i64,
    },
    /// A refund case whose [`CASE_ASKS_MAX`] refunds the channel all closed: left for a person.
    AsksUsedUp,
    /// The payment's charge is a refund case (paid after its order was canceled): its money
    /// goes back in full through the case, never in part by a merchant's refund.
    InCase,
}

/// What settling a refund with the channel's word did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettledRefund {
    /// The refund moved to the status asked.
    Moved(Box<Refund>),
    /// It was in that status already, or the move is not allowed from where it is: as it is.
    Unchanged(Box<Refund>),
    /// No such refund.
    Unknown,
}

/// The columns of the refund selects, in the order `decode_refund` reads them.
macro_rules! refund_columns {
    () => {
        "refund_no, tenant_id, payment_no, order_id, channel, amount, reason, status, channel_refund_no, refunded_at, created_at"
    };
}

fn decode_refund<R: SqlRow>(row: &R) -> Result<Refund, StoreError> {
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

pub(super) async fn find_refund<D: Dialect>(
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

async fn refundable<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
) -> Result<i64, StoreError> {
    let refunded = connection
        .row(
            PAYMENT_SELECT_REFUNDED.get::<D>(),
            &[Arg::Text(&payment.payment_no)],
        )
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("a locked payment vanished"))?
        .int(0)
        .map_err(read)?;
    Ok(payment.amount_fen.saturating_sub(refunded).max(0))
}

/// Opens a refund under the payment's row lock: the key's refund if it has one, else a new
/// PROCESSING refund whose amount the payment's running total takes, if it fits.
async fn open_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    new: &NewRefund<'_>,
    now_ms: i64,
) -> Result<OpenRefund, StoreError> {
    // The payment's row lock first: every refund of one payment, the same key's duplicates
    // included, passes here one at a time.
    let payment = match find_payment::<D>(connection, new.payment_no, true).await? {
        Some(payment) if payment.tenant_id == new.tenant_id => payment,
        _ => return Ok(OpenRefund::NoPayment),
    };
    if let Some(row) = connection
        .row(
            REFUND_SELECT_BY_KEY.get::<D>(),
            &[Arg::Text(new.tenant_id), Arg::Text(new.request_key)],
        )
        .await
        .map_err(store_error::<D>)?
    {
        let existing = decode_refund(&row)?;
        return Ok(
            if existing.payment_no == new.payment_no && existing.amount_fen == new.amount_fen {
                OpenRefund::Existing(Box::new(existing))
            } else {
                OpenRefund::KeyReused(Box::new(existing))
            },
        );
    }
    if payment.status != PaymentStatus::Paid {
        return Ok(OpenRefund::NotPaid(payment.status));
    }
    // A PAID payment whose order was canceled first is a case too, opened in the transaction
    // that made it PAID (so it is seen here, under the payment's row lock): its whole charge
    // goes back through the case. A merchant's partial refund before it would leave the case
    // unable to refund in full.
    if connection
        .row(CASE_SELECT.get::<D>(), &[Arg::Text(new.payment_no)])
        .await
        .map_err(store_error::<D>)?
        .is_some()
    {
        return Ok(OpenRefund::InCase);
    }
    reserve_and_insert::<D>(
        connection,
        PAYMENT_RESERVE_REFUND.get::<D>(),
        &payment,
        &Opening {
            refund_no: new.refund_no,
            request_key: new.request_key,
            amount_fen: new.amount_fen,
            reason: new.reason,
        },
        now_ms,
    )
    .await
}

/// A refund to open on a locked payment.
struct Opening<'a> {
    refund_no: &'a str,
    request_key: &'a str,
    amount_fen: i64,
    reason: &'a str,
}

/// Reserves the refund's amount on the locked payment by `reserve` (one row only when it fits)
/// and inserts the PROCESSING refund; a taken key or number is a conflict, retried whole.
async fn reserve_and_insert<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    reserve: &'static str,
    payment: &Payment,
    opening: &Opening<'_>,
    now_ms: i64,
) -> Result<OpenRefund, StoreError> {
    let reserved = connection
        .run(
            reserve,
            &[
                Arg::Int(opening.amount_fen),
                Arg::Int(now_ms),
                Arg::Text(&payment.payment_no),
                Arg::Int(opening.amount_fen),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if reserved != 1 {
        return Ok(OpenRefund::Exceeds {
            refundable_fen: refundable::<D>(connection, payment).await?,
        });
    }
    let refund = Refund {
        refund_no: opening.refund_no.to_owned(),
        tenant_id: payment.tenant_id.clone(),
        payment_no: payment.payment_no.clone(),
        order_id: payment.order_id.clone(),
        channel: payment.channel.clone(),
        amount_fen: opening.amount_fen,
        reason: opening.reason.to_owned(),
        status: RefundStatus::Processing,
        channel_refund_no: None,
        refunded_at_ms: None,
        created_at_ms: now_ms,
    };
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
                Arg::Text(opening.request_key),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted != 1 {
        // The key's refund appeared after we looked (or the number was taken): the whole
        // transaction, reservation included, is retried and then finds it.
        return Err(StoreError::Conflict(
            "a refund with this key or number appeared".to_owned(),
        ));
    }
    Ok(OpenRefund::Created(Box::new(refund)))
}

/// Moves the refund to `to` (with the channel's number and time on SUCCESS) if its state
/// machine allows it from where it is; gives the amount back on CLOSED; on SUCCESS writes
/// the event and, when the payment is then refunded in full, moves its order to REFUNDED.
pub(super) async fn settle_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund_no: &str,
    to: RefundStatus,
    succeeded: Option<&mideng_channel::adapter::Refund>,
    now_ms: i64,
) -> Result<SettledRefund, StoreError> {
    // Locks in one order everywhere — the payment, then its refund — so that a settle, a
    // notify and a new refund of one payment queue up instead of deadlocking.
    let Some(unlocked) = find_refund::<D>(connection, refund_no, false).await? else {
        return Ok(SettledRefund::Unknown);
    };
    find_payment::<D>(connection, &unlocked.payment_no, true).await?;
    let Some(refund) = find_refund::<D>(connection, refund_no, true).await? else {
        return Ok(SettledRefund::Unknown);
    };
    if !RefundStatus::allows(refund.status, to) {
        return Ok(SettledRefund::Unchanged(Box::new(refund)));
    }
    let channel_refund_no = succeeded
        .map(|refund| refund.channel_refund_no.as_str())
        .or(refund.channel_refund_no.as_deref());
    let refunded_at_ms = (to == RefundStatus::Success).then(|| {
        succeeded
            .and_then(|refund| refund.refunded_at_ms)
            .unwrap_or(now_ms)
    });
    let changed = connection
        .run(
            REFUND_COMPARE_AND_SET.get::<D>(),
            &[
                Arg::Text(to.as_str()),
                Arg::OptText(channel_refund_no),
                Arg::OptInt(refunded_at_ms),
                Arg::Int(now_ms),
                Arg::Text(refund_no),
                Arg::Text(refund.status.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed != 1 {
        return Err(StoreError::Conflict(
            "refund changed under its row lock".to_owned(),
        ));
    }
    let moved = Refund {
        status: to,
        channel_refund_no: channel_refund_no.map(str::to_owned),
        refunded_at_ms,
        ..refund
    };
    match to {
        RefundStatus::Closed => {
            connection
                .run(
                    PAYMENT_RELEASE_REFUND.get::<D>(),
                    &[
                        Arg::Int(moved.amount_fen),
                        Arg::Int(now_ms),
                        Arg::Text(&moved.payment_no),
                    ],
                )
                .await
                .map_err(store_error::<D>)?;
            // A refund case's refund that moved nothing: the case is open again, to be asked
            // once more under its next key (or left for a person when they are used up).
            connection
                .run(
                    CASE_REOPEN.get::<D>(),
                    &[Arg::Int(now_ms), Arg::Text(refund_no)],
                )
                .await
                .map_err(store_error::<D>)?;
        }
        RefundStatus::Success => succeeded_on::<D>(connection, &moved, now_ms).await?,
        RefundStatus::Processing | RefundStatus::Abnormal => {}
    }
    Ok(SettledRefund::Moved(Box::new(moved)))
}

/// The rest of a refund's success, in its transaction: the order (when the payment is now
/// refunded in full) and the event.
async fn succeeded_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund: &Refund,
    now_ms: i64,
) -> Result<(), StoreError> {
    let payment = find_payment::<D>(connection, &refund.payment_no, false)
        .await?
        .ok_or_else(|| corrupt("a refund without its payment"))?;
    let left = refundable::<D>(connection, &payment).await?;
    let open = connection
        .row(
            REFUND_COUNT_OPEN.get::<D>(),
            &[Arg::Text(&refund.payment_no)],
        )
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("COUNT without a row"))?
        .int(0)
        .map_err(read)?;
    let payment_refunded = left == 0 && open == 0;
    // Only the order's own payment moves the order: a charge it did not keep (a refund case
    // of a FAILED or CLOSED attempt) is given back while the order stays as it is.
    if payment_refunded && payment.status == PaymentStatus::Paid {
        // PAID (or DELIVERED) → REFUNDING → REFUNDED, along the order's declared machine; an
        // order a merchant moved to REFUNDING by hand takes the last step only.
        for from in [OrderStatus::Paid, OrderStatus::Delivered] {
            if orders::transition_order::<D>(
                connection,
                &refund.tenant_id,
                &refund.order_id,
                from,
                OrderStatus::Refunding,
                now_ms,
            )
            .await?
            {
                break;
            }
        }
        orders::transition_order::<D>(
            connection,
            &refund.tenant_id,
            &refund.order_id,
            OrderStatus::Refunding,
            OrderStatus::Refunded,
            now_ms,
        )
        .await?;
    }
    let event = RefundSucceeded {
        tenant_id: refund.tenant_id.clone(),
        refund_no: refund.refund_no.clone(),
        payment_no: refund.payment_no.clone(),
        order_id: refund.order_id.clone(),
        amount: refund.amount_fen,
        channel: refund.channel.clone(),
        channel_refund_no: refund.channel_refund_no.clone().unwrap_or_default(),
        refunded_at_ms: refund.refunded_at_ms.unwrap_or(now_ms),
        payment_refunded,
    };
    let payload = serde_json::to_vec(&event)
        .map_err(|error| StoreError::Corrupt(format!("event not serialisable: {error}")))?;
    super::webhooks::publish_in::<D>(
        connection,
        &refund.tenant_id,
        REFUND_SUCCEEDED,
        &refund.refund_no,
        &payload,
        now_ms,
    )
    .await
}

/// Refunds: opened under the payment's row lock, settled by compare-and-set.
#[async_trait]
pub trait Refunds: Send + Sync {
    /// Opens the request key's refund, or finds the one it made.
    async fn open_refund(&self, new: &NewRefund<'_>) -> Result<OpenRefund, StoreError>;
    /// Moves a refund to `to` if its state machine allows it; `succeeded` carries the
    /// channel's number and time for SUCCESS.
    async fn settle_refund(
        &self,
        refund_no: &str,
        to: RefundStatus,
        succeeded: Option<&mideng_channel::adapter::Refund>,
    ) -> Result<SettledRefund, StoreError>;
    /// A refund.
    async fn refund(&self, refund_no: &str) -> Result<Option<Refund>, StoreError>;
    /// A payment's refunds, oldest first (at most 100).
    async fn refunds_of(&self, payment_no: &str) -> Result<Vec<Refund>, StoreError>;
    /// PROCESSING refunds of every tenant created before `created_before_ms`, oldest first,
    /// after the cursor `after` (creation time, refund number), at most `limit`.
    async fn processing_before(
        &self,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Refund>, StoreError>;
    /// A channel's SUCCESS refunds refunded in `from_ms..to_ms`, oldest first, after the
    /// cursor `after` (refund time, number), at most `limit` (the bill's other direction).
    async fn succeeded_between(
        &self,
        channel: &str,
        from_ms: i64,
        to_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Refund>, StoreError>;
}

#[async_trait]
impl<D: Dialect> Refunds for SqlPay<D> {
    async fn open_refund(&self, new: &NewRefund<'_>) -> Result<OpenRefund, StoreError> {
        let _timer = self.timer("refunds.open_refund");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| Box::pin(open_on::<D>(transaction, new, now_ms)))
            .await
    }

    async fn settle_refund(
        &self,
        refund_no: &str,
        to: RefundStatus,
        succeeded: Option<&mideng_channel::adapter::Refund>,
    ) -> Result<SettledRefund, StoreError> {
        let _timer = self.timer("refunds.settle_refund");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(settle_on::<D>(
                    transaction,
                    refund_no,
                    to,
                    succeeded,
                    now_ms,
                ))
            })
            .await
    }

    async fn refund(&self, refund_no: &str) -> Result<Option<Refund>, StoreError> {
        let _timer = self.timer("refunds.refund");
        let mut connection = self.connection().await?;
        find_refund::<D>(&mut connection, refund_no, false).await
    }

    async fn refunds_of(&self, payment_no: &str) -> Result<Vec<Refund>, StoreError> {
        let _timer = self.timer("refunds.refunds_of");
        let mut connection = self.connection().await?;
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

    async fn succeeded_between(
        &self,
        channel: &str,
        from_ms: i64,
        to_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Refund>, StoreError> {
        let _timer = self.timer("refunds.succeeded_between");
        let mut connection = self.connection().await?;
        super::sql::cursor_page::<D, _>(
            &mut connection,
            REFUND_SELECT_SUCCEEDED_BETWEEN.get::<D>(),
            &[Arg::Text(channel), Arg::Int(from_ms), Arg::Int(to_ms)],
            after,
            i64::from(limit),
            decode_refund,
        )
        .await
    }

    async fn processing_before(
        &self,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Refund>, StoreError> {
        let _timer = self.timer("refunds.processing_before");
        let mut connection = self.connection().await?;
        super::sql::cursor_page::<D, _>(
            &mut connection,
            REFUND_SELECT_OPEN_BEFORE.get::<D>(),
            &[Arg::Int(created_before_ms)],
            after,
            i64::from(limit),
            decode_refund,
        )
        .await
    }
}

pub use crate::domain::charge::CaseKind;

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

/// Refunds asked for one case at most: a refund the channel closes (nothing moved) reopens the
/// case and the next ask takes the next key; after this many the case stays OPEN for a person.
pub const CASE_ASKS_MAX: u32 = 3;

/// The request key of a case's `ask`-th refund (0-based): `auto-<payment_no>`, then
/// `auto-<payment_no>-2`, … — each ask one refund, held by the refunds' unique tenant + key.
pub fn case_request_key(payment_no: &str, ask: u32) -> String {
    if ask == 0 {
        format!("auto-{payment_no}")
    } else {
        format!("auto-{payment_no}-{}", ask + 1)
    }
}

const CASE_REOPEN: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_refund_cases SET status = 'OPEN', refund_no = NULL, updated_at = " ?
    " WHERE refund_no = " ? " AND status = 'REFUND_ASKED'"
);

const CASE_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_refund_cases (payment_no, tenant_id, order_id, kind, amount, status, refund_no, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", 'OPEN', NULL, " ? ", " ? ")" on_conflict_ignore
);

const CASES_OPEN: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE status = 'OPEN'"
    " ORDER BY created_at, payment_no LIMIT " ?
);

const CASE_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE payment_no = "?
);

const CASE_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT payment_no, tenant_id, kind, amount, created_at FROM pay_refund_cases WHERE payment_no = "
    ? " AND status = 'OPEN'" for_update
);

const CASE_ASKED: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_refund_cases SET status = 'REFUND_ASKED', refund_no = " ? ", updated_at = " ?
    " WHERE payment_no = " ?
);

/// Reserves a case's amount on a charged payment (PAID, or CLOSED or FAILED here but charged
/// at the channel), within its amount.
const PAYMENT_RESERVE_CASE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_payments SET refunded = refunded + " ? ", updated_at = " ? " WHERE payment_no = " ?
    " AND status <> 'PENDING' AND refunded + " ? " <= amount"
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
pub(super) async fn record_case<D: Dialect>(
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
                Arg::Int(payment.amount_fen),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// Turns an open case into its one refund: the payment's row lock, the case, the amount
/// reserved, a PROCESSING refund under [`case_request_key`], the case marked asked — or the
/// refund that key made before.
async fn open_case_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    refund_no: &str,
    now_ms: i64,
) -> Result<OpenRefund, StoreError> {
    let Some(payment) = find_payment::<D>(connection, payment_no, true).await? else {
        return Ok(OpenRefund::NoPayment);
    };
    // The first key whose refund the channel did not close: a refund still under way (or
    // given back) is the case's; a key not used yet is the next ask.
    let mut key = None;
    for ask in 0..CASE_ASKS_MAX {
        let candidate = case_request_key(payment_no, ask);
        match connection
            .row(
                REFUND_SELECT_BY_KEY.get::<D>(),
                &[Arg::Text(&payment.tenant_id), Arg::Text(&candidate)],
            )
            .await
            .map_err(store_error::<D>)?
        {
            None => {
                key = Some(candidate);
                break;
            }
            Some(row) => {
                let refund = decode_refund(&row)?;
                if refund.status != RefundStatus::Closed {
                    return Ok(OpenRefund::Existing(Box::new(refund)));
                }
            }
        }
    }
    let Some(key) = key else {
        return Ok(OpenRefund::AsksUsedUp);
    };
    let Some(case) = connection
        .row(CASE_SELECT_LOCKED.get::<D>(), &[Arg::Text(payment_no)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_case)
        .transpose()?
    else {
        return Ok(OpenRefund::NoPayment);
    };
    let opened = reserve_and_insert::<D>(
        connection,
        PAYMENT_RESERVE_CASE.get::<D>(),
        &payment,
        &Opening {
            refund_no,
            request_key: &key,
            amount_fen: case.amount_fen,
            reason: "automatic refund",
        },
        now_ms,
    )
    .await?;
    if matches!(opened, OpenRefund::Created(_)) {
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
    }
    Ok(opened)
}

/// Refund cases: recorded where they are found, each refunded once.
#[async_trait]
pub trait RefundCases: Send + Sync {
    /// Open cases, oldest first, at most `limit`.
    async fn open_cases(&self, limit: u32) -> Result<Vec<RefundCase>, StoreError>;
    /// The case of `payment_no`, open or refunded, if it has one.
    async fn case_of(&self, payment_no: &str) -> Result<Option<RefundCase>, StoreError>;
    /// Turns an open case into its one refund (or finds it).
    async fn open_case_refund(
        &self,
        payment_no: &str,
        refund_no: &str,
    ) -> Result<OpenRefund, StoreError>;
}

#[async_trait]
impl<D: Dialect> RefundCases for SqlPay<D> {
    async fn open_cases(&self, limit: u32) -> Result<Vec<RefundCase>, StoreError> {
        let _timer = self.timer("refund_cases.open_cases");
        let mut connection = self.connection().await?;
        connection
            .rows(CASES_OPEN.get::<D>(), &[Arg::Int(i64::from(limit))])
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(decode_case)
            .collect()
    }

    async fn case_of(&self, payment_no: &str) -> Result<Option<RefundCase>, StoreError> {
        let _timer = self.timer("refund_cases.case_of");
        let mut connection = self.connection().await?;
        connection
            .row(CASE_SELECT.get::<D>(), &[Arg::Text(payment_no)])
            .await
            .map_err(store_error::<D>)?
            .as_ref()
            .map(decode_case)
            .transpose()
    }

    async fn open_case_refund(
        &self,
        payment_no: &str,
        refund_no: &str,
    ) -> Result<OpenRefund, StoreError> {
        let _timer = self.timer("refund_cases.open_case_refund");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(open_case_on::<D>(
                    transaction,
                    payment_no,
                    refund_no,
                    now_ms,
                ))
            })
            .await
    }
}

//! Orders and payment attempts in storage: the writes whose races the database decides.
//!
//! Every function runs on the caller's connection, inside the caller's write transaction
//! (`SqlStore::begin_write`), so that the payment and its order change together and an
//! idempotency record can commit with them. Duplicates are answers, never errors: inserting a
//! second pending payment for an order returns the existing one, and a second success for a
//! payment reports it was paid already.

use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::state::StateMachine;
use mideng::store::sql::{Arg, SqlConn, SqlRow, store_error};

use super::statements::PayDialect;
use crate::domain::events::{GrantedItem, PAYMENT_SUCCEEDED, PaymentSucceeded};
use crate::domain::order::OrderStatus;
use crate::domain::payment::PaymentStatus;

/// An order as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderRow {
    /// Tenant.
    pub tenant_id: String,
    /// The merchant's order id.
    pub order_id: String,
    /// The buyer.
    pub user_id: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// Currency.
    pub currency: String,
    /// Status.
    pub status: OrderStatus,
    /// Granted SKU, if the order carries an entitlement.
    pub entitlement_sku: Option<String>,
    /// Granted quantity.
    pub entitlement_quantity: Option<i64>,
    /// Fingerprint of the creating request, to tell a repeat from a different order.
    pub fingerprint: String,
    /// Number of transitions applied.
    pub version: i64,
}

/// A payment attempt as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentRow {
    /// The payment number (the channel's `out_trade_no`).
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Order.
    pub order_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// Currency.
    pub currency: String,
    /// Status.
    pub status: PaymentStatus,
    /// What the buyer scans.
    pub pay_url: Option<String>,
    /// When the channel stops accepting payment (Unix ms).
    pub expires_at_ms: i64,
    /// The channel's number, once paid.
    pub channel_trade_no: Option<String>,
    /// When it was paid (Unix ms).
    pub paid_at_ms: Option<i64>,
    /// When it was created (Unix ms).
    pub created_at_ms: i64,
}

/// What inserting an order found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderInsert {
    /// This call created it.
    Created,
    /// It existed (compare fingerprints: the same order again, or a different one).
    Existing(Box<OrderRow>),
}

/// What inserting a pending payment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentInsert {
    /// This call created it.
    Created,
    /// The order already has a pending payment: this one.
    ExistingPending(Box<PaymentRow>),
}

/// What applying a channel's success found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuccessOutcome {
    /// This call moved the payment and its order to PAID, in one transaction.
    Paid {
        /// The order moved too (false when it was no longer CREATED, e.g. canceled: the
        /// payment is PAID and the case needs a refund or a manual look).
        order_moved: bool,
    },
    /// It was paid already: a duplicate notify, or reconciliation got there first.
    AlreadyPaid,
    /// The payment failed at creation, or it was closed and the order has another PAID
    /// payment (the buyer was charged twice: a refund for a person to make). Nothing changed.
    NotPending(PaymentStatus),
    /// No such payment.
    UnknownPayment,
    /// The channel's amount is not ours: nothing changes.
    AmountMismatch,
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn read(error: mideng::sqlx::Error) -> StoreError {
    StoreError::Corrupt(format!("unreadable row: {error}"))
}

/// Columns of the order selects: user_id, amount, currency, status, entitlement_sku,
/// entitlement_quantity, fingerprint, version.
fn decode_order<R: SqlRow>(
    row: &R,
    tenant_id: &str,
    order_id: &str,
) -> Result<OrderRow, StoreError> {
    Ok(OrderRow {
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
    })
}

/// Columns of the payment selects, in `payment_columns!` order.
fn decode_payment<R: SqlRow>(row: &R) -> Result<PaymentRow, StoreError> {
    Ok(PaymentRow {
        payment_no: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        order_id: row.text(2).map_err(read)?,
        channel: row.text(3).map_err(read)?,
        amount_fen: row.int(4).map_err(read)?,
        currency: row.text(5).map_err(read)?,
        status: PaymentStatus::parse(&row.text(6).map_err(read)?)
            .ok_or_else(|| corrupt("unknown payment status"))?,
        pay_url: row.opt_text(7).map_err(read)?,
        expires_at_ms: row.int(8).map_err(read)?,
        channel_trade_no: row.opt_text(9).map_err(read)?,
        paid_at_ms: row.opt_int(10).map_err(read)?,
        created_at_ms: row.int(11).map_err(read)?,
    })
}

/// Inserts `order` in CREATED unless an order with its id exists in its tenant.
pub async fn insert_order<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    order: &OrderRow,
    now_ms: i64,
) -> Result<OrderInsert, StoreError> {
    let statements = D::pay_statements();
    let inserted = connection
        .run(
            statements.order_insert,
            &[
                Arg::Text(&order.tenant_id),
                Arg::Text(&order.order_id),
                Arg::Text(&order.user_id),
                Arg::Int(order.amount_fen),
                Arg::Text(&order.currency),
                Arg::OptText(order.entitlement_sku.as_deref()),
                Arg::OptInt(order.entitlement_quantity),
                Arg::Text(&order.fingerprint),
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

/// The order, optionally locked for update until the transaction ends.
pub async fn find_order<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
    lock: bool,
) -> Result<Option<OrderRow>, StoreError> {
    let statements = D::pay_statements();
    let sql = if lock {
        statements.order_select_locked
    } else {
        statements.order_select
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

/// Moves the order from `from` to `to` if it is in `from`; true for exactly one of racing
/// callers. The caller checks the transition table first.
pub async fn transition_order<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
    from: OrderStatus,
    to: OrderStatus,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            D::pay_statements().order_compare_and_set,
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

/// Inserts `payment` as PENDING, unless its order has a pending payment already: then that one
/// is returned. The partial unique constraint decides among racing callers.
pub async fn insert_pending_payment<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &PaymentRow,
    now_ms: i64,
) -> Result<PaymentInsert, StoreError> {
    let statements = D::pay_statements();
    let inserted = connection
        .run(
            statements.payment_insert,
            &[
                Arg::Text(&payment.payment_no),
                Arg::Text(&payment.tenant_id),
                Arg::Text(&payment.order_id),
                Arg::Text(&payment.channel),
                Arg::Int(payment.amount_fen),
                Arg::Text(&payment.currency),
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
            statements.payment_select_pending_locked,
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

/// The payment, optionally locked for update until the transaction ends.
pub async fn find_payment<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    lock: bool,
) -> Result<Option<PaymentRow>, StoreError> {
    let statements = D::pay_statements();
    let sql = if lock {
        statements.payment_select_locked
    } else {
        statements.payment_select
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

/// The success flow: lock the payment, check the amount, compare-and-set it to PAID and its
/// order CREATED → PAID, all in the caller's transaction. Racing callers (duplicate notifies, a
/// notify and reconciliation) serialise on the row lock; exactly one sees it unpaid.
///
/// A CLOSED payment that the channel charged anyway (a late success) becomes PAID too: the
/// charge is the truth, and leaving it CLOSED would hide money taken. Its order moves to PAID if
/// it still waits for payment; otherwise (canceled meanwhile) it stays, and the outcome says so
/// (`order_moved: false`): a refund case. If the order already has another PAID payment, the
/// buyer paid twice: nothing changes ([`SuccessOutcome::NotPending`]) and the caller reports it.
///
/// The `payment.succeeded` event goes into the outbox in the same transaction.
pub async fn apply_success<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    channel_trade_no: &str,
    amount_fen: i64,
    paid_at_ms: i64,
    now_ms: i64,
) -> Result<SuccessOutcome, StoreError> {
    let Some(payment) = find_payment::<D>(connection, payment_no, true).await? else {
        return Ok(SuccessOutcome::UnknownPayment);
    };
    if payment.amount_fen != amount_fen {
        return Ok(SuccessOutcome::AmountMismatch);
    }
    match payment.status {
        PaymentStatus::Paid => return Ok(SuccessOutcome::AlreadyPaid),
        PaymentStatus::Failed => return Ok(SuccessOutcome::NotPending(payment.status)),
        PaymentStatus::Closed => {
            if paid_payment_for_order::<D>(connection, &payment.tenant_id, &payment.order_id)
                .await?
                .is_some()
            {
                return Ok(SuccessOutcome::NotPending(payment.status));
            }
        }
        PaymentStatus::Pending => {}
    }
    let changed = connection
        .run(
            D::pay_statements().payment_mark_paid,
            &[
                Arg::Text(channel_trade_no),
                Arg::Int(paid_at_ms),
                Arg::Int(now_ms),
                Arg::Text(payment_no),
                Arg::Text(payment.status.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed != 1 {
        // The row is locked by this transaction: it cannot have moved since we read it.
        return Err(StoreError::Conflict(
            "payment changed under its row lock".to_owned(),
        ));
    }
    let order_moved = transition_order::<D>(
        connection,
        &payment.tenant_id,
        &payment.order_id,
        OrderStatus::Created,
        OrderStatus::Paid,
        now_ms,
    )
    .await?;
    let order = find_order::<D>(connection, &payment.tenant_id, &payment.order_id, false)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a payment without its order".to_owned()))?;
    let event = PaymentSucceeded {
        tenant_id: payment.tenant_id.clone(),
        payment_no: payment.payment_no.clone(),
        order_id: payment.order_id.clone(),
        user_id: order.user_id,
        amount: payment.amount_fen,
        currency: payment.currency.clone(),
        channel: payment.channel.clone(),
        channel_trade_no: channel_trade_no.to_owned(),
        paid_at_ms,
        order_paid: order_moved,
        entitlement: order
            .entitlement_sku
            .zip(order.entitlement_quantity)
            .map(|(sku, quantity)| GrantedItem { sku, quantity }),
    };
    let payload = serde_json::to_vec(&event)
        .map_err(|error| StoreError::Corrupt(format!("event not serialisable: {error}")))?;
    // Same transaction: the event exists if and only if the payment is PAID.
    mideng::outbox::sql::enqueue_in::<D>(connection, PAYMENT_SUCCEEDED, payment_no, &payload)
        .await?;
    Ok(SuccessOutcome::Paid { order_moved })
}

/// The order's payments, oldest first (at most 100).
pub async fn payments_for_order<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
) -> Result<Vec<PaymentRow>, StoreError> {
    connection
        .rows(
            D::pay_statements().payment_select_by_order,
            &[Arg::Text(tenant_id), Arg::Text(order_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_payment)
        .collect()
}

/// The order's PAID payment, if any (there is at most one).
pub async fn paid_payment_for_order<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    order_id: &str,
) -> Result<Option<PaymentRow>, StoreError> {
    connection
        .row(
            D::pay_statements().payment_select_paid_for_order,
            &[Arg::Text(tenant_id), Arg::Text(order_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_payment)
        .transpose()
}

/// Records the channel's pay URL on a payment that is still pending.
pub async fn set_pay_url<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    pay_url: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            D::pay_statements().payment_set_pay_url,
            &[Arg::Text(pay_url), Arg::Int(now_ms), Arg::Text(payment_no)],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(changed == 1)
}

/// Moves the payment from `from` to `to` if it is in `from`; true for exactly one of racing
/// callers. The caller checks the transition table first.
pub async fn transition_payment<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    from: PaymentStatus,
    to: PaymentStatus,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = connection
        .run(
            D::pay_statements().payment_compare_and_set,
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

/// Pending payments created before `created_before_ms` (of one tenant, or of all), oldest
/// first, after the `after` cursor (creation time, payment number; `None`: from the start), at
/// most `limit`.
pub async fn pending_before<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: Option<&str>,
    created_before_ms: i64,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<PaymentRow>, StoreError> {
    let statements = D::pay_statements();
    let (after_ms, after_no) = after.unwrap_or((i64::MIN, ""));
    let rows = match tenant_id {
        Some(tenant_id) => {
            connection
                .rows(
                    statements.payment_select_pending_before_for_tenant,
                    &[
                        Arg::Text(tenant_id),
                        Arg::Int(created_before_ms),
                        Arg::Int(after_ms),
                        Arg::Int(after_ms),
                        Arg::Text(after_no),
                        Arg::Int(limit),
                    ],
                )
                .await
        }
        None => {
            connection
                .rows(
                    statements.payment_select_pending_before,
                    &[
                        Arg::Int(created_before_ms),
                        Arg::Int(after_ms),
                        Arg::Int(after_ms),
                        Arg::Text(after_no),
                        Arg::Int(limit),
                    ],
                )
                .await
        }
    };
    rows.map_err(store_error::<D>)?
        .iter()
        .map(decode_payment)
        .collect()
}

//! The payments port: an attempt opened under its order's row lock, closed, failed, and the
//! success flow — what the channel's charge does here, by the one-PAID rule
//! ([`crate::domain::charge`]).
//!
//! Invariants held here: a payment and its order reach PAID in one transaction with the
//! `payment.succeeded` event (the outbox and its webhook deliveries), and a payment closed
//! unpaid writes `payment.closed` with its move; every write under the order's lock carries
//! its fence ([`crate::store::rows::orders::check_fence`]).

use async_trait::async_trait;
use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::store::sql::Dialect;
use mideng_channel::ChannelKind;

use crate::domain::charge::{self, CaseKind, Charge};
use crate::domain::events::{
    GrantedItem, PAYMENT_CLOSED, PAYMENT_SUCCEEDED, PaymentClosed, PaymentSucceeded,
};
use crate::domain::money::{Amount, Currency};
use crate::domain::order::OrderStatus;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::store::rows::orders::{self, OrderFence};
use crate::store::rows::payments::{
    self, PaymentInsert, find_payment, insert_pending_payment, paid_payment_for_order,
    payments_for_order, transition_payment,
};
use crate::store::rows::{corrupt, refund_cases};
use crate::store::sql::SqlPay;

/// What applying a channel's success found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuccessOutcome {
    /// This call moved the payment and its order to PAID, in one transaction.
    Paid {
        /// The order moved too (false when it was no longer CREATED, e.g. canceled: the
        /// payment is PAID and a refund case was recorded with it).
        order_moved: bool,
        /// A late success (the payment was CLOSED here) made the order PAID while another
        /// attempt of it is still PENDING: that attempt's number, to be closed at the channel
        /// so that the buyer cannot pay it too.
        open_sibling: Option<String>,
    },
    /// It was paid already: a duplicate notify, or reconciliation got there first.
    AlreadyPaid,
    /// Charged at the channel, not kept here (the one-PAID rule,
    /// [`crate::domain::charge`]): the refund case was recorded in the same transaction, and
    /// an attempt that was PENDING is now CLOSED.
    Refunding {
        /// The attempt's status before.
        was: PaymentStatus,
        /// The case's kind.
        kind: CaseKind,
    },
    /// No such payment.
    UnknownPayment,
    /// The channel's amount is not ours: nothing changes.
    AmountMismatch,
}

/// The success flow: what the channel's charge for `payment_no` does here, by the one-PAID
/// rule ([`charge::judge`]), in the caller's transaction under the payment's row lock.
///
/// A charge that is kept moves the payment to PAID (a CLOSED payment too: a late success; the
/// charge is the truth) and its order to PAID if it still waits; an order canceled meanwhile
/// stays canceled and the charge becomes a refund case. A charge that is not kept (the order
/// has another PAID payment, or the attempt failed at creation) becomes a refund case, and a
/// PENDING attempt is closed with it; nothing else changes. Every arrival order of an order's
/// attempts' outcomes therefore ends with one PAID payment and every other charge a case, and
/// the caller never sees an error for a charge it was told about.
///
/// The `payment.succeeded` (or `payment.closed`) event goes into the outbox in the same
/// transaction.
pub async fn apply_success<D: Dialect>(
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
    if payment.amount.fen() != amount_fen {
        return Ok(SuccessOutcome::AmountMismatch);
    }
    let other_paid = payment.status != PaymentStatus::Paid
        && paid_payment_for_order::<D>(connection, &payment.tenant_id, &payment.order_id)
            .await?
            .is_some_and(|paid| paid.payment_no != payment.payment_no);
    let late = match charge::judge(payment.status, other_paid) {
        Charge::Duplicate => return Ok(SuccessOutcome::AlreadyPaid),
        Charge::Refund { kind, close } => {
            if close
                && transition_payment::<D>(
                    connection,
                    payment_no,
                    PaymentStatus::Pending,
                    PaymentStatus::Closed,
                    now_ms,
                )
                .await?
            {
                closed_event::<D>(connection, &payment, now_ms).await?;
            }
            refund_cases::record_case::<D>(connection, &payment, kind, now_ms).await?;
            return Ok(SuccessOutcome::Refunding {
                was: payment.status,
                kind,
            });
        }
        Charge::Keep { late } => late,
    };
    if !payments::mark_paid::<D>(connection, &payment, channel_trade_no, paid_at_ms, now_ms).await?
    {
        // The row is locked by this transaction: it cannot have moved since we read it.
        return Err(StoreError::Conflict(
            "payment changed under its row lock".to_owned(),
        ));
    }
    let order_moved = orders::transition_order::<D>(
        connection,
        &payment.tenant_id,
        &payment.order_id,
        OrderStatus::Created,
        OrderStatus::Paid,
        now_ms,
    )
    .await?;
    let order = orders::find_order::<D>(connection, &payment.tenant_id, &payment.order_id, false)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a payment without its order".to_owned()))?;
    if let Some(kind) = charge::kept_without_order(order_moved) {
        // Paid after its order was canceled: the money goes back, recorded with the payment.
        refund_cases::record_case::<D>(connection, &payment, kind, now_ms).await?;
    }
    let open_sibling = if late && order_moved {
        payments_for_order::<D>(connection, &payment.tenant_id, &payment.order_id)
            .await?
            .into_iter()
            .find(|other| {
                other.status == PaymentStatus::Pending && other.payment_no != payment.payment_no
            })
            .map(|other| other.payment_no)
    } else {
        None
    };
    let event = PaymentSucceeded {
        tenant_id: payment.tenant_id.clone(),
        payment_no: payment.payment_no.clone(),
        order_id: payment.order_id.clone(),
        user_id: order.user_id,
        amount: payment.amount.fen(),
        currency: payment.currency.as_str().to_owned(),
        channel: payment.channel.as_str().to_owned(),
        channel_trade_no: channel_trade_no.to_owned(),
        paid_at_ms,
        order_paid: order_moved,
        entitlement: order
            .entitlement_sku
            .zip(order.entitlement_quantity)
            .map(|(sku, quantity)| GrantedItem { sku, quantity }),
    };
    // Same transaction: the event (and its webhook deliveries) exists if and only if the
    // payment is PAID.
    super::publish_in::<D>(
        connection,
        &payment.tenant_id,
        PAYMENT_SUCCEEDED,
        payment_no,
        &event,
        now_ms,
    )
    .await?;
    Ok(SuccessOutcome::Paid {
        order_moved,
        open_sibling,
    })
}

/// A payment attempt to open for an order: its amount and currency are the order's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPayment {
    /// The payment number it gets (the channel's `out_trade_no`).
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// The order.
    pub order_id: String,
    /// The channel it goes through.
    pub channel: ChannelKind,
    /// When the channel stops accepting payment (Unix ms).
    pub expires_at_ms: i64,
}

/// What opening a payment attempt for an order found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenPayment {
    /// No such order in this tenant.
    NoOrder,
    /// The order was paid: its paid payment.
    OrderPaid(Box<Payment>),
    /// The order is in a status that takes no payment (canceled, refunded…).
    NotPayable(OrderStatus),
    /// A new pending payment.
    Created(Box<Payment>),
    /// The order's pending payment, which existed already.
    ExistingPending(Box<Payment>),
}

/// What the local half of closing a payment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalClose {
    /// PENDING → CLOSED by this call.
    Closed(Box<Payment>),
    /// It was closed already.
    AlreadyClosed(Box<Payment>),
    /// It was paid: nothing closed.
    Paid(Box<Payment>),
    /// It failed at creation: nothing to close.
    Failed(Box<Payment>),
    /// No such payment.
    Unknown,
}

/// Opens a payment attempt under the order's row lock: a new pending payment with the
/// order's amount, the order's pending payment if it has one, or why the order takes none.
async fn open_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &NewPayment,
    now_ms: i64,
) -> Result<OpenPayment, StoreError> {
    let Some(order) =
        orders::find_order::<D>(connection, &payment.tenant_id, &payment.order_id, true).await?
    else {
        return Ok(OpenPayment::NoOrder);
    };
    if !order.status.accepts_payment() {
        return Ok(
            match paid_payment_for_order::<D>(connection, &payment.tenant_id, &payment.order_id)
                .await?
            {
                Some(paid) => OpenPayment::OrderPaid(Box::new(paid)),
                None => OpenPayment::NotPayable(order.status),
            },
        );
    }
    // The attempt is for the order's amount, in the order's currency.
    let row = Payment {
        payment_no: payment.payment_no.clone(),
        tenant_id: payment.tenant_id.clone(),
        order_id: payment.order_id.clone(),
        channel: payment.channel,
        amount: Amount::new(order.amount_fen)
            .map_err(|_| corrupt("an order's amount out of range"))?,
        currency: Currency::parse(&order.currency)
            .map_err(|_| corrupt("an order's currency unknown"))?,
        status: PaymentStatus::Pending,
        pay_url: None,
        expires_at_ms: payment.expires_at_ms,
        channel_trade_no: None,
        paid_at_ms: None,
        created_at_ms: now_ms,
    };
    Ok(
        match insert_pending_payment::<D>(connection, &row, now_ms).await? {
            PaymentInsert::Created => OpenPayment::Created(Box::new(Payment {
                created_at_ms: now_ms,
                ..row
            })),
            PaymentInsert::ExistingPending(existing) => OpenPayment::ExistingPending(existing),
        },
    )
}

/// The local half of a close: row lock, then CAS PENDING → CLOSED.
async fn close_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    now_ms: i64,
) -> Result<LocalClose, StoreError> {
    let Some(payment) = find_payment::<D>(connection, payment_no, true).await? else {
        return Ok(LocalClose::Unknown);
    };
    Ok(match payment.status {
        PaymentStatus::Pending => {
            if transition_payment::<D>(
                connection,
                payment_no,
                PaymentStatus::Pending,
                PaymentStatus::Closed,
                now_ms,
            )
            .await?
            {
                closed_event::<D>(connection, &payment, now_ms).await?;
            }
            LocalClose::Closed(Box::new(Payment {
                status: PaymentStatus::Closed,
                ..payment
            }))
        }
        PaymentStatus::Closed => LocalClose::AlreadyClosed(Box::new(payment)),
        PaymentStatus::Paid => LocalClose::Paid(Box::new(payment)),
        PaymentStatus::Failed => LocalClose::Failed(Box::new(payment)),
    })
}

/// Writes `payment.closed` for `payment`, which this transaction just moved PENDING → CLOSED:
/// one event per closed payment, with its move.
pub(crate) async fn closed_event<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
    now_ms: i64,
) -> Result<(), StoreError> {
    let event = PaymentClosed {
        tenant_id: payment.tenant_id.clone(),
        payment_no: payment.payment_no.clone(),
        order_id: payment.order_id.clone(),
        channel: payment.channel.as_str().to_owned(),
        closed_at_ms: now_ms,
    };
    super::publish_in::<D>(
        connection,
        &payment.tenant_id,
        PAYMENT_CLOSED,
        &payment.payment_no,
        &event,
        now_ms,
    )
    .await
}

/// Payment attempts: opened under the order's row lock, settled by compare-and-set.
#[async_trait]
pub trait Payments: Send + Sync {
    /// Creates the order's pending payment `payment` (its amount and currency taken from the
    /// order), or finds the one that exists. The order row is locked while deciding.
    ///
    /// Every write here that follows the order's lock takes the lock's fence (`None` without
    /// the lock) and is refused with [`StoreError::StaleFence`], nothing written, when a later
    /// holder of the lock has written ([`crate::store::rows::orders::check_fence`]).
    async fn open_payment(
        &self,
        payment: &NewPayment,
        fence: Option<&OrderFence>,
    ) -> Result<OpenPayment, StoreError>;
    /// Records the channel's pay URL on a pending payment.
    async fn set_pay_url(
        &self,
        payment_no: &str,
        pay_url: &str,
        fence: Option<&OrderFence>,
    ) -> Result<bool, StoreError>;
    /// PENDING → FAILED (the channel refused the attempt).
    async fn fail_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<bool, StoreError>;
    /// A payment.
    async fn payment(&self, payment_no: &str) -> Result<Option<Payment>, StoreError>;
    /// The tenant's payments in the order they were created, after the payment `after`, at
    /// most `limit`; `None` when `after` is none of the tenant's.
    async fn payments_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<Payment>>, StoreError>;
    /// The local half of closing a payment: row lock, then CAS PENDING → CLOSED.
    async fn close_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<LocalClose, StoreError>;
    /// Pending payments created before `created_before_ms`, of one tenant or of all, oldest
    /// first, after the cursor `after` (creation time, payment number), at most `limit`
    /// (reconciliation pages through them).
    async fn pending_before(
        &self,
        tenant_id: Option<&str>,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Payment>, StoreError>;
    /// Closes a pending payment whose trade is over (closed or expired at the channel) and
    /// cancels its order if the order still waits for payment, in one transaction; true when
    /// the order was canceled.
    async fn expire_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<(LocalClose, bool), StoreError>;
    /// A channel's PAID payments paid in `from_ms..to_ms`, oldest first, after the cursor
    /// `after` (paid time, payment number), at most `limit` (the bill's other direction).
    async fn paid_between(
        &self,
        channel: &str,
        from_ms: i64,
        to_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Payment>, StoreError>;
    /// The success flow for a trade the channel reports paid when asked (a query by
    /// reconciliation, a close refused because the buyer paid first).
    async fn apply_success(
        &self,
        payment_no: &str,
        paid: &mideng_channel::adapter::Payment,
        fence: Option<&OrderFence>,
    ) -> Result<SuccessOutcome, StoreError>;
}

#[async_trait]
impl<D: Dialect> Payments for SqlPay<D> {
    async fn open_payment(
        &self,
        payment: &NewPayment,
        fence: Option<&OrderFence>,
    ) -> Result<OpenPayment, StoreError> {
        let _timer = self.timer("payments.open_payment");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let opened = open_on::<D>(transaction, payment, now_ms).await?;
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok(opened)
                })
            })
            .await
    }

    async fn set_pay_url(
        &self,
        payment_no: &str,
        pay_url: &str,
        fence: Option<&OrderFence>,
    ) -> Result<bool, StoreError> {
        let _timer = self.timer("payments.set_pay_url");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let set = payments::set_pay_url::<D>(transaction, payment_no, pay_url, now_ms)
                        .await?;
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok(set)
                })
            })
            .await
    }

    async fn fail_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<bool, StoreError> {
        let _timer = self.timer("payments.fail_payment");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let failed = transition_payment::<D>(
                        transaction,
                        payment_no,
                        PaymentStatus::Pending,
                        PaymentStatus::Failed,
                        now_ms,
                    )
                    .await?;
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok(failed)
                })
            })
            .await
    }

    async fn payment(&self, payment_no: &str) -> Result<Option<Payment>, StoreError> {
        let _timer = self.timer("payments.payment");
        let mut connection = self.connection().await?;
        find_payment::<D>(&mut connection, payment_no, false).await
    }

    async fn payments_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<Payment>>, StoreError> {
        let _timer = self.timer("payments.page");
        let mut connection = self.connection().await?;
        payments::tenant_page::<D>(&mut connection, tenant_id, after, i64::from(limit)).await
    }

    async fn close_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<LocalClose, StoreError> {
        let _timer = self.timer("payments.close_payment");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let closed = close_on::<D>(transaction, payment_no, now_ms).await?;
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok(closed)
                })
            })
            .await
    }

    async fn pending_before(
        &self,
        tenant_id: Option<&str>,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Payment>, StoreError> {
        let _timer = self.timer("payments.pending_before");
        let mut connection = self.connection().await?;
        payments::pending_before::<D>(
            &mut connection,
            tenant_id,
            created_before_ms,
            after,
            i64::from(limit),
        )
        .await
    }

    async fn expire_payment(
        &self,
        payment_no: &str,
        fence: Option<&OrderFence>,
    ) -> Result<(LocalClose, bool), StoreError> {
        let _timer = self.timer("payments.expire_payment");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let closed = close_on::<D>(transaction, payment_no, now_ms).await?;
                    let canceled = match &closed {
                        LocalClose::Closed(payment) => {
                            orders::transition_order::<D>(
                                transaction,
                                &payment.tenant_id,
                                &payment.order_id,
                                OrderStatus::Created,
                                OrderStatus::Canceled,
                                now_ms,
                            )
                            .await?
                        }
                        _ => false,
                    };
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok((closed, canceled))
                })
            })
            .await
    }

    async fn paid_between(
        &self,
        channel: &str,
        from_ms: i64,
        to_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<Payment>, StoreError> {
        let _timer = self.timer("payments.paid_between");
        let mut connection = self.connection().await?;
        payments::paid_between::<D>(
            &mut connection,
            channel,
            (from_ms, to_ms),
            after,
            i64::from(limit),
        )
        .await
    }

    async fn apply_success(
        &self,
        payment_no: &str,
        paid: &mideng_channel::adapter::Payment,
        fence: Option<&OrderFence>,
    ) -> Result<SuccessOutcome, StoreError> {
        let _timer = self.timer("payments.apply_success");
        let now_ms = self.now_ms();
        let paid_at_ms = paid.paid_at_ms.unwrap_or(now_ms);
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let outcome = apply_success::<D>(
                        transaction,
                        payment_no,
                        &paid.channel_trade_no,
                        paid.amount_fen,
                        paid_at_ms,
                        now_ms,
                    )
                    .await?;
                    orders::check_fence::<D>(transaction, fence).await?;
                    Ok(outcome)
                })
            })
            .await
    }
}

//! The refunds port: a refund opened under its payment's row lock, settled by the channel's
//! word along its state machine ([`crate::domain::refund`]).
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
use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::store::sql::Dialect;

use crate::domain::events::{REFUND_SUCCEEDED, RefundSucceeded};
use crate::domain::order::OrderStatus;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::refund::{self, Refund, RefundStatus};
use crate::store::rows::payments::{self, Reserve};
use crate::store::rows::{corrupt, orders, refund_cases, refunds};
use crate::store::sql::SqlPay;

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
    /// A refund case whose [`super::refund_cases::CASE_ASKS_MAX`] refunds the channel all closed: left for a person.
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

/// What is left to refund of the locked `payment`.
async fn refundable<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &Payment,
) -> Result<i64, StoreError> {
    let refunded = payments::refunded::<D>(connection, &payment.payment_no)
        .await?
        .ok_or_else(|| corrupt("a locked payment vanished"))?;
    Ok(refund::left_to_refund(payment.amount.fen(), refunded))
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
    let payment = match payments::find_payment::<D>(connection, new.payment_no, true).await? {
        Some(payment) if payment.tenant_id == new.tenant_id => payment,
        _ => return Ok(OpenRefund::NoPayment),
    };
    if let Some(existing) =
        refunds::find_by_key::<D>(connection, new.tenant_id, new.request_key).await?
    {
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
    if refund_cases::find_case::<D>(connection, new.payment_no, false)
        .await?
        .is_some()
    {
        return Ok(OpenRefund::InCase);
    }
    reserve_and_insert::<D>(
        connection,
        Reserve::Paid,
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
pub(crate) struct Opening<'a> {
    pub(crate) refund_no: &'a str,
    pub(crate) request_key: &'a str,
    pub(crate) amount_fen: i64,
    pub(crate) reason: &'a str,
}

/// Reserves the refund's amount on the locked payment (only when it fits on the payments
/// `reserve` names) and inserts the PROCESSING refund; a taken key or number is a conflict,
/// retried whole.
pub(crate) async fn reserve_and_insert<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    reserve: Reserve,
    payment: &Payment,
    opening: &Opening<'_>,
    now_ms: i64,
) -> Result<OpenRefund, StoreError> {
    if !payments::reserve_refund::<D>(
        connection,
        &payment.payment_no,
        opening.amount_fen,
        reserve,
        now_ms,
    )
    .await?
    {
        return Ok(OpenRefund::Exceeds {
            refundable_fen: refundable::<D>(connection, payment).await?,
        });
    }
    let refund = Refund {
        refund_no: opening.refund_no.to_owned(),
        tenant_id: payment.tenant_id.clone(),
        payment_no: payment.payment_no.clone(),
        order_id: payment.order_id.clone(),
        channel: payment.channel.as_str().to_owned(),
        amount_fen: opening.amount_fen,
        reason: opening.reason.to_owned(),
        status: RefundStatus::Processing,
        channel_refund_no: None,
        refunded_at_ms: None,
        created_at_ms: now_ms,
    };
    if !refunds::insert_refund::<D>(connection, &refund, opening.request_key, now_ms).await? {
        // The key's refund appeared after we looked (or the number was taken): the whole
        // transaction, reservation included, is retried and then finds it.
        return Err(StoreError::Conflict(
            "a refund with this key or number appeared".to_owned(),
        ));
    }
    Ok(OpenRefund::Created(Box::new(refund)))
}

/// Moves the refund to `to` (with the channel's number and time on SUCCESS) if its state
/// machine allows it from where it is ([`refund::settled`]); gives the amount back on CLOSED;
/// on SUCCESS writes the event and, when the payment is then refunded in full, moves its
/// order to REFUNDED.
pub(crate) async fn settle_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    refund_no: &str,
    to: RefundStatus,
    succeeded: Option<&mideng_channel::adapter::Refund>,
    now_ms: i64,
) -> Result<SettledRefund, StoreError> {
    // Locks in one order everywhere — the payment, then its refund — so that a settle, a
    // notify and a new refund of one payment queue up instead of deadlocking.
    let Some(unlocked) = refunds::find_refund::<D>(connection, refund_no, false).await? else {
        return Ok(SettledRefund::Unknown);
    };
    payments::find_payment::<D>(connection, &unlocked.payment_no, true).await?;
    let Some(refund) = refunds::find_refund::<D>(connection, refund_no, true).await? else {
        return Ok(SettledRefund::Unknown);
    };
    let word = succeeded.map(|done| (done.channel_refund_no.as_str(), done.refunded_at_ms));
    let Some(moved) = refund::settled(&refund, to, word, now_ms) else {
        return Ok(SettledRefund::Unchanged(Box::new(refund)));
    };
    if !refunds::compare_and_set::<D>(connection, &refund, &moved, now_ms).await? {
        return Err(StoreError::Conflict(
            "refund changed under its row lock".to_owned(),
        ));
    }
    match to {
        RefundStatus::Closed => {
            payments::release_refund::<D>(connection, &moved.payment_no, moved.amount_fen, now_ms)
                .await?;
            // A refund case's refund that moved nothing: the case is open again, to be asked
            // once more under its next key (or left for a person when they are used up).
            refund_cases::reopen::<D>(connection, refund_no, now_ms).await?;
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
    let payment = payments::find_payment::<D>(connection, &refund.payment_no, false)
        .await?
        .ok_or_else(|| corrupt("a refund without its payment"))?;
    let left = refundable::<D>(connection, &payment).await?;
    let open = refunds::count_open::<D>(connection, &refund.payment_no).await?;
    let payment_refunded = refund::refunded_in_full(left, open);
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
    super::publish_in::<D>(
        connection,
        &refund.tenant_id,
        REFUND_SUCCEEDED,
        &refund.refund_no,
        &event,
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
    /// The tenant's refunds in the order they were created, after the refund `after`, at most
    /// `limit`; `None` when `after` is none of the tenant's.
    async fn refunds_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<Refund>>, StoreError>;
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
        refunds::find_refund::<D>(&mut connection, refund_no, false).await
    }

    async fn refunds_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<Refund>>, StoreError> {
        let _timer = self.timer("refunds.page");
        let mut connection = self.connection().await?;
        refunds::tenant_page::<D>(&mut connection, tenant_id, after, i64::from(limit)).await
    }

    async fn refunds_of(&self, payment_no: &str) -> Result<Vec<Refund>, StoreError> {
        let _timer = self.timer("refunds.refunds_of");
        let mut connection = self.connection().await?;
        refunds::refunds_of_payment::<D>(&mut connection, payment_no).await
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
        refunds::succeeded_between::<D>(
            &mut connection,
            channel,
            (from_ms, to_ms),
            after,
            i64::from(limit),
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
        refunds::processing_before::<D>(&mut connection, created_before_ms, after, i64::from(limit))
            .await
    }
}

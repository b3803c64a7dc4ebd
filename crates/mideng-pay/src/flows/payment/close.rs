//! Closing a pending payment: at the channel first, then here, under the order's lock. A buyer
//! who paid before the close wins: the success flow runs and the caller is told the payment is
//! paid. Closing a closed payment answers the same again.

use mideng::StoreError;
use mideng_channel::adapter::ChannelError;

use super::settle::{OnClose, Settled, settle};
use super::{Locked, lock_order, lost_the_lock, unlock};
use crate::domain::ids::PaymentNo;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::flows::{Ports, decision, operation};
use crate::store::{LocalClose, SuccessOutcome};

/// What a close came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Closed now.
    Closed(Payment),
    /// It was closed already.
    AlreadyClosed(Payment),
    /// Not closable yet: the channel has no trade (the code was not scanned) and it stays
    /// payable until its expiry; the payment stays PENDING.
    Deferred(Payment),
    /// The buyer paid first: the payment as it is now.
    Paid(Payment),
    /// It failed at creation: there is nothing to close.
    FailedAtCreation,
    /// It is not pending (it moved on during the close).
    NotPending,
    /// No such payment in this tenant.
    NotFound,
    /// Its channel is not configured here.
    ChannelNotConfigured,
    /// Another request holds the order's lock (or took it over from this one), and the payment
    /// is still pending: ask again shortly.
    Busy,
    /// The channel still calls the trade pending: it has not confirmed the close.
    ChannelPending,
    /// The channel gave no definite answer.
    ChannelUnknown,
    /// The channel refused to close the trade.
    ChannelRejected,
}

/// The tenant's payment `payment_no`, if it exists.
pub async fn own_payment(
    ports: &Ports,
    tenant: &str,
    payment_no: &PaymentNo,
) -> Result<Option<Payment>, StoreError> {
    Ok(ports
        .store
        .payments
        .payment(payment_no.as_str())
        .await?
        .filter(|payment| payment.tenant_id == tenant))
}

/// Closes the tenant's payment `payment_no`.
pub async fn close(
    ports: &Ports,
    tenant: &str,
    payment_no: &PaymentNo,
) -> Result<Closed, StoreError> {
    let Some(payment) = own_payment(ports, tenant, payment_no).await? else {
        return Ok(Closed::NotFound);
    };
    match payment.status {
        PaymentStatus::Closed => return Ok(Closed::AlreadyClosed(payment)),
        PaymentStatus::Paid => return Ok(Closed::Paid(payment)),
        PaymentStatus::Failed => return Ok(Closed::FailedAtCreation),
        PaymentStatus::Pending => {}
    }
    let Some(channel) = ports.channels.get(payment.channel).cloned() else {
        return Ok(Closed::ChannelNotConfigured);
    };
    let op = operation::PAYMENT_CLOSE;
    let locked = lock_order(ports, op, tenant, &payment.order_id).await;
    if let Locked::Busy = locked {
        return recheck(ports, tenant, payment_no).await;
    }
    let fence = locked.fence();
    let result = async {
        let found = match channel.close_trade(&payment.payment_no).await {
            Ok(found) => found,
            Err(error @ ChannelError::OutcomeUnknown(_)) => {
                tracing::warn!(%error, "channel call without a definite answer");
                return Ok(Closed::ChannelUnknown);
            }
            Err(error) => {
                tracing::warn!(%error, "channel refused the close");
                return Ok(Closed::ChannelRejected);
            }
        };
        let number = payment.payment_no.as_str();
        Ok(
            match settle(ports, &payment, found, OnClose::PaymentOnly, fence).await? {
                // Alipay has no trade until the buyer scans the code, and the code stays
                // payable until its expiry: closing locally now could end with a charge for a
                // closed payment. The attempt stays PENDING; after the expiry it can no longer
                // be paid and is closed (by a close then, or by reconciliation).
                Settled::NotYetAtChannel => {
                    decision("cas", op, tenant, number, "close_deferred");
                    Closed::Deferred(payment.clone())
                }
                Settled::Closed(LocalClose::Closed(closed)) => {
                    decision("cas", op, tenant, number, "closed");
                    Closed::Closed(*closed)
                }
                Settled::Closed(LocalClose::AlreadyClosed(closed)) => {
                    decision("cas", op, tenant, number, "already_closed");
                    Closed::AlreadyClosed(*closed)
                }
                Settled::Closed(LocalClose::Paid(paid)) => {
                    decision("cas", op, tenant, number, "paid_first");
                    Closed::Paid(*paid)
                }
                Settled::Closed(LocalClose::Failed(_) | LocalClose::Unknown) => Closed::NotPending,
                // The buyer paid before the close: the one success flow ran; tell the caller.
                // Charged, but the order has another PAID payment: the charge is a refund
                // case and the attempt is closed with it.
                Settled::Paid(SuccessOutcome::Refunding { .. }) => {
                    decision("cas", op, tenant, number, "refund_case");
                    match own_payment(ports, tenant, payment_no).await? {
                        Some(closed) => Closed::Closed(closed),
                        None => Closed::NotFound,
                    }
                }
                Settled::Paid(outcome) => {
                    let label = match outcome {
                        SuccessOutcome::Paid { .. } => "paid_by_close",
                        SuccessOutcome::AlreadyPaid => "already_paid",
                        _ => "mismatch",
                    };
                    decision("cas", op, tenant, number, label);
                    current(ports, tenant, payment_no).await?
                }
                Settled::Refunded => current(ports, tenant, payment_no).await?,
                Settled::Pending { .. } => Closed::ChannelPending,
            },
        )
    }
    .await;
    unlock(ports, locked).await;
    match result {
        Err(error) if lost_the_lock(&error) => recheck(ports, tenant, payment_no).await,
        other => other,
    }
}

/// After the lock wait ran out (or our lease did): a payment that is closed or paid by now
/// answers as such; one still pending answers "busy".
async fn recheck(
    ports: &Ports,
    tenant: &str,
    payment_no: &PaymentNo,
) -> Result<Closed, StoreError> {
    Ok(match own_payment(ports, tenant, payment_no).await? {
        None => Closed::NotFound,
        Some(payment) => match payment.status {
            PaymentStatus::Closed => Closed::AlreadyClosed(payment),
            PaymentStatus::Paid => Closed::Paid(payment),
            PaymentStatus::Failed => Closed::FailedAtCreation,
            PaymentStatus::Pending => Closed::Busy,
        },
    })
}

/// The payment as it is now, after the channel said it was paid.
async fn current(
    ports: &Ports,
    tenant: &str,
    payment_no: &PaymentNo,
) -> Result<Closed, StoreError> {
    Ok(match own_payment(ports, tenant, payment_no).await? {
        Some(payment) => Closed::Paid(payment),
        None => Closed::NotFound,
    })
}

/// Closes the open attempt `payment_no` of an order that another payment just paid (a late
/// success, [`crate::domain::charge`]), at the channel and here, so that the buyer cannot pay
/// it as well. Best effort: an attempt the channel cannot close yet (no trade before the scan,
/// no definite answer) stays PENDING; reconciliation closes it once it can
/// ([`crate::workers::reconcile`]), and a charge of it meanwhile becomes a refund case.
pub async fn close_sibling(ports: &Ports, tenant: &str, payment_no: &str) {
    let Ok(number) = PaymentNo::parse(payment_no) else {
        return;
    };
    let label = match close(ports, tenant, &number).await {
        Ok(Closed::Closed(_) | Closed::AlreadyClosed(_)) => "sibling_closed",
        Ok(Closed::Paid(_)) => "sibling_paid",
        Ok(other) => {
            tracing::info!(payment_no, outcome = ?other, "the order's other attempt stays open for now; reconciliation closes it");
            "sibling_left_open"
        }
        Err(error) => {
            tracing::warn!(%error, payment_no, "closing the order's other attempt failed; reconciliation closes it");
            "sibling_left_open"
        }
    };
    decision("cas", operation::PAYMENT_CLOSE, tenant, payment_no, label);
}

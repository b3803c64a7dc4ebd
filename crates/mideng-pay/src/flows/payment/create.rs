//! Creating a payment attempt for an order. Below the route's layers (the one-time token and
//! the `Idempotency-Key`), it stacks the rest of the seeds' defences:
//!
//! 1. the per-order lock (Redis in production), so that two attempts for one order do not even
//!    reach the database together; a wait that runs out re-checks the order and answers from
//!    it, or answers "in progress" ([`crate::flows::order_lock`]); every write carries the
//!    lock's fence;
//! 2. the order's row lock and the one-pending-payment constraint in the database, which decide
//!    whatever the lock missed (a lock store that is down, a holder that died);
//! 3. the channel's own idempotency by `out_trade_no`: creating the trade again under the same
//!    payment number (the next request for the order, after an unknown answer) is safe.

use mideng::StoreError;
use mideng_channel::ChannelKind;
use mideng_channel::adapter::{ChannelError, CreateTrade, TradeState};

use super::settle::{OnClose, Settled, settle};
use super::{Locked, lock_order, lost_the_lock, unlock};
use crate::domain::ids::{OrderId, PaymentNo};
use crate::domain::order::OrderStatus;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::flows::{Ports, decision, operation};
use crate::store::{NewPayment, OpenPayment, OrderFence};

/// What asking for a payment attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// A new pending payment whose trade the channel created.
    New(Payment),
    /// The order's pending payment, which existed already (a duplicate request).
    Existing(Payment),
    /// The payment exists here but the channel gave no definite answer about its trade (no pay
    /// URL yet): the next request for the order creates it again under the same number, and
    /// reconciliation settles it either way.
    NotYetAtChannel(Payment),
    /// No such order in this tenant.
    NoOrder,
    /// The channel (named as asked, or as stored) is not configured here.
    ChannelNotConfigured(ChannelKind),
    /// The order is paid: its paid payment.
    OrderPaid(Payment),
    /// The order is in a status that takes no payment.
    NotPayable(OrderStatus),
    /// Another writer held the order's lock for the whole wait (or took it over from this
    /// one), and the order has no payment to answer with yet: ask again shortly.
    Busy,
    /// The channel refused the trade because it closed it: create another attempt.
    ClosedAtChannel,
    /// The channel refused the trade and does not have it: the attempt failed.
    ChannelRejected,
}

/// Opens (or finds) the order's pending payment through `channel`.
pub async fn create(
    ports: &Ports,
    tenant: &str,
    order_id: &OrderId,
    channel: ChannelKind,
) -> Result<Created, StoreError> {
    if ports.channels.get(channel).is_none() {
        return Ok(Created::ChannelNotConfigured(channel));
    }
    let op = operation::PAYMENT_CREATE;
    let locked = lock_order(ports, op, tenant, order_id.as_str()).await;
    if let Locked::Busy = locked {
        // Someone else held the order's lock for the whole wait: re-check the order.
        return recheck(ports, tenant, order_id).await;
    }
    let result = open(ports, tenant, order_id, channel, locked.fence()).await;
    unlock(ports, locked).await;
    match result {
        // Our lease ran out and the next holder wrote: answer from what it wrote.
        Err(error) if lost_the_lock(&error) => recheck(ports, tenant, order_id).await,
        other => other,
    }
}

async fn open(
    ports: &Ports,
    tenant: &str,
    order_id: &OrderId,
    channel: ChannelKind,
    fence: Option<&OrderFence>,
) -> Result<Created, StoreError> {
    let op = operation::PAYMENT_CREATE;
    let now_ms = ports.clock.now_ms();
    let expire_ms = mideng::clock::duration_ms(ports.settings.expire_after);
    let candidate = NewPayment {
        payment_no: PaymentNo::generate(now_ms).as_str().to_owned(),
        tenant_id: tenant.to_owned(),
        order_id: order_id.as_str().to_owned(),
        channel,
        expires_at_ms: now_ms.saturating_add(expire_ms),
    };
    Ok(
        match ports.store.payments.open_payment(&candidate, fence).await? {
            OpenPayment::NoOrder => Created::NoOrder,
            OpenPayment::OrderPaid(paid) => {
                decision("constraint", op, tenant, order_id.as_str(), "order_paid");
                Created::OrderPaid(*paid)
            }
            OpenPayment::NotPayable(status) => Created::NotPayable(status),
            OpenPayment::Created(payment) => {
                decision("constraint", op, tenant, order_id.as_str(), "inserted");
                at_channel(ports, *payment, Created::New, fence).await?
            }
            OpenPayment::ExistingPending(payment) => {
                decision(
                    "constraint",
                    op,
                    tenant,
                    order_id.as_str(),
                    "existing_pending",
                );
                at_channel(ports, *payment, Created::Existing, fence).await?
            }
        },
    )
}

/// Creates the trade at the channel for a pending payment that has no pay URL yet, and
/// records the URL; `done` names the outcome when the payment has its URL.
async fn at_channel(
    ports: &Ports,
    payment: Payment,
    done: fn(Payment) -> Created,
    fence: Option<&OrderFence>,
) -> Result<Created, StoreError> {
    if payment.pay_url.is_some() {
        return Ok(done(payment));
    }
    let Some(channel) = ports.channels.get(payment.channel) else {
        return Ok(Created::ChannelNotConfigured(payment.channel));
    };
    let trade = CreateTrade {
        out_trade_no: payment.payment_no.clone(),
        amount_fen: payment.amount.fen(),
        subject: format!("order {}", payment.order_id),
        expires_at_ms: payment.expires_at_ms,
    };
    match channel.create_trade(&trade).await {
        Ok(created) => {
            ports
                .store
                .payments
                .set_pay_url(&payment.payment_no, &created.pay_url, fence)
                .await?;
            Ok(done(Payment {
                pay_url: Some(created.pay_url),
                ..payment
            }))
        }
        Err(error @ ChannelError::OutcomeUnknown(_)) => {
            tracing::warn!(%error, payment_no = %payment.payment_no, "trade creation without a definite answer");
            Ok(Created::NotYetAtChannel(payment))
        }
        Err(error @ ChannelError::Rejected { .. }) => {
            // A refusal may mean "this trade exists and is paid (or closed)": the trade was
            // created by an earlier call whose answer was lost, and the buyer paid (or the
            // merchant closed) since. Ask before failing the attempt.
            tracing::warn!(%error, payment_no = %payment.payment_no, "channel refused the trade; asking what it knows");
            settle_refused(ports, channel.as_ref(), payment, fence).await
        }
        Err(error) => {
            // Not sendable: the attempt failed and frees the order for another.
            tracing::warn!(%error, payment_no = %payment.payment_no, "the trade could not be sent");
            fail(ports, &payment, fence).await
        }
    }
}

/// After the channel refused to create a trade: a paid trade runs the one success flow, a
/// closed one closes the attempt here, an unknown or pending answer leaves it pending, and only
/// a trade the channel does not have fails the attempt.
async fn settle_refused(
    ports: &Ports,
    channel: &dyn mideng_channel::adapter::Channel,
    payment: Payment,
    fence: Option<&OrderFence>,
) -> Result<Created, StoreError> {
    let found = match channel.query_trade(&payment.payment_no).await {
        Ok(TradeState::NotFound) => return fail(ports, &payment, fence).await,
        Ok(found) => found,
        Err(ChannelError::OutcomeUnknown(_)) => return Ok(Created::NotYetAtChannel(payment)),
        Err(_) => return fail(ports, &payment, fence).await,
    };
    Ok(
        match settle(ports, &payment, found, OnClose::PaymentOnly, fence).await? {
            Settled::Paid(_) => {
                let current = ports
                    .store
                    .payments
                    .payment(&payment.payment_no)
                    .await?
                    .unwrap_or(payment);
                Created::OrderPaid(current)
            }
            Settled::Refunded => Created::OrderPaid(payment),
            Settled::Closed(_) => Created::ClosedAtChannel,
            Settled::Pending { .. } | Settled::NotYetAtChannel => Created::NotYetAtChannel(payment),
        },
    )
}

/// The attempt failed at the channel: FAILED here, which frees the order for another.
async fn fail(
    ports: &Ports,
    payment: &Payment,
    fence: Option<&OrderFence>,
) -> Result<Created, StoreError> {
    ports
        .store
        .payments
        .fail_payment(&payment.payment_no, fence)
        .await?;
    Ok(Created::ChannelRejected)
}

/// After the lock wait ran out (or our lease did): answer what the order has now — its paid
/// payment, its pending one (202 while it has no pay URL yet) — or "in progress" when it has
/// neither: the holder is working on it, or died holding the lock, which then frees the order
/// within [`crate::limits::ORDER_LOCK_TTL`]. The client asks again with the same key.
async fn recheck(ports: &Ports, tenant: &str, order_id: &OrderId) -> Result<Created, StoreError> {
    let Some((_, payments)) = ports.store.orders.order(tenant, order_id.as_str()).await? else {
        return Ok(Created::NoOrder);
    };
    if let Some(paid) = payments.iter().find(|p| p.status == PaymentStatus::Paid) {
        return Ok(Created::OrderPaid(paid.clone()));
    }
    if let Some(pending) = payments.iter().find(|p| p.status == PaymentStatus::Pending) {
        return Ok(if pending.pay_url.is_some() {
            Created::Existing(pending.clone())
        } else {
            Created::NotYetAtChannel(pending.clone())
        });
    }
    decision(
        "lock",
        operation::PAYMENT_CREATE,
        tenant,
        order_id.as_str(),
        "busy_in_progress",
    );
    Ok(Created::Busy)
}

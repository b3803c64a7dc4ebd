//! A channel's notify. It is accepted only after its signature, merchant identity, our payment
//! number, its channel and the amount all check out; then, under the order's lock (a brief
//! wait; [`crate::flows::order_lock`]), it is deduplicated by the channel's notify id and
//! applied through the one success flow, in one transaction that also checks the lock's fence.
//! Anything that cannot be processed now (the lock busy for the whole wait and the payment
//! not yet paid, a write refused because our lease was taken over, the database down) gets the
//! channel's failure answer, so that it is sent again.

use mideng_channel::ChannelKind;
use mideng_channel::adapter::{NotifiedState, NotifyAnswer, NotifyVerdict, RawNotify};

use crate::domain::payment::PaymentStatus;
use crate::flows::order_lock::{Locked, lock_order, unlock};
use crate::flows::{BrokenLayer, Ports, decision, operation};
use crate::store::{NotifyApplied, NotifyEffect, NotifyEvent, NotifyOutcome, SuccessOutcome};

/// The dedup scope's operation of a channel's notifies.
pub fn operation_of(kind: ChannelKind) -> &'static str {
    match kind {
        ChannelKind::Alipay => operation::NOTIFY_ALIPAY,
        ChannelKind::Wechat => operation::NOTIFY_WECHAT,
    }
}

/// Verifies and applies one notify; the channel's answer. `None` when the channel is not
/// configured here.
pub async fn receive(ports: &Ports, kind: ChannelKind, raw: &RawNotify) -> Option<NotifyAnswer> {
    let channel = ports.channels.get(kind)?;
    let operation = operation_of(kind);
    let verified = match channel.verify_notify(raw, ports.clock.now_ms()) {
        Ok(verified) => verified,
        Err(rejection) => {
            tracing::warn!(%rejection, "notify refused");
            decision("signature", operation, "-", "-", rejection.label());
            return Some(channel.answer(NotifyVerdict::Refused));
        }
    };
    let event = match &verified.state {
        NotifiedState::Paid(payment) => NotifyEvent::Paid {
            channel_trade_no: payment.channel_trade_no.clone(),
            paid_at_ms: payment.paid_at_ms.unwrap_or_else(|| ports.clock.now_ms()),
        },
        NotifiedState::Closed => NotifyEvent::Closed,
        NotifiedState::Refund {
            out_refund_no,
            refund_fen,
            state,
        } => NotifyEvent::Refund {
            out_refund_no: out_refund_no.clone(),
            refund_fen: *refund_fen,
            state: state.clone(),
        },
        NotifiedState::Other(_) => NotifyEvent::Other,
    };
    let mut effect = NotifyEffect {
        operation,
        channel: channel.kind(),
        notify_id: verified.notify_id.clone(),
        payment_no: verified.out_trade_no.clone(),
        amount_fen: verified.amount_fen,
        event,
        dedup: ports.settings.layer_on(BrokenLayer::NotifyDedup),
        fence: None,
    };
    let subject = verified.out_trade_no.as_str();
    // Seed 000, layer 3 ①: the success flow runs under the order's lock, as creation and close
    // do, so that a notify and a close (or a second attempt) for one order do not interleave.
    // When the wait runs out, a payment already PAID decides (a resend: applied without the
    // lock, deduplicated); otherwise the channel is asked to send it again.
    let locked = match (&effect.event, ports.store.payments.payment(subject).await) {
        (NotifyEvent::Paid { .. }, Ok(Some(payment))) => {
            let locked = lock_order(ports, operation, &payment.tenant_id, &payment.order_id).await;
            if let Locked::Busy = locked {
                let paid = matches!(
                    ports.store.payments.payment(subject).await,
                    Ok(Some(now)) if now.status == PaymentStatus::Paid
                );
                if !paid {
                    decision(
                        "lock",
                        operation,
                        &payment.tenant_id,
                        subject,
                        "busy_retry_later",
                    );
                    return Some(channel.answer(NotifyVerdict::RetryLater));
                }
            }
            locked
        }
        _ => Locked::Unguarded,
    };
    effect.fence = locked.fence().cloned();
    let applied = ports.store.notifies.apply_notify(&effect).await;
    unlock(ports, locked).await;
    let NotifyApplied { outcome, tenant } = match applied {
        Ok(applied) => applied,
        Err(error) => {
            tracing::warn!(%error, payment_no = subject, "notify not applied now; the channel will resend");
            return Some(channel.answer(NotifyVerdict::RetryLater));
        }
    };
    let (layer, label, verdict) = match &outcome {
        NotifyOutcome::Duplicate => ("dedup", "duplicate", NotifyVerdict::Accepted),
        NotifyOutcome::Applied(Some(SuccessOutcome::Paid {
            order_moved: true, ..
        })) => ("cas", "paid", NotifyVerdict::Accepted),
        NotifyOutcome::Applied(Some(SuccessOutcome::Paid {
            order_moved: false, ..
        })) => {
            tracing::warn!(
                payment_no = subject,
                "paid, but the order no longer waited for payment (canceled): recorded as a refund case"
            );
            ("cas", "paid_order_not_created", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Applied(Some(SuccessOutcome::AlreadyPaid)) => {
            ("cas", "already_paid", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Applied(Some(_)) => ("cas", "refused", NotifyVerdict::RetryLater),
        NotifyOutcome::Applied(None) => ("cas", "acknowledged", NotifyVerdict::Accepted),
        NotifyOutcome::Rejected(why) => {
            tracing::warn!(
                payment_no = subject,
                why = *why,
                "notify does not match our payment"
            );
            ("signature", *why, NotifyVerdict::Refused)
        }
        NotifyOutcome::LateSuccess(status) => {
            tracing::error!(
                payment_no = subject, status = ?status,
                "charged at the channel, but the order is paid by another payment (or the attempt failed at creation): recorded as a refund case"
            );
            ("cas", "double_charge", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Busy => ("dedup", "busy", NotifyVerdict::RetryLater),
        NotifyOutcome::Refund(Some(_)) => ("cas", "refund_settled", NotifyVerdict::Accepted),
        NotifyOutcome::Refund(None) => ("cas", "refund_unchanged", NotifyVerdict::Accepted),
    };
    decision(
        layer,
        operation,
        tenant.as_deref().unwrap_or("-"),
        subject,
        label,
    );
    // A late success paid the order while another attempt of it is open: close that one, so
    // that the buyer cannot pay it too (after the order's lock is released; the close takes it).
    if let (
        NotifyOutcome::Applied(Some(SuccessOutcome::Paid {
            open_sibling: Some(sibling),
            ..
        })),
        Some(tenant),
    ) = (&outcome, tenant.as_deref())
    {
        super::payment::close_sibling(ports, tenant, sibling).await;
    }
    Some(channel.answer(verdict))
}

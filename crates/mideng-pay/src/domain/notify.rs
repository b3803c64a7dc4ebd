//! Notify matching: what a verified channel notify may speak for. A signature proves who sent
//! a notify, not that it is about our payment: these rules decide that, before anything moves.
//!
//! | the notify | here |
//! |---|---|
//! | verified by another channel's configuration than the payment's | refused: `channel_mismatch` |
//! | an amount other than the payment's | refused: `amount_mismatch` |
//! | a refund of another payment | refused: `refund_mismatch` |
//! | a refund amount (or a success amount) other than the refund's | refused: `refund_amount_mismatch` |
//! | a refund succeeded, closed or abnormal | the refund moves there (by its state machine) |
//! | a refund still processing, or unknown at the channel | nothing moves |
//!
//! Channel configurations are deployment-wide, one per channel and shared by the tenants, so
//! the payment's channel names both the configuration and the key that verified the notify:
//! an Alipay-signed success never settles a WeChat payment.

use mideng_channel::ChannelKind;
use mideng_channel::adapter::{Refund as ChannelRefund, RefundState};

use super::payment::Payment;
use super::refund::{Refund, RefundStatus};

/// Why a notify is not ours: the label the channel's refusal is logged and counted under.
pub type Refusal = &'static str;

/// Whether a notify verified by `channel`'s configuration, reporting `amount_fen`, speaks for
/// `payment`.
pub fn speaks_for(payment: &Payment, channel: ChannelKind, amount_fen: i64) -> Result<(), Refusal> {
    if payment.channel != channel {
        return Err("channel_mismatch");
    }
    if payment.amount.fen() != amount_fen {
        return Err("amount_mismatch");
    }
    Ok(())
}

/// What a refund notify for `payment_no`, reporting `refund_fen` in `state`, does to our
/// `refund`: the status it moves to with the channel's success (`None`: nothing final to
/// apply), or why the notify does not speak for it. Whatever state it reports, a notify speaks
/// for our refund only with our refund's amount.
pub fn refund_move<'a>(
    refund: &Refund,
    payment_no: &str,
    refund_fen: i64,
    state: &'a RefundState,
) -> Result<Option<(RefundStatus, Option<&'a ChannelRefund>)>, Refusal> {
    if refund.payment_no != payment_no {
        return Err("refund_mismatch");
    }
    let succeeded_other =
        matches!(state, RefundState::Succeeded(done) if done.refund_fen != refund.amount_fen);
    if refund_fen != refund.amount_fen || succeeded_other {
        return Err("refund_amount_mismatch");
    }
    Ok(match state {
        RefundState::Succeeded(done) => Some((RefundStatus::Success, Some(done))),
        RefundState::Closed => Some((RefundStatus::Closed, None)),
        RefundState::Abnormal => Some((RefundStatus::Abnormal, None)),
        RefundState::Processing | RefundState::NotFound => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::money::{Amount, Currency};
    use crate::domain::payment::PaymentStatus;

    fn payment() -> Payment {
        Payment {
            payment_no: "P1".to_owned(),
            tenant_id: "t".to_owned(),
            order_id: "o".to_owned(),
            channel: ChannelKind::Wechat,
            amount: Amount::new(1_000).expect("an amount"),
            currency: Currency::Cny,
            status: PaymentStatus::Pending,
            pay_url: None,
            expires_at_ms: 0,
            channel_trade_no: None,
            paid_at_ms: None,
            created_at_ms: 0,
        }
    }

    fn refund() -> Refund {
        Refund {
            refund_no: "R1".to_owned(),
            tenant_id: "t".to_owned(),
            payment_no: "P1".to_owned(),
            order_id: "o".to_owned(),
            channel: "wechat".to_owned(),
            amount_fen: 300,
            reason: String::new(),
            status: RefundStatus::Processing,
            channel_refund_no: None,
            refunded_at_ms: None,
            created_at_ms: 0,
        }
    }

    fn done(refund_fen: i64) -> RefundState {
        RefundState::Succeeded(ChannelRefund {
            channel_refund_no: "C1".to_owned(),
            refund_fen,
            refunded_at_ms: Some(5),
        })
    }

    #[test]
    fn a_notify_speaks_only_for_a_payment_of_its_channel_and_amount() {
        assert_eq!(speaks_for(&payment(), ChannelKind::Wechat, 1_000), Ok(()));
        assert_eq!(
            speaks_for(&payment(), ChannelKind::Alipay, 1_000),
            Err("channel_mismatch")
        );
        assert_eq!(
            speaks_for(&payment(), ChannelKind::Wechat, 999),
            Err("amount_mismatch")
        );
    }

    #[test]
    fn a_refund_notify_moves_our_refund_only_with_its_own_payment_and_amount() {
        let success = done(300);
        let moved = refund_move(&refund(), "P1", 300, &success).expect("ours");
        assert!(matches!(moved, Some((RefundStatus::Success, Some(_)))));
        assert_eq!(
            refund_move(&refund(), "P2", 300, &success),
            Err("refund_mismatch")
        );
        assert_eq!(
            refund_move(&refund(), "P1", 301, &RefundState::Closed),
            Err("refund_amount_mismatch")
        );
        // The notify's amount is ours but the success inside it is for another amount.
        assert_eq!(
            refund_move(&refund(), "P1", 300, &done(299)),
            Err("refund_amount_mismatch")
        );
        assert_eq!(
            refund_move(&refund(), "P1", 300, &RefundState::Closed),
            Ok(Some((RefundStatus::Closed, None)))
        );
        assert_eq!(
            refund_move(&refund(), "P1", 300, &RefundState::Abnormal),
            Ok(Some((RefundStatus::Abnormal, None)))
        );
        for nothing in [RefundState::Processing, RefundState::NotFound] {
            assert_eq!(refund_move(&refund(), "P1", 300, &nothing), Ok(None));
        }
    }
}

//! Payment attempts: one per call to a channel for an order, and their state machine.
//!
//! ```text
//! PENDING ─► PAID
//!    ├─────► CLOSED ─► PAID   (the channel charged it after all: a late success)
//!    └─────► FAILED
//! ```
//!
//! At most one attempt per order is PENDING at any time and at most one is ever PAID; the
//! database enforces the first with a partial unique constraint and the second with a unique
//! paid-order key, whatever races the application loses. The success flow moves the payment
//! and its order together, in one local transaction.

use mideng::state::StateMachine;
use mideng_channel::ChannelKind;
use serde::Serialize;

use super::money::{Amount, Currency};

/// A payment attempt's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatus {
    /// Created at the channel, waiting for the buyer.
    Pending,
    /// Paid: the channel charged the buyer.
    Paid,
    /// Closed unpaid (by the merchant, by expiry or by reconciliation).
    Closed,
    /// The channel refused the attempt.
    Failed,
}

impl StateMachine for PaymentStatus {
    const KIND: &'static str = "payment";
    const TRANSITIONS: &'static [(Self, Self)] = &[
        (PaymentStatus::Pending, PaymentStatus::Paid),
        (PaymentStatus::Pending, PaymentStatus::Closed),
        (PaymentStatus::Pending, PaymentStatus::Failed),
        // A payment closed here while the channel still took the buyer's money (the channel's
        // timer started later, or the buyer was mid-payment): the charge is the truth.
        (PaymentStatus::Closed, PaymentStatus::Paid),
    ];

    fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Pending => "PENDING",
            PaymentStatus::Paid => "PAID",
            PaymentStatus::Closed => "CLOSED",
            PaymentStatus::Failed => "FAILED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            PaymentStatus::Pending,
            PaymentStatus::Paid,
            PaymentStatus::Closed,
            PaymentStatus::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// A payment attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// The payment number (the channel's `out_trade_no`).
    pub payment_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// Order.
    pub order_id: String,
    /// The channel it was made through.
    pub channel: ChannelKind,
    /// How much (its order's amount).
    pub amount: Amount,
    /// Currency (its order's).
    pub currency: Currency,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_payment_moves_and_a_closed_one_only_to_paid() {
        use PaymentStatus::*;
        for to in [Paid, Closed, Failed] {
            assert!(PaymentStatus::allows(Pending, to));
        }
        assert!(PaymentStatus::allows(Closed, Paid), "a late success");
        for from in [Paid, Closed, Failed] {
            for to in [Pending, Paid, Closed, Failed] {
                if (from, to) != (Closed, Paid) {
                    assert!(!PaymentStatus::allows(from, to), "{from:?} -> {to:?}");
                }
            }
        }
        for status in [Pending, Paid, Closed, Failed] {
            assert_eq!(PaymentStatus::parse(status.as_str()), Some(status));
        }
    }
}

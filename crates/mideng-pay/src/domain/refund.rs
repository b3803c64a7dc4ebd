//! Refunds of a paid payment, and their state machine.
//!
//! ```text
//! PROCESSING ─► SUCCESS
//!     ├───────► CLOSED
//!     └───────► ABNORMAL ─► SUCCESS | CLOSED
//! ```
//!
//! A refund's number is its idempotency key at the channel (Alipay `out_request_no`, WeChat
//! `out_refund_no`): however often it is asked (a retry, a lost answer, reconciliation), the
//! channel refunds it once. A payment's refunds that are not CLOSED never add up to more than
//! its amount: the database holds a running total under a CHECK and reserves each refund's
//! amount in the transaction that creates it, before the channel is asked.

use mideng::state::StateMachine;
use serde::{Deserialize, Serialize};

/// Longest refund reason, in characters (WeChat's `reason` limit; Alipay allows more).
pub const REASON_CHARS_MAX: usize = 80;

/// A refund's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundStatus {
    /// Reserved here and asked of the channel (or about to be); the money is not back yet.
    Processing,
    /// The money went back to the buyer.
    Success,
    /// The channel refused or closed it: no money moved, and its amount is free again.
    Closed,
    /// The channel could not pay it back (the buyer's account is frozen or closed): a person
    /// must look. Its amount stays reserved.
    Abnormal,
}

impl RefundStatus {
    /// Whether the refund's amount counts against the payment (every status but CLOSED).
    pub fn holds_amount(self) -> bool {
        self != RefundStatus::Closed
    }

    /// Whether nothing will change it any more.
    pub fn is_final(self) -> bool {
        matches!(self, RefundStatus::Success | RefundStatus::Closed)
    }
}

impl StateMachine for RefundStatus {
    const KIND: &'static str = "refund";
    const TRANSITIONS: &'static [(Self, Self)] = &[
        (RefundStatus::Processing, RefundStatus::Success),
        (RefundStatus::Processing, RefundStatus::Closed),
        (RefundStatus::Processing, RefundStatus::Abnormal),
        // WeChat lets the merchant settle an abnormal refund (to another account, or not).
        (RefundStatus::Abnormal, RefundStatus::Success),
        (RefundStatus::Abnormal, RefundStatus::Closed),
    ];

    fn as_str(self) -> &'static str {
        match self {
            RefundStatus::Processing => "PROCESSING",
            RefundStatus::Success => "SUCCESS",
            RefundStatus::Closed => "CLOSED",
            RefundStatus::Abnormal => "ABNORMAL",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            RefundStatus::Processing,
            RefundStatus::Success,
            RefundStatus::Closed,
            RefundStatus::Abnormal,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// A refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    /// The refund number (the channel's `out_request_no` / `out_refund_no`).
    pub refund_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// The payment it refunds.
    pub payment_no: String,
    /// The payment's order.
    pub order_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// Why, as the buyer sees it.
    pub reason: String,
    /// Status.
    pub status: RefundStatus,
    /// The channel's number for it, once it succeeded.
    pub channel_refund_no: Option<String>,
    /// When the money went back (Unix ms).
    pub refunded_at_ms: Option<i64>,
    /// When it was created (Unix ms).
    pub created_at_ms: i64,
}

/// Whether `character` may not appear in a reason: a control character (NUL, newlines, C1),
/// a line or paragraph separator, or a bidirectional control (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069). A reason is free text that reaches the channel, logs and the
/// operator console: a bidirectional control there shows another text than the one stored (a
/// "Trojan Source" reason), and a line break forges a log line.
fn refused_in_reason(character: char) -> bool {
    character.is_control()
        || matches!(
            character,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// A refund's reason, checked: at most [`REASON_CHARS_MAX`] characters, none of them a control
/// character, a line separator or a bidirectional control.
pub fn checked_reason(text: &str) -> Option<&str> {
    (text.chars().count() <= REASON_CHARS_MAX && !text.chars().any(refused_in_reason))
        .then_some(text)
}

/// What is left to refund of a payment of `amount_fen` whose refunds that are not CLOSED take
/// `refunded_fen` (never below zero).
pub fn left_to_refund(amount_fen: i64, refunded_fen: i64) -> i64 {
    amount_fen.saturating_sub(refunded_fen).max(0)
}

/// What a payment can still be refunded: nothing unless it is `paid`, else its amount less every
/// refund that holds an amount (a sum past `i64` leaves nothing).
pub fn refundable(paid: bool, amount_fen: i64, refunds: &[Refund]) -> i64 {
    if !paid {
        return 0;
    }
    let held = refunds
        .iter()
        .filter(|refund| refund.status.holds_amount())
        .try_fold(0_i64, |sum, refund| sum.checked_add(refund.amount_fen))
        .unwrap_or(i64::MAX);
    left_to_refund(amount_fen, held)
}

/// A payment is refunded in full when nothing is left to refund and none of its refunds is
/// still open (PROCESSING, or ABNORMAL and waiting for a person): only then does its order
/// move to REFUNDED.
pub fn refunded_in_full(left_fen: i64, open_refunds: i64) -> bool {
    left_fen == 0 && open_refunds == 0
}

/// `refund` moved to `to` with the channel's word, or `None` when its state machine does not
/// allow the move from where it is (settled already: a duplicate, or a late word). A SUCCESS
/// takes the channel's refund number and time (`succeeded`; the time defaults to `now_ms`);
/// other moves keep the number the refund had.
pub fn settled(
    refund: &Refund,
    to: RefundStatus,
    succeeded: Option<(&str, Option<i64>)>,
    now_ms: i64,
) -> Option<Refund> {
    if !RefundStatus::allows(refund.status, to) {
        return None;
    }
    let channel_refund_no = succeeded
        .map(|(number, _)| number.to_owned())
        .or_else(|| refund.channel_refund_no.clone());
    let refunded_at_ms =
        (to == RefundStatus::Success).then(|| succeeded.and_then(|(_, at)| at).unwrap_or(now_ms));
    Some(Refund {
        status: to,
        channel_refund_no,
        refunded_at_ms,
        ..refund.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_settles_once_and_only_an_abnormal_one_moves_again() {
        use RefundStatus::*;
        let all = [Processing, Success, Closed, Abnormal];
        for to in [Success, Closed, Abnormal] {
            assert!(RefundStatus::allows(Processing, to));
        }
        for to in [Success, Closed] {
            assert!(RefundStatus::allows(Abnormal, to));
        }
        for from in [Success, Closed] {
            assert!(from.is_final());
            for to in all {
                assert!(!RefundStatus::allows(from, to), "{from:?} -> {to:?}");
            }
        }
        assert!(!Closed.holds_amount());
        assert!(Processing.holds_amount() && Abnormal.holds_amount() && Success.holds_amount());
        for status in all {
            assert_eq!(RefundStatus::parse(status.as_str()), Some(status));
        }
    }

    fn processing(amount_fen: i64) -> Refund {
        Refund {
            refund_no: "R1".to_owned(),
            tenant_id: "t".to_owned(),
            payment_no: "P1".to_owned(),
            order_id: "o".to_owned(),
            channel: "alipay".to_owned(),
            amount_fen,
            reason: String::new(),
            status: RefundStatus::Processing,
            channel_refund_no: None,
            refunded_at_ms: None,
            created_at_ms: 1,
        }
    }

    #[test]
    fn a_settled_refund_takes_the_channels_word_once() {
        let refund = processing(300);
        let done = settled(&refund, RefundStatus::Success, Some(("C9", Some(50))), 99)
            .expect("PROCESSING -> SUCCESS");
        assert_eq!(done.channel_refund_no.as_deref(), Some("C9"));
        assert_eq!(done.refunded_at_ms, Some(50));
        // The channel gave no time: the settlement's.
        let now =
            settled(&refund, RefundStatus::Success, Some(("C9", None)), 99).expect("a success");
        assert_eq!(now.refunded_at_ms, Some(99));
        // A second word on a settled refund changes nothing.
        assert_eq!(settled(&done, RefundStatus::Closed, None, 100), None);
        assert_eq!(
            settled(&done, RefundStatus::Success, Some(("C10", None)), 100),
            None
        );
        // A close keeps no time and the number it had.
        let closed = settled(&refund, RefundStatus::Closed, None, 99).expect("a close");
        assert_eq!(
            (closed.refunded_at_ms, closed.channel_refund_no),
            (None, None)
        );
    }

    #[test]
    fn the_order_is_refunded_only_when_nothing_is_left_and_nothing_is_open() {
        assert_eq!(left_to_refund(1_000, 400), 600);
        assert_eq!(left_to_refund(1_000, 1_000), 0);
        // A total above the amount (which the database's CHECK refuses) never counts as money left.
        assert_eq!(left_to_refund(1_000, 1_200), 0);
        assert_eq!(left_to_refund(i64::MIN, i64::MAX), 0);
        assert!(refunded_in_full(0, 0));
        assert!(
            !refunded_in_full(0, 1),
            "an open refund may still close and give money back"
        );
        assert!(!refunded_in_full(1, 0));
    }

    #[test]
    fn only_a_paid_payment_is_refundable_and_closed_refunds_give_their_amount_back() {
        let with = |status, amount_fen| Refund {
            status,
            ..processing(amount_fen)
        };
        let refunds = [
            with(RefundStatus::Success, 300),
            with(RefundStatus::Closed, 500),
            with(RefundStatus::Abnormal, 100),
            with(RefundStatus::Processing, 50),
        ];
        assert_eq!(refundable(true, 1_000, &refunds), 550);
        assert_eq!(refundable(false, 1_000, &refunds), 0);
        assert_eq!(refundable(true, 1_000, &[]), 1_000);
        // A sum past i64 leaves nothing, not a wrapped amount.
        let huge = [
            with(RefundStatus::Success, i64::MAX),
            with(RefundStatus::Success, 1),
        ];
        assert_eq!(refundable(true, 1_000, &huge), 0);
    }

    #[test]
    fn a_reason_is_short_text() {
        assert_eq!(checked_reason("七天无理由退货"), Some("七天无理由退货"));
        assert_eq!(checked_reason(""), Some(""));
        assert!(checked_reason(&"x".repeat(REASON_CHARS_MAX + 1)).is_none());
        assert!(checked_reason("a\nb").is_none());
        for refused in [
            '\0', '\u{7F}', '\u{85}', '\u{061C}', '\u{200E}', '\u{200F}', '\u{2028}', '\u{2029}',
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}',
        ] {
            assert!(
                checked_reason(&format!("退货{refused}gpj.exe")).is_none(),
                "U+{:04X}",
                u32::from(refused)
            );
        }
        assert!(checked_reason("七天无理由 (7-day) — ok!").is_some());
    }
}

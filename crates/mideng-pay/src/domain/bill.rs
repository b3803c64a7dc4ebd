//! Matching a channel's daily bill against our payments and refunds: what each line means, and
//! what a PAID payment or a successful refund missing from the bill means.
//!
//! | the bill says | we have | verdict |
//! |---|---|---|
//! | charge | that payment PAID, same amount | matched |
//! | charge | that payment PENDING, CLOSED or FAILED | repair: the success flow, as for a notify (the payment becomes PAID, or its charge a refund case); recorded as a `CHARGED_NOT_PAID` case, repaired |
//! | charge | no such payment | `UNKNOWN_CHARGE`, open: not ours to keep or refund blindly |
//! | charge | another amount | `CHARGE_AMOUNT_DIFFERS`, open |
//! | refund | that refund SUCCESS, same amount | matched |
//! | refund | that refund PROCESSING, CLOSED or ABNORMAL | `REFUND_NOT_SETTLED`, open (the refund worker asks the channel; a later run that matches it marks the case repaired) |
//! | refund | no such refund | `UNKNOWN_REFUND`, open |
//! | refund | another amount | `REFUND_AMOUNT_DIFFERS`, open |
//! | nothing | a payment PAID that day on that channel | `PAID_NOT_BILLED`, open |
//! | nothing | a refund SUCCESS that day on that channel | `REFUND_NOT_BILLED`, open |
//!
//! A case is named by its channel, day, kind and number ([`case_id`]), so that a second run of
//! the same bill records nothing twice. "That day" is our record of the channel's time (the
//! paid time the channel reported, or when we learnt of the refund): a movement within moments
//! of midnight may be on the neighbouring day's bill and show as a case here, for a person to
//! resolve. The bill of a day still running (a channel that publishes as the day runs) holds
//! what happened before it was asked for: only our movements before then are looked for on it.

use mideng_channel::ChannelKind;
use mideng_channel::bill::{BillDate, BillEntry};
use serde::Serialize;

use super::payment::{Payment, PaymentStatus};
use super::refund::{Refund, RefundStatus};

/// What a bill and our records disagree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BillCaseKind {
    /// Charged at the channel, not PAID here (every notify lost, no query made).
    ChargedNotPaid,
    /// Charged for a payment number we do not have.
    UnknownCharge,
    /// Charged another amount than our payment's.
    ChargeAmountDiffers,
    /// PAID here, not on the bill.
    PaidNotBilled,
    /// Refunded at the channel, not SUCCESS here.
    RefundNotSettled,
    /// Refunded under a number we do not have.
    UnknownRefund,
    /// Refunded another amount than our refund's.
    RefundAmountDiffers,
    /// SUCCESS here, not on the bill.
    RefundNotBilled,
}

impl BillCaseKind {
    /// Every kind.
    pub const ALL: [BillCaseKind; 8] = [
        BillCaseKind::ChargedNotPaid,
        BillCaseKind::UnknownCharge,
        BillCaseKind::ChargeAmountDiffers,
        BillCaseKind::PaidNotBilled,
        BillCaseKind::RefundNotSettled,
        BillCaseKind::UnknownRefund,
        BillCaseKind::RefundAmountDiffers,
        BillCaseKind::RefundNotBilled,
    ];

    /// As stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            BillCaseKind::ChargedNotPaid => "CHARGED_NOT_PAID",
            BillCaseKind::UnknownCharge => "UNKNOWN_CHARGE",
            BillCaseKind::ChargeAmountDiffers => "CHARGE_AMOUNT_DIFFERS",
            BillCaseKind::PaidNotBilled => "PAID_NOT_BILLED",
            BillCaseKind::RefundNotSettled => "REFUND_NOT_SETTLED",
            BillCaseKind::UnknownRefund => "UNKNOWN_REFUND",
            BillCaseKind::RefundAmountDiffers => "REFUND_AMOUNT_DIFFERS",
            BillCaseKind::RefundNotBilled => "REFUND_NOT_BILLED",
        }
    }

    /// The kind stored as `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// Where a case is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BillCaseStatus {
    /// Waiting for a person (or a later run).
    Open,
    /// Settled by the service: the success flow ran, or a later run matched the line.
    Repaired,
    /// Closed by a person, with a recorded reason.
    Resolved,
}

impl BillCaseStatus {
    /// As stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            BillCaseStatus::Open => "OPEN",
            BillCaseStatus::Repaired => "REPAIRED",
            BillCaseStatus::Resolved => "RESOLVED",
        }
    }

    /// The status stored as `text`.
    pub fn parse(text: &str) -> Option<Self> {
        [
            BillCaseStatus::Open,
            BillCaseStatus::Repaired,
            BillCaseStatus::Resolved,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// One case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BillCase {
    /// `<channel>:<day>:<kind>:<number>`.
    pub case_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// The bill's day, `yyyy-MM-dd`.
    pub bill_date: String,
    /// What disagrees.
    pub kind: BillCaseKind,
    /// The payment or refund number.
    pub reference: String,
    /// Whose it is, when we know the number.
    pub tenant_id: Option<String>,
    /// Our amount, in fen, when we have one.
    pub ours_fen: Option<i64>,
    /// The bill's amount, in fen, when the bill has the line.
    pub billed_fen: Option<i64>,
    /// Where it is.
    pub status: BillCaseStatus,
    /// The evidence, in words.
    pub detail: String,
    /// How it was settled, and by whom.
    pub resolution: Option<String>,
    /// When it was found (Unix ms).
    pub created_at_ms: i64,
    /// When it last changed (Unix ms).
    pub updated_at_ms: i64,
}

/// The name of a case: one per channel, day, kind and number.
pub fn case_id(
    channel: ChannelKind,
    date: BillDate,
    kind: BillCaseKind,
    reference: &str,
) -> String {
    format!("{}:{date}:{}:{reference}", channel.as_str(), kind.as_str())
}

/// What a charge line means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChargeVerdict {
    /// Our PAID payment, to the fen.
    Matched,
    /// Ours, not PAID here: run the success flow.
    Repair,
    /// A case to keep.
    Case(BillCaseKind),
}

/// Judges a charge line against our payment of its number.
pub fn judge_charge(line: &BillEntry, ours: Option<&Payment>) -> ChargeVerdict {
    let Some(payment) = ours else {
        return ChargeVerdict::Case(BillCaseKind::UnknownCharge);
    };
    if payment.amount.fen() != line.amount_fen {
        return ChargeVerdict::Case(BillCaseKind::ChargeAmountDiffers);
    }
    match payment.status {
        PaymentStatus::Paid => ChargeVerdict::Matched,
        PaymentStatus::Pending | PaymentStatus::Closed | PaymentStatus::Failed => {
            ChargeVerdict::Repair
        }
    }
}

/// Judges a refund line against our refund of its number: `None` when it matches.
pub fn judge_refund(line: &BillEntry, ours: Option<&Refund>) -> Option<BillCaseKind> {
    let Some(refund) = ours else {
        return Some(BillCaseKind::UnknownRefund);
    };
    if refund.amount_fen != line.amount_fen || refund.payment_no != line.out_trade_no {
        return Some(BillCaseKind::RefundAmountDiffers);
    }
    (refund.status != RefundStatus::Success).then_some(BillCaseKind::RefundNotSettled)
}

#[cfg(test)]
mod tests {
    use mideng_channel::bill::BillEntryKind;

    use crate::domain::money::{Amount, Currency};

    use super::*;

    fn line(kind: BillEntryKind, fen: i64) -> BillEntry {
        BillEntry {
            kind,
            out_trade_no: "P1".to_owned(),
            channel_trade_no: "T1".to_owned(),
            out_refund_no: (kind == BillEntryKind::Refund).then(|| "R1".to_owned()),
            amount_fen: fen,
            at_ms: None,
        }
    }

    fn payment(status: PaymentStatus) -> Payment {
        Payment {
            payment_no: "P1".to_owned(),
            tenant_id: "t".to_owned(),
            order_id: "o".to_owned(),
            channel: ChannelKind::Alipay,
            amount: Amount::new(321).expect("an amount"),
            currency: Currency::Cny,
            status,
            pay_url: None,
            expires_at_ms: 0,
            channel_trade_no: None,
            paid_at_ms: None,
            created_at_ms: 0,
        }
    }

    fn refund(status: RefundStatus) -> Refund {
        Refund {
            refund_no: "R1".to_owned(),
            tenant_id: "t".to_owned(),
            payment_no: "P1".to_owned(),
            order_id: "o".to_owned(),
            channel: "alipay".to_owned(),
            amount_fen: 100,
            reason: String::new(),
            status,
            channel_refund_no: None,
            refunded_at_ms: None,
            created_at_ms: 0,
        }
    }

    #[test]
    fn every_charge_line_is_matched_repaired_or_a_case() {
        let charge = line(BillEntryKind::Charge, 321);
        assert_eq!(
            judge_charge(&charge, Some(&payment(PaymentStatus::Paid))),
            ChargeVerdict::Matched
        );
        for status in [
            PaymentStatus::Pending,
            PaymentStatus::Closed,
            PaymentStatus::Failed,
        ] {
            assert_eq!(
                judge_charge(&charge, Some(&payment(status))),
                ChargeVerdict::Repair
            );
        }
        assert_eq!(
            judge_charge(&charge, None),
            ChargeVerdict::Case(BillCaseKind::UnknownCharge)
        );
        assert_eq!(
            judge_charge(
                &line(BillEntryKind::Charge, 322),
                Some(&payment(PaymentStatus::Paid))
            ),
            ChargeVerdict::Case(BillCaseKind::ChargeAmountDiffers),
            "an amount that differs is never repaired, PAID or not"
        );
    }

    #[test]
    fn every_refund_line_is_matched_or_a_case() {
        let line = line(BillEntryKind::Refund, 100);
        assert_eq!(
            judge_refund(&line, Some(&refund(RefundStatus::Success))),
            None
        );
        for status in [
            RefundStatus::Processing,
            RefundStatus::Closed,
            RefundStatus::Abnormal,
        ] {
            assert_eq!(
                judge_refund(&line, Some(&refund(status))),
                Some(BillCaseKind::RefundNotSettled)
            );
        }
        assert_eq!(judge_refund(&line, None), Some(BillCaseKind::UnknownRefund));
        let mut other = refund(RefundStatus::Success);
        other.amount_fen = 99;
        assert_eq!(
            judge_refund(&line, Some(&other)),
            Some(BillCaseKind::RefundAmountDiffers)
        );
    }

    #[test]
    fn kinds_and_statuses_read_back_and_cases_are_named_once() {
        for kind in BillCaseKind::ALL {
            assert_eq!(BillCaseKind::parse(kind.as_str()), Some(kind));
        }
        for status in [
            BillCaseStatus::Open,
            BillCaseStatus::Repaired,
            BillCaseStatus::Resolved,
        ] {
            assert_eq!(BillCaseStatus::parse(status.as_str()), Some(status));
        }
        let date = BillDate::parse("2026-12-03").expect("date");
        assert_eq!(
            case_id(ChannelKind::Wechat, date, BillCaseKind::PaidNotBilled, "P1"),
            "wechat:2026-12-03:PAID_NOT_BILLED:P1"
        );
    }
}

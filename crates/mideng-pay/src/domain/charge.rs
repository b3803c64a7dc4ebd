//! The one-PAID rule: what a charge the channel reports does to a payment attempt, whatever
//! order the outcomes of an order's attempts arrive in.
//!
//! An order has at most one PAID payment. Any other charge the channel made for it is money
//! this service will not keep: a refund case, recorded in the transaction that learns of the
//! charge, and refunded once (automatically when that is on, or by a person). The rule is one
//! pure function, [`judge`], used by every path that learns of a charge (a notify, a query by
//! reconciliation, a close refused because the buyer paid first), so that the arrival order of
//! two attempts' successes, closes and notifies cannot change the outcome:
//!
//! | this attempt | another attempt of the order is PAID | here |
//! |---|---|---|
//! | PAID | — | nothing: a duplicate |
//! | FAILED (refused at creation, charged anyway) | either | a refund case, the attempt stays FAILED |
//! | PENDING or CLOSED | yes | a refund case (a double charge); a PENDING attempt is closed |
//! | PENDING or CLOSED | no | PAID; the order moves to PAID if it still waits, else a refund case (paid after cancel) |
//!
//! When a late success (a CLOSED attempt charged) makes the order PAID, the order's other open
//! attempt is closed at the channel too, so that the buyer cannot pay it as well.

use super::payment::PaymentStatus;

/// Why the channel's money for a payment goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaseKind {
    /// The payment became PAID after its order was canceled.
    PaidAfterCancel,
    /// An attempt was charged while another payment had paid the order.
    DoubleCharge,
    /// An attempt that failed at creation was charged.
    FailedAttemptCharged,
}

impl CaseKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CaseKind::PaidAfterCancel => "PAID_AFTER_CANCEL",
            CaseKind::DoubleCharge => "DOUBLE_CHARGE",
            CaseKind::FailedAttemptCharged => "FAILED_ATTEMPT_CHARGED",
        }
    }
}

/// What a reported charge does to the attempt it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// It is PAID already: nothing changes.
    Duplicate,
    /// It becomes the order's PAID payment (`late`: it was CLOSED here).
    Keep {
        /// The attempt was CLOSED here: the order's other open attempt must be closed.
        late: bool,
    },
    /// The money goes back: a refund case of this kind. `close`: the attempt is PENDING and
    /// moves to CLOSED with the case (it will never be this order's payment).
    Refund {
        /// Why.
        kind: CaseKind,
        /// Close the attempt here.
        close: bool,
    },
}

/// The one-PAID rule for a charge reported for an attempt in `status`, when the order has
/// (`other_paid`) or has not another PAID payment.
pub fn judge(status: PaymentStatus, other_paid: bool) -> Charge {
    match (status, other_paid) {
        (PaymentStatus::Paid, _) => Charge::Duplicate,
        (PaymentStatus::Failed, _) => Charge::Refund {
            kind: CaseKind::FailedAttemptCharged,
            close: false,
        },
        (PaymentStatus::Pending, true) => Charge::Refund {
            kind: CaseKind::DoubleCharge,
            close: true,
        },
        (PaymentStatus::Closed, true) => Charge::Refund {
            kind: CaseKind::DoubleCharge,
            close: false,
        },
        (PaymentStatus::Pending, false) => Charge::Keep { late: false },
        (PaymentStatus::Closed, false) => Charge::Keep { late: true },
    }
}

/// What is kept when the order did not move to PAID with a kept charge (it no longer waited:
/// canceled meanwhile): the payment is PAID and its money goes back.
pub fn kept_without_order(order_moved: bool) -> Option<CaseKind> {
    (!order_moved).then_some(CaseKind::PaidAfterCancel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mideng::state::StateMachine;

    const STATUSES: [PaymentStatus; 4] = [
        PaymentStatus::Pending,
        PaymentStatus::Paid,
        PaymentStatus::Closed,
        PaymentStatus::Failed,
    ];

    /// Two attempts of one order, each charged once, in either arrival order and from any
    /// starting status: at most one is kept, and every charge is either kept or a case.
    #[test]
    fn two_charges_of_one_order_keep_one_and_refund_the_other_in_either_order() {
        for first in STATUSES {
            for second in STATUSES {
                if first == PaymentStatus::Paid || second == PaymentStatus::Paid {
                    continue;
                }
                if first == PaymentStatus::Pending && second == PaymentStatus::Pending {
                    // One PENDING attempt per order at most.
                    continue;
                }
                for order in [[0, 1], [1, 0]] {
                    let starts = [first, second];
                    let mut paid = [false, false];
                    let mut cases = [false, false];
                    for i in order {
                        let other = paid[1 - i];
                        match judge(starts[i], other) {
                            Charge::Keep { .. } => paid[i] = true,
                            Charge::Refund { close, .. } => {
                                cases[i] = true;
                                assert_eq!(close, starts[i] == PaymentStatus::Pending);
                            }
                            Charge::Duplicate => unreachable!("not paid yet"),
                        }
                    }
                    assert!(!(paid[0] && paid[1]), "{starts:?} {order:?}");
                    for i in 0..2 {
                        assert!(paid[i] ^ cases[i], "{starts:?} {order:?}: charge {i}");
                    }
                    // A failed attempt is never kept, whatever came first.
                    for i in 0..2 {
                        if starts[i] == PaymentStatus::Failed {
                            assert!(cases[i]);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_kept_charge_moves_the_attempt_along_its_state_machine() {
        for status in STATUSES {
            for other in [false, true] {
                match judge(status, other) {
                    Charge::Keep { late } => {
                        assert!(PaymentStatus::allows(status, PaymentStatus::Paid));
                        assert_eq!(late, status == PaymentStatus::Closed);
                    }
                    Charge::Refund { close: true, .. } => {
                        assert!(PaymentStatus::allows(status, PaymentStatus::Closed));
                    }
                    Charge::Refund { close: false, .. } | Charge::Duplicate => {}
                }
            }
        }
        assert_eq!(kept_without_order(true), None);
        assert_eq!(kept_without_order(false), Some(CaseKind::PaidAfterCancel));
    }
}

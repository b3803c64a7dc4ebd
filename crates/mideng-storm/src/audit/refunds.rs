//! The audit's rules for refunds and for the reversals of deductions: pure, over the same
//! facts as [`super::check`], which calls them.
//!
//! A refund is checked against itself (one per request key, none PROCESSING after quiescence),
//! its payment (the refunds not CLOSED within its amount and equal to its running total), its
//! order (REFUNDED exactly when the payment is refunded in full), the channel (what succeeded
//! here is what the trade and the ledger refunded; each refund here not CLOSED is in the trade's
//! refund book in the same state, and each refund in the book is known here) and the answers
//! (every refund answered is stored under its key). A reversal is a credit whose reference names
//! its deduction: one per deduction, by the deduction's amount, each answered one in the ledger
//! and none that nobody was told about.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    AuditFigures, ChannelFacts, ClientFacts, EntryFact, OrderFact, PaymentFact, RefundFact,
    Snapshot, Violation, violation,
};

/// The reference of a deduction's reversal is this prefix and the deduction's number (the
/// service's `mideng_pay::domain::wallet::REVERSAL_REFERENCE_PREFIX`; a client's credit may not
/// use it).
pub(super) const REVERSAL_REFERENCE_PREFIX: &str = "reversal-";

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 17] = [
    "a deduction reversed at most once",
    "a reversal puts back its deduction's amount",
    "money conserved: no reversal nobody was told about",
    "every answered reversal is in the ledger",
    "no refund PROCESSING after quiescence",
    "one refund per request key",
    "a payment's refunds here equal the channel's",
    "a refund has its payment",
    "only a PAID payment is refunded",
    "a payment's refunds not CLOSED within its amount",
    "a payment's running refund total equals its refunds",
    "a payment refunded in full refunds its order",
    "an order REFUNDED only when its payment is refunded in full",
    "a refund here is at the channel",
    "a refund here is the channel's",
    "every refund at the channel is known here",
    "every answered refund is stored under its key",
];

/// Reversals: each reversal credit puts back one deduction of the same wallet by its amount,
/// once; each answered reversal is in the ledger as answered; none nobody was told about. The
/// balances' arithmetic (credits − debits) counts reversal credits like any other.
pub(super) fn check_reversals(
    snapshot: &Snapshot,
    client: &ClientFacts,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    let debits: HashMap<(&str, &str, &str), &EntryFact> = snapshot
        .entries
        .iter()
        .filter(|entry| entry.kind == "DEBIT")
        .map(|entry| {
            (
                (
                    entry.tenant_id.as_str(),
                    entry.user_id.as_str(),
                    entry.entry_no.as_str(),
                ),
                entry,
            )
        })
        .collect();
    let mut per_deduction: BTreeMap<(&str, &str, &str), Vec<&EntryFact>> = BTreeMap::new();
    for entry in &snapshot.entries {
        if entry.kind != "CREDIT" {
            continue;
        }
        let Some(deduction) = entry.reference.strip_prefix(REVERSAL_REFERENCE_PREFIX) else {
            continue;
        };
        figures.reversals += 1;
        per_deduction
            .entry((&entry.tenant_id, &entry.user_id, deduction))
            .or_default()
            .push(entry);
    }
    for ((tenant, user, deduction), reversals) in &per_deduction {
        if reversals.len() > 1 {
            violations.push(violation(
                "a deduction reversed at most once",
                format!(
                    "{tenant}/{user} deduction {deduction}: {} reversals",
                    reversals.len()
                ),
            ));
        }
        match debits.get(&(*tenant, *user, *deduction)) {
            Some(debit) => {
                for reversal in reversals {
                    if reversal.amount != debit.amount {
                        violations.push(violation(
                            "a reversal puts back its deduction's amount",
                            format!(
                                "{tenant}/{user} deduction {deduction} of {}: reversal {} of {}",
                                debit.amount, reversal.entry_no, reversal.amount
                            ),
                        ));
                    }
                }
            }
            None => violations.push(violation(
                "a reversal puts back its deduction's amount",
                format!("{tenant}/{user}: a reversal of {deduction}, which is no deduction"),
            )),
        }
        let answered = client.reversals.contains_key(&(
            (*tenant).to_owned(),
            (*user).to_owned(),
            (*deduction).to_owned(),
        ));
        if !answered {
            violations.push(violation(
                "money conserved: no reversal nobody was told about",
                format!("{tenant}/{user} deduction {deduction}"),
            ));
        }
    }
    for ((tenant, user, deduction), answered) in &client.reversals {
        if answered.reversal_nos.len() > 1 || answered.amounts.len() > 1 {
            violations.push(violation(
                "a deduction reversed at most once",
                format!(
                    "{tenant}/{user} deduction {deduction}: answers named {:?} of {:?}",
                    answered.reversal_nos, answered.amounts
                ),
            ));
        }
        let stored = per_deduction
            .get(&(tenant.as_str(), user.as_str(), deduction.as_str()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let in_ledger = stored.iter().any(|entry| {
            answered.reversal_nos.contains(&entry.entry_no)
                && answered.amounts.contains(&entry.amount)
        });
        if !in_ledger {
            violations.push(violation(
                "every answered reversal is in the ledger",
                format!(
                    "{tenant}/{user} deduction {deduction}: answered {:?} of {:?}, ledger {:?}",
                    answered.reversal_nos,
                    answered.amounts,
                    stored
                        .iter()
                        .map(|entry| (&entry.entry_no, entry.amount))
                        .collect::<Vec<_>>()
                ),
            ));
        }
    }
}

/// Refunds, against themselves, their payments and orders, the channel and the answers.
pub(super) fn check_refunds(
    snapshot: &Snapshot,
    channel: &ChannelFacts,
    client: &ClientFacts,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    figures.refunds = snapshot.refunds.len();
    let payments: HashMap<&str, &PaymentFact> = snapshot
        .payments
        .iter()
        .map(|payment| (payment.payment_no.as_str(), payment))
        .collect();
    let orders: HashMap<(&str, &str), &OrderFact> = snapshot
        .orders
        .iter()
        .map(|order| ((order.tenant_id.as_str(), order.order_id.as_str()), order))
        .collect();
    let mut per_key: BTreeMap<(&str, &str), Vec<&RefundFact>> = BTreeMap::new();
    let mut per_payment: BTreeMap<&str, Vec<&RefundFact>> = BTreeMap::new();
    let mut by_number: HashMap<&str, &RefundFact> = HashMap::new();
    for refund in &snapshot.refunds {
        per_key
            .entry((&refund.tenant_id, &refund.request_key))
            .or_default()
            .push(refund);
        per_payment
            .entry(&refund.payment_no)
            .or_default()
            .push(refund);
        by_number.insert(&refund.refund_no, refund);
        match refund.status.as_str() {
            "SUCCESS" => figures.refunds_succeeded += 1,
            "PROCESSING" => violations.push(violation(
                "no refund PROCESSING after quiescence",
                format!("{} of {}", refund.refund_no, refund.payment_no),
            )),
            _ => {}
        }
    }
    for ((tenant, key), refunds) in &per_key {
        if refunds.len() > 1 {
            violations.push(violation(
                "one refund per request key",
                format!(
                    "{tenant} key {key}: {:?}",
                    refunds
                        .iter()
                        .map(|refund| &refund.refund_no)
                        .collect::<Vec<_>>()
                ),
            ));
        }
    }

    // Per payment: within its amount, its running total, the channel's refunded sum.
    let sum = |refunds: &[&RefundFact], counted: &dyn Fn(&str) -> bool| -> i64 {
        refunds
            .iter()
            .filter(|refund| counted(&refund.status))
            .fold(0_i64, |total, refund| total.saturating_add(refund.amount))
    };
    let mut refunded_somewhere: BTreeSet<&str> = per_payment.keys().copied().collect();
    refunded_somewhere.extend(channel.refunded.keys().map(String::as_str));
    refunded_somewhere.extend(
        channel
            .trades
            .iter()
            .filter(|(_, trade)| trade.refunded_fen != 0 || !trade.refunds.is_empty())
            .map(|(number, _)| number.as_str()),
    );
    for number in refunded_somewhere {
        let refunds = per_payment
            .get(number)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let held = sum(refunds, &|status| status != "CLOSED");
        let succeeded = sum(refunds, &|status| status == "SUCCESS");
        let trade = channel.trades.get(number);
        let at_channel = trade.map_or(0, |trade| trade.refunded_fen);
        let in_ledger = channel.refunded.get(number).map_or(0, |amounts| {
            amounts
                .iter()
                .fold(0_i64, |total, amount| total.saturating_add(*amount))
        });
        if succeeded != at_channel || succeeded != in_ledger {
            violations.push(violation(
                "a payment's refunds here equal the channel's",
                format!(
                    "{number}: SUCCESS here {succeeded} fen, the trade's refunded {at_channel} fen, the ledger's refunds {in_ledger} fen"
                ),
            ));
        }
        let Some(payment) = payments.get(number) else {
            if !refunds.is_empty() {
                violations.push(violation(
                    "a refund has its payment",
                    format!("{number}: {} refunds", refunds.len()),
                ));
            }
            continue;
        };
        // A charge this service does not keep (the payment CLOSED or FAILED here) is given
        // back by its automatic refunds (request keys auto-<payment_no>, then -2, -3 after a
        // refund the channel closed) alone.
        let automatic = format!("auto-{number}");
        let automatic_only = refunds.iter().all(|refund| {
            refund.request_key == automatic
                || refund
                    .request_key
                    .strip_prefix(automatic.as_str())
                    .is_some_and(|ask| ask.starts_with('-'))
        });
        if !refunds.is_empty() && payment.status != "PAID" && !automatic_only {
            violations.push(violation(
                "only a PAID payment is refunded",
                format!(
                    "{number} is {} with {} refunds",
                    payment.status,
                    refunds.len()
                ),
            ));
        }
        if held > payment.amount {
            violations.push(violation(
                "a payment's refunds not CLOSED within its amount",
                format!("{number}: {held} fen of {} held by refunds", payment.amount),
            ));
        }
        if held != payment.refunded {
            violations.push(violation(
                "a payment's running refund total equals its refunds",
                format!(
                    "{number}: total {}, refunds not CLOSED {held}",
                    payment.refunded
                ),
            ));
        }
        // Refunded in full ⇔ the order REFUNDED. An order canceled before the payment went
        // through (a refund case) keeps its status.
        let order = orders.get(&(payment.tenant_id.as_str(), payment.order_id.as_str()));
        let order_status = order.map_or("missing", |order| order.status.as_str());
        let full = payment.amount > 0 && succeeded == payment.amount;
        // Only the order's own payment: a charge it did not keep (a refund case of a FAILED
        // or CLOSED attempt) is given back in full while the order stays PAID.
        if full
            && payment.status == "PAID"
            && matches!(order_status, "PAID" | "DELIVERED" | "REFUNDING")
        {
            violations.push(violation(
                "a payment refunded in full refunds its order",
                format!("{number} refunded in full, its order is {order_status}"),
            ));
        }
        if !full && order_status == "REFUNDED" && payment.status == "PAID" {
            violations.push(violation(
                "an order REFUNDED only when its payment is refunded in full",
                format!("{number}: {succeeded} of {} fen refunded", payment.amount),
            ));
        }
    }

    // Each refund here against the channel's book, and the channel's book against here.
    for refund in &snapshot.refunds {
        let at_channel = channel.trades.get(&refund.payment_no).and_then(|trade| {
            trade
                .refunds
                .iter()
                .find(|theirs| theirs.out_refund_no == refund.refund_no)
        });
        match at_channel {
            // A refund the channel never took (refused, or never sent) is CLOSED here.
            None if refund.status == "CLOSED" => {}
            None => violations.push(violation(
                "a refund here is at the channel",
                format!(
                    "{} ({} fen of {}) is {} here, unknown at the channel",
                    refund.refund_no, refund.amount, refund.payment_no, refund.status
                ),
            )),
            Some(theirs) => {
                if theirs.amount != refund.amount || theirs.status != refund.status {
                    violations.push(violation(
                        "a refund here is the channel's",
                        format!(
                            "{} of {}: {} fen {} here, {} fen {} at the channel",
                            refund.refund_no,
                            refund.payment_no,
                            refund.amount,
                            refund.status,
                            theirs.amount,
                            theirs.status
                        ),
                    ));
                }
            }
        }
    }
    for (number, trade) in &channel.trades {
        for theirs in &trade.refunds {
            let known = by_number
                .get(theirs.out_refund_no.as_str())
                .is_some_and(|refund| refund.payment_no == *number);
            if !known {
                violations.push(violation(
                    "every refund at the channel is known here",
                    format!(
                        "{} ({} fen, {}) of {number}",
                        theirs.out_refund_no, theirs.amount, theirs.status
                    ),
                ));
            }
        }
    }

    // What the clients were told.
    for ((tenant, key), answered) in &client.refunds {
        if answered.refund_nos.len() > 1 || answered.amounts.len() > 1 {
            violations.push(violation(
                "one refund per request key",
                format!(
                    "{tenant} key {key}: answers named {:?} of {:?} fen",
                    answered.refund_nos, answered.amounts
                ),
            ));
        }
        let stored = per_key
            .get(&(tenant.as_str(), key.as_str()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let as_answered = stored.iter().any(|refund| {
            answered.refund_nos.contains(&refund.refund_no)
                && refund.payment_no == answered.payment_no
                && answered.amounts.contains(&refund.amount)
        });
        if !as_answered {
            violations.push(violation(
                "every answered refund is stored under its key",
                format!(
                    "{tenant} key {key}: answered {:?} ({:?} fen of {}), stored {:?}",
                    answered.refund_nos,
                    answered.amounts,
                    answered.payment_no,
                    stored
                        .iter()
                        .map(|refund| (&refund.refund_no, refund.amount))
                        .collect::<Vec<_>>()
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{charged, grant, order, payment};
    use super::super::{
        AnsweredRefund, AnsweredReversal, ChannelRefundFact, GrantFact, TradeFact, WalletFact,
        check,
    };
    use super::*;
    fn refund(number: &str, key: &str, amount: i64, status: &str) -> RefundFact {
        RefundFact {
            refund_no: number.to_owned(),
            tenant_id: "t".to_owned(),
            request_key: key.to_owned(),
            payment_no: "P1".to_owned(),
            order_id: "o1".to_owned(),
            amount,
            status: status.to_owned(),
        }
    }

    fn at_channel(number: &str, amount: i64, status: &str) -> ChannelRefundFact {
        ChannelRefundFact {
            out_refund_no: number.to_owned(),
            amount,
            status: status.to_owned(),
        }
    }

    /// P1 (100 fen, PAID, granted) with these refunds here and at the channel; the ledger
    /// holds the channel's successful refunds; the grant revoked when the refunds here that
    /// succeeded add up to the payment's amount (as the revocation consumer leaves it).
    fn refunded_world(
        ours: Vec<RefundFact>,
        theirs: Vec<ChannelRefundFact>,
        order_status: &str,
    ) -> (Snapshot, ChannelFacts) {
        let held = ours
            .iter()
            .filter(|refund| refund.status != "CLOSED")
            .map(|refund| refund.amount)
            .sum();
        let refunded_here: i64 = ours
            .iter()
            .filter(|refund| refund.status == "SUCCESS")
            .map(|refund| refund.amount)
            .sum();
        let snapshot = Snapshot {
            payments: vec![PaymentFact {
                refunded: held,
                ..payment("P1", "o1", "PAID")
            }],
            orders: vec![order("o1", order_status)],
            grants: vec![GrantFact {
                revoked_at_ms: (refunded_here == 100).then_some(1),
                ..grant("P1", "o1")
            }],
            refunds: ours,
            ..Snapshot::default()
        };
        let succeeded: Vec<i64> = theirs
            .iter()
            .filter(|refund| refund.status == "SUCCESS")
            .map(|refund| refund.amount)
            .collect();
        let mut channel = charged(&["P1"]);
        channel.trades.insert(
            "P1".to_owned(),
            TradeFact {
                status: "PAID".to_owned(),
                exists: true,
                refunded_fen: succeeded.iter().sum(),
                refunds: theirs,
            },
        );
        if !succeeded.is_empty() {
            channel.refunded.insert("P1".to_owned(), succeeded);
        }
        (snapshot, channel)
    }

    fn names(violations: &[Violation]) -> BTreeSet<&'static str> {
        violations
            .iter()
            .map(|violation| violation.invariant)
            .collect()
    }

    #[test]
    fn refunds_that_match_the_channel_pass_and_a_full_refund_needs_a_refunded_order() {
        let answered = ClientFacts {
            refunds: [(
                ("t".to_owned(), "k1".to_owned()),
                AnsweredRefund {
                    payment_no: "P1".to_owned(),
                    amounts: [60].into(),
                    refund_nos: ["R1".to_owned()].into(),
                },
            )]
            .into(),
            ..ClientFacts::default()
        };
        let partial = refunded_world(
            vec![
                refund("R1", "k1", 60, "SUCCESS"),
                refund("R2", "k2", 70, "CLOSED"),
            ],
            vec![at_channel("R1", 60, "SUCCESS")],
            "PAID",
        );
        let (violations, figures) = check(&partial.0, &partial.1, &answered);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!((figures.refunds, figures.refunds_succeeded), (2, 1));

        let full = |order_status| {
            refunded_world(
                vec![
                    refund("R1", "k1", 60, "SUCCESS"),
                    refund("R3", "k3", 40, "SUCCESS"),
                ],
                vec![
                    at_channel("R1", 60, "SUCCESS"),
                    at_channel("R3", 40, "SUCCESS"),
                ],
                order_status,
            )
        };
        let (refunded, channel) = full("REFUNDED");
        let (violations, _) = check(&refunded, &channel, &answered);
        assert!(violations.is_empty(), "{violations:?}");
        let (still_paid, channel) = full("PAID");
        let (violations, _) = check(&still_paid, &channel, &answered);
        assert_eq!(
            names(&violations),
            BTreeSet::from(["a payment refunded in full refunds its order"])
        );
    }

    #[test]
    fn refunds_that_disagree_with_the_channel_are_named() {
        // R1 SUCCESS here, unknown at the channel; R2 refunded at the channel, unknown here;
        // R3 still PROCESSING; R4 and R5 under one key; together above the amount.
        let (snapshot, channel) = refunded_world(
            vec![
                refund("R1", "k1", 30, "SUCCESS"),
                refund("R3", "k3", 30, "PROCESSING"),
                refund("R4", "k4", 25, "SUCCESS"),
                refund("R5", "k4", 25, "SUCCESS"),
            ],
            vec![
                at_channel("R2", 10, "SUCCESS"),
                at_channel("R3", 30, "SUCCESS"),
                at_channel("R4", 25, "SUCCESS"),
                at_channel("R5", 25, "SUCCESS"),
            ],
            "PAID",
        );
        let answered = ClientFacts {
            refunds: [(
                ("t".to_owned(), "k9".to_owned()),
                AnsweredRefund {
                    payment_no: "P1".to_owned(),
                    amounts: [5].into(),
                    refund_nos: ["R9".to_owned(), "R10".to_owned()].into(),
                },
            )]
            .into(),
            ..ClientFacts::default()
        };
        let (violations, _) = check(&snapshot, &channel, &answered);
        assert_eq!(
            names(&violations),
            BTreeSet::from([
                "the channel's ledger equals ours, order by order",
                "no refund PROCESSING after quiescence",
                "one refund per request key",
                "a payment's refunds here equal the channel's",
                "a payment's refunds not CLOSED within its amount",
                "a refund here is at the channel",
                "a refund here is the channel's",
                "every refund at the channel is known here",
                "every answered refund is stored under its key",
            ]),
            "{violations:?}"
        );
    }

    #[test]
    fn a_reversal_counts_in_the_balance_and_a_second_one_is_a_violation() {
        let entry = |number: &str, kind: &str, amount: i64, reference: &str| EntryFact {
            entry_no: number.to_owned(),
            tenant_id: "t".to_owned(),
            user_id: "u".to_owned(),
            kind: kind.to_owned(),
            amount,
            order_id: (kind == "DEBIT").then(|| "o1".to_owned()),
            reference: reference.to_owned(),
            balance_after: 0,
            wallet_version: 0,
        };
        let wallet = |balance| WalletFact {
            tenant_id: "t".to_owned(),
            user_id: "u".to_owned(),
            balance,
        };
        let client = ClientFacts {
            credits: [(("t".to_owned(), "u".to_owned(), "k1".to_owned()), 100)].into(),
            deducts: [(
                ("t".to_owned(), "u".to_owned(), "d1".to_owned()),
                ("o1".to_owned(), 30),
            )]
            .into(),
            reversals: [(
                ("t".to_owned(), "u".to_owned(), "D1".to_owned()),
                AnsweredReversal {
                    reversal_nos: ["C2".to_owned()].into(),
                    amounts: [30].into(),
                },
            )]
            .into(),
            ..ClientFacts::default()
        };
        let mut once = Snapshot {
            wallets: vec![wallet(100)],
            entries: vec![
                entry("C1", "CREDIT", 100, "k1"),
                entry("D1", "DEBIT", 30, "o1"),
                entry("C2", "CREDIT", 30, "reversal-D1"),
            ],
            ..Snapshot::default()
        };
        let (violations, figures) = check(&once, &charged(&[]), &client);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(figures.reversals, 1);

        once.wallets = vec![wallet(130)];
        once.entries.push(entry("C3", "CREDIT", 30, "reversal-D1"));
        let (violations, _) = check(&once, &charged(&[]), &client);
        assert_eq!(
            names(&violations),
            BTreeSet::from(["a deduction reversed at most once"]),
            "{violations:?}"
        );
    }
}

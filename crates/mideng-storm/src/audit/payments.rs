//! Payments against the channel: every answered payment stored, one PENDING and one PAID per
//! order, every charge PAID here (or given back by its case), nothing PAID the channel did not
//! charge, a close on one side a close on the other, and every payment for its order's amount
//! and currency.
use std::collections::{BTreeMap, HashSet};

use super::{AuditFigures, ChannelFacts, ClientFacts, Index, Snapshot, Violation, violation};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 10] = [
    "every answered payment is stored",
    "one pending payment per order",
    "one paid payment per order",
    "a trade is charged once",
    "charged amount equals the payment's",
    "every trade charged at the channel is PAID here",
    "nothing PAID that the channel did not charge",
    "closed here ⇒ closed at the channel",
    "closed at the channel ⇒ closed here",
    "payment amount equals its order's amount",
];

/// Checks them, adding what it finds to `violations` and `figures`.
pub(super) fn check(
    snapshot: &Snapshot,
    channel: &ChannelFacts,
    client: &ClientFacts,
    index: &Index<'_>,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    // Every payment a client was answered with is stored: an acknowledged creation is never
    // lost, not even by a failover right after it.
    for number in &client.payments {
        if !index.payments.contains_key(number.as_str()) {
            violations.push(violation(
                "every answered payment is stored",
                format!(
                    "{number} was answered and is not in the database: a lost acknowledged write"
                ),
            ));
        }
    }

    // Every payment, whatever its status, asks for its order's amount in its order's currency.
    for payment in &snapshot.payments {
        match index
            .orders
            .get(&(payment.tenant_id.as_str(), payment.order_id.as_str()))
        {
            Some(order)
                if order.pricing.amount != payment.amount || order.currency != payment.currency =>
            {
                violations.push(violation(
                    "payment amount equals its order's amount",
                    format!(
                        "{} ({}/{}, {}): {} {}, its order {} {}",
                        payment.payment_no,
                        payment.tenant_id,
                        payment.order_id,
                        payment.status,
                        payment.amount,
                        payment.currency,
                        order.pricing.amount,
                        order.currency
                    ),
                ));
            }
            Some(_) => {}
            // A PAID one is named by the grants' check.
            None if payment.status != "PAID" => violations.push(violation(
                "a payment has its order",
                format!(
                    "{} ({}): no order {}/{}",
                    payment.payment_no, payment.status, payment.tenant_id, payment.order_id
                ),
            )),
            None => {}
        }
    }

    // One PENDING and one PAID payment per order at most.
    let mut per_order: BTreeMap<(&str, &str), (usize, usize)> = BTreeMap::new();
    for payment in &snapshot.payments {
        let counts = per_order
            .entry((payment.tenant_id.as_str(), payment.order_id.as_str()))
            .or_default();
        match payment.status.as_str() {
            "PENDING" => counts.0 += 1,
            "PAID" => counts.1 += 1,
            _ => {}
        }
    }
    for ((tenant, order), (pending, paid)) in &per_order {
        if *pending > 1 {
            violations.push(violation(
                "one pending payment per order",
                format!("{tenant}/{order}: {pending} PENDING"),
            ));
        }
        if *paid > 1 {
            violations.push(violation(
                "one paid payment per order",
                format!("{tenant}/{order}: {paid} PAID"),
            ));
        }
    }

    // Charged at the channel ⇔ PAID here — or, for a charge this service does not keep (a
    // double charge, a failed attempt charged), given back in full by its automatic refund.
    let given_back: HashSet<&str> = snapshot
        .refunds
        .iter()
        .filter(|refund| refund.status == "SUCCESS" && refund.request_key.starts_with("auto-"))
        .filter(|refund| {
            index
                .payments
                .get(refund.payment_no.as_str())
                .is_some_and(|payment| payment.amount == refund.amount)
        })
        .map(|refund| refund.payment_no.as_str())
        .collect();
    for (number, charges) in &channel.charges {
        if charges.len() > 1 {
            violations.push(violation(
                "a trade is charged once",
                format!("{number}: {} charges", charges.len()),
            ));
        }
        match index.payments.get(number.as_str()) {
            Some(payment) if payment.status == "PAID" => {
                if charges.iter().any(|amount| *amount != payment.amount) {
                    violations.push(violation(
                        "charged amount equals the payment's",
                        format!("{number}: charged {charges:?}, payment {}", payment.amount),
                    ));
                }
            }
            Some(_) if given_back.contains(number.as_str()) => figures.refund_cases += 1,
            Some(payment) => violations.push(violation(
                "every trade charged at the channel is PAID here",
                format!("{number} is {} here", payment.status),
            )),
            None => violations.push(violation(
                "every trade charged at the channel is PAID here",
                format!("{number} is unknown here"),
            )),
        }
    }
    for payment in &snapshot.payments {
        let trade = channel.trades.get(&payment.payment_no);
        match payment.status.as_str() {
            "PAID" => {
                figures.paid += 1;
                if !channel.charges.contains_key(&payment.payment_no) {
                    violations.push(violation(
                        "nothing PAID that the channel did not charge",
                        payment.payment_no.clone(),
                    ));
                }
            }
            "CLOSED" => {
                if let Some(trade) = trade
                    && trade.exists
                    && trade.status != "CLOSED"
                {
                    violations.push(violation(
                        "closed here ⇒ closed at the channel",
                        format!("{} is {} at the channel", payment.payment_no, trade.status),
                    ));
                }
            }
            _ => {}
        }
        if let Some(trade) = trade
            && trade.status == "CLOSED"
            && payment.status != "CLOSED"
            && payment.status != "FAILED"
        {
            violations.push(violation(
                "closed at the channel ⇒ closed here",
                format!("{} is {} here", payment.payment_no, payment.status),
            ));
        }
    }
}

//! Wallets: every balance equals its ledger and is never negative, every answered deduct and
//! credit is in the ledger exactly once, and no money moved that nobody was told about.
use std::collections::HashMap;

use super::refunds::REVERSAL_REFERENCE_PREFIX;
use super::{ClientFacts, Snapshot, Violation, violation};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 9] = [
    "no negative balance",
    "balances equal the ledger",
    "every deduct key debited exactly once",
    "every answered deduct is in the ledger",
    "one debit per order answered once",
    "one debit per user and order",
    "money conserved: no debit nobody was told about",
    "every credit key credited exactly once",
    "money conserved: every credit answered once",
];

/// Checks them, adding what it finds to `violations`.
pub(super) fn check(snapshot: &Snapshot, client: &ClientFacts, violations: &mut Vec<Violation>) {
    // Wallets: balance = credits − debits, never negative; every answer is in the ledger.
    let mut sums: HashMap<(&str, &str), (i64, i64)> = HashMap::new();
    let mut debits_per_order: HashMap<(&str, &str, &str), Vec<i64>> = HashMap::new();
    let mut credits_per_reference: HashMap<(&str, &str, &str), Vec<i64>> = HashMap::new();
    for entry in &snapshot.entries {
        let sum = sums
            .entry((entry.tenant_id.as_str(), entry.user_id.as_str()))
            .or_default();
        match entry.kind.as_str() {
            "CREDIT" => {
                sum.0 = sum.0.saturating_add(entry.amount);
                credits_per_reference
                    .entry((&entry.tenant_id, &entry.user_id, &entry.reference))
                    .or_default()
                    .push(entry.amount);
            }
            _ => {
                sum.1 = sum.1.saturating_add(entry.amount);
                if let Some(order) = &entry.order_id {
                    debits_per_order
                        .entry((&entry.tenant_id, &entry.user_id, order))
                        .or_default()
                        .push(entry.amount);
                }
            }
        }
    }
    for wallet in &snapshot.wallets {
        let (credits, debits) = sums
            .get(&(wallet.tenant_id.as_str(), wallet.user_id.as_str()))
            .copied()
            .unwrap_or((0, 0));
        if wallet.balance < 0 {
            violations.push(violation(
                "no negative balance",
                format!(
                    "{}/{}: {}",
                    wallet.tenant_id, wallet.user_id, wallet.balance
                ),
            ));
        }
        if credits.saturating_sub(debits) != wallet.balance {
            violations.push(violation(
                "balances equal the ledger",
                format!(
                    "{}/{}: balance {}, credits {credits} − debits {debits}",
                    wallet.tenant_id, wallet.user_id, wallet.balance
                ),
            ));
        }
    }
    for ((tenant, user, key), (order, amount)) in &client.deducts {
        match debits_per_order.get(&(tenant.as_str(), user.as_str(), order.as_str())) {
            Some(debits) if debits.len() == 1 && debits[0] == *amount => {}
            Some(debits) => violations.push(violation(
                "every deduct key debited exactly once",
                format!("{tenant}/{user} key {key}: debits {debits:?}, answered {amount}"),
            )),
            None => violations.push(violation(
                "every answered deduct is in the ledger",
                format!(
                    "{tenant}/{user} key {key} (order {order}) has no debit: a lost acknowledged write"
                ),
            )),
        }
    }
    let mut answered_orders: HashMap<(&str, &str, &str), Vec<&str>> = HashMap::new();
    for ((tenant, user, key), (order, _)) in &client.deducts {
        answered_orders
            .entry((tenant.as_str(), user.as_str(), order.as_str()))
            .or_default()
            .push(key.as_str());
    }
    for (order_key, keys) in &answered_orders {
        if keys.len() > 1 {
            violations.push(violation(
                "one debit per order answered once",
                format!("{order_key:?}: keys {keys:?} all answered 200"),
            ));
        }
    }
    for (order_key, debits) in &debits_per_order {
        if debits.len() > 1 {
            violations.push(violation(
                "one debit per user and order",
                format!("{order_key:?}: {debits:?}"),
            ));
        }
        if !answered_orders.contains_key(order_key) {
            violations.push(violation(
                "money conserved: no debit nobody was told about",
                format!("{order_key:?}: {debits:?}"),
            ));
        }
    }
    for ((tenant, user, key), amount) in &client.credits {
        match credits_per_reference.get(&(tenant.as_str(), user.as_str(), key.as_str())) {
            Some(credits) if credits.len() == 1 && credits[0] == *amount => {}
            other => violations.push(violation(
                "every credit key credited exactly once",
                format!("{tenant}/{user} key {key}: credits {other:?}, answered {amount}"),
            )),
        }
    }
    for (reference, credits) in &credits_per_reference {
        if reference.2.starts_with(REVERSAL_REFERENCE_PREFIX) {
            // A deduction put back: checked against its deduction below.
            continue;
        }
        let known = client.credits.contains_key(&(
            reference.0.to_owned(),
            reference.1.to_owned(),
            reference.2.to_owned(),
        ));
        if !known || credits.len() > 1 {
            violations.push(violation(
                "money conserved: every credit answered once",
                format!("{reference:?}: {credits:?}"),
            ));
        }
    }
}

//! The audit: every invariant of the service (the README's "What it guarantees", in full),
//! checked after quiescence against the service's database (read-only), the simulator's ledger
//! and trades, and what the storm's clients were answered. [`check`] is pure (the rules for
//! refunds and reversals are in `refunds`); [`snapshot`] is the only I/O.
//!
//! | invariant | from |
//! |---|---|
//! | at most one PENDING and one PAID payment per order | database |
//! | every payment a client was answered with is stored | client answers + database |
//! | every trade charged at the channel is PAID here | ledger + database |
//! | nothing PAID here that the channel did not charge | database + ledger |
//! | closed at the channel ⇔ closed here | trades + database |
//! | a paid order with an entitlement has exactly one grant, nothing else has one | database |
//! | every deduct key debited at most once, every answered deduct debited | client answers + database |
//! | balances equal their ledger entries, none negative, money conserved | database + client answers |
//! | every replay byte-identical to the original answer | client answers |
//! | no 5xx except while a fault was active | client answers |
//! | every attack refused (a replay acknowledged as a duplicate) | the attacker's answers |
//! | an attacked payment changes only through the workload | attacker's victims + database + trades |
//! | one refund per request key; every answered refund stored under its key | database + client answers |
//! | a payment's refunds not CLOSED within its amount, and equal to its running total | database |
//! | no refund PROCESSING after quiescence | database |
//! | a payment's successful refunds here = what the channel refunded for its trade | database + trades + ledger |
//! | every refund here that is not CLOSED is at the channel in the same state, and every refund at the channel is known here | database + trades |
//! | a payment refunded in full ⇔ its order REFUNDED | database |
//! | a deduction reversed at most once, by its own amount; every answered reversal in the ledger, none unanswered | database + client answers |
//! | every event of this run has its webhook delivery, every delivery DELIVERED, received by the merchant with a valid signature and applied once | database + the merchant |
//! | for every order, the channel's charges less its refunds equal the PAID payment and the refund cases less their refunds; every charge not kept is a case; every case refunded or open with its reason | ledger + database (`ledger`) |
//! | nothing parked without being counted: every parked event is one the storm wrote for that | database + the storm's log |
//! | every line of the channels' bills of the run's days matches ours, and every PAID payment and SUCCESS refund of those days is on its bill | the bills + database (the service's bill reconciliation) |

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

mod bills;
mod facts;
mod ledger;
mod refunds;
mod snapshot;
mod webhooks;

pub use self::bills::check_bills;
pub use self::facts::*;
pub use self::snapshot::snapshot;

use self::refunds::{REVERSAL_REFERENCE_PREFIX, check_refunds, check_reversals};

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Which invariant.
    pub invariant: &'static str,
    /// The ids involved.
    pub detail: String,
}

/// Figures the audit counted on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AuditFigures {
    /// Payments in the database.
    pub payments: usize,
    /// Of which PAID.
    pub paid: usize,
    /// Trades charged at the channel.
    pub charged: usize,
    /// Grants.
    pub grants: usize,
    /// PAID payments on orders canceled meanwhile (refund cases, no grant by design).
    pub refund_cases: usize,
    /// Ledger entries.
    pub ledger_entries: usize,
    /// Deduct keys answered 200.
    pub deducts: usize,
    /// Payments the attacker aimed at.
    pub attacked: usize,
    /// Refunds in the database.
    pub refunds: usize,
    /// Of which SUCCESS.
    pub refunds_succeeded: usize,
    /// Deductions put back (reversal entries in the ledger).
    pub reversals: usize,
    /// Webhook deliveries (one per event and endpoint).
    pub webhook_deliveries: usize,
    /// Copies the merchant received (retries and redeliveries included).
    pub webhook_copies: usize,
    /// Lines on the channels' bills of the run's days.
    pub bill_lines: u64,
    /// Of which matched ours to the fen.
    pub bill_matched: u64,
    /// Charges the bills found that we had not recorded, recorded then by the success flow.
    pub bill_repaired: u64,
    /// Orders whose channel ledger was held to ours.
    pub ledger_orders: usize,
    /// Refund cases.
    pub cases: usize,
    /// Of which refunded for their whole amount.
    pub cases_refunded: usize,
    /// Of which open for a person, with their reason.
    pub cases_open: usize,
    /// Events a consumer parked.
    pub parked: usize,
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The invariants [`check`] checks itself, by the name their violations carry (the refunds',
/// reversals' and webhooks' are in their modules).
const INVARIANTS: [&str; 25] = [
    "every answered payment is stored",
    "one pending payment per order",
    "one paid payment per order",
    "a trade is charged once",
    "charged amount equals the payment's",
    "every trade charged at the channel is PAID here",
    "nothing PAID that the channel did not charge",
    "closed here ⇒ closed at the channel",
    "closed at the channel ⇒ closed here",
    "a grant only for a paid order with an entitlement",
    "a payment has its order",
    "every paid entitlement granted exactly once",
    "no negative balance",
    "balances equal the ledger",
    "every deduct key debited exactly once",
    "every answered deduct is in the ledger",
    "one debit per order answered once",
    "one debit per user and order",
    "money conserved: no debit nobody was told about",
    "every credit key credited exactly once",
    "money conserved: every credit answered once",
    "every attack refused",
    "an attacked payment changes only through the workload",
    "every replay byte-identical",
    "no 5xx outside a fault",
];

/// The invariants about the attacker's notifies: checked only when the attacker ran.
const ATTACK_INVARIANTS: [&str; 2] = [
    "every attack refused",
    "an attacked payment changes only through the workload",
];

/// One invariant and what the audit found for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InvariantResult {
    /// The invariant, as its violations name it.
    pub invariant: String,
    /// Whether this run could check it (the webhooks' need the storm's own merchant, the
    /// attacks' need the attacker).
    pub checked: bool,
    /// How many times it was broken.
    pub violations: usize,
}

/// Every invariant the audit checks, each with its number of `violations`: those of the
/// webhooks marked unchecked without the merchant's facts, those of the attacks without the
/// attacker. A violation under a name not listed (there should be none) gets a row of its own.
pub fn invariant_results(
    violations: &[Violation],
    webhooks_checked: bool,
    attacker_ran: bool,
    bills_checked: bool,
) -> Vec<InvariantResult> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for violation in violations {
        *counts.entry(violation.invariant).or_default() += 1;
    }
    let mut results: Vec<InvariantResult> = INVARIANTS
        .iter()
        .chain(refunds::INVARIANTS.iter())
        .chain(webhooks::INVARIANTS.iter())
        .chain(bills::INVARIANTS.iter())
        .chain(ledger::INVARIANTS.iter())
        .map(|&invariant| {
            // The parked events are the storm's to count only in a deployment it started,
            // as are the webhooks.
            let checked = if webhooks::INVARIANTS.contains(&invariant)
                || invariant == ledger::PARKED_INVARIANT
            {
                webhooks_checked
            } else if bills::INVARIANTS.contains(&invariant) {
                bills_checked
            } else if ATTACK_INVARIANTS.contains(&invariant) {
                attacker_ran
            } else {
                true
            };
            InvariantResult {
                invariant: invariant.to_owned(),
                // A violation counts even where the run could not check everything.
                checked: checked || counts.contains_key(invariant),
                violations: counts.remove(invariant).unwrap_or(0),
            }
        })
        .collect();
    results.extend(
        counts
            .into_iter()
            .map(|(invariant, violations)| InvariantResult {
                invariant: invariant.to_owned(),
                checked: true,
                violations,
            }),
    );
    results
}

/// Checks every invariant; the violations, and the figures.
pub fn check(
    snapshot: &Snapshot,
    channel: &ChannelFacts,
    client: &ClientFacts,
) -> (Vec<Violation>, AuditFigures) {
    let mut violations = Vec::new();
    let mut figures = AuditFigures {
        payments: snapshot.payments.len(),
        charged: channel.charges.len(),
        grants: snapshot.grants.len(),
        ledger_entries: snapshot.entries.len(),
        deducts: client.deducts.len(),
        attacked: client.attacked.len(),
        ..AuditFigures::default()
    };
    let orders: HashMap<(&str, &str), &OrderFact> = snapshot
        .orders
        .iter()
        .map(|order| ((order.tenant_id.as_str(), order.order_id.as_str()), order))
        .collect();
    let payments: HashMap<&str, &PaymentFact> = snapshot
        .payments
        .iter()
        .map(|payment| (payment.payment_no.as_str(), payment))
        .collect();

    // Every payment a client was answered with is stored: an acknowledged creation is never
    // lost, not even by a failover right after it.
    for number in &client.payments {
        if !payments.contains_key(number.as_str()) {
            violations.push(violation(
                "every answered payment is stored",
                format!("{number} was answered and is not in the database"),
            ));
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
    let given_back: std::collections::HashSet<&str> = snapshot
        .refunds
        .iter()
        .filter(|refund| refund.status == "SUCCESS" && refund.request_key.starts_with("auto-"))
        .filter(|refund| {
            payments
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
        match payments.get(number.as_str()) {
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

    // Grants: exactly one per PAID payment of a PAID order with an entitlement, none else.
    let mut grants_per_payment: HashMap<&str, usize> = HashMap::new();
    for grant in &snapshot.grants {
        *grants_per_payment
            .entry(grant.payment_no.as_str())
            .or_default() += 1;
        let paid = payments
            .get(grant.payment_no.as_str())
            .is_some_and(|payment| payment.status == "PAID");
        let order = orders.get(&(grant.tenant_id.as_str(), grant.order_id.as_str()));
        // A grant stays when its order is refunded afterwards (taking it back is the
        // merchant's business, not the service's).
        if !paid
            || !order.is_some_and(|order| {
                matches!(order.status.as_str(), "PAID" | "REFUNDED") && order.has_entitlement
            })
        {
            violations.push(violation(
                "a grant only for a paid order with an entitlement",
                format!(
                    "{} ({}/{})",
                    grant.payment_no, grant.tenant_id, grant.order_id
                ),
            ));
        }
    }
    for payment in snapshot.payments.iter().filter(|p| p.status == "PAID") {
        let Some(order) = orders.get(&(payment.tenant_id.as_str(), payment.order_id.as_str()))
        else {
            violations.push(violation(
                "a payment has its order",
                payment.payment_no.clone(),
            ));
            continue;
        };
        let granted = grants_per_payment
            .get(payment.payment_no.as_str())
            .copied()
            .unwrap_or(0);
        if order.status == "CANCELED" {
            figures.refund_cases += 1;
            continue;
        }
        let expected = usize::from(order.has_entitlement);
        if granted != expected {
            violations.push(violation(
                "every paid entitlement granted exactly once",
                format!(
                    "{}: {granted} grants, expected {expected}",
                    payment.payment_no
                ),
            ));
        }
    }

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
                format!("{tenant}/{user} key {key} (order {order}) has no debit"),
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

    check_reversals(snapshot, client, &mut violations, &mut figures);
    check_refunds(snapshot, channel, client, &mut violations, &mut figures);
    ledger::check_ledger(snapshot, channel, client, &mut violations, &mut figures);

    // The attacker: whatever it sent had to be refused, and what it aimed at must not have
    // moved. A victim's only legitimate change is a close after its expiry (the reconciler's)
    // or one the channel made too; it is never paid (its buyer never paid).
    for accepted in &client.accepted_attacks {
        violations.push(violation("every attack refused", accepted.clone()));
    }
    for number in &client.attacked {
        let Some(payment) = payments.get(number.as_str()) else {
            violations.push(violation(
                "an attacked payment changes only through the workload",
                format!("{number} is gone"),
            ));
            continue;
        };
        let closed_at_channel = channel
            .trades
            .get(number)
            .is_some_and(|trade| trade.status == "CLOSED");
        let untouched = match payment.status.as_str() {
            "PENDING" => true,
            "CLOSED" => closed_at_channel || payment.updated_at_ms >= payment.expires_at_ms,
            _ => false,
        };
        if !untouched {
            violations.push(violation(
                "an attacked payment changes only through the workload",
                format!(
                    "{number} is {} here (its buyer never paid, nobody closed it{})",
                    payment.status,
                    if payment.status == "CLOSED" {
                        ", open at the channel, before its expiry"
                    } else {
                        ""
                    }
                ),
            ));
        }
    }

    if let Some(received) = &client.webhooks {
        webhooks::check(snapshot, received, &mut violations, &mut figures);
    }
    for mismatch in &client.replay_mismatches {
        violations.push(violation("every replay byte-identical", mismatch.clone()));
    }
    for error in &client.unexcused_errors {
        violations.push(violation("no 5xx outside a fault", error.clone()));
    }
    (violations, figures)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The names the audit's sources give their violations: the string literal after each
    /// `violation(`.
    fn names_in(source: &str) -> BTreeSet<&str> {
        // Spelled in two pieces, so that this line is not a call itself.
        source
            .split(concat!("violation", "("))
            .skip(1)
            .filter_map(|rest| {
                let rest = rest.trim_start().strip_prefix('"')?;
                rest.split_once('"').map(|(name, _)| name)
            })
            .collect()
    }

    #[test]
    fn every_invariant_the_audit_names_is_listed_once() {
        let named: BTreeSet<&str> = [
            include_str!("mod.rs"),
            include_str!("refunds.rs"),
            include_str!("webhooks.rs"),
            include_str!("bills.rs"),
            include_str!("ledger.rs"),
        ]
        .into_iter()
        .flat_map(names_in)
        .collect();
        let listed: Vec<&str> = INVARIANTS
            .iter()
            .chain(refunds::INVARIANTS.iter())
            .chain(webhooks::INVARIANTS.iter())
            .chain(bills::INVARIANTS.iter())
            .chain(ledger::INVARIANTS.iter())
            .copied()
            .collect();
        let distinct: BTreeSet<&str> = listed.iter().copied().collect();
        assert_eq!(distinct.len(), listed.len(), "an invariant listed twice");
        assert_eq!(distinct, named);
    }

    #[test]
    fn invariant_results_count_each_violation_and_say_what_was_not_checked() {
        let violations = [
            violation("balances equal the ledger", "u1".to_owned()),
            violation("balances equal the ledger", "u2".to_owned()),
            violation("every webhook applied once by the merchant", "w".to_owned()),
        ];
        let results = invariant_results(&violations, false, false, false);
        let find = |name: &str| {
            results
                .iter()
                .find(|result| result.invariant == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} missing"))
        };
        assert_eq!(find("balances equal the ledger").violations, 2);
        assert!(find("balances equal the ledger").checked);
        assert_eq!(find("one paid payment per order").violations, 0);
        assert!(!find("every event has its webhook delivery").checked);
        // Broken, so checked after all.
        assert!(find("every webhook applied once by the merchant").checked);
        assert!(!find("every attack refused").checked);
        assert!(
            invariant_results(&[], true, true, true)
                .iter()
                .all(|result| result.checked && result.violations == 0)
        );
    }

    pub(super) fn payment(number: &str, order: &str, status: &str) -> PaymentFact {
        PaymentFact {
            payment_no: number.to_owned(),
            tenant_id: "t".to_owned(),
            order_id: order.to_owned(),
            status: status.to_owned(),
            amount: 100,
            expires_at_ms: 1_000_000,
            updated_at_ms: 1_000,
            refunded: 0,
        }
    }

    pub(super) fn order(id: &str, status: &str) -> OrderFact {
        OrderFact {
            tenant_id: "t".to_owned(),
            order_id: id.to_owned(),
            status: status.to_owned(),
            has_entitlement: true,
        }
    }

    pub(super) fn charged(numbers: &[&str]) -> ChannelFacts {
        ChannelFacts {
            charges: numbers
                .iter()
                .map(|number| ((*number).to_owned(), vec![100]))
                .collect(),
            ..ChannelFacts::default()
        }
    }

    #[test]
    fn a_consistent_world_passes() {
        let snapshot = Snapshot {
            payments: vec![payment("P1", "o1", "PAID"), payment("P2", "o2", "PENDING")],
            orders: vec![order("o1", "PAID"), order("o2", "CREATED")],
            grants: vec![GrantFact {
                payment_no: "P1".to_owned(),
                tenant_id: "t".to_owned(),
                order_id: "o1".to_owned(),
            }],
            ..Snapshot::default()
        };
        let (violations, figures) = check(&snapshot, &charged(&["P1"]), &ClientFacts::default());
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!((figures.paid, figures.grants), (1, 1));
    }

    /// A payment a client was answered with and that the database lost (a failover that
    /// dropped an acknowledged commit) is a violation; one that is stored is not.
    #[test]
    fn an_answered_payment_missing_from_the_database_is_a_violation() {
        let snapshot = Snapshot {
            payments: vec![payment("P1", "o1", "PENDING")],
            orders: vec![order("o1", "CREATED")],
            ..Snapshot::default()
        };
        let client = ClientFacts {
            payments: ["P1".to_owned(), "LOST".to_owned()].into(),
            ..ClientFacts::default()
        };
        let (violations, _) = check(&snapshot, &ChannelFacts::default(), &client);
        assert_eq!(
            violations,
            vec![violation(
                "every answered payment is stored",
                "LOST was answered and is not in the database".to_owned(),
            )]
        );
    }

    /// A retargeted success accepted: the victim is PAID with no charge behind it. Both the
    /// ledger check and the victim check name it.
    #[test]
    fn a_victim_paid_by_an_accepted_retarget_is_a_violation() {
        let snapshot = Snapshot {
            payments: vec![
                payment("OWN", "o1", "PAID"),
                payment("VICTIM", "o2", "PAID"),
            ],
            orders: vec![order("o1", "PAID"), order("o2", "PAID")],
            grants: ["OWN", "VICTIM"]
                .iter()
                .zip(["o1", "o2"])
                .map(|(number, order)| GrantFact {
                    payment_no: (*number).to_owned(),
                    tenant_id: "t".to_owned(),
                    order_id: order.to_owned(),
                })
                .collect(),
            ..Snapshot::default()
        };
        let client = ClientFacts {
            attacked: ["VICTIM".to_owned()].into(),
            ..ClientFacts::default()
        };
        let (violations, figures) = check(&snapshot, &charged(&["OWN"]), &client);
        let names: BTreeSet<&str> = violations.iter().map(|v| v.invariant).collect();
        assert_eq!(
            names,
            BTreeSet::from([
                "nothing PAID that the channel did not charge",
                "an attacked payment changes only through the workload",
                "the channel's ledger equals ours, order by order",
            ]),
            "{violations:?}"
        );
        assert_eq!(figures.attacked, 1);
    }

    /// A polluted TRADE_CLOSED accepted: an Alipay victim whose code was never scanned is
    /// CLOSED here before its expiry. The channel has no trade to compare with, so only the
    /// victim check can tell; a close after the expiry (the reconciler's) is not an attack.
    #[test]
    fn a_victim_closed_before_its_expiry_is_a_violation_and_after_it_is_not() {
        let unscanned = ChannelFacts {
            trades: [(
                "VICTIM".to_owned(),
                TradeFact {
                    status: "PENDING".to_owned(),
                    exists: false,
                    ..TradeFact::default()
                },
            )]
            .into(),
            ..ChannelFacts::default()
        };
        let client = ClientFacts {
            attacked: ["VICTIM".to_owned()].into(),
            ..ClientFacts::default()
        };
        let closed = |updated_at_ms| Snapshot {
            payments: vec![PaymentFact {
                updated_at_ms,
                ..payment("VICTIM", "o1", "CLOSED")
            }],
            orders: vec![order("o1", "CREATED")],
            ..Snapshot::default()
        };
        let (early, _) = check(&closed(1_000), &unscanned, &client);
        assert_eq!(
            early.iter().map(|v| v.invariant).collect::<Vec<_>>(),
            ["an attacked payment changes only through the workload"]
        );
        let (expired, _) = check(&closed(1_000_000), &unscanned, &client);
        assert!(expired.is_empty(), "{expired:?}");
        let (unattacked, _) = check(&closed(1_000), &unscanned, &ClientFacts::default());
        assert!(
            unattacked.is_empty(),
            "without the attacker the audit cannot tell"
        );
    }

    #[test]
    fn an_acknowledged_attack_is_a_violation() {
        let client = ClientFacts {
            accepted_attacks: vec!["retarget aimed at VICTIM was acknowledged".to_owned()],
            ..ClientFacts::default()
        };
        let (violations, _) = check(&Snapshot::default(), &charged(&[]), &client);
        assert_eq!(
            violations,
            [Violation {
                invariant: "every attack refused",
                detail: "retarget aimed at VICTIM was acknowledged".to_owned(),
            }]
        );
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let snapshot = Snapshot {
            payments: vec![
                payment("P1", "o1", "PAID"),
                payment("P2", "o1", "PAID"),
                payment("P3", "o3", "PENDING"),
            ],
            orders: vec![order("o1", "PAID"), order("o3", "CREATED")],
            grants: Vec::new(),
            wallets: vec![WalletFact {
                tenant_id: "t".to_owned(),
                user_id: "u".to_owned(),
                balance: 50,
            }],
            entries: vec![EntryFact {
                entry_no: "C1".to_owned(),
                tenant_id: "t".to_owned(),
                user_id: "u".to_owned(),
                kind: "CREDIT".to_owned(),
                amount: 100,
                order_id: None,
                reference: "k1".to_owned(),
            }],
            refunds: Vec::new(),
            deliveries: Vec::new(),
            events: Vec::new(),
            ..Snapshot::default()
        };
        let client = ClientFacts {
            credits: [(("t".to_owned(), "u".to_owned(), "k1".to_owned()), 100)].into(),
            replay_mismatches: vec!["key x".to_owned()],
            ..ClientFacts::default()
        };
        let (violations, _) = check(&snapshot, &charged(&["P1", "P3"]), &client);
        let names: std::collections::BTreeSet<&str> = violations
            .iter()
            .map(|violation| violation.invariant)
            .collect();
        for expected in [
            "one paid payment per order",
            "every trade charged at the channel is PAID here",
            "nothing PAID that the channel did not charge",
            "every paid entitlement granted exactly once",
            "balances equal the ledger",
            "every replay byte-identical",
        ] {
            assert!(
                names.contains(expected),
                "{expected} missing from {names:?}"
            );
        }
    }
}

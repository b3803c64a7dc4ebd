//! The audit: every invariant of the service (the README's "What it guarantees", in full),
//! checked after quiescence against the service's database (read-only), the simulator's ledger
//! and trades, and what the storm's clients were answered. [`check`] is pure and only
//! dispatches: each module owns its invariants and the rules that check them (`payments`,
//! `grants`, `wallets`, `attacks`, `refunds` with the reversals, `events`, `ledger` with the
//! refund cases and the parked events, `webhooks`, `bills`, [`history`]), on one shared index
//! of the snapshot; [`snapshot`] is the only I/O.
//!
//! | invariant | from |
//! |---|---|
//! | at most one PENDING and one PAID payment per order | database |
//! | every payment a client was answered with is stored | client answers + database |
//! | every trade charged at the channel is PAID here | ledger + database |
//! | nothing PAID here that the channel did not charge | database + ledger |
//! | closed at the channel ⇔ closed here | trades + database |
//! | a paid order with an entitlement has exactly one grant, nothing else has one | database |
//! | revocation: a grant revoked once its payment is refunded in full (SUCCESS refunds = its amount), never otherwise | database |
//! | every payment's amount and currency are its order's | database |
//! | exactly one `payment.succeeded` per PAID payment and one `refund.succeeded` per SUCCESS refund, each saying what the rows say | database (the event log) |
//! | each event has its change: the payment or refund it names is in the state it announces | database (the event log) |
//! | every grant and every order is one the merchant's server made with the secret key, as it priced it (buyer, amount, sku, quantity) | the merchant's orders + database |
//! | every deduct key debited at most once, every answered deduct debited | client answers + database |
//! | balances equal their ledger entries, none negative, money conserved | database + client answers |
//! | every replay byte-identical to the original answer | client answers |
//! | every fault of the schedule injected (a failed injection fails the run) | the fault schedule |
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
//! | the history: an operation answered ok took effect once, one refused took none, one never answered at most one; each wallet's ledger order respects real time and every answer (`history`) | the clients' history of attempts + database |
//! | each wallet's history is linearizable: some order of its operations, each within its time, explains every answer from a wallet at 0 (`linearizable`) | the clients' history of attempts (no database) |

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

mod attacks;
mod bills;
mod chain;
mod events;
mod facts;
mod grants;
pub mod history;
pub mod jepsen;
mod ledger;
pub mod linearizable;
mod payments;
mod refunds;
mod snapshot;
mod wallets;
mod webhooks;

pub use self::bills::check_bills;
pub use self::facts::*;
pub use self::snapshot::snapshot;

use self::refunds::{check_refunds, check_reversals};

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
    /// Of which revoked.
    pub grants_revoked: usize,
    /// Orders in the database.
    pub orders: usize,
    /// Orders the merchant's server asked for (its secret key's creations, answered or not).
    pub priced: usize,
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
    /// Events of the run in the event log (`payment.succeeded`, `payment.closed`,
    /// `refund.succeeded`).
    pub events_logged: usize,
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
    /// Those open cases by name (payment, reason, fen, where its refund stands), at most
    /// [`ledger::OPEN_CASES_NAMED_MAX`]: money owed back at the end of a run is named in the
    /// report, never only counted.
    pub open_cases: Vec<String>,
    /// Events a consumer parked.
    pub parked: usize,
    /// The history check's counts, per kind of operation.
    pub history: BTreeMap<String, history::HistoryCounts>,
    /// What the linearizability check did: wallets checked and unchecked, the hottest one.
    pub linearizable: linearizable::LinearizableFigures,
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The invariants [`check`] checks itself, on the client's answers alone (the others are in
/// their modules).
const INVARIANTS: [&str; 5] = [
    "every replay byte-identical",
    "no 5xx but those a fault's kind produces",
    "every fault injected as scheduled",
    "no fault kind keeps the clients without an ok answer past its ceiling",
    "no write committed under a superseded order lock",
];

/// The fence layer's counter of writes committed although a later holder of the order's lock
/// had written (`fence` / `order.write:written-stale`, counted by the instances): a holder
/// paused past its lease acting on what it held. Only the storm's negative control
/// (`--break-layer fences`) lets one through; with the fences on, the same write is refused
/// and counted `refused-stale`. The database cannot tell such a write from its successor's
/// (the compare-and-sets beneath may leave the money right), so the instances' own count is
/// the evidence, read from their metrics after quiescence.
pub fn fenced_off_writes(layers: &BTreeMap<String, BTreeMap<String, u64>>) -> Option<Violation> {
    let written = layers
        .get("fence")
        .and_then(|outcomes| outcomes.get("order.write:written-stale"))
        .copied()
        .unwrap_or(0);
    (written > 0).then(|| {
        violation(
            "no write committed under a superseded order lock",
            format!(
                "{written} fenced-off write(s): committed by an instance under an order lock \
                 another instance had since taken and written under (a holder paused past its \
                 lease; the instances' logs name each order)"
            ),
        )
    })
}

/// A kind of fault that left every client without an ok answer for `without_ok_ms`, past the
/// `ceiling_ms` its kind is allowed (the storm's availability figures).
pub fn unavailable_too_long(kind: &str, without_ok_ms: u64, ceiling_ms: u64) -> Violation {
    violation(
        "no fault kind keeps the clients without an ok answer past its ceiling",
        format!("\"{kind}\": {without_ok_ms} ms without an ok answer, ceiling {ceiling_ms} ms"),
    )
}

/// Every module's invariants, in the order the report lists them.
fn all_invariants() -> impl Iterator<Item = &'static str> {
    payments::INVARIANTS
        .iter()
        .chain(grants::INVARIANTS.iter())
        .chain(wallets::INVARIANTS.iter())
        .chain(attacks::INVARIANTS.iter())
        .chain(INVARIANTS.iter())
        .chain(refunds::INVARIANTS.iter())
        .chain(events::INVARIANTS.iter())
        .chain(webhooks::INVARIANTS.iter())
        .chain(bills::INVARIANTS.iter())
        .chain(ledger::INVARIANTS.iter())
        .chain(history::INVARIANTS.iter())
        .chain(linearizable::INVARIANTS.iter())
        .copied()
}

/// The snapshot's orders and payments by their keys, built once for every module.
struct Index<'a> {
    orders: HashMap<(&'a str, &'a str), &'a OrderFact>,
    payments: HashMap<&'a str, &'a PaymentFact>,
}

impl<'a> Index<'a> {
    fn of(snapshot: &'a Snapshot) -> Self {
        Self {
            orders: snapshot
                .orders
                .iter()
                .map(|order| ((order.tenant_id.as_str(), order.order_id.as_str()), order))
                .collect(),
            payments: snapshot
                .payments
                .iter()
                .map(|payment| (payment.payment_no.as_str(), payment))
                .collect(),
        }
    }
}

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
    let mut results: Vec<InvariantResult> = all_invariants()
        .map(|invariant| {
            // The parked events are the storm's to count only in a deployment it started,
            // as are the webhooks.
            let checked = if webhooks::INVARIANTS.contains(&invariant)
                || invariant == ledger::PARKED_INVARIANT
            {
                webhooks_checked
            } else if bills::INVARIANTS.contains(&invariant) {
                bills_checked
            } else if attacks::INVARIANTS.contains(&invariant) {
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
        orders: snapshot.orders.len(),
        priced: client.priced.as_ref().map_or(0, HashMap::len),
        ledger_entries: snapshot.entries.len(),
        deducts: client.deducts.len(),
        attacked: client.attacked.len(),
        ..AuditFigures::default()
    };
    let index = Index::of(snapshot);

    payments::check(
        snapshot,
        channel,
        client,
        &index,
        &mut violations,
        &mut figures,
    );
    grants::check(snapshot, &index, &mut violations, &mut figures);
    if let Some(priced) = &client.priced {
        grants::check_priced(snapshot, priced, &mut violations);
    }
    wallets::check(snapshot, client, &mut violations);
    check_reversals(snapshot, client, &mut violations, &mut figures);
    check_refunds(snapshot, channel, client, &mut violations, &mut figures);
    if let Some(logged) = &snapshot.logged {
        events::check(snapshot, logged, &index, &mut violations, &mut figures);
    }
    ledger::check_ledger(snapshot, channel, client, &mut violations, &mut figures);
    figures.history = history::check(snapshot, &client.history, &mut violations);
    figures.linearizable = linearizable::check(
        &client.operations,
        linearizable::SEARCH_STEPS_MAX,
        &mut violations,
    );

    attacks::check(channel, client, &index, &mut violations);

    if let Some(received) = &client.webhooks {
        webhooks::check(snapshot, received, &mut violations, &mut figures);
    }
    for mismatch in &client.replay_mismatches {
        violations.push(violation("every replay byte-identical", mismatch.clone()));
    }
    for error in &client.unexcused_errors {
        violations.push(violation(
            "no 5xx but those a fault's kind produces",
            error.clone(),
        ));
    }
    for fault in &client.faults_not_injected {
        violations.push(violation(
            "every fault injected as scheduled",
            fault.clone(),
        ));
    }
    (violations, figures)
}

#[cfg(test)]
mod tests;

//! The events against the changes they announce, read from the tenants' event log
//! (`pay_event_log`: written in the transaction of its change and kept for the webhook
//! retention, where an outbox row may be purged once sent): every PAID payment has exactly one
//! `payment.succeeded` and every SUCCESS refund exactly one `refund.succeeded`, each saying what
//! the rows say; and every event names a payment or refund that is in the state it announces.
//!
//! A PAID payment stays PAID when it is refunded (its order moves), so "PAID" here covers the
//! payments refunded since. What a payload must say:
//!
//! - `payment.succeeded`: the payment's tenant (the log's and the payload's), order, amount and
//!   currency; its order's buyer and entitlement; `order_paid` false exactly when the payment
//!   went through after its order was canceled (its refund case `PAID_AFTER_CANCEL`);
//! - `refund.succeeded`: the refund's tenant, number, payment, order and amount; and, per
//!   payment, `payment_refunded` true on exactly one of its refunds' events when its SUCCESS
//!   refunds add up to its amount (the one that completed it: the revocation consumer acts on
//!   that flag), on none otherwise;
//! - `payment.closed`: a payment of that order, CLOSED — or PAID since, by a late success (the
//!   charge is the truth: CLOSED → PAID is a move of the payment's machine).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use super::{
    AuditFigures, Index, LoggedEventFact, PaymentFact, RefundFact, Snapshot, Violation, violation,
};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 3] = [
    "exactly one payment.succeeded per PAID payment",
    "exactly one refund.succeeded per successful refund",
    "each event has its change",
];

/// A logged event and its payload (a JSON object; `Value::Null` when the data is not one).
struct Read<'a> {
    event: &'a LoggedEventFact,
    payload: Value,
}

impl Read<'_> {
    /// A text field of the payload.
    fn text(&self, field: &str) -> Option<&str> {
        self.payload.get(field).and_then(Value::as_str)
    }

    /// How the payload and the log's row differ from `expected` (JSON pointers and their
    /// values), in words; empty when they agree.
    fn differences(&self, tenant_id: &str, expected: &[(&str, Value)]) -> Vec<String> {
        let mut found = Vec::new();
        if self.event.tenant_id != tenant_id {
            found.push(format!(
                "logged for tenant {} where the row's is {tenant_id}",
                self.event.tenant_id
            ));
        }
        for (pointer, value) in expected {
            let got = self.payload.pointer(pointer).unwrap_or(&Value::Null);
            if got != value {
                found.push(format!(
                    "{} {got} where {value}",
                    pointer.trim_start_matches('/')
                ));
            }
        }
        found
    }
}

/// Checks them over `logged` (the snapshot's event log), adding what it finds to `violations`
/// and `figures`.
pub(super) fn check(
    snapshot: &Snapshot,
    logged: &[LoggedEventFact],
    index: &Index<'_>,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    figures.events_logged = logged.len();
    let refunds: HashMap<&str, &RefundFact> = snapshot
        .refunds
        .iter()
        .map(|refund| (refund.refund_no.as_str(), refund))
        .collect();
    // Each event to the payment or refund it names, when that one is in the state it says.
    let mut paid_events: BTreeMap<&str, Vec<Read<'_>>> = BTreeMap::new();
    let mut refund_events: BTreeMap<&str, Vec<Read<'_>>> = BTreeMap::new();
    for event in logged {
        let read = Read {
            event,
            payload: serde_json::from_str::<Value>(&event.data)
                .ok()
                .filter(Value::is_object)
                .unwrap_or(Value::Null),
        };
        let what = format!("{} {}", event.event_type, event.event_id);
        match event.event_type.as_str() {
            "payment.succeeded" | "payment.closed" => {
                let Some(number) = read.text("payment_no") else {
                    violations.push(violation(
                        "each event has its change",
                        format!("{what}: its payload names no payment ({})", event.data),
                    ));
                    continue;
                };
                let Some(payment) = index.payments.get(number) else {
                    violations.push(violation(
                        "each event has its change",
                        format!("{what} of {number}: no such payment"),
                    ));
                    continue;
                };
                if event.event_type == "payment.succeeded" {
                    if payment.status == "PAID" {
                        paid_events
                            .entry(&payment.payment_no)
                            .or_default()
                            .push(read);
                    } else {
                        violations.push(violation(
                            "each event has its change",
                            format!("{what} of {number}, which is {}", payment.status),
                        ));
                    }
                    continue;
                }
                let mut wrong = read.differences(
                    &payment.tenant_id,
                    &[
                        ("/tenant_id", json!(payment.tenant_id)),
                        ("/order_id", json!(payment.order_id)),
                    ],
                );
                if !matches!(payment.status.as_str(), "CLOSED" | "PAID") {
                    wrong.push(format!("the payment is {}", payment.status));
                }
                if !wrong.is_empty() {
                    violations.push(violation(
                        "each event has its change",
                        format!("{what} of {number}: {}", wrong.join(", ")),
                    ));
                }
            }
            "refund.succeeded" => {
                let Some(number) = read.text("refund_no") else {
                    violations.push(violation(
                        "each event has its change",
                        format!("{what}: its payload names no refund ({})", event.data),
                    ));
                    continue;
                };
                match refunds.get(number) {
                    Some(refund) if refund.status == "SUCCESS" => {
                        refund_events
                            .entry(&refund.refund_no)
                            .or_default()
                            .push(read);
                    }
                    Some(refund) => violations.push(violation(
                        "each event has its change",
                        format!("{what} of {number}, which is {}", refund.status),
                    )),
                    None => violations.push(violation(
                        "each event has its change",
                        format!("{what} of {number}: no such refund"),
                    )),
                }
            }
            _ => {}
        }
    }
    check_payments(snapshot, index, &paid_events, violations);
    check_refunds(snapshot, index, &refund_events, violations);
}

/// Every PAID payment: exactly one `payment.succeeded`, saying what its row and its order say.
fn check_payments(
    snapshot: &Snapshot,
    index: &Index<'_>,
    paid_events: &BTreeMap<&str, Vec<Read<'_>>>,
    violations: &mut Vec<Violation>,
) {
    let paid_after_cancel: HashSet<&str> = snapshot
        .cases
        .iter()
        .filter(|case| case.kind == "PAID_AFTER_CANCEL")
        .map(|case| case.payment_no.as_str())
        .collect();
    for payment in snapshot.payments.iter().filter(|p| p.status == "PAID") {
        let number = payment.payment_no.as_str();
        let events = paid_events
            .get(number)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let [event] = events else {
            violations.push(violation(
                "exactly one payment.succeeded per PAID payment",
                format!(
                    "{number} is PAID with {} payment.succeeded{}",
                    events.len(),
                    ids(events)
                ),
            ));
            continue;
        };
        let wrong = event.differences(
            &payment.tenant_id,
            &succeeded_payload(payment, index, &paid_after_cancel),
        );
        if !wrong.is_empty() {
            violations.push(violation(
                "exactly one payment.succeeded per PAID payment",
                format!(
                    "{number}'s payment.succeeded {}: {}",
                    event.event.event_id,
                    wrong.join(", ")
                ),
            ));
        }
    }
}

/// What the `payment.succeeded` of `payment` must say: its row, and its order where the
/// snapshot has it (a payment without its order is another invariant's).
fn succeeded_payload(
    payment: &PaymentFact,
    index: &Index<'_>,
    paid_after_cancel: &HashSet<&str>,
) -> Vec<(&'static str, Value)> {
    let mut expected = vec![
        ("/tenant_id", json!(payment.tenant_id)),
        ("/payment_no", json!(payment.payment_no)),
        ("/order_id", json!(payment.order_id)),
        ("/amount", json!(payment.amount)),
        ("/currency", json!(payment.currency)),
    ];
    if let Some(order) = index
        .orders
        .get(&(payment.tenant_id.as_str(), payment.order_id.as_str()))
    {
        expected.push(("/user_id", json!(order.pricing.user_id)));
        match &order.pricing.entitlement {
            Some((sku, quantity)) => {
                expected.push(("/entitlement/sku", json!(sku)));
                expected.push(("/entitlement/quantity", json!(quantity)));
            }
            None => expected.push(("/entitlement", Value::Null)),
        }
        expected.push((
            "/order_paid",
            json!(!paid_after_cancel.contains(payment.payment_no.as_str())),
        ));
    }
    expected
}

/// Every SUCCESS refund: exactly one `refund.succeeded`, saying what its row says; per payment,
/// one of them saying it is refunded in full exactly when it is.
fn check_refunds(
    snapshot: &Snapshot,
    index: &Index<'_>,
    refund_events: &BTreeMap<&str, Vec<Read<'_>>>,
    violations: &mut Vec<Violation>,
) {
    // Per payment of a SUCCESS refund: the SUCCESS refunds' sum, and the events that say the
    // payment is refunded in full.
    let mut per_payment: BTreeMap<&str, (i64, Vec<&str>)> = BTreeMap::new();
    for refund in snapshot.refunds.iter().filter(|r| r.status == "SUCCESS") {
        let number = refund.refund_no.as_str();
        let events = refund_events
            .get(number)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let of_payment = per_payment.entry(&refund.payment_no).or_default();
        of_payment.0 = of_payment.0.saturating_add(refund.amount);
        let [event] = events else {
            violations.push(violation(
                "exactly one refund.succeeded per successful refund",
                format!(
                    "{number} of {} is SUCCESS with {} refund.succeeded{}",
                    refund.payment_no,
                    events.len(),
                    ids(events)
                ),
            ));
            continue;
        };
        if event.payload.get("payment_refunded") == Some(&Value::Bool(true)) {
            of_payment.1.push(&event.event.event_id);
        }
        let wrong = event.differences(
            &refund.tenant_id,
            &[
                ("/tenant_id", json!(refund.tenant_id)),
                ("/refund_no", json!(refund.refund_no)),
                ("/payment_no", json!(refund.payment_no)),
                ("/order_id", json!(refund.order_id)),
                ("/amount", json!(refund.amount)),
            ],
        );
        if !wrong.is_empty() {
            violations.push(violation(
                "exactly one refund.succeeded per successful refund",
                format!(
                    "{number}'s refund.succeeded {}: {}",
                    event.event.event_id,
                    wrong.join(", ")
                ),
            ));
        }
    }
    for (number, (succeeded, in_full)) in per_payment {
        // A refund without its payment is the refunds' invariant.
        let Some(payment) = index.payments.get(number) else {
            continue;
        };
        let full = payment.amount > 0 && succeeded == payment.amount;
        if in_full.len() != usize::from(full) {
            violations.push(violation(
                "exactly one refund.succeeded per successful refund",
                format!(
                    "{number}: {succeeded} of {} fen refunded, and {} refund.succeeded say it is refunded in full [{}]",
                    payment.amount,
                    in_full.len(),
                    in_full.join(", ")
                ),
            ));
        }
    }
}

/// The events' ids, for a violation's detail (empty for none).
fn ids(events: &[Read<'_>]) -> String {
    if events.is_empty() {
        return String::new();
    }
    let ids: Vec<&str> = events
        .iter()
        .map(|read| read.event.event_id.as_str())
        .collect();
    format!(" [{}]", ids.join(", "))
}

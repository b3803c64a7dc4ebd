//! Entitlement grants: exactly one per PAID payment of a PAID order with an entitlement, none
//! for anything else; **revoked** exactly when their payment is refunded in full (its SUCCESS
//! refunds add up to its amount: the revocation consumer acts on the last one's
//! `refund.succeeded`, and a grant made after it is made revoked), never otherwise — a partial
//! refund leaves the grant alone; and **the server prices, the page pays**: every grant is of
//! an order the storm's merchant made with the tenant's secret key, for the buyer, sku and
//! quantity it set, and no order of the run exists that the merchant did not make as it priced
//! it (a page that made or re-priced an order would show here, paid or not).
use std::collections::HashMap;

use super::{AuditFigures, Index, Pricing, Snapshot, Violation, violation};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 5] = [
    "a grant only for a paid order with an entitlement",
    "a payment has its order",
    "every paid entitlement granted exactly once",
    "every grant was priced by a secret key's order",
    "revocation: a grant is revoked once when its order is refunded in full, never otherwise",
];

/// An order's pricing in a violation's words.
fn priced_as(pricing: &Pricing) -> String {
    let grant = pricing.entitlement.as_ref().map_or_else(
        || "nothing".to_owned(),
        |(sku, quantity)| format!("{quantity} × {sku}"),
    );
    format!(
        "{} fen for {}, granting {grant}",
        pricing.amount, pricing.user_id
    )
}

/// Checks that every grant and every order of the run is one the merchant's server made with
/// the secret key, as it priced it (`priced`: what it made, by tenant and order id).
pub(super) fn check_priced(
    snapshot: &Snapshot,
    priced: &HashMap<(String, String), Pricing>,
    violations: &mut Vec<Violation>,
) {
    let pricing_of = |tenant: &str, order: &str| priced.get(&(tenant.to_owned(), order.to_owned()));
    for grant in &snapshot.grants {
        let what = format!(
            "grant of {} × {} to {} for {} ({}/{})",
            grant.quantity,
            grant.sku,
            grant.user_id,
            grant.payment_no,
            grant.tenant_id,
            grant.order_id
        );
        match pricing_of(&grant.tenant_id, &grant.order_id) {
            None => violations.push(violation(
                "every grant was priced by a secret key's order",
                format!("{what}: an order the merchant's server never made"),
            )),
            Some(pricing)
                if pricing.entitlement != Some((grant.sku.clone(), grant.quantity))
                    || pricing.user_id != grant.user_id =>
            {
                violations.push(violation(
                    "every grant was priced by a secret key's order",
                    format!(
                        "{what}: the merchant's server priced the order {}",
                        priced_as(pricing)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    for order in &snapshot.orders {
        let stored = priced_as(&order.pricing);
        match pricing_of(&order.tenant_id, &order.order_id) {
            None => violations.push(violation(
                "every grant was priced by a secret key's order",
                format!(
                    "order {}/{} ({stored}) exists, and the merchant's server never made it",
                    order.tenant_id, order.order_id
                ),
            )),
            Some(pricing) if *pricing != order.pricing => violations.push(violation(
                "every grant was priced by a secret key's order",
                format!(
                    "order {}/{} is {stored}; the merchant's server priced it {}",
                    order.tenant_id,
                    order.order_id,
                    priced_as(pricing)
                ),
            )),
            Some(_) => {}
        }
    }
}

/// Checks them, adding what it finds to `violations` and `figures`.
pub(super) fn check(
    snapshot: &Snapshot,
    index: &Index<'_>,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    // Grants: exactly one per PAID payment of a PAID order with an entitlement, none else.
    let mut grants_per_payment: HashMap<&str, usize> = HashMap::new();
    for grant in &snapshot.grants {
        *grants_per_payment
            .entry(grant.payment_no.as_str())
            .or_default() += 1;
        let paid = index
            .payments
            .get(grant.payment_no.as_str())
            .is_some_and(|payment| payment.status == "PAID");
        let order = index
            .orders
            .get(&(grant.tenant_id.as_str(), grant.order_id.as_str()));
        // A grant stays when its order is refunded afterwards: revoked (below), not deleted.
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
    check_revocations(snapshot, index, violations, figures);
    for payment in snapshot.payments.iter().filter(|p| p.status == "PAID") {
        let Some(order) = index
            .orders
            .get(&(payment.tenant_id.as_str(), payment.order_id.as_str()))
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
                    "{}: {granted} grants, expected {expected} ({})",
                    payment.payment_no,
                    event_trail(snapshot, &payment.payment_no)
                ),
            ));
        }
    }
}

/// Revocation: a grant is revoked when its payment is refunded in full — its SUCCESS refunds
/// add up to its amount — and is not revoked otherwise. Revoked once: `revoked_at` is set by
/// compare-and-set on a NULL, so the state after quiescence is what there is to check (the
/// revocation consumer acts asynchronously, on `refund.succeeded`; quiescence drains it).
fn check_revocations(
    snapshot: &Snapshot,
    index: &Index<'_>,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    let mut succeeded: HashMap<&str, i64> = HashMap::new();
    for refund in snapshot.refunds.iter().filter(|r| r.status == "SUCCESS") {
        let sum = succeeded.entry(refund.payment_no.as_str()).or_default();
        *sum = sum.saturating_add(refund.amount);
    }
    for grant in &snapshot.grants {
        if grant.revoked_at_ms.is_some() {
            figures.grants_revoked += 1;
        }
        let refunded = succeeded
            .get(grant.payment_no.as_str())
            .copied()
            .unwrap_or(0);
        let amount = index
            .payments
            .get(grant.payment_no.as_str())
            .map(|payment| payment.amount);
        let full = amount.is_some_and(|amount| amount > 0 && refunded == amount);
        let what = format!(
            "grant of {} ({}/{}): {refunded} of {} fen refunded",
            grant.payment_no,
            grant.tenant_id,
            grant.order_id,
            amount.map_or_else(|| "?".to_owned(), |amount| amount.to_string())
        );
        match (full, grant.revoked_at_ms) {
            (true, None) => violations.push(violation(
                "revocation: a grant is revoked once when its order is refunded in full, never otherwise",
                format!("{what}, and it is not revoked"),
            )),
            (false, Some(at)) => violations.push(violation(
                "revocation: a grant is revoked once when its order is refunded in full, never otherwise",
                format!("{what}, and it was revoked at {at}"),
            )),
            _ => {}
        }
    }
}

/// Where a payment's `payment.succeeded` went, for a grant count that is off: whether the
/// outbox holds the event, how its webhook deliveries ended (the same event, another path),
/// and what the consumers recorded of failing on it. Tells a lost message from an event never
/// written or one a consumer acknowledged without its effect.
fn event_trail(snapshot: &Snapshot, payment_no: &str) -> String {
    let events: Vec<&str> = snapshot
        .events
        .iter()
        .filter(|event| event.topic == "payment.succeeded" && event.key == payment_no)
        .map(|event| event.id.as_str())
        .collect();
    if events.is_empty() {
        return "no payment.succeeded event in the outbox".to_owned();
    }
    let trail: Vec<String> = events
        .iter()
        .map(|id| {
            let deliveries: Vec<&str> = snapshot
                .deliveries
                .iter()
                .filter(|delivery| delivery.event_id == *id)
                .map(|delivery| delivery.status.as_str())
                .collect();
            let failures: Vec<String> = snapshot
                .failures
                .iter()
                .filter(|failure| failure.message_id == *id)
                .map(|failure| {
                    format!(
                        "{} {} after {} attempts",
                        failure.consumer, failure.status, failure.attempts
                    )
                })
                .collect();
            let parked = snapshot.parked_outbox.iter().any(|parked| parked == id);
            format!(
                "event {id}: {}webhook deliveries [{}], consumer failures [{}]",
                if parked { "parked in the outbox, " } else { "" },
                deliveries.join(", "),
                failures.join(", ")
            )
        })
        .collect();
    trail.join("; ")
}

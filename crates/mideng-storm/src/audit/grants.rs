//! Entitlement grants: exactly one per PAID payment of a PAID order with an entitlement, none
//! for anything else.
use std::collections::HashMap;

use super::{AuditFigures, Index, Snapshot, Violation, violation};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 3] = [
    "a grant only for a paid order with an entitlement",
    "a payment has its order",
    "every paid entitlement granted exactly once",
];

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
                    "{}: {granted} grants, expected {expected}",
                    payment.payment_no
                ),
            ));
        }
    }
}

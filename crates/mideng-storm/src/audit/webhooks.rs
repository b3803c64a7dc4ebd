//! The merchant's webhooks: every event of this run delivered at least once, applied once.

use std::collections::{BTreeMap, HashSet};

use super::{AuditFigures, Snapshot, Violation, WebhookFacts, violation};

/// The invariants checked here, by the name their violations carry: only when the merchant's
/// facts are known (a deployment the storm started).
pub(super) const INVARIANTS: [&str; 6] = [
    "every event has its webhook delivery",
    "one webhook delivery per event and endpoint",
    "every webhook delivered at least once",
    "each change reaches the merchant under one webhook-id",
    "every delivered webhook reached the merchant, signed",
    "every webhook signed with the endpoint's secret",
];

/// Checks the deliveries against the events and against what the merchant received.
pub(super) fn check(
    snapshot: &Snapshot,
    received: &WebhookFacts,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    // The run's events: those about its payments and refunds.
    let ours: HashSet<&str> = snapshot
        .payments
        .iter()
        .map(|payment| payment.payment_no.as_str())
        .chain(
            snapshot
                .refunds
                .iter()
                .map(|refund| refund.refund_no.as_str()),
        )
        .collect();
    let merchants: Vec<_> = snapshot
        .deliveries
        .iter()
        .filter(|delivery| delivery.url.starts_with(&received.merchant_base))
        .collect();
    let mut per_event: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for delivery in &merchants {
        per_event
            .entry(delivery.event_id.as_str())
            .or_default()
            .push(delivery.status.as_str());
    }
    for event in snapshot
        .events
        .iter()
        .filter(|event| ours.contains(event.key.as_str()))
    {
        match per_event.get(event.id.as_str()).map(Vec::as_slice) {
            None | Some([]) => violations.push(violation(
                "every event has its webhook delivery",
                format!("{} {} ({})", event.topic, event.key, event.id),
            )),
            Some([_]) => {}
            Some(more) => violations.push(violation(
                "one webhook delivery per event and endpoint",
                format!("{} {}: {} deliveries", event.topic, event.key, more.len()),
            )),
        }
    }
    for delivery in &merchants {
        figures.webhook_deliveries += 1;
        if delivery.status != "DELIVERED" {
            violations.push(violation(
                "every webhook delivered at least once",
                format!("{} is {}", delivery.event_id, delivery.status),
            ));
            continue;
        }
        if !received.received.contains_key(&delivery.event_id) {
            violations.push(violation(
                "every delivered webhook reached the merchant, signed",
                delivery.event_id.clone(),
            ));
        }
    }
    // A receiver deduplicates by webhook-id, as the specification asks: a change that came
    // under two ids is applied twice there, whatever the service's own tables say.
    let mut ids_by_change: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, webhook) in &received.received {
        ids_by_change.entry(&webhook.change).or_default().push(id);
        if webhook.changes_differ {
            violations.push(violation(
                "each change reaches the merchant under one webhook-id",
                format!("{id} carried two different changes"),
            ));
        }
    }
    for (change, ids) in ids_by_change {
        if ids.len() > 1 {
            violations.push(violation(
                "each change reaches the merchant under one webhook-id",
                format!("{change} under {}", ids.join(", ")),
            ));
        }
    }
    figures.webhook_copies = received
        .received
        .values()
        .map(|webhook| usize::try_from(webhook.copies).unwrap_or(usize::MAX))
        .sum();
    if received.bad_signatures > 0 {
        violations.push(violation(
            "every webhook signed with the endpoint's secret",
            format!("{} messages did not verify", received.bad_signatures),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DeliveryFact, EventFact, PaymentFact, ReceivedWebhook};
    use super::*;

    /// The invariants broken when the merchant received `received` (id, copies, change).
    fn world(status: &str, received: &[(&str, u32, &str)]) -> Vec<&'static str> {
        let snapshot = Snapshot {
            payments: vec![PaymentFact {
                payment_no: "P1".to_owned(),
                tenant_id: "t".to_owned(),
                order_id: "o1".to_owned(),
                status: "PAID".to_owned(),
                amount: 100,
                currency: "CNY".to_owned(),
                expires_at_ms: 0,
                updated_at_ms: 0,
                refunded: 0,
            }],
            deliveries: vec![DeliveryFact {
                tenant_id: "t".to_owned(),
                event_id: "evt_1".to_owned(),
                status: status.to_owned(),
                url: "http://127.0.0.1:1/hooks/t".to_owned(),
            }],
            events: vec![
                EventFact {
                    id: "evt_1".to_owned(),
                    topic: "payment.succeeded".to_owned(),
                    key: "P1".to_owned(),
                },
                EventFact {
                    id: "evt_other".to_owned(),
                    topic: "payment.succeeded".to_owned(),
                    key: "P-another-run".to_owned(),
                },
            ],
            ..Snapshot::default()
        };
        let received = WebhookFacts {
            received: received
                .iter()
                .map(|(id, copies, change)| {
                    (
                        (*id).to_owned(),
                        ReceivedWebhook {
                            copies: *copies,
                            change: (*change).to_owned(),
                            changes_differ: false,
                        },
                    )
                })
                .collect(),
            bad_signatures: 0,
            merchant_base: "http://127.0.0.1:1/".to_owned(),
        };
        let mut violations = Vec::new();
        check(
            &snapshot,
            &received,
            &mut violations,
            &mut AuditFigures::default(),
        );
        violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn a_webhook_delivered_under_one_id_passes_and_anything_else_is_named() {
        let paid = "t payment.succeeded P1";
        assert!(world("DELIVERED", &[("evt_1", 3, paid)]).is_empty());
        // The same change under a second id: a receiver deduplicating by id applies it twice.
        assert_eq!(
            world("DELIVERED", &[("evt_1", 1, paid), ("evt_2", 1, paid)]),
            ["each change reaches the merchant under one webhook-id"]
        );
        assert_eq!(
            world("FAILED", &[]),
            ["every webhook delivered at least once"]
        );
        assert_eq!(
            world("DELIVERED", &[]),
            ["every delivered webhook reached the merchant, signed"]
        );
    }
}

//! The audit's own tests: every invariant named once, and each rule on small facts.

use std::collections::BTreeSet;

use super::*;

mod names;

pub(super) fn payment(number: &str, order: &str, status: &str) -> PaymentFact {
    PaymentFact {
        payment_no: number.to_owned(),
        tenant_id: "t".to_owned(),
        order_id: order.to_owned(),
        status: status.to_owned(),
        amount: 100,
        currency: "CNY".to_owned(),
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
        currency: "CNY".to_owned(),
        pricing: pricing(),
    }
}

/// What the test orders cost and grant: 100 fen for `u`, one `vip-month`.
fn pricing() -> Pricing {
    Pricing {
        user_id: "u".to_owned(),
        amount: 100,
        entitlement: Some(("vip-month".to_owned(), 1)),
    }
}

/// The grant of `order`'s payment `number`, as priced by [`pricing`].
pub(super) fn grant(number: &str, order: &str) -> GrantFact {
    GrantFact {
        payment_no: number.to_owned(),
        tenant_id: "t".to_owned(),
        order_id: order.to_owned(),
        user_id: "u".to_owned(),
        sku: "vip-month".to_owned(),
        quantity: 1,
        revoked_at_ms: None,
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
        grants: vec![grant("P1", "o1")],
        ..Snapshot::default()
    };
    let client = ClientFacts {
        priced: Some(
            ["o1", "o2"]
                .map(|order| (("t".to_owned(), order.to_owned()), pricing()))
                .into(),
        ),
        ..ClientFacts::default()
    };
    let (violations, figures) = check(&snapshot, &charged(&["P1"]), &client);
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!((figures.paid, figures.grants), (1, 1));
    assert_eq!((figures.orders, figures.priced), (2, 2));
}

/// A fault whose injection failed fails the run: the report would claim a fault it never
/// struck.
#[test]
fn a_fault_not_injected_is_a_violation() {
    let client = ClientFacts {
        faults_not_injected: vec!["the PostgreSQL failover: patronictl refused".to_owned()],
        ..ClientFacts::default()
    };
    let (violations, _) = check(&Snapshot::default(), &charged(&[]), &client);
    assert_eq!(
        violations
            .iter()
            .map(|found| (found.invariant, found.detail.as_str()))
            .collect::<Vec<_>>(),
        [(
            "every fault injected as scheduled",
            "the PostgreSQL failover: patronictl refused"
        )]
    );
}

/// The server prices, the page pays: a grant of an order the merchant's server never made, a
/// grant of more than it priced, an order it never made and an order priced otherwise than it
/// set are each a violation; the orders it made as it priced them are not.
#[test]
fn a_grant_or_an_order_the_merchant_did_not_price_is_a_violation() {
    const PRICED: &str = "every grant was priced by a secret key's order";
    let priced = |orders: &[&str]| ClientFacts {
        priced: Some(
            orders
                .iter()
                .map(|order| (("t".to_owned(), (*order).to_owned()), pricing()))
                .collect(),
        ),
        ..ClientFacts::default()
    };
    let named = |snapshot: &Snapshot, client: &ClientFacts| -> Vec<String> {
        let (violations, _) = check(snapshot, &charged(&["P1"]), client);
        violations
            .into_iter()
            .filter(|violation| violation.invariant == PRICED)
            .map(|violation| violation.detail)
            .collect()
    };
    let world = Snapshot {
        payments: vec![payment("P1", "o1", "PAID")],
        orders: vec![order("o1", "PAID")],
        grants: vec![grant("P1", "o1")],
        ..Snapshot::default()
    };
    assert!(named(&world, &priced(&["o1"])).is_empty());

    // A grant of 1000 where the merchant's server priced one.
    let more = Snapshot {
        grants: vec![GrantFact {
            quantity: 1000,
            ..grant("P1", "o1")
        }],
        ..world.clone()
    };
    let found = named(&more, &priced(&["o1"]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("1000 × vip-month"), "{found:?}");

    // The order and its grant, and the merchant's server never made the order: the page did.
    let found = named(&world, &priced(&[]));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .all(|detail| detail.contains("the merchant's server never made")),
        "{found:?}"
    );

    // The order re-priced: 1 fen where the merchant's server set 100.
    let cheap = Snapshot {
        orders: vec![OrderFact {
            pricing: Pricing {
                amount: 1,
                ..pricing()
            },
            ..order("o1", "PAID")
        }],
        ..world.clone()
    };
    let found = named(&cheap, &priced(&["o1"]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("is 1 fen"), "{found:?}");

    // Without the merchant's record the check is left out.
    assert!(named(&world, &ClientFacts::default()).is_empty());
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
            "LOST was answered and is not in the database: a lost acknowledged write".to_owned(),
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
            .map(|(number, order)| grant(number, order))
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
            balance_after: 100,
            wallet_version: 1,
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

// The events, the revocations and the payments' amounts: a world as the service leaves it,
// its events logged with the service's own event types, and each rule broken on its own.

/// The new invariants, by their names.
const PAID_EVENT: &str = "exactly one payment.succeeded per PAID payment";
const REFUND_EVENT: &str = "exactly one refund.succeeded per successful refund";
const HAS_CHANGE: &str = "each event has its change";
const REVOCATION: &str =
    "revocation: a grant is revoked once when its order is refunded in full, never otherwise";
const AMOUNT: &str = "payment amount equals its order's amount";

/// A refund of `payment` (of order `order`) as stored.
fn refund_of(number: &str, payment: &str, order: &str, amount: i64, status: &str) -> RefundFact {
    RefundFact {
        refund_no: number.to_owned(),
        tenant_id: "t".to_owned(),
        request_key: format!("k-{number}"),
        payment_no: payment.to_owned(),
        order_id: order.to_owned(),
        amount,
        status: status.to_owned(),
    }
}

/// `event` as the service logs it: its own type, serialised.
fn logged<E: serde::Serialize>(id: &str, event_type: &str, event: &E) -> LoggedEventFact {
    LoggedEventFact {
        event_id: id.to_owned(),
        tenant_id: "t".to_owned(),
        event_type: event_type.to_owned(),
        data: serde_json::to_string(event).expect("an event serialises"),
    }
}

/// The `payment.succeeded` the success flow writes for `payment`, of an order priced by
/// [`pricing`] that it moved to PAID.
fn paid_event(id: &str, payment: &PaymentFact) -> LoggedEventFact {
    use mideng_pay::domain::events::{GrantedItem, PaymentSucceeded};
    logged(
        id,
        "payment.succeeded",
        &PaymentSucceeded {
            tenant_id: payment.tenant_id.clone(),
            payment_no: payment.payment_no.clone(),
            order_id: payment.order_id.clone(),
            user_id: "u".to_owned(),
            amount: payment.amount,
            currency: payment.currency.clone(),
            channel: "alipay".to_owned(),
            channel_trade_no: format!("T-{}", payment.payment_no),
            paid_at_ms: 1_000,
            order_paid: true,
            entitlement: Some(GrantedItem {
                sku: "vip-month".to_owned(),
                quantity: 1,
            }),
        },
    )
}

/// The `refund.succeeded` a refund's success writes; `in_full`: its payment is refunded in
/// full with it.
fn refund_event(id: &str, refund: &RefundFact, in_full: bool) -> LoggedEventFact {
    use mideng_pay::domain::events::RefundSucceeded;
    logged(
        id,
        "refund.succeeded",
        &RefundSucceeded {
            tenant_id: refund.tenant_id.clone(),
            refund_no: refund.refund_no.clone(),
            payment_no: refund.payment_no.clone(),
            order_id: refund.order_id.clone(),
            amount: refund.amount,
            channel: "alipay".to_owned(),
            channel_refund_no: format!("CR-{}", refund.refund_no),
            refunded_at_ms: 2_000,
            payment_refunded: in_full,
        },
    )
}

/// The `payment.closed` a close writes.
fn closed_event(id: &str, payment: &PaymentFact) -> LoggedEventFact {
    use mideng_pay::domain::events::PaymentClosed;
    logged(
        id,
        "payment.closed",
        &PaymentClosed {
            tenant_id: payment.tenant_id.clone(),
            payment_no: payment.payment_no.clone(),
            order_id: payment.order_id.clone(),
            channel: "alipay".to_owned(),
            closed_at_ms: 3_000,
        },
    )
}

/// P1 (o1) PAID and refunded in full by R1 and R2, its order REFUNDED and its grant revoked;
/// P2 (o2) PAID and refunded in part by R3, its grant kept; P3 (o3) CLOSED; every event logged
/// once, as the service writes it.
fn evented_world() -> Snapshot {
    let payments = vec![
        PaymentFact {
            refunded: 100,
            ..payment("P1", "o1", "PAID")
        },
        PaymentFact {
            refunded: 30,
            ..payment("P2", "o2", "PAID")
        },
        payment("P3", "o3", "CLOSED"),
    ];
    let refunds = vec![
        refund_of("R1", "P1", "o1", 60, "SUCCESS"),
        refund_of("R2", "P1", "o1", 40, "SUCCESS"),
        refund_of("R3", "P2", "o2", 30, "SUCCESS"),
    ];
    let logged = vec![
        paid_event("E1", &payments[0]),
        paid_event("E2", &payments[1]),
        closed_event("E3", &payments[2]),
        refund_event("E4", &refunds[0], false),
        refund_event("E5", &refunds[1], true),
        refund_event("E6", &refunds[2], false),
    ];
    Snapshot {
        payments,
        orders: vec![
            order("o1", "REFUNDED"),
            order("o2", "PAID"),
            order("o3", "CREATED"),
        ],
        grants: vec![
            GrantFact {
                revoked_at_ms: Some(2_500),
                ..grant("P1", "o1")
            },
            grant("P2", "o2"),
        ],
        refunds,
        logged: Some(logged),
        ..Snapshot::default()
    }
}

/// The violations of the events, the revocations and the payments' amounts, as
/// (invariant, detail).
fn found(snapshot: &Snapshot) -> Vec<(&'static str, String)> {
    let (violations, _) = check(snapshot, &ChannelFacts::default(), &ClientFacts::default());
    violations
        .into_iter()
        .filter(|violation| {
            [PAID_EVENT, REFUND_EVENT, HAS_CHANGE, REVOCATION, AMOUNT]
                .contains(&violation.invariant)
        })
        .map(|violation| (violation.invariant, violation.detail))
        .collect()
}

/// `snapshot` breaks `invariant` once, with a detail that says `what`, and nothing else of
/// these.
#[track_caller]
fn breaks(snapshot: &Snapshot, invariant: &str, what: &str) {
    let found = found(snapshot);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, invariant, "{found:?}");
    assert!(found[0].1.contains(what), "{found:?}");
}

/// `snapshot` with its logged events changed by `change`.
fn with_logged(snapshot: &Snapshot, change: impl FnOnce(&mut Vec<LoggedEventFact>)) -> Snapshot {
    let mut changed = snapshot.clone();
    change(changed.logged.as_mut().expect("the world logs its events"));
    changed
}

#[test]
fn a_world_whose_events_grants_and_amounts_agree_passes() {
    let world = evented_world();
    assert!(found(&world).is_empty(), "{:?}", found(&world));
    let (_, figures) = check(&world, &ChannelFacts::default(), &ClientFacts::default());
    assert_eq!((figures.events_logged, figures.grants_revoked), (6, 1));

    // The whole audit, on a paid order with its event.
    let snapshot = Snapshot {
        payments: vec![payment("P1", "o1", "PAID")],
        orders: vec![order("o1", "PAID")],
        grants: vec![grant("P1", "o1")],
        logged: Some(vec![paid_event("E1", &payment("P1", "o1", "PAID"))]),
        ..Snapshot::default()
    };
    let client = ClientFacts {
        priced: Some([(("t".to_owned(), "o1".to_owned()), pricing())].into()),
        ..ClientFacts::default()
    };
    let (violations, figures) = check(&snapshot, &charged(&["P1"]), &client);
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(figures.events_logged, 1);
}

#[test]
fn a_paid_payment_without_its_one_payment_succeeded_as_it_is_is_a_violation() {
    let world = evented_world();
    // No event.
    breaks(
        &with_logged(&world, |logged| {
            logged.retain(|event| event.event_id != "E2")
        }),
        PAID_EVENT,
        "P2 is PAID with 0 payment.succeeded",
    );
    // Two events.
    let paid = payment("P2", "o2", "PAID");
    breaks(
        &with_logged(&world, |logged| logged.push(paid_event("E9", &paid))),
        PAID_EVENT,
        "P2 is PAID with 2 payment.succeeded [E2, E9]",
    );
    // The payload's amount is not the payment's.
    let cheap = PaymentFact {
        amount: 1,
        ..paid.clone()
    };
    breaks(
        &with_logged(&world, |logged| logged[1] = paid_event("E2", &cheap)),
        PAID_EVENT,
        "P2's payment.succeeded E2: amount 1 where 100",
    );
    // Another currency, another order, another tenant's log.
    let elsewhere = PaymentFact {
        currency: "USD".to_owned(),
        order_id: "o1".to_owned(),
        ..paid.clone()
    };
    breaks(
        &with_logged(&world, |logged| {
            logged[1] = LoggedEventFact {
                tenant_id: "t2".to_owned(),
                ..paid_event("E2", &elsewhere)
            }
        }),
        PAID_EVENT,
        "logged for tenant t2 where the row's is t, order_id \"o1\" where \"o2\", currency \"USD\" where \"CNY\"",
    );
    // It says the order was not moved (a payment after a cancel), and it was: no case says so.
    breaks(
        &with_logged(&world, |logged| {
            logged[1].data = logged[1]
                .data
                .replace("\"order_paid\":true", "\"order_paid\":false");
        }),
        PAID_EVENT,
        "order_paid false where true",
    );
}

#[test]
fn an_event_without_its_change_is_a_violation() {
    let world = evented_world();
    // A payment.succeeded of a payment that is not PAID.
    breaks(
        &with_logged(&world, |logged| {
            logged.push(paid_event("E9", &payment("P3", "o3", "PAID")));
        }),
        HAS_CHANGE,
        "payment.succeeded E9 of P3, which is CLOSED",
    );
    // Of a payment that does not exist.
    breaks(
        &with_logged(&world, |logged| {
            logged.push(paid_event("E9", &payment("P9", "o3", "PAID")));
        }),
        HAS_CHANGE,
        "payment.succeeded E9 of P9: no such payment",
    );
    // A refund.succeeded of a refund that did not succeed.
    let mut closed_refund = world.clone();
    closed_refund
        .refunds
        .push(refund_of("R4", "P2", "o2", 10, "CLOSED"));
    let late = refund_of("R4", "P2", "o2", 10, "SUCCESS");
    breaks(
        &with_logged(&closed_refund, |logged| {
            logged.push(refund_event("E9", &late, false));
        }),
        HAS_CHANGE,
        "refund.succeeded E9 of R4, which is CLOSED",
    );
    // A payment.closed of a payment that is PENDING (one PAID since its close is not: a late
    // success is a move of the payment's machine).
    let mut pending = world.clone();
    pending.payments.push(payment("P4", "o3", "PENDING"));
    breaks(
        &with_logged(&pending, |logged| {
            logged.push(closed_event("E9", &payment("P4", "o3", "CLOSED")));
        }),
        HAS_CHANGE,
        "payment.closed E9 of P4: the payment is PENDING",
    );
    assert!(
        found(&with_logged(&world, |logged| {
            logged.push(closed_event("E9", &payment("P2", "o2", "CLOSED")));
        }))
        .is_empty()
    );
    // One that names another order.
    breaks(
        &with_logged(&world, |logged| {
            logged[2] = closed_event("E3", &payment("P3", "o1", "CLOSED"));
        }),
        HAS_CHANGE,
        "payment.closed E3 of P3: order_id \"o1\" where \"o3\"",
    );
    // A payload that names nothing.
    breaks(
        &with_logged(&world, |logged| {
            logged.push(LoggedEventFact {
                data: "not json".to_owned(),
                ..paid_event("E9", &payment("P2", "o2", "PAID"))
            });
        }),
        HAS_CHANGE,
        "payment.succeeded E9: its payload names no payment",
    );
}

#[test]
fn a_successful_refund_without_its_one_refund_succeeded_as_it_is_is_a_violation() {
    let world = evented_world();
    // R3 succeeded and has no event.
    breaks(
        &with_logged(&world, |logged| {
            logged.retain(|event| event.event_id != "E6")
        }),
        REFUND_EVENT,
        "R3 of P2 is SUCCESS with 0 refund.succeeded",
    );
    // Its event says another amount.
    let more = refund_of("R3", "P2", "o2", 31, "SUCCESS");
    breaks(
        &with_logged(&world, |logged| {
            logged[5] = refund_event("E6", &more, false)
        }),
        REFUND_EVENT,
        "R3's refund.succeeded E6: amount 31 where 30",
    );
    // P1 refunded in full, and no event says so (the revocation consumer would not act).
    breaks(
        &with_logged(&world, |logged| {
            logged[4] = refund_event("E5", &refund_of("R2", "P1", "o1", 40, "SUCCESS"), false);
        }),
        REFUND_EVENT,
        "P1: 100 of 100 fen refunded, and 0 refund.succeeded say it is refunded in full",
    );
    // P2 refunded in part, and its event says in full.
    breaks(
        &with_logged(&world, |logged| {
            logged[5] = refund_event("E6", &refund_of("R3", "P2", "o2", 30, "SUCCESS"), true);
        }),
        REFUND_EVENT,
        "P2: 30 of 100 fen refunded, and 1 refund.succeeded say it is refunded in full [E6]",
    );
}

#[test]
fn a_grant_revoked_unless_its_order_is_refunded_in_full_is_a_violation() {
    let world = evented_world();
    // P2 is refunded 30 of 100 fen, and its grant is revoked.
    let mut revoked = world.clone();
    revoked.grants[1].revoked_at_ms = Some(2_500);
    breaks(
        &revoked,
        REVOCATION,
        "grant of P2 (t/o2): 30 of 100 fen refunded, and it was revoked at 2500",
    );
    // P1 is refunded in full, and its grant is not revoked.
    let mut kept = world.clone();
    kept.grants[0].revoked_at_ms = None;
    breaks(
        &kept,
        REVOCATION,
        "grant of P1 (t/o1): 100 of 100 fen refunded, and it is not revoked",
    );
    // A refund that closed does not count: 60 of 100, and the grant is revoked.
    let mut closed = world.clone();
    closed.refunds[1].status = "CLOSED".to_owned();
    closed.logged = Some(
        with_logged(&world, |logged| {
            logged.retain(|event| event.event_id != "E5");
        })
        .logged
        .expect("logged"),
    );
    let found = found(&closed);
    assert!(
        found.iter().any(|(name, detail)| *name == REVOCATION
            && detail.contains("60 of 100 fen refunded, and it was revoked")),
        "{found:?}"
    );
}

#[test]
fn a_payment_for_another_amount_than_its_orders_is_a_violation() {
    let world = evented_world();
    // A pending attempt of o3 for 99 fen.
    let mut cheaper = world.clone();
    cheaper.payments.push(PaymentFact {
        amount: 99,
        ..payment("P4", "o3", "PENDING")
    });
    breaks(
        &cheaper,
        AMOUNT,
        "P4 (t/o3, PENDING): 99 CNY, its order 100 CNY",
    );
    // The same amount in another currency.
    let mut dollars = world.clone();
    dollars.payments[2].currency = "USD".to_owned();
    breaks(
        &dollars,
        AMOUNT,
        "P3 (t/o3, CLOSED): 100 USD, its order 100 CNY",
    );
    // A PAID payment for more than its order, its event saying what the payment says.
    let mut dearer = world.clone();
    dearer.payments[1].amount = 150;
    let paid = dearer.payments[1].clone();
    let dearer = with_logged(&dearer, |logged| logged[1] = paid_event("E2", &paid));
    breaks(
        &dearer,
        AMOUNT,
        "P2 (t/o2, PAID): 150 CNY, its order 100 CNY",
    );
    // An attempt with no order to compare with.
    let mut orphan = world.clone();
    orphan.payments.push(payment("P5", "o9", "CLOSED"));
    let (violations, _) = check(&orphan, &ChannelFacts::default(), &ClientFacts::default());
    assert!(
        violations.contains(&violation(
            "a payment has its order",
            "P5 (CLOSED): no order t/o9".to_owned()
        )),
        "{violations:?}"
    );
}

/// A run's snapshot keeps the events of its tenants about its orders, and those whose payload
/// names no order (the check reports them); another run's, or another tenant's, are left out.
#[test]
fn a_runs_snapshot_keeps_its_own_events() {
    let ours = payment("run1-o1-P", "run1-o1", "PAID");
    let theirs = payment("run0-o1-P", "run0-o1", "PAID");
    let unreadable = LoggedEventFact {
        data: "{}".to_owned(),
        ..paid_event("E3", &ours)
    };
    let snapshot = Snapshot {
        logged: Some(vec![
            paid_event("E1", &ours),
            paid_event("E2", &theirs),
            unreadable,
            LoggedEventFact {
                tenant_id: "t2".to_owned(),
                ..paid_event("E4", &ours)
            },
        ]),
        ..Snapshot::default()
    };
    let kept = snapshot.of_run(&["t".to_owned()].into(), "run1");
    let ids: Vec<&str> = kept
        .logged
        .iter()
        .flatten()
        .map(|event| event.event_id.as_str())
        .collect();
    assert_eq!(ids, ["E1", "E3"]);
}

/// The fences' negative control: a write an instance committed under an order lock another
/// instance had since used (counted by the instances as `written-stale`) is named; refusals
/// of such writes (`refused-stale`, the fences holding) are not.
#[test]
fn a_fenced_off_write_is_a_violation() {
    let table = |outcome: &str| {
        BTreeMap::from([(
            "fence".to_owned(),
            BTreeMap::from([(format!("order.write:{outcome}"), 2)]),
        )])
    };
    assert!(super::fenced_off_writes(&table("refused-stale")).is_none());
    let found = super::fenced_off_writes(&table("written-stale")).expect("named");
    assert_eq!(
        found.invariant,
        "no write committed under a superseded order lock"
    );
    assert!(
        found.detail.starts_with("2 fenced-off write(s)"),
        "{}",
        found.detail
    );
}

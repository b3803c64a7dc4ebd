//! The audit's own tests: every invariant named once, and each rule on small facts.

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
        include_str!("payments.rs"),
        include_str!("grants.rs"),
        include_str!("wallets.rs"),
        include_str!("attacks.rs"),
        include_str!("refunds.rs"),
        include_str!("webhooks.rs"),
        include_str!("bills.rs"),
        include_str!("ledger.rs"),
        include_str!("history.rs"),
    ]
    .into_iter()
    .flat_map(names_in)
    .collect();
    let listed: Vec<&str> = all_invariants().collect();
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

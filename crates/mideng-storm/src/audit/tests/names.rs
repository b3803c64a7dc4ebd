//! The invariants' names: each named once, each listed, and the README's guarantees mapped to
//! them.

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
fn every_readme_guarantee_maps_to_invariants_the_audit_checks() {
    let doc = include_str!("../../../../../docs/storm.md");
    let (_, table) = doc
        .split_once("## The README's guarantees, and the invariants that check them")
        .expect("docs/storm.md maps the README's guarantees to invariants");
    let known: BTreeSet<&str> = all_invariants().collect();
    let mut rows = 0;
    for row in table
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| the README says"))
    {
        let cells: Vec<&str> = row.split(" | ").collect();
        let named: Vec<&str> = cells
            .get(1)
            .expect("two columns")
            .split('`')
            .skip(1)
            .step_by(2)
            .collect();
        assert!(!named.is_empty(), "{row}: names no invariant");
        for name in named {
            assert!(
                known.contains(name),
                "{row}: `{name}` is not an invariant of the audit"
            );
        }
        rows += 1;
    }
    assert!(rows >= 10, "the table lost its rows: {rows}");
}

#[test]
fn every_invariant_the_audit_names_is_listed_once() {
    let named: BTreeSet<&str> = [
        include_str!("../mod.rs"),
        include_str!("../payments.rs"),
        include_str!("../grants.rs"),
        include_str!("../wallets.rs"),
        include_str!("../attacks.rs"),
        include_str!("../refunds.rs"),
        include_str!("../events.rs"),
        include_str!("../webhooks.rs"),
        include_str!("../bills.rs"),
        include_str!("../ledger.rs"),
        include_str!("../history.rs"),
        include_str!("../chain.rs"),
        include_str!("../linearizable.rs"),
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
        violation(
            "each change reaches the merchant under one webhook-id",
            "w".to_owned(),
        ),
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
    assert!(find("each change reaches the merchant under one webhook-id").checked);
    assert!(!find("every attack refused").checked);
    assert!(
        invariant_results(&[], true, true, true)
            .iter()
            .all(|result| result.checked && result.violations == 0)
    );
}

//! The database's witness, checked before the history check trusts it: each wallet's ledger,
//! by the wallet's version written with each entry, must be one chain — versions 1, 2, 3 …
//! with none missing or repeated, and each entry's balance the one before plus its credit or
//! less its debit, from zero. A ledger whose sum is right but whose chain is not fails here.

use std::collections::BTreeMap;

use super::{EntryFact, Snapshot, Violation, violation};

/// Each wallet's ledger, by version, is one chain from a zero balance: versions 1, 2, 3 …
/// without a gap or a repeat, and each entry's `balance_after` the previous one's plus its
/// credit or less its debit. A wallet with an entry older than the version column (version 0)
/// has no recorded order and is left out, as in the history check.
pub(super) fn check_ledger_chains(snapshot: &Snapshot, violations: &mut Vec<Violation>) {
    let mut ledgers: BTreeMap<(&str, &str), Vec<&EntryFact>> = BTreeMap::new();
    for entry in &snapshot.entries {
        ledgers
            .entry((entry.tenant_id.as_str(), entry.user_id.as_str()))
            .or_default()
            .push(entry);
    }
    for ((tenant, user), mut ledger) in ledgers {
        if ledger.iter().any(|entry| entry.wallet_version <= 0) {
            continue;
        }
        ledger.sort_by_key(|entry| (entry.wallet_version, entry.entry_no.as_str()));
        let mut balance: i64 = 0;
        for (place, entry) in ledger.iter().enumerate() {
            let expected_version = i64::try_from(place).unwrap_or(i64::MAX).saturating_add(1);
            if entry.wallet_version != expected_version {
                violations.push(violation(
                    "each wallet's ledger is one chain: versions 1, 2, 3 … and each balance from the one before",
                    format!(
                        "{tenant}/{user}: entry {} has version {}, where the chain's next is {expected_version}",
                        entry.entry_no, entry.wallet_version
                    ),
                ));
                break;
            }
            let moved = match entry.kind.as_str() {
                "CREDIT" => balance.checked_add(entry.amount),
                "DEBIT" => balance.checked_sub(entry.amount),
                _ => None,
            };
            if moved != Some(entry.balance_after) {
                violations.push(violation(
                    "each wallet's ledger is one chain: versions 1, 2, 3 … and each balance from the one before",
                    format!(
                        "{tenant}/{user}: entry {} (version {}, {} {}) says the balance is {}, \
                         where the one before ({balance}) makes it {moved:?}",
                        entry.entry_no,
                        entry.wallet_version,
                        entry.kind,
                        entry.amount,
                        entry.balance_after
                    ),
                ));
                break;
            }
            balance = entry.balance_after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = "each wallet's ledger is one chain: versions 1, 2, 3 … and each balance from the one before";

    fn entry(kind: &str, index: usize, amount: i64, after: i64, version: i64) -> EntryFact {
        EntryFact {
            entry_no: format!("n{index}"),
            tenant_id: "t".to_owned(),
            user_id: "w".to_owned(),
            kind: kind.to_owned(),
            amount,
            order_id: (kind == "DEBIT").then(|| format!("k{index}")),
            reference: format!("k{index}"),
            balance_after: after,
            wallet_version: version,
        }
    }

    fn names(violations: &[Violation]) -> Vec<&'static str> {
        violations.iter().map(|found| found.invariant).collect()
    }

    #[test]
    fn a_ledger_that_is_not_one_chain_is_named() {
        let chain = |entries: &[(&str, i64, i64, i64)]| Snapshot {
            entries: entries
                .iter()
                .enumerate()
                .map(|(index, (kind, amount, after, version))| {
                    entry(kind, index, *amount, *after, *version)
                })
                .collect(),
            ..Snapshot::default()
        };
        let broken = |snapshot: &Snapshot| {
            let mut violations = Vec::new();
            check_ledger_chains(snapshot, &mut violations);
            names(&violations)
        };
        assert!(broken(&chain(&[("CREDIT", 100, 100, 1), ("DEBIT", 60, 40, 2)])).is_empty());
        // The sum is right (100 − 60 − 30 = 10 is not what the last entry says, and neither
        // is 40 after 40 − 30): the chain is not.
        assert_eq!(
            broken(&chain(&[
                ("CREDIT", 100, 100, 1),
                ("DEBIT", 60, 40, 2),
                ("DEBIT", 30, 40, 3)
            ])),
            [CHAIN]
        );
        // A version missing, or one twice.
        assert_eq!(
            broken(&chain(&[("CREDIT", 100, 100, 1), ("DEBIT", 60, 40, 3)])),
            [CHAIN]
        );
        assert_eq!(
            broken(&chain(&[("CREDIT", 100, 100, 1), ("CREDIT", 5, 105, 1)])),
            [CHAIN]
        );
        // A wallet from before the version column is left out.
        assert!(broken(&chain(&[("CREDIT", 100, 7, 0)])).is_empty());
    }
}

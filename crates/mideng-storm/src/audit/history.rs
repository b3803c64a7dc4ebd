//! The history check, in the style of Jepsen's: every operation a client invoked, with each of
//! its attempts' invocation and completion and what the attempt came to — **ok** (a 2xx),
//! **refused** (a final 4xx about the operation) or **unknown** (no answer, a 5xx, a 202, a
//! refusal of the attempt's token that says nothing of earlier attempts) — held against what
//! the database kept.
//!
//! An operation is all the attempts under one request key. It is ok if an attempt was answered
//! ok, refused if its last attempt was refused and none was ok, unknown otherwise. Operations
//! that must take one effect between them share a business key (the order of a deduct, the
//! reference of a credit, the deduction of a reversal, the request key of a refund); the
//! service promises, per business key:
//!
//! | the operations came to | the database holds |
//! |---|---|
//! | one or more ok | exactly one effect, the one the ok answers named |
//! | refused, none ok or unknown | no effect |
//! | unknown, none ok | at most one effect (the report counts how each was settled) |
//!
//! and, per wallet, that the ledger's order (the wallet's version written with each entry) is
//! one the clients could have observed: an effect whose operation was answered before another's
//! was invoked comes first (real-time order), an ok answer's balance is the ledger's balance
//! after that entry, and a deduct refused for insufficient funds saw a balance that did not
//! cover it at some point between its invocation and its answer. That is linearizability of
//! each wallet as a conditional counter, checked against the one order the database chose.
//!
//! That order is the database's witness, so it is checked before it is trusted: per wallet,
//! the versions are 1, 2, 3 … with none missing or repeated, and every entry's balance is the
//! one before it plus a credit or less a debit, from zero ([`super::chain`]). A history
//! whose sum is right but whose chain is not (v1 +100 → 100, v2 −60 → 40, v3 −30 → 40) fails
//! here.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::refunds::REVERSAL_REFERENCE_PREFIX;
use super::{EntryFact, Snapshot, Violation, violation};

/// The invariants checked here.
pub(super) const INVARIANTS: [&str; 6] = [
    "an operation answered ok took effect once",
    "an operation refused took no effect",
    "an operation without an answer took effect at most once",
    "each wallet's ledger respects real time",
    "every answer agrees with the ledger",
    "each wallet's ledger is one chain: versions 1, 2, 3 … and each balance from the one before",
];

/// What kind of operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `POST /v1/wallets/{user}/credit`.
    Credit,
    /// `POST /v1/wallets/{user}/deduct`.
    Deduct,
    /// `POST /v1/wallets/{user}/deductions/{no}/reverse`.
    Reversal,
    /// `POST /v1/payments/{no}/refunds`.
    Refund,
    /// `POST /v1/orders/{id}/payments`.
    Payment,
}

impl OpKind {
    /// As the report names it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Credit => "credit",
            OpKind::Deduct => "deduct",
            OpKind::Reversal => "reversal",
            OpKind::Refund => "refund",
            OpKind::Payment => "payment",
        }
    }

    fn moves_a_wallet(self) -> bool {
        matches!(self, OpKind::Credit | OpKind::Deduct | OpKind::Reversal)
    }
}

/// What one attempt came to, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Ok {
        /// The entry, refund or payment number the answer named.
        number: Option<String>,
        /// The balance after the effect, when the answer tells it.
        balance_after: Option<i64>,
    },
    /// A final 4xx about the operation, with its problem `code`.
    Refused {
        /// The problem's `code`.
        code: String,
    },
    /// No answer, a 5xx, a 202, or a refusal of the attempt's token only.
    Unknown,
}

/// One attempt: when it was sent and answered (ms since the run began) and what it came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Sent.
    pub invoked_ms: u64,
    /// Answered, or given up on.
    pub completed_ms: u64,
    /// What it came to.
    pub outcome: Outcome,
}

/// One operation: the attempts under one request key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// What kind.
    pub kind: OpKind,
    /// The tenant's id.
    pub tenant: String,
    /// The wallet's owner (credits, deducts, reversals) or the payment's number (refunds).
    pub subject: String,
    /// What its effect is one per: the order (deduct), the reference (credit), the deduction
    /// (reversal), the request key (refund, payment).
    pub business_key: String,
    /// The amount asked for (0 where the request names none).
    pub amount: i64,
    /// Its attempts, in the order they were sent.
    pub attempts: Vec<Attempt>,
}

/// What an operation came to, over its attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict<'a> {
    Ok {
        number: Option<&'a str>,
        balance_after: Option<i64>,
        completed_ms: u64,
    },
    Refused {
        code: &'a str,
        completed_ms: u64,
    },
    Unknown,
}

impl Operation {
    fn verdict(&self) -> Verdict<'_> {
        if let Some(attempt) = self
            .attempts
            .iter()
            .find(|attempt| matches!(attempt.outcome, Outcome::Ok { .. }))
            && let Outcome::Ok {
                number,
                balance_after,
            } = &attempt.outcome
        {
            return Verdict::Ok {
                number: number.as_deref(),
                balance_after: *balance_after,
                completed_ms: attempt.completed_ms,
            };
        }
        match self.attempts.last() {
            Some(Attempt {
                outcome: Outcome::Refused { code },
                completed_ms,
                ..
            }) => Verdict::Refused {
                code,
                completed_ms: *completed_ms,
            },
            _ => Verdict::Unknown,
        }
    }

    fn invoked_ms(&self) -> u64 {
        self.attempts
            .iter()
            .map(|attempt| attempt.invoked_ms)
            .min()
            .unwrap_or(0)
    }
}

/// What the history came to for one kind of operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HistoryCounts {
    /// Operations.
    pub operations: u64,
    /// Attempts sent.
    pub attempts: u64,
    /// Attempts without a definite answer (no answer, 5xx, 202).
    pub unknown_attempts: u64,
    /// Operations answered ok.
    pub ok: u64,
    /// Operations refused.
    pub refused: u64,
    /// Operations that never had a definite answer.
    pub unknown: u64,
    /// Of those, the ones whose effect the database holds.
    pub unknown_applied: u64,
    /// Of those, the ones that took no effect.
    pub unknown_not_applied: u64,
    /// Operations ok after an attempt without an answer: the retry under the key settled it.
    pub settled_by_retry: u64,
}

/// An effect the database holds for a business key.
#[derive(Clone, Debug)]
struct Effect<'a> {
    number: &'a str,
    balance_after: Option<i64>,
    /// The wallet's version after it (wallet effects).
    version: Option<i64>,
}

/// The business key's group: its operations and the effects found for it.
struct Group<'a> {
    kind: OpKind,
    tenant: &'a str,
    subject: &'a str,
    business_key: &'a str,
    operations: Vec<&'a Operation>,
    effects: Vec<Effect<'a>>,
}

/// Checks the history against the snapshot; the violations, and the counts per kind.
pub(super) fn check(
    snapshot: &Snapshot,
    history: &[Operation],
    violations: &mut Vec<Violation>,
) -> BTreeMap<String, HistoryCounts> {
    let mut counts: BTreeMap<String, HistoryCounts> = BTreeMap::new();
    let mut groups: BTreeMap<(OpKind, &str, &str, &str), Vec<&Operation>> = BTreeMap::new();
    for operation in history {
        let count = counts
            .entry(operation.kind.as_str().to_owned())
            .or_default();
        count.operations += 1;
        count.attempts += operation.attempts.len() as u64;
        count.unknown_attempts += operation
            .attempts
            .iter()
            .filter(|attempt| attempt.outcome == Outcome::Unknown)
            .count() as u64;
        match operation.verdict() {
            Verdict::Ok { .. } => {
                count.ok += 1;
                if operation
                    .attempts
                    .iter()
                    .any(|attempt| attempt.outcome == Outcome::Unknown)
                {
                    count.settled_by_retry += 1;
                }
            }
            Verdict::Refused { .. } => count.refused += 1,
            Verdict::Unknown => count.unknown += 1,
        }
        groups
            .entry((
                operation.kind,
                operation.tenant.as_str(),
                operation.subject.as_str(),
                operation.business_key.as_str(),
            ))
            .or_default()
            .push(operation);
    }
    let effects = Effects::of(snapshot);
    let groups: Vec<Group<'_>> = groups
        .into_iter()
        .filter_map(|((kind, tenant, subject, business_key), operations)| {
            // Payments: whether an unanswered creation made one is not told by a key the
            // database keeps; the audit holds every answered payment to be stored.
            let effects = effects.for_key(kind, tenant, subject, business_key)?;
            Some(Group {
                kind,
                tenant,
                subject,
                business_key,
                operations,
                effects,
            })
        })
        .collect();
    for group in &groups {
        check_group(group, &mut counts, violations);
    }
    super::chain::check_ledger_chains(snapshot, violations);
    check_wallet_order(snapshot, &groups, violations);
    counts
}

/// The effects the snapshot holds, by business key.
struct Effects<'a> {
    /// (tenant, user, kind, business key) → entries: a debit by its order, a credit by its
    /// reference.
    entries: HashMap<(&'a str, &'a str, &'a str, &'a str), Vec<&'a EntryFact>>,
    /// (tenant, request key) → refund numbers.
    refunds: HashMap<(&'a str, &'a str), Vec<&'a str>>,
}

impl<'a> Effects<'a> {
    fn of(snapshot: &'a Snapshot) -> Self {
        let mut entries: HashMap<_, Vec<&EntryFact>> = HashMap::new();
        for entry in &snapshot.entries {
            let business_key = match entry.kind.as_str() {
                "DEBIT" => entry.order_id.as_deref().unwrap_or_default(),
                _ => entry.reference.as_str(),
            };
            entries
                .entry((
                    entry.tenant_id.as_str(),
                    entry.user_id.as_str(),
                    entry.kind.as_str(),
                    business_key,
                ))
                .or_default()
                .push(entry);
        }
        let mut refunds: HashMap<_, Vec<&str>> = HashMap::new();
        for refund in &snapshot.refunds {
            refunds
                .entry((refund.tenant_id.as_str(), refund.request_key.as_str()))
                .or_default()
                .push(refund.refund_no.as_str());
        }
        Self { entries, refunds }
    }

    /// The effects of a business key; `None` for a kind this check does not hold to the
    /// database (payments).
    fn for_key(
        &self,
        kind: OpKind,
        tenant: &'a str,
        subject: &'a str,
        business_key: &'a str,
    ) -> Option<Vec<Effect<'a>>> {
        let entries = |entry_kind: &str, key: &str| {
            self.entries
                .get(&(tenant, subject, entry_kind, key))
                .map(|entries| {
                    entries
                        .iter()
                        .map(|entry| Effect {
                            number: entry.entry_no.as_str(),
                            balance_after: Some(entry.balance_after),
                            version: Some(entry.wallet_version),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        match kind {
            OpKind::Deduct => Some(entries("DEBIT", business_key)),
            OpKind::Credit => Some(entries("CREDIT", business_key)),
            OpKind::Reversal => Some(entries(
                "CREDIT",
                &format!("{REVERSAL_REFERENCE_PREFIX}{business_key}"),
            )),
            OpKind::Refund => Some(
                self.refunds
                    .get(&(tenant, business_key))
                    .map(|numbers| {
                        numbers
                            .iter()
                            .map(|number| Effect {
                                number,
                                balance_after: None,
                                version: None,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            OpKind::Payment => None,
        }
    }
}

fn describe(group: &Group<'_>) -> String {
    format!(
        "{} {}/{} {}",
        group.kind.as_str(),
        group.tenant,
        group.subject,
        group.business_key
    )
}

/// The per-business-key rules: ok → one effect, the one named; refused → none; unknown → at
/// most one.
fn check_group(
    group: &Group<'_>,
    counts: &mut BTreeMap<String, HistoryCounts>,
    violations: &mut Vec<Violation>,
) {
    let verdicts: Vec<Verdict<'_>> = group
        .operations
        .iter()
        .map(|operation| operation.verdict())
        .collect();
    let any_ok = verdicts
        .iter()
        .any(|verdict| matches!(verdict, Verdict::Ok { .. }));
    let any_unknown = verdicts
        .iter()
        .any(|verdict| matches!(verdict, Verdict::Unknown));
    let effects = group.effects.len();
    if any_ok {
        if effects != 1 {
            violations.push(violation(
                "an operation answered ok took effect once",
                if effects == 0 {
                    format!(
                        "{}: answered ok, no effect in the database: a lost acknowledged write",
                        describe(group)
                    )
                } else {
                    format!("{}: answered ok, {effects} effects", describe(group))
                },
            ));
        }
        for verdict in &verdicts {
            if let Verdict::Ok {
                number: Some(number),
                balance_after,
                ..
            } = verdict
                && let [effect] = group.effects.as_slice()
                && (effect.number != *number
                    || balance_after.is_some() && effect.balance_after != *balance_after)
            {
                violations.push(violation(
                    "every answer agrees with the ledger",
                    format!(
                        "{}: answered {number} (balance {balance_after:?}), the database holds {} (balance {:?})",
                        describe(group),
                        effect.number,
                        effect.balance_after
                    ),
                ));
            }
        }
    } else if any_unknown {
        if effects > 1 {
            violations.push(violation(
                "an operation without an answer took effect at most once",
                format!("{}: no answer, {effects} effects", describe(group)),
            ));
        }
        let count = counts.entry(group.kind.as_str().to_owned()).or_default();
        let unknown = verdicts
            .iter()
            .filter(|verdict| matches!(verdict, Verdict::Unknown))
            .count() as u64;
        if effects == 0 {
            count.unknown_not_applied += unknown;
        } else {
            count.unknown_applied += unknown;
        }
    } else if effects > 0 {
        let codes: Vec<&str> = verdicts
            .iter()
            .filter_map(|verdict| match verdict {
                Verdict::Refused { code, .. } => Some(*code),
                _ => None,
            })
            .collect();
        violations.push(violation(
            "an operation refused took no effect",
            format!(
                "{}: refused ({}), {effects} effects",
                describe(group),
                codes.join(", ")
            ),
        ));
    }
}

/// One wallet effect placed in time: the earliest its operations were invoked, the earliest one
/// was answered ok (or never), and its place in the ledger.
#[derive(Clone, Copy, Debug)]
struct Placed {
    after_ms: u64,
    before_ms: Option<u64>,
    version: i64,
}

/// Real time and the answers against each wallet's ledger order.
fn check_wallet_order(snapshot: &Snapshot, groups: &[Group<'_>], violations: &mut Vec<Violation>) {
    // Each wallet's ledger by version: (version, balance after). A wallet with an entry older
    // than the version column (0) has no known order, and is left out.
    let mut ledgers: HashMap<(&str, &str), Vec<(i64, i64)>> = HashMap::new();
    for entry in &snapshot.entries {
        ledgers
            .entry((entry.tenant_id.as_str(), entry.user_id.as_str()))
            .or_default()
            .push((entry.wallet_version, entry.balance_after));
    }
    ledgers.retain(|_, ledger| ledger.iter().all(|(version, _)| *version > 0));
    for ledger in ledgers.values_mut() {
        ledger.sort_unstable();
    }
    let mut placed: HashMap<(&str, &str), Vec<(Placed, &Group<'_>)>> = HashMap::new();
    for group in groups.iter().filter(|group| group.kind.moves_a_wallet()) {
        let [effect] = group.effects.as_slice() else {
            continue;
        };
        let Some(version) = effect.version else {
            continue;
        };
        let after_ms = group
            .operations
            .iter()
            .map(|operation| operation.invoked_ms())
            .min()
            .unwrap_or(0);
        let before_ms = group
            .operations
            .iter()
            .filter_map(|operation| match operation.verdict() {
                Verdict::Ok { completed_ms, .. } => Some(completed_ms),
                _ => None,
            })
            .min();
        placed
            .entry((group.tenant, group.subject))
            .or_default()
            .push((
                Placed {
                    after_ms,
                    before_ms,
                    version,
                },
                group,
            ));
    }
    for (wallet, effects) in &placed {
        let Some(ledger) = ledgers.get(wallet) else {
            continue;
        };
        real_time_order(effects, violations);
        refused_deducts(wallet, ledger, effects, groups, violations);
    }
}

/// An effect answered before another was invoked comes first in the ledger.
fn real_time_order(effects: &[(Placed, &Group<'_>)], violations: &mut Vec<Violation>) {
    // By answer time; a sweep over the effects by invocation keeps the latest version among
    // those answered before.
    let mut answered: Vec<&(Placed, &Group<'_>)> = effects
        .iter()
        .filter(|(placed, _)| placed.before_ms.is_some())
        .collect();
    answered.sort_by_key(|(placed, _)| placed.before_ms);
    let mut invoked: Vec<&(Placed, &Group<'_>)> = effects.iter().collect();
    invoked.sort_by_key(|(placed, _)| placed.after_ms);
    let mut next = 0;
    let mut latest: Option<&(Placed, &Group<'_>)> = None;
    for later in invoked {
        while let Some(earlier) = answered.get(next)
            && earlier.0.before_ms.is_some_and(|ms| ms < later.0.after_ms)
        {
            if latest.is_none_or(|(placed, _)| placed.version < earlier.0.version) {
                latest = Some(earlier);
            }
            next += 1;
        }
        if let Some((earlier, group)) = latest
            && earlier.version > later.0.version
        {
            violations.push(violation(
                "each wallet's ledger respects real time",
                format!(
                    "{} was answered at {} ms, before {} was invoked at {} ms, yet the ledger puts it after (versions {} and {})",
                    describe(group),
                    earlier.before_ms.unwrap_or_default(),
                    describe(later.1),
                    later.0.after_ms,
                    earlier.version,
                    later.0.version
                ),
            ));
        }
    }
}

/// A deduct refused for insufficient funds saw, at some point between its invocation and its
/// answer, a balance that did not cover it: some state of the ledger between the last effect
/// answered before it was invoked and the first effect invoked after it was answered.
fn refused_deducts(
    wallet: &(&str, &str),
    ledger: &[(i64, i64)],
    effects: &[(Placed, &Group<'_>)],
    groups: &[Group<'_>],
    violations: &mut Vec<Violation>,
) {
    for group in groups
        .iter()
        .filter(|group| group.kind == OpKind::Deduct && (group.tenant, group.subject) == *wallet)
    {
        for operation in &group.operations {
            let Verdict::Refused {
                code: "insufficient-funds",
                completed_ms,
            } = operation.verdict()
            else {
                continue;
            };
            let invoked_ms = operation.invoked_ms();
            let from = effects
                .iter()
                .filter(|(placed, _)| placed.before_ms.is_some_and(|ms| ms < invoked_ms))
                .map(|(placed, _)| placed.version)
                .max()
                .unwrap_or(0);
            let until = effects
                .iter()
                .filter(|(placed, _)| placed.after_ms > completed_ms)
                .map(|(placed, _)| placed.version)
                .min()
                .unwrap_or(i64::MAX);
            // The balance at `from` (after the last entry at or before it), then after each
            // entry strictly between.
            let at_from = ledger
                .iter()
                .rev()
                .find(|(version, _)| *version <= from)
                .map_or(0, |(_, balance)| *balance);
            let mut seen = std::iter::once(at_from).chain(
                ledger
                    .iter()
                    .filter(|(version, _)| *version > from && *version < until)
                    .map(|(_, balance)| *balance),
            );
            if seen.all(|balance| balance >= operation.amount) {
                violations.push(violation(
                    "every answer agrees with the ledger",
                    format!(
                        "{}: refused for insufficient funds ({} fen asked), yet every balance between versions {from} and {until} covered it",
                        describe(group),
                        operation.amount
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: &str, kind: &str, key: &str, no: &str, after: i64, version: i64) -> EntryFact {
        EntryFact {
            entry_no: no.to_owned(),
            tenant_id: "t".to_owned(),
            user_id: user.to_owned(),
            kind: kind.to_owned(),
            amount: 1,
            order_id: (kind == "DEBIT").then(|| key.to_owned()),
            reference: key.to_owned(),
            balance_after: after,
            wallet_version: version,
        }
    }

    fn attempt(from: u64, to: u64, outcome: Outcome) -> Attempt {
        Attempt {
            invoked_ms: from,
            completed_ms: to,
            outcome,
        }
    }

    fn ok(number: &str, balance: i64) -> Outcome {
        Outcome::Ok {
            number: Some(number.to_owned()),
            balance_after: Some(balance),
        }
    }

    fn op(kind: OpKind, key: &str, amount: i64, attempts: Vec<Attempt>) -> Operation {
        Operation {
            kind,
            tenant: "t".to_owned(),
            subject: "u".to_owned(),
            business_key: key.to_owned(),
            amount,
            attempts,
        }
    }

    fn names(violations: &[Violation]) -> Vec<&'static str> {
        violations.iter().map(|found| found.invariant).collect()
    }

    /// A credit of 100 (version 1), a deduct of 60 (version 2), a deduct refused while 40 was
    /// left, an unknown deduct that was applied (version 3) and one that was not.
    fn good() -> (Snapshot, Vec<Operation>) {
        let snapshot = Snapshot {
            entries: vec![
                EntryFact {
                    amount: 100,
                    ..entry("u", "CREDIT", "c1", "e1", 100, 1)
                },
                EntryFact {
                    amount: 60,
                    ..entry("u", "DEBIT", "o1", "e2", 40, 2)
                },
                EntryFact {
                    amount: 10,
                    ..entry("u", "DEBIT", "o3", "e3", 30, 3)
                },
            ],
            ..Snapshot::default()
        };
        let history = vec![
            op(
                OpKind::Credit,
                "c1",
                100,
                vec![attempt(0, 10, ok("e1", 100))],
            ),
            op(
                OpKind::Deduct,
                "o1",
                60,
                vec![
                    attempt(20, 40, Outcome::Unknown),
                    attempt(45, 50, ok("e2", 40)),
                ],
            ),
            op(
                OpKind::Deduct,
                "o2",
                50,
                vec![attempt(
                    60,
                    70,
                    Outcome::Refused {
                        code: "insufficient-funds".to_owned(),
                    },
                )],
            ),
            op(
                OpKind::Deduct,
                "o3",
                10,
                vec![attempt(80, 90, Outcome::Unknown)],
            ),
            op(
                OpKind::Deduct,
                "o4",
                10,
                vec![attempt(80, 90, Outcome::Unknown)],
            ),
        ];
        (snapshot, history)
    }

    #[test]
    fn a_history_the_ledger_explains_passes_and_is_counted() {
        let (snapshot, history) = good();
        let mut violations = Vec::new();
        let counts = check(&snapshot, &history, &mut violations);
        assert!(violations.is_empty(), "{violations:?}");
        let deducts = &counts["deduct"];
        assert_eq!(
            (
                deducts.operations,
                deducts.ok,
                deducts.refused,
                deducts.unknown
            ),
            (4, 1, 1, 2)
        );
        assert_eq!(
            (deducts.unknown_applied, deducts.unknown_not_applied),
            (1, 1)
        );
        assert_eq!(deducts.settled_by_retry, 1);
        assert_eq!(deducts.unknown_attempts, 3);
    }

    #[test]
    fn each_promise_broken_is_named() {
        // Answered ok, no effect; refused, yet applied; two effects of one unknown deduct.
        let (mut snapshot, history) = good();
        snapshot.entries.retain(|entry| entry.entry_no != "e1");
        snapshot.entries.push(entry("u", "DEBIT", "o2", "e4", 0, 5));
        snapshot
            .entries
            .push(entry("u", "DEBIT", "o4", "e5", 20, 6));
        snapshot
            .entries
            .push(entry("u", "DEBIT", "o4", "e6", 10, 7));
        let mut violations = Vec::new();
        check(&snapshot, &history, &mut violations);
        let found = names(&violations);
        for invariant in [
            "an operation answered ok took effect once",
            "an operation refused took no effect",
            "an operation without an answer took effect at most once",
        ] {
            assert!(found.contains(&invariant), "{invariant}: {violations:#?}");
        }
    }

    #[test]
    fn an_answer_that_disagrees_with_the_ledger_is_named() {
        let (snapshot, mut history) = good();
        history[1].attempts[1].outcome = ok("e2", 41);
        let mut violations = Vec::new();
        check(&snapshot, &history, &mut violations);
        assert_eq!(names(&violations), ["every answer agrees with the ledger"]);
    }

    #[test]
    fn a_ledger_order_against_real_time_is_named() {
        // The credit was answered at 10 ms, the deduct invoked at 20 ms; a ledger that puts
        // the deduct first cannot be what the clients saw.
        let (mut snapshot, history) = good();
        for entry in &mut snapshot.entries {
            entry.wallet_version = match entry.entry_no.as_str() {
                "e1" => 2,
                "e2" => 1,
                _ => entry.wallet_version,
            };
        }
        let mut violations = Vec::new();
        check(&snapshot, &history, &mut violations);
        assert!(
            names(&violations).contains(&"each wallet's ledger respects real time"),
            "{violations:#?}"
        );
    }

    #[test]
    fn a_refusal_for_funds_the_wallet_had_is_named() {
        // The refused deduct asked 30 while 40 was left the whole time.
        let (snapshot, mut history) = good();
        history[2].amount = 30;
        let mut violations = Vec::new();
        check(&snapshot, &history, &mut violations);
        assert_eq!(names(&violations), ["every answer agrees with the ledger"]);
        // Concurrent with the deduct that took 60, the refusal of 50 could have seen 40 or
        // 100: not a violation when the windows overlap and one state does not cover it.
        let (snapshot, mut history) = good();
        history[2].attempts[0].invoked_ms = 30;
        let mut violations = Vec::new();
        check(&snapshot, &history, &mut violations);
        assert!(violations.is_empty(), "{violations:?}");
    }
}

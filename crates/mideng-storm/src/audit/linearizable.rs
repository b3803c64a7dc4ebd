//! Each wallet's history checked for linearizability against a wallet's sequential
//! specification, from the clients' answers alone (the Jepsen-shaped history of
//! [`super::jepsen`]; no database read). Pure.
//!
//! [`super::history`] holds the clients' answers to the one order the database chose (its
//! ledger). This check asks the question a checker outside the repository would: is there
//! *any* order of the operations, each at one point between its invocation and its answer,
//! in which a wallet that starts at 0 answers exactly what the clients were answered? The
//! wallet's specification:
//!
//! - a credit adds its amount and answers the balance; a second credit of the same reference
//!   (under another key) adds nothing and answers 409 naming the first;
//! - a deduct subtracts its amount and answers the balance after it, or is refused
//!   (`insufficient-funds`) when the balance does not cover it; a second deduct of the same
//!   order adds nothing and answers 409 naming the first;
//! - a reverse puts a deduction's amount back, once;
//! - a read answers the balance.
//!
//! An operation is every attempt under one request key (a deduct's or a credit's
//! `Idempotency-Key`, a reverse's deduction): the key's attempts are one effect, taken at one
//! point after the first attempt was sent and, once an attempt was answered, before that
//! answer; every answer of the key must be the same (a replay repeats, it does not apply
//! again). A key that never got a definite answer (`info` only) took its effect at most once,
//! at any point after its first attempt, or never. Refusals other than `insufficient-funds`
//! took no effect and say nothing of the balance: they are left out (the ledger check holds
//! them to no effect).
//!
//! The search is Wing and Gong's, with Lowe's memoisation (as Porcupine and Knossos run it):
//! the operations' invocations and answers in time order; linearize an operation whose
//! invocation comes before the first answer still pending if the specification allows its
//! answer, backtrack when no such operation is left before an answer; a configuration (the
//! operations linearized, the wallet's state) seen before is not explored again. A
//! configuration is remembered as 128-bit Zobrist fingerprints of the two sets beside the
//! balance — 40 bytes whatever the wallet's size — so that the memory is bounded by the step
//! budget; two configurations share a fingerprint with a probability near 2^-88 over a
//! search of a million steps, which would prune one branch, not pass a history. A search
//! that takes more than its budget of steps ([`SEARCH_STEPS_MAX`]) stops, and the wallet is
//! reported as **unchecked** (counted and named in the report, never a pass).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::jepsen::{Call, ClientOp, Completion};
use super::{Violation, violation};

/// The invariant checked here.
pub(super) const INVARIANTS: [&str; 1] = ["each wallet's history is linearizable"];

/// Steps (an operation linearized, passed over or taken back) one wallet's search may take
/// before the wallet is reported unchecked. A CI storm's hottest wallet takes a few thousand;
/// a million is under a second and at most 40 MB of remembered configurations.
pub const SEARCH_STEPS_MAX: u64 = 1_000_000;

/// What the check did, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LinearizableFigures {
    /// Wallets in the history.
    pub wallets: usize,
    /// Of which the search finished (linearizable or not).
    pub checked: usize,
    /// Those whose search ran past its budget: neither passed nor failed.
    pub unchecked: Vec<String>,
    /// Operations over every wallet (request keys and reads).
    pub operations: usize,
    /// Attempts refused for insufficient funds.
    pub refused_for_funds: usize,
    /// Reads answered.
    pub reads: usize,
    /// The wallet with the most operations, and what its search took.
    pub hottest: Option<WalletSearch>,
}

/// One wallet's search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WalletSearch {
    /// `tenant/user`.
    pub key: String,
    /// Its operations.
    pub operations: usize,
    /// The steps its search took.
    pub steps: u64,
}

/// Checks every wallet in `ops` with a budget of `steps_max` steps each.
pub(super) fn check(
    ops: &[ClientOp],
    steps_max: u64,
    violations: &mut Vec<Violation>,
) -> LinearizableFigures {
    let mut wallets: BTreeMap<&str, Vec<&ClientOp>> = BTreeMap::new();
    let mut figures = LinearizableFigures::default();
    for op in ops {
        if matches!(
            op.call,
            Call::Credit { .. } | Call::Deduct { .. } | Call::Reverse { .. } | Call::Read
        ) {
            wallets.entry(op.key.as_str()).or_default().push(op);
        }
        match (&op.call, &op.completion) {
            (Call::Deduct { .. }, Completion::Fail { error }) if error == INSUFFICIENT_FUNDS => {
                figures.refused_for_funds += 1;
            }
            (Call::Read, Completion::Ok(_)) => figures.reads += 1,
            _ => {}
        }
    }
    figures.wallets = wallets.len();
    for (key, attempts) in wallets {
        let model = Model::of(key, &attempts, violations);
        figures.operations += model.ops.len();
        let search = search(&model.ops, steps_max);
        let steps = match search {
            Search::Linearizable { steps } => {
                figures.checked += 1;
                steps
            }
            Search::Not { steps, deepest } => {
                figures.checked += 1;
                violations.push(violation(
                    "each wallet's history is linearizable",
                    model.explain(key, deepest),
                ));
                steps
            }
            Search::Unchecked { steps } => {
                figures.unchecked.push(key.to_owned());
                steps
            }
        };
        if figures
            .hottest
            .as_ref()
            .is_none_or(|hottest| hottest.operations < model.ops.len())
        {
            figures.hottest = Some(WalletSearch {
                key: key.to_owned(),
                operations: model.ops.len(),
                steps,
            });
        }
    }
    figures
}

const INSUFFICIENT_FUNDS: &str = "insufficient-funds";

/// What an operation does to a wallet; the numbers are indices of business keys, whose
/// effects the wallet's state remembers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Credit {
        amount: i64,
        reference: usize,
    },
    Deduct {
        amount: i64,
        order: usize,
    },
    /// `deduction`: the order of the deduction put back, when the history names it.
    Reverse {
        amount: i64,
        deduction: Option<usize>,
        reversal: usize,
    },
    Read,
}

/// What the operation's answers say it came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Took effect, leaving this balance.
    Applied(i64),
    /// Answered 409 naming the business key's earlier effect.
    Existing,
    /// Refused for insufficient funds.
    Refused,
    /// Read this balance.
    Read(i64),
    /// Never answered definitely.
    Unknown,
}

#[derive(Clone, Debug)]
struct ModelOp {
    step: Move,
    seen: Seen,
    invoked_ns: u64,
    /// The first definite answer; `None` for an operation never answered definitely.
    deadline_ns: Option<u64>,
    /// As a violation names it.
    name: String,
}

/// One wallet's history as operations of the specification.
struct Model {
    ops: Vec<ModelOp>,
}

impl Model {
    fn of(wallet: &str, attempts: &[&ClientOp], violations: &mut Vec<Violation>) -> Self {
        // The deductions the answers name: their order and amount, for the reverses.
        let mut deductions: HashMap<&str, (&str, i64)> = HashMap::new();
        for attempt in attempts {
            if let (Call::Deduct { order_id, .. }, Completion::Ok(answer)) =
                (&attempt.call, &attempt.completion)
            {
                let named = answer.existing.as_deref().unwrap_or(answer);
                if let (Some(number), Some(amount)) = (&named.deduction_no, named.amount) {
                    deductions.insert(number.as_str(), (order_id.as_str(), amount));
                }
            }
        }
        // Operations: a key's attempts together; each read on its own.
        let mut groups: BTreeMap<(&str, &str, usize), Vec<&ClientOp>> = BTreeMap::new();
        for (index, attempt) in attempts.iter().enumerate() {
            let group = match &attempt.call {
                Call::Credit {
                    idempotency_key, ..
                } => ("credit", idempotency_key.as_str(), 0),
                Call::Deduct {
                    idempotency_key, ..
                } => ("deduct", idempotency_key.as_str(), 0),
                Call::Reverse { deduction_no } => ("reverse", deduction_no.as_str(), 0),
                _ => ("read", "", index),
            };
            groups.entry(group).or_default().push(attempt);
        }
        let mut business = BusinessKeys::default();
        let mut index_of = |kind: &'static str, id: &str| business.index(kind, id);
        // Every answer naming a business key's effect names the same one.
        let mut effects: HashMap<(&'static str, String), Named> = HashMap::new();
        let mut ops = Vec::new();
        for ((f, id, _), group) in groups {
            let invoked_ns = group.iter().map(|op| op.invoked_ns).min().unwrap_or(0);
            let mut definite: Vec<&&ClientOp> = group
                .iter()
                .filter(|op| !matches!(op.completion, Completion::Info { .. }))
                .collect();
            definite.sort_by_key(|op| op.completed_ns);
            let first = definite.first().map(|op| (&op.completion, op.completed_ns));
            if let Some((answer, _)) = first
                && let Some(other) = definite.iter().find(|op| op.completion != *answer)
            {
                violations.push(violation(
                    "each wallet's history is linearizable",
                    format!(
                        "{wallet}: {f} {id} answered {} and then {} (process {}): a key's attempts are one effect, with one answer",
                        render(answer),
                        render(&other.completion),
                        other.process
                    ),
                ));
            }
            let Some(exemplar) = group.first() else {
                continue;
            };
            let step = match &exemplar.call {
                Call::Credit {
                    amount, reference, ..
                } => Move::Credit {
                    amount: *amount,
                    reference: index_of("reference", reference),
                },
                Call::Deduct {
                    amount, order_id, ..
                } => Move::Deduct {
                    amount: *amount,
                    order: index_of("order", order_id),
                },
                Call::Reverse { deduction_no } => {
                    let named = deductions.get(deduction_no.as_str()).copied();
                    let answered = match first {
                        Some((Completion::Ok(answer), _)) => answer.amount,
                        _ => None,
                    };
                    let Some(amount) = answered.or(named.map(|(_, amount)| amount)) else {
                        // Neither the deduct nor the reverse told its amount: nothing to hold
                        // the balance to.
                        continue;
                    };
                    Move::Reverse {
                        amount,
                        deduction: named.map(|(order, _)| index_of("order", order)),
                        reversal: index_of("reversal", deduction_no),
                    }
                }
                _ => Move::Read,
            };
            let seen = match first {
                None => Seen::Unknown,
                Some((Completion::Ok(answer), _)) => match (step, &answer.existing) {
                    (Move::Credit { .. } | Move::Deduct { .. }, Some(_)) => Seen::Existing,
                    (Move::Credit { .. }, None) => {
                        answer.balance.map_or(Seen::Unknown, Seen::Applied)
                    }
                    (Move::Deduct { .. } | Move::Reverse { .. }, _) => {
                        answer.balance_after.map_or(Seen::Unknown, Seen::Applied)
                    }
                    (Move::Read, _) => answer.balance.map_or(Seen::Unknown, Seen::Read),
                },
                Some((Completion::Fail { error }, _))
                    if error == INSUFFICIENT_FUNDS && matches!(step, Move::Deduct { .. }) =>
                {
                    Seen::Refused
                }
                // Another refusal: no effect, nothing observed.
                Some(_) => continue,
            };
            if step == Move::Read && seen == Seen::Unknown {
                continue;
            }
            if let (Some((Completion::Ok(answer), _)), Some(kind)) = (first, effect_kind(step)) {
                let named = answer.existing.as_deref().unwrap_or(answer);
                let business_key = match &exemplar.call {
                    Call::Credit { reference, .. } => reference.clone(),
                    Call::Deduct { order_id, .. } => order_id.clone(),
                    _ => id.to_owned(),
                };
                let number = named
                    .deduction_no
                    .clone()
                    .or_else(|| named.entry_no.clone());
                let balance = named.balance_after.or(named.balance);
                let said = Named {
                    number,
                    balance,
                    by: format!("{f} {id}"),
                };
                match effects.get(&(kind, business_key.clone())) {
                    Some(earlier)
                        if (&earlier.number, earlier.balance) != (&said.number, said.balance) =>
                    {
                        violations.push(violation(
                            "each wallet's history is linearizable",
                            format!(
                                "{wallet}: {kind} {business_key}: {} was answered {:?} (balance {:?}), {} {:?} (balance {:?}): one effect, one answer",
                                earlier.by,
                                earlier.number,
                                earlier.balance,
                                said.by,
                                said.number,
                                said.balance
                            ),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        effects.insert((kind, business_key), said);
                    }
                }
            }
            let deadline_ns = first.map(|(_, completed_ns)| completed_ns);
            ops.push(ModelOp {
                step,
                seen,
                invoked_ns,
                deadline_ns,
                name: format!(
                    "{f} {id} ({}, invoked at {} ms, {})",
                    describe(step),
                    invoked_ns / 1_000_000,
                    match (seen, deadline_ns) {
                        (Seen::Unknown, _) | (_, None) => "never answered".to_owned(),
                        (seen, Some(ns)) => format!("{seen:?} at {} ms", ns / 1_000_000),
                    }
                ),
            });
        }
        Self { ops }
    }

    fn explain(&self, wallet: &str, deepest: Deepest) -> String {
        let blocked = self
            .ops
            .get(deepest.blocked)
            .map_or("?", |op| op.name.as_str());
        format!(
            "{wallet}: no order of its {} operations explains every answer; at best {} of them are explained, and then not {blocked}",
            self.ops.len(),
            deepest.linearized
        )
    }
}

/// A business key's effect as the first answer naming it told it: its entry, the balance
/// after it, and which operation said so.
struct Named {
    number: Option<String>,
    balance: Option<i64>,
    by: String,
}

/// The business key's namespace whose effect an answer names.
fn effect_kind(step: Move) -> Option<&'static str> {
    match step {
        Move::Credit { .. } => Some("reference"),
        Move::Deduct { .. } => Some("order"),
        Move::Reverse { .. } => Some("reversal"),
        Move::Read => None,
    }
}

/// The business keys of one wallet, numbered for the state's bits.
#[derive(Default)]
struct BusinessKeys {
    numbers: HashMap<(&'static str, String), usize>,
}

impl BusinessKeys {
    fn index(&mut self, kind: &'static str, id: &str) -> usize {
        let next = self.numbers.len();
        *self.numbers.entry((kind, id.to_owned())).or_insert(next)
    }
}

fn describe(step: Move) -> String {
    match step {
        Move::Credit { amount, .. } => format!("+{amount}"),
        Move::Deduct { amount, .. } => format!("-{amount}"),
        Move::Reverse { amount, .. } => format!("+{amount} back"),
        Move::Read => "read".to_owned(),
    }
}

fn render(completion: &Completion) -> String {
    match completion {
        Completion::Ok(answer) => serde_json::to_string(answer).unwrap_or_default(),
        Completion::Fail { error } => format!("fail {error}"),
        Completion::Info { error } => format!("info {error}"),
    }
}

/// The deepest the search got: how many operations it had linearized when the answer of
/// `blocked` could not be explained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Deepest {
    linearized: usize,
    blocked: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Search {
    Linearizable { steps: u64 },
    Not { steps: u64, deepest: Deepest },
    Unchecked { steps: u64 },
}

/// The wallet's state: its balance and the business keys that took effect (as bits, with
/// their fingerprint).
struct State {
    balance: i64,
    applied: Vec<u64>,
    fingerprint: u128,
}

impl State {
    fn is_applied(&self, key: usize) -> bool {
        self.applied
            .get(key / 64)
            .is_some_and(|word| word & (1 << (key % 64)) != 0)
    }

    fn flip(&mut self, key: usize) {
        if let Some(word) = self.applied.get_mut(key / 64) {
            *word ^= 1 << (key % 64);
        }
        self.fingerprint ^= zobrist(APPLIED_SALT, key);
    }
}

/// What a linearized operation changed, to take it back.
#[derive(Clone, Copy, Debug)]
struct Undo {
    balance: i64,
    flipped: Option<usize>,
}

/// Applies `op` to `state` if the specification allows its answer there; what to undo.
fn apply(state: &mut State, op: &ModelOp) -> Option<Undo> {
    let before = state.balance;
    let same = Undo {
        balance: before,
        flipped: None,
    };
    match (op.step, op.seen) {
        (Move::Credit { amount, reference }, seen) => {
            if state.is_applied(reference) {
                return matches!(seen, Seen::Existing | Seen::Unknown).then_some(same);
            }
            let after = before.checked_add(amount)?;
            match seen {
                Seen::Unknown => Some(take(state, reference, after)),
                Seen::Applied(answered) if answered == after => Some(take(state, reference, after)),
                _ => None,
            }
        }
        (Move::Deduct { amount, order }, seen) => {
            if state.is_applied(order) {
                return matches!(seen, Seen::Existing | Seen::Unknown).then_some(same);
            }
            let covered = before >= amount;
            match seen {
                Seen::Refused | Seen::Unknown if !covered => Some(same),
                Seen::Unknown => Some(take(state, order, before - amount)),
                Seen::Applied(answered) if covered && answered == before - amount => {
                    Some(take(state, order, answered))
                }
                _ => None,
            }
        }
        (
            Move::Reverse {
                amount,
                deduction,
                reversal,
            },
            seen,
        ) => {
            let possible = deduction.is_none_or(|order| state.is_applied(order))
                && !state.is_applied(reversal);
            let after = before.checked_add(amount)?;
            match seen {
                Seen::Unknown if !possible => Some(same),
                Seen::Unknown => Some(take(state, reversal, after)),
                Seen::Applied(answered) if possible && answered == after => {
                    Some(take(state, reversal, after))
                }
                _ => None,
            }
        }
        (Move::Read, Seen::Read(balance)) => (balance == before).then_some(same),
        (Move::Read, _) => Some(same),
    }
}

/// The business key `key` takes effect, leaving `balance`.
fn take(state: &mut State, key: usize, balance: i64) -> Undo {
    let undo = Undo {
        balance: state.balance,
        flipped: Some(key),
    };
    state.flip(key);
    state.balance = balance;
    undo
}

/// Salts of the two Zobrist tables.
const LINEARIZED_SALT: u64 = 0x6c69_6e65_6172_697a;
const APPLIED_SALT: u64 = 0x6170_706c_6965_6421;

/// A fixed pseudo-random 128-bit value per (table, index): SplitMix64 twice (deterministic,
/// so that a failing search repeats).
fn zobrist(salt: u64, index: usize) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let seed = salt ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let high = mix(seed.wrapping_add(0x9e37_79b9_7f4a_7c15));
    let low = mix(high ^ seed.rotate_left(29));
    (u128::from(high) << 64) | u128::from(low)
}

/// The invocations and answers in time order, as a list that linearized operations are taken
/// out of and put back into (dancing links: put back in the reverse order they were taken).
struct Events {
    /// (operation, whether this is its answer).
    events: Vec<(usize, bool)>,
    /// Per operation, its invocation's and its answer's place in `events`.
    places: Vec<(usize, Option<usize>)>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

const END: usize = usize::MAX;

impl Events {
    fn of(ops: &[ModelOp]) -> Self {
        let mut timed: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (index, op) in ops.iter().enumerate() {
            timed.push((op.invoked_ns, false, index));
            if let Some(deadline) = op.deadline_ns {
                // An answer is never before its own invocation; an invocation and an answer
                // at the same nanosecond are taken as concurrent (invocation first).
                timed.push((deadline.max(op.invoked_ns), true, index));
            }
        }
        timed.sort_unstable();
        let events: Vec<(usize, bool)> = timed
            .into_iter()
            .map(|(_, answer, op)| (op, answer))
            .collect();
        let mut places = vec![(0, None); ops.len()];
        for (place, (op, answer)) in events.iter().enumerate() {
            if let Some(slot) = places.get_mut(*op) {
                if *answer {
                    slot.1 = Some(place);
                } else {
                    slot.0 = place;
                }
            }
        }
        // Node `events.len()` is the head.
        let head = events.len();
        let mut next: Vec<usize> = (1..=events.len()).collect();
        if let Some(last) = next.last_mut() {
            *last = END;
        }
        next.push(if events.is_empty() { END } else { 0 });
        let mut prev: Vec<usize> = (0..events.len())
            .map(|place| if place == 0 { head } else { place - 1 })
            .collect();
        prev.push(END);
        Self {
            events,
            places,
            next,
            prev,
        }
    }

    fn first(&self) -> usize {
        self.next[self.events.len()]
    }

    fn unlink(&mut self, node: usize) {
        let (before, after) = (self.prev[node], self.next[node]);
        self.next[before] = after;
        if after != END {
            self.prev[after] = before;
        }
    }

    fn relink(&mut self, node: usize) {
        let (before, after) = (self.prev[node], self.next[node]);
        self.next[before] = node;
        if after != END {
            self.prev[after] = node;
        }
    }

    fn lift(&mut self, op: usize) {
        let (call, answer) = self.places[op];
        self.unlink(call);
        if let Some(answer) = answer {
            self.unlink(answer);
        }
    }

    fn unlift(&mut self, op: usize) {
        let (call, answer) = self.places[op];
        if let Some(answer) = answer {
            self.relink(answer);
        }
        self.relink(call);
    }
}

/// Wing and Gong's search with Lowe's memoisation, at most `steps_max` steps.
fn search(ops: &[ModelOp], steps_max: u64) -> Search {
    let mut events = Events::of(ops);
    let business_keys = ops
        .iter()
        .map(|op| match op.step {
            Move::Credit { reference, .. } => reference,
            Move::Deduct { order, .. } => order,
            Move::Reverse {
                deduction,
                reversal,
                ..
            } => reversal.max(deduction.unwrap_or(0)),
            Move::Read => 0,
        })
        .max()
        .map_or(0, |max| max + 1);
    let mut state = State {
        balance: 0,
        applied: vec![0; business_keys.div_ceil(64)],
        fingerprint: 0,
    };
    let mut linearized: u128 = 0;
    let mut seen: HashSet<(u128, u128, i64)> = HashSet::new();
    let mut stack: Vec<(usize, Undo)> = Vec::new();
    let mut remaining = ops.iter().filter(|op| op.deadline_ns.is_some()).count();
    let mut deepest = Deepest::default();
    let mut steps: u64 = 0;
    let mut node = events.first();
    loop {
        if remaining == 0 {
            return Search::Linearizable { steps };
        }
        if steps >= steps_max {
            return Search::Unchecked { steps };
        }
        steps += 1;
        let event = events.events.get(node).copied();
        match event {
            Some((index, false)) => {
                let op = &ops[index];
                if let Some(undo) = apply(&mut state, op) {
                    let key = (
                        linearized ^ zobrist(LINEARIZED_SALT, index),
                        state.fingerprint,
                        state.balance,
                    );
                    if seen.insert(key) {
                        linearized = key.0;
                        stack.push((node, undo));
                        events.lift(index);
                        if op.deadline_ns.is_some() {
                            remaining -= 1;
                        }
                        node = events.first();
                        continue;
                    }
                    take_back(&mut state, undo);
                }
                node = events.next[node];
            }
            // An answer no linearized operation explains yet (or, with answers pending, the
            // end of the list, which cannot be reached): take the last one back.
            _ => {
                if let Some((blocked, true)) = event
                    && stack.len() >= deepest.linearized
                {
                    deepest = Deepest {
                        linearized: stack.len(),
                        blocked,
                    };
                }
                let Some((call, undo)) = stack.pop() else {
                    return Search::Not { steps, deepest };
                };
                let index = events.events[call].0;
                events.unlift(index);
                take_back(&mut state, undo);
                linearized ^= zobrist(LINEARIZED_SALT, index);
                if ops[index].deadline_ns.is_some() {
                    remaining += 1;
                }
                node = events.next[call];
            }
        }
    }
}

fn take_back(state: &mut State, undo: Undo) {
    state.balance = undo.balance;
    if let Some(key) = undo.flipped {
        state.flip(key);
    }
}

#[cfg(test)]
mod tests;

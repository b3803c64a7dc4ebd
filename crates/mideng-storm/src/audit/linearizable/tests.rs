//! The linearizability check on small hand-written histories.
use super::*;
use crate::audit::jepsen::Answer;

const MS: u64 = 1_000_000;

/// A history of one wallet, written as the clients saw it.
#[derive(Default)]
struct History {
    ops: Vec<ClientOp>,
}

impl History {
    fn push(&mut self, call: Call, from_ms: u64, to_ms: u64, completion: Completion) {
        let process = self.ops.len() as u64;
        self.ops.push(ClientOp {
            process,
            key: "t/u".to_owned(),
            invoked_ns: from_ms * MS,
            completed_ns: to_ms * MS,
            call,
            completion,
        });
    }

    fn credit(&mut self, key: &str, amount: i64, span: (u64, u64), completion: Completion) {
        self.push(
            Call::Credit {
                amount,
                reference: key.to_owned(),
                idempotency_key: key.to_owned(),
            },
            span.0,
            span.1,
            completion,
        );
    }

    fn deduct(&mut self, key: &str, amount: i64, span: (u64, u64), completion: Completion) {
        self.push(
            Call::Deduct {
                amount,
                order_id: format!("order-{key}"),
                idempotency_key: key.to_owned(),
            },
            span.0,
            span.1,
            completion,
        );
    }

    fn read(&mut self, span: (u64, u64), balance: i64) {
        self.push(
            Call::Read,
            span.0,
            span.1,
            Completion::Ok(Answer {
                balance: Some(balance),
                ..Answer::default()
            }),
        );
    }

    fn check(&self) -> (Vec<Violation>, LinearizableFigures) {
        let mut violations = Vec::new();
        let figures = check(&self.ops, SEARCH_STEPS_MAX, &mut violations);
        (violations, figures)
    }
}

fn credited(balance: i64) -> Completion {
    Completion::Ok(Answer {
        balance: Some(balance),
        ..Answer::default()
    })
}

fn deducted(number: &str, amount: i64, balance_after: i64) -> Completion {
    Completion::Ok(Answer {
        deduction_no: Some(number.to_owned()),
        amount: Some(amount),
        balance_after: Some(balance_after),
        ..Answer::default()
    })
}

fn refused() -> Completion {
    Completion::Fail {
        error: INSUFFICIENT_FUNDS.to_owned(),
    }
}

fn no_answer() -> Completion {
    Completion::Info {
        error: "no-answer".to_owned(),
    }
}

fn passes(history: &History) -> LinearizableFigures {
    let (violations, figures) = history.check();
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!((figures.wallets, figures.checked), (1, 1), "{figures:?}");
    figures
}

fn fails(history: &History) -> Vec<Violation> {
    let (violations, figures) = history.check();
    assert!(
        !violations.is_empty()
            && violations
                .iter()
                .all(|found| found.invariant == INVARIANTS[0]),
        "{violations:#?}"
    );
    assert!(figures.unchecked.is_empty(), "{figures:?}");
    violations
}

#[test]
fn concurrent_operations_and_an_unanswered_one_that_some_order_explains_pass() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    // Two deducts at once: their answers say the one invoked second went first.
    history.deduct("d1", 30, (20, 60), deducted("D1", 30, 50));
    history.deduct("d2", 20, (25, 40), deducted("D2", 20, 80));
    // A credit never answered, which the read then shows applied.
    history.credit("c2", 5, (30, 35), no_answer());
    // Refused while a concurrent deduct may have left 50 (its own 60 not covered).
    history.deduct("d3", 60, (45, 55), refused());
    history.read((70, 80), 55);
    // Its retry under the same key, answered from the stored answer.
    history.deduct("d1", 30, (90, 95), deducted("D1", 30, 50));
    // An unanswered deduct that must not have happened before the read, and may never.
    history.deduct("d4", 1_000, (85, 86), no_answer());
    history.read((100, 110), 55);
    let figures = passes(&history);
    assert_eq!(figures.operations, 8);
    assert_eq!(figures.refused_for_funds, 1);
    assert_eq!(figures.reads, 2);
}

#[test]
fn the_chain_whose_sum_is_right_but_whose_steps_are_not_fails() {
    // v1 +100 → 100, v2 −60 → 40, v3 −30 → 40, then the wallet reads 10.
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 60, (20, 30), deducted("D1", 60, 40));
    history.deduct("d2", 30, (40, 50), deducted("D2", 30, 40));
    history.read((60, 70), 10);
    let violations = fails(&history);
    assert!(
        violations[0].detail.contains("deduct d2"),
        "{violations:#?}"
    );
}

#[test]
fn a_read_that_misses_a_write_completed_before_it_fails() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.read((20, 30), 0);
    fails(&history);
    // The same read concurrent with the credit is fine.
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.read((5, 30), 0);
    passes(&history);
}

#[test]
fn a_refusal_for_funds_the_wallet_had_throughout_fails() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 50, (20, 30), refused());
    fails(&history);
    // Concurrent with a deduct that left too little, the refusal is explained.
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 80, (20, 40), deducted("D1", 80, 20));
    history.deduct("d2", 50, (25, 30), refused());
    passes(&history);
}

#[test]
fn a_replayed_key_answered_with_another_balance_fails() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 60, (20, 30), deducted("D1", 60, 40));
    history.deduct("d1", 60, (40, 50), deducted("D1", 60, 30));
    let violations = fails(&history);
    assert!(
        violations[0].detail.contains("one answer"),
        "{violations:#?}"
    );
    // A replay that applied twice: the second deduct's balance shows it.
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 30, (20, 30), deducted("D1", 30, 70));
    history.deduct("d1", 30, (40, 50), no_answer());
    history.read((60, 70), 40);
    fails(&history);
}

#[test]
fn a_second_key_for_the_same_order_names_the_first_and_takes_nothing() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 60, (20, 30), deducted("D1", 60, 40));
    history.push(
        Call::Deduct {
            amount: 60,
            order_id: "order-d1".to_owned(),
            idempotency_key: "d1-again".to_owned(),
        },
        40,
        50,
        Completion::Ok(Answer {
            existing: Some(Box::new(Answer {
                deduction_no: Some("D1".to_owned()),
                amount: Some(60),
                balance_after: Some(40),
                ..Answer::default()
            })),
            ..Answer::default()
        }),
    );
    history.push(
        Call::Reverse {
            deduction_no: "D1".to_owned(),
        },
        60,
        70,
        Completion::Ok(Answer {
            reversal_no: Some("R1".to_owned()),
            deduction_no: Some("D1".to_owned()),
            amount: Some(60),
            balance_after: Some(100),
            ..Answer::default()
        }),
    );
    history.read((80, 90), 100);
    passes(&history);
    // A read of 40 at the end would say the second key debited the order again.
    let mut doubled = History {
        ops: history.ops.clone(),
    };
    if let Some(read) = doubled.ops.last_mut() {
        read.completion = credited(40);
    }
    fails(&doubled);
}

#[test]
fn a_search_past_its_budget_is_unchecked_not_passed() {
    let mut history = History::default();
    history.credit("c1", 100, (0, 10), credited(100));
    history.deduct("d1", 60, (20, 30), deducted("D1", 60, 40));
    let mut violations = Vec::new();
    let figures = check(&history.ops, 1, &mut violations);
    assert!(violations.is_empty());
    assert_eq!(figures.checked, 0);
    assert_eq!(figures.unchecked, ["t/u"]);
}

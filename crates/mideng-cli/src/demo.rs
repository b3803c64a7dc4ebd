//! `mideng demo`: sends concurrent duplicates at each mechanism and prints what it decided.
//!
//! It is the quickest way to see the toolkit work on a given store, and a smoke test of a
//! deployment's database or Redis: every row must show exactly one winner.

// The table is this command's output, not a log line.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use mideng::dedup::{DedupOutcome, DedupTable};
use mideng::key::Name;
use mideng::state::{Machine, StateMachine, Transition};
use mideng::{Decision, Fingerprint, IdempotencyKey, RecordPolicy, Scope, StoredResponse};
use tokio::sync::Barrier;

use crate::store_url::Stores;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Created,
    Paid,
    Canceled,
}

impl StateMachine for Order {
    const KIND: &'static str = "demo.order";
    const TRANSITIONS: &'static [(Self, Self)] = &[
        (Order::Created, Order::Paid),
        (Order::Created, Order::Canceled),
    ];
    fn as_str(self) -> &'static str {
        match self {
            Order::Created => "CREATED",
            Order::Paid => "PAID",
            Order::Canceled => "CANCELED",
        }
    }
    fn parse(text: &str) -> Option<Self> {
        match text {
            "CREATED" => Some(Order::Created),
            "PAID" => Some(Order::Paid),
            "CANCELED" => Some(Order::Canceled),
            _ => None,
        }
    }
}

/// Runs `attempt` `count` times at once (released together by a barrier) and tallies the labels.
async fn storm<F, Fut>(count: usize, attempt: F) -> anyhow::Result<BTreeMap<&'static str, usize>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<&'static str>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(count));
    let mut tasks = Vec::with_capacity(count);
    for index in 0..count {
        let (barrier, work) = (barrier.clone(), attempt(index));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            work.await
        }));
    }
    let mut tally = BTreeMap::new();
    for task in tasks {
        *tally
            .entry(task.await.context("a demo task panicked")??)
            .or_insert(0) += 1;
    }
    Ok(tally)
}

fn show(
    mechanism: &str,
    tally: &BTreeMap<&'static str, usize>,
    winner: &str,
) -> anyhow::Result<()> {
    let outcomes: Vec<String> = tally
        .iter()
        .map(|(label, count)| format!("{label} ×{count}"))
        .collect();
    println!("{mechanism:<34} {}", outcomes.join(", "));
    ensure!(
        tally.get(winner) == Some(&1),
        "{mechanism}: expected exactly one {winner}"
    );
    Ok(())
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        mideng::clock::now_ms()
    )
}

/// Runs every scenario against `stores`.
pub(crate) async fn run(store_name: &str, stores: Stores, duplicates: usize) -> anyhow::Result<()> {
    println!("mideng demo on {store_name}: {duplicates} concurrent duplicates per mechanism\n");
    let scope = Scope::new("demo", "payments.create")?;

    let issued = stores
        .tokens
        .issue_token(&scope, Duration::from_secs(600))
        .await?;
    let tally = storm(duplicates, |_| {
        let (tokens, scope, token) = (stores.tokens.clone(), scope.clone(), issued.token.clone());
        async move { Ok(tokens.consume_token(&scope, &token).await?.label()) }
    })
    .await?;
    show("one-time token (double submit)", &tally, "consumed")?;

    let key = IdempotencyKey::parse(&unique("order-1001-pay"))?;
    let fingerprint = Fingerprint::of_request(
        "POST",
        "/v1/orders/1001/payments",
        br#"{"channel":"alipay"}"#,
    );
    let policy = RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(86_400))?;
    let begin_all = || {
        storm(duplicates, |_| {
            let (records, scope, key) = (stores.records.clone(), scope.clone(), key.clone());
            async move {
                Ok(records
                    .begin(&scope, &key, &fingerprint, &policy)
                    .await?
                    .label())
            }
        })
    };
    let tally = begin_all().await?;
    show("idempotency key (retries, racing)", &tally, "proceed")?;
    let Some(record) = stores.records.find_record(&scope, &key).await? else {
        anyhow::bail!("the winner's record is missing");
    };
    let lease = mideng::Lease {
        scope: scope.clone(),
        key: key.clone(),
        fence: record.fence,
        owner: record.owner,
        lease_until_ms: record.lease_until_ms,
        retention_ms: policy.retention_ms(),
        taken_over: false,
    };
    let answer = StoredResponse {
        status: 201,
        headers: vec![],
        body: br#"{"payment_no":"P1001"}"#.to_vec(),
    };
    stores.records.complete(&lease, &answer).await?;
    let mut tally = begin_all().await?;
    let other = Fingerprint::of_request(
        "POST",
        "/v1/orders/1001/payments",
        br#"{"channel":"wechat"}"#,
    );
    let mismatch = stores.records.begin(&scope, &key, &other, &policy).await?;
    ensure!(
        mismatch == Decision::Mismatch,
        "a different body under the same key must be refused"
    );
    *tally.entry(mismatch.label()).or_insert(0) += 1;
    let outcomes: Vec<String> = tally
        .iter()
        .map(|(label, count)| format!("{label} ×{count}"))
        .collect();
    println!(
        "{:<34} {}",
        "  … after completion (+1 other body)",
        outcomes.join(", ")
    );

    let lock = Name::parse(&unique("lock:payment:1001"))?;
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tally = storm(duplicates, |_| {
        let (locks, lock, fences) = (stores.locks.clone(), lock.clone(), fences.clone());
        async move {
            Ok(
                match locks.try_acquire(&lock, Duration::from_secs(30)).await? {
                    Some(guard) => {
                        fences
                            .lock()
                            .map_err(|_| anyhow::anyhow!("poisoned"))?
                            .push(guard.fence);
                        "acquired"
                    }
                    None => "busy",
                },
            )
        }
    })
    .await?;
    show("distributed lock (two instances)", &tally, "acquired")?;

    let table = Arc::new(DedupTable::new(
        stores.records.clone(),
        Duration::from_secs(86_400),
    ));
    let message = unique("PAY1001");
    let tally = storm(duplicates, |_| {
        let (table, message) = (table.clone(), message.clone());
        async move {
            Ok(
                match table
                    .try_process("demo.grant", &message, Duration::from_secs(30))
                    .await?
                {
                    DedupOutcome::First(_) => "first",
                    DedupOutcome::InProgress { .. } => "in_progress",
                    DedupOutcome::Done => "done",
                },
            )
        }
    })
    .await?;
    show("dedup table (queue redelivery)", &tally, "first")?;

    let machine = Arc::new(Machine::new(stores.states.clone()));
    let order = Name::parse(&unique("order-1001"))?;
    machine.create(&order, Order::Created).await?;
    let tally = storm(duplicates, |index| {
        let (machine, order) = (machine.clone(), order.clone());
        let to = if index % 2 == 0 {
            Order::Paid
        } else {
            Order::Canceled
        };
        async move {
            Ok(
                match machine.transition(&order, Order::Created, to).await? {
                    Transition::Applied => "applied",
                    Transition::AlreadyThere => "already_there",
                    Transition::Refused { .. } => "refused",
                    Transition::Missing => "missing",
                },
            )
        }
    })
    .await?;
    show("state machine CAS (pay vs close)", &tally, "applied")?;

    println!("\nEvery mechanism let exactly one of {duplicates} duplicates through.");
    Ok(())
}

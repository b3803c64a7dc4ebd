//! One conformance suite, every store.
//!
//! Each case below runs against every backend (`memory::…`, `sqlite::…`, `postgres::…`,
//! `mysql::…`, `redis::…`), through the same trait objects, against real servers. Concurrency
//! cases start many tasks on a multi-threaded runtime behind a barrier, so the store sees real
//! parallel requests on one key.
//!
//! Servers: `MIDENG_TEST_POSTGRES_URL`, `MIDENG_TEST_MYSQL_URL`, `MIDENG_TEST_REDIS_URL` (defaults
//! in `support.rs`). A backend that cannot be reached fails its tests, saying how to start it;
//! to run fewer backends, filter by test name (see docs/testing.md), which the test runner reports as
//! skipped — never silently passed.

mod support;
#[path = "conformance/tokens.rs"]
mod tokens;

use std::sync::Arc;
use std::time::Duration;

use mideng::clock::now_ms;
use mideng::dedup::{DedupOutcome, DedupTable};
use mideng::key::Name;
use mideng::state::{Machine, StateMachine, Transition};
use mideng::{
    Decision, Fingerprint, IdempotencyKey, RecordPolicy, RecordState, Scope, StoreError,
    StoredResponse,
};
use support::{Stores, race, unique};
use tokens::*;

const TASKS: usize = 64;

fn scope() -> Scope {
    Scope::new(&unique("tenant"), "payments.create").expect("valid scope")
}

fn key() -> IdempotencyKey {
    IdempotencyKey::parse(&unique("key|{a}%")).expect("valid key")
}

fn print(text: &str) -> Fingerprint {
    Fingerprint::of_request("POST", "/v1/payments", text.as_bytes())
}

fn policy(lease_ms: u64) -> RecordPolicy {
    RecordPolicy::new(Duration::from_millis(lease_ms), Duration::from_secs(3600))
        .expect("valid policy")
}

fn response(tag: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("location".to_owned(), format!("/v1/payments/{tag}")),
        ],
        // Not valid UTF-8 on purpose: bodies are bytes and must come back byte for byte.
        body: [
            format!("{{\"payment_no\":\"{tag}\"}}").as_bytes(),
            &[0xff, 0x00, 0xfe],
        ]
        .concat(),
    }
}

fn proceed(decision: Decision) -> mideng::Lease {
    match decision {
        Decision::Proceed(lease) => lease,
        other => panic!("expected Proceed, got {other:?}"),
    }
}

pub(crate) async fn exactly_one_proceed_among_concurrent_begins(stores: Stores) {
    let (scope, key, fingerprint) = (scope(), key(), print(r#"{"amount":100}"#));
    let begin_all = || {
        race(TASKS, |_| {
            let (records, scope, key) = (stores.records.clone(), scope.clone(), key.clone());
            async move {
                records
                    .begin(&scope, &key, &fingerprint, &policy(30_000))
                    .await
            }
        })
    };
    let mut leases = Vec::new();
    let mut in_flight = 0;
    for decision in begin_all().await {
        match decision.expect("begin succeeds") {
            Decision::Proceed(lease) => leases.push(lease),
            Decision::InFlight { retry_after } => {
                assert!(retry_after <= Duration::from_secs(30));
                in_flight += 1;
            }
            other => panic!("unexpected decision {other:?}"),
        }
    }
    assert_eq!(
        leases.len(),
        1,
        "exactly one of {TASKS} concurrent begins proceeds"
    );
    assert_eq!(in_flight, TASKS - 1);
    assert_eq!(leases[0].fence, 1);

    stores
        .records
        .complete(&leases[0], &response("p1"))
        .await
        .expect("owner completes");
    for decision in begin_all().await {
        let decision = decision.expect("begin succeeds");
        assert_eq!(
            decision,
            Decision::Replay(response("p1")),
            "every later arrival replays"
        );
    }
}

pub(crate) async fn replay_returns_the_stored_response_and_scopes_do_not_leak(stores: Stores) {
    let (scope, key, fingerprint) = (scope(), key(), print(r#"{"amount":1}"#));
    let lease = proceed(
        stores
            .records
            .begin(&scope, &key, &fingerprint, &policy(30_000))
            .await
            .expect("begin"),
    );
    stores
        .records
        .complete(&lease, &response("p2"))
        .await
        .expect("complete");

    let again = stores
        .records
        .begin(&scope, &key, &fingerprint, &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(again, Decision::Replay(response("p2")));

    let record = stores
        .records
        .find_record(&scope, &key)
        .await
        .expect("find")
        .expect("record exists");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.fingerprint, fingerprint);
    assert_eq!(record.response, Some(response("p2")));

    // The same key under another tenant, or another operation, is a different record.
    let other_tenant = Scope::new(&unique("tenant"), scope.operation()).expect("scope");
    let other_operation = Scope::new(scope.tenant(), "wallet.deduct").expect("scope");
    for other in [other_tenant, other_operation] {
        let decision = stores
            .records
            .begin(&other, &key, &fingerprint, &policy(30_000))
            .await
            .expect("begin");
        assert!(
            matches!(decision, Decision::Proceed(_)),
            "no replay across scopes: {decision:?}"
        );
    }
}

pub(crate) async fn a_different_fingerprint_is_a_mismatch(stores: Stores) {
    let (scope, key) = (scope(), key());
    let lease = proceed(
        stores
            .records
            .begin(&scope, &key, &print("a"), &policy(30_000))
            .await
            .expect("begin"),
    );
    let running = stores
        .records
        .begin(&scope, &key, &print("b"), &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(
        running,
        Decision::Mismatch,
        "mismatch while the first request runs"
    );
    stores
        .records
        .complete(&lease, &response("p3"))
        .await
        .expect("complete");
    let done = stores
        .records
        .begin(&scope, &key, &print("b"), &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(done, Decision::Mismatch, "mismatch after it completed");
    let same = stores
        .records
        .begin(&scope, &key, &print("a"), &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(same, Decision::Replay(response("p3")));
}

pub(crate) async fn an_expired_lease_is_taken_over_and_the_stale_owner_is_fenced_off(
    stores: Stores,
) {
    let (scope, key, fingerprint) = (scope(), key(), print("take-over"));
    let first = proceed(
        stores
            .records
            .begin(&scope, &key, &fingerprint, &policy(300))
            .await
            .expect("begin"),
    );
    assert!(!first.taken_over);
    match stores
        .records
        .begin(&scope, &key, &fingerprint, &policy(300))
        .await
        .expect("begin")
    {
        Decision::InFlight { retry_after } => assert!(retry_after <= Duration::from_millis(300)),
        other => panic!("expected InFlight while the lease lives, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(450)).await;
    let second = proceed(
        stores
            .records
            .begin(&scope, &key, &fingerprint, &policy(30_000))
            .await
            .expect("begin"),
    );
    assert!(second.taken_over);
    assert!(second.fence > first.fence, "fence grows on take-over");

    let stale_complete = stores.records.complete(&first, &response("stale")).await;
    assert!(
        matches!(stale_complete, Err(StoreError::StaleLease)),
        "{stale_complete:?}"
    );
    let stale_abandon = stores.records.abandon(&first).await;
    assert!(
        matches!(stale_abandon, Err(StoreError::StaleLease)),
        "{stale_abandon:?}"
    );

    let record = stores
        .records
        .find_record(&scope, &key)
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(
        record.state,
        RecordState::InProgress,
        "the stale owner wrote nothing"
    );
    assert_eq!(record.fence, second.fence);

    stores
        .records
        .complete(&second, &response("fresh"))
        .await
        .expect("current owner completes");
    let replay = stores
        .records
        .begin(&scope, &key, &fingerprint, &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(replay, Decision::Replay(response("fresh")));
}

pub(crate) async fn abandon_frees_the_key_for_any_retry(stores: Stores) {
    let (scope, key) = (scope(), key());
    let first = proceed(
        stores
            .records
            .begin(&scope, &key, &print("first"), &policy(30_000))
            .await
            .expect("begin"),
    );
    stores
        .records
        .abandon(&first)
        .await
        .expect("owner abandons");
    let record = stores
        .records
        .find_record(&scope, &key)
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(record.state, RecordState::Abandoned);

    // A freed key is free: even a different request may use it now.
    let second = proceed(
        stores
            .records
            .begin(&scope, &key, &print("second"), &policy(30_000))
            .await
            .expect("begin"),
    );
    assert!(second.taken_over && second.fence > first.fence);
    assert!(matches!(
        stores.records.complete(&first, &response("old")).await,
        Err(StoreError::StaleLease)
    ));
    assert!(matches!(
        stores.records.abandon(&first).await,
        Err(StoreError::StaleLease)
    ));
    stores
        .records
        .complete(&second, &response("new"))
        .await
        .expect("complete");
    let replay = stores
        .records
        .begin(&scope, &key, &print("second"), &policy(30_000))
        .await
        .expect("begin");
    assert_eq!(replay, Decision::Replay(response("new")));
}

pub(crate) async fn purge_deletes_only_expired_records_in_bounded_batches(stores: Stores) {
    let scope = scope();
    let short =
        RecordPolicy::new(Duration::from_millis(50), Duration::from_millis(50)).expect("policy");
    let long = policy(30_000);
    let before_all = now_ms();
    let mut expiring = Vec::new();
    for _ in 0..5 {
        let key = key();
        let lease = proceed(
            stores
                .records
                .begin(&scope, &key, &print("x"), &short)
                .await
                .expect("begin"),
        );
        stores
            .records
            .complete(&lease, &response("short"))
            .await
            .expect("complete");
        expiring.push(key);
    }
    let mut kept = Vec::new();
    for _ in 0..3 {
        let key = key();
        let lease = proceed(
            stores
                .records
                .begin(&scope, &key, &print("x"), &long)
                .await
                .expect("begin"),
        );
        stores
            .records
            .complete(&lease, &response("long"))
            .await
            .expect("complete");
        kept.push(key);
    }
    // A purge as of a time before anything expired deletes none of ours.
    stores
        .records
        .purge_expired(before_all - 60_000, 100)
        .await
        .expect("purge");
    for key in expiring.iter().chain(&kept) {
        assert!(
            stores
                .records
                .find_record(&scope, key)
                .await
                .expect("find")
                .is_some()
        );
    }

    tokio::time::sleep(Duration::from_millis(200)).await;
    let limit = 2;
    loop {
        let deleted = stores
            .records
            .purge_expired(now_ms(), limit)
            .await
            .expect("purge");
        assert!(
            deleted <= u64::from(limit),
            "a batch never exceeds its limit"
        );
        if deleted < u64::from(limit) {
            break;
        }
    }
    for key in &expiring {
        assert!(
            stores
                .records
                .find_record(&scope, key)
                .await
                .expect("find")
                .is_none(),
            "expired record purged"
        );
    }
    for key in &kept {
        let record = stores.records.find_record(&scope, key).await.expect("find");
        assert!(record.is_some(), "unexpired record kept");
    }
}

fn lock_name() -> Name {
    Name::parse(&unique("}lock:payment:{t1|o1}")).expect("name")
}

pub(crate) async fn lock_release_by_a_non_owner_has_no_effect(stores: Stores) {
    let name = lock_name();
    let held = stores
        .locks
        .try_acquire(&name, Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free lock");
    let mut impostor = held.clone();
    impostor.owner = "not-the-owner".to_owned();
    assert!(
        !stores.locks.release(&impostor).await.expect("release"),
        "non-owner release refused"
    );
    assert!(
        !stores
            .locks
            .renew(&impostor, Duration::from_secs(30))
            .await
            .expect("renew")
    );
    assert!(
        stores
            .locks
            .try_acquire(&name, Duration::from_secs(30))
            .await
            .expect("acquire")
            .is_none(),
        "still held"
    );
    assert!(
        stores
            .locks
            .renew(&held, Duration::from_secs(30))
            .await
            .expect("renew")
    );
    assert!(
        stores.locks.release(&held).await.expect("release"),
        "owner releases"
    );
    assert!(
        !stores.locks.release(&held).await.expect("release"),
        "a second release does nothing"
    );
    let next = stores
        .locks
        .try_acquire(&name, Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free again");
    assert!(next.fence > held.fence);
}

pub(crate) async fn lock_fences_strictly_increase_and_one_of_many_wins(stores: Stores) {
    let name = lock_name();
    let winners: Vec<_> = race(TASKS, |_| {
        let (locks, name) = (stores.locks.clone(), name.clone());
        async move { locks.try_acquire(&name, Duration::from_secs(30)).await }
    })
    .await
    .into_iter()
    .filter_map(|outcome| outcome.expect("try_acquire succeeds"))
    .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {TASKS} concurrent acquirers holds the lock"
    );
    let mut last = winners[0].fence;
    assert!(stores.locks.release(&winners[0]).await.expect("release"));
    for _ in 0..3 {
        let guard = stores
            .locks
            .try_acquire(&name, Duration::from_secs(30))
            .await
            .expect("acquire")
            .expect("free");
        assert!(guard.fence > last, "fence {} after {last}", guard.fence);
        last = guard.fence;
        assert!(stores.locks.release(&guard).await.expect("release"));
    }
    // Expiry without release: the next holder still gets a higher fence, and the expired holder
    // can no longer release it.
    let expiring = stores
        .locks
        .try_acquire(&name, Duration::from_millis(100))
        .await
        .expect("acquire")
        .expect("free");
    assert!(expiring.fence > last);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let next = stores
        .locks
        .try_acquire(&name, Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("expired");
    assert!(next.fence > expiring.fence);
    assert!(
        !stores.locks.release(&expiring).await.expect("release"),
        "expired holder cannot release the new one"
    );
    assert!(
        stores
            .locks
            .try_acquire(&name, Duration::from_secs(30))
            .await
            .expect("acquire")
            .is_none()
    );
}

pub(crate) async fn acquire_waits_briefly_then_gives_up(stores: Stores) {
    let name = lock_name();
    let held = stores
        .locks
        .try_acquire(&name, Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    let started = std::time::Instant::now();
    let gave_up = stores
        .locks
        .acquire(&name, Duration::from_secs(30), Duration::from_millis(150))
        .await
        .expect("acquire");
    assert!(gave_up.is_none(), "held lock: the wait runs out");
    assert!(started.elapsed() >= Duration::from_millis(150));

    let waiter = {
        let (locks, name) = (stores.locks.clone(), name.clone());
        tokio::spawn(async move {
            locks
                .acquire(&name, Duration::from_secs(30), Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(stores.locks.release(&held).await.expect("release"));
    let got = waiter
        .await
        .expect("task ran")
        .expect("acquire")
        .expect("released lock is taken by the waiter");
    assert!(got.fence > held.fence);
}

pub(crate) async fn dedup_claims_complete_release_and_take_over(stores: Stores) {
    let table = DedupTable::new(stores.records.clone(), Duration::from_secs(3600));
    let kind = "entitlement.grant";
    let lease = Duration::from_secs(30);

    let key = unique("PAY");
    let DedupOutcome::First(claim) = table.try_process(kind, &key, lease).await.expect("claim")
    else {
        panic!("first delivery claims");
    };
    assert!(matches!(
        table.try_process(kind, &key, lease).await.expect("claim"),
        DedupOutcome::InProgress { .. }
    ));
    table.complete(&claim).await.expect("complete");
    assert_eq!(
        table.try_process(kind, &key, lease).await.expect("claim"),
        DedupOutcome::Done
    );
    assert_eq!(
        table.try_process(kind, &key, lease).await.expect("claim"),
        DedupOutcome::Done,
        "redelivery is done"
    );

    let released = unique("PAY");
    let DedupOutcome::First(claim) = table
        .try_process(kind, &released, lease)
        .await
        .expect("claim")
    else {
        panic!("first delivery claims");
    };
    table.release(&claim).await.expect("release");
    assert!(matches!(
        table
            .try_process(kind, &released, lease)
            .await
            .expect("claim"),
        DedupOutcome::First(_)
    ));

    let crashed = unique("PAY");
    let DedupOutcome::First(stale) = table
        .try_process(kind, &crashed, Duration::from_millis(100))
        .await
        .expect("claim")
    else {
        panic!("first delivery claims");
    };
    tokio::time::sleep(Duration::from_millis(250)).await;
    let DedupOutcome::First(fresh) = table
        .try_process(kind, &crashed, lease)
        .await
        .expect("claim")
    else {
        panic!("an expired claim is taken over");
    };
    assert!(fresh.lease.fence > stale.lease.fence);
    assert!(
        matches!(table.complete(&stale).await, Err(StoreError::StaleLease)),
        "the crashed worker is fenced off"
    );
    table.complete(&fresh).await.expect("complete");

    // Many concurrent deliveries of one message: one claim.
    let message = unique("PAY");
    let table = Arc::new(table);
    let outcomes = race(TASKS, |_| {
        let (table, message) = (table.clone(), message.clone());
        async move {
            table
                .try_process(kind, &message, Duration::from_secs(30))
                .await
        }
    })
    .await;
    let firsts = outcomes
        .iter()
        .filter(|outcome| matches!(outcome.as_ref().expect("claim"), DedupOutcome::First(_)))
        .count();
    assert_eq!(firsts, 1);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OrderState {
    Created,
    Paid,
    Canceled,
}

impl StateMachine for OrderState {
    const KIND: &'static str = "order";
    const TRANSITIONS: &'static [(Self, Self)] = &[
        (OrderState::Created, OrderState::Paid),
        (OrderState::Created, OrderState::Canceled),
    ];
    fn as_str(self) -> &'static str {
        match self {
            OrderState::Created => "CREATED",
            OrderState::Paid => "PAID",
            OrderState::Canceled => "CANCELED",
        }
    }
    fn parse(text: &str) -> Option<Self> {
        match text {
            "CREATED" => Some(OrderState::Created),
            "PAID" => Some(OrderState::Paid),
            "CANCELED" => Some(OrderState::Canceled),
            _ => None,
        }
    }
}

pub(crate) async fn a_transition_is_won_by_exactly_one_of_many(stores: Stores) {
    let machine = Arc::new(Machine::new(stores.states.clone()));
    let id = Name::parse(&unique("order")).expect("id");
    assert!(
        machine
            .create(&id, OrderState::Created)
            .await
            .expect("create")
    );
    assert!(
        !machine
            .create(&id, OrderState::Created)
            .await
            .expect("create"),
        "created once"
    );

    let outcomes = race(TASKS, |index| {
        let (machine, id) = (machine.clone(), id.clone());
        // Half race to pay, half race to cancel: exactly one of all of them may win.
        let to = if index % 2 == 0 {
            OrderState::Paid
        } else {
            OrderState::Canceled
        };
        async move { machine.transition(&id, OrderState::Created, to).await }
    })
    .await;
    let mut applied = 0;
    for outcome in outcomes {
        match outcome.expect("transition") {
            Transition::Applied => applied += 1,
            Transition::AlreadyThere | Transition::Refused { .. } => {}
            Transition::Missing => panic!("entity exists"),
        }
    }
    assert_eq!(applied, 1, "exactly one transition wins");
    let state = machine
        .current::<OrderState>(&id)
        .await
        .expect("state")
        .expect("exists");
    let (_, version) = stores
        .states
        .find_state(OrderState::KIND, &id)
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(version, 1, "one transition applied");

    let illegal = machine.transition(&id, state, OrderState::Created).await;
    assert!(
        matches!(illegal, Err(StoreError::Invalid(_))),
        "illegal transition refused: {illegal:?}"
    );
    let missing = machine
        .transition(
            &Name::parse(&unique("none")).expect("id"),
            OrderState::Created,
            OrderState::Paid,
        )
        .await;
    assert_eq!(missing.expect("transition"), Transition::Missing);
}

/// Generates the suite for one backend: `$name::<case>` for every case.
macro_rules! backend_suite {
    ($name:ident, $make:path) => {
        mod $name {
            use super::*;
            backend_suite!(@cases $make;
                exactly_one_proceed_among_concurrent_begins,
                replay_returns_the_stored_response_and_scopes_do_not_leak,
                a_different_fingerprint_is_a_mismatch,
                an_expired_lease_is_taken_over_and_the_stale_owner_is_fenced_off,
                abandon_frees_the_key_for_any_retry,
                purge_deletes_only_expired_records_in_bounded_batches,
                a_token_is_consumed_once_under_contention,
                a_token_is_bound_to_the_key_that_spent_it,
                a_scope_holds_at_most_its_limit_of_unspent_tokens,
                a_store_holds_at_most_its_limit_of_unspent_tokens_in_all,
                concurrent_issues_at_a_limit_never_pass_it,
                lock_release_by_a_non_owner_has_no_effect,
                lock_fences_strictly_increase_and_one_of_many_wins,
                acquire_waits_briefly_then_gives_up,
                dedup_claims_complete_release_and_take_over,
                a_transition_is_won_by_exactly_one_of_many,
            );
        }
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case($make().await).await;
            }
        )*
    };
}

#[cfg(feature = "memory")]
backend_suite!(memory, support::memory);
#[cfg(feature = "sqlite")]
backend_suite!(sqlite, support::sqlite);
#[cfg(feature = "postgres")]
backend_suite!(postgres, support::postgres);
#[cfg(feature = "mysql")]
backend_suite!(mysql, support::mysql);
#[cfg(feature = "redis")]
backend_suite!(redis, support::redis);
#[cfg(feature = "redis")]
backend_suite!(redis_cluster, support::redis_cluster);
// The replay cache in front of a store holds the same contract as the store itself.
#[cfg(all(feature = "replay-cache", feature = "memory"))]
backend_suite!(cached_memory, support::cached_memory);
#[cfg(all(feature = "replay-cache", feature = "postgres"))]
backend_suite!(cached_postgres, support::cached_postgres);

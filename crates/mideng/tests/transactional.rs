//! The transactional forms of the SQL stores: a record commits or rolls back with the business
//! write it guards, and a concurrent request on the same key waits for that outcome.

mod support;

use std::time::Duration;

use mideng::store::sql::{Dialect, SqlStore};
use mideng::{
    Decision, Fingerprint, IdempotencyKey, RecordPolicy, RecordStore, Scope, StoredResponse,
};
use support::unique;

fn policy() -> RecordPolicy {
    RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(3600)).expect("policy")
}

fn answer() -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![],
        body: b"{\"debited\":100}".to_vec(),
    }
}

async fn record_commits_and_rolls_back_with_the_business_write<D: Dialect>(store: SqlStore<D>) {
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);

    // Rolled back: no record is left, so the retry proceeds as a first arrival.
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let mut transaction = store.begin_write().await.expect("begin");
    let decision = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in");
    assert!(matches!(decision, Decision::Proceed(_)));
    transaction.rollback().await.expect("rollback");
    assert!(
        store
            .find_record(&scope, &key)
            .await
            .expect("find")
            .is_none(),
        "no record without its effect"
    );

    // Committed with a response: the next arrival replays it.
    let mut transaction = store.begin_write().await.expect("begin");
    let Decision::Proceed(lease) = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in")
    else {
        panic!("proceeds after the rollback");
    };
    assert_eq!(lease.fence, 1);
    store
        .complete_in(&mut transaction, &lease, &answer())
        .await
        .expect("complete_in");
    transaction.commit().await.expect("commit");
    let replay = store
        .begin(&scope, &key, &fingerprint, &policy())
        .await
        .expect("begin");
    assert_eq!(replay, Decision::Replay(answer()));
}

async fn a_concurrent_begin_waits_for_the_open_transaction<D: Dialect>(store: SqlStore<D>) {
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);

    let mut transaction = store.begin_write().await.expect("begin");
    let Decision::Proceed(lease) = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in")
    else {
        panic!("first arrival proceeds");
    };
    let second = {
        let (store, scope, key) = (store.clone(), scope.clone(), key.clone());
        tokio::spawn(async move { store.begin(&scope, &key, &fingerprint, &policy()).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "the second arrival waits on the open transaction"
    );
    store
        .complete_in(&mut transaction, &lease, &answer())
        .await
        .expect("complete_in");
    transaction.commit().await.expect("commit");
    let decision = second.await.expect("task ran").expect("begin");
    assert_eq!(
        decision,
        Decision::Replay(answer()),
        "and then replays the committed outcome"
    );
}

macro_rules! dialect_suite {
    ($name:ident, $make:path) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn record_commits_and_rolls_back_with_the_business_write() {
                super::record_commits_and_rolls_back_with_the_business_write($make().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_concurrent_begin_waits_for_the_open_transaction() {
                super::a_concurrent_begin_waits_for_the_open_transaction($make().await).await;
            }
        }
    };
}

#[cfg(feature = "sqlite")]
dialect_suite!(sqlite, support::sqlite_store);
#[cfg(feature = "postgres")]
dialect_suite!(postgres, support::postgres_store);
#[cfg(feature = "mysql")]
dialect_suite!(mysql, support::mysql_store);

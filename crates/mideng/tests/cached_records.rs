//! The replay cache answers replays of completed records from memory, refuses a different
//! request under a cached key from memory too, and lets go of an answer when its record's
//! retention ends or its own time to live does, whichever comes first. What it never does is
//! decide who proceeds: the conformance suite runs every case through it as well.

#![cfg(all(feature = "replay-cache", feature = "memory"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mideng::record::{Decision, Lease, Record, RecordPolicy, RecordStore, StoredResponse};
use mideng::store::cached::CachedRecords;
use mideng::store::memory::MemoryStore;
use mideng::{Fingerprint, IdempotencyKey, Scope, StoreError};

/// A memory store that counts the `begin` calls reaching it.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    begins: AtomicUsize,
}

#[async_trait]
impl RecordStore for Counting {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        self.begins.fetch_add(1, Ordering::SeqCst);
        self.inner.begin(scope, key, fingerprint, policy).await
    }
    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        self.inner.complete(lease, response).await
    }
    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.abandon(lease).await
    }
    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.inner.find_record(scope, key).await
    }
    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_expired(now_ms, limit).await
    }
}

fn answer(tag: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: format!("{{\"deduction_no\":\"{tag}\"}}").into_bytes(),
    }
}

fn print(text: &str) -> Fingerprint {
    Fingerprint::of_request("POST", "/v1/wallets/u/deduct", text.as_bytes())
}

/// A completed record under `key`, then one replay through the store (which warms the cache).
async fn completed(
    records: &CachedRecords<Arc<Counting>>,
    scope: &Scope,
    key: &IdempotencyKey,
    policy: &RecordPolicy,
) {
    let Decision::Proceed(lease) = records
        .begin(scope, key, &print("a"), policy)
        .await
        .expect("begin")
    else {
        panic!("the first request proceeds");
    };
    records
        .complete(&lease, &answer("D1"))
        .await
        .expect("complete");
    assert_eq!(
        records
            .begin(scope, key, &print("a"), policy)
            .await
            .expect("begin"),
        Decision::Replay(answer("D1"))
    );
}

#[tokio::test]
async fn replays_come_from_memory_with_the_fingerprint_checked() {
    let store = Arc::new(Counting::default());
    let records = CachedRecords::new(store.clone(), 100, Duration::from_secs(600)).expect("cache");
    let scope = Scope::new("shop-1", "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse("k-1").expect("key");
    let policy =
        RecordPolicy::new(Duration::from_secs(5), Duration::from_secs(3600)).expect("policy");
    completed(&records, &scope, &key, &policy).await;
    let reached = store.begins.load(Ordering::SeqCst);
    assert_eq!(
        reached, 2,
        "the first request and the first replay reach the store"
    );

    for _ in 0..50 {
        assert_eq!(
            records
                .begin(&scope, &key, &print("a"), &policy)
                .await
                .expect("begin"),
            Decision::Replay(answer("D1")),
            "byte for byte"
        );
    }
    assert_eq!(
        records
            .begin(&scope, &key, &print("b"), &policy)
            .await
            .expect("begin"),
        Decision::Mismatch,
        "another request under the key is refused"
    );
    assert_eq!(
        store.begins.load(Ordering::SeqCst),
        reached,
        "none reached the store"
    );

    // Another scope (tenant) with the same key is another record: the store decides.
    let other = Scope::new("shop-2", "wallet.deduct").expect("scope");
    assert!(matches!(
        records
            .begin(&other, &key, &print("a"), &policy)
            .await
            .expect("begin"),
        Decision::Proceed(_)
    ));
    assert_eq!(store.begins.load(Ordering::SeqCst), reached + 1);
}

#[tokio::test]
async fn an_answer_leaves_memory_with_its_record_or_its_time_to_live() {
    let scope = Scope::new("shop-1", "wallet.deduct").expect("scope");

    // The record's retention ends first: afterwards the key is the store's again (a new
    // request under it proceeds).
    let store = Arc::new(Counting::default());
    let records = CachedRecords::new(store.clone(), 100, Duration::from_secs(600)).expect("cache");
    let key = IdempotencyKey::parse("k-short").expect("key");
    let short =
        RecordPolicy::new(Duration::from_millis(100), Duration::from_millis(300)).expect("policy");
    completed(&records, &scope, &key, &short).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = store.begins.load(Ordering::SeqCst);
    assert!(matches!(
        records
            .begin(&scope, &key, &print("b"), &short)
            .await
            .expect("begin"),
        Decision::Proceed(_)
    ));
    assert_eq!(
        store.begins.load(Ordering::SeqCst),
        before + 1,
        "asked the store"
    );

    // The cache's own time to live ends first: the store is asked again, and still replays.
    let store = Arc::new(Counting::default());
    let records =
        CachedRecords::new(store.clone(), 100, Duration::from_millis(150)).expect("cache");
    let key = IdempotencyKey::parse("k-long").expect("key");
    let long =
        RecordPolicy::new(Duration::from_secs(5), Duration::from_secs(3600)).expect("policy");
    completed(&records, &scope, &key, &long).await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let before = store.begins.load(Ordering::SeqCst);
    assert_eq!(
        records
            .begin(&scope, &key, &print("a"), &long)
            .await
            .expect("begin"),
        Decision::Replay(answer("D1"))
    );
    assert_eq!(
        store.begins.load(Ordering::SeqCst),
        before + 1,
        "asked the store"
    );
}

#[tokio::test]
async fn settings_out_of_range_are_refused() {
    let store = Arc::new(Counting::default());
    assert!(CachedRecords::new(store.clone(), 0, Duration::from_secs(1)).is_err());
    assert!(CachedRecords::new(store.clone(), 10, Duration::ZERO).is_err());
    assert!(CachedRecords::new(store, 10, Duration::from_secs(2 * 24 * 3600)).is_err());
}

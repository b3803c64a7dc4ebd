//! What a lock store keeps: the locks held, never one entry per name ever locked. A million
//! names through the memory store leave it empty; on SQL and Redis, names locked and released
//! (or left to expire and purged) leave no lock behind and at most 1024 fence counters, while a
//! name's fences keep growing after its entry is gone. A new memory store starts above the old
//! one's fences, and a lease kept alive lasts while its holder works, and not beyond its bound.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mideng::Name;
use mideng::lock::{FENCE_SLOTS, LockStore, keep_alive};
use support::unique;

const TTL: Duration = Duration::from_secs(30);

/// Locks and releases `count` distinct names, and leaves `expiring` more to run out; returns
/// the names' prefix. Every fence is higher than every earlier one of the same slot, and a
/// name locked again after its release gets a higher fence than before.
async fn lock_many(locks: &dyn LockStore, count: usize, expiring: usize) -> String {
    let prefix = unique("many");
    let name = |index: usize| Name::parse(&format!("{prefix}-{index}")).expect("name");
    let mut first_fence = None;
    for index in 0..count {
        let guard = locks
            .try_acquire(&name(index), TTL)
            .await
            .expect("acquire")
            .expect("a fresh name is free");
        first_fence.get_or_insert(guard.fence);
        assert!(locks.release(&guard).await.expect("release"));
    }
    for index in count..count + expiring {
        locks
            .try_acquire(&name(index), Duration::from_millis(20))
            .await
            .expect("acquire")
            .expect("a fresh name is free");
    }
    // The first name again, its entry long gone: its fence is still higher than before.
    let again = locks
        .try_acquire(&name(0), TTL)
        .await
        .expect("acquire")
        .expect("released");
    assert!(
        Some(again.fence) > first_fence,
        "fence {} after {first_fence:?}",
        again.fence
    );
    assert!(locks.release(&again).await.expect("release"));
    tokio::time::sleep(Duration::from_millis(60)).await;
    prefix
}

#[cfg(feature = "memory")]
#[tokio::test]
async fn a_million_names_leave_the_memory_store_flat() {
    use mideng::store::memory::MemoryStore;
    let store = MemoryStore::new();
    lock_many(&store, 1_000_000, 1_000).await;
    // The expired ones go with the next acquisition's sweep.
    let probe = Name::parse(&unique("probe")).expect("name");
    let guard = store
        .try_acquire(&probe, TTL)
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(store.lock_entries(), 1, "only the lock held now is kept");
    assert!(store.release(&guard).await.expect("release"));
    assert_eq!(store.lock_entries(), 0);
}

/// The SQL case: the locks of `prefix` left after a purge, and the fence counters.
macro_rules! sql_case {
    ($test:ident, $feature:literal, $make:path, $pool:ty) => {
        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let store = $make().await;
            let prefix = lock_many(&store, 400, 100).await;
            let now = mideng::clock::now_ms();
            let mut purged = 0;
            loop {
                let batch = store.purge_expired_locks(now, 30).await.expect("purge");
                assert!(batch <= 30, "a purge is bounded");
                purged += batch;
                if batch == 0 {
                    break;
                }
            }
            assert!(purged >= 100, "the expired locks were purged ({purged})");
            let pool: &$pool = store.pool();
            let left: i64 =
                mideng::sqlx::query_scalar("SELECT COUNT(*) FROM mideng_locks WHERE name LIKE ?")
                    .bind(format!("{prefix}%"))
                    .fetch_one(pool)
                    .await
                    .expect("count locks");
            assert_eq!(left, 0, "no lock kept for a name nobody holds");
            let counters: i64 =
                mideng::sqlx::query_scalar("SELECT COUNT(*) FROM mideng_lock_fences")
                    .fetch_one(pool)
                    .await
                    .expect("count fence slots");
            assert_eq!(counters, i64::from(FENCE_SLOTS));
        }
    };
}

sql_case!(
    sqlite_keeps_the_held_locks_and_its_fence_slots,
    "sqlite",
    support::sqlite_store,
    mideng::sqlx::SqlitePool
);
sql_case!(
    mysql_keeps_the_held_locks_and_its_fence_slots,
    "mysql",
    support::isolated_mysql_store,
    mideng::sqlx::MySqlPool
);

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_the_held_locks_and_its_fence_slots() {
    let store = support::isolated_postgres_store().await;
    let prefix = lock_many(&store, 400, 100).await;
    let purged = store
        .purge_expired_locks(mideng::clock::now_ms(), 1_000)
        .await
        .expect("purge");
    assert_eq!(purged, 100);
    let left: i64 =
        mideng::sqlx::query_scalar("SELECT COUNT(*) FROM mideng_locks WHERE name LIKE $1")
            .bind(format!("{prefix}%"))
            .fetch_one(store.pool())
            .await
            .expect("count locks");
    assert_eq!(left, 0, "no lock kept for a name nobody holds");
    let counters: i64 = mideng::sqlx::query_scalar("SELECT COUNT(*) FROM mideng_lock_fences")
        .fetch_one(store.pool())
        .await
        .expect("count fence slots");
    assert_eq!(counters, i64::from(FENCE_SLOTS));
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_the_held_locks_and_at_most_its_fence_slots() {
    use mideng::store::redis::RedisStore;
    let url = std::env::var("MIDENG_TEST_REDIS_URL").unwrap_or(support::REDIS_URL.to_owned());
    let prefix = unique("locks");
    let store = RedisStore::connect(&url)
        .await
        .expect("Redis on its default port (scripts/services up)")
        .with_prefix(&prefix)
        .expect("prefix");
    lock_many(&store, 2_000, 100).await;
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let keys = |pattern: String| {
        let mut connection = connection.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut connection)
                .await
                .expect("keys");
            keys
        }
    };
    assert_eq!(keys(format!("{prefix}:lock:*")).await, Vec::<String>::new());
    let fences = keys(format!("{prefix}:fence:*")).await;
    assert!(
        (1..=usize::from(FENCE_SLOTS)).contains(&fences.len()),
        "{} fence keys for 2 100 names",
        fences.len()
    );
    let _: i64 = redis::cmd("DEL")
        .arg(&fences)
        .query_async(&mut connection)
        .await
        .expect("delete this test's fence keys");
}

/// A store that lost its counters (a memory store in a new process) hands out fences above
/// every fence it gave before, so a fence kept beside the guarded data is never undercut.
#[cfg(feature = "memory")]
#[tokio::test]
async fn a_new_memory_store_starts_above_the_old_ones_fences() {
    use mideng::store::memory::MemoryStore;
    let name = Name::parse(&unique("restart")).expect("name");
    let old = MemoryStore::new();
    let mut before = 0;
    for _ in 0..1_000 {
        let guard = old
            .try_acquire(&name, TTL)
            .await
            .expect("acquire")
            .expect("free");
        before = guard.fence;
        assert!(old.release(&guard).await.expect("release"));
    }
    drop(old);
    tokio::time::sleep(Duration::from_millis(2)).await;
    let new = MemoryStore::new();
    let after = new
        .try_acquire(&name, TTL)
        .await
        .expect("acquire")
        .expect("free");
    assert!(after.fence > before, "fence {} after {before}", after.fence);
}

/// A holder that keeps its lease alive holds the lock for several times its time-to-live while
/// it works, and nobody else gets it; once it stops, the lock is free within a time-to-live.
/// A lock released under it (lost) is reported by the next renewal, and a holder that reaches
/// its longest hold is told so and loses the lock.
async fn a_kept_lease_lasts_while_its_holder_works_and_not_beyond(locks: Arc<dyn LockStore>) {
    let ttl = Duration::from_millis(1_500);
    let name = Name::parse(&unique("kept")).expect("name");
    let guard = locks
        .try_acquire(&name, ttl)
        .await
        .expect("acquire")
        .expect("free");
    let kept = keep_alive(locks.clone(), guard.clone(), ttl, Duration::from_secs(60))
        .expect("a valid time-to-live");
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            locks
                .try_acquire(&name, ttl)
                .await
                .expect("acquire")
                .is_none(),
            "taken while its holder still worked"
        );
        assert!(kept.held());
    }
    drop(kept);
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    let next = locks
        .try_acquire(&name, ttl)
        .await
        .expect("acquire")
        .expect("free once its holder stopped renewing");
    assert!(next.fence > guard.fence);
    assert!(
        !locks.renew(&guard, ttl).await.expect("renew"),
        "the old holder cannot renew"
    );

    // Lost: released under the renewal (as if taken over), then someone else's.
    let lost = keep_alive(locks.clone(), next.clone(), ttl, Duration::from_secs(60))
        .expect("a valid time-to-live");
    assert!(locks.release(&next).await.expect("release"));
    let other = locks
        .try_acquire(&name, ttl)
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!lost.held(), "the renewal found the lock gone");
    assert!(locks.release(&other).await.expect("release"));

    // Bounded: a holder still working after its longest hold loses the lock.
    let stuck = locks
        .try_acquire(&name, ttl)
        .await
        .expect("acquire")
        .expect("free");
    let bounded = keep_alive(locks.clone(), stuck.clone(), ttl, Duration::from_secs(2))
        .expect("a valid time-to-live");
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    assert!(!bounded.held(), "past its longest hold");
    tokio::time::sleep(ttl + Duration::from_millis(300)).await;
    assert!(
        locks
            .try_acquire(&name, ttl)
            .await
            .expect("acquire")
            .is_some(),
        "free a time-to-live after the last renewal"
    );
}

#[cfg(feature = "memory")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_kept_lease_lasts_while_its_holder_works_and_not_beyond() {
    a_kept_lease_lasts_while_its_holder_works_and_not_beyond(Arc::new(
        mideng::store::memory::MemoryStore::new(),
    ))
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_kept_lease_lasts_while_its_holder_works_and_not_beyond() {
    use mideng::store::redis::RedisStore;
    let url = std::env::var("MIDENG_TEST_REDIS_URL").unwrap_or(support::REDIS_URL.to_owned());
    let store = RedisStore::connect(&url)
        .await
        .expect("Redis on its default port (scripts/services up)")
        .with_prefix(&unique("kept"))
        .expect("prefix");
    a_kept_lease_lasts_while_its_holder_works_and_not_beyond(Arc::new(store)).await;
}

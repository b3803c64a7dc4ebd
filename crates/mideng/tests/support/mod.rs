//! Backends for the integration tests: real servers, found through environment variables with
//! loopback defaults. An unreachable server fails the test with instructions, never a skip.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
#[cfg(feature = "replay-cache")]
use std::time::Duration;

use mideng::RecordStore;
use mideng::lock::LockStore;
use mideng::state::StateStore;
#[cfg(feature = "memory")]
use mideng::store::memory::MemoryStore;
#[cfg(feature = "redis")]
use mideng::store::redis::RedisStore;
#[cfg(feature = "_sql")]
use mideng::store::sql::PoolSettings;
#[cfg(feature = "mysql")]
use mideng::store::sql::mysql::MySqlStore;
#[cfg(feature = "postgres")]
use mideng::store::sql::postgres::PostgresStore;
#[cfg(feature = "sqlite")]
use mideng::store::sql::sqlite::SqliteStore;
use mideng::token::TokenStore;

pub const POSTGRES_URL: &str = "postgres://mideng:mideng@127.0.0.1:5432/mideng_test";
pub const MYSQL_URL: &str = "mysql://mideng:mideng@127.0.0.1:3306/mideng_test";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// Every contract of one store, as trait objects.
#[derive(Clone)]
pub struct Stores {
    pub records: Arc<dyn RecordStore>,
    pub tokens: Arc<dyn TokenStore>,
    pub locks: Arc<dyn LockStore>,
    pub states: Arc<dyn StateStore>,
}

fn stores<S: RecordStore + TokenStore + LockStore + StateStore + 'static>(store: S) -> Stores {
    let store = Arc::new(store);
    Stores {
        records: store.clone(),
        tokens: store.clone(),
        locks: store.clone(),
        states: store,
    }
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    let mut bytes = [0_u8; 8];
    getrandom::fill(&mut bytes).expect("random bytes");
    format!("{prefix}-{}", hex::encode(bytes))
}

fn url(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

fn unreachable(backend: &str, variable: &str, url: &str, error: impl std::fmt::Display) -> ! {
    panic!(
        "{backend} is required by this test but unreachable at {url} ({variable}): {error}\n\
         Start the local services with `scripts/services up` (creates the test database and user),\n\
         point {variable} at another server, or leave {backend} out with a test filter, e.g.\n\
         cargo nextest run -E 'not test(/^{backend}::/)'"
    )
}

#[cfg(feature = "_sql")]
/// A pool small enough that parallel test processes stay under the servers' connection limits.
fn settings() -> PoolSettings {
    PoolSettings {
        connections_max: 8,
        ..PoolSettings::default()
    }
}

#[cfg(feature = "memory")]
pub async fn memory() -> Stores {
    stores(MemoryStore::new())
}

/// `stores` with its records behind the replay cache.
#[cfg(feature = "replay-cache")]
fn cached(mut stores: Stores) -> Stores {
    let cached =
        mideng::store::cached::CachedRecords::new(stores.records, 1_000, Duration::from_secs(600))
            .expect("cache settings");
    stores.records = Arc::new(cached);
    stores
}

#[cfg(all(feature = "replay-cache", feature = "memory"))]
pub async fn cached_memory() -> Stores {
    cached(memory().await)
}

#[cfg(all(feature = "replay-cache", feature = "postgres"))]
pub async fn cached_postgres() -> Stores {
    cached(postgres().await)
}

#[cfg(feature = "sqlite")]
pub async fn sqlite_store() -> SqliteStore {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}.db", unique("conformance")));
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::connect(&url, settings())
        .await
        .expect("open SQLite file");
    store.migrate().await.expect("migrate SQLite");
    store
}

#[cfg(feature = "sqlite")]
pub async fn sqlite() -> Stores {
    stores(sqlite_store().await)
}

#[cfg(feature = "postgres")]
pub async fn postgres_store() -> PostgresStore {
    let url = url("MIDENG_TEST_POSTGRES_URL", POSTGRES_URL);
    let store = PostgresStore::connect(&url, settings())
        .await
        .unwrap_or_else(|error| unreachable("postgres", "MIDENG_TEST_POSTGRES_URL", &url, error));
    store.migrate().await.expect("migrate PostgreSQL");
    store
}

#[cfg(feature = "postgres")]
pub async fn postgres() -> Stores {
    stores(postgres_store().await)
}

#[cfg(feature = "mysql")]
pub async fn mysql_store() -> MySqlStore {
    let url = url("MIDENG_TEST_MYSQL_URL", MYSQL_URL);
    let store = MySqlStore::connect(&url, settings())
        .await
        .unwrap_or_else(|error| unreachable("mysql", "MIDENG_TEST_MYSQL_URL", &url, error));
    store.migrate().await.expect("migrate MySQL");
    store
}

#[cfg(feature = "mysql")]
pub async fn mysql() -> Stores {
    stores(mysql_store().await)
}

#[cfg(feature = "redis")]
pub async fn redis() -> Stores {
    let url = url("MIDENG_TEST_REDIS_URL", REDIS_URL);
    let store = RedisStore::connect(&url)
        .await
        .unwrap_or_else(|error| unreachable("redis", "MIDENG_TEST_REDIS_URL", &url, error));
    stores(store)
}

/// The seed nodes of the test Redis Cluster (`MIDENG_TEST_REDIS_CLUSTER_URLS`, comma-separated).
pub const REDIS_CLUSTER_URLS: &str =
    "redis://127.0.0.1:7000/,redis://127.0.0.1:7001/,redis://127.0.0.1:7002/";

#[cfg(feature = "redis")]
pub async fn redis_cluster() -> Stores {
    let urls = url("MIDENG_TEST_REDIS_CLUSTER_URLS", REDIS_CLUSTER_URLS);
    let nodes: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let store = RedisStore::connect_cluster(&nodes)
        .await
        .unwrap_or_else(|error| {
            unreachable(
                "redis_cluster",
                "MIDENG_TEST_REDIS_CLUSTER_URLS",
                &urls,
                error,
            )
        });
    stores(store)
}

/// Runs `attempt(i)` for `i` in `0..tasks` on separate tasks, released together by a barrier so
/// that the store sees them at the same moment, and returns their results in order.
pub async fn race<T, F, Fut>(tasks: usize, attempt: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|index| {
            let (barrier, work) = (barrier.clone(), attempt(index));
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(tasks);
    for handle in handles {
        results.push(handle.await.expect("a racing task panicked"));
    }
    results
}

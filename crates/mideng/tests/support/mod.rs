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
use mideng::token::{TokenLimits, TokenStore};

pub const POSTGRES_URL: &str = "postgres://mideng:mideng@127.0.0.1:5432/mideng_test";
pub const MYSQL_URL: &str = "mysql://mideng:mideng@127.0.0.1:3306/mideng_test";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// A token store of one backend under other limits, made on demand. Its future is awaited by
/// the test itself, never spawned, so it need not be `Send` (MySQL's migration future is not
/// provably so).
pub type TokenFactory = Arc<
    dyn Fn(TokenLimits) -> std::pin::Pin<Box<dyn std::future::Future<Output = Arc<dyn TokenStore>>>>
        + Send
        + Sync,
>;

/// Every contract of one store, as trait objects.
#[derive(Clone)]
pub struct Stores {
    pub records: Arc<dyn RecordStore>,
    pub tokens: Arc<dyn TokenStore>,
    pub locks: Arc<dyn LockStore>,
    pub states: Arc<dyn StateStore>,
    /// The same store (its tables, its server) issuing tokens under other limits: for limits
    /// per scope, which a fresh scope makes the test's own.
    pub limited_tokens: TokenFactory,
    /// A store of the same backend on tables no other test writes (a fresh database, file or
    /// key prefix), under other limits: for the store-wide limit, which counts every token.
    pub isolated_tokens: TokenFactory,
}

/// A store that can issue tokens under other limits.
trait Limited: Clone + Send + Sync + 'static {
    fn limited(self, limits: TokenLimits) -> Self;
}

#[cfg(feature = "memory")]
impl Limited for MemoryStore {
    fn limited(self, limits: TokenLimits) -> Self {
        self.with_token_limits(limits)
    }
}

#[cfg(feature = "_sql")]
impl<D: mideng::store::sql::Dialect> Limited for mideng::store::sql::SqlStore<D> {
    fn limited(self, limits: TokenLimits) -> Self {
        self.with_token_limits(limits)
    }
}

#[cfg(feature = "redis")]
impl<C> Limited for RedisStore<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn limited(self, limits: TokenLimits) -> Self {
        self.with_token_limits(limits)
    }
}

/// A factory from an async constructor of a fresh store.
fn factory<S, F, Fut>(fresh: F) -> TokenFactory
where
    S: TokenStore + Limited,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = S> + 'static,
{
    let fresh = Arc::new(fresh);
    Arc::new(move |limits| {
        let fresh = fresh.clone();
        Box::pin(async move { Arc::new(fresh().await.limited(limits)) as Arc<dyn TokenStore> })
    })
}

fn stores<S>(store: S, isolated_tokens: TokenFactory) -> Stores
where
    S: RecordStore + TokenStore + LockStore + StateStore + Limited,
{
    let shared = store.clone();
    let limited_tokens: TokenFactory = Arc::new(move |limits| {
        let store = shared.clone().limited(limits);
        Box::pin(async move { Arc::new(store) as Arc<dyn TokenStore> })
    });
    let store = Arc::new(store);
    Stores {
        records: store.clone(),
        tokens: store.clone(),
        locks: store.clone(),
        states: store,
        limited_tokens,
        isolated_tokens,
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
    stores(MemoryStore::new(), factory(|| async { MemoryStore::new() }))
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
    stores(sqlite_store().await, factory(sqlite_store))
}

/// A database name of its own (`mideng_iso_<hex>`, which `scripts/services fresh` drops) and
/// its URL on the server of `url`.
#[cfg(feature = "_sql")]
fn isolated_database(url: &str) -> (String, String) {
    let name = unique("mideng_iso").replace('-', "_");
    let (server, _) = url
        .rsplit_once('/')
        .expect("a database URL ends with its name");
    (format!("{server}/{name}"), name)
}

/// `CREATE DATABASE name`, on the connection of the test user (who may create mideng_iso_
/// databases: `scripts/services up`).
#[cfg(feature = "_sql")]
fn create_database(name: &str) -> mideng::sqlx::RawSql {
    // The name is letters, digits and `_` only: safe to splice.
    mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name}"
    )))
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

/// A PostgreSQL store on a database of its own.
#[cfg(feature = "postgres")]
pub async fn isolated_postgres_store() -> PostgresStore {
    use mideng::sqlx::Connection;
    let base = url("MIDENG_TEST_POSTGRES_URL", POSTGRES_URL);
    let (url, name) = isolated_database(&base);
    let mut admin = mideng::sqlx::PgConnection::connect(&base)
        .await
        .expect("connect to create a database");
    create_database(&name)
        .execute(&mut admin)
        .await
        .expect("the test role may create databases (scripts/services up)");
    let store = PostgresStore::connect(&url, settings())
        .await
        .expect("the isolated PostgreSQL database");
    store.migrate().await.expect("migrate PostgreSQL");
    store
}

#[cfg(feature = "postgres")]
pub async fn postgres() -> Stores {
    stores(postgres_store().await, factory(isolated_postgres_store))
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

/// A MySQL store on a database of its own.
#[cfg(feature = "mysql")]
pub async fn isolated_mysql_store() -> MySqlStore {
    use mideng::sqlx::Connection;
    let base = url("MIDENG_TEST_MYSQL_URL", MYSQL_URL);
    let (url, name) = isolated_database(&base);
    let mut admin = mideng::sqlx::MySqlConnection::connect(&base)
        .await
        .expect("connect to create a database");
    create_database(&name)
        .execute(&mut admin)
        .await
        .expect("the test user may create mideng_iso_ databases (scripts/services up)");
    let store = MySqlStore::connect(&url, settings())
        .await
        .expect("the isolated MySQL database");
    store.migrate().await.expect("migrate MySQL");
    store
}

#[cfg(feature = "mysql")]
pub async fn mysql() -> Stores {
    stores(mysql_store().await, factory(isolated_mysql_store))
}

#[cfg(feature = "redis")]
pub async fn redis() -> Stores {
    let url = url("MIDENG_TEST_REDIS_URL", REDIS_URL);
    let store = RedisStore::connect(&url)
        .await
        .unwrap_or_else(|error| unreachable("redis", "MIDENG_TEST_REDIS_URL", &url, error));
    let isolated = store.clone();
    stores(
        store,
        factory(move || {
            let store = isolated.clone();
            async move { store.with_prefix(&unique("iso")).expect("a valid prefix") }
        }),
    )
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
    let isolated = store.clone();
    stores(
        store,
        factory(move || {
            let store = isolated.clone();
            async move { store.with_prefix(&unique("iso")).expect("a valid prefix") }
        }),
    )
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

//! The machine's limits on the same run: one-row-insert commits on the deployment's database
//! through the same driver, pool size and transaction shape as the service, and Redis round
//! trips through the same client as the service's stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;

use super::load::{Outcome, Tally, drive};

/// Connections of the service's pool in a deployment (`crate::deploy`), used here too.
const POOL_CONNECTIONS: u32 = 16;
/// The bench table, created in the deployment's database.
const CREATE_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS mideng_bench_rows (id BIGINT PRIMARY KEY, payload TEXT NOT NULL)";
const INSERT: &str = "INSERT INTO mideng_bench_rows (id, payload) VALUES ($1, $2)";
/// 64 bytes, about a record's key and fingerprint.
const PAYLOAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// How long the Redis keys of the bench live.
const REDIS_KEY_TTL_MS: u64 = 60_000;

/// The deployment's database, opened as the service opens it.
enum Database {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// One write transaction (`BEGIN IMMEDIATE` on SQLite) inserting one row, committed.
macro_rules! insert_one {
    ($store:expr, $id:expr) => {{
        let mut transaction = $store
            .begin_write()
            .await
            .map_err(|error| error.to_string())?;
        mideng::sqlx::query(INSERT)
            .bind($id)
            .bind(PAYLOAD)
            .execute(&mut *transaction)
            .await
            .map_err(|error| error.to_string())?;
        transaction
            .commit()
            .await
            .map_err(|error| error.to_string())
    }};
}

impl Database {
    async fn open(url: &str) -> anyhow::Result<Self> {
        let settings = PoolSettings {
            connections_max: POOL_CONNECTIONS,
            ..PoolSettings::default()
        };
        let database = if url.starts_with("sqlite:") {
            Database::Sqlite(SqliteStore::connect(url, settings).await?)
        } else if url.starts_with("postgres") {
            Database::Postgres(PostgresStore::connect(url, settings).await?)
        } else {
            anyhow::bail!("no one-row-insert bench for {url}");
        };
        match &database {
            Database::Sqlite(store) => {
                mideng::sqlx::query(CREATE_TABLE)
                    .execute(store.pool())
                    .await?;
            }
            Database::Postgres(store) => {
                mideng::sqlx::query(CREATE_TABLE)
                    .execute(store.pool())
                    .await?;
            }
        }
        Ok(database)
    }

    async fn insert(&self, id: i64) -> Result<(), String> {
        match self {
            Database::Sqlite(store) => insert_one!(store, id),
            Database::Postgres(store) => insert_one!(store, id),
        }
    }

    async fn close(&self) {
        match self {
            Database::Sqlite(store) => store.pool().close().await,
            Database::Postgres(store) => store.pool().close().await,
        }
    }
}

/// Single-row-insert commits on the database at `url`, `concurrency` at a time.
pub(super) async fn database(
    url: &str,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Tally> {
    let database = Arc::new(
        Database::open(url)
            .await
            .context("opening the deployment's database for the one-row-insert bench")?,
    );
    let next = Arc::new(AtomicU64::new(1));
    let shared = database.clone();
    let tally = drive(concurrency, duration, move |_, _| {
        let (database, next) = (shared.clone(), next.clone());
        async move {
            let Ok(id) = i64::try_from(next.fetch_add(1, Ordering::Relaxed)) else {
                return None;
            };
            Some(match database.insert(id).await {
                Ok(()) => Outcome::Done,
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await;
    database.close().await;
    Ok(tally)
}

/// Redis round trips at `address` (`host:port`), alternating `SET key 1 NX PX` on a new key and
/// `GET` of it (the shapes of a token or lock write and a read), over one multiplexed
/// connection manager as the service uses.
pub(super) async fn redis(
    address: &str,
    prefix: &str,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Tally> {
    let client = redis::Client::open(format!("redis://{address}/"))?;
    let connection = redis::aio::ConnectionManager::new(client)
        .await
        .with_context(|| format!("connecting to Redis at {address}"))?;
    let prefix: Arc<str> = Arc::from(prefix);
    Ok(drive(concurrency, duration, move |client, iteration| {
        let (mut connection, prefix) = (connection.clone(), prefix.clone());
        async move {
            let key = format!("{prefix}:{client}:{}", iteration / 2);
            let answer = if iteration % 2 == 0 {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(REDIS_KEY_TTL_MS)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|set| set.is_some())
            } else {
                redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|value| value.is_some())
            };
            Some(match answer {
                Ok(true) => Outcome::Done,
                Ok(false) => Outcome::Failed(format!("unexpected answer for {key}")),
                Err(error) => Outcome::Failed(error.to_string()),
            })
        }
    })
    .await)
}

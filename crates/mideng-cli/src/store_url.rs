//! Opening a store from a URL, the way every command names its store.

use std::sync::Arc;

use anyhow::{Context, bail};
use mideng::RecordStore;
use mideng::lock::LockStore;
use mideng::redact;
use mideng::state::StateStore;
use mideng::store::memory::MemoryStore;
use mideng::store::redis::RedisStore;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use mideng::token::TokenStore;

/// Every contract of one store.
#[derive(Clone)]
pub(crate) struct Stores {
    pub(crate) records: Arc<dyn RecordStore>,
    pub(crate) tokens: Arc<dyn TokenStore>,
    pub(crate) locks: Arc<dyn LockStore>,
    pub(crate) states: Arc<dyn StateStore>,
}

fn all<S: RecordStore + TokenStore + LockStore + StateStore + 'static>(store: S) -> Stores {
    let store = Arc::new(store);
    Stores {
        records: store.clone(),
        tokens: store.clone(),
        locks: store.clone(),
        states: store,
    }
}

/// Applies the toolkit's migrations to a SQL database.
pub(crate) async fn migrate(url: &str) -> anyhow::Result<()> {
    let shown = redact::url(url);
    if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url, PoolSettings::default())
            .await
            .with_context(|| format!("opening {shown}"))?;
        store.migrate().await.context("migrating SQLite")?;
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = PostgresStore::connect(url, PoolSettings::default())
            .await
            .with_context(|| format!("connecting to {shown}"))?;
        store.migrate().await.context("migrating PostgreSQL")?;
    } else if url.starts_with("mysql:") || url.starts_with("mariadb:") {
        let store = MySqlStore::connect(url, PoolSettings::default())
            .await
            .with_context(|| format!("connecting to {shown}"))?;
        store.migrate().await.context("migrating MySQL")?;
    } else {
        bail!("{shown}: migrations exist for sqlite://, postgres:// and mysql:// URLs");
    }
    Ok(())
}

/// Opens (and migrates, for SQL) the store named by `url`.
pub(crate) async fn open(url: &str) -> anyhow::Result<Stores> {
    let shown = redact::url(url);
    if url == "memory" {
        return Ok(all(MemoryStore::new()));
    }
    if url.starts_with("redis:") || url.starts_with("rediss:") {
        let store = RedisStore::connect(url)
            .await
            .with_context(|| format!("connecting to {shown}"))?;
        return Ok(all(store));
    }
    migrate(url).await?;
    let settings = PoolSettings::default();
    Ok(if url.starts_with("sqlite:") {
        all(SqliteStore::connect(url, settings).await?)
    } else if url.starts_with("mysql:") || url.starts_with("mariadb:") {
        all(MySqlStore::connect(url, settings).await?)
    } else {
        all(PostgresStore::connect(url, settings).await?)
    })
}

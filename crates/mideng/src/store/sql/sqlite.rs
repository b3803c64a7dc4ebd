//! SQLite dialect: the embedded default.
//!
//! Connections use WAL (readers never block the writer), `busy_timeout` (a writer waits for the
//! file lock instead of failing at once) and `synchronous = FULL` (a committed record survives
//! a power cut, not only a process crash). Write transactions open with `BEGIN IMMEDIATE`.

use std::str::FromStr;

use sqlx::Sqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use super::{
    Dialect, Failure, PoolSettings, SqlDialect, SqlStore, classify_transport, sql_port, store_error,
};
use crate::error::StoreError;

sql_port!(Sqlite, SqliteConnection, SqliteRow);

/// The SQLite dialect.
#[derive(Debug)]
pub struct SqliteDialect;

/// A store in a SQLite file.
pub type SqliteStore = SqlStore<SqliteDialect>;

/// How long a writer waits for the file lock before reporting a conflict (then retried).
const BUSY_TIMEOUT_SECS: u64 = 5;

impl Dialect for SqliteDialect {
    type Db = Sqlite;
    const NAME: &'static str = "sqlite";
    const KIND: SqlDialect = SqlDialect::Sqlite;
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";

    fn classify(error: &sqlx::Error) -> Failure {
        if let Some(failure) = classify_transport(error) {
            return failure;
        }
        match error
            .as_database_error()
            .and_then(|error| error.code())
            .as_deref()
        {
            // SQLITE_BUSY, SQLITE_LOCKED and their extended codes
            Some("5" | "6" | "261" | "262" | "517") => Failure::Conflict,
            Some("14") => Failure::Unavailable, // SQLITE_CANTOPEN
            _ => Failure::Other,
        }
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://path/to/file.db`).
    /// An in-memory URL gets a single connection, since each connection of a pooled
    /// `sqlite::memory:` would see a database of its own.
    pub async fn connect(url: &str, settings: PoolSettings) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(store_error::<SqliteDialect>)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(std::time::Duration::from_secs(BUSY_TIMEOUT_SECS));
        let connections_max = if url.contains(":memory:") || url.contains("mode=memory") {
            1
        } else {
            settings.connections_max
        };
        let pool = SqlitePoolOptions::new()
            .max_connections(connections_max)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(store_error::<SqliteDialect>)?;
        Ok(Self::from_pool(pool))
    }

    /// Creates or upgrades the toolkit's tables.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        super::migrator([
            include_str!("../../../migrations/sqlite/0001_toolkit.sql"),
            include_str!("../../../migrations/sqlite/0002_outbox.sql"),
            include_str!("../../../migrations/sqlite/0003_token_limits.sql"),
            include_str!("../../../migrations/sqlite/0004_outbox_parking.sql"),
            include_str!("../../../migrations/sqlite/0005_token_binding.sql"),
            include_str!("../../../migrations/sqlite/0006_lock_slots.sql"),
        ])
        .run(self.pool())
        .await
        .map_err(|error| StoreError::Backend(Box::new(error)))
    }
}

//! MySQL and MariaDB dialect.
//!
//! MySQL has no `ON CONFLICT`: a duplicate insert is `ON DUPLICATE KEY UPDATE fence = fence`,
//! which leaves the row unchanged but takes its exclusive lock. Under REPEATABLE READ, InnoDB
//! still reports deadlocks (1213) and lock-wait timeouts (1205) under contention; both are
//! retried. Where a constraint must bind in one state only (one pending payment per order), the
//! schema uses a generated column that is NULL outside that state plus a unique index on it,
//! since MySQL has no partial indexes.

use sqlx::MySql;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlPoolOptions, MySqlRow};

use super::{
    Dialect, Failure, PoolSettings, SqlDialect, SqlStore, classify_transport, sql_port, store_error,
};
use crate::error::StoreError;

sql_port!(MySql, MySqlConnection, MySqlRow);

/// The MySQL / MariaDB dialect.
#[derive(Debug)]
pub struct MySqlDialect;

/// A store on MySQL or MariaDB.
pub type MySqlStore = SqlStore<MySqlDialect>;

impl Dialect for MySqlDialect {
    type Db = MySql;
    const NAME: &'static str = "mysql";
    const KIND: SqlDialect = SqlDialect::MySql;
    const BEGIN_WRITE: &'static str = "BEGIN";

    fn classify(error: &sqlx::Error) -> Failure {
        if let Some(failure) = classify_transport(error) {
            return failure;
        }
        let number = error
            .as_database_error()
            .and_then(|error| error.try_downcast_ref::<MySqlDatabaseError>())
            .map(MySqlDatabaseError::number);
        match number {
            // deadlock, lock wait timeout
            Some(1213 | 1205) => Failure::Conflict,
            // too many connections, server shutting down
            Some(1040 | 1053) => Failure::Unavailable,
            // the server runs --read-only / read_only mode, or the transaction is read only:
            // not the primary (any more); nothing was written, and a retry reaches the primary.
            Some(1290 | 1792 | 1836) => Failure::Unavailable,
            _ => Failure::Other,
        }
    }
}

impl MySqlStore {
    /// Connects to `url` (`mysql://user:password@host/db`).
    pub async fn connect(url: &str, settings: PoolSettings) -> Result<Self, StoreError> {
        let pool = MySqlPoolOptions::new()
            .max_connections(settings.connections_max)
            .acquire_timeout(settings.acquire_timeout)
            .connect(url)
            .await
            .map_err(store_error::<MySqlDialect>)?;
        Ok(Self::from_pool(pool))
    }

    /// Creates or upgrades the toolkit's tables; safe to run concurrently from many instances.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        migrate_serialized(
            self.pool(),
            super::migrator([
                include_str!("../../../migrations/mysql/0001_toolkit.sql"),
                include_str!("../../../migrations/mysql/0002_outbox.sql"),
                include_str!("../../../migrations/mysql/0003_token_limits.sql"),
                include_str!("../../../migrations/mysql/0004_outbox_parking.sql"),
                include_str!("../../../migrations/mysql/0005_token_binding.sql"),
                include_str!("../../../migrations/mysql/0006_lock_slots.sql"),
            ]),
        )
        .await
    }
}

/// Name of the lock that serialises migrations of every migrator of this project.
const MIGRATION_LOCK: &str = "mideng.migrations";
/// How long a starting instance waits for another one's migrations.
const MIGRATION_LOCK_WAIT_SECS: i64 = 120;

/// Runs `migrator` on MySQL or MariaDB so that concurrent runs (instances starting together)
/// take turns. sqlx's own lock asks `GET_LOCK(name, -1)`, which MySQL reads as "wait forever"
/// but MariaDB answers with NULL at once, so two first starts would both apply the same
/// migration. Here the lock has a positive timeout, is checked, and the migrator runs on the
/// connection that holds it.
pub async fn migrate_serialized(
    pool: &sqlx::MySqlPool,
    mut migrator: sqlx::migrate::Migrator,
) -> Result<(), StoreError> {
    migrator.set_locking(false);
    let mut connection = pool.acquire().await.map_err(store_error::<MySqlDialect>)?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(MIGRATION_LOCK)
        .bind(MIGRATION_LOCK_WAIT_SECS)
        .fetch_one(&mut *connection)
        .await
        .map_err(store_error::<MySqlDialect>)?;
    if locked != Some(1) {
        return Err(StoreError::Conflict(format!(
            "another instance held the migration lock for {MIGRATION_LOCK_WAIT_SECS} s"
        )));
    }
    let outcome = migrator.run(&mut *connection).await;
    // Released on disconnect too; an explicit release lets the next instance go at once.
    let _released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *connection)
        .await;
    outcome.map_err(|error| StoreError::Backend(Box::new(error)))
}

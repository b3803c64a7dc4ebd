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
    Dialect, Failure, PoolSettings, SqlStore, Statements, classify_transport, sql_port, store_error,
};
use crate::error::StoreError;

sql_port!(MySql, MySqlConnection, MySqlRow);

/// The MySQL / MariaDB dialect.
#[derive(Debug)]
pub struct MySqlDialect;

/// A store on MySQL or MariaDB.
pub type MySqlStore = SqlStore<MySqlDialect>;

static STATEMENTS: Statements = Statements {
    record_insert: "INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at) \
        VALUES (?, ?, ?, ?, 'in_progress', 1, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE fence = fence",
    record_select_locked: "SELECT fingerprint, state, fence, owner, lease_until, response_status, response_headers, response_body, created_at, expires_at \
        FROM mideng_records WHERE tenant = ? AND operation = ? AND idempotency_key = ? FOR UPDATE",
    record_select: "SELECT fingerprint, state, fence, owner, lease_until, response_status, response_headers, response_body, created_at, expires_at \
        FROM mideng_records WHERE tenant = ? AND operation = ? AND idempotency_key = ?",
    record_take_over: "UPDATE mideng_records SET fingerprint = ?, state = 'in_progress', fence = ?, owner = ?, lease_until = ?, \
        response_status = NULL, response_headers = NULL, response_body = NULL, created_at = ?, expires_at = ? \
        WHERE tenant = ? AND operation = ? AND idempotency_key = ? AND fence = ?",
    record_complete: "UPDATE mideng_records SET state = 'completed', response_status = ?, response_headers = ?, response_body = ?, expires_at = ? \
        WHERE tenant = ? AND operation = ? AND idempotency_key = ? AND fence = ? AND owner = ? AND state = 'in_progress'",
    record_abandon: "UPDATE mideng_records SET state = 'abandoned', lease_until = 0 \
        WHERE tenant = ? AND operation = ? AND idempotency_key = ? AND fence = ? AND owner = ? AND state = 'in_progress'",
    record_purge: "DELETE FROM mideng_records WHERE expires_at <= ? AND lease_until <= ? ORDER BY expires_at LIMIT ?",
    token_insert: "INSERT INTO mideng_tokens (tenant, operation, token, expires_at) VALUES (?, ?, ?, ?)",
    token_consume: "UPDATE mideng_tokens SET consumed_at = ? \
        WHERE tenant = ? AND operation = ? AND token = ? AND consumed_at IS NULL AND expires_at > ?",
    token_select: "SELECT expires_at, consumed_at FROM mideng_tokens WHERE tenant = ? AND operation = ? AND token = ?",
    token_purge: "DELETE FROM mideng_tokens WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
    lock_insert: "INSERT INTO mideng_locks (name, owner, fence, held_until) VALUES (?, ?, 1, ?) ON DUPLICATE KEY UPDATE fence = fence",
    lock_select_locked: "SELECT owner, fence, held_until FROM mideng_locks WHERE name = ? FOR UPDATE",
    lock_take: "UPDATE mideng_locks SET owner = ?, fence = ?, held_until = ? WHERE name = ? AND fence = ?",
    lock_release: "UPDATE mideng_locks SET owner = '', held_until = 0 WHERE name = ? AND owner = ?",
    lock_renew: "UPDATE mideng_locks SET held_until = ? WHERE name = ? AND owner = ?",
    // INSERT IGNORE reports 0 affected rows on a duplicate whatever the FOUND_ROWS flag; the
    // values are validated first, so it cannot hide a truncation.
    state_insert: "INSERT IGNORE INTO mideng_states (kind, entity_id, state, version) VALUES (?, ?, ?, 0)",
    state_select: "SELECT state, version FROM mideng_states WHERE kind = ? AND entity_id = ?",
    state_compare_and_set: "UPDATE mideng_states SET state = ?, version = version + 1 WHERE kind = ? AND entity_id = ? AND state = ?",
};

impl Dialect for MySqlDialect {
    type Db = MySql;
    const NAME: &'static str = "mysql";
    const KIND: crate::constraint::SqlDialect = crate::constraint::SqlDialect::MySql;
    const BEGIN_WRITE: &'static str = "BEGIN";

    fn statements() -> &'static Statements {
        &STATEMENTS
    }

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
            super::migrator(
                include_str!("../../../migrations/mysql/0001_toolkit.sql"),
                include_str!("../../../migrations/mysql/0002_outbox.sql"),
            ),
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

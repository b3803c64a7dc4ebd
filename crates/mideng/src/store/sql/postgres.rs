//! PostgreSQL dialect.

use sqlx::Postgres;
use sqlx::postgres::{PgConnection, PgPoolOptions, PgRow};

use super::{
    Dialect, Failure, PoolSettings, SqlDialect, SqlStore, classify_transport, sql_port, store_error,
};
use crate::error::StoreError;

sql_port!(Postgres, PgConnection, PgRow);

/// The PostgreSQL dialect.
#[derive(Debug)]
pub struct PostgresDialect;

/// A store on PostgreSQL.
pub type PostgresStore = SqlStore<PostgresDialect>;

impl Dialect for PostgresDialect {
    type Db = Postgres;
    const NAME: &'static str = "postgres";
    const KIND: SqlDialect = SqlDialect::Postgres;
    const BEGIN_WRITE: &'static str = "BEGIN";

    fn classify(error: &sqlx::Error) -> Failure {
        if let Some(failure) = classify_transport(error) {
            return failure;
        }
        let database = error.as_database_error();
        match database.and_then(|error| error.code()).as_deref() {
            // serialization_failure, deadlock_detected, lock_not_available
            Some("40001" | "40P01" | "55P03") => Failure::Conflict,
            // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
            Some("57P01" | "57P02" | "57P03" | "53300") => Failure::Unavailable,
            // read_only_sql_transaction: the server is not (or no longer) the primary — a
            // connection still open to a primary demoted by a failover, or a standby. Nothing
            // was written; the primary is elsewhere, and a retry reaches it.
            Some("25006") => Failure::Unavailable,
            // The same, raised without its own code by a server in recovery (a standby, or a
            // demoted primary rejoining) when a write needs a transaction id.
            Some("XX000")
                if database.is_some_and(|error| {
                    error.message() == "cannot assign TransactionIds during recovery"
                }) =>
            {
                Failure::Unavailable
            }
            _ => Failure::Other,
        }
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host/db`).
    pub async fn connect(url: &str, settings: PoolSettings) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(settings.connections_max)
            .acquire_timeout(settings.acquire_timeout)
            .connect(url)
            .await
            .map_err(store_error::<PostgresDialect>)?;
        Ok(Self::from_pool(pool))
    }

    /// Creates or upgrades the toolkit's tables; safe to run concurrently from many instances.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        super::migrator([
            include_str!("../../../migrations/postgres/0001_toolkit.sql"),
            include_str!("../../../migrations/postgres/0002_outbox.sql"),
            include_str!("../../../migrations/postgres/0003_token_limits.sql"),
            include_str!("../../../migrations/postgres/0004_outbox_parking.sql"),
            include_str!("../../../migrations/postgres/0005_token_binding.sql"),
            include_str!("../../../migrations/postgres/0006_lock_slots.sql"),
        ])
        .run(self.pool())
        .await
        .map_err(|error| StoreError::Backend(Box::new(error)))
    }
}

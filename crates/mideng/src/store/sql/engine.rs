//! The engine every SQL contract runs on: the dialect-generic port, the [`Dialect`] trait,
//! [`SqlStore`] with its write transactions and conflict retries, and the classification of
//! driver errors.
//!
//! Invariants kept here, for every contract at once:
//! - a write transaction opens with the dialect's [`Dialect::BEGIN_WRITE`] (`BEGIN IMMEDIATE`
//!   on SQLite), so that read-then-write work takes its locks up front;
//! - a transient conflict (deadlock, serialization failure, busy file) is retried whole, with
//!   jittered back-off, at most [`CONFLICT_RETRIES_MAX`] times, and only outside a caller's
//!   transaction ([`SqlStore::write`], autocommit statements); inside one it is returned as
//!   [`StoreError::Conflict`] for the caller to retry whole;
//! - a driver error leaves the engine only through [`store_error`], so callers match on
//!   [`StoreError`] variants, never on driver codes.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

use sqlx::{Database, Pool, Transaction};

use crate::error::StoreError;
use crate::latency::{Backend, StoreTimer};
use crate::limits::CONFLICT_RETRIES_MAX;
use crate::token::TokenLimits;

/// A bound parameter of the dialect-generic port. Applications on the toolkit may use the port
/// ([`SqlConn`], [`SqlRow`], [`Arg`]) to write their own storage once for every dialect.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// An integer.
    Int(i64),
    /// Text.
    Text(&'a str),
    /// A nullable integer.
    OptInt(Option<i64>),
    /// Nullable text.
    OptText(Option<&'a str>),
    /// Nullable bytes.
    OptBytes(Option<&'a [u8]>),
}

/// Typed access to a result row by column position.
pub trait SqlRow: Send {
    /// A non-null integer column.
    fn int(&self, index: usize) -> Result<i64, sqlx::Error>;
    /// A non-null text column.
    fn text(&self, index: usize) -> Result<String, sqlx::Error>;
    /// A nullable integer column.
    fn opt_int(&self, index: usize) -> Result<Option<i64>, sqlx::Error>;
    /// A nullable text column.
    fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error>;
    /// A nullable bytes column.
    fn opt_bytes(&self, index: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;
}

/// The two operations the engine needs from a connection, implemented for the connection type
/// of every dialect (so also for a transaction, through `&mut *transaction`).
pub trait SqlConn: Send {
    /// The driver's row type.
    type Row: SqlRow;
    /// Runs a statement; returns the affected-row count as the driver reports it.
    fn run<'a>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'a;
    /// Runs a query and returns its first row, if any.
    fn row<'a>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send + 'a;
    /// Runs a query and returns all its rows (bound the query with `LIMIT`).
    fn rows<'a>(
        &'a mut self,
        sql: &'static str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send + 'a;
}

/// Stamps out [`SqlConn`] and [`SqlRow`] for one sqlx driver; the bodies are identical, only the
/// types differ, and sqlx offers no driver-generic way to bind and decode these values.
macro_rules! sql_port {
    ($database:ty, $connection:ty, $row:ty) => {
        impl $crate::store::sql::SqlRow for $row {
            fn int(&self, index: usize) -> Result<i64, sqlx::Error> {
                sqlx::Row::try_get(self, index)
            }
            fn text(&self, index: usize) -> Result<String, sqlx::Error> {
                $crate::store::sql::decode_text(self, index)?.ok_or_else(|| {
                    sqlx::Error::ColumnDecode {
                        index: index.to_string(),
                        source: "unexpected NULL".into(),
                    }
                })
            }
            fn opt_int(&self, index: usize) -> Result<Option<i64>, sqlx::Error> {
                sqlx::Row::try_get(self, index)
            }
            fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error> {
                $crate::store::sql::decode_text(self, index)
            }
            fn opt_bytes(&self, index: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
                sqlx::Row::try_get(self, index)
            }
        }

        impl $crate::store::sql::SqlConn for $connection {
            type Row = $row;
            fn run<'a>(
                &'a mut self,
                sql: &'static str,
                args: &'a [$crate::store::sql::Arg<'a>],
            ) -> impl std::future::Future<Output = Result<u64, sqlx::Error>> + Send + 'a {
                async move {
                    let query = bind_all(sqlx::query::<$database>(sql), args);
                    Ok(query.execute(self).await?.rows_affected())
                }
            }
            fn row<'a>(
                &'a mut self,
                sql: &'static str,
                args: &'a [$crate::store::sql::Arg<'a>],
            ) -> impl std::future::Future<Output = Result<Option<$row>, sqlx::Error>> + Send + 'a
            {
                async move {
                    bind_all(sqlx::query::<$database>(sql), args)
                        .fetch_optional(self)
                        .await
                }
            }
            fn rows<'a>(
                &'a mut self,
                sql: &'static str,
                args: &'a [$crate::store::sql::Arg<'a>],
            ) -> impl std::future::Future<Output = Result<Vec<$row>, sqlx::Error>> + Send + 'a {
                async move {
                    bind_all(sqlx::query::<$database>(sql), args)
                        .fetch_all(self)
                        .await
                }
            }
        }

        fn bind_all<'q>(
            mut query: sqlx::query::Query<'q, $database, <$database as sqlx::Database>::Arguments>,
            args: &[$crate::store::sql::Arg<'_>],
        ) -> sqlx::query::Query<'q, $database, <$database as sqlx::Database>::Arguments> {
            use $crate::store::sql::Arg;
            for arg in args {
                query = match *arg {
                    Arg::Int(value) => query.bind(value),
                    Arg::Text(value) => query.bind(value.to_owned()),
                    Arg::OptInt(value) => query.bind(value),
                    Arg::OptText(value) => query.bind(value.map(str::to_owned)),
                    Arg::OptBytes(value) => query.bind(value.map(<[u8]>::to_vec)),
                };
            }
            query
        }
    };
}
pub(crate) use sql_port;

/// Decodes a nullable text column; MySQL reports binary-collated text as bytes, so fall back to
/// UTF-8 bytes.
pub(crate) fn decode_text<R>(row: &R, index: usize) -> Result<Option<String>, sqlx::Error>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    match row.try_get::<Option<String>, _>(index) {
        Ok(text) => Ok(text),
        Err(first) => {
            let bytes: Option<Vec<u8>> = row.try_get(index).map_err(|_| first)?;
            bytes
                .map(String::from_utf8)
                .transpose()
                .map_err(|error| sqlx::Error::Decode(Box::new(error)))
        }
    }
}

/// How a driver error is handled (an implementation detail of the dialects).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Deadlock, serialization failure, busy database: retry.
    Conflict,
    /// Cannot reach the database.
    Unavailable,
    /// Anything else.
    Other,
}

/// The SQL dialects the toolkit speaks; a [`Dialect`] names its own as [`Dialect::KIND`], and
/// the DDL and statement writers ([`crate::constraint::PartialUnique::ddl`],
/// [`super::PerDialect`]) choose their text by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlDialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

/// What differs between PostgreSQL, MySQL/MariaDB and SQLite. The SQL text itself is not here:
/// every statement is a [`super::PerDialect`] chosen by [`Dialect::KIND`], written beside the
/// code that runs it.
pub trait Dialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Db: Database<Connection: SqlConn>;
    /// Name for logs.
    const NAME: &'static str;
    /// Which dialect, for SQL text that differs ([`super::PerDialect::get`],
    /// [`crate::constraint::PartialUnique::ddl`]).
    const KIND: SqlDialect;
    /// Opens a write transaction (`BEGIN IMMEDIATE` on SQLite, so that the write lock is taken
    /// up front and `busy_timeout` applies; a plain `BEGIN` there fails read-then-write
    /// transactions at once under contention).
    const BEGIN_WRITE: &'static str;
    #[doc(hidden)]
    fn classify(error: &sqlx::Error) -> Failure;
}

/// A store on a SQL database; see the dialect aliases `PostgresStore`, `MySqlStore`,
/// `SqliteStore`.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    token_limits: TokenLimits,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            token_limits: self.token_limits,
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlStore<{}>", D::NAME)
    }
}

/// Jittered exponential back-off for conflict retries: 1, 2, 4 … ms, capped at 64 ms, times a
/// random factor in [0.5, 1.5) so that retrying deadlock victims do not collide again. For
/// applications that retry their own transactions on [`StoreError::Conflict`] (at most
/// [`CONFLICT_RETRIES_MAX`] times, as the stores do).
pub async fn back_off(attempt: u32) {
    let base_ms = 1_u64 << attempt.min(6);
    let mut noise = [0_u8; 1];
    getrandom::fill(&mut noise).expect("the OS random number generator is available");
    let micros = base_ms * 1000 / 2 + base_ms * 1000 * u64::from(noise[0]) / 256;
    tokio::time::sleep(Duration::from_micros(micros)).await;
}
/// Classifies a driver error of dialect `D`: conflicts (deadlocks, serialization failures, a
/// busy file) and unreachable servers become the transient [`StoreError`] variants.
pub fn store_error<D: Dialect>(error: sqlx::Error) -> StoreError {
    match D::classify(&error) {
        Failure::Conflict => StoreError::Conflict(error.to_string()),
        Failure::Unavailable => StoreError::Unavailable(error.to_string()),
        Failure::Other => StoreError::Backend(Box::new(error)),
    }
}

/// Commits `transaction`. A commit the database answered with an error is classified as any
/// statement's; a connection that broke between sending COMMIT and reading its answer is
/// [`StoreError::OutcomeUnknown`] — the transaction may have committed — logged and counted
/// (`mideng_commit_outcome_unknown_total{backend}`), so that no caller takes it for "nothing
/// was written".
pub(crate) async fn commit<D: Dialect>(
    transaction: Transaction<'_, D::Db>,
) -> Result<(), StoreError> {
    transaction.commit().await.map_err(autocommit_error::<D>)
}

/// The error of a statement that commits itself (a `COMMIT`, or a statement run outside a
/// transaction): a connection that broke before its answer was read is
/// [`StoreError::OutcomeUnknown`] — it may have committed — logged and counted
/// (`mideng_commit_outcome_unknown_total{backend}`); any other error is [`store_error`]'s.
pub fn autocommit_error<D: Dialect>(error: sqlx::Error) -> StoreError {
    if lost_answer(&error) {
        let backend = Backend::of_dialect(D::KIND).label();
        tracing::warn!(target: "mideng::store", backend, %error, "commit outcome unknown: the connection broke before the database answered");
        metrics::counter!(crate::metrics::COMMIT_OUTCOME_UNKNOWN, "backend" => backend)
            .increment(1);
        StoreError::OutcomeUnknown(error.to_string())
    } else {
        store_error::<D>(error)
    }
}

/// Whether the database refused a statement for a unique constraint (a key taken).
pub fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|database| database.is_unique_violation())
}

/// Whether `error` is a connection that broke, with no answer from the database read: for a
/// COMMIT, one that may have happened.
fn lost_answer(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed
    )
}

/// Classification shared by all drivers for errors that are not the database's own.
pub(crate) fn classify_transport(error: &sqlx::Error) -> Option<Failure> {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Some(Failure::Unavailable),
        _ => None,
    }
}

/// Times one store operation on dialect `D` (see [`crate::latency`]) until the timer drops.
pub(crate) fn timer<D: Dialect>(op: &'static str) -> StoreTimer {
    StoreTimer::start(Backend::of_dialect(D::KIND), op)
}

/// A row that contradicts the schema's invariants.
pub(crate) fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// A fence read from the database; fences start at 1 and only grow.
pub(crate) fn as_fence(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt("negative fence"))
}

/// A fence written to the database (SQL integers are signed).
pub(crate) fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The future a unit of work passed to [`SqlStore::write`] returns: boxed, so that its type can
/// be named in the signature for every lifetime of the transaction it borrows, and `Send`, so
/// that `write` can run inside `async_trait` methods and spawned tasks. The same type as
/// `futures::future::BoxFuture`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `once` again while it fails with a transient conflict, backing off in between, at most
/// [`CONFLICT_RETRIES_MAX`] times: for work that is not in a transaction of its own (one
/// autocommit statement), where a retry cannot undo anything because nothing was done.
pub(crate) async fn retry_conflicts<T, Once>(
    mut once: impl FnMut() -> Once,
) -> Result<T, StoreError>
where
    Once: Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 0;
    loop {
        match once().await {
            Err(StoreError::Conflict(_)) if attempt < CONFLICT_RETRIES_MAX => {
                attempt += 1;
                back_off(attempt).await;
            }
            other => return other,
        }
    }
}

impl<D: Dialect> SqlStore<D> {
    /// A store on an existing pool. Run [`SqlStore::migrate`] (or `mideng migrate`) once first.
    pub fn from_pool(pool: Pool<D::Db>) -> Self {
        Self {
            pool,
            token_limits: TokenLimits::default(),
            dialect: PhantomData,
        }
    }

    /// The same store issuing tokens under `limits` instead of the default ones. Every
    /// instance on the database should use the same: each enforces its own against the
    /// tokens of all.
    pub fn with_token_limits(mut self, limits: TokenLimits) -> Self {
        self.token_limits = limits;
        self
    }

    /// The limits this store issues tokens under.
    pub fn token_limits(&self) -> TokenLimits {
        self.token_limits
    }

    /// The pool, for callers that run their own queries next to the toolkit's.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// Opens a write transaction the way this dialect needs (`BEGIN IMMEDIATE` on SQLite), for
    /// the transactional forms. To run work in a transaction of its own, prefer
    /// [`SqlStore::write`], which also commits and retries conflicts.
    pub async fn begin_write(&self) -> Result<Transaction<'static, D::Db>, StoreError> {
        self.pool
            .begin_with(D::BEGIN_WRITE)
            .await
            .map_err(store_error::<D>)
    }

    /// Runs `work` in a write transaction of its own ([`SqlStore::begin_write`]) and commits
    /// it. A transient conflict — a deadlock victim, a serialization failure, a busy SQLite
    /// file, at any statement or at the commit — rolls back and runs the whole again in a new
    /// transaction after [`back_off`], at most [`CONFLICT_RETRIES_MAX`] times; then the
    /// conflict is returned. Any other error rolls back and is returned at once.
    ///
    /// Because a conflict runs `work` again from the start, `work` must be safe to re-run: its
    /// only effects are statements on the transaction it is given, which roll back with it —
    /// never a message sent, a call made or a value moved out of a captured variable. Values
    /// that must be fresh on each attempt (the clock) are read inside it.
    ///
    /// `work` receives the transaction, which dereferences to the dialect's connection, and
    /// returns its future boxed:
    ///
    /// ```
    /// use mideng::StoreError;
    /// use mideng::sqlx::Database;
    /// use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlStore, store_error};
    ///
    /// const FREE_LOCK: PerDialect<&str> = mideng::dialect_sql!(
    ///     "UPDATE mideng_locks SET owner = '', held_until = 0 WHERE name = " ?
    /// );
    ///
    /// /// Work written once for every dialect, on the connection of the caller's transaction.
    /// async fn free_lock<D: Dialect>(
    ///     connection: &mut <D::Db as Database>::Connection,
    ///     name: &str,
    /// ) -> Result<u64, StoreError> {
    ///     let sql = FREE_LOCK.get::<D>();
    ///     connection.run(sql, &[Arg::Text(name)]).await.map_err(store_error::<D>)
    /// }
    ///
    /// async fn free_ledger_lock<D: Dialect>(store: &SqlStore<D>) -> Result<u64, StoreError> {
    ///     let name = String::from("ledger");
    ///     store
    ///         .write(|transaction| Box::pin(free_lock::<D>(transaction, &name)))
    ///         .await
    /// }
    /// ```
    ///
    /// An inline block is `Box::pin(async move { … })`, so that it owns the `&mut` transaction
    /// it was given; borrow captured values through references taken outside the closure.
    ///
    /// The future may borrow the caller's variables as well as the transaction. That is what
    /// the lifetime `'e` of the transaction's type is for: a `&'c mut Transaction<'e, _>` implies
    /// `'e: 'c`, so whatever lives for `'e` outlives every borrow of the transaction. A pooled
    /// transaction borrows no connection, so it can take on that lifetime. The boxing costs one
    /// allocation per attempt, nothing next to a commit, and keeps the future `Send` for
    /// `async_trait` methods and spawned tasks.
    pub async fn write<'e, T, F>(&self, mut work: F) -> Result<T, StoreError>
    where
        F: for<'c> FnMut(&'c mut Transaction<'e, D::Db>) -> BoxFuture<'c, Result<T, StoreError>>
            + Send,
    {
        let mut attempt = 0;
        loop {
            let outcome = async {
                let mut transaction: Transaction<'e, D::Db> = self.begin_write().await?;
                let value = work(&mut transaction).await?;
                commit::<D>(transaction).await?;
                Ok(value)
            }
            .await;
            match outcome {
                Err(StoreError::Conflict(_)) if attempt < CONFLICT_RETRIES_MAX => {
                    attempt += 1;
                    back_off(attempt).await;
                }
                other => return other,
            }
        }
    }

    /// Returns once every commit a read on this store could have seen is as durable as a
    /// commit of its own. A transaction whose commit waits for the synchronous standby is
    /// already visible to other sessions on the primary; if a failover then loses it, an
    /// answer built on reading it (a stored response replayed, "done already", an event
    /// acknowledged without its effect) outlives what it stood on. On PostgreSQL this commits
    /// a transaction whose only write is a transactional logical-decoding message (a WAL record
    /// no table sees; a transaction id alone writes no WAL and would not wait): its commit
    /// waits for the synchronous standby like any other (`synchronous_commit`), and the standby
    /// confirms WAL in order, so every commit before it is covered. On a node in recovery (a
    /// demoted primary a proxy still routes to) it fails, as it should. Without a synchronous
    /// standby it costs one short commit. On SQLite there is no standby; MySQL and MariaDB
    /// answer at once (their semi-synchronous replication has a setting for it, `AFTER_SYNC`:
    /// see `docs/toolkit.md`). An error means nothing is known: decide nothing on the read.
    pub async fn fence(&self) -> Result<(), StoreError> {
        if D::KIND != SqlDialect::Postgres {
            return Ok(());
        }
        metrics::counter!(crate::metrics::DURABILITY_FENCES, "backend" => Backend::of_dialect(D::KIND).label())
            .increment(1);
        self.run_once(
            "SELECT pg_logical_emit_message(true, 'mideng.fence', '')",
            &[],
        )
        .await
        .map(drop)
    }

    /// Runs one autocommit statement, retrying transient conflicts.
    pub(crate) async fn run_once(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<u64, StoreError> {
        retry_conflicts(|| async {
            let mut connection = self.pool.acquire().await.map_err(store_error::<D>)?;
            connection.run(sql, args).await.map_err(store_error::<D>)
        })
        .await
    }

    /// Reads one row outside any transaction.
    pub(crate) async fn read_row<T>(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
        decode: impl FnOnce(&<<D::Db as Database>::Connection as SqlConn>::Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut connection = self.pool.acquire().await.map_err(store_error::<D>)?;
        match connection.row(sql, args).await.map_err(store_error::<D>)? {
            None => Ok(None),
            Some(row) => decode(&row).map(Some),
        }
    }
}

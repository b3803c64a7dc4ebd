//! The SQL stores: one engine, three dialects.
//!
//! The logic of every contract is written once, generic over a [`Dialect`] that supplies the
//! SQL text, the statement that opens a write transaction, and the classification of driver
//! errors. Each dialect implements the small `SqlConn` port (execute, fetch one row) for its
//! sqlx connection type, so callers' own transactions (`&mut PgConnection`, …) plug into the
//! transactional forms [`SqlStore::begin_in`] and [`SqlStore::complete_in`].
//!
//! The write path of `begin` in one transaction:
//! 1. insert the record with a fresh owner nonce, doing nothing on a duplicate key (PostgreSQL
//!    and SQLite `ON CONFLICT DO NOTHING`; MySQL `ON DUPLICATE KEY UPDATE fence = fence`, which
//!    takes the row's exclusive lock at once instead of a shared lock that would deadlock on
//!    upgrade) — a duplicate never raises an error, so a caller's transaction is never aborted;
//! 2. read the row under a row lock (`FOR UPDATE`; SQLite's `BEGIN IMMEDIATE` already
//!    serialises writers);
//! 3. if the row carries our nonce we inserted it: proceed with fence 1; otherwise apply
//!    [`crate::record::judge`] and, for a take-over, update the row with fence + 1.
//!
//! The nonce, not the affected-row count, tells who inserted, because MySQL connections report
//! matched rather than changed rows. Transient conflicts (deadlocks, serialization failures, a
//! busy SQLite file) are retried with jittered back-off up to
//! [`crate::limits::CONFLICT_RETRIES_MAX`] times outside callers' transactions.

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{Database, Pool, Transaction};

use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Name, Scope};
use crate::limits::{CONFLICT_RETRIES_MAX, PURGE_BATCH_ROWS_MAX};
use crate::lock::{self, LockGuard, LockStore};
use crate::record::{
    Decision, Lease, Record, RecordPolicy, RecordState, RecordStore, StoredResponse, Verdict,
    judge, new_owner, retry_after,
};
use crate::state::StateStore;
use crate::token::{self, Consumption, IssuedToken, Token, TokenStore};

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

/// The SQL text of every statement, in one dialect. Parameters are positional and each is used
/// once, in order, so the same argument lists serve `$n` and `?` dialects. An implementation detail.
#[doc(hidden)]
#[derive(Debug)]
pub struct Statements {
    pub(crate) record_insert: &'static str,
    pub(crate) record_select_locked: &'static str,
    pub(crate) record_select: &'static str,
    pub(crate) record_take_over: &'static str,
    pub(crate) record_complete: &'static str,
    pub(crate) record_abandon: &'static str,
    pub(crate) record_purge: &'static str,
    pub(crate) token_insert: &'static str,
    pub(crate) token_consume: &'static str,
    pub(crate) token_select: &'static str,
    pub(crate) token_purge: &'static str,
    pub(crate) lock_insert: &'static str,
    pub(crate) lock_select_locked: &'static str,
    pub(crate) lock_take: &'static str,
    pub(crate) lock_release: &'static str,
    pub(crate) lock_renew: &'static str,
    pub(crate) state_insert: &'static str,
    pub(crate) state_select: &'static str,
    pub(crate) state_compare_and_set: &'static str,
}

/// What differs between PostgreSQL, MySQL/MariaDB and SQLite.
pub trait Dialect: Send + Sync + 'static {
    /// The sqlx driver.
    type Db: Database<Connection: SqlConn>;
    /// Name for logs.
    const NAME: &'static str;
    /// Which dialect, for DDL that differs ([`crate::constraint::PartialUnique::ddl`]).
    const KIND: crate::constraint::SqlDialect;
    /// Opens a write transaction (`BEGIN IMMEDIATE` on SQLite, so that the write lock is taken
    /// up front and `busy_timeout` applies; a plain `BEGIN` there fails read-then-write
    /// transactions at once under contention).
    const BEGIN_WRITE: &'static str;
    #[doc(hidden)]
    fn statements() -> &'static Statements;
    #[doc(hidden)]
    fn classify(error: &sqlx::Error) -> Failure;
}

/// A store on a SQL database; see the dialect aliases `PostgresStore`, `MySqlStore`,
/// `SqliteStore`.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlStore<{}>", D::NAME)
    }
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

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn as_fence(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt("negative fence"))
}

fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
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

/// Runs `$work` (an expression using `$connection`) in its own write transaction, retrying
/// transient conflicts. A macro rather than a function taking a closure, because the work
/// borrows the caller's arguments and the transaction at once, which closure signatures cannot
/// express without boxing every call.
macro_rules! in_transaction {
    ($store:expr, |$connection:ident| $work:expr) => {{
        let mut attempt = 0;
        loop {
            let outcome = async {
                let mut transaction = $store.begin_write().await?;
                let $connection = &mut *transaction;
                let value = $work.await?;
                transaction.commit().await.map_err(store_error::<D>)?;
                Ok::<_, StoreError>(value)
            }
            .await;
            match outcome {
                Err(StoreError::Conflict(_)) if attempt < CONFLICT_RETRIES_MAX => {
                    attempt += 1;
                    back_off(attempt).await;
                }
                other => break other,
            }
        }
    }};
}
pub(crate) use in_transaction;

impl<D: Dialect> SqlStore<D> {
    /// A store on an existing pool. Run [`SqlStore::migrate`] (or `mideng migrate`) once first.
    pub fn from_pool(pool: Pool<D::Db>) -> Self {
        Self {
            pool,
            dialect: PhantomData,
        }
    }

    /// The pool, for callers that run their own queries next to the toolkit's.
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// Opens a write transaction the way this dialect needs (`BEGIN IMMEDIATE` on SQLite), for
    /// the transactional forms.
    pub async fn begin_write(&self) -> Result<Transaction<'static, D::Db>, StoreError> {
        self.pool
            .begin_with(D::BEGIN_WRITE)
            .await
            .map_err(store_error::<D>)
    }

    /// Runs one autocommit statement, retrying transient conflicts.
    pub(crate) async fn run_once(
        &self,
        sql: &'static str,
        args: &[Arg<'_>],
    ) -> Result<u64, StoreError> {
        let mut attempt = 0;
        loop {
            let outcome = async {
                let mut connection = self.pool.acquire().await.map_err(store_error::<D>)?;
                connection.run(sql, args).await.map_err(store_error::<D>)
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

    /// Reads one row outside any transaction.
    async fn read_row<T>(
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

    /// [`RecordStore::begin`] inside the caller's transaction, so that the record commits or
    /// rolls back with the business write. On PostgreSQL and MySQL the record's row stays
    /// locked until the caller's transaction ends: a concurrent `begin` on the same key waits
    /// and then sees the outcome. On SQLite the transaction must have been opened with
    /// [`SqlStore::begin_write`]. Conflicts are not retried here (the caller's transaction may
    /// be aborted): they come back as [`StoreError::Conflict`] for the caller to retry whole.
    pub async fn begin_in(
        &self,
        connection: &mut <D::Db as Database>::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        begin_on::<D>(connection, scope, key, fingerprint, policy).await
    }

    /// [`RecordStore::complete`] inside the caller's transaction.
    pub async fn complete_in(
        &self,
        connection: &mut <D::Db as Database>::Connection,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        complete_on::<D>(connection, lease, response).await
    }
}

fn record_key_args<'a>(scope: &'a Scope, key: &'a IdempotencyKey) -> [Arg<'a>; 3] {
    [
        Arg::Text(scope.tenant()),
        Arg::Text(scope.operation()),
        Arg::Text(key.as_str()),
    ]
}

/// Columns of `record_select*`: fingerprint, state, fence, owner, lease_until, response_status,
/// response_headers, response_body, created_at, expires_at.
fn decode_record<R: SqlRow>(
    row: &R,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Record, StoreError> {
    let read = |error: sqlx::Error| StoreError::Corrupt(format!("unreadable record: {error}"));
    let fingerprint = Fingerprint::from_hex(&row.text(0).map_err(read)?)?;
    let state_text = row.text(1).map_err(read)?;
    let state = RecordState::parse(&state_text).ok_or_else(|| corrupt("unknown record state"))?;
    let response = match (
        row.opt_int(5).map_err(read)?,
        row.opt_text(6).map_err(read)?,
        row.opt_bytes(7).map_err(read)?,
    ) {
        (Some(status), Some(headers), Some(body)) => {
            Some(StoredResponse::from_columns(status, &headers, body)?)
        }
        _ => None,
    };
    Ok(Record {
        scope: scope.clone(),
        key: key.clone(),
        fingerprint,
        state,
        fence: as_fence(row.int(2).map_err(read)?)?,
        owner: row.text(3).map_err(read)?,
        lease_until_ms: row.int(4).map_err(read)?,
        response,
        created_at_ms: row.int(8).map_err(read)?,
        expires_at_ms: row.int(9).map_err(read)?,
    })
}

async fn begin_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    policy: &RecordPolicy,
) -> Result<Decision, StoreError> {
    let sql = D::statements();
    let now = now_ms();
    let owner = new_owner();
    let fingerprint_hex = fingerprint.to_hex();
    let lease_until_ms = now.saturating_add(policy.lease_ms());
    let expires_at_ms = now.saturating_add(policy.retention_ms());
    let [tenant, operation, key_text] = record_key_args(scope, key);
    connection
        .run(
            sql.record_insert,
            &[
                tenant,
                operation,
                key_text,
                Arg::Text(&fingerprint_hex),
                Arg::Text(&owner),
                Arg::Int(lease_until_ms),
                Arg::Int(now),
                Arg::Int(expires_at_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let row = connection
        .row(sql.record_select_locked, &record_key_args(scope, key))
        .await
        .map_err(store_error::<D>)?
        // Deleted between our insert and our read: only a concurrent purge does that.
        .ok_or_else(|| StoreError::Conflict("record vanished during begin".to_owned()))?;
    let existing = decode_record(&row, scope, key)?;
    if existing.owner == owner {
        return Ok(Decision::Proceed(Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence: existing.fence,
            owner,
            lease_until_ms,
            retention_ms: policy.retention_ms(),
            taken_over: false,
        }));
    }
    // Judge by the time the row lock was obtained, not when this call started: it may have
    // waited behind the winner, whose lease began after our first reading of the clock.
    let now = now_ms();
    let lease_until_ms = now.saturating_add(policy.lease_ms());
    let expires_at_ms = now.saturating_add(policy.retention_ms());
    match judge(
        existing.state,
        &existing.fingerprint,
        existing.lease_until_ms,
        existing.expires_at_ms,
        fingerprint,
        now,
    ) {
        Verdict::Replay => existing
            .response
            .map(Decision::Replay)
            .ok_or_else(|| corrupt("completed record without a response")),
        Verdict::InFlight { retry_after_ms } => Ok(Decision::InFlight {
            retry_after: retry_after(retry_after_ms),
        }),
        Verdict::Mismatch => Ok(Decision::Mismatch),
        Verdict::TakeOver => {
            let fence = existing.fence + 1;
            let changed = connection
                .run(
                    sql.record_take_over,
                    &[
                        Arg::Text(&fingerprint_hex),
                        Arg::Int(as_i64(fence)),
                        Arg::Text(&owner),
                        Arg::Int(lease_until_ms),
                        Arg::Int(now),
                        Arg::Int(expires_at_ms),
                        tenant,
                        operation,
                        key_text,
                        Arg::Int(as_i64(existing.fence)),
                    ],
                )
                .await
                .map_err(store_error::<D>)?;
            if changed != 1 {
                // The row is locked by this transaction, so the fence cannot have moved.
                return Err(StoreError::Conflict(
                    "take-over lost its row lock".to_owned(),
                ));
            }
            Ok(Decision::Proceed(Lease {
                scope: scope.clone(),
                key: key.clone(),
                fence,
                owner,
                lease_until_ms,
                retention_ms: policy.retention_ms(),
                taken_over: true,
            }))
        }
    }
}

async fn complete_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    lease: &Lease,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    response.validate()?;
    let headers = response.headers_json();
    let [tenant, operation, key_text] = record_key_args(&lease.scope, &lease.key);
    let changed = connection
        .run(
            D::statements().record_complete,
            &[
                Arg::OptInt(Some(i64::from(response.status))),
                Arg::OptText(Some(&headers)),
                Arg::OptBytes(Some(&response.body)),
                Arg::Int(now_ms().saturating_add(lease.retention_ms)),
                tenant,
                operation,
                key_text,
                Arg::Int(as_i64(lease.fence)),
                Arg::Text(&lease.owner),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::StaleLease)
    }
}

#[async_trait]
impl<D: Dialect> RecordStore for SqlStore<D> {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        // The cheap path first (read once, save a write): a completed record that has not
        // expired never changes, so a plain read answers a replay or a mismatch without a
        // write transaction. Anything else takes the locked path.
        if let Some(existing) = self.find_record(scope, key).await?
            && existing.state == RecordState::Completed
            && existing.expires_at_ms > now_ms()
        {
            if existing.fingerprint != *fingerprint {
                return Ok(Decision::Mismatch);
            }
            if let Some(response) = existing.response {
                return Ok(Decision::Replay(response));
            }
        }
        in_transaction!(self, |connection| begin_on::<D>(
            connection,
            scope,
            key,
            fingerprint,
            policy
        ))
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        // One conditional UPDATE is atomic on its own: no explicit transaction needed.
        let mut attempt = 0;
        loop {
            let outcome = async {
                let mut connection = self.pool.acquire().await.map_err(store_error::<D>)?;
                complete_on::<D>(&mut connection, lease, response).await
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

    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        let [tenant, operation, key_text] = record_key_args(&lease.scope, &lease.key);
        let changed = self
            .run_once(
                D::statements().record_abandon,
                &[
                    tenant,
                    operation,
                    key_text,
                    Arg::Int(as_i64(lease.fence)),
                    Arg::Text(&lease.owner),
                ],
            )
            .await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.read_row(
            D::statements().record_select,
            &record_key_args(scope, key),
            |row| decode_record(row, scope, key),
        )
        .await
    }

    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let limit = i64::from(limit.min(PURGE_BATCH_ROWS_MAX));
        self.run_once(
            D::statements().record_purge,
            &[Arg::Int(now_ms), Arg::Int(now_ms), Arg::Int(limit)],
        )
        .await
    }
}

#[async_trait]
impl<D: Dialect> TokenStore for SqlStore<D> {
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, StoreError> {
        let expires_at_ms = now_ms().saturating_add(token::ttl_ms(ttl)?);
        let token = Token::generate();
        self.run_once(
            D::statements().token_insert,
            &[
                Arg::Text(scope.tenant()),
                Arg::Text(scope.operation()),
                Arg::Text(token.as_str()),
                Arg::Int(expires_at_ms),
            ],
        )
        .await?;
        Ok(IssuedToken {
            token,
            expires_at_ms,
        })
    }

    async fn consume_token(&self, scope: &Scope, token: &Token) -> Result<Consumption, StoreError> {
        let now = now_ms();
        let identity = [
            Arg::Text(scope.tenant()),
            Arg::Text(scope.operation()),
            Arg::Text(token.as_str()),
        ];
        let [tenant, operation, token_text] = identity;
        // One conditional update decides: of many concurrent consumers exactly one changes the
        // row. The read that follows only explains a refusal.
        let changed = self
            .run_once(
                D::statements().token_consume,
                &[Arg::Int(now), tenant, operation, token_text, Arg::Int(now)],
            )
            .await?;
        if changed == 1 {
            return Ok(Consumption::Consumed);
        }
        let found = self
            .read_row(D::statements().token_select, &identity, |row| {
                let read =
                    |error: sqlx::Error| StoreError::Corrupt(format!("unreadable token: {error}"));
                Ok((row.int(0).map_err(read)?, row.opt_int(1).map_err(read)?))
            })
            .await?;
        Ok(match found {
            Some((expires_at_ms, Some(_))) if expires_at_ms > now => Consumption::AlreadyConsumed,
            _ => Consumption::Unknown,
        })
    }

    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let limit = i64::from(limit.min(PURGE_BATCH_ROWS_MAX));
        self.run_once(
            D::statements().token_purge,
            &[Arg::Int(now_ms), Arg::Int(limit)],
        )
        .await
    }
}

async fn try_acquire_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    name: &Name,
    held_until_ms: i64,
) -> Result<Option<LockGuard>, StoreError> {
    let sql = D::statements();
    let owner = new_owner();
    connection
        .run(
            sql.lock_insert,
            &[
                Arg::Text(name.as_str()),
                Arg::Text(&owner),
                Arg::Int(held_until_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let row = connection
        .row(sql.lock_select_locked, &[Arg::Text(name.as_str())])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("lock row vanished"))?;
    let read = |error: sqlx::Error| StoreError::Corrupt(format!("unreadable lock: {error}"));
    let (current_owner, fence, until) = (
        row.text(0).map_err(read)?,
        as_fence(row.int(1).map_err(read)?)?,
        row.int(2).map_err(read)?,
    );
    let guard = |fence: u64, owner: String| LockGuard {
        name: name.clone(),
        owner,
        fence,
        held_until_ms,
    };
    if current_owner == owner {
        return Ok(Some(guard(fence, owner)));
    }
    // The clock is read once the row lock is held, for the same reason as in `begin_on`.
    if until > now_ms() {
        return Ok(None);
    }
    let next = fence + 1;
    connection
        .run(
            sql.lock_take,
            &[
                Arg::Text(&owner),
                Arg::Int(as_i64(next)),
                Arg::Int(held_until_ms),
                Arg::Text(name.as_str()),
                Arg::Int(as_i64(fence)),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Some(guard(next, owner)))
}

#[async_trait]
impl<D: Dialect> LockStore for SqlStore<D> {
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        in_transaction!(self, |connection| try_acquire_on::<D>(
            connection,
            name,
            held_until_ms
        ))
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let changed = self
            .run_once(
                D::statements().lock_release,
                &[Arg::Text(guard.name.as_str()), Arg::Text(&guard.owner)],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        let changed = self
            .run_once(
                D::statements().lock_renew,
                &[
                    Arg::Int(held_until_ms),
                    Arg::Text(guard.name.as_str()),
                    Arg::Text(&guard.owner),
                ],
            )
            .await?;
        Ok(changed == 1)
    }
}

#[async_trait]
impl<D: Dialect> StateStore for SqlStore<D> {
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        let changed = self
            .run_once(
                D::statements().state_insert,
                &[Arg::Text(kind), Arg::Text(id.as_str()), Arg::Text(initial)],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        self.read_row(
            D::statements().state_select,
            &[Arg::Text(kind), Arg::Text(id.as_str())],
            |row| {
                let read =
                    |error: sqlx::Error| StoreError::Corrupt(format!("unreadable state: {error}"));
                Ok((
                    row.text(0).map_err(read)?,
                    as_fence(row.int(1).map_err(read)?)?,
                ))
            },
        )
        .await
    }

    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let changed = self
            .run_once(
                D::statements().state_compare_and_set,
                &[
                    Arg::Text(to),
                    Arg::Text(kind),
                    Arg::Text(id.as_str()),
                    Arg::Text(from),
                ],
            )
            .await?;
        Ok(changed == 1)
    }
}

/// The statements of the `ON CONFLICT` dialects (PostgreSQL and SQLite), which differ only in
/// how a row is locked for update and how a bounded delete is written.
macro_rules! on_conflict_statements {
    (locked: $locked:literal, purge_records: $purge_records:literal, purge_tokens: $purge_tokens:literal) => {
        $crate::store::sql::Statements {
            record_insert: "INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at) \
                VALUES ($1, $2, $3, $4, 'in_progress', 1, $5, $6, $7, $8) \
                ON CONFLICT (tenant, operation, idempotency_key) DO NOTHING",
            record_select_locked: concat!(
                "SELECT fingerprint, state, fence, owner, lease_until, response_status, response_headers, response_body, created_at, expires_at \
                 FROM mideng_records WHERE tenant = $1 AND operation = $2 AND idempotency_key = $3",
                $locked
            ),
            record_select: "SELECT fingerprint, state, fence, owner, lease_until, response_status, response_headers, response_body, created_at, expires_at \
                FROM mideng_records WHERE tenant = $1 AND operation = $2 AND idempotency_key = $3",
            record_take_over: "UPDATE mideng_records SET fingerprint = $1, state = 'in_progress', fence = $2, owner = $3, lease_until = $4, \
                response_status = NULL, response_headers = NULL, response_body = NULL, created_at = $5, expires_at = $6 \
                WHERE tenant = $7 AND operation = $8 AND idempotency_key = $9 AND fence = $10",
            record_complete: "UPDATE mideng_records SET state = 'completed', response_status = $1, response_headers = $2, response_body = $3, expires_at = $4 \
                WHERE tenant = $5 AND operation = $6 AND idempotency_key = $7 AND fence = $8 AND owner = $9 AND state = 'in_progress'",
            record_abandon: "UPDATE mideng_records SET state = 'abandoned', lease_until = 0 \
                WHERE tenant = $1 AND operation = $2 AND idempotency_key = $3 AND fence = $4 AND owner = $5 AND state = 'in_progress'",
            record_purge: $purge_records,
            token_insert: "INSERT INTO mideng_tokens (tenant, operation, token, expires_at) VALUES ($1, $2, $3, $4)",
            token_consume: "UPDATE mideng_tokens SET consumed_at = $1 \
                WHERE tenant = $2 AND operation = $3 AND token = $4 AND consumed_at IS NULL AND expires_at > $5",
            token_select: "SELECT expires_at, consumed_at FROM mideng_tokens WHERE tenant = $1 AND operation = $2 AND token = $3",
            token_purge: $purge_tokens,
            lock_insert: "INSERT INTO mideng_locks (name, owner, fence, held_until) VALUES ($1, $2, 1, $3) ON CONFLICT (name) DO NOTHING",
            lock_select_locked: concat!("SELECT owner, fence, held_until FROM mideng_locks WHERE name = $1", $locked),
            lock_take: "UPDATE mideng_locks SET owner = $1, fence = $2, held_until = $3 WHERE name = $4 AND fence = $5",
            lock_release: "UPDATE mideng_locks SET owner = '', held_until = 0 WHERE name = $1 AND owner = $2",
            lock_renew: "UPDATE mideng_locks SET held_until = $1 WHERE name = $2 AND owner = $3",
            state_insert: "INSERT INTO mideng_states (kind, entity_id, state, version) VALUES ($1, $2, $3, 0) ON CONFLICT (kind, entity_id) DO NOTHING",
            state_select: "SELECT state, version FROM mideng_states WHERE kind = $1 AND entity_id = $2",
            state_compare_and_set: "UPDATE mideng_states SET state = $1, version = version + 1 WHERE kind = $2 AND entity_id = $3 AND state = $4",
        }
    };
}
pub(crate) use on_conflict_statements;

/// Builds a migrator from versioned SQL scripts, keeping its bookkeeping in `table` so that it
/// never mixes with another migrator's in the same database (the toolkit uses
/// `mideng_migrations`; an application on the toolkit picks its own). Each script is
/// `(version, description, sql)`.
pub fn versioned_migrator(
    table: &'static str,
    scripts: &[(i64, &'static str, &'static str)],
) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    let mut migrator = Migrator::with_migrations(
        scripts
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    (*description).into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    migrator.dangerous_set_table_name(table);
    migrator
}

/// The toolkit's own migrator for one dialect.
pub(crate) fn migrator(toolkit: &'static str, outbox: &'static str) -> sqlx::migrate::Migrator {
    versioned_migrator(
        "mideng_migrations",
        &[(1, "toolkit", toolkit), (2, "outbox", outbox)],
    )
}

/// Pool settings shared by the SQL stores.
#[derive(Clone, Copy, Debug)]
pub struct PoolSettings {
    /// Most connections open at once.
    pub connections_max: u32,
    /// Longest wait for a free connection before the store reports itself unavailable.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            connections_max: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
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

//! [`SqlPay`]: every storage port of the service on one SQL dialect, over the toolkit's SQL
//! store (its pool, its dialect, its idempotency records in the same database). Each port
//! method that writes is one local transaction, run by the toolkit's [`SqlStore::write`]: it
//! is retried whole on a transient conflict (a deadlock victim, a serialisation failure, a busy
//! SQLite file), so nothing above it sees a half-done change. Reads run on a pooled connection
//! without a transaction (`SqlPay::connection`).
//!
//! Every port call is timed, as the flows wait for it, into the toolkit's histogram
//! `mideng_store_duration_seconds{backend, op}` ([`mideng::latency`]): `backend` is the dialect
//! (`postgres`, `mysql`, `sqlite`) and `op` the port and its method, `<port>.<method>`
//! (`orders.create_order`, `wallets.deduct`, `backend.ping`, …), so that the labels are the
//! code's own names and never a value from a request. A call's observation covers its whole
//! transaction: the wait for a pooled connection, every statement, the conflict retries; the
//! toolkit operations it makes inside (a record's `begin_in`, an outbox `enqueue_in`) are also
//! observed under their own `op`. The outbox and queue calls of [`super::Events`] are the
//! toolkit's, observed there (`outbox_backlog`, `outbox_purge`, `queue_depth`, `publish`, …).

use std::sync::Arc;

use async_trait::async_trait;
use mideng::StoreError;
use mideng::latency::{self, StoreTimer};
use mideng::record::RecordStore;
use mideng::sqlx::Database;
use mideng::sqlx::pool::PoolConnection;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, SqlStore, store_error};

use crate::domain::clock::Clock;

/// One page of a read paged by a cursor: `sql` takes the `leading` arguments, then the cursor
/// — the rows after `after` (a time and a number) in (time, number) order, the statement
/// comparing the time twice and the number once (`t > ? OR (t = ? AND no > ?)`), from the
/// start when `None` — and at most `limit` rows; each row read by `decode`.
pub(crate) async fn cursor_page<D: Dialect, T>(
    connection: &mut <D::Db as Database>::Connection,
    sql: &'static str,
    leading: &[Arg<'_>],
    after: Option<(i64, &str)>,
    limit: i64,
    decode: impl Fn(&<<D::Db as Database>::Connection as SqlConn>::Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let (after_ms, after_no) = after.unwrap_or((i64::MIN, ""));
    let mut args = leading.to_vec();
    args.extend([
        Arg::Int(after_ms),
        Arg::Int(after_ms),
        Arg::Text(after_no),
        Arg::Int(limit),
    ]);
    connection
        .rows(sql, &args)
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode)
        .collect()
}

/// A page of a list whose client names the item it starts after by its id: `cursor` (taking
/// `scope`, then the id) reads that item's (time, number) place, and the page is
/// [`cursor_page`] of `page` (taking `scope` too) after it; from the start when `after` is
/// `None`. `Ok(None)` when `after` names no item in `scope` (another tenant's, or none): a
/// cursor is refused, never read as "from the start".
#[allow(clippy::too_many_arguments)]
pub(crate) async fn page_after<D: Dialect, T>(
    connection: &mut <D::Db as Database>::Connection,
    cursor: &'static str,
    page: &'static str,
    scope: &[Arg<'_>],
    after: Option<&str>,
    limit: i64,
    decode: impl Fn(&<<D::Db as Database>::Connection as SqlConn>::Row) -> Result<T, StoreError>,
) -> Result<Option<Vec<T>>, StoreError> {
    let place = match after {
        Some(id) => {
            let mut args = scope.to_vec();
            args.push(Arg::Text(id));
            let Some(row) = connection
                .row(cursor, &args)
                .await
                .map_err(store_error::<D>)?
            else {
                return Ok(None);
            };
            let read = |error| StoreError::Corrupt(format!("unreadable row: {error}"));
            Some((row.int(0).map_err(read)?, row.text(1).map_err(read)?))
        }
        None => None,
    };
    cursor_page::<D, _>(
        connection,
        page,
        scope,
        place.as_ref().map(|(at, id)| (*at, id.as_str())),
        limit,
        decode,
    )
    .await
    .map(Some)
}

/// Every storage port of the service ([`super::Store`]) on one SQL dialect.
pub struct SqlPay<D: Dialect> {
    pub(super) store: SqlStore<D>,
    /// The service's one clock: every time a statement writes is read from it.
    pub(super) clock: Arc<dyn Clock>,
    /// The group commit of deducts, started by the first deduct that asks for it (on the
    /// runtime that serves it).
    pub(super) group_commit: std::sync::OnceLock<super::transactions::wallets::GroupCommit>,
}

impl<D: Dialect> std::fmt::Debug for SqlPay<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlPay<{}>", D::NAME)
    }
}

impl<D: Dialect> SqlPay<D> {
    /// The service's storage on the toolkit store's pool (migrated by the caller), reading the
    /// time from `clock`.
    pub fn new(store: SqlStore<D>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            group_commit: std::sync::OnceLock::new(),
        }
    }

    /// Now, by the service's clock.
    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A pooled connection for reads that need no transaction of their own: each statement
    /// autocommits, and nothing is locked beyond it. The toolkit has no public form of this
    /// (its [`SqlStore::write`] always opens a write transaction, which on SQLite would take
    /// the file's write lock for a plain read).
    pub(super) async fn connection(&self) -> Result<PoolConnection<D::Db>, StoreError> {
        self.store.pool().acquire().await.map_err(store_error::<D>)
    }

    /// Times the port call `op` (`<port>.<method>`, a constant) on this dialect until the
    /// timer drops, at the end of the call: bind it first thing, `let _timer = …`.
    pub(super) fn timer(&self, op: &'static str) -> StoreTimer {
        StoreTimer::start(latency::Backend::of_dialect(D::KIND), op)
    }
}

/// The database itself: its dialect, its idempotency records, readiness.
#[async_trait]
pub trait Backend: Send + Sync {
    /// `postgres`, `mysql` or `sqlite`.
    fn dialect(&self) -> &'static str;
    /// The idempotency records, in the same database (so that wallet operations complete
    /// their record in their own transaction).
    fn records(&self) -> Arc<dyn RecordStore>;
    /// One round trip (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
    /// The database server's clock, Unix milliseconds: the one clock every instance shares
    /// ([`crate::domain::clock::ClockReading`]). On SQLite, whose "server" is this process, it
    /// is this machine's clock.
    async fn database_time_ms(&self) -> Result<i64, StoreError>;
    /// Returns once whatever this instance read is as durable as its own commits: before an
    /// answer that says "done already" on the word of a row another transaction wrote
    /// ([`mideng::store::sql::SqlStore::fence`]: on PostgreSQL, a commit that waits for the
    /// synchronous standby; elsewhere nothing).
    async fn fence(&self) -> Result<(), StoreError>;
}

/// The database server's clock in Unix milliseconds, read at the statement's execution
/// (`clock_timestamp()` on PostgreSQL, not the transaction's start).
const DATABASE_TIME: PerDialect<&str> = PerDialect {
    postgres: "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)",
    mysql: "SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)",
    sqlite: "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
};

#[async_trait]
impl<D: Dialect> Backend for SqlPay<D> {
    fn dialect(&self) -> &'static str {
        D::NAME
    }

    fn records(&self) -> Arc<dyn RecordStore> {
        Arc::new(self.store.clone())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let _timer = self.timer("backend.ping");
        let mut connection = self.connection().await?;
        connection
            .row("SELECT 1", &[])
            .await
            .map_err(store_error::<D>)
            .map(|_| ())
    }

    async fn fence(&self) -> Result<(), StoreError> {
        let _timer = self.timer("backend.fence");
        self.store.fence().await
    }

    async fn database_time_ms(&self) -> Result<i64, StoreError> {
        let _timer = self.timer("backend.database_time_ms");
        let mut connection = self.connection().await?;
        connection
            .row(DATABASE_TIME.get::<D>(), &[])
            .await
            .map_err(store_error::<D>)?
            .ok_or_else(|| StoreError::Corrupt("the time query returned no row".to_owned()))?
            .int(0)
            .map_err(|error| StoreError::Corrupt(format!("unreadable time: {error}")))
    }
}

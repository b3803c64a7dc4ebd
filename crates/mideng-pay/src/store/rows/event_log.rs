//! What happened to each tenant, in order: every event a webhook may carry, logged in the
//! transaction of its change (beside its outbox row and its deliveries:
//! `publish_in` in [`crate::store::transactions`]) and kept for the webhook retention, so that a
//! merchant whose endpoint missed messages reads them back (`GET /v1/events`).
//!
//! Invariants held here: an event is logged if and only if its change committed (the same
//! transaction); its id is the event's, the `webhook-id` of its messages; a tenant reads only its
//! own; pages follow (time logged, id) order, so a cursor never skips or repeats an event that
//! was logged before the page was read.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::{page_after, read};
use crate::store::sql::SqlPay;

/// One logged event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedEvent {
    /// Its id: the `webhook-id` of its messages.
    pub event_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// `payment.succeeded`, `payment.closed` or `refund.succeeded`.
    pub event_type: String,
    /// The event, as JSON (what a message carries as `data`).
    pub data: String,
    /// When it was logged (Unix ms).
    pub created_at_ms: i64,
}

/// The event log.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// The tenant's events in the order they were logged, after the event `after` (from the
    /// first when `None`), at most `limit`; `None` when `after` is no event of the tenant.
    async fn logged(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<LoggedEvent>>, StoreError>;
    /// One of the tenant's events.
    async fn logged_event(
        &self,
        tenant_id: &str,
        event_id: &str,
    ) -> Result<Option<LoggedEvent>, StoreError>;
    /// Deletes up to `limit` events logged before `logged_before_ms` (the retention purge);
    /// answers how many.
    async fn purge_logged(&self, logged_before_ms: i64, limit: u32) -> Result<u64, StoreError>;
}

macro_rules! columns {
    () => {
        "event_id, tenant_id, event_type, data, created_at"
    };
}

const INSERT: PerDialect<&str> = dialect_sql!(
    "INSERT INTO pay_event_log (event_id, tenant_id, event_type, data, created_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ")"
);

const SELECT_ONE: PerDialect<&str> = dialect_sql!(
    "SELECT " columns!() " FROM pay_event_log WHERE tenant_id = " ? " AND event_id = " ?
);

const CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, event_id FROM pay_event_log WHERE tenant_id = " ? " AND event_id = " ?
);

const SELECT_PAGE: PerDialect<&str> = dialect_sql!(
    "SELECT " columns!() " FROM pay_event_log WHERE tenant_id = " ?
    " AND (created_at > " ? " OR (created_at = " ? " AND event_id > " ? "))"
    " ORDER BY created_at, event_id LIMIT " ?
);

const SELECT_OLD: PerDialect<&str> = dialect_sql!(
    "SELECT event_id FROM pay_event_log WHERE created_at < " ?
    " ORDER BY created_at, event_id LIMIT " ? skip_locked
);

const DELETE_ONE: PerDialect<&str> = dialect_sql!("DELETE FROM pay_event_log WHERE event_id = "?);

fn decode<R: SqlRow>(row: &R) -> Result<LoggedEvent, StoreError> {
    Ok(LoggedEvent {
        event_id: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        event_type: row.text(2).map_err(read)?,
        data: row.text(3).map_err(read)?,
        created_at_ms: row.int(4).map_err(read)?,
    })
}

/// Logs `event` in the caller's transaction.
pub(crate) async fn log_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    event: &LoggedEvent,
) -> Result<(), StoreError> {
    connection
        .run(
            INSERT.get::<D>(),
            &[
                Arg::Text(&event.event_id),
                Arg::Text(&event.tenant_id),
                Arg::Text(&event.event_type),
                Arg::Text(&event.data),
                Arg::Int(event.created_at_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

async fn one<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    event_id: &str,
) -> Result<Option<LoggedEvent>, StoreError> {
    connection
        .row(
            SELECT_ONE.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(event_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode)
        .transpose()
}

async fn purge_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    logged_before_ms: i64,
    limit: i64,
) -> Result<u64, StoreError> {
    let ids = connection
        .rows(
            SELECT_OLD.get::<D>(),
            &[Arg::Int(logged_before_ms), Arg::Int(limit)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(|row| row.text(0).map_err(read))
        .collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0;
    for event_id in &ids {
        deleted += connection
            .run(DELETE_ONE.get::<D>(), &[Arg::Text(event_id)])
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(deleted)
}

#[async_trait]
impl<D: Dialect> EventLog for SqlPay<D> {
    async fn logged(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<LoggedEvent>>, StoreError> {
        let _timer = self.timer("event_log.page");
        let mut connection = self.connection().await?;
        page_after::<D, _>(
            &mut connection,
            CURSOR.get::<D>(),
            SELECT_PAGE.get::<D>(),
            &[Arg::Text(tenant_id)],
            after,
            i64::from(limit),
            decode,
        )
        .await
    }

    async fn logged_event(
        &self,
        tenant_id: &str,
        event_id: &str,
    ) -> Result<Option<LoggedEvent>, StoreError> {
        let _timer = self.timer("event_log.one");
        let mut connection = self.connection().await?;
        one::<D>(&mut connection, tenant_id, event_id).await
    }

    async fn purge_logged(&self, logged_before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = self.timer("event_log.purge");
        let limit = i64::from(limit.clamp(1, mideng::limits::PURGE_BATCH_ROWS_MAX));
        self.store
            .write(|transaction| Box::pin(purge_on::<D>(transaction, logged_before_ms, limit)))
            .await
    }
}

//! Events a consumer could not process: a count of failed deliveries per message, and the
//! events parked after too many, with their payload and last error, until a person replays or
//! discards them with a recorded reason.
//!
//! ```text
//! FAILING ──(attempts reach the limit)──► PARKED ──► REPLAYED | DISCARDED
//!    └──(a delivery succeeds)──► (row removed)
//! ```

use async_trait::async_trait;
use mideng::outbox::Message;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};
use serde::Serialize;

use super::{corrupt, read};
use crate::store::sql::SqlPay;

/// Where a failed event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureStatus {
    /// Failed, redelivered with a backoff.
    Failing,
    /// Failed too often (or unreadable): acknowledged to the broker, kept here.
    Parked,
    /// Replayed by a person, and processed.
    Replayed,
    /// Discarded by a person.
    Discarded,
}

impl FailureStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureStatus::Failing => "FAILING",
            FailureStatus::Parked => "PARKED",
            FailureStatus::Replayed => "REPLAYED",
            FailureStatus::Discarded => "DISCARDED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            FailureStatus::Failing,
            FailureStatus::Parked,
            FailureStatus::Replayed,
            FailureStatus::Discarded,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// One failed event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedEvent {
    /// The message id (the outbox row's).
    pub message_id: String,
    /// Which consumer failed it (`entitlement.grant`, `entitlement.revoke`).
    pub consumer: String,
    /// Its topic.
    pub topic: String,
    /// Its payload, as delivered.
    #[serde(skip)]
    pub payload: Vec<u8>,
    /// Failed deliveries.
    pub attempts: i64,
    /// The last failure.
    pub last_error: String,
    /// Where it is.
    pub status: FailureStatus,
    /// What a person did, and why.
    pub resolution: Option<String>,
    /// First failure (Unix ms).
    pub created_at_ms: i64,
    /// Last change (Unix ms).
    pub updated_at_ms: i64,
}

macro_rules! failure_columns {
    () => {
        "message_id, consumer, topic, payload, attempts, last_error, status, resolution, created_at, updated_at"
    };
}

const FAILURE_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " failure_columns!() " FROM pay_event_failures WHERE message_id = " ? for_update
);

const FAILURE_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT " failure_columns!() " FROM pay_event_failures WHERE message_id = " ?
);

const FAILURE_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_event_failures (" failure_columns!() ") VALUES ("
    ? ", " ? ", " ? ", " ? ", 1, " ? ", " ? ", NULL, " ? ", " ? ")" on_conflict_ignore
);

const FAILURE_COUNT: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_event_failures SET attempts = " ? ", last_error = " ? ", status = " ?
    ", updated_at = " ? " WHERE message_id = " ? " AND status = 'FAILING'"
);

const FAILURE_CLEAR: PerDialect<&str> = dialect_sql!(
    "DELETE FROM pay_event_failures WHERE message_id = " ? " AND status = 'FAILING'"
);

const FAILURES_PARKED: PerDialect<&str> = dialect_sql!(
    "SELECT " failure_columns!() " FROM pay_event_failures WHERE status = 'PARKED'"
    " ORDER BY updated_at, message_id LIMIT " ?
);

const FAILURE_SETTLE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_event_failures SET status = " ? ", resolution = " ? ", last_error = " ?
    ", updated_at = " ? " WHERE message_id = " ? " AND status = 'PARKED'"
);

fn decode<R: SqlRow>(row: &R) -> Result<FailedEvent, StoreError> {
    Ok(FailedEvent {
        message_id: row.text(0).map_err(read)?,
        consumer: row.text(1).map_err(read)?,
        topic: row.text(2).map_err(read)?,
        payload: row.opt_bytes(3).map_err(read)?.unwrap_or_default(),
        attempts: row.int(4).map_err(read)?,
        last_error: row.text(5).map_err(read)?,
        status: FailureStatus::parse(&row.text(6).map_err(read)?)
            .ok_or_else(|| corrupt("unknown event failure status"))?,
        resolution: row.opt_text(7).map_err(read)?,
        created_at_ms: row.int(8).map_err(read)?,
        updated_at_ms: row.int(9).map_err(read)?,
    })
}

/// An error text as stored: one line, at most 200 characters.
fn stored_error(error: &str) -> String {
    error
        .chars()
        .map(|character| {
            if character.is_control() {
                ' '
            } else {
                character
            }
        })
        .take(200)
        .collect()
}

async fn fail_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    consumer: &str,
    message: &Message,
    error: &str,
    park_after: u32,
    now_ms: i64,
) -> Result<FailedEvent, StoreError> {
    let error = stored_error(error);
    let existing = connection
        .row(FAILURE_SELECT_LOCKED.get::<D>(), &[Arg::Text(&message.id)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode)
        .transpose()?;
    let attempts = existing
        .as_ref()
        .map_or(1, |event| event.attempts.saturating_add(1));
    let status = if attempts >= i64::from(park_after.max(1)) {
        FailureStatus::Parked
    } else {
        FailureStatus::Failing
    };
    match &existing {
        // Parked (or settled) already: another consumer's delivery got there first.
        Some(event) if event.status != FailureStatus::Failing => return Ok(event.clone()),
        Some(_) => {
            connection
                .run(
                    FAILURE_COUNT.get::<D>(),
                    &[
                        Arg::Int(attempts),
                        Arg::Text(&error),
                        Arg::Text(status.as_str()),
                        Arg::Int(now_ms),
                        Arg::Text(&message.id),
                    ],
                )
                .await
                .map_err(store_error::<D>)?;
        }
        None => {
            connection
                .run(
                    FAILURE_INSERT.get::<D>(),
                    &[
                        Arg::Text(&message.id),
                        Arg::Text(consumer),
                        Arg::Text(&message.topic),
                        Arg::OptBytes(Some(&message.payload)),
                        Arg::Text(&error),
                        Arg::Text(status.as_str()),
                        Arg::Int(now_ms),
                        Arg::Int(now_ms),
                    ],
                )
                .await
                .map_err(store_error::<D>)?;
        }
    }
    Ok(FailedEvent {
        message_id: message.id.clone(),
        consumer: consumer.to_owned(),
        topic: message.topic.clone(),
        payload: message.payload.clone(),
        attempts,
        last_error: error,
        status,
        resolution: None,
        created_at_ms: existing
            .as_ref()
            .map_or(now_ms, |event| event.created_at_ms),
        updated_at_ms: now_ms,
    })
}

/// Failed and parked events.
#[async_trait]
pub trait EventFailures: Send + Sync {
    /// Counts one failed delivery of `message` by `consumer`; parks it when the count reaches
    /// `park_after` (1: at once). The event as it now is.
    async fn fail(
        &self,
        consumer: &str,
        message: &Message,
        error: &str,
        park_after: u32,
    ) -> Result<FailedEvent, StoreError>;
    /// A delivery succeeded: its count of failures goes.
    async fn clear(&self, message_id: &str) -> Result<(), StoreError>;
    /// One event.
    async fn failed_event(&self, message_id: &str) -> Result<Option<FailedEvent>, StoreError>;
    /// Parked events, oldest first, at most `limit`.
    async fn parked(&self, limit: u32) -> Result<Vec<FailedEvent>, StoreError>;
    /// PARKED → `to` (REPLAYED or DISCARDED) with `resolution`, or (to PARKED) the new
    /// `last_error` of a replay that failed again; false when it is not parked.
    async fn settle(
        &self,
        message_id: &str,
        to: FailureStatus,
        resolution: Option<&str>,
        last_error: &str,
    ) -> Result<bool, StoreError>;
}

#[async_trait]
impl<D: Dialect> EventFailures for SqlPay<D> {
    async fn fail(
        &self,
        consumer: &str,
        message: &Message,
        error: &str,
        park_after: u32,
    ) -> Result<FailedEvent, StoreError> {
        let _timer = self.timer("event_failures.fail");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(fail_on::<D>(
                    transaction,
                    consumer,
                    message,
                    error,
                    park_after,
                    now_ms,
                ))
            })
            .await
    }

    async fn clear(&self, message_id: &str) -> Result<(), StoreError> {
        let _timer = self.timer("event_failures.clear");
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    transaction
                        .run(FAILURE_CLEAR.get::<D>(), &[Arg::Text(message_id)])
                        .await
                        .map_err(store_error::<D>)?;
                    Ok(())
                })
            })
            .await
    }

    async fn failed_event(&self, message_id: &str) -> Result<Option<FailedEvent>, StoreError> {
        let _timer = self.timer("event_failures.failed_event");
        let mut connection = self.connection().await?;
        let failed = connection
            .row(FAILURE_SELECT.get::<D>(), &[Arg::Text(message_id)])
            .await
            .map_err(store_error::<D>)?
            .as_ref()
            .map(decode)
            .transpose()?;
        drop(connection);
        // A parked event's copy is acknowledged without its effect: the parking must survive
        // a failover first (it may be a commit still waiting for the standby).
        if failed.as_ref().is_some_and(|failed| {
            matches!(
                failed.status,
                FailureStatus::Parked | FailureStatus::Discarded
            )
        }) {
            self.store.fence().await?;
        }
        Ok(failed)
    }

    async fn parked(&self, limit: u32) -> Result<Vec<FailedEvent>, StoreError> {
        let _timer = self.timer("event_failures.parked");
        let mut connection = self.connection().await?;
        connection
            .rows(FAILURES_PARKED.get::<D>(), &[Arg::Int(i64::from(limit))])
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(decode)
            .collect()
    }

    async fn settle(
        &self,
        message_id: &str,
        to: FailureStatus,
        resolution: Option<&str>,
        last_error: &str,
    ) -> Result<bool, StoreError> {
        let _timer = self.timer("event_failures.settle");
        let now_ms = self.now_ms();
        let last_error = stored_error(last_error);
        let last_error = last_error.as_str();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let changed = transaction
                        .run(
                            FAILURE_SETTLE.get::<D>(),
                            &[
                                Arg::Text(to.as_str()),
                                Arg::OptText(resolution),
                                Arg::Text(last_error),
                                Arg::Int(now_ms),
                                Arg::Text(message_id),
                            ],
                        )
                        .await
                        .map_err(store_error::<D>)?;
                    Ok(changed > 0)
                })
            })
            .await
    }
}

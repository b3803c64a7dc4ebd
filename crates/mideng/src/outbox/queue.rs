//! The in-database queue: a broker in a SQL table, for deployments that run no broker (the
//! embedded default) — publisher and subscriber of the broker port on the same database.
//!
//! Publishing inserts the message keyed by its id, doing nothing if that id is already queued
//! (the queue's own dedup, like NATS's `Nats-Msg-Id`, for as long as the message waits). A
//! subscriber claims due messages of its topic in a short transaction (`FOR UPDATE SKIP
//! LOCKED`; SQLite `BEGIN IMMEDIATE`), stamping a visibility lease: acknowledging deletes the
//! message, retrying makes it due again after a delay, and a consumer that dies leaves it to be
//! delivered again when the lease runs out. Subscribers of one topic compete (one consumer
//! group per topic). Delivery is at-least-once; consumers dedup.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::Database;

use super::sql::{claim_rows, validate};
use super::{Acker, BrokerError, Delivery, Message, Publisher, Subscriber};
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::latency::op;
use crate::limits::OUTBOX_BATCH_MAX;
use crate::record::new_owner;
use crate::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, SqlStore, store_error, timer};

/// Publishing is idempotent by message id: a duplicate insert does nothing.
const INSERT: PerDialect<&str> = crate::dialect_sql!(
    insert_ignore " mideng_queue (id, topic, message_key, payload, created_at, available_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ")"
    { mysql: "", _: " ON CONFLICT (id) DO NOTHING" }
);
const SELECT_DUE_LOCKED: PerDialect<&str> = crate::dialect_sql!(
    "SELECT id, topic, message_key, payload, deliveries FROM mideng_queue \
     WHERE topic = " ? " AND available_at <= " ? " AND claimed_until <= " ?
    " ORDER BY available_at, id LIMIT " ? skip_locked
);
const CLAIM: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_queue SET claimed_by = " ? ", claimed_until = " ?
    ", deliveries = deliveries + 1 WHERE id = " ?
);
const ACK: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_queue WHERE id = " ? " AND claimed_by = " ?
);
const RETRY: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_queue SET available_at = " ? ", claimed_until = 0 WHERE id = " ?
    " AND claimed_by = " ?
);
const DEPTH: PerDialect<&str> =
    crate::dialect_sql!("SELECT COUNT(*) FROM mideng_queue WHERE topic = "?);

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The queue on one SQL store.
pub struct SqlQueue<D: Dialect> {
    store: SqlStore<D>,
}

impl<D: Dialect> Clone for SqlQueue<D> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlQueue<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlQueue<{}>", D::NAME)
    }
}

impl<D: Dialect> SqlQueue<D> {
    /// The queue in `store`'s database (its tables come with the toolkit's migrations).
    pub fn new(store: SqlStore<D>) -> Self {
        Self { store }
    }

    /// A competing consumer of `topic`: each poll claims up to `prefetch` messages for
    /// `visibility` (how long processing one batch may take before it is delivered again).
    pub fn subscribe(
        &self,
        topic: &str,
        prefetch: u32,
        visibility: Duration,
    ) -> Result<SqlQueueSubscriber<D>, StoreError> {
        validate(topic, "-", b"")?;
        Ok(SqlQueueSubscriber {
            store: self.store.clone(),
            topic: topic.to_owned(),
            prefetch: prefetch.clamp(1, OUTBOX_BATCH_MAX),
            visibility,
            poll_interval: Duration::from_millis(100),
            owner: new_owner(),
            buffered: VecDeque::new(),
        })
    }

    /// Messages of `topic` in the queue, delivered or not (acknowledged ones are gone).
    pub async fn depth(&self, topic: &str) -> Result<u64, StoreError> {
        let _timer = timer::<D>(op::QUEUE_DEPTH);
        let mut connection = self
            .store
            .pool()
            .acquire()
            .await
            .map_err(store_error::<D>)?;
        let row = connection
            .row(DEPTH.get::<D>(), &[Arg::Text(topic)])
            .await
            .map_err(store_error::<D>)?
            .ok_or_else(|| StoreError::Corrupt("COUNT returned no row".to_owned()))?;
        Ok(u64::try_from(row.int(0).map_err(store_error::<D>)?).unwrap_or(0))
    }
}

#[async_trait]
impl<D: Dialect> Publisher for SqlQueue<D> {
    fn name(&self) -> &'static str {
        "queue"
    }

    async fn publish(&self, message: &Message) -> Result<(), BrokerError> {
        let _timer = timer::<D>(op::PUBLISH);
        validate(&message.topic, &message.key, &message.payload).map_err(StoreError::from)?;
        let now = now_ms();
        self.store
            .run_once(
                INSERT.get::<D>(),
                &[
                    Arg::Text(&message.id),
                    Arg::Text(&message.topic),
                    Arg::Text(&message.key),
                    Arg::OptBytes(Some(&message.payload)),
                    Arg::Int(now),
                    Arg::Int(now),
                ],
            )
            .await?;
        Ok(())
    }
}

/// A competing consumer of one topic of a [`SqlQueue`].
pub struct SqlQueueSubscriber<D: Dialect> {
    store: SqlStore<D>,
    topic: String,
    prefetch: u32,
    visibility: Duration,
    poll_interval: Duration,
    owner: String,
    buffered: VecDeque<(Message, bool)>,
}

impl<D: Dialect> std::fmt::Debug for SqlQueueSubscriber<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SqlQueueSubscriber")
            .field("topic", &self.topic)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlQueueSubscriber<D> {
    async fn poll(&mut self) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::QUEUE_CLAIM);
        let now = now_ms();
        let until = now.saturating_add(millis(self.visibility));
        let store = &self.store;
        let topic = self.topic.as_str();
        let owner = self.owner.as_str();
        let limit = i64::from(self.prefetch);
        let claimed = store
            .write(|transaction| {
                Box::pin(claim_on::<D>(transaction, topic, owner, now, until, limit))
            })
            .await?;
        self.buffered.extend(claimed);
        Ok(())
    }
}

async fn claim_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    topic: &str,
    owner: &str,
    now: i64,
    until: i64,
    limit: i64,
) -> Result<Vec<(Message, bool)>, StoreError> {
    let rows = claim_rows::<D>(
        connection,
        SELECT_DUE_LOCKED.get::<D>(),
        &[
            Arg::Text(topic),
            Arg::Int(now),
            Arg::Int(now),
            Arg::Int(limit),
        ],
        CLAIM.get::<D>(),
        owner,
        until,
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(message, deliveries)| (message, deliveries > 0))
        .collect())
}

#[async_trait]
impl<D: Dialect> Subscriber for SqlQueueSubscriber<D> {
    fn name(&self) -> &'static str {
        "queue"
    }

    async fn next(&mut self, wait: Duration) -> Result<Option<Delivery>, BrokerError> {
        let started = Instant::now();
        loop {
            if let Some((message, redelivered)) = self.buffered.pop_front() {
                let acker = QueueAcker::<D> {
                    store: self.store.clone(),
                    id: message.id.clone(),
                    owner: self.owner.clone(),
                };
                return Ok(Some(Delivery::new(message, redelivered, Box::new(acker))));
            }
            self.poll().await?;
            if !self.buffered.is_empty() {
                continue;
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            tokio::time::sleep(left.min(self.poll_interval)).await;
        }
    }
}

struct QueueAcker<D: Dialect> {
    store: SqlStore<D>,
    id: String,
    owner: String,
}

#[async_trait]
impl<D: Dialect> Acker for QueueAcker<D> {
    async fn ack(self: Box<Self>) -> Result<(), BrokerError> {
        let _timer = timer::<D>(op::DELIVERY_ACK);
        // Zero rows: the claim ran out and another consumer holds the message now; it will
        // process it again (and dedup), so there is nothing left to settle here.
        self.store
            .run_once(
                ACK.get::<D>(),
                &[Arg::Text(&self.id), Arg::Text(&self.owner)],
            )
            .await?;
        Ok(())
    }

    async fn retry(self: Box<Self>, after: Duration) -> Result<(), BrokerError> {
        let _timer = timer::<D>(op::DELIVERY_RETRY);
        self.store
            .run_once(
                RETRY.get::<D>(),
                &[
                    Arg::Int(now_ms().saturating_add(millis(after))),
                    Arg::Text(&self.id),
                    Arg::Text(&self.owner),
                ],
            )
            .await?;
        Ok(())
    }
}

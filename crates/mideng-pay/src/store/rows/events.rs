//! The outbox and the in-database queue, in the service's own database: events are written in
//! the transaction of the change they report (see [`super::payments`]), and a relay publishes
//! them afterwards (the toolkit's `mideng::outbox`).
//!
//! Invariant held here: no event without its change and no change without its event; an event
//! is published at least once (a relay that dies after the broker confirmed publishes again,
//! and the consumers deduplicate).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mideng::outbox::queue::SqlQueue;
use mideng::outbox::sql::{
    self as outbox_sql, Backlog, ParkedRow, Relay, RelayRound, RelaySettings,
};
use mideng::outbox::{Publisher, Subscriber};
use mideng::store::sql::Dialect;
use mideng::{InvalidInput, StoreError};

use crate::store::sql::SqlPay;

/// One relay, whatever its dialect.
#[async_trait]
pub trait OutboxRelay: Send + Sync {
    /// One round: claim, publish, mark sent or put back.
    async fn run_once(&self) -> Result<RelayRound, StoreError>;
    /// The publisher's name.
    fn publisher(&self) -> &'static str;
}

#[async_trait]
impl<D: Dialect> OutboxRelay for Relay<D> {
    async fn run_once(&self) -> Result<RelayRound, StoreError> {
        Relay::run_once(self).await
    }

    fn publisher(&self) -> &'static str {
        Relay::publisher(self)
    }
}

/// The outbox and the in-database queue of the service's database.
#[async_trait]
pub trait Events: Send + Sync {
    /// A relay from this database's outbox to `publisher`.
    fn relay(
        &self,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Result<Arc<dyn OutboxRelay>, InvalidInput>;
    /// The in-database queue of this database, as a publisher.
    fn queue(&self) -> Arc<dyn Publisher>;
    /// A competing consumer of `topic` on the in-database queue.
    fn queue_subscriber(
        &self,
        topic: &str,
        prefetch: u32,
        visibility: Duration,
    ) -> Result<Box<dyn Subscriber>, StoreError>;
    /// Messages of `topic` waiting in the in-database queue (delivered but unacknowledged
    /// ones included).
    async fn queue_depth(&self, topic: &str) -> Result<u64, StoreError>;
    /// Unsent outbox rows.
    async fn outbox_backlog(&self) -> Result<Backlog, StoreError>;
    /// Deletes at most `limit` outbox rows sent before `sent_before_ms`.
    async fn purge_sent_events(&self, sent_before_ms: i64, limit: u32) -> Result<u64, StoreError>;
    /// The outbox rows the broker refused too often, parked by the relay, oldest first.
    async fn parked_outbox(&self, limit: u32) -> Result<Vec<ParkedRow>, StoreError>;
    /// Puts a parked outbox row back in the relay's way, with a person's reason; whether it
    /// was parked.
    async fn replay_outbox(&self, id: &str, reason: &str) -> Result<bool, StoreError>;
    /// Finishes a parked outbox row unsent, with a person's reason; whether it was parked.
    async fn discard_outbox(&self, id: &str, reason: &str) -> Result<bool, StoreError>;
}

#[async_trait]
impl<D: Dialect> Events for SqlPay<D> {
    fn relay(
        &self,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Result<Arc<dyn OutboxRelay>, InvalidInput> {
        Ok(Arc::new(Relay::new(
            self.store.clone(),
            publisher,
            settings,
        )?))
    }

    fn queue(&self) -> Arc<dyn Publisher> {
        Arc::new(SqlQueue::new(self.store.clone()))
    }

    fn queue_subscriber(
        &self,
        topic: &str,
        prefetch: u32,
        visibility: Duration,
    ) -> Result<Box<dyn Subscriber>, StoreError> {
        Ok(Box::new(
            SqlQueue::new(self.store.clone()).subscribe(topic, prefetch, visibility)?,
        ))
    }

    async fn queue_depth(&self, topic: &str) -> Result<u64, StoreError> {
        SqlQueue::new(self.store.clone()).depth(topic).await
    }

    async fn outbox_backlog(&self) -> Result<Backlog, StoreError> {
        outbox_sql::backlog(&self.store).await
    }

    async fn purge_sent_events(&self, sent_before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        outbox_sql::purge_sent(&self.store, sent_before_ms, limit).await
    }

    async fn parked_outbox(&self, limit: u32) -> Result<Vec<ParkedRow>, StoreError> {
        outbox_sql::parked(&self.store, limit).await
    }

    async fn replay_outbox(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        outbox_sql::replay_parked(&self.store, id, reason).await
    }

    async fn discard_outbox(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        outbox_sql::discard_parked(&self.store, id, reason).await
    }
}

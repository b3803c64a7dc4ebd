//! The transactional outbox and the broker port it publishes through.
//!
//! A side effect for another service (grant an entitlement, notify a merchant) must happen if
//! and only if the local change that causes it commits. Calling the other service inside the
//! transaction breaks the "only if" (the call succeeds, the commit fails); calling it after the
//! commit breaks the "if" (the process dies in between). The outbox writes the event as a row in
//! the same transaction ([`sql::enqueue_in`]); a relay ([`sql::Relay`]) later reads unsent rows,
//! publishes each to a broker, and marks it sent only after the broker confirmed it.
//!
//! Delivery is therefore at-least-once: a relay that dies between the broker's confirmation
//! and the mark-sent publishes that row again after its claim expires. Consumers dedup (see
//! [`crate::dedup`]); the message id, the outbox row's id, is the dedup key brokers and
//! consumers share. In the normal path a row is claimed by one relay at a time, so several
//! relays never publish a row twice on purpose.
//!
//! The broker side is a small port: a [`Publisher`] confirms or refuses one [`Message`]; a
//! [`Subscriber`] hands out [`Delivery`]s that are acknowledged or retried. Adapters: the
//! in-database queue (`queue`, the embedded default), RabbitMQ (`rabbitmq`) and NATS JetStream
//! (`nats`), each behind its feature.

#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "_sql")]
pub mod queue;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "_sql")]
pub mod sql;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

/// One event on its way to a broker.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// Unique id (the outbox row's id): the broker's dedup id and the consumer's dedup key.
    pub id: String,
    /// What happened, for example `payment.succeeded`; brokers route on it.
    pub topic: String,
    /// The business entity it is about (for example a payment number), for logs and ordering.
    pub key: String,
    /// The body, usually JSON.
    pub payload: Vec<u8>,
}

impl fmt::Debug for Message {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Payloads may carry personal data; logs get their size only.
        formatter
            .debug_struct("Message")
            .field("id", &self.id)
            .field("topic", &self.topic)
            .field("key", &self.key)
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}

/// Why a broker did not take or hand out a message.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The broker cannot be reached or the connection broke; retry later.
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    /// The broker answered but did not accept the message (negative confirm, returned as
    /// unroutable, stream missing); retry later, and alert if it persists.
    #[error("broker refused the message: {0}")]
    Refused(String),
    /// No confirmation arrived in time; the message may or may not be stored, so it is
    /// published again later (consumers dedup).
    #[error("broker did not confirm within {0:?}")]
    Timeout(Duration),
    /// A delivered message lacks what a consumer needs (an id, a topic).
    #[error("malformed delivery: {0}")]
    Malformed(String),
    /// The local store behind an in-database queue failed.
    #[error(transparent)]
    Store(#[from] crate::StoreError),
}

/// Publishes messages with confirmation.
#[async_trait]
pub trait Publisher: Send + Sync + fmt::Debug {
    /// Short name for logs and metrics (`queue`, `rabbitmq`, `nats`).
    fn name(&self) -> &'static str;

    /// Publishes `message`; `Ok` only once the broker has durably accepted it. Publishing the
    /// same message id again is allowed (consumers dedup; some brokers drop it themselves).
    async fn publish(&self, message: &Message) -> Result<(), BrokerError>;
}

/// Settles one delivery with the broker that handed it out.
#[async_trait]
pub trait Acker: Send {
    /// The message is processed: do not deliver it again.
    async fn ack(self: Box<Self>) -> Result<(), BrokerError>;

    /// The message could not be processed now: deliver it again, not before `after` where the
    /// broker supports a delay.
    async fn retry(self: Box<Self>, after: Duration) -> Result<(), BrokerError>;
}

/// A message handed to a consumer, to be settled exactly once.
pub struct Delivery {
    /// The message.
    pub message: Message,
    /// Whether the broker delivered it before (a hint; consumers dedup regardless).
    pub redelivered: bool,
    acker: Box<dyn Acker>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Delivery")
            .field("message", &self.message)
            .field("redelivered", &self.redelivered)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// A delivery settled through `acker`.
    pub fn new(message: Message, redelivered: bool, acker: Box<dyn Acker>) -> Self {
        Self {
            message,
            redelivered,
            acker,
        }
    }

    /// Acknowledges the delivery.
    pub async fn ack(self) -> Result<(), BrokerError> {
        self.acker.ack().await
    }

    /// Asks for redelivery, not before `after` where the broker supports it.
    pub async fn retry(self, after: Duration) -> Result<(), BrokerError> {
        self.acker.retry(after).await
    }
}

/// Hands out deliveries of one topic to one consumer group: the members of a group compete for
/// messages, and a message not acknowledged (the consumer died) is delivered again.
#[async_trait]
pub trait Subscriber: Send {
    /// Short name for logs and metrics.
    fn name(&self) -> &'static str;

    /// The next delivery, waiting at most `wait`; `None` when none arrived in that time.
    /// After a broker outage the subscriber reconnects on the next call.
    async fn next(&mut self, wait: Duration) -> Result<Option<Delivery>, BrokerError>;
}

/// How long a relay waits before publishing a row again after its `attempts`-th failure:
/// 1 s, 2 s, 4 s … capped at `cap`. Pure, so the schedule is testable.
pub fn retry_delay(attempts: u32, cap: Duration) -> Duration {
    let exponent = attempts.saturating_sub(1).min(16);
    Duration::from_secs(1_u64 << exponent).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let cap = Duration::from_secs(60);
        let delays: Vec<u64> = (1..=8)
            .map(|attempt| retry_delay(attempt, cap).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(retry_delay(u32::MAX, cap), cap);
    }

    #[test]
    fn message_debug_hides_the_payload() {
        let message = Message {
            id: "ob_1".to_owned(),
            topic: "payment.succeeded".to_owned(),
            key: "P1".to_owned(),
            payload: b"{\"user_id\":\"alice\"}".to_vec(),
        };
        let shown = format!("{message:?}");
        assert!(shown.contains("payload_bytes: 19"), "{shown}");
        assert!(!shown.contains("alice"), "{shown}");
    }
}

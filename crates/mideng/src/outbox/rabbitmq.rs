//! The broker port on RabbitMQ (AMQP 0-9-1, through lapin).
//!
//! # Topology
//!
//! Every topic has one durable queue named `{queue_prefix}.{topic}` (for example
//! `mideng.payment.succeeded`). Messages go through the default exchange with the queue name as
//! routing key, so no exchange or binding has to be declared. Each message is published with
//! `mandatory`, persistent delivery mode (2), `message_id` = [`Message::id`], the header
//! `mideng-key` = [`Message::key`] and content type `application/json`. Both the publisher
//! (before the first publish of a topic on a connection) and the subscriber declare the queue,
//! so either may start first. Consumers of one topic form one group by sharing its queue.
//!
//! # Guarantees
//!
//! - [`RabbitPublisher::publish`] returns `Ok` only after a publisher confirm (`basic.ack`)
//!   without a returned message: RabbitMQ has then routed the message to the queue and, for a
//!   persistent message on a durable queue, written it to disk. A negative confirm or a message
//!   returned as unroutable (the queue was deleted) is [`BrokerError::Refused`]; no confirm
//!   within [`RabbitSettings::confirm_timeout`] is [`BrokerError::Timeout`] (the message may
//!   still be stored); a broken connection is [`BrokerError::Unavailable`]. After a timeout or a
//!   connection error the connection is dropped and the next publish opens a new one.
//! - Delivery is at-least-once: a delivery not acknowledged before its channel closes is
//!   delivered again (with `redelivered` set), and a publish retried after a lost confirm
//!   stores the message twice. Consumers dedup on [`Message::id`]; RabbitMQ itself does not.
//! - [`Delivery::retry`] requeues the message at once (`basic.nack` with requeue): RabbitMQ has
//!   no per-message delay without plugins, so the `after` argument is ignored and a consumer
//!   that wants a pause must pause its own loop before asking for the next delivery.
//! - A delivery without a `message_id` cannot be deduplicated: it is rejected without requeue
//!   (dropped, or dead-lettered if a policy configures that) and reported once as
//!   [`BrokerError::Malformed`].

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer};
use tokio::sync::Mutex;
use tokio::time::timeout;

use super::{Acker, BrokerError, Delivery, Message, Publisher, Subscriber};
use crate::latency::{Backend, StoreTimer, op};
use crate::redact::SecretUrl;

/// Bound on opening a connection and setting up its channel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The header carrying [`Message::key`].
const KEY_HEADER: &str = "mideng-key";
/// The content type set on every message.
const CONTENT_TYPE: &str = "application/json";
/// AMQP delivery mode 2: the broker writes the message to disk.
const PERSISTENT: u8 = 2;

/// Where and how to reach RabbitMQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RabbitSettings {
    /// AMQP URL, for example `amqp://guest:guest@127.0.0.1:5672/%2f` (the vhost is
    /// percent-encoded). Its password is never logged.
    pub url: SecretUrl,
    /// Prefix of the queue names: the queue of topic `t` is `{queue_prefix}.{t}`.
    pub queue_prefix: String,
    /// How long a publish waits for the broker's confirm.
    pub confirm_timeout: Duration,
    /// How many unacknowledged deliveries a subscriber may hold (`basic.qos`; 0 = no limit).
    pub prefetch: u16,
}

impl Default for RabbitSettings {
    fn default() -> Self {
        Self {
            url: SecretUrl::new("amqp://guest:guest@127.0.0.1:5672/%2f"),
            queue_prefix: "mideng".to_owned(),
            confirm_timeout: Duration::from_secs(5),
            prefetch: 32,
        }
    }
}

impl RabbitSettings {
    /// The queue of `topic`, checked against AMQP's 255-byte limit on names.
    fn queue_name(&self, topic: &str) -> Result<ShortString, BrokerError> {
        if topic.is_empty() {
            return Err(BrokerError::Refused("empty topic".to_owned()));
        }
        ShortString::try_new(format!("{}.{topic}", self.queue_prefix))
            .map_err(|error| BrokerError::Refused(format!("queue for topic {topic:?}: {error}")))
    }

    /// Connects and opens one channel (unbounded: callers bound it with [`CONNECT_TIMEOUT`]
    /// together with the channel's setup, through [`RabbitSettings::opened`]).
    async fn open_channel(&self, role: &str) -> lapin::Result<(Connection, Channel)> {
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from(format!("mideng-{role}")));
        let connection = Connection::connect(self.url.expose(), properties).await?;
        let channel = connection.create_channel().await?;
        Ok((connection, channel))
    }

    /// Maps the outcome of a connect-and-set-up bounded by [`CONNECT_TIMEOUT`].
    fn opened<T>(
        &self,
        role: &str,
        outcome: Result<lapin::Result<T>, tokio::time::error::Elapsed>,
    ) -> Result<T, BrokerError> {
        match outcome {
            Ok(Ok(opened)) => {
                tracing::debug!(url = %self.url, role, "connected to RabbitMQ");
                Ok(opened)
            }
            Ok(Err(error)) => Err(lapin_error(&format!("connecting to {}", self.url), &error)),
            Err(_) => Err(BrokerError::Unavailable(format!(
                "connecting to {} took longer than {CONNECT_TIMEOUT:?}",
                self.url
            ))),
        }
    }
}

/// Channel-level (soft) AMQP errors mean the broker answered and said no; everything else
/// (I/O, closed connection, hard errors) means it is not reachable as it should be.
fn lapin_error(doing: &str, error: &lapin::Error) -> BrokerError {
    if error.is_amqp_soft_error() {
        BrokerError::Refused(format!("{doing}: {error}"))
    } else {
        BrokerError::Unavailable(format!("{doing}: {error}"))
    }
}

fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// One open connection of a publisher, with the topics whose queue it declared.
struct Link {
    generation: u64,
    // Dropping the link closes the connection.
    connection: Connection,
    channel: Channel,
    declared: HashSet<String>,
}

impl Link {
    fn usable(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

#[derive(Default)]
struct LinkSlot {
    link: Option<Link>,
    generations: u64,
}

/// Publishes to RabbitMQ with publisher confirms and `mandatory`; see the [module
/// docs](self). Connects lazily on the first publish and again after a failure. Safe to share
/// between tasks: publishes from several tasks go out concurrently on one confirm channel.
pub struct RabbitPublisher {
    settings: RabbitSettings,
    slot: Mutex<LinkSlot>,
}

impl fmt::Debug for RabbitPublisher {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RabbitPublisher")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RabbitPublisher {
    /// A publisher that connects on its first publish.
    pub fn new(settings: RabbitSettings) -> Self {
        Self {
            settings,
            slot: Mutex::new(LinkSlot::default()),
        }
    }

    /// The settings it was created with.
    pub fn settings(&self) -> &RabbitSettings {
        &self.settings
    }

    /// The confirm channel, connected and with the queue of `topic` declared, and the
    /// generation of its connection. The lock is held only for this setup, not while a
    /// publish waits for its confirm.
    async fn channel_for(
        &self,
        topic: &str,
        queue: &ShortString,
    ) -> Result<(Channel, u64), BrokerError> {
        let mut slot = self.slot.lock().await;
        let mut link = match slot.link.take() {
            Some(link) if link.usable() => link,
            stale => {
                if stale.is_some() {
                    tracing::info!("RabbitMQ connection lost; reconnecting");
                }
                let setup = async {
                    let (connection, channel) = self.settings.open_channel("publisher").await?;
                    channel
                        .confirm_select(ConfirmSelectOptions::default())
                        .await?;
                    Ok((connection, channel))
                };
                let (connection, channel) = self
                    .settings
                    .opened("publisher", timeout(CONNECT_TIMEOUT, setup).await)?;
                slot.generations += 1;
                Link {
                    generation: slot.generations,
                    connection,
                    channel,
                    declared: HashSet::new(),
                }
            }
        };
        if !link.declared.contains(topic) {
            let declare =
                link.channel
                    .queue_declare(queue.clone(), durable_queue(), FieldTable::default());
            match timeout(self.settings.confirm_timeout, declare).await {
                Ok(Ok(_)) => {
                    link.declared.insert(topic.to_owned());
                }
                // The link is dropped (not put back): a failed declare closes the channel.
                Ok(Err(error)) => {
                    return Err(lapin_error(&format!("declaring queue {queue}"), &error));
                }
                Err(_) => {
                    return Err(BrokerError::Unavailable(format!(
                        "declaring queue {queue} took longer than {:?}",
                        self.settings.confirm_timeout
                    )));
                }
            }
        }
        let handle = (link.channel.clone(), link.generation);
        slot.link = Some(link);
        Ok(handle)
    }

    /// Drops the connection of `generation` if it is still the current one, so that the next
    /// publish reconnects.
    async fn drop_link(&self, generation: u64) {
        let mut slot = self.slot.lock().await;
        if slot
            .link
            .as_ref()
            .is_some_and(|link| link.generation == generation)
        {
            slot.link = None;
        }
    }

    /// Forgets that the queue of `topic` was declared, so that the next publish declares it
    /// again (it was deleted behind the publisher's back).
    async fn forget_topic(&self, generation: u64, topic: &str) {
        let mut slot = self.slot.lock().await;
        if let Some(link) = slot.link.as_mut()
            && link.generation == generation
        {
            link.declared.remove(topic);
        }
    }
}

#[async_trait]
impl Publisher for RabbitPublisher {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    async fn publish(&self, message: &Message) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::RabbitMq, op::PUBLISH);
        let queue = self.settings.queue_name(&message.topic)?;
        if message.id.is_empty() {
            return Err(BrokerError::Refused("empty message id".to_owned()));
        }
        let id = ShortString::try_new(message.id.as_str())
            .map_err(|error| BrokerError::Refused(format!("message id: {error}")))?;
        let mut headers = FieldTable::default();
        headers.insert(
            ShortString::from(KEY_HEADER),
            AMQPValue::LongString(LongString::from(message.key.as_str())),
        );
        let properties = BasicProperties::default()
            .with_message_id(id)
            .with_delivery_mode(PERSISTENT)
            .with_content_type(ShortString::from(CONTENT_TYPE))
            .with_headers(headers);
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };

        let (channel, generation) = self.channel_for(&message.topic, &queue).await?;
        let confirm_timeout = self.settings.confirm_timeout;
        let publish = async {
            let confirm = channel
                .basic_publish(
                    ShortString::default(),
                    queue.clone(),
                    options,
                    &message.payload,
                    properties,
                )
                .await?;
            confirm.await
        };
        match timeout(confirm_timeout, publish).await {
            Ok(Ok(Confirmation::Ack(None))) => Ok(()),
            Ok(Ok(Confirmation::Ack(Some(returned)))) => {
                self.forget_topic(generation, &message.topic).await;
                Err(BrokerError::Refused(format!(
                    "returned unroutable ({} {}): queue {queue} is missing",
                    returned.reply_code, returned.reply_text
                )))
            }
            Ok(Ok(Confirmation::Nack(_))) => Err(BrokerError::Refused(format!(
                "negatively confirmed (nack) for queue {queue}"
            ))),
            Ok(Ok(Confirmation::NotRequested)) => {
                self.drop_link(generation).await;
                Err(BrokerError::Unavailable(
                    "channel was not in confirm mode".to_owned(),
                ))
            }
            Ok(Err(error)) => {
                self.drop_link(generation).await;
                Err(lapin_error(&format!("publishing to {queue}"), &error))
            }
            Err(_) => {
                // A silent connection is not trusted any more: reconnect on the next publish.
                tracing::warn!(%queue, id = %message.id, ?confirm_timeout, "no publisher confirm in time");
                self.drop_link(generation).await;
                Err(BrokerError::Timeout(confirm_timeout))
            }
        }
    }
}

/// A consumer's connection: the channel with its `basic.consume` stream.
struct Feed {
    // Kept so that the connection stays open; dropping the feed closes it and RabbitMQ
    // requeues the deliveries that were not settled.
    _connection: Connection,
    _channel: Channel,
    consumer: Consumer,
}

/// Consumes the queue of one topic with manual acknowledgements; see the [module
/// docs](self). All subscribers of a topic share its queue and compete for its messages.
/// Connects lazily on the first [`Subscriber::next`] and again after a failure.
pub struct RabbitSubscriber {
    settings: RabbitSettings,
    topic: String,
    feed: Option<Feed>,
}

impl fmt::Debug for RabbitSubscriber {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RabbitSubscriber")
            .field("settings", &self.settings)
            .field("topic", &self.topic)
            .field("connected", &self.feed.is_some())
            .finish()
    }
}

impl RabbitSubscriber {
    /// A subscriber to `topic` that connects on its first [`Subscriber::next`].
    pub fn new(settings: RabbitSettings, topic: impl Into<String>) -> Self {
        Self {
            settings,
            topic: topic.into(),
            feed: None,
        }
    }

    /// The topic it consumes.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    async fn open(&self) -> Result<Feed, BrokerError> {
        let queue = self.settings.queue_name(&self.topic)?;
        let prefetch = self.settings.prefetch;
        let setup = async {
            let (connection, channel) = self.settings.open_channel("subscriber").await?;
            channel
                .queue_declare(queue.clone(), durable_queue(), FieldTable::default())
                .await?;
            channel
                .basic_qos(prefetch, BasicQosOptions::default())
                .await?;
            let consumer = channel
                .basic_consume(
                    queue.clone(),
                    ShortString::default(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            Ok((connection, (channel, consumer)))
        };
        let (connection, (channel, consumer)) = self
            .settings
            .opened("subscriber", timeout(CONNECT_TIMEOUT, setup).await)?;
        Ok(Feed {
            _connection: connection,
            _channel: channel,
            consumer,
        })
    }

    /// Rebuilds the [`Message`] of a delivery; rejects (without requeue) one without an id.
    async fn receive(&self, delivery: lapin::message::Delivery) -> Result<Delivery, BrokerError> {
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(ShortString::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_owned);
        let Some(id) = id else {
            let rejected = delivery
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await;
            if let Err(error) = rejected {
                tracing::warn!(%error, "could not reject a delivery without message_id");
            }
            return Err(BrokerError::Malformed(format!(
                "delivery on {} has no message_id; rejected without requeue",
                delivery.routing_key
            )));
        };
        let prefix = format!("{}.", self.settings.queue_prefix);
        let topic = delivery
            .routing_key
            .as_str()
            .strip_prefix(&prefix)
            .filter(|topic| !topic.is_empty())
            .unwrap_or(&self.topic)
            .to_owned();
        let key = match delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|headers| headers.inner().get(KEY_HEADER))
        {
            Some(AMQPValue::LongString(key)) => {
                String::from_utf8_lossy(key.as_bytes()).into_owned()
            }
            Some(AMQPValue::ShortString(key)) => key.as_str().to_owned(),
            _ => String::new(),
        };
        let message = Message {
            id,
            topic,
            key,
            payload: delivery.data,
        };
        let acker = RabbitAcker {
            acker: delivery.acker,
        };
        Ok(Delivery::new(
            message,
            delivery.redelivered,
            Box::new(acker),
        ))
    }
}

#[async_trait]
impl Subscriber for RabbitSubscriber {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    async fn next(&mut self, wait: Duration) -> Result<Option<Delivery>, BrokerError> {
        let mut feed = match self.feed.take() {
            Some(feed) => feed,
            None => self.open().await?,
        };
        match timeout(wait, feed.consumer.next()).await {
            Err(_) => {
                self.feed = Some(feed);
                Ok(None)
            }
            Ok(Some(Ok(delivery))) => {
                self.feed = Some(feed);
                self.receive(delivery).await.map(Some)
            }
            // The feed is dropped: the next call reconnects.
            Ok(Some(Err(error))) => Err(lapin_error("consuming", &error)),
            Ok(None) => Err(BrokerError::Unavailable(format!(
                "the broker cancelled the consumer of topic {} (queue deleted?)",
                self.topic
            ))),
        }
    }
}

/// Settles one RabbitMQ delivery on the channel it came from.
struct RabbitAcker {
    acker: lapin::Acker,
}

/// `Ok(false)` from lapin means the channel closed (or the delivery was settled already):
/// the broker redelivers what was not settled, so the caller must not count on this one.
fn settled(what: &str, outcome: lapin::Result<bool>) -> Result<(), BrokerError> {
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => Err(BrokerError::Unavailable(format!(
            "{what} not sent: the channel is closed (the broker redelivers the message)"
        ))),
        Err(error) => Err(lapin_error(what, &error)),
    }
}

#[async_trait]
impl Acker for RabbitAcker {
    async fn ack(self: Box<Self>) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::RabbitMq, op::DELIVERY_ACK);
        settled("ack", self.acker.ack(BasicAckOptions::default()).await)
    }

    /// Requeues at once: `after` is ignored (see the module docs).
    async fn retry(self: Box<Self>, _after: Duration) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::RabbitMq, op::DELIVERY_RETRY);
        let options = BasicNackOptions {
            multiple: false,
            requeue: true,
        };
        settled("nack", self.acker.nack(options).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_hides_the_password() {
        let shown = format!(
            "{:?}",
            RabbitSettings {
                url: SecretUrl::new("amqps://app:p%40ss@mq:5671/prod"),
                ..RabbitSettings::default()
            }
        );
        assert!(!shown.contains("p%40ss"), "{shown}");
    }

    #[test]
    fn queue_names_are_prefixed_and_bounded() {
        let settings = RabbitSettings::default();
        let queue = settings
            .queue_name("payment.succeeded")
            .expect("short name");
        assert_eq!(queue.as_str(), "mideng.payment.succeeded");
        assert!(matches!(
            settings.queue_name(""),
            Err(BrokerError::Refused(_))
        ));
        assert!(matches!(
            settings.queue_name(&"t".repeat(300)),
            Err(BrokerError::Refused(_))
        ));
    }
}

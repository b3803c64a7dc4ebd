//! The broker port on NATS JetStream (through async-nats; works with server 2.9 and later).
//!
//! # Topology
//!
//! One stream ([`NatsSettings::stream`], `MIDENG` by default, file storage) captures the
//! subjects `{subject_prefix}.>`; topic `t` is published on subject `{subject_prefix}.t`. Each
//! message carries the header `Nats-Msg-Id` = [`Message::id`] and `Mideng-Key` =
//! [`Message::key`]. A consumer group is a durable pull consumer on the stream, filtered on one
//! topic's subject, with explicit acks, an ack wait of 30 s and unlimited redeliveries. The
//! publisher and the subscriber both create the stream if it is missing (an existing stream is
//! used as it is, whatever its configuration).
//!
//! # Guarantees
//!
//! - [`NatsPublisher::publish`] returns `Ok` only after JetStream's publish ack, that is once
//!   the stream stored the message. No stream for the subject, a rejected message or a server
//!   error is [`BrokerError::Refused`]; no ack within [`NatsSettings::ack_timeout`] is
//!   [`BrokerError::Timeout`] (the message may still be stored); a disconnected client is
//!   [`BrokerError::Unavailable`] (async-nats reconnects by itself in the background).
//! - Within [`NatsSettings::duplicate_window`] (2 minutes by default) the stream drops a second
//!   message with the same `Nats-Msg-Id` and acknowledges it with `duplicate: true`, which is a
//!   success. A republish after the window is stored again, so delivery remains
//!   at-least-once and consumers still dedup on [`Message::id`].
//! - A delivery not acknowledged within the ack wait (the consumer died) is delivered again.
//!   [`Delivery::retry`] sends a negative ack with the requested delay. A delivery without
//!   `Nats-Msg-Id`, or on another topic's subject (whatever the server's consumer of that name
//!   was made to deliver), is terminated for this consumer (`+TERM`, never redelivered to it)
//!   and reported once as [`BrokerError::Malformed`]; it never reaches the handler.
//! - [`Subscriber::next`] issues one pull request for one message that expires after the
//!   requested wait (at least 10 ms).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{CreateStreamError, PublishError, PublishErrorKind};
use async_nats::jetstream::message::AckKind;
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self, Context};
use async_nats::{Client, ConnectOptions, HeaderMap, HeaderValue};
use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::sync::Mutex;
use tokio::time::timeout;

use super::{Acker, BrokerError, Delivery, Message, Publisher, Subscriber};
use crate::latency::{Backend, StoreTimer, op};
use crate::redact::SecretUrl;

/// Bound on the initial connect (async-nats reconnects by itself afterwards).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The header carrying [`Message::key`].
const KEY_HEADER: &str = "Mideng-Key";
/// How long the server waits for an ack before it delivers a message again.
const ACK_WAIT: Duration = Duration::from_secs(30);
/// The shortest pull request; the server does not honour shorter expiries reliably.
const MIN_EXPIRES: Duration = Duration::from_millis(10);
/// How long past a pull request's expiry the client waits for the server's end of it.
const PULL_GRACE: Duration = Duration::from_secs(1);

/// Where and how to reach NATS JetStream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsSettings {
    /// Server URL, for example `nats://127.0.0.1:4222` (credentials in it are never logged);
    /// the servers of a cluster as a comma-separated list
    /// (`nats://a:4222,nats://b:4222,nats://c:4222`), of which the client connects to any that
    /// answers and, after losing it, reconnects to another.
    pub url: SecretUrl,
    /// Name of the stream holding the outbox messages.
    pub stream: String,
    /// Prefix of the subjects: topic `t` is published on `{subject_prefix}.t`, and the
    /// stream captures `{subject_prefix}.>`.
    pub subject_prefix: String,
    /// How long a publish waits for JetStream's ack (also bounds stream and consumer
    /// requests and the acks of deliveries).
    pub ack_timeout: Duration,
    /// The stream's deduplication window on `Nats-Msg-Id` (used when the stream is created).
    pub duplicate_window: Duration,
    /// How many servers of a JetStream cluster keep a copy of the stream (used when the stream
    /// is created): 1 (the default) on a single server; 3 on a cluster of three, so that the
    /// stream and its consumers survive the loss of any one server. At most the cluster's size.
    pub replicas: usize,
}

impl Default for NatsSettings {
    fn default() -> Self {
        Self {
            url: SecretUrl::new("nats://127.0.0.1:4222"),
            stream: "MIDENG".to_owned(),
            subject_prefix: "mideng".to_owned(),
            ack_timeout: Duration::from_secs(5),
            duplicate_window: Duration::from_secs(120),
            replicas: 1,
        }
    }
}

impl NatsSettings {
    /// The subject of `topic`; a topic with wildcards, whitespace or empty tokens is refused.
    fn subject(&self, topic: &str) -> Result<String, BrokerError> {
        let valid = !topic.is_empty()
            && topic.split('.').all(|token| {
                !token.is_empty()
                    && !token.contains(|c: char| c == '*' || c == '>' || c.is_whitespace())
            });
        if valid {
            Ok(format!("{}.{topic}", self.subject_prefix))
        } else {
            Err(BrokerError::Refused(format!(
                "topic {topic:?} is not a valid NATS subject suffix"
            )))
        }
    }

    fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream.clone(),
            subjects: vec![format!("{}.>", self.subject_prefix)],
            storage: StorageType::File,
            duplicate_window: self.duplicate_window,
            num_replicas: self.replicas.max(1),
            ..stream::Config::default()
        }
    }

    /// The servers of [`NatsSettings::url`]: its comma-separated URLs.
    fn servers(&self) -> Vec<&str> {
        self.url
            .expose()
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect()
    }

    /// Connects once, bounded by [`CONNECT_TIMEOUT`], and returns the client with a JetStream
    /// context whose requests are bounded by `ack_timeout`.
    async fn connect(&self) -> Result<(Client, Context), BrokerError> {
        let options = ConnectOptions::new()
            .name("mideng")
            .connection_timeout(CONNECT_TIMEOUT);
        let servers = self.servers();
        let client = match timeout(CONNECT_TIMEOUT, options.connect(servers.as_slice())).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                return Err(BrokerError::Unavailable(format!(
                    "connecting to {}: {error}",
                    self.url
                )));
            }
            Err(_) => {
                return Err(BrokerError::Unavailable(format!(
                    "connecting to {} took longer than {CONNECT_TIMEOUT:?}",
                    self.url
                )));
            }
        };
        tracing::debug!(url = %self.url, "connected to NATS");
        let mut context = jetstream::new(client.clone());
        context.set_timeout(self.ack_timeout);
        Ok((client, context))
    }

    /// Gets the stream, creating it if it is missing.
    async fn ensure_stream(&self, context: &Context) -> Result<stream::Stream, BrokerError> {
        context
            .get_or_create_stream(self.stream_config())
            .await
            .map_err(|error| stream_error(&self.stream, &error))
    }
}

fn stream_error(stream: &str, error: &CreateStreamError) -> BrokerError {
    use async_nats::jetstream::context::CreateStreamErrorKind as Kind;
    match error.kind() {
        Kind::JetStream(_) | Kind::EmptyStreamName | Kind::InvalidStreamName => {
            BrokerError::Refused(format!("stream {stream}: {error}"))
        }
        _ => BrokerError::Unavailable(format!("stream {stream}: {error}")),
    }
}

/// A header value; values with line breaks cannot travel in NATS headers.
fn header_value(what: &str, value: &str) -> Result<HeaderValue, BrokerError> {
    HeaderValue::from_str(value)
        .map_err(|_| BrokerError::Refused(format!("{what} contains a line break")))
}

/// A publisher's client, with whether the stream is known to exist.
struct Link {
    client: Client,
    context: Context,
    stream_ready: bool,
}

/// Publishes to NATS JetStream with publish acks and `Nats-Msg-Id` dedup; see the [module
/// docs](self). Connects lazily on the first publish (and again on later publishes while the
/// first connect fails); once connected, async-nats reconnects by itself. Safe to share
/// between tasks.
pub struct NatsPublisher {
    settings: NatsSettings,
    link: Mutex<Option<Link>>,
}

impl fmt::Debug for NatsPublisher {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("NatsPublisher")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl NatsPublisher {
    /// A publisher that connects on its first publish.
    pub fn new(settings: NatsSettings) -> Self {
        Self {
            settings,
            link: Mutex::new(None),
        }
    }

    /// The settings it was created with.
    pub fn settings(&self) -> &NatsSettings {
        &self.settings
    }

    /// A connected JetStream context whose stream exists. The lock is held only for this
    /// setup, not while a publish waits for its ack.
    async fn context(&self) -> Result<Context, BrokerError> {
        let mut slot = self.link.lock().await;
        let mut link = match slot.take() {
            Some(link) => link,
            None => {
                let (client, context) = self.settings.connect().await?;
                Link {
                    client,
                    context,
                    stream_ready: false,
                }
            }
        };
        if link.client.connection_state() == State::Disconnected {
            *slot = Some(link);
            return Err(BrokerError::Unavailable(
                "disconnected from NATS (reconnecting in the background)".to_owned(),
            ));
        }
        if !link.stream_ready {
            let ensured = self.settings.ensure_stream(&link.context).await;
            link.stream_ready = ensured.is_ok();
            if let Err(error) = ensured {
                *slot = Some(link);
                return Err(error);
            }
        }
        let context = link.context.clone();
        *slot = Some(link);
        Ok(context)
    }

    async fn publish_error(&self, subject: &str, error: &PublishError) -> BrokerError {
        match error.kind() {
            PublishErrorKind::StreamNotFound => {
                // Deleted behind the publisher's back: create it again on the next publish.
                if let Some(link) = self.link.lock().await.as_mut() {
                    link.stream_ready = false;
                }
                BrokerError::Refused(format!("no stream captures {subject}"))
            }
            PublishErrorKind::TimedOut => BrokerError::Timeout(self.settings.ack_timeout),
            PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => {
                BrokerError::Unavailable(format!("publishing to {subject}: {error}"))
            }
            _ => BrokerError::Refused(format!("publishing to {subject}: {error}")),
        }
    }
}

#[async_trait]
impl Publisher for NatsPublisher {
    fn name(&self) -> &'static str {
        "nats"
    }

    async fn publish(&self, message: &Message) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::Nats, op::PUBLISH);
        let subject = self.settings.subject(&message.topic)?;
        if message.id.is_empty() {
            return Err(BrokerError::Refused("empty message id".to_owned()));
        }
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, header_value("message id", &message.id)?);
        headers.insert(KEY_HEADER, header_value("message key", &message.key)?);

        let context = self.context().await?;
        let ack_timeout = self.settings.ack_timeout;
        let publish = async {
            let ack = context
                .publish_with_headers(subject.clone(), headers, message.payload.clone().into())
                .await?;
            ack.await
        };
        match timeout(ack_timeout, publish).await {
            Ok(Ok(ack)) => {
                if ack.duplicate {
                    tracing::debug!(id = %message.id, %subject, sequence = ack.sequence, "duplicate publish dropped by the stream");
                }
                Ok(())
            }
            Ok(Err(error)) => Err(self.publish_error(&subject, &error).await),
            Err(_) => Err(BrokerError::Timeout(ack_timeout)),
        }
    }
}

/// A subscriber's client and its pull consumer.
struct Feed {
    client: Client,
    consumer: PullConsumer,
}

/// Pulls one topic's messages through a durable consumer; see the [module docs](self).
/// Subscribers created with the same durable name form one group and compete for messages.
/// Connects lazily on the first [`Subscriber::next`] and again after a failure.
pub struct NatsSubscriber {
    settings: NatsSettings,
    topic: String,
    durable_name: String,
    feed: Option<Feed>,
}

impl fmt::Debug for NatsSubscriber {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("NatsSubscriber")
            .field("settings", &self.settings)
            .field("topic", &self.topic)
            .field("durable_name", &self.durable_name)
            .field("connected", &self.feed.is_some())
            .finish()
    }
}

impl NatsSubscriber {
    /// A subscriber to `topic` in the consumer group `durable_name` (a JetStream durable
    /// name: no `.`, `*`, `>` or whitespace) that connects on its first [`Subscriber::next`].
    pub fn new(
        settings: NatsSettings,
        topic: impl Into<String>,
        durable_name: impl Into<String>,
    ) -> Self {
        Self {
            settings,
            topic: topic.into(),
            durable_name: durable_name.into(),
            feed: None,
        }
    }

    /// The topic it consumes.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    async fn open(&self) -> Result<Feed, BrokerError> {
        let subject = self.settings.subject(&self.topic)?;
        let (client, context) = self.settings.connect().await?;
        let stream = self.settings.ensure_stream(&context).await?;
        let config = pull::Config {
            durable_name: Some(self.durable_name.clone()),
            filter_subject: subject,
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_deliver: -1,
            ..pull::Config::default()
        };
        let consumer = stream
            .get_or_create_consumer(&self.durable_name, config)
            .await
            .map_err(|error| {
                use async_nats::jetstream::stream::ConsumerErrorKind as Kind;
                let text = format!("consumer {}: {error}", self.durable_name);
                match error.kind() {
                    Kind::TimedOut | Kind::Request => BrokerError::Unavailable(text),
                    _ => BrokerError::Refused(text),
                }
            })?;
        Ok(Feed { client, consumer })
    }

    /// Rebuilds the [`Message`] of a JetStream message; terminates one without an id.
    async fn receive(&self, message: jetstream::Message) -> Result<Delivery, BrokerError> {
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(name))
                .map(|value| value.as_str().to_owned())
        };
        let Some(id) = header(NATS_MESSAGE_ID.as_ref()).filter(|id| !id.is_empty()) else {
            if let Err(error) = message.ack_with(AckKind::Term).await {
                tracing::warn!(%error, "could not terminate a message without Nats-Msg-Id");
            }
            return Err(BrokerError::Malformed(format!(
                "message on {} has no Nats-Msg-Id; terminated",
                message.subject
            )));
        };
        let key = header(KEY_HEADER).unwrap_or_default();
        let prefix = format!("{}.", self.settings.subject_prefix);
        let topic = message
            .subject
            .as_str()
            .strip_prefix(&prefix)
            .filter(|topic| !topic.is_empty())
            .unwrap_or(&self.topic)
            .to_owned();
        // A message of another topic never reaches this topic's handler, whatever the durable
        // consumer on the server was made to deliver (a consumer of the same name created with
        // another filter, or recreated without one): its handler would misread it, and a
        // consumer that records failures by message id would then keep the rightful
        // consumer's copy from being processed. Each consumer holds its own copy of a stream
        // message, so terminating this one leaves the others as they are.
        if topic != self.topic {
            if let Err(error) = message.ack_with(AckKind::Term).await {
                tracing::warn!(%error, "could not terminate a message of another topic");
            }
            return Err(BrokerError::Malformed(format!(
                "message {id} on {} reached the consumer {} of {}; terminated for it",
                message.subject, self.durable_name, self.topic
            )));
        }
        let redelivered = message.info().is_ok_and(|info| info.delivered > 1);
        let rebuilt = Message {
            id,
            topic,
            key,
            payload: message.payload.to_vec(),
        };
        Ok(Delivery::new(
            rebuilt,
            redelivered,
            Box::new(NatsAcker { message }),
        ))
    }
}

#[async_trait]
impl Subscriber for NatsSubscriber {
    fn name(&self) -> &'static str {
        "nats"
    }

    async fn next(&mut self, wait: Duration) -> Result<Option<Delivery>, BrokerError> {
        let feed = match self.feed.take() {
            Some(feed) if feed.client.connection_state() == State::Disconnected => {
                // Dropped: the next call connects afresh.
                return Err(BrokerError::Unavailable(
                    "disconnected from NATS".to_owned(),
                ));
            }
            Some(feed) => feed,
            None => self.open().await?,
        };
        let expires = wait.max(MIN_EXPIRES);
        let pull = async {
            let mut batch = feed
                .consumer
                .batch()
                .max_messages(1)
                .expires(expires)
                .messages()
                .await
                .map_err(|error| error.to_string())?;
            batch
                .next()
                .await
                .transpose()
                .map_err(|error| error.to_string())
        };
        match timeout(expires + PULL_GRACE, pull).await {
            Ok(Ok(Some(message))) => {
                self.feed = Some(feed);
                self.receive(message).await.map(Some)
            }
            Ok(Ok(None)) | Err(_) => {
                self.feed = Some(feed);
                Ok(None)
            }
            // The feed is dropped: the next call reconnects.
            Ok(Err(error)) => Err(BrokerError::Unavailable(format!(
                "pulling from consumer {}: {error}",
                self.durable_name
            ))),
        }
    }
}

/// Settles one JetStream delivery.
struct NatsAcker {
    message: jetstream::Message,
}

#[async_trait]
impl Acker for NatsAcker {
    /// Acknowledges and waits for the server to confirm the ack (a double ack).
    async fn ack(self: Box<Self>) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::Nats, op::DELIVERY_ACK);
        self.message
            .double_ack()
            .await
            .map_err(|error| BrokerError::Unavailable(format!("ack: {error}")))
    }

    /// Negative ack: the server delivers the message again after `after`.
    async fn retry(self: Box<Self>, after: Duration) -> Result<(), BrokerError> {
        let _timer = StoreTimer::start(Backend::Nats, op::DELIVERY_RETRY);
        let delay = (!after.is_zero()).then_some(after);
        self.message
            .ack_with(AckKind::Nak(delay))
            .await
            .map_err(|error| BrokerError::Unavailable(format!("nak: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_hides_the_password() {
        let shown = format!(
            "{:?}",
            NatsSettings {
                url: SecretUrl::new("tls://u:pw@nats:4222"),
                ..NatsSettings::default()
            }
        );
        assert!(!shown.contains("pw@"), "{shown}");
    }

    #[test]
    fn subjects_are_prefixed_and_checked() {
        let settings = NatsSettings::default();
        assert_eq!(
            settings.subject("payment.succeeded").expect("valid topic"),
            "mideng.payment.succeeded"
        );
        for bad in ["", "a..b", "a.*", "a.>", "has space", ".a"] {
            assert!(
                matches!(settings.subject(bad), Err(BrokerError::Refused(_))),
                "{bad:?}"
            );
        }
    }
}

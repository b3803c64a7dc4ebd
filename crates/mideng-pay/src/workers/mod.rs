//! What runs beside the API, each a loop that a stop signal ends between rounds:
//!
//! - [`relay`] — drains the outbox into the broker (publish, confirm, mark sent);
//! - [`consumer`] — consumes `payment.succeeded` and grants entitlements exactly once, and
//!   `refund.succeeded` to revoke the grant of a payment refunded in full;
//! - [`reconcile`] — asks the channels about payments that stayed PENDING;
//! - [`bill`] — matches the channels' daily bills against our payments and refunds, and keeps
//!   every disagreement as a case;
//! - [`purge`] — deletes what is past its retention;
//! - [`webhooks`] — posts the merchants' webhook deliveries, signed, with retries.
//!
//! Every worker is safe to run on every instance at once: the relay claims rows with
//! `SKIP LOCKED` and leases, consumers dedup in the grant's own transaction, reconcilers take a
//! per-payment lock and change state by compare-and-set, purges delete disjoint batches,
//! dispatchers claim each webhook delivery by compare-and-set.

pub mod bill;
pub mod consumer;
pub mod purge;
pub mod reconcile;
pub mod relay;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use mideng::StoreError;
use mideng::outbox::sql::RelaySettings;
use mideng::outbox::{Publisher, Subscriber};

use crate::store::Events;

/// Where events go between the relay and the consumers.
#[derive(Clone, Debug, Default)]
pub enum Broker {
    /// The in-database queue, in the service's own database (the embedded default).
    #[default]
    Queue,
    /// RabbitMQ: a durable queue per topic, publisher confirms, `mandatory`.
    RabbitMq(mideng::outbox::rabbitmq::RabbitSettings),
    /// NATS JetStream: one stream, `Nats-Msg-Id` dedup.
    Nats(mideng::outbox::nats::NatsSettings),
}

impl Broker {
    /// `queue`, `rabbitmq` or `nats`.
    pub fn name(&self) -> &'static str {
        match self {
            Broker::Queue => "queue",
            Broker::RabbitMq(_) => "rabbitmq",
            Broker::Nats(_) => "nats",
        }
    }

    /// The publisher the relay uses. Broker connections are made lazily, so a broker that is
    /// down at start delays events and never the service.
    pub fn publisher(&self, store: &dyn Events) -> Arc<dyn Publisher> {
        match self {
            Broker::Queue => store.queue(),
            Broker::RabbitMq(settings) => Arc::new(mideng::outbox::rabbitmq::RabbitPublisher::new(
                settings.clone(),
            )),
            Broker::Nats(settings) => {
                Arc::new(mideng::outbox::nats::NatsPublisher::new(settings.clone()))
            }
        }
    }

    /// A competing consumer of `topic` in `settings.group`.
    pub fn subscriber(
        &self,
        store: &dyn Events,
        topic: &str,
        settings: &ConsumerSettings,
    ) -> Result<Box<dyn Subscriber>, StoreError> {
        Ok(match self {
            Broker::Queue => {
                store.queue_subscriber(topic, settings.prefetch, settings.visibility)?
            }
            Broker::RabbitMq(rabbit) => Box::new(mideng::outbox::rabbitmq::RabbitSubscriber::new(
                rabbit.clone(),
                topic,
            )),
            Broker::Nats(nats) => Box::new(mideng::outbox::nats::NatsSubscriber::new(
                nats.clone(),
                topic,
                &settings.group,
            )),
        })
    }
}

/// The relay worker.
#[derive(Clone, Copy, Debug)]
pub struct RelayWorkerSettings {
    /// Batch, claim lease, publish timeout, retry cap.
    pub relay: RelaySettings,
    /// Pause after a round that found less than a full batch.
    pub interval: Duration,
}

impl Default for RelayWorkerSettings {
    fn default() -> Self {
        Self {
            relay: RelaySettings::default(),
            interval: Duration::from_millis(200),
        }
    }
}

/// The entitlement consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSettings {
    /// Consumer group (the NATS durable name; RabbitMQ and the queue compete per topic).
    pub group: String,
    /// Messages fetched ahead (queue and RabbitMQ).
    pub prefetch: u32,
    /// How long a fetched queue message stays invisible to other consumers.
    pub visibility: Duration,
    /// When a delivery cannot be processed now, how long before it is tried again.
    pub retry_after: Duration,
    /// Claim each event in the dedup table (off only as the storm's test switch).
    pub dedup: bool,
    /// Also run the revocation consumer: the grant of a payment refunded in full is revoked
    /// (default true).
    pub revoke_on_refund: bool,
    /// Failed deliveries of one event before it is parked for a person (default 10).
    pub park_after: u32,
    /// Longest pause before a failed event comes again (the pause doubles per failure from
    /// `retry_after`; default 60 s).
    pub retry_cap: Duration,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            group: "mideng-entitlements".to_owned(),
            prefetch: 16,
            visibility: Duration::from_secs(30),
            retry_after: Duration::from_secs(1),
            dedup: true,
            revoke_on_refund: true,
            park_after: 10,
            retry_cap: Duration::from_secs(60),
        }
    }
}

/// The event side of the service: which broker, and which of its workers run here.
#[derive(Clone, Debug, Default)]
pub struct EventSettings {
    /// The broker.
    pub broker: Broker,
    /// The relay worker; `None`: none on this instance.
    pub relay: Option<RelayWorkerSettings>,
    /// The entitlement consumer; `None`: none on this instance.
    pub consumer: Option<ConsumerSettings>,
    /// The webhook dispatcher; `None`: none on this instance.
    pub webhooks: Option<webhooks::WebhookSettings>,
}

impl EventSettings {
    /// Every worker, on `broker`.
    pub fn all_on(broker: Broker) -> Self {
        Self {
            broker,
            relay: Some(RelayWorkerSettings::default()),
            consumer: Some(ConsumerSettings::default()),
            webhooks: Some(webhooks::WebhookSettings::default()),
        }
    }
}

/// Sleeps for `pause` unless `stop` turns true first; true when stopping.
pub(crate) async fn pause_or_stop(
    pause: Duration,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(pause) => false,
        _ = stop.wait_for(|stop| *stop) => true,
    }
}

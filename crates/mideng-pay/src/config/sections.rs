//! The sections of `mideng.toml` besides `[channels]`, each with its defaults (those of the
//! settings it becomes) and its ranges (checked by [`super::ServeConfig`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::flows::PaymentSettings;
use crate::transport::TransportSettings;
use crate::workers::bill::BillSettings;
use crate::workers::purge::PurgeSettings;
use crate::workers::reconcile::ReconcileSettings;
use crate::workers::{ConsumerSettings, RelayWorkerSettings};
use mideng::outbox::nats::NatsSettings;
use mideng::outbox::rabbitmq::RabbitSettings;
use mideng::redact::SecretUrl;

/// Which broker carries the outbox's events.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    /// The in-database queue (no broker to run).
    #[default]
    Queue,
    /// RabbitMQ (`[events.rabbitmq]`).
    Rabbitmq,
    /// NATS JetStream (`[events.nats]`).
    Nats,
}

/// `[events]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct EventsConfig {
    /// `queue`, `rabbitmq` or `nats`.
    pub broker: BrokerKind,
    /// Run the outbox relay on this instance.
    pub relay: bool,
    /// Run the entitlement consumer on this instance.
    pub consumer: bool,
    /// With the consumer, also revoke the grant of a payment refunded in full (default true).
    pub revoke_on_refund: bool,
    /// Outbox rows per relay round (1 ..= 1000).
    pub relay_batch: u32,
    /// Pause after a relay round that found less than a full batch, ms (10 ..= 60000).
    pub relay_interval_ms: u64,
    /// How long a relay's claim keeps others off its rows, seconds (2 × publish timeout ..= 3600).
    pub claim_lease_secs: u64,
    /// Longest wait for one broker confirmation, seconds (1 ..= 60).
    pub publish_timeout_secs: u64,
    /// Longest delay between attempts at an unpublished row, seconds (1 ..= 3600).
    pub retry_cap_secs: u64,
    /// The consumer group (the NATS durable consumer's name).
    pub consumer_group: String,
    /// How long a message the entitlement consumer took stays invisible to the others before
    /// it is delivered again, when that consumer neither acknowledged nor refused it (it
    /// crashed): 1 to 3600 s (default 30).
    pub consumer_visibility_secs: u64,
    /// Failed deliveries of one event before the consumer parks it for a person (1 ..= 1000).
    pub consumer_park_after: u32,
    /// Refusals of one outbox row by the broker (it answered, and did not take the message)
    /// before the relay parks it for a person (1 ..= 1000; an outage never counts).
    pub relay_park_after_refusals: u32,
    /// Days sent outbox rows are kept before the purge deletes them (1 ..= 400).
    pub sent_retention_days: u64,
    /// RabbitMQ.
    pub rabbitmq: RabbitConfig,
    /// NATS JetStream.
    pub nats: NatsConfig,
}

impl Default for EventsConfig {
    fn default() -> Self {
        let relay = mideng::outbox::sql::RelaySettings::default();
        let worker = RelayWorkerSettings::default();
        Self {
            broker: BrokerKind::Queue,
            relay: true,
            consumer: true,
            revoke_on_refund: true,
            relay_batch: relay.batch,
            relay_interval_ms: u64::try_from(worker.interval.as_millis()).unwrap_or(200),
            claim_lease_secs: relay.claim_lease.as_secs(),
            publish_timeout_secs: relay.publish_timeout.as_secs(),
            retry_cap_secs: relay.retry_cap.as_secs(),
            consumer_group: ConsumerSettings::default().group,
            consumer_visibility_secs: ConsumerSettings::default().visibility.as_secs(),
            consumer_park_after: ConsumerSettings::default().park_after,
            relay_park_after_refusals: relay.park_after_refusals,
            sent_retention_days: PurgeSettings::default().sent_events_retention.as_secs() / 86_400,
            rabbitmq: RabbitConfig::default(),
            nats: NatsConfig::default(),
        }
    }
}

/// `[events.rabbitmq]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RabbitConfig {
    /// `amqp://user:password@host:5672/%2f` (give passwords by environment).
    pub url: SecretUrl,
    /// Queues are `<prefix>.<topic>`.
    pub queue_prefix: String,
}

impl Default for RabbitConfig {
    fn default() -> Self {
        let defaults = RabbitSettings::default();
        Self {
            url: defaults.url,
            queue_prefix: defaults.queue_prefix,
        }
    }
}

/// `[events.nats]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// `nats://host:4222`; a cluster's servers comma-separated
    /// (`nats://a:4222,nats://b:4222,nats://c:4222`), so that any live one is reached.
    pub url: SecretUrl,
    /// The JetStream stream (created if missing).
    pub stream: String,
    /// Subjects are `<prefix>.<topic>`.
    pub subject_prefix: String,
    /// Copies of the stream kept by a JetStream cluster when the stream is created (1 to 5):
    /// 3 on a cluster of three, so that it survives the loss of any one server.
    pub replicas: usize,
}

impl Default for NatsConfig {
    fn default() -> Self {
        let defaults = NatsSettings::default();
        Self {
            url: defaults.url,
            stream: defaults.stream,
            subject_prefix: defaults.subject_prefix,
            replicas: defaults.replicas,
        }
    }
}

/// `[purge]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PurgeConfig {
    /// Seconds between rounds (1 ..= 86400).
    pub interval_secs: u64,
    /// Rows per batch (1 ..= 10000).
    pub batch: u32,
}

impl Default for PurgeConfig {
    fn default() -> Self {
        let defaults = PurgeSettings::default();
        Self {
            interval_secs: defaults.interval.as_secs(),
            batch: defaults.batch,
        }
    }
}

/// `[reconcile]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcileConfig {
    /// Seconds between rounds (1 ..= 3600).
    pub interval_secs: u64,
    /// Payments pending for longer than this are examined, seconds (0 ..= 86400).
    pub min_age_secs: u64,
    /// Most payments per round (1 ..= 10000).
    pub batch: u32,
    /// Whether the daily job reconciles yesterday's bills of every configured channel.
    pub bills: bool,
    /// How long after a day ends (Beijing time) its bills are asked for, seconds (the channels
    /// publish by 09:00 and 10:00; default 10:30).
    pub bill_after_day_end_secs: u64,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        let defaults = ReconcileSettings::default();
        Self {
            interval_secs: defaults.interval.as_secs(),
            min_age_secs: defaults.min_age.as_secs(),
            batch: defaults.batch,
            bills: true,
            bill_after_day_end_secs: BillSettings::default().after_day_end.as_secs(),
        }
    }
}

/// `[http]`: see [`crate::transport::TransportSettings`] for what each bounds and why.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// A request head's deadline, also the idle timeout of a kept-alive connection.
    pub header_read_timeout_ms: u64,
    /// A whole request body's deadline, from the end of its head.
    pub body_read_timeout_ms: u64,
    /// Connections served at once.
    pub connections_max: usize,
    /// Largest request head.
    pub header_bytes_max: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        let defaults = TransportSettings::default();
        Self {
            header_read_timeout_ms: millis(defaults.header_read_timeout),
            body_read_timeout_ms: millis(defaults.body_read_timeout),
            connections_max: defaults.connections_max,
            header_bytes_max: defaults.header_bytes_max,
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `[database]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://…`, `postgres://…` or `mysql://…`; unset: `sqlite://<data_dir>/mideng.db`.
    pub url: Option<SecretUrl>,
    /// Pool size.
    pub connections_max: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            connections_max: 16,
        }
    }
}

/// `[redis]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://…`; unset (and no cluster): in-process tokens and locks (a single instance
    /// only).
    pub url: Option<SecretUrl>,
    /// Seed nodes of a Redis Cluster (`["redis://10.0.0.1:7000", …]`), instead of `url`.
    pub cluster: Vec<SecretUrl>,
    /// Key prefix (default `mideng`).
    pub prefix: Option<String>,
}

/// `[simulator]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SimulatorConfig {
    /// Run it; unset: run it when no channel is configured.
    pub enabled: Option<bool>,
    /// Where it listens.
    pub listen: SocketAddr,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
        }
    }
}

/// `[payments]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentsConfig {
    /// Creating a payment needs a one-time `Idempotency-Token`.
    pub token_required: bool,
    /// How long an attempt accepts payment, seconds (60 ..= 86400).
    pub expire_after_secs: u64,
    /// Seconds past a trade's expiry before the close route and reconciliation treat it as
    /// over, for clock skew with the channel (0 ..= 3600).
    pub expiry_grace_secs: u64,
    /// How far this instance's clock may be from the database's before it refuses requests,
    /// seconds (0 ..= 300; 0: never).
    pub clock_skew_max_secs: u64,
    /// How long a request waits for an order's lock, ms (0 ..= 10000).
    pub lock_wait_ms: u64,
    /// The order lock's lease, ms (3000 ..= 300000): how long a holder that stopped renewing
    /// keeps the order from the next writer.
    pub order_lock_lease_ms: u64,
    /// Days the answers of money-moving requests are kept for replay (30 ..= 400).
    pub funds_retention_days: u64,
    /// Completed answers each instance keeps in memory for replays (0 ..= 1000000; 0: none).
    pub replay_cache_entries: usize,
    /// Longest time a completed answer stays in memory, seconds (1 ..= 86400).
    pub replay_cache_ttl_secs: u64,
    /// How long an instance keeps a resolved API key, ms (0 ..= 60000; 0: none): the delay
    /// before a re-keyed key stops working there.
    pub tenant_cache_ms: u64,
    /// Refund the refund cases by themselves (a payment PAID after its order was canceled, a
    /// charge for an order already paid): default true; false records, counts and logs them
    /// for a person.
    pub automatic_refunds: bool,
}

impl Default for PaymentsConfig {
    fn default() -> Self {
        let defaults = PaymentSettings::default();
        Self {
            token_required: defaults.token_required,
            expire_after_secs: defaults.expire_after.as_secs(),
            expiry_grace_secs: defaults.expiry_grace.as_secs(),
            clock_skew_max_secs: defaults.clock_skew_max.as_secs(),
            lock_wait_ms: u64::try_from(defaults.lock_wait.as_millis()).unwrap_or(2000),
            order_lock_lease_ms: u64::try_from(defaults.order_lock_lease.as_millis())
                .unwrap_or(30_000),
            funds_retention_days: defaults.funds_retention.as_secs() / 86_400,
            replay_cache_entries: defaults.replay_cache_entries,
            replay_cache_ttl_secs: defaults.replay_cache_ttl.as_secs(),
            tenant_cache_ms: u64::try_from(defaults.tenant_cache.as_millis()).unwrap_or(5_000),
            automatic_refunds: defaults.automatic_refunds,
        }
    }
}

/// `[wallet]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WalletConfig {
    /// How deducts race on one wallet: `row-lock`, `optimistic` or `conditional-update` (the
    /// default; docs/toolkit.md's three deduction schemes have the measurements).
    pub strategy: crate::domain::wallet::WalletStrategy,
}

/// `[webhooks]`: the merchants' webhook dispatcher.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Run the dispatcher on this instance (default true; every instance may).
    pub enabled: bool,
    /// Whole-attempt timeout, 1 to 30 s (default 10).
    pub timeout_secs: u64,
    /// Let tenants register loopback, private and link-local addresses (default false: a
    /// tenant must not make the service post into its own network). On for a laptop demo.
    pub allow_private_targets: bool,
    /// IP and port pairs an endpoint may name although they are not globally routable
    /// (default none), as `"10.0.0.7:8443"`: the operator's own receivers. Only a URL whose
    /// host is that literal and whose port that port matches; a name never does.
    pub allowed_targets: Vec<SocketAddr>,
    /// Attempts in flight to one endpoint at once, 1 to 16 (default 2): a silent endpoint
    /// holds this many of the dispatcher's attempts, never more.
    pub in_flight_per_endpoint_max: usize,
    /// Attempts in flight for one tenant's endpoints at once, 1 to 64 (default 4).
    pub in_flight_per_tenant_max: usize,
    /// Attempts in flight in all on this instance, 1 to 256 (default 8).
    pub concurrency: usize,
    /// Delays before each attempt, in milliseconds, the first counted from the event (default:
    /// at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); 1 to 32 delays of at most a
    /// day each. Its length is the number of attempts before an endpoint is disabled.
    pub retry_schedule_ms: Option<Vec<u64>>,
    /// Days a delivery is kept after its last change, 2 to 400 (default 30): then it is
    /// purged with its attempts. Deliveries that wait on a disabled endpoint are kept as long,
    /// and go out if it is enabled again within that time.
    pub retention_days: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout_secs: 10,
            allow_private_targets: false,
            allowed_targets: Vec::new(),
            in_flight_per_endpoint_max: 2,
            in_flight_per_tenant_max: 4,
            concurrency: 8,
            retry_schedule_ms: None,
            retention_days: PurgeSettings::default().webhook_retention.as_secs() / 86_400,
        }
    }
}

/// `[demo]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Provision the demo tenant.
    pub enabled: bool,
    /// Its id.
    pub tenant_id: String,
    /// Its secret API key; unset: a fresh key at every start, printed.
    pub api_key: Option<String>,
    /// Its publishable key, the one the demo checkout shows every visitor; unset: a fresh key
    /// at every start. It opens the checkout's routes only ([`crate::domain::keys`]).
    pub publishable_key: Option<String>,
    /// Serve the demo checkout at `/` (paying as the demo tenant with its publishable key).
    /// Unset: on exactly when the simulator runs in process (the embedded mode), so a
    /// deployment with real channels never shows it unless told to.
    pub checkout: Option<bool>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            tenant_id: "demo".to_owned(),
            api_key: None,
            publishable_key: None,
            checkout: None,
        }
    }
}

/// `[console]`: the operator console at `/console`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve it.
    pub enabled: bool,
    /// SHA-256 (hex) of the key that opens it (`mideng api-key` makes one). Unset: the console
    /// is not served. It shows every tenant's decisions, so no tenant's key opens it, and it
    /// never falls back to one.
    pub api_key_sha256: Option<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            api_key_sha256: None,
        }
    }
}

/// `[[tenants]]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Tenant id.
    pub id: String,
    /// SHA-256 (hex) of its secret API key.
    pub api_key_sha256: String,
    /// SHA-256 (hex) of its publishable key, which a checkout page may show; unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publishable_key_sha256: Option<String>,
    /// Its webhook endpoints (`[[tenants.webhooks]]`), registered at start if missing (by URL;
    /// the signing secret is made then and read with `GET /v1/webhook-endpoints`).
    #[serde(default)]
    pub webhooks: Vec<TenantWebhookConfig>,
}

/// `[[tenants.webhooks]]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantWebhookConfig {
    /// Where messages are posted.
    pub url: String,
    /// Event types: `payment.succeeded`, `payment.closed`, `refund.succeeded`.
    pub events: Vec<String>,
}

//! Configuration of `mideng serve`: defaults, then `mideng.toml` (or `--config`), then
//! `MIDENG__*` environment variables (`MIDENG__DATABASE__URL` sets `database.url`), then
//! command-line flags. With nothing set, the service runs embedded: SQLite in the data
//! directory, in-process tokens and locks, the channel simulator in-process, a demo tenant.
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! metrics_listen = "127.0.0.1:9090"   # /metrics only; keep it off the public network
//! data_dir = ".mideng"
//!
//! [http]
//! header_read_timeout_ms = 10000  # a request head, and an idle kept-alive connection
//! body_read_timeout_ms = 30000    # a whole request body, from the end of its head
//! connections_max = 1024          # more wait in the accept backlog
//! header_bytes_max = 16384        # a larger head is answered 431 by hyper
//!
//! [database]
//! url = "postgres://mideng:secret@db.internal:5432/mideng"   # or mysql://…, sqlite://…
//! connections_max = 16
//!
//! [redis]
//! url = "redis://cache.internal:6379/"     # or cluster = ["redis://10.0.0.1:7000", …]
//!
//! [payments]
//! token_required = true
//! expire_after_secs = 900
//! lock_wait_ms = 2000
//!
//! [events]
//! broker = "rabbitmq"             # or "nats"; default "queue" (in the database)
//! relay = true                    # run the outbox relay here
//! consumer = true                 # run the entitlement consumer here
//!
//! [events.rabbitmq]
//! url = "amqp://mideng:secret@mq.internal:5672/%2f"
//!
//! [console]                       # the operator console at /console
//! api_key_sha256 = "…"            # of the key that opens it (`mideng api-key`)
//!
//! [telemetry]                     # off unless an endpoint is set
//! otlp_endpoint = "http://otel-collector.internal:4318"   # OTLP/HTTP; spans go to …/v1/traces
//! service_name = "mideng"
//!
//! [[tenants]]
//! id = "shop-1"
//! api_key_sha256 = "…"            # `mideng api-key` prints a key and its hash
//!
//! [[tenants.webhooks]]            # registered at start if missing (its secret: GET /v1/webhook-endpoints)
//! url = "https://shop.example/hooks"
//! events = ["payment.succeeded", "refund.succeeded"]
//!
//! [channels.alipay]
//! gateway_url = "https://openapi.alipay.com/gateway.do"
//! api = "gateway"            # or "v3": OpenAPI v3 (/v3/alipay/trade/…) on the same host
//! app_id = "2021…"
//! merchant_private_key_file = "/etc/mideng/alipay-merchant-private.pem"
//! gateway_public_key_file = "/etc/mideng/alipay-public.pem"
//! notify_url = "https://pay.example.com/v1/channels/alipay/notify"
//!
//! [channels.wechat]
//! base_url = "https://api.mch.weixin.qq.com"
//! mchid = "1230000109"
//! appid = "wxd678efh567hg6787"
//! merchant_serial = "…"
//! merchant_private_key_file = "/etc/mideng/wechat-merchant-private.pem"
//! platform_mode = "certificates"  # or platform_public_key_file + platform_serial
//! notify_url = "https://pay.example.com/v1/channels/wechat/notify"
//! ```
//!
//! Secrets (the WeChat API v3 key, database passwords) are best given by environment
//! (`MIDENG__CHANNELS__WECHAT__API_V3_KEY`); they are never logged.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod channels;
mod sections;

pub use channels::{
    AlipayApiFile, AlipayFile, ChannelsConfig, ConfiguredChannels, WechatFile, WechatPlatformMode,
};
pub use sections::{
    BrokerKind, ConsoleConfig, DatabaseConfig, DemoConfig, EventsConfig, HttpConfig, NatsConfig,
    PaymentsConfig, PurgeConfig, RabbitConfig, ReconcileConfig, RedisConfig, SimulatorConfig,
    TenantConfig, TenantWebhookConfig, WalletConfig, WebhooksConfig,
};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::flows::PaymentSettings;
use crate::transport::TransportSettings;
use crate::workers::purge::PurgeSettings;
use crate::workers::reconcile::ReconcileSettings;
use crate::workers::webhooks::WebhookSettings;
use crate::workers::{Broker, ConsumerSettings, EventSettings, RelayWorkerSettings};
use mideng::outbox::nats::NatsSettings;
use mideng::outbox::rabbitmq::RabbitSettings;
use mideng::redact::SecretUrl;

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Where the API listens.
    pub listen: SocketAddr,
    /// Where `/metrics` is served (loopback by default: the counters show every tenant's
    /// volumes).
    pub metrics_listen: SocketAddr,
    /// Deadlines and bounds of the HTTP server.
    pub http: HttpConfig,
    /// Where the embedded database and the simulator's keys live.
    pub data_dir: PathBuf,
    /// The database.
    pub database: DatabaseConfig,
    /// Redis, for tokens and locks.
    pub redis: RedisConfig,
    /// The in-process channel simulator.
    pub simulator: SimulatorConfig,
    /// Payment behaviour.
    pub payments: PaymentsConfig,
    /// Wallet behaviour.
    pub wallet: WalletConfig,
    /// The demo tenant.
    pub demo: DemoConfig,
    /// The operator console.
    pub console: ConsoleConfig,
    /// Tenants provisioned at start.
    pub tenants: Vec<TenantConfig>,
    /// Real channel endpoints and keys.
    pub channels: ChannelsConfig,
    /// The scheduled reconciler.
    pub reconcile: ReconcileConfig,
    /// The scheduled retention purge.
    pub purge: PurgeConfig,
    /// The outbox relay, the broker and the entitlement consumer.
    pub events: EventsConfig,
    /// The merchants' webhook dispatcher.
    pub webhooks: WebhooksConfig,
    /// Traces over OTLP.
    pub telemetry: crate::telemetry::TelemetryConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            http: HttpConfig::default(),
            data_dir: PathBuf::from(".mideng"),
            database: DatabaseConfig::default(),
            redis: RedisConfig::default(),
            simulator: SimulatorConfig::default(),
            payments: PaymentsConfig::default(),
            wallet: WalletConfig::default(),
            demo: DemoConfig::default(),
            console: ConsoleConfig::default(),
            tenants: Vec::new(),
            channels: ChannelsConfig::default(),
            reconcile: ReconcileConfig::default(),
            purge: PurgeConfig::default(),
            events: EventsConfig::default(),
            webhooks: WebhooksConfig::default(),
            telemetry: crate::telemetry::TelemetryConfig::default(),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// Unparsable file or variable, unknown key, wrong type.
    #[error("configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
    /// A value out of range or a file that cannot be used.
    #[error("configuration: {0}")]
    Invalid(String),
}

/// Flags given on the command line; they win over everything else.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Overrides {
    /// `--listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// `--metrics-listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// `--data-dir`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// `--sim-listen`.
    #[serde(skip_serializing_if = "Option::is_none", rename = "simulator.listen")]
    pub sim_listen: Option<SocketAddr>,
    /// `--demo-api-key`.
    #[serde(skip_serializing_if = "Option::is_none", rename = "demo.api_key")]
    pub demo_api_key: Option<String>,
}

impl ServeConfig {
    /// Defaults, then `file` (an explicit file must exist; `mideng.toml` is read if present),
    /// then `MIDENG__*` variables, then `overrides`.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(ServeConfig::default()));
        match file {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Invalid(format!(
                        "{} does not exist",
                        path.display()
                    )));
                }
                figment = figment.merge(Toml::file_exact(path));
            }
            None => figment = figment.merge(Toml::file("mideng.toml")),
        }
        Self::from_figment(
            figment
                .merge(Env::prefixed("MIDENG__").split("__"))
                .merge(overrides_provider(overrides)),
        )
    }

    /// Extracts and checks a configuration from any figment (tests use strings).
    pub fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        let config: ServeConfig = figment.extract().map_err(Box::new)?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |what: &str| Err(ConfigError::Invalid(what.to_owned()));
        if !(60..=86_400).contains(&self.payments.expire_after_secs) {
            return invalid("payments.expire_after_secs must be 60 to 86400");
        }
        if self.payments.expiry_grace_secs > 3_600 {
            return invalid("payments.expiry_grace_secs must be 0 to 3600");
        }
        if self.payments.clock_skew_max_secs > 300 {
            return invalid("payments.clock_skew_max_secs must be 0 to 300");
        }
        if self.payments.replay_cache_entries > mideng::store::cached::CACHED_ANSWERS_MAX
            || !(1..=86_400).contains(&self.payments.replay_cache_ttl_secs)
            || self.payments.tenant_cache_ms > 60_000
        {
            return invalid(
                "payments: replay_cache_entries ..=1000000, replay_cache_ttl_secs 1..=86400, tenant_cache_ms ..=60000",
            );
        }
        if !(30..=400).contains(&self.payments.funds_retention_days) {
            return invalid("payments.funds_retention_days must be 30 to 400");
        }
        if !(1..=86_400).contains(&self.purge.interval_secs)
            || !(1..=10_000).contains(&self.purge.batch)
        {
            return invalid("purge: interval_secs 1..=86400, batch 1..=10000");
        }
        let http = &self.http;
        if !(100..=300_000).contains(&http.header_read_timeout_ms)
            || !(100..=600_000).contains(&http.body_read_timeout_ms)
            || !(1..=100_000).contains(&http.connections_max)
            || !(1_024..=1_048_576).contains(&http.header_bytes_max)
        {
            return invalid(
                "http: header_read_timeout_ms 100..=300000, body_read_timeout_ms 100..=600000, connections_max 1..=100000, header_bytes_max 1024..=1048576",
            );
        }
        if self.payments.lock_wait_ms > 10_000 {
            return invalid("payments.lock_wait_ms must be at most 10000");
        }
        // Renewed every third of the lease: below 3 s a renewal would have to land within a
        // second, which a busy instance does not promise.
        if !(3_000..=300_000).contains(&self.payments.order_lock_lease_ms) {
            return invalid("payments.order_lock_lease_ms must be 3000..=300000");
        }
        if let Err(error) = self.telemetry.validate() {
            return invalid(&error);
        }
        if !(1..=30).contains(&self.webhooks.timeout_secs) {
            return invalid("webhooks.timeout_secs must be 1 to 30");
        }
        if let Some(delays) = &self.webhooks.retry_schedule_ms
            && (!(1..=32).contains(&delays.len()) || delays.iter().any(|delay| *delay > 86_400_000))
        {
            return invalid(
                "webhooks.retry_schedule_ms: 1 to 32 delays of at most 86400000 ms each",
            );
        }
        let webhooks = &self.webhooks;
        if !(1..=16).contains(&webhooks.in_flight_per_endpoint_max)
            || !(1..=64).contains(&webhooks.in_flight_per_tenant_max)
            || !(1..=256).contains(&webhooks.concurrency)
            || webhooks.allowed_targets.len() > 64
            || !(2..=400).contains(&webhooks.retention_days)
        {
            return invalid(
                "webhooks: in_flight_per_endpoint_max 1 to 16, in_flight_per_tenant_max 1 to 64, \
                 concurrency 1 to 256, at most 64 allowed_targets, retention_days 2 to 400",
            );
        }
        if !(1..=3_600).contains(&self.events.consumer_visibility_secs) {
            return invalid("events.consumer_visibility_secs must be 1 to 3600");
        }
        if !(1..=1_000).contains(&self.events.consumer_park_after) {
            return invalid("events.consumer_park_after must be 1 to 1000");
        }
        if !(1..=mideng::outbox::sql::PARK_AFTER_REFUSALS_MAX)
            .contains(&self.events.relay_park_after_refusals)
        {
            return invalid("events.relay_park_after_refusals must be 1 to 1000");
        }
        for tenant in &self.tenants {
            // A checkout page's scope is named `page.<digest>` ([`crate::domain::keys`]); no
            // tenant may be named like one.
            if tenant.id.starts_with("page.") {
                return invalid(
                    "tenants.id must not begin with `page.` (the checkout pages' scopes)",
                );
            }
            if tenant.webhooks.len() > crate::domain::webhook::ENDPOINTS_PER_TENANT_MAX {
                return invalid("tenants.webhooks: at most 20 per tenant");
            }
            for webhook in &tenant.webhooks {
                let targets = self.payment_settings().webhook_targets();
                if let Err(error) = crate::domain::webhook::checked_url(&webhook.url, &targets)
                    .and_then(|_| crate::domain::webhook::checked_events(&webhook.events))
                {
                    return Err(ConfigError::Invalid(format!("tenants.webhooks: {error}")));
                }
            }
        }
        if !(1..=5).contains(&self.events.nats.replicas) {
            return invalid(
                "events.nats.replicas must be 1 to 5 (JetStream keeps at most 5 copies)",
            );
        }
        if !(1..=1_000).contains(&self.database.connections_max) {
            return invalid("database.connections_max must be 1 to 1000");
        }
        if let Some(key) = &self.demo.api_key
            && !(16..=256).contains(&key.len())
        {
            return invalid("demo.api_key must be 16 to 256 characters");
        }
        if let Some(key) = &self.demo.publishable_key
            && !(16..=256).contains(&key.len())
        {
            return invalid("demo.publishable_key must be 16 to 256 characters");
        }
        if self.demo.api_key.is_some() && self.demo.api_key == self.demo.publishable_key {
            return invalid("demo.publishable_key must differ from demo.api_key");
        }
        for tenant in &self.tenants {
            if let Some(digest) = &tenant.publishable_key_sha256
                && (digest.len() != 64
                    || !digest.bytes().all(|byte| byte.is_ascii_hexdigit())
                    || digest.eq_ignore_ascii_case(&tenant.api_key_sha256))
            {
                return invalid(
                    "tenants.publishable_key_sha256 must be 64 hexadecimal digits, not the secret key's",
                );
            }
        }
        if let Some(digest) = &self.console.api_key_sha256
            && (digest.len() != 64 || !digest.bytes().all(|byte| byte.is_ascii_hexdigit()))
        {
            return invalid("console.api_key_sha256 must be 64 hexadecimal digits");
        }
        if self.demo.checkout == Some(true) && !self.demo.enabled {
            return invalid("demo.checkout needs the demo tenant (demo.enabled = true)");
        }
        let reconcile = &self.reconcile;
        if !(1..=3_600).contains(&reconcile.interval_secs)
            || reconcile.min_age_secs > 86_400
            || !(1..=10_000).contains(&reconcile.batch)
            || reconcile.bill_after_day_end_secs > 86_400
        {
            return invalid(
                "reconcile: interval_secs 1..=3600, min_age_secs ..=86400, batch 1..=10000, bill_after_day_end_secs ..=86400",
            );
        }
        let events = &self.events;
        if !(1..=1_000).contains(&events.relay_batch)
            || !(10..=60_000).contains(&events.relay_interval_ms)
            || !(1..=60).contains(&events.publish_timeout_secs)
            || !(events.publish_timeout_secs * 2..=3_600).contains(&events.claim_lease_secs)
            || !(1..=3_600).contains(&events.retry_cap_secs)
            || !(1..=400).contains(&events.sent_retention_days)
        {
            return invalid(
                "events: relay_batch 1..=1000, relay_interval_ms 10..=60000, publish_timeout_secs 1..=60, claim_lease_secs 2 x publish_timeout_secs..=3600, retry_cap_secs 1..=3600, sent_retention_days 1..=400",
            );
        }
        let name_ok = |name: &str| {
            !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'))
        };
        if !name_ok(&events.consumer_group) || !name_ok(&events.nats.stream) {
            return invalid(
                "events.consumer_group and events.nats.stream: 1 to 64 letters, digits, '-' or '_'",
            );
        }
        if self.redis.url.is_some() && !self.redis.cluster.is_empty() {
            return invalid("set redis.url or redis.cluster, not both");
        }
        if let Some(wechat) = &self.channels.wechat
            && wechat.api_v3_key.len() != 32
        {
            return invalid("channels.wechat.api_v3_key must be 32 bytes");
        }
        if let Some(wechat) = &self.channels.wechat {
            wechat.platform_choice()?;
        }
        Ok(())
    }

    /// The database URL: the configured one, or SQLite in the data directory.
    pub fn database_url(&self) -> SecretUrl {
        self.database.url.clone().unwrap_or_else(|| {
            SecretUrl::new(format!(
                "sqlite://{}",
                self.data_dir.join("mideng.db").display()
            ))
        })
    }

    /// Whether the in-process simulator runs.
    pub fn simulator_enabled(&self) -> bool {
        self.simulator
            .enabled
            .unwrap_or(self.channels.alipay.is_none() && self.channels.wechat.is_none())
    }

    /// Whether the demo checkout is served at `/` (`[demo] checkout`; by default exactly when
    /// the simulator runs in process).
    pub fn checkout_enabled(&self) -> bool {
        self.demo.enabled
            && self
                .demo
                .checkout
                .unwrap_or_else(|| self.simulator_enabled())
    }

    /// The digest of the key that opens the console; `None`: the console is not served. Only
    /// `[console] api_key_sha256` opens it: it shows every tenant's decisions, so no tenant's
    /// key (the demo tenant's included) is ever taken in its place.
    pub fn console_key_sha256(&self) -> Option<String> {
        if !self.console.enabled {
            return None;
        }
        self.console
            .api_key_sha256
            .as_ref()
            .map(|digest| digest.to_ascii_lowercase())
    }

    /// Payment settings.
    pub fn payment_settings(&self) -> PaymentSettings {
        PaymentSettings {
            token_required: self.payments.token_required,
            expire_after: Duration::from_secs(self.payments.expire_after_secs),
            expiry_grace: Duration::from_secs(self.payments.expiry_grace_secs),
            clock_skew_max: Duration::from_secs(self.payments.clock_skew_max_secs),
            replay_cache_entries: self.payments.replay_cache_entries,
            replay_cache_ttl: Duration::from_secs(self.payments.replay_cache_ttl_secs),
            tenant_cache: Duration::from_millis(self.payments.tenant_cache_ms),
            lock_wait: Duration::from_millis(self.payments.lock_wait_ms),
            order_lock_lease: Duration::from_millis(self.payments.order_lock_lease_ms),
            funds_retention: Duration::from_secs(self.payments.funds_retention_days * 86_400),
            wallet_strategy: self.wallet.strategy,
            webhook_private_targets: self.webhooks.allow_private_targets,
            webhook_allowed_targets: self.webhooks.allowed_targets.clone(),
            automatic_refunds: self.payments.automatic_refunds,
            ..PaymentSettings::default()
        }
    }

    /// The HTTP server's deadlines and bounds.
    pub fn transport_settings(&self) -> TransportSettings {
        TransportSettings {
            header_read_timeout: Duration::from_millis(self.http.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(self.http.body_read_timeout_ms),
            connections_max: self.http.connections_max,
            header_bytes_max: self.http.header_bytes_max,
            ..TransportSettings::default()
        }
    }

    /// Purge settings.
    pub fn purge_settings(&self) -> PurgeSettings {
        PurgeSettings {
            batch: self.purge.batch,
            interval: Duration::from_secs(self.purge.interval_secs),
            sent_events_retention: Duration::from_secs(self.events.sent_retention_days * 86_400),
            webhook_retention: Duration::from_secs(self.webhooks.retention_days * 86_400),
            ..PurgeSettings::default()
        }
    }

    /// The broker, the relay and the consumer.
    pub fn event_settings(&self) -> EventSettings {
        let events = &self.events;
        let broker = match events.broker {
            BrokerKind::Queue => Broker::Queue,
            BrokerKind::Rabbitmq => Broker::RabbitMq(RabbitSettings {
                url: events.rabbitmq.url.clone(),
                queue_prefix: events.rabbitmq.queue_prefix.clone(),
                ..RabbitSettings::default()
            }),
            BrokerKind::Nats => Broker::Nats(NatsSettings {
                url: events.nats.url.clone(),
                stream: events.nats.stream.clone(),
                subject_prefix: events.nats.subject_prefix.clone(),
                replicas: events.nats.replicas,
                ..NatsSettings::default()
            }),
        };
        EventSettings {
            broker,
            relay: events.relay.then(|| RelayWorkerSettings {
                relay: mideng::outbox::sql::RelaySettings {
                    batch: events.relay_batch,
                    claim_lease: Duration::from_secs(events.claim_lease_secs),
                    publish_timeout: Duration::from_secs(events.publish_timeout_secs),
                    retry_cap: Duration::from_secs(events.retry_cap_secs),
                    park_after_refusals: events.relay_park_after_refusals,
                },
                interval: Duration::from_millis(events.relay_interval_ms),
            }),
            consumer: events.consumer.then(|| ConsumerSettings {
                group: events.consumer_group.clone(),
                revoke_on_refund: events.revoke_on_refund,
                visibility: Duration::from_secs(events.consumer_visibility_secs),
                park_after: events.consumer_park_after,
                ..ConsumerSettings::default()
            }),
            webhooks: self.webhooks.enabled.then(|| {
                let defaults = WebhookSettings::default();
                WebhookSettings {
                    timeout: Duration::from_secs(self.webhooks.timeout_secs),
                    concurrency: self.webhooks.concurrency,
                    in_flight_per_endpoint_max: self.webhooks.in_flight_per_endpoint_max,
                    in_flight_per_tenant_max: self.webhooks.in_flight_per_tenant_max,
                    schedule: self
                        .webhooks
                        .retry_schedule_ms
                        .as_ref()
                        .map_or(defaults.schedule.clone(), |delays| {
                            delays.iter().copied().map(Duration::from_millis).collect()
                        }),
                    ..defaults
                }
            }),
        }
    }

    /// The daily bill job's settings, when it is on.
    pub fn bill_settings(&self) -> Option<crate::workers::bill::BillSettings> {
        self.reconcile
            .bills
            .then(|| crate::workers::bill::BillSettings {
                after_day_end: Duration::from_secs(self.reconcile.bill_after_day_end_secs),
                ..crate::workers::bill::BillSettings::default()
            })
    }

    /// Reconciliation settings.
    pub fn reconcile_settings(&self) -> ReconcileSettings {
        ReconcileSettings {
            min_age: Duration::from_secs(self.reconcile.min_age_secs),
            batch: self.reconcile.batch,
            interval: Duration::from_secs(self.reconcile.interval_secs),
            tenant: None,
        }
    }
}

fn overrides_provider(overrides: &Overrides) -> Serialized<figment::value::Dict> {
    let mut dict = figment::value::Dict::new();
    if let Some(listen) = overrides.listen {
        dict.insert("listen".into(), listen.to_string().into());
    }
    if let Some(listen) = overrides.metrics_listen {
        dict.insert("metrics_listen".into(), listen.to_string().into());
    }
    if let Some(data_dir) = &overrides.data_dir {
        dict.insert("data_dir".into(), data_dir.display().to_string().into());
    }
    let mut simulator = figment::value::Dict::new();
    if let Some(listen) = overrides.sim_listen {
        simulator.insert("listen".into(), listen.to_string().into());
    }
    if !simulator.is_empty() {
        dict.insert("simulator".into(), simulator.into());
    }
    let mut demo = figment::value::Dict::new();
    if let Some(key) = &overrides.demo_api_key {
        demo.insert("api_key".into(), key.clone().into());
    }
    if !demo.is_empty() {
        dict.insert("demo".into(), demo.into());
    }
    Serialized::defaults(dict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::wallet::WalletStrategy;
    use mideng_channel::adapter::alipay::AlipayApi;

    fn parse(toml: &str, overrides: &Overrides) -> Result<ServeConfig, ConfigError> {
        ServeConfig::from_figment(
            Figment::from(Serialized::defaults(ServeConfig::default()))
                .merge(Toml::string(toml))
                .merge(overrides_provider(overrides)),
        )
    }

    const WECHAT: &str = r#"
        [channels.wechat]
        base_url = "https://api.mch.weixin.qq.com"
        mchid = "1230000109"
        appid = "wxd678efh567hg6787"
        merchant_serial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
        merchant_private_key_file = "merchant.pem"
        api_v3_key = "0123456789abcdefghijklmnopqrstuv"
        notify_url = "https://pay.example.com/v1/channels/wechat/notify"
    "#;

    #[test]
    fn wechat_takes_exactly_one_platform_key_mode() {
        let with = |lines: &str| parse(&format!("{WECHAT}{lines}"), &Overrides::default());
        assert!(with("platform_mode = \"certificates\"").is_ok());
        assert!(
            with("platform_mode = \"certificates\"\nplatform_certificate_file = \"p.pem\"").is_ok()
        );
        assert!(
            with("platform_public_key_file = \"p.pem\"\nplatform_serial = \"PUB_KEY_ID_01\"")
                .is_ok()
        );
        for (lines, says) in [
            ("", "public-key mode needs"),
            (
                "platform_public_key_file = \"p.pem\"",
                "public-key mode needs",
            ),
            (
                "platform_mode = \"certificates\"\nplatform_serial = \"PUB_KEY_ID_01\"",
                "remove platform_public_key_file and platform_serial",
            ),
            (
                "platform_serial = \"PUB_KEY_ID_01\"\nplatform_public_key_file = \"p.pem\"\nplatform_certificate_file = \"c.pem\"",
                "platform_certificate_file is for",
            ),
            ("platform_mode = \"download\"", "platform_mode"),
        ] {
            let error = with(lines).expect_err(lines).to_string();
            assert!(error.contains(says), "{lines}: {error}");
        }
    }

    #[test]
    fn nothing_configured_is_the_embedded_default() {
        let config = parse("", &Overrides::default()).expect("defaults");
        assert_eq!(config.database_url().expose(), "sqlite://.mideng/mideng.db");
        assert!(config.simulator_enabled());
        assert!(config.redis.url.is_none());
        assert!(config.payments.token_required);
        assert_eq!(config.listen.port(), 8080);
        assert!(
            config.metrics_listen.ip().is_loopback(),
            "metrics stay off the network unless asked"
        );
        assert_eq!(config.transport_settings(), TransportSettings::default());
    }

    #[test]
    fn the_file_sets_values_and_flags_win_over_it() {
        let toml = r#"
            listen = "127.0.0.1:9000"
            [database]
            url = "postgres://mideng@db/mideng"
            [demo]
            api_key = "from-the-file-0123456789"
            [wallet]
            strategy = "row-lock"
        "#;
        let overrides = Overrides {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 9100))),
            demo_api_key: Some("from-the-flag-0123456789".to_owned()),
            ..Overrides::default()
        };
        let config = parse(toml, &overrides).expect("valid");
        assert_eq!(config.listen.port(), 9100);
        assert_eq!(
            config.database_url().expose(),
            "postgres://mideng@db/mideng"
        );
        assert_eq!(
            config.demo.api_key.as_deref(),
            Some("from-the-flag-0123456789")
        );
        assert_eq!(
            config.payment_settings().wallet_strategy,
            WalletStrategy::RowLock
        );
        let default = parse("", &Overrides::default()).expect("valid");
        assert_eq!(
            default.payment_settings().wallet_strategy,
            WalletStrategy::ConditionalUpdate
        );
    }

    #[test]
    fn the_alipay_adapter_speaks_gateway_do_unless_v3_is_asked_for() {
        let alipay = |api_line: &str| {
            let toml = format!(
                "[channels.alipay]\ngateway_url = \"https://openapi.alipay.com/gateway.do\"\n\
                 {api_line}\napp_id = \"2021000000000001\"\n\
                 merchant_private_key_file = \"merchant.pem\"\n\
                 gateway_public_key_file = \"alipay.pem\"\n\
                 notify_url = \"https://pay.example.com/v1/channels/alipay/notify\"\n"
            );
            parse(&toml, &Overrides::default())
                .map(|config| config.channels.alipay.map(|alipay| alipay.api))
        };
        assert_eq!(alipay("").expect("valid"), Some(AlipayApiFile::Gateway));
        assert_eq!(
            alipay("api = \"gateway\"").expect("valid"),
            Some(AlipayApiFile::Gateway)
        );
        assert_eq!(
            alipay("api = \"v3\"").expect("valid"),
            Some(AlipayApiFile::V3)
        );
        assert!(matches!(alipay("api = \"v2\""), Err(ConfigError::Parse(_))));
        assert_eq!(AlipayApi::from(AlipayApiFile::V3), AlipayApi::V3);
    }

    #[test]
    fn a_tenants_webhooks_are_checked_when_read() {
        let tenant = |url: &str, events: &str, private: bool| {
            let toml = format!(
                "[webhooks]\nallow_private_targets = {private}\n\
                 [[tenants]]\nid = \"shop-1\"\napi_key_sha256 = \"{}\"\n\
                 [[tenants.webhooks]]\nurl = \"{url}\"\nevents = [{events}]\n",
                "a".repeat(64)
            );
            parse(&toml, &Overrides::default())
        };
        let config = tenant(
            "https://shop.example/hooks",
            "\"payment.succeeded\", \"refund.succeeded\"",
            false,
        )
        .expect("valid");
        assert_eq!(
            config.tenants[0].webhooks,
            [TenantWebhookConfig {
                url: "https://shop.example/hooks".to_owned(),
                events: vec![
                    "payment.succeeded".to_owned(),
                    "refund.succeeded".to_owned()
                ],
            }]
        );
        let local = "http://127.0.0.1:9999/hooks";
        assert!(matches!(
            tenant(local, "\"payment.succeeded\"", false),
            Err(ConfigError::Invalid(_))
        ));
        assert!(tenant(local, "\"payment.succeeded\"", true).is_ok());
        assert!(matches!(
            tenant("https://shop.example/hooks", "\"payment.created\"", false),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn the_webhook_schedule_and_the_consumer_visibility_are_configurable_within_bounds() {
        let config = parse(
            "[webhooks]\nretry_schedule_ms = [0, 50, 400]\n[events]\nconsumer_visibility_secs = 5",
            &Overrides::default(),
        )
        .expect("valid");
        let events = config.event_settings();
        let webhooks = events.webhooks.expect("on by default");
        assert_eq!(
            webhooks.schedule,
            [0, 50, 400].map(Duration::from_millis).to_vec()
        );
        assert_eq!(
            events.consumer.expect("on by default").visibility,
            Duration::from_secs(5)
        );
        let defaults = parse("", &Overrides::default()).expect("valid");
        assert_eq!(
            defaults.purge_settings().webhook_retention,
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(
            defaults.event_settings().webhooks.expect("on").schedule,
            crate::domain::webhook::SCHEDULE.to_vec()
        );
        for refused in [
            "[webhooks]\nretry_schedule_ms = []",
            "[webhooks]\nretry_schedule_ms = [86400001]",
            "[webhooks]\nretention_days = 1",
            "[events]\nconsumer_visibility_secs = 0",
        ] {
            assert!(
                matches!(
                    parse(refused, &Overrides::default()),
                    Err(ConfigError::Invalid(_))
                ),
                "{refused}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_out_of_range_values_are_refused() {
        assert!(matches!(
            parse("[database]\nurll = \"x\"", &Overrides::default()),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            parse("[payments]\nexpire_after_secs = 5", &Overrides::default()),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            parse("[demo]\napi_key = \"short\"", &Overrides::default()),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            parse(
                "[wallet]\nstrategy = \"pessimistic\"",
                &Overrides::default()
            ),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            parse("[events.nats]\nreplicas = 0", &Overrides::default()),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            parse(
                "[console]\napi_key_sha256 = \"not-hex\"",
                &Overrides::default()
            ),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn the_pages_and_a_nats_cluster_follow_the_configuration() {
        let embedded = parse("", &Overrides::default()).expect("defaults");
        assert!(
            embedded.checkout_enabled(),
            "the embedded mode shows the checkout"
        );
        assert_eq!(
            embedded.console_key_sha256(),
            None,
            "no console without its own key: never a tenant's in its place"
        );
        let production = parse(
            &format!(
                "[demo]\nenabled = false\n[console]\napi_key_sha256 = \"{}\"\n\
                 [events]\nbroker = \"nats\"\n[events.nats]\n\
                 url = \"nats://a:4222,nats://b:4222\"\nreplicas = 3\n",
                "AB".repeat(32)
            ),
            &Overrides::default(),
        )
        .expect("valid");
        assert!(!production.checkout_enabled());
        assert_eq!(
            production.console_key_sha256(),
            Some("ab".repeat(32)),
            "the operator's key, lowercased"
        );
        match production.event_settings().broker {
            Broker::Nats(nats) => {
                assert_eq!(nats.replicas, 3);
                assert_eq!(nats.url.expose(), "nats://a:4222,nats://b:4222");
            }
            other => panic!("not NATS: {}", other.name()),
        }
        assert!(matches!(
            parse(
                "[demo]\nenabled = false\ncheckout = true",
                &Overrides::default()
            ),
            Err(ConfigError::Invalid(_))
        ));
    }
}

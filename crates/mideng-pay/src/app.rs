//! The running service: [`Application::build`] connects and migrates the database, connects
//! Redis (or uses in-process stores), provisions tenants and assembles the router on a listener
//! the caller bound (port 0 in tests); [`Application::run_until`] serves it through
//! [`crate::transport`], and `/metrics` on a listener of its own when one is given.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use mideng::lock::LockStore;
use mideng::redact::SecretUrl;
use mideng::store::cached::CachedRecords;
use mideng::store::memory::MemoryStore;
use mideng::store::redis::RedisStore;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use mideng::token::{TokenLimits, TokenStore};
use mideng::{InvalidInput, StoreError};
use mideng_channel::adapter::Channel;
use thiserror::Error;
use tokio::net::TcpListener;

use crate::api;
use crate::api::tenants::TenantCache;
use crate::domain::events::{PAYMENT_SUCCEEDED, REFUND_SUCCEEDED};
use crate::flows::clock_guard::{self, ClockGuard};
use crate::flows::{Channels, Clock, PaymentSettings, Ports};
use crate::state::AppState;
use crate::store::{self, Store};
use crate::transport::{self, TransportSettings};
use crate::web::{PageSettings, Pages};
use crate::workers::bill::{self, BillSettings};
use crate::workers::purge::{self, PurgeSettings};
use crate::workers::reconcile::{self, ReconcileSettings};
use crate::workers::{EventSettings, consumer, relay};

/// A tenant to provision at start: its id and the SHA-256 (hex) of its API keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSeed {
    /// Tenant id (1–64 visible ASCII).
    pub tenant_id: String,
    /// `api::api_key_hash(key)` of its secret key.
    pub api_key_sha256: String,
    /// The same of its publishable key, if it has one ([`crate::domain::keys`]).
    pub publishable_key_sha256: Option<String>,
    /// Webhook endpoints to register if missing: URL and event types.
    pub webhooks: Vec<(String, Vec<String>)>,
}

/// Everything the service needs, already validated.
#[derive(Clone)]
pub struct Settings {
    /// `sqlite://path`, `postgres://…` or `mysql://…` (MariaDB too).
    pub database_url: SecretUrl,
    /// Pool size.
    pub database_connections_max: u32,
    /// `redis://…` for tokens and locks; `None` (and no cluster): in-process stores (one
    /// instance only).
    pub redis_url: Option<SecretUrl>,
    /// Seed nodes of a Redis Cluster for tokens and locks, instead of `redis_url`.
    pub redis_cluster: Vec<SecretUrl>,
    /// Key prefix in Redis.
    pub redis_prefix: Option<String>,
    /// The Alipay adapter, if the service takes Alipay.
    pub alipay: Option<Arc<dyn Channel>>,
    /// The WeChat Pay adapter, if the service takes WeChat Pay.
    pub wechat: Option<Arc<dyn Channel>>,
    /// Payment behaviour.
    pub payments: PaymentSettings,
    /// Tenants to create (or re-key) at start.
    pub tenants: Vec<TenantSeed>,
    /// The scheduled reconciler; `None`: no worker (run `reconcile::reconcile_once` yourself).
    pub reconcile: Option<ReconcileSettings>,
    /// The scheduled purge; `None`: no worker (run `purge::purge_once` yourself).
    pub purge: Option<PurgeSettings>,
    /// The daily bill reconciliation; `None`: no job (run `bill::reconcile_bill` yourself).
    pub bills: Option<BillSettings>,
    /// The broker, and whether the outbox relay and the entitlement consumer run here.
    pub events: EventSettings,
    /// Deadlines and bounds of the HTTP server (heads, bodies, connections).
    pub transport: TransportSettings,
    /// The demo checkout and the operator console (both off by default).
    pub pages: PageSettings,
    /// The one clock of the service: the flows, the workers and the store read the time from
    /// it ([`crate::flows::SystemClock`] in production; a test or the storm may set its own).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URLs show themselves redacted (`SecretUrl`).
        formatter
            .debug_struct("Settings")
            .field("database_url", &self.database_url)
            .field("database_connections_max", &self.database_connections_max)
            .field("redis_url", &self.redis_url)
            .field("redis_cluster", &self.redis_cluster)
            .field("redis_prefix", &self.redis_prefix)
            .field("alipay", &self.alipay.is_some())
            .field("wechat", &self.wechat.is_some())
            .field("payments", &self.payments)
            .field("tenants", &self.tenants.len())
            .field("reconcile", &self.reconcile)
            .field("purge", &self.purge)
            .field("bills", &self.bills)
            .field("events", &self.events)
            .field("transport", &self.transport)
            .field("pages", &self.pages)
            .finish()
    }
}

impl Settings {
    /// One short line for the start-up log: where the state lives and what runs in this
    /// instance (`Debug` has every setting). URLs are redacted by their type.
    pub fn summary(&self) -> String {
        let on = |running: bool| if running { "on" } else { "off" };
        let guards = if !self.redis_cluster.is_empty() {
            format!("a Redis Cluster of {} seed nodes", self.redis_cluster.len())
        } else {
            match &self.redis_url {
                Some(url) => url.to_string(),
                None => "in-process (one instance only)".to_owned(),
            }
        };
        let channels: Vec<&str> = [("alipay", &self.alipay), ("wechat", &self.wechat)]
            .into_iter()
            .filter_map(|(name, channel)| channel.is_some().then_some(name))
            .collect();
        format!(
            "database {} ({} connections); tokens and locks {guards}; channels {}; {} tenants \
             seeded; broker {} (relay {}, consumer {}); reconciliation {}, bills {}, purge {}; \
             checkout {}, console {}",
            self.database_url,
            self.database_connections_max,
            if channels.is_empty() {
                "none".to_owned()
            } else {
                channels.join(", ")
            },
            self.tenants.len(),
            self.events.broker.name(),
            on(self.events.relay.is_some()),
            on(self.events.consumer.is_some()),
            on(self.reconcile.is_some()),
            on(self.bills.is_some()),
            on(self.purge.is_some()),
            on(self.pages.checkout.is_some()),
            on(self.pages.console.is_some()),
        )
    }
}

/// Why the service could not start.
#[derive(Debug, Error)]
pub enum BuildError {
    /// The database URL names no supported database.
    #[error("unsupported database URL (use sqlite://, postgres:// or mysql://)")]
    UnsupportedDatabase,
    /// The database could not be reached or migrated.
    #[error("database: {0}")]
    Database(StoreError),
    /// Redis could not be reached.
    #[error("redis: {0}")]
    Redis(StoreError),
    /// A setting is out of range.
    #[error("settings: {0}")]
    Invalid(#[from] InvalidInput),
    /// The listener has no address.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// A configured webhook endpoint is refused.
    #[error("tenants.webhooks: {0}")]
    Webhook(crate::domain::webhook::EndpointError),
}

/// The process-wide Prometheus recorder, installed on first use. `None` when another recorder
/// was installed first (the service then exports nothing itself).
///
/// The latency histograms (every metric named `…_seconds`) are exported as Prometheus
/// histograms (`_bucket`, `_sum`, `_count`) with fixed buckets from 0.5 ms to 10 s, so that
/// they can be summed over instances and turned into quantiles by the server. A thread of its
/// own runs the recorder's upkeep every few seconds: it moves the samples recorded since into
/// their buckets, which would otherwise pile up in memory between scrapes (for ever, if
/// nothing scrapes).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    /// Upper bounds of the latency buckets, in seconds: from a cached read to a stuck channel.
    const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    /// How often samples are moved into their buckets.
    const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".to_owned()),
                    &LATENCY_BUCKETS_SECONDS,
                )
                .expect("the bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok()?;
            crate::metrics::describe();
            let upkeep = handle.clone();
            // A thread, not a task: the recorder outlives any one runtime (tests start many).
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".to_owned())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
            if let Err(error) = spawned {
                // Each scrape still moves the samples into their buckets.
                tracing::warn!(%error, "no metrics upkeep thread; samples wait for the next scrape");
            }
            Some(handle)
        })
        .clone()
}

async fn open_store(settings: &Settings) -> Result<Store, BuildError> {
    let clock = settings.clock.clone();
    let url = settings.database_url.expose();
    let pool = PoolSettings {
        connections_max: settings.database_connections_max,
        ..PoolSettings::default()
    };
    let failed = BuildError::Database;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PostgresStore::connect(url, pool).await.map_err(failed)?;
        store.migrate().await.map_err(failed)?;
        store::migrate_postgres(store.pool())
            .await
            .map_err(failed)?;
        Ok(Store::sql(store, clock))
    } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let url = url.replacen("mariadb://", "mysql://", 1);
        let store = MySqlStore::connect(&url, pool).await.map_err(failed)?;
        store.migrate().await.map_err(failed)?;
        store::migrate_mysql(store.pool()).await.map_err(failed)?;
        Ok(Store::sql(store, clock))
    } else if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url, pool).await.map_err(failed)?;
        store.migrate().await.map_err(failed)?;
        store::migrate_sqlite(store.pool()).await.map_err(failed)?;
        Ok(Store::sql(store, clock))
    } else {
        Err(BuildError::UnsupportedDatabase)
    }
}

type Guards = (Arc<dyn TokenStore>, Arc<dyn LockStore>);

/// The caps of the checkout pages' own token store ([`crate::tokens`]).
fn page_token_limits() -> Result<TokenLimits, BuildError> {
    Ok(TokenLimits::new(
        crate::limits::PAGE_TOKENS_PER_ORDER_MAX,
        crate::limits::PAGE_TOKENS_TOTAL_MAX,
    )?)
}

/// The same Redis deployment for the pages' tokens, under keys of their own (`<prefix>-page`:
/// their own count of unspent tokens) and with their own caps.
fn page_tokens_on<C>(store: &RedisStore<C>) -> Result<Arc<dyn TokenStore>, BuildError>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let prefix = format!("{}-page", store.prefix());
    Ok(Arc::new(
        store
            .clone()
            .with_prefix(&prefix)?
            .with_token_limits(page_token_limits()?),
    ))
}

fn split(server: Arc<dyn TokenStore>, pages: Arc<dyn TokenStore>) -> Arc<dyn TokenStore> {
    Arc::new(crate::tokens::SplitTokens::new(server, pages))
}

async fn open_guards(settings: &Settings) -> Result<Guards, BuildError> {
    if !settings.redis_cluster.is_empty() {
        let nodes: Vec<String> = settings
            .redis_cluster
            .iter()
            .map(|node| node.expose().to_owned())
            .collect();
        let mut store = RedisStore::connect_cluster(&nodes)
            .await
            .map_err(BuildError::Redis)?;
        if let Some(prefix) = &settings.redis_prefix {
            store = store.with_prefix(prefix)?;
        }
        let pages = page_tokens_on(&store)?;
        let store = Arc::new(store);
        return Ok((split(store.clone(), pages), store));
    }
    match &settings.redis_url {
        Some(url) => {
            let mut store = RedisStore::connect(url.expose())
                .await
                .map_err(BuildError::Redis)?;
            if let Some(prefix) = &settings.redis_prefix {
                store = store.with_prefix(prefix)?;
            }
            let pages = page_tokens_on(&store)?;
            let store = Arc::new(store);
            Ok((split(store.clone(), pages), store))
        }
        None => {
            let store = Arc::new(MemoryStore::new());
            // Tables of their own: the pages' unspent tokens are counted apart.
            let pages = Arc::new(MemoryStore::new().with_token_limits(page_token_limits()?));
            Ok((split(store.clone(), pages), store))
        }
    }
}

/// Registers a configured webhook endpoint unless the tenant has one with its URL (the
/// configuration was checked when it was read; a URL refused here names what is wrong).
async fn seed_webhook(
    store: &Store,
    now_ms: i64,
    tenant_id: &str,
    url: &str,
    events: &[String],
) -> Result<(), BuildError> {
    use crate::domain::webhook::{checked_events, checked_url, generate_secret};
    let refused = BuildError::Webhook;
    let anywhere = crate::domain::outbound::TargetPolicy {
        allow_private: true,
        allowed: Vec::new(),
    };
    let url = checked_url(url, &anywhere).map_err(refused)?;
    let events = checked_events(events).map_err(refused)?;
    let endpoint_id = crate::domain::ids::new_number('E', now_ms);
    store
        .webhooks
        .register(&crate::store::webhooks::NewEndpoint {
            tenant_id,
            url: url.as_str(),
            events: &events,
            secret: &generate_secret(),
            endpoint_id: &endpoint_id,
        })
        .await
        .map_err(BuildError::Database)?;
    Ok(())
}

/// Connects and migrates the database, provisions the tenants and connects the token and lock
/// stores: the state the API and the workers share (`mideng reconcile` uses it without the API).
pub async fn connect(settings: &Settings) -> Result<AppState, BuildError> {
    let store = open_store(settings).await?;
    for seed in &settings.tenants {
        store
            .tenants
            .upsert_tenant(
                &seed.tenant_id,
                &seed.api_key_sha256,
                seed.publishable_key_sha256.as_deref(),
            )
            .await
            .map_err(BuildError::Database)?;
        for (url, events) in &seed.webhooks {
            seed_webhook(
                &store,
                settings.clock.now_ms(),
                &seed.tenant_id,
                url,
                events,
            )
            .await?;
        }
    }
    let (tokens, locks) = open_guards(settings).await?;
    let mut records = store.backend.records();
    if settings.payments.replay_cache_entries > 0 {
        records = Arc::new(CachedRecords::new(
            records,
            settings.payments.replay_cache_entries,
            settings.payments.replay_cache_ttl,
        )?);
    }
    let state = AppState {
        records,
        tenants: Arc::new(TenantCache::new(settings.payments.tenant_cache)),
        ports: Ports {
            store,
            channels: Channels::new(settings.alipay.clone(), settings.wechat.clone()),
            locks,
            clock: settings.clock.clone(),
            clock_guard: Arc::new(ClockGuard::new(settings.payments.clock_skew_max)),
            settings: settings.payments.clone(),
        },
        tokens,
        metrics: metrics_handle(),
        pages: Arc::new(Pages::new(settings.pages.clone())),
        page_rates: Arc::new(api::checkout::PageRates::new()),
    };
    crate::metrics::initialize(
        settings.events.broker.name(),
        state.ports.store.backend.dialect(),
    );
    // The first verdict on the clock before the first request: a far-off clock refuses from
    // the start.
    if let Err(error) = clock_guard::check(&state.ports).await {
        tracing::warn!(%error, "could not compare the clock with the database's");
    }
    Ok(state)
}

/// The service, built and bound, not yet serving.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    metrics_listener: Option<TcpListener>,
    transport: TransportSettings,
    router: Router,
    state: AppState,
    reconcile: Option<ReconcileSettings>,
    purge: Option<PurgeSettings>,
    bills: Option<BillSettings>,
    events: EventSettings,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Application")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Connects, migrates, provisions the tenants and builds the router on `listener`.
    pub async fn build(settings: Settings, listener: TcpListener) -> Result<Self, BuildError> {
        let address = listener.local_addr()?;
        let state = connect(&settings).await?;
        let router = api::router(state.clone(), crate::web::routes(&state.pages))?;
        if let Some(worker) = &settings.events.relay {
            worker.relay.validate()?;
        }
        Ok(Self {
            listener,
            address,
            metrics_listener: None,
            transport: settings.transport,
            router,
            state,
            reconcile: settings.reconcile.clone(),
            purge: settings.purge.clone(),
            bills: settings.bills.clone(),
            events: settings.events,
        })
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves `/metrics` on `listener` (and nowhere else). Without one, the metrics are not
    /// served: the public listener never shows them.
    pub fn with_metrics_listener(mut self, listener: TcpListener) -> Self {
        self.metrics_listener = Some(listener);
        self
    }

    /// Where `/metrics` is served, if it is.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// The shared state (for workers beside the API).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves (and runs the configured workers: relay, consumer, reconciler, purge) until
    /// `shutdown` completes, then finishes the requests in flight and stops the workers between
    /// rounds.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut workers = Vec::new();
        workers.push(tokio::spawn(clock_guard::run(
            self.state.ports.clone(),
            stopped.clone(),
        )));
        if let Some(settings) = self.reconcile {
            let run = reconcile::run(self.state.ports.clone(), settings, stopped.clone());
            workers.push(tokio::spawn(run));
        }
        if let Some(settings) = self.bills {
            let run = bill::run(self.state.ports.clone(), settings, stopped.clone());
            workers.push(tokio::spawn(run));
        }
        if let Some(settings) = self.purge {
            workers.push(tokio::spawn(purge::run(
                self.state.retained(),
                settings,
                stopped.clone(),
            )));
        }
        let events = &self.events;
        if let Some(worker) = events.relay {
            let events_store = self.state.ports.store.events.clone();
            let publisher = events.broker.publisher(events_store.as_ref());
            match events_store.relay(publisher, worker.relay) {
                Ok(outbox_relay) => workers.push(tokio::spawn(relay::run(
                    events_store,
                    outbox_relay,
                    worker,
                    stopped.clone(),
                ))),
                Err(error) => tracing::error!(%error, "relay settings refused; no relay runs"),
            }
        }
        if let Some(settings) = events.consumer.clone() {
            let store = &self.state.ports.store;
            let consumer_ports = consumer::ConsumerPorts {
                grants: store.grants.clone(),
                failures: store.event_failures.clone(),
            };
            match events
                .broker
                .subscriber(store.events.as_ref(), PAYMENT_SUCCEEDED, &settings)
            {
                Ok(subscriber) => workers.push(tokio::spawn(consumer::run(
                    consumer_ports.clone(),
                    subscriber,
                    settings.clone(),
                    stopped.clone(),
                ))),
                Err(error) => tracing::error!(%error, "no entitlement consumer runs"),
            }
            if settings.revoke_on_refund {
                let revocations = crate::workers::ConsumerSettings {
                    group: format!("{}-revocations", settings.group),
                    ..settings.clone()
                };
                match events.broker.subscriber(
                    store.events.as_ref(),
                    REFUND_SUCCEEDED,
                    &revocations,
                ) {
                    Ok(subscriber) => workers.push(tokio::spawn(consumer::run_revocations(
                        consumer_ports.clone(),
                        subscriber,
                        revocations,
                        stopped.clone(),
                    ))),
                    Err(error) => tracing::error!(%error, "no revocation consumer runs"),
                }
            }
        }
        if let Some(settings) = events.webhooks.clone() {
            // Delivery obeys the switch that registration obeys: one setting, never two that
            // disagree.
            let settings = crate::workers::webhooks::WebhookSettings {
                targets: self.state.ports.settings.webhook_targets(),
                ..settings
            };
            workers.push(tokio::spawn(crate::workers::webhooks::run(
                self.state.ports.store.webhooks.clone(),
                self.state.ports.clock.clone(),
                self.state.ports.clock_guard.clone(),
                settings,
                stopped.clone(),
            )));
        }
        if let Some(listener) = self.metrics_listener {
            let mut metrics_stop = stopped.clone();
            let metrics = transport::serve(
                listener,
                api::metrics_router(self.state.clone()),
                self.transport,
                async move {
                    let _ = metrics_stop.wait_for(|stop| *stop).await;
                },
            );
            workers.push(tokio::spawn(async move {
                if let Err(error) = metrics.await {
                    tracing::error!(%error, "the metrics listener failed");
                }
            }));
        }
        let served = transport::serve(self.listener, self.router, self.transport, shutdown).await;
        stop.send_replace(true);
        for worker in workers {
            let _ = worker.await;
        }
        served
    }
}

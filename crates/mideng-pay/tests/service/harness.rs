//! The service under test: `Application::build` on port 0 against a real database (and Redis
//! for PostgreSQL and MySQL), with the channel simulator on port 0 sending its notifies back,
//! and an HTTP client that speaks to both as a merchant's backend would. The deployment is
//! assembled by `mideng_pay::testing`, as the storm's is; what is here is the tests' own: the
//! backends, the fixture keys, and a client with assertions.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mideng::outbox::sql::RelaySettings;
use mideng_channel::keys::PrivateKey;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::testing::{Blueprint, TenantAccess, create_database, start_simulator};
use mideng_pay::web::PageSettings;
use mideng_pay::workers::{Broker, ConsumerSettings, EventSettings, RelayWorkerSettings};
use mideng_sim::{MerchantKeys, SimConfig};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Every wait ends by this, so that a bug fails a test instead of hanging it.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
    Mysql,
    /// PostgreSQL, with tokens and locks on a Redis Cluster.
    PostgresOnRedisCluster,
}

pub(crate) fn unique(prefix: &str) -> String {
    let mut bytes = [0_u8; 6];
    getrandom::fill(&mut bytes).expect("random");
    format!("{prefix}-{}", hex::encode(bytes))
}

fn env_or(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

impl Backend {
    /// A database URL for a fresh service (SQLite: a new file; the servers: the shared test
    /// database, isolated by a fresh tenant).
    pub(crate) fn database_url(self) -> String {
        match self {
            Backend::Sqlite => format!(
                "sqlite://{}",
                std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("{}.db", unique("service")))
                    .display()
            ),
            Backend::Postgres | Backend::PostgresOnRedisCluster => env_or(
                "MIDENG_TEST_POSTGRES_URL",
                "postgres://mideng:mideng@127.0.0.1:5432/mideng_test",
            ),
            Backend::Mysql => env_or(
                "MIDENG_TEST_MYSQL_URL",
                "mysql://mideng:mideng@127.0.0.1:3306/mideng_test",
            ),
        }
    }

    /// Redis for tokens and locks, as in production, except on the embedded default.
    pub(crate) fn redis_url(self) -> Option<String> {
        match self {
            Backend::Sqlite | Backend::PostgresOnRedisCluster => None,
            Backend::Postgres | Backend::Mysql => {
                Some(env_or("MIDENG_TEST_REDIS_URL", "redis://127.0.0.1:6379/"))
            }
        }
    }
}

impl Backend {
    /// Seed nodes of the Redis Cluster, for the backend that uses one.
    pub(crate) fn redis_cluster(self) -> Vec<String> {
        match self {
            Backend::PostgresOnRedisCluster => env_or(
                "MIDENG_TEST_REDIS_CLUSTER_URLS",
                "redis://127.0.0.1:7000/,redis://127.0.0.1:7001/,redis://127.0.0.1:7002/",
            )
            .split(',')
            .map(str::to_owned)
            .collect(),
            _ => Vec::new(),
        }
    }
}

fn fixture(name: &str) -> PrivateKey {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mideng-channel/tests/fixtures")
        .join(name);
    let pem = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    PrivateKey::from_pem(&pem).expect("fixture key")
}

/// The simulator's configuration and the merchant's keys, from the fixture keys (generating
/// RSA keys per test would be slow).
pub(crate) fn sim_identity() -> &'static (SimConfig, MerchantKeys) {
    shared_identity()
}

/// [`sim_identity`] as the deployment builder holds it, made once.
fn shared_identity() -> &'static Arc<(SimConfig, MerchantKeys)> {
    static IDENTITY: OnceLock<Arc<(SimConfig, MerchantKeys)>> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        Arc::new(SimConfig::with_keys(
            fixture("merchant-private.pem"),
            fixture("channel-private.pem"),
        ))
    })
}

pub(crate) fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(256)
        // Well below the service's idle timeout (its 10 s head deadline): a kept-alive
        // connection is never reused at the moment the server closes it.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

/// A running simulator.
pub(crate) struct Sim {
    pub(crate) base: String,
}

/// Stops the servers when dropped.
struct Stopper(watch::Sender<bool>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// A running service with its simulator and a tenant of its own.
pub(crate) struct Service {
    pub(crate) base: String,
    pub(crate) api_key: String,
    /// The tenant's publishable key (what a checkout page shows).
    pub(crate) publishable_key: String,
    pub(crate) tenant: String,
    pub(crate) client: reqwest::Client,
    pub(crate) sim: Arc<Sim>,
    pub(crate) backend: Backend,
    pub(crate) database_url: String,
    /// The service's state, for running workers (reconciliation) by hand.
    pub(crate) state: mideng_pay::state::AppState,
    _stop: Stopper,
}

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| {
            panic!(
                "not JSON ({}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The problem code of a problem answer.
    pub(crate) fn code(&self) -> String {
        let body = self.json();
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}: {body}",
            self.status
        );
        body["code"].as_str().unwrap_or_default().to_owned()
    }
}

impl Service {
    /// A service with its own simulator and tenant.
    pub(crate) async fn start(backend: Backend) -> Self {
        Self::start_with(backend, PaymentSettings::default()).await
    }

    /// A service with its own simulator and tenant, and these payment settings.
    pub(crate) async fn start_with(backend: Backend, payments: PaymentSettings) -> Self {
        Self::start_on(
            backend,
            backend.database_url(),
            None,
            None,
            payments,
            queue_events(),
        )
        .await
    }

    /// Another instance of `first`'s deployment: the same database, simulator and Redis;
    /// the same tenant when `same_tenant`, else a tenant of its own.
    pub(crate) async fn beside(first: &Service, same_tenant: bool) -> Self {
        let tenant = same_tenant.then(|| (first.tenant.clone(), first.api_key.clone()));
        Self::start_on(
            first.backend,
            first.database_url.clone(),
            Some(first.sim.clone()),
            tenant,
            PaymentSettings::default(),
            queue_events(),
        )
        .await
    }

    /// A service on `database_url`, with `sim` or a new simulator, as `tenant` (id and key) or
    /// a new tenant.
    pub(crate) async fn start_on(
        backend: Backend,
        database_url: String,
        sim: Option<Arc<Sim>>,
        tenant: Option<(String, String)>,
        payments: PaymentSettings,
        events: EventSettings,
    ) -> Self {
        Self::start_with_pages(
            backend,
            database_url,
            sim,
            tenant,
            payments,
            events,
            |_, _, _| PageSettings::default(),
        )
        .await
    }

    /// [`Service::start_on`] with the pages `pages` makes of the tenant's id, its publishable
    /// key and the simulator's base URL.
    pub(crate) async fn start_with_pages(
        backend: Backend,
        database_url: String,
        sim: Option<Arc<Sim>>,
        tenant: Option<(String, String)>,
        payments: PaymentSettings,
        events: EventSettings,
        pages: impl FnOnce(&str, &str, &str) -> PageSettings,
    ) -> Self {
        // The tests' webhook receivers listen on loopback.
        let payments = PaymentSettings {
            webhook_private_targets: true,
            ..payments
        };
        Self::launch(backend, database_url, sim, tenant, payments, events, pages).await
    }

    /// A service whose webhooks reach only globally routable addresses, as in production
    /// (every other start lets them reach the tests' receivers on loopback), its dispatcher
    /// run with `webhooks`.
    pub(crate) async fn start_guarded(
        backend: Backend,
        webhooks: mideng_pay::workers::webhooks::WebhookSettings,
    ) -> Self {
        Self::launch(
            backend,
            backend.database_url(),
            None,
            None,
            PaymentSettings::default(),
            EventSettings {
                webhooks: Some(webhooks),
                ..queue_events()
            },
            |_, _, _| PageSettings::default(),
        )
        .await
    }

    /// [`Service::start_with_pages`] with `payments` as they are.
    async fn launch(
        backend: Backend,
        database_url: String,
        sim: Option<Arc<Sim>>,
        tenant: Option<(String, String)>,
        payments: PaymentSettings,
        events: EventSettings,
        pages: impl FnOnce(&str, &str, &str) -> PageSettings,
    ) -> Self {
        // Warnings of the service show up in a failing test's output.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
            .with_test_writer()
            .try_init();
        let (stop, stopped) = watch::channel(false);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let sim = match sim {
            Some(sim) => sim,
            None => {
                let (config, _) = sim_identity();
                let simulator = start_simulator(config, stopped.clone())
                    .await
                    .expect("simulator");
                Arc::new(Sim {
                    base: simulator.base,
                })
            }
        };
        let (tenant, api_key) =
            tenant.unwrap_or_else(|| (unique("tenant"), unique("key-0123456789")));
        // Derived from the secret key, so that an instance beside another of the same tenant
        // provisions the same publishable key rather than replacing it.
        let publishable_key = format!("pk-{}", mideng_pay::api::api_key_hash(&api_key));
        let blueprint = Blueprint {
            redis_url: backend.redis_url(),
            redis_cluster: backend.redis_cluster(),
            tenants: vec![TenantAccess {
                id: tenant.clone(),
                api_key: api_key.clone(),
                publishable_key: Some(publishable_key.clone()),
            }],
            payments,
            // Tests run rounds themselves, when they choose.
            reconcile: None,
            events,
            pages: pages(&tenant, &publishable_key, &sim.base),
            ..Blueprint::new(shared_identity().clone(), &sim.base, &database_url)
        };
        let state = blueprint
            .serve(listener, stopped)
            .await
            .unwrap_or_else(|error| panic!("{backend:?}: the service did not start: {error}"));
        Self {
            base,
            api_key,
            publishable_key,
            tenant,
            client: http_client(),
            sim,
            backend,
            database_url,
            state,
            _stop: Stopper(stop),
        }
    }

    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Answer {
        self.send_as(&self.api_key, method, path, body, headers)
            .await
    }

    /// [`Service::send`] with `key` as the bearer key (the publishable key, another tenant's).
    pub(crate) async fn send_as(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let mut request = self.client.request(method, url).bearer_auth(key);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("the service answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.expect("body").to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }

    pub(crate) async fn post(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
        self.send(
            reqwest::Method::POST,
            path,
            Some(serde_json::to_vec(&body).expect("json")),
            headers,
        )
        .await
    }

    pub(crate) async fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None, &[]).await
    }

    pub(crate) async fn token(&self) -> String {
        let answer = self.post("/v1/tokens", json!({}), &[]).await;
        assert_eq!(answer.status, 201, "{}", answer.json());
        answer.json()["token"].as_str().expect("token").to_owned()
    }

    pub(crate) async fn create_order(&self, order_id: &str, user_id: &str, amount: i64) -> Value {
        let answer = self
            .post(
                "/v1/orders",
                json!({"order_id": order_id, "user_id": user_id, "amount": amount, "currency": "CNY",
                       "entitlement": {"sku": "vip-month", "quantity": 1}}),
                &[],
            )
            .await;
        assert_eq!(answer.status, 201, "{}", answer.json());
        answer.json()
    }

    /// Creates a payment with a fresh token; the answer.
    pub(crate) async fn create_payment(&self, order_id: &str, channel: &str) -> Answer {
        let token = self.token().await;
        self.post(
            &format!("/v1/orders/{order_id}/payments"),
            json!({"channel": channel}),
            &[("Idempotency-Token", &token)],
        )
        .await
    }

    /// A new order of `user_id` for `amount` fen, paid on `channel` at the simulator, once the
    /// service has it PAID: its order id and payment number.
    pub(crate) async fn paid_payment(
        &self,
        user_id: &str,
        channel: &str,
        amount: i64,
    ) -> (String, String) {
        let order_id = unique("o");
        self.create_order(&order_id, user_id, amount).await;
        let created = self.create_payment(&order_id, channel).await;
        assert_eq!(created.status, 201, "{}", created.json());
        let number = created.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned();
        assert_eq!(self.pay_at_channel(&number).await["outcome"], "paid");
        self.settled_trade(&number).await;
        let started = Instant::now();
        while self.order(&order_id).await["status"] != "PAID" {
            assert!(started.elapsed() < WAIT_LIMIT, "{order_id} was never paid");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (order_id, number)
    }

    pub(crate) async fn order(&self, order_id: &str) -> Value {
        let answer = self.get(&format!("/v1/orders/{order_id}")).await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        answer.json()
    }

    /// The user's wallet balance and how many debits its statement shows.
    pub(crate) async fn balance_and_debits(&self, user: &str) -> (i64, usize) {
        let wallet = self.get(&format!("/v1/wallets/{user}")).await.json();
        let debits = wallet["entries"].as_array().map_or(0, |entries| {
            entries
                .iter()
                .filter(|entry| entry["kind"] == "DEBIT")
                .count()
        });
        (wallet["balance"].as_i64().unwrap_or(-1), debits)
    }

    /// Scans and pays the trade at the simulator.
    pub(crate) async fn pay_at_channel(&self, payment_no: &str) -> Value {
        self.sim_post(&format!("/sim/trades/{payment_no}/pay"), json!({}))
            .await
    }

    pub(crate) async fn sim_post(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.sim.base))
            .json(&body)
            .send()
            .await
            .expect("the simulator answers");
        response.json().await.expect("json")
    }

    pub(crate) async fn sim_put(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .put(format!("{}{path}", self.sim.base))
            .json(&body)
            .send()
            .await
            .expect("the simulator answers");
        assert!(response.status().is_success(), "{path}");
        response.json().await.expect("json")
    }

    pub(crate) async fn sim_trade(&self, payment_no: &str) -> Value {
        self.client
            .get(format!("{}/sim/trades/{payment_no}", self.sim.base))
            .send()
            .await
            .expect("the simulator answers")
            .json()
            .await
            .expect("json")
    }

    /// Seconds of channel time until the earliest resend of a notify whose last delivery
    /// failed, when that is more than a second away.
    async fn resend_wait_secs(&self, trade: &Value) -> Option<u64> {
        let next = trade["notifies"]
            .as_array()?
            .iter()
            .filter(|notify| {
                notify["state"] == "scheduled"
                    && notify["deliveries"]
                        .as_array()
                        .and_then(|deliveries| deliveries.last())
                        .is_some_and(|last| last["acknowledged"] == false)
            })
            .filter_map(|notify| notify["next_delivery_at_ms"].as_i64())
            .min()?;
        let clock = self
            .client
            .get(format!("{}/sim/clock", self.sim.base))
            .send()
            .await
            .ok()?
            .json::<Value>()
            .await
            .ok()?;
        let wait_ms = next.checked_sub(clock["now_ms"].as_i64()?)?;
        (wait_ms > 1_000).then(|| u64::try_from(wait_ms.div_euclid(1000) + 1).unwrap_or(1))
    }

    /// Waits until every notify of the trade is settled (acknowledged, exhausted, dropped…)
    /// and returns the trade.
    pub(crate) async fn settled_trade(&self, payment_no: &str) -> Value {
        let started = Instant::now();
        loop {
            let trade = self.sim_trade(payment_no).await;
            let settled = trade["notifies"].as_array().is_some_and(|notifies| {
                notifies.iter().all(|notify| {
                    !matches!(notify["state"].as_str(), Some("scheduled" | "delivering"))
                })
            });
            if settled {
                return trade;
            }
            assert!(
                started.elapsed() < WAIT_LIMIT,
                "notifies of {payment_no} never settled: {trade:#}"
            );
            // A delivery the service did not answer in time (a loaded machine) is resent on
            // the channel's schedule, minutes later: the channel's clock is moved to it.
            if let Some(wait_secs) = self.resend_wait_secs(&trade).await {
                self.sim_post("/sim/clock/advance", json!({"seconds": wait_secs}))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The wall clock moved by a fixed number of milliseconds (ahead, or behind when negative): a
/// service's clock that a test sets past an expiry, or off the database's.
pub(crate) struct Shifted(pub(crate) i64);

impl mideng_pay::flows::Clock for Shifted {
    fn now_ms(&self) -> i64 {
        mideng::clock::now_ms().saturating_add(self.0)
    }
}

/// Serves `app` on a free loopback port for the rest of the test; its base URL.
pub(crate) async fn serve_on_loopback(app: axum::Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

/// Runs `count` copies of `task` at once (after a barrier) and returns their results.
pub(crate) async fn race<T, F, Fut>(count: usize, task: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(count));
    let handles: Vec<_> = (0..count)
        .map(|index| {
            let barrier = barrier.clone();
            let work = task(index);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(count);
    for handle in handles {
        results.push(handle.await.expect("task"));
    }
    results
}

/// The channel's private key (signs the simulator's notifies), for crafting notifies.
pub(crate) fn fixture_channel_key() -> PrivateKey {
    fixture("channel-private.pem")
}

impl Service {
    /// The user's grants.
    pub(crate) async fn grants(&self, user_id: &str) -> Vec<Value> {
        let answer = self
            .get(&format!("/v1/entitlements?user_id={user_id}"))
            .await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        answer.json()["grants"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until the user holds `count` grants (the relay and the consumer run on their own
    /// schedules), then returns them; a second look after a pause must find no more.
    pub(crate) async fn settled_grants(&self, user_id: &str, count: usize) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let grants = self.grants(user_id).await;
            assert!(
                grants.len() <= count,
                "more grants than paid orders: {grants:#?}"
            );
            if grants.len() == count {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let again = self.grants(user_id).await;
                assert_eq!(again.len(), count, "{again:#?}");
                return again;
            }
            assert!(
                started.elapsed() < WAIT_LIMIT,
                "{user_id} holds {} grants, expected {count}",
                grants.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Relay and consumer on the in-database queue, with short claims: many deployments share the
/// servers' databases, and one that ends mid-round must not hold other tests' rows for long.
pub(crate) fn queue_events() -> EventSettings {
    EventSettings {
        broker: Broker::Queue,
        relay: Some(RelayWorkerSettings {
            relay: RelaySettings {
                batch: 20,
                claim_lease: Duration::from_secs(3),
                publish_timeout: Duration::from_secs(1),
                retry_cap: Duration::from_secs(1),
                ..RelaySettings::default()
            },
            interval: Duration::from_millis(100),
        }),
        consumer: Some(ConsumerSettings {
            prefetch: 4,
            visibility: Duration::from_secs(3),
            ..ConsumerSettings::default()
        }),
        webhooks: Some(fast_webhooks()),
    }
}

/// The webhook dispatcher on a schedule of milliseconds (at once, then 100, 200 and 300 ms:
/// four attempts), with a one-second timeout, and an endpoint's backoff of milliseconds too
/// (10 ms doubling to 50 ms).
pub(crate) fn fast_webhooks() -> mideng_pay::workers::webhooks::WebhookSettings {
    mideng_pay::workers::webhooks::WebhookSettings {
        schedule: [0, 100, 200, 300]
            .into_iter()
            .map(Duration::from_millis)
            .collect(),
        timeout: Duration::from_secs(1),
        interval: Duration::from_millis(50),
        endpoint_backoff: Duration::from_millis(10),
        endpoint_backoff_max: Duration::from_millis(50),
        ..mideng_pay::workers::webhooks::WebhookSettings::default()
    }
}

/// A PostgreSQL database of its own, for deployments whose outbox no other test's relay may
/// drain (the shared test database has many relays on it).
pub(crate) async fn isolated_postgres() -> String {
    create_database(&Backend::Postgres.database_url(), &unique("mideng_iso"))
        .await
        .expect("the test role may create databases (scripts/services up)")
}

/// A MySQL database of its own (`mideng_iso_<hex>`, a name the test user may create), for the
/// same reason as [`isolated_postgres`].
pub(crate) async fn isolated_mysql() -> String {
    use mideng::sqlx::Connection as _;
    let server_url = Backend::Mysql.database_url();
    let name = unique("mideng_iso").replace('-', "_");
    let mut admin = mideng::sqlx::MySqlConnection::connect(&server_url)
        .await
        .expect("MariaDB answers (scripts/services up)");
    // The name is made of letters, digits and `_` only (`unique`): safe to splice.
    mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name}"
    )))
    .execute(&mut admin)
    .await
    .expect("the test user may create mideng_iso_% databases (scripts/services up)");
    let (prefix, _) = server_url
        .rsplit_once('/')
        .expect("a database URL ends with its database");
    format!("{prefix}/{name}")
}

/// A database that no other test's service uses, on `backend`: for tests whose assertions no
/// other deployment's workers may disturb (every instance on a database dispatches its
/// webhooks).
pub(crate) async fn isolated_database(backend: Backend) -> String {
    match backend {
        Backend::Sqlite => backend.database_url(),
        Backend::Postgres | Backend::PostgresOnRedisCluster => isolated_postgres().await,
        Backend::Mysql => isolated_mysql().await,
    }
}

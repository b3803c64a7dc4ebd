//! Assembling a deployment: the channel simulator, the service instances that point their
//! channels at it, and the database they share.
//!
//! A [`Blueprint`] is what every instance of one deployment is started from: the simulator's
//! address and identity, the database, Redis, the tenants, the payment behaviour and the
//! workers. [`Blueprint::settings`] turns it into the [`Settings`] of the instance at one base
//! URL (the channels send their notifies there), and [`Blueprint::serve`] starts such an
//! instance on the caller's runtime. Where an instance runs is the caller's choice: the service
//! tests serve it on the test's runtime, the storm on a runtime of its own that it can drop
//! mid-request.

use std::sync::Arc;

use mideng::redact::SecretUrl;
use mideng_channel::adapter::{Channel, ChannelError};
use mideng_sim::{MerchantKeys, SimConfig, SimError, Simulator};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::api_key_hash;
use crate::app::{Application, BuildError, Settings, TenantSeed};
use crate::flows::PaymentSettings;
use crate::state::AppState;
use crate::transport::TransportSettings;
use crate::web::PageSettings;
use crate::workers::EventSettings;
use crate::workers::reconcile::ReconcileSettings;

/// Why a part of a deployment did not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeployError {
    /// A loopback port could not be bound or read.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// The simulator refused its configuration.
    #[error("simulator: {0}")]
    Simulator(#[from] SimError),
    /// The merchant's channel adapters could not be built against the simulator.
    #[error("channel adapters: {0}")]
    Channel(#[from] ChannelError),
    /// An instance (or the operator's connection) did not start.
    #[error("service: {0}")]
    Service(#[from] BuildError),
    /// The database server could not be reached.
    #[error("database server unreachable: {0}")]
    DatabaseUnreachable(mideng::sqlx::Error),
    /// The database server refused to create a database (the role needs `CREATEDB`).
    #[error("creating a database: {0}")]
    DatabaseNotCreated(mideng::sqlx::Error),
    /// The server URL names no database to put a new one beside.
    #[error("the database URL names no database")]
    DatabaseUrl,
}

/// A tenant and its API keys: the keys the clients send, whose hashes the service is
/// provisioned with.
#[derive(Clone, Debug)]
pub struct TenantAccess {
    /// Tenant id.
    pub id: String,
    /// Its secret API key.
    pub api_key: String,
    /// Its publishable key (what a checkout page would show), if it has one.
    pub publishable_key: Option<String>,
}

impl TenantAccess {
    /// A tenant with this secret key and a fresh publishable key.
    pub fn new(id: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            api_key: api_key.into(),
            publishable_key: Some(crate::domain::keys::generate_key(
                crate::domain::keys::KeyKind::Publishable,
            )),
        }
    }

    /// What the service is provisioned with: the id and the keys' hashes, never the keys.
    pub fn seed(&self) -> TenantSeed {
        TenantSeed {
            tenant_id: self.id.clone(),
            api_key_sha256: api_key_hash(&self.api_key),
            publishable_key_sha256: self.publishable_key.as_deref().map(api_key_hash),
            webhooks: Vec::new(),
        }
    }
}

/// The channel simulator, serving on a loopback port.
#[derive(Clone)]
pub struct RunningSimulator {
    /// The simulator itself, for driving its clock and faults in process.
    pub simulator: Simulator,
    /// Its base URL (`http://127.0.0.1:<port>`).
    pub base: String,
}

impl std::fmt::Debug for RunningSimulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunningSimulator")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Starts the simulator on a free loopback port (port 0, so that deployments side by side
/// never collide); it serves until `stop` turns true.
pub async fn start_simulator(
    config: &SimConfig,
    mut stop: watch::Receiver<bool>,
) -> Result<RunningSimulator, DeployError> {
    // Tests and storms reconcile the day they made: its bills are served as it runs.
    let simulator = Simulator::new(SimConfig {
        bills_as_the_day_runs: true,
        ..config.clone()
    })?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(simulator.clone().serve(listener, async move {
        let _ = stop.wait_for(|stop| *stop).await;
    }));
    Ok(RunningSimulator { simulator, base })
}

/// What every instance of one deployment is started from.
#[derive(Clone)]
pub struct Blueprint {
    /// The simulator's configuration and the merchant's keys: the adapters sign with the
    /// merchant's key and verify the simulator's.
    pub identity: Arc<(SimConfig, MerchantKeys)>,
    /// The simulator's base URL, where the adapters send their requests.
    pub sim_base: String,
    /// The database every instance shares.
    pub database_url: String,
    /// Each instance's pool size.
    pub database_connections_max: u32,
    /// Redis for tokens and locks; `None` (and no cluster): in-process stores.
    pub redis_url: Option<String>,
    /// Seed nodes of a Redis Cluster, instead of `redis_url`.
    pub redis_cluster: Vec<String>,
    /// Key prefix in Redis, so that deployments sharing one Redis never meet.
    pub redis_prefix: Option<String>,
    /// Tenants every instance provisions at start.
    pub tenants: Vec<TenantAccess>,
    /// Payment behaviour.
    pub payments: PaymentSettings,
    /// The scheduled reconciler of every instance; `None`: rounds only by hand.
    pub reconcile: Option<ReconcileSettings>,
    /// The broker, and whether the outbox relay and the entitlement consumer run.
    pub events: EventSettings,
    /// The demo checkout and the operator console (none by default).
    pub pages: PageSettings,
}

impl std::fmt::Debug for Blueprint {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Database and Redis URLs may carry passwords: they are left out.
        formatter
            .debug_struct("Blueprint")
            .field("sim_base", &self.sim_base)
            .field("tenants", &self.tenants.len())
            .field("payments", &self.payments)
            .field("reconcile", &self.reconcile)
            .field("broker", &self.events.broker.name())
            .finish_non_exhaustive()
    }
}

impl Blueprint {
    /// A deployment on `database_url` against the simulator at `sim_base`: 16 connections per
    /// instance, in-process tokens and locks, no tenants, default payments, no workers.
    pub fn new(
        identity: Arc<(SimConfig, MerchantKeys)>,
        sim_base: impl Into<String>,
        database_url: impl Into<String>,
    ) -> Self {
        Self {
            identity,
            sim_base: sim_base.into(),
            database_url: database_url.into(),
            database_connections_max: 16,
            redis_url: None,
            redis_cluster: Vec::new(),
            redis_prefix: None,
            tenants: Vec::new(),
            payments: PaymentSettings::default(),
            reconcile: None,
            events: EventSettings::default(),
            pages: PageSettings::default(),
        }
    }

    /// The settings of the instance at `base` (`http://127.0.0.1:<port>`): its adapters ask the
    /// simulator and have the channels notify `base`.
    pub fn settings(&self, base: &str) -> Result<Settings, DeployError> {
        let (config, merchant) = self.identity.as_ref();
        let (alipay, wechat) =
            mideng_sim::merchant_channels(config, merchant, &self.sim_base, base)?;
        Ok(Settings {
            database_url: self.database_url.as_str().into(),
            database_connections_max: self.database_connections_max,
            redis_url: self.redis_url.as_deref().map(SecretUrl::from),
            redis_cluster: self
                .redis_cluster
                .iter()
                .map(|node| SecretUrl::from(node.as_str()))
                .collect(),
            redis_prefix: self.redis_prefix.clone(),
            alipay: Some(Arc::new(alipay) as Arc<dyn Channel>),
            wechat: Some(Arc::new(wechat) as Arc<dyn Channel>),
            payments: self.payments.clone(),
            tenants: self.tenants.iter().map(TenantAccess::seed).collect(),
            reconcile: self.reconcile.clone(),
            // No deployment here keeps data long enough to purge.
            purge: None,
            bills: None,
            events: self.events.clone(),
            transport: TransportSettings::default(),
            pages: self.pages.clone(),
            clock: Arc::new(crate::flows::SystemClock),
        })
    }

    /// The operator's side of the deployment: a small pool of its own on the same database
    /// and the same channels (reconciliation by hand asks them), without tenants, Redis or
    /// workers, so that it runs whatever happens to the instances. `notify_base` is the notify
    /// URL its adapters carry, though it never creates a trade.
    pub async fn operator(&self, notify_base: &str) -> Result<AppState, DeployError> {
        let settings = Settings {
            database_connections_max: 4,
            redis_url: None,
            redis_cluster: Vec::new(),
            redis_prefix: None,
            tenants: Vec::new(),
            reconcile: None,
            events: EventSettings::default(),
            pages: PageSettings::default(),
            ..self.settings(notify_base)?
        };
        Ok(crate::app::connect(&settings).await?)
    }

    /// Builds an instance on `listener` and serves it on the caller's runtime until `stop`
    /// turns true; its state, for running workers by hand.
    pub async fn serve(
        &self,
        listener: TcpListener,
        mut stop: watch::Receiver<bool>,
    ) -> Result<AppState, DeployError> {
        let base = format!("http://{}", listener.local_addr()?);
        let application = Application::build(self.settings(&base)?, listener).await?;
        let state = application.state().clone();
        tokio::spawn(application.run_until(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }));
        Ok(state)
    }
}

/// Creates a database named after `name` (lowercase letters, digits and `_`) beside the one
/// `server_url` names, on PostgreSQL, and returns its URL: a deployment whose outbox and rows
/// no other deployment's workers touch. The role needs `CREATEDB`.
pub async fn create_database(server_url: &str, name: &str) -> Result<String, DeployError> {
    use mideng::sqlx::Connection;
    let name: String = name
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let (prefix, _) = server_url
        .rsplit_once('/')
        .ok_or(DeployError::DatabaseUrl)?;
    let mut admin = mideng::sqlx::PgConnection::connect(server_url)
        .await
        .map_err(DeployError::DatabaseUnreachable)?;
    // The name is made of letters, digits and `_` only (above): safe to splice.
    mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name}"
    )))
    .execute(&mut admin)
    .await
    .map_err(DeployError::DatabaseNotCreated)?;
    Ok(format!("{prefix}/{name}"))
}

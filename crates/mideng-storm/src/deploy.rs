//! A deployment started in this process: the simulator, the service instances, the proxies.
//!
//! Each instance runs on a thread and runtime of its own. [`Deployment::crash`] shuts that
//! runtime down at once: every request in flight, open transaction and connection of the instance is abandoned
//! where it stood, as with `kill -9` (the database rolls back, Redis locks run out their TTL,
//! the broker redelivers what was unacknowledged). [`Deployment::restart`] starts it again on
//! the same port. The operator side (audit queries, reconciliation by hand) uses a state of its
//! own on the deployment's runtime, so a crash never takes it down.
//!
//! What a deployment is made of (the simulator, each instance's settings, the run's database,
//! the proxies) comes from `mideng_pay::testing`, which the service's tests share; what is the
//! storm's own is here: the stacks and their flags, and instances that can crash.
//!
//! The replicated stack's servers are `scripts/replicated`'s (a PostgreSQL primary and its
//! synchronous standby behind a front, a Redis Cluster of three masters and three replicas, a
//! NATS JetStream cluster of three): the deployment brings them up with that script, and fails
//! them over with it ([`Deployment::pg_failover`], [`Deployment::redis_failover`],
//! [`Deployment::nats_outage`], then [`Deployment::repair_replicated`]) or crashes them in place
//! ([`Deployment::server_restart`]).
//!
//! With [`DeployOptions::processes`], the simulator and the instances are processes of the
//! `mideng` executable instead ([`Processes`]): a crash is SIGKILL, a restart a new process.

mod address;
mod database;
mod processes;
mod replicated;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mideng::outbox::nats::NatsSettings;
use mideng::outbox::rabbitmq::RabbitSettings;
use mideng::outbox::sql::RelaySettings;
use mideng_pay::api::generate_api_key;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::state::AppState;
pub use mideng_pay::testing::TenantAccess;
use mideng_pay::testing::{Blueprint, LinkFault, Proxy, start_simulator};
use mideng_pay::workers::reconcile::ReconcileSettings;
use mideng_pay::workers::webhooks::WebhookSettings;
use mideng_pay::workers::{Broker, ConsumerSettings, EventSettings, RelayWorkerSettings};
use mideng_pay::{Application, Settings};
use mideng_sim::{MerchantKeys, SimConfig};
use tokio::sync::watch;

use self::address::{server_address, with_address};
use self::database::create_run_database;
pub use self::database::{drop_run_database, is_mysql};
pub use self::processes::{CLOCK_SKEW_SECS_MAX, PROCESS_ORDER_LOCK_LEASE, Processes};
use self::replicated::Replicated;
pub use self::replicated::{PgNetFault, RedisPartition, ServerRestart};

/// What the deployment runs on.
#[derive(Clone, Debug)]
pub enum Stack {
    /// The embedded default: a SQLite file in `dir`, in-process tokens and locks, the
    /// in-database queue. One instance (in-process locks are not shared).
    Embedded {
        /// Where the database file goes.
        dir: PathBuf,
    },
    /// PostgreSQL or MySQL / MariaDB (a database created for the run), Redis and RabbitMQ,
    /// the last two reached through proxies that the faults cut.
    Servers {
        /// An existing database on the server (`postgres://…` or `mysql://…`); the run creates
        /// its own next to it.
        database_url: String,
        /// `host:port` of Redis.
        redis: String,
        /// `host:port` of RabbitMQ (guest/guest).
        rabbitmq: String,
    },
    /// `scripts/replicated`'s servers, which the deployment starts with that script: the
    /// database through the PostgreSQL front (a database created for the run), a Redis Cluster
    /// for tokens and locks, NATS JetStream with a stream of three replicas. The faults kill a
    /// primary, a master or a node for real.
    Replicated {
        /// The script (`scripts/replicated`).
        script: PathBuf,
        /// Its `--dir` (`None`: the script's default, `target/replicated`).
        dir: Option<PathBuf>,
        /// `scripts/ha`, when PostgreSQL runs under Patroni (etcd x3, HAProxy in front)
        /// instead of `scripts/replicated`'s primary and standby: Patroni, not the storm,
        /// decides each failover, which a fault causes (the primary's node killed).
        patroni: Option<PathBuf>,
        /// The negative control (`--break-layer sync-standby`): `scripts/replicated`'s standby
        /// left asynchronous, and each failover preceded by a moment of replication lag, so
        /// that the promoted standby lacks commits the primary acknowledged.
        async_standby: bool,
    },
}

impl Stack {
    /// What the stack is made of, for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Stack::Embedded { .. } => "embedded (SQLite, in-process stores, in-database queue)",
            Stack::Servers { database_url, .. } if is_mysql(database_url) => {
                "MySQL / MariaDB + Redis + RabbitMQ"
            }
            Stack::Servers { .. } => "PostgreSQL + Redis + RabbitMQ",
            Stack::Replicated {
                patroni: Some(_), ..
            } => {
                "replicated, PostgreSQL under Patroni: Patroni x2 + etcd x3 + HAProxy, \
                 synchronous standby; Redis Cluster 3+3, NATS JetStream x3"
            }
            Stack::Replicated {
                async_standby: true,
                ..
            } => {
                "replicated: PostgreSQL primary + ASYNCHRONOUS standby (negative control: \
                 failovers lose acknowledged commits), Redis Cluster 3+3, NATS JetStream x3"
            }
            Stack::Replicated { .. } => {
                "replicated: PostgreSQL primary + synchronous standby, Redis Cluster 3+3, \
                 NATS JetStream x3"
            }
        }
    }
}

/// Which stack to deploy: the storm's and the bench's `--stack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum StackKind {
    /// SQLite, in-process stores, the in-database queue; one instance.
    Embedded,
    /// PostgreSQL + Redis + RabbitMQ.
    Servers,
    /// `scripts/replicated`'s servers, started by the run: PostgreSQL primary + synchronous
    /// standby, Redis Cluster, NATS JetStream cluster; the faults fail them over.
    Replicated,
    /// The replicated stack with PostgreSQL under Patroni (`scripts/ha`: etcd x3, HAProxy in
    /// front): its failovers are Patroni's, caused by faults (the primary's node killed, its
    /// PostgreSQL paused).
    Ha,
}

/// Where the servers stack finds its servers: `--database`, `--redis`, `--rabbitmq`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerArgs {
    /// The SQL server of the servers stack, as a URL naming an existing database:
    /// `postgres://…` or `mysql://…` (MariaDB too). Each run creates its own databases beside
    /// it (PostgreSQL: the role needs CREATEDB; MySQL: privileges on `storm_%`).
    #[arg(
        long,
        visible_alias = "postgres-url",
        default_value = "postgres://mideng:mideng@127.0.0.1:5432/mideng_test"
    )]
    pub database: String,
    /// Redis of the servers stack, `host:port`.
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub redis: String,
    /// RabbitMQ of the servers stack, `host:port` (guest/guest).
    #[arg(long, default_value = "127.0.0.1:5672")]
    pub rabbitmq: String,
    /// The replicated stack's script, which starts and fails over its servers.
    #[arg(long, default_value = "scripts/replicated")]
    pub replicated_script: PathBuf,
    /// The replicated stack's `--dir` for the script (default: the script's own,
    /// `target/replicated`; its ports are fixed either way).
    #[arg(long)]
    pub replicated_dir: Option<PathBuf>,
    /// The `ha` stack's PostgreSQL script (Patroni, etcd, HAProxy).
    #[arg(long, default_value = "scripts/ha")]
    pub ha_script: PathBuf,
}

impl Default for ServerArgs {
    fn default() -> Self {
        Self {
            database: "postgres://mideng:mideng@127.0.0.1:5432/mideng_test".to_owned(),
            redis: "127.0.0.1:6379".to_owned(),
            rabbitmq: "127.0.0.1:5672".to_owned(),
            replicated_script: PathBuf::from("scripts/replicated"),
            replicated_dir: None,
            ha_script: PathBuf::from("scripts/ha"),
        }
    }
}

impl StackKind {
    /// The stack of this kind: the embedded one's database in `dir`, the servers' from `servers`.
    pub fn stack(self, dir: &std::path::Path, servers: &ServerArgs) -> Stack {
        match self {
            StackKind::Embedded => Stack::Embedded {
                dir: dir.to_path_buf(),
            },
            StackKind::Servers => Stack::Servers {
                database_url: servers.database.clone(),
                redis: servers.redis.clone(),
                rabbitmq: servers.rabbitmq.clone(),
            },
            StackKind::Replicated => Stack::Replicated {
                script: servers.replicated_script.clone(),
                dir: servers.replicated_dir.clone(),
                patroni: None,
                async_standby: false,
            },
            StackKind::Ha => Stack::Replicated {
                script: servers.replicated_script.clone(),
                dir: servers.replicated_dir.clone(),
                patroni: Some(servers.ha_script.clone()),
                async_standby: false,
            },
        }
    }
}

/// How to deploy.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    /// The stack.
    pub stack: Stack,
    /// Service instances (1 on the embedded stack).
    pub instances: usize,
    /// Tenants to provision.
    pub tenants: usize,
    /// Payment behaviour of every instance.
    pub payments: PaymentSettings,
    /// Run the reconciler on every instance (besides any round the caller runs).
    pub reconcile: Option<ReconcileSettings>,
    /// Run the outbox relay and the entitlement consumer on every instance.
    pub events: bool,
    /// A label that makes names of this run unique (database, queues, Redis prefix).
    pub run_id: String,
    /// Run the simulator and the instances as processes of the `mideng` executable; `None`:
    /// in this process, each instance on a runtime of its own.
    pub processes: Option<Processes>,
    /// On the servers stack (and the database link of the `ha` stack): the instances reach
    /// the database, Redis and RabbitMQ through in-process TCP proxies that the storm's faults
    /// cut and trouble. Off, they connect directly, as in production: the bench measures the
    /// service, not the proxies (which cost a socket hop each way and the CPU that pumps it).
    pub fault_links: bool,
}

struct Instance {
    base: String,
    port: u16,
    /// What stops it: its runtime's crash switch or its process; `None` while it is down.
    running: Option<Running>,
    /// A process instance's configuration file and metrics listener.
    process: Option<(PathBuf, String)>,
}

/// A running instance.
enum Running {
    /// On a runtime of this process: the sender crashes it.
    Runtime(tokio::sync::oneshot::Sender<()>),
    /// A `mideng serve` process.
    Process(tokio::process::Child),
}

/// A running deployment.
pub struct Deployment {
    options: DeployOptions,
    /// The simulator's process, when it runs as one (in this process otherwise, until `stop`).
    simulator_process: Option<tokio::process::Child>,
    /// The simulator's base URL.
    pub sim_base: String,
    /// The database every instance shares.
    pub database_url: String,
    /// The tenants.
    pub tenants: Vec<TenantAccess>,
    /// What every instance starts from, again after a crash.
    blueprint: Blueprint,
    instances: Vec<Instance>,
    redis: Option<Proxy>,
    broker: Option<Proxy>,
    /// The instances' link to the database (servers stack): its faults are the storm's.
    database: Option<Proxy>,
    /// The instances' link to the channel (the simulator): its late and reset answers are the
    /// storm's. The storm's own calls to the simulator (buyers, control) go around it.
    channel: Proxy,
    /// The replicated stack's script, and what its failovers left to repair.
    replicated: Option<Replicated>,
    operator: AppState,
    stop: watch::Sender<bool>,
    /// Asks the processes whether they answer yet.
    http: reqwest::Client,
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Deployment")
            .field("stack", &self.options.stack.label())
            .field("instances", &self.instances.len())
            .finish_non_exhaustive()
    }
}

impl Deployment {
    /// Starts the simulator, creates the database, and starts the instances.
    pub async fn start(
        identity: (SimConfig, MerchantKeys),
        options: DeployOptions,
    ) -> anyhow::Result<Self> {
        let (stop, stopped) = watch::channel(false);
        let http = reqwest::Client::builder().no_proxy().build()?;
        let (simulator_process, sim_base) = match &options.processes {
            Some(processes) => {
                let (child, base) = processes.start_simulator(&http).await?;
                (Some(child), base)
            }
            None => (None, start_simulator(&identity.0, stopped).await?.base),
        };
        let mut replicated = None;
        let mut redis_cluster = Vec::new();
        let mut database = None;
        let (database_url, redis, broker) = match &options.stack {
            Stack::Embedded { dir } => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!("{}.db", options.run_id));
                (format!("sqlite://{}", path.display()), None, None)
            }
            Stack::Replicated {
                script,
                dir,
                patroni,
                async_standby,
            } => {
                let servers =
                    Replicated::new(script, dir.as_deref(), patroni.as_deref(), *async_standby);
                let urls = servers.up().await?;
                let database =
                    create_run_database(&urls.postgres, &format!("storm_{}", options.run_id))
                        .await
                        .context("the run's database, through the replicated PostgreSQL's front")?;
                redis_cluster = urls.redis_cluster.clone();
                replicated = Some((servers, urls));
                (database, None, None)
            }
            Stack::Servers {
                database_url,
                redis,
                rabbitmq,
            } => (
                create_run_database(database_url, &format!("storm_{}", options.run_id))
                    .await
                    .context(
                        "the run's database (scripts/services up; the PostgreSQL role needs \
                         CREATEDB, the MySQL user privileges on storm_%)",
                    )?,
                if options.fault_links {
                    Some(Proxy::start(redis).await?)
                } else {
                    None
                },
                if options.fault_links {
                    Some(Proxy::start(rabbitmq).await?)
                } else {
                    None
                },
            ),
        };
        // Where the instances find Redis and RabbitMQ: through the proxies, or directly.
        let (redis_address, broker_address) = match &options.stack {
            Stack::Servers {
                redis: direct_redis,
                rabbitmq: direct_broker,
                ..
            } => (
                Some(redis.as_ref().map_or_else(
                    || direct_redis.clone(),
                    |proxy| format!("127.0.0.1:{}", proxy.port()),
                )),
                Some(broker.as_ref().map_or_else(
                    || direct_broker.clone(),
                    |proxy| format!("127.0.0.1:{}", proxy.port()),
                )),
            ),
            _ => (None, None),
        };
        let tenants: Vec<TenantAccess> = (0..options.tenants.max(1))
            .map(|index| {
                TenantAccess::new(format!("{}-t{index}", options.run_id), generate_api_key())
            })
            .collect();
        let instances = match options.stack {
            Stack::Embedded { .. } => 1,
            Stack::Servers { .. } | Stack::Replicated { .. } => options.instances.clamp(1, 16),
        };
        let mut listeners = Vec::new();
        for _ in 0..instances {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let port = listener.local_addr()?.port();
            listeners.push((listener, port));
        }
        // The servers stack's instances, and the `ha` stack's, reach the database through a
        // link the storm troubles (on the `ha` stack, in front of HAProxy); the audit and the
        // operator's checks read it directly.
        let mut instances_database_url = database_url.clone();
        let troubled_link = options.fault_links
            && match &options.stack {
                Stack::Servers { .. } => true,
                Stack::Replicated { patroni, .. } => patroni.is_some(),
                Stack::Embedded { .. } => false,
            };
        if troubled_link && let Some(address) = server_address(&database_url) {
            let proxy = Proxy::start(&address).await?;
            instances_database_url =
                with_address(&database_url, &format!("127.0.0.1:{}", proxy.port()));
            database = Some(proxy);
        }
        // The instances call the channel through a link the storm troubles (answers late past
        // their timeout, connections reset once the channel has acted).
        let sim_address = sim_base
            .split_once("://")
            .map_or(sim_base.as_str(), |(_, rest)| rest)
            .trim_end_matches('/')
            .to_owned();
        let channel = Proxy::start(&sim_address)
            .await
            .context("the forwarder on the simulator's link")?;
        let instances_sim_base = format!("http://127.0.0.1:{}", channel.port());
        let blueprint = Blueprint {
            redis_url: redis_address
                .as_ref()
                .map(|address| format!("redis://{address}/")),
            redis_cluster,
            redis_prefix: Some(options.run_id.clone()),
            tenants: tenants.clone(),
            payments: options.payments.clone(),
            reconcile: options.reconcile.clone(),
            events: events(
                &options,
                broker_address.as_deref(),
                replicated.as_ref().map(|(_, urls)| urls.nats.as_str()),
            ),
            ..Blueprint::new(
                Arc::new(identity),
                &instances_sim_base,
                &instances_database_url,
            )
        };
        if let Some(processes) = &options.processes {
            processes.write_keys(&blueprint)?;
        }
        // The operator asks the channel too (reconciliation by hand); its notify URL is the
        // first instance's, though it never creates a trade.
        let first_port = listeners.first().map_or(0, |(_, port)| *port);
        let mut deployment = Self {
            operator: blueprint
                .operator(&format!("http://127.0.0.1:{first_port}"))
                .await
                .context("the operator's connection")?,
            options,
            simulator_process,
            sim_base,
            database_url,
            tenants,
            blueprint,
            instances: Vec::new(),
            redis,
            broker,
            database,
            channel,
            replicated: replicated.map(|(servers, _)| servers),
            stop,
            http,
        };
        for (index, (listener, port)) in listeners.into_iter().enumerate() {
            let base = format!("http://127.0.0.1:{port}");
            let (running, process) = match deployment.options.processes.clone() {
                Some(processes) => {
                    // The process binds the port itself.
                    drop(listener);
                    let metrics_port = processes::free_port()?;
                    let config =
                        processes.write_config(&deployment.blueprint, index, port, metrics_port)?;
                    let child = processes
                        .start_instance(index, &config, &base, &deployment.http)
                        .await?;
                    (
                        Running::Process(child),
                        Some((config, format!("http://127.0.0.1:{metrics_port}"))),
                    )
                }
                None => (
                    Running::Runtime(deployment.launch(listener, port).await?),
                    None,
                ),
            };
            deployment.instances.push(Instance {
                base,
                port,
                running: Some(running),
                process,
            });
        }
        Ok(deployment)
    }

    /// The settings of an instance listening on `port`.
    fn settings(&self, port: u16) -> anyhow::Result<Settings> {
        Ok(self
            .blueprint
            .settings(&format!("http://127.0.0.1:{port}"))?)
    }

    /// Starts an instance on a thread and runtime of its own; the sender crashes it.
    async fn launch(
        &self,
        listener: std::net::TcpListener,
        port: u16,
    ) -> anyhow::Result<tokio::sync::oneshot::Sender<()>> {
        listener.set_nonblocking(true)?;
        let settings = self.settings(port)?;
        let (built, ready) = tokio::sync::oneshot::channel();
        let (crash, crashed) = tokio::sync::oneshot::channel::<()>();
        let mut stopped = self.stop.subscribe();
        std::thread::Builder::new()
            .name(format!("{}-{port}", crate::bench::cpu::SERVICE_THREAD))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name(crate::bench::cpu::SERVICE_THREAD)
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = built.send(Err(anyhow::Error::from(error)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let application = async {
                        let listener = tokio::net::TcpListener::from_std(listener)?;
                        Ok::<_, anyhow::Error>(Application::build(settings, listener).await?)
                    }
                    .await;
                    let application = match application {
                        Ok(application) => application,
                        Err(error) => {
                            let _ = built.send(Err(error));
                            return;
                        }
                    };
                    let _ = built.send(Ok(()));
                    let served = application.run_until(async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    });
                    tokio::select! {
                        _ = served => {}
                        _ = crashed => {}
                    }
                });
                // Whatever is still in flight is abandoned where it stands: a crash.
                runtime.shutdown_background();
            })?;
        ready
            .await
            .context("the instance's thread ended while starting")??;
        Ok(crash)
    }

    /// Base URLs of the instances, running or not.
    pub fn bases(&self) -> Vec<String> {
        self.instances
            .iter()
            .map(|instance| instance.base.clone())
            .collect()
    }

    /// How many instances there are.
    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    /// Whether instance `index` runs.
    pub fn is_up(&self, index: usize) -> bool {
        self.instances
            .get(index)
            .is_some_and(|instance| instance.running.is_some())
    }

    /// Whether the instances are processes (crashed with SIGKILL).
    pub fn runs_processes(&self) -> bool {
        self.options.processes.is_some()
    }

    /// The process instances' metrics listeners (base URLs); empty when the instances run in
    /// this process (their counters are this process's).
    pub fn metrics_bases(&self) -> Vec<String> {
        (0..self.instances.len())
            .filter_map(|index| self.metrics_base(index))
            .collect()
    }

    /// Instance `index`'s metrics listener, if it is a process.
    pub fn metrics_base(&self, index: usize) -> Option<String> {
        let (_, url) = self.instances.get(index)?.process.as_ref()?;
        Some(url.clone())
    }

    /// Crashes instance `index` at once: its runtime dropped mid-flight, or its process
    /// killed with SIGKILL (and reaped, so that its port is free).
    pub async fn crash(&mut self, index: usize) {
        let running = self
            .instances
            .get_mut(index)
            .and_then(|instance| instance.running.take());
        match running {
            Some(Running::Runtime(crash)) => {
                let _ = crash.send(());
            }
            Some(Running::Process(mut child)) => {
                if let Err(error) = child.kill().await {
                    tracing::warn!(%error, index, "killing an instance's process");
                }
            }
            None => {}
        }
    }

    /// Stops (`paused`) or resumes instance `index`'s process with SIGSTOP or SIGCONT, by the
    /// system's `kill` (the storm links no signal library): a stopped process keeps every
    /// socket, transaction and lease it held, and does nothing until it is resumed. An error
    /// when the instances are not processes, or the signal was not delivered.
    pub fn pause_process(&self, index: usize, paused: bool) -> anyhow::Result<()> {
        let pid = match self.instances.get(index).and_then(|i| i.running.as_ref()) {
            Some(Running::Process(child)) => child.id(),
            _ => None,
        }
        .with_context(|| format!("instance {index} is not a running process"))?;
        let signal = if paused { "-STOP" } else { "-CONT" };
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .with_context(|| format!("kill {signal} {pid}"))?;
        anyhow::ensure!(status.success(), "kill {signal} {pid}: {status}");
        Ok(())
    }

    /// Starts instance `index` again on its port (no-op if it runs).
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        let Some((port, base, process)) = self
            .instances
            .get(index)
            .filter(|instance| instance.running.is_none())
            .map(|instance| {
                (
                    instance.port,
                    instance.base.clone(),
                    instance.process.clone(),
                )
            })
        else {
            return Ok(());
        };
        if let (Some(processes), Some((config, _))) = (&self.options.processes, process) {
            let child = processes
                .start_instance(index, &config, &base, &self.http)
                .await?;
            if let Some(instance) = self.instances.get_mut(index) {
                instance.running = Some(Running::Process(child));
            }
            return Ok(());
        }
        // The port is free once the crashed runtime's listener is gone; give it a moment.
        let mut attempt = 0;
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(listener) => break listener,
                Err(error) if attempt < 50 => {
                    attempt += 1;
                    tracing::debug!(%error, port, "port not free yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error).context("rebinding a crashed instance's port"),
            }
        };
        let crash = self.launch(listener, port).await?;
        if let Some(instance) = self.instances.get_mut(index) {
            instance.running = Some(Running::Runtime(crash));
        }
        Ok(())
    }

    /// Cuts Redis off (servers stack only); false when there is none.
    pub fn cut_redis(&self) -> bool {
        self.redis.as_ref().map(Proxy::cut).is_some()
    }

    /// Lets Redis through again.
    pub fn restore_redis(&self) {
        if let Some(proxy) = &self.redis {
            proxy.restore();
        }
    }

    /// Cuts the broker off (servers stack only); false when there is none.
    pub fn cut_broker(&self) -> bool {
        self.broker.as_ref().map(Proxy::cut).is_some()
    }

    /// Lets the broker through again.
    pub fn restore_broker(&self) {
        if let Some(proxy) = &self.broker {
            proxy.restore();
        }
    }

    /// Troubles the instances' link to the database with `fault` ([`LinkFault::None`] heals
    /// it); false when the stack has no such link (servers stack only).
    pub fn trouble_database_link(&self, fault: LinkFault) -> bool {
        self.database
            .as_ref()
            .map(|proxy| proxy.set_fault(fault))
            .is_some()
    }

    /// Troubles the instances' link to the channel with `fault` ([`LinkFault::None`] heals it).
    pub fn trouble_channel_link(&self, fault: LinkFault) {
        self.channel.set_fault(fault);
    }

    /// Channel answers the link reset or held back so far (the channel had acted on each).
    pub fn channel_answers_troubled(&self) -> u64 {
        self.channel.answers_reset() + self.channel.answers_late()
    }

    /// Commits whose answer the database link swallowed so far.
    pub fn commits_swallowed(&self) -> u64 {
        self.database.as_ref().map_or(0, Proxy::commits_swallowed)
    }

    /// Terminates every server connection to the deployment's database but the caller's
    /// (PostgreSQL only); how many. The pools reconnect.
    pub async fn kill_database_connections(&self) -> anyhow::Result<u64> {
        if !self.database_url.starts_with("postgres") {
            return Ok(0);
        }
        use mideng::sqlx::{Connection, Row};
        let mut connection = mideng::sqlx::PgConnection::connect(&self.database_url).await?;
        let rows = mideng::sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut connection)
        .await?;
        Ok(rows
            .iter()
            .filter(|row| row.try_get::<bool, _>(0).unwrap_or(false))
            .count() as u64)
    }

    /// The operator's view of the deployment (its own pool): audits and rounds by hand.
    pub fn operator(&self) -> &AppState {
        &self.operator
    }

    /// Whether the stack has servers (Redis, a broker, several instances).
    pub fn has_servers(&self) -> bool {
        matches!(self.options.stack, Stack::Servers { .. })
    }

    /// Whether the stack is the replicated one (its faults are failovers).
    pub fn is_replicated(&self) -> bool {
        self.replicated.is_some()
    }

    /// Stops everything: instances between requests, the simulator.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        // Workers stop between rounds and servers finish their requests; then the rest goes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        for index in 0..self.instances.len() {
            self.crash(index).await;
        }
        if let Some(mut simulator) = self.simulator_process.take() {
            let _ = simulator.kill().await;
        }
    }
}

/// The event side of every instance: RabbitMQ (through its proxy, or directly) on the servers stack, NATS
/// JetStream on the replicated one (every server's URL, a stream of three replicas), the
/// in-database queue on the embedded one; a fast relay and the entitlement consumer when the
/// run wants events.
fn events(options: &DeployOptions, broker: Option<&str>, nats: Option<&str>) -> EventSettings {
    let fast = RelayWorkerSettings {
        relay: RelaySettings {
            batch: 50,
            claim_lease: Duration::from_secs(5),
            publish_timeout: Duration::from_secs(2),
            retry_cap: Duration::from_secs(2),
            ..RelaySettings::default()
        },
        interval: Duration::from_millis(100),
    };
    let consumer = ConsumerSettings {
        group: format!("{}-entitlements", options.run_id),
        visibility: Duration::from_secs(5),
        dedup: options
            .payments
            .layer_on(mideng_pay::flows::BrokenLayer::GrantDedup),
        // An event that keeps failing (the storm writes some no consumer can process) is
        // parked after five failures a fraction of a second apart, within the run.
        retry_after: Duration::from_millis(200),
        retry_cap: Duration::from_secs(1),
        park_after: 5,
        ..ConsumerSettings::default()
    };
    let broker = match (&options.stack, broker, nats) {
        (Stack::Servers { .. }, Some(address), _) => Broker::RabbitMq(RabbitSettings {
            url: format!("amqp://guest:guest@{address}/%2f").into(),
            queue_prefix: options.run_id.clone(),
            confirm_timeout: Duration::from_secs(2),
            ..RabbitSettings::default()
        }),
        (Stack::Replicated { .. }, _, Some(nats)) => Broker::Nats(NatsSettings {
            url: nats.into(),
            // A stream of this run's own, copied on all three servers.
            stream: options.run_id.to_uppercase(),
            subject_prefix: options.run_id.clone(),
            ack_timeout: Duration::from_secs(2),
            replicas: 3,
            ..NatsSettings::default()
        }),
        _ => Broker::Queue,
    };
    EventSettings {
        broker,
        relay: options.events.then_some(fast),
        consumer: options.events.then_some(consumer),
        // Webhooks on a schedule of milliseconds (eight attempts over 6 s) with a one-second
        // attempt, so that a storm's retries happen within the run.
        webhooks: options.events.then(|| WebhookSettings {
            schedule: [0, 50, 100, 200, 400, 800, 1_600, 3_200]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            timeout: Duration::from_secs(1),
            interval: Duration::from_millis(50),
            // An endpoint's backoff on the same scale, so that a failing merchant's deliveries
            // still settle within the run.
            endpoint_backoff: Duration::from_millis(50),
            endpoint_backoff_max: Duration::from_secs(1),
            ..WebhookSettings::default()
        }),
    }
}

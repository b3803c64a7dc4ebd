//! The storm: a seeded workload in which every source of duplicates of the seed articles
//! occurs, faults on a schedule, then quiescence and the [`crate::audit`].
//!
//! Sources of duplicates, as the clients produce them:
//! - **double click**: the same request twice at once (same token and key), to two instances
//!   when there are several — "the same request to two instances";
//! - **retry after a timeout**: the client gives up after a few milliseconds and sends the same
//!   request again; and every answer a client cannot use (connection refused by a crashed
//!   instance, 5xx during a fault, 409 in progress) is retried with the same key;
//! - **manual replay**: a request sent again long after its answer, which must come back byte
//!   for byte;
//! - **same business key, new request key**: a second deduct for an order already debited;
//! - **callbacks**: per trade, the simulator's notify policy is normal, duplicate, concurrent,
//!   delayed, reordered or dropped (then only reconciliation finds the payment);
//! - **reconciliation overlapping callbacks**: every instance runs its reconciler every 5 s over
//!   payments pending for 3 s, and rounds by hand run at the end;
//! - **broker redelivery**: a relay or consumer killed with its instance, a broker cut off.
//!
//! Faults (servers stack; the embedded stack has the crash only): an instance crashed
//! mid-request and restarted, Redis cut off and back, the broker cut off and back, every
//! database connection terminated, and channel answers lost after the channel applied them
//! (`/sim/fail-next` with `apply_anyway`).
//!
//! Attacks (unless `--no-attacker`): the [`crate::attacker`] runs beside the workload and sends
//! replayed, retargeted, polluted, wrongly signed, cross-channel and stale notifies at payments
//! the workload leaves waiting; the audit checks that none was accepted and none moved.
//!
//! A 5xx is excused only while a fault is active (and for a short grace after it); any other
//! is a violation. The layer table counts, from the service's own decision counters, what each
//! layer caught.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use mideng_pay::domain::events::PAYMENT_SUCCEEDED;
use mideng_pay::flows::{BrokenLayer, PaymentSettings};
use mideng_pay::workers::reconcile::{ReconcileSettings, reconcile_once};
use mideng_sim::{MerchantKeys, SimConfig};
use serde::Serialize;
use serde_json::{Value, json};

use crate::attacker::{self, AttackLog, AttackReport, AttackerKeys, Victim};
use crate::audit::{self, AuditFigures, ChannelFacts, ClientFacts, TradeFact, Violation};
pub use crate::deploy::StackKind;
use crate::deploy::{DeployOptions, Deployment, ServerArgs, TenantAccess};

/// A layer the storm turns off, to show what it prevents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakLayer {
    /// The `Idempotency-Key` records (and the token guard with them).
    Keys,
    /// The one-time token guard.
    Tokens,
    /// The per-order lock.
    OrderLock,
    /// The channel notifies' dedup records.
    NotifyDedup,
    /// The entitlement consumer's dedup claims.
    GrantDedup,
    /// The channel's signing key, as if leaked: the attacker also signs victims' successes as
    /// the channel would. The service cannot tell them from the channel's, so the audit must
    /// report each as a payment nobody was charged for.
    ChannelKey,
}

impl BreakLayer {
    fn name(self) -> &'static str {
        match self {
            BreakLayer::Keys => "keys",
            BreakLayer::Tokens => "tokens",
            BreakLayer::OrderLock => "order-lock",
            BreakLayer::NotifyDedup => "notify-dedup",
            BreakLayer::GrantDedup => "grant-dedup",
            BreakLayer::ChannelKey => "channel-key",
        }
    }

    /// The layers expected to hold in its place, with the operation whose duplicates they
    /// then catch.
    fn deeper(self) -> &'static [(&'static str, &'static str)] {
        match self {
            BreakLayer::Keys => &[
                ("constraint", "wallet.deduct"),
                ("constraint", "payment.create"),
            ],
            BreakLayer::Tokens => &[("key", "payment.create"), ("constraint", "payment.create")],
            BreakLayer::OrderLock => &[("constraint", "payment.create")],
            BreakLayer::NotifyDedup => &[("cas", "notify.")],
            BreakLayer::GrantDedup => &[("constraint", "entitlement.grant")],
            // Nothing deeper: a notify signed with the channel's key is the channel speaking.
            BreakLayer::ChannelKey => &[],
        }
    }

    fn apply(self, payments: &mut PaymentSettings) {
        match self {
            BreakLayer::Keys => payments.idempotency = false,
            BreakLayer::Tokens => payments.broken = Some(BrokenLayer::Tokens),
            BreakLayer::OrderLock => payments.broken = Some(BrokenLayer::OrderLock),
            BreakLayer::NotifyDedup => payments.broken = Some(BrokenLayer::NotifyDedup),
            BreakLayer::GrantDedup => payments.broken = Some(BrokenLayer::GrantDedup),
            // The service is unchanged; the attacker holds the key.
            BreakLayer::ChannelKey => {}
        }
    }
}

/// `mideng storm` flags.
#[derive(Clone, Debug, clap::Args)]
pub struct StormArgs {
    /// Seed of the workload and the fault schedule (default: from the clock; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The stack to deploy.
    #[arg(long, value_enum, default_value_t = StackKind::Embedded)]
    pub stack: StackKind,
    /// Service instances on the servers stack (1 to 16).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub instances: u16,
    /// How long the workload runs, seconds (1 to 86400).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration_secs: u64,
    /// Concurrent clients (1 to 256).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Tenants (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub tenants: u16,
    /// Seconds between faults (0: no faults).
    #[arg(long, default_value_t = 3)]
    pub fault_every_secs: u64,
    /// Where the embedded stack's database goes.
    #[arg(long, default_value = ".mideng/storm")]
    pub dir: PathBuf,
    /// The servers of the servers stack.
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Turn one layer off (a test switch): the audit must then report what that layer
    /// prevents, or the report names the deeper layer that held.
    #[arg(long, value_enum)]
    pub break_layer: Option<BreakLayer>,
    /// Storm a running deployment instead of starting one: its instances' base URLs
    /// (comma-separated). Its faults are then the simulator's only.
    #[arg(long, value_delimiter = ',')]
    pub target: Vec<String>,
    /// With `--target`: a tenant as `id:api-key` (repeatable).
    #[arg(long)]
    pub tenant_key: Vec<String>,
    /// With `--target`: the simulator its channels point at.
    #[arg(long)]
    pub sim_url: Option<String>,
    /// With `--target`: its database, read by the audit only.
    #[arg(long)]
    pub database_url: Option<String>,
    /// With `--target`: how long quiescence waits for its own workers to settle, seconds.
    #[arg(long, default_value_t = 120)]
    pub settle_secs: u64,
    /// With `--target`: its instances' metrics listeners (`mideng serve --metrics-listen`),
    /// comma-separated base URLs, for the layer table; without them the table is empty.
    #[arg(long, value_delimiter = ',')]
    pub target_metrics: Vec<String>,
    /// Leave the attacker out (it runs by default: replayed, retargeted, polluted, wrongly
    /// signed, cross-channel and stale notifies beside the workload, none of which may move
    /// anything).
    #[arg(long)]
    pub no_attacker: bool,
}

impl Default for StormArgs {
    fn default() -> Self {
        Self {
            seed: None,
            stack: StackKind::Embedded,
            instances: 3,
            duration_secs: 30,
            concurrency: 8,
            tenants: 3,
            fault_every_secs: 3,
            dir: PathBuf::from(".mideng/storm"),
            servers: ServerArgs::default(),
            json: None,
            break_layer: None,
            target: Vec::new(),
            tenant_key: Vec::new(),
            sim_url: None,
            database_url: None,
            settle_secs: 120,
            target_metrics: Vec::new(),
            no_attacker: false,
        }
    }
}

/// What the storm did and found.
#[derive(Clone, Debug, Serialize)]
pub struct StormReport {
    /// The seed (run it again with `--seed` to repeat the workload and the fault schedule).
    pub seed: u64,
    /// The stack.
    pub stack: String,
    /// Instances.
    pub instances: usize,
    /// Workload seconds.
    pub duration_secs: u64,
    /// Quiescence seconds.
    pub quiescence_secs: u64,
    /// Requests sent to the service.
    pub requests: u64,
    /// 5xx answers while a fault was active (excused).
    pub errors_during_faults: u64,
    /// Duplicates sent, by source.
    pub duplicates: BTreeMap<String, u64>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// What each layer caught (the service's decision counters), by layer and outcome.
    pub layers: BTreeMap<String, BTreeMap<String, u64>>,
    /// The audit's figures.
    pub audit: AuditFigures,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// The layer turned off, if any.
    pub broken_layer: Option<BreakLayer>,
    /// What the attacker sent and how it was answered (`None`: `--no-attacker`).
    pub attacks: Option<AttackReport>,
}

impl StormReport {
    /// No invariant broken.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The report as a text table.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "mideng storm — seed {} · {} · {} instance(s) · {} s workload, {} s quiescence",
            self.seed, self.stack, self.instances, self.duration_secs, self.quiescence_secs
        );
        let _ = writeln!(
            out,
            "requests {} · 5xx during faults {} (excused)",
            self.requests, self.errors_during_faults
        );
        let join = |map: &BTreeMap<String, u64>| {
            map.iter()
                .map(|(name, count)| format!("{name} {count}"))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        let _ = writeln!(out, "duplicates sent: {}", join(&self.duplicates));
        let _ = writeln!(
            out,
            "faults: {}",
            if self.faults.is_empty() {
                "none".to_owned()
            } else {
                join(&self.faults)
            }
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<16} {:>8}  what it caught", "layer", "count");
        for (layer, outcomes) in &self.layers {
            let total: u64 = outcomes.values().sum();
            let _ = writeln!(out, "{layer:<16} {total:>8}  {}", join(outcomes));
        }
        if let Some(attacks) = &self.attacks {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "attacker: {} notifies · {} victims of {} tenant(s) · {} across tenants · {} accepted",
                attacks.sent(),
                attacks.victims,
                attacks.victim_tenants,
                attacks.cross_tenant,
                attacks.accepted
            );
            let _ = writeln!(
                out,
                "{:<22} {:>6} {:>6} {:>8} {:>9}  stopped by",
                "attack", "sent", "acked", "refused", "no answer"
            );
            for (kind, counts) in &attacks.kinds {
                let _ = writeln!(
                    out,
                    "{kind:<22} {:>6} {:>6} {:>8} {:>9}  {}",
                    counts.sent,
                    counts.acknowledged,
                    counts.refused,
                    counts.unanswered,
                    counts.stopped_by
                );
            }
        }
        let _ = writeln!(out);
        let audit = &self.audit;
        let _ = writeln!(
            out,
            "audit: {} payments, {} PAID, {} charged at the channel, {} grants, {} refund cases, {} ledger entries, {} deducts, {} attacked payments",
            audit.payments,
            audit.paid,
            audit.charged,
            audit.grants,
            audit.refund_cases,
            audit.ledger_entries,
            audit.deducts,
            audit.attacked
        );
        if let Some(layer) = self.broken_layer {
            if self.violations.is_empty() {
                let held: Vec<String> = layer
                    .deeper()
                    .iter()
                    .map(|(deeper, operation)| {
                        let caught: u64 = self.layers.get(*deeper).map_or(0, |outcomes| {
                            outcomes
                                .iter()
                                .filter(|(outcome, _)| outcome.starts_with(operation))
                                .map(|(_, count)| count)
                                .sum()
                        });
                        format!("{deeper} caught {caught} on {operation}")
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "layer {} was OFF: no invariant broke — the deeper layers held ({})",
                    layer.name(),
                    held.join(", ")
                );
            } else {
                let _ = writeln!(
                    out,
                    "layer {} was OFF: the audit found what it prevents (below)",
                    layer.name()
                );
            }
        }
        if self.violations.is_empty() {
            let _ = writeln!(out, "violations: none");
        } else {
            let _ = writeln!(out, "violations: {}", self.violations.len());
            for violation in self.violations.iter().take(50) {
                let _ = writeln!(out, "  {}: {}", violation.invariant, violation.detail);
            }
        }
        out
    }
}

/// An answer the client can use, or not.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    replayed: bool,
    body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// A final answer for its key: not a 5xx, not "in progress", not a used token.
    fn is_final(&self) -> bool {
        self.status < 500
            && !(self.status == 409
                && matches!(self.code().as_str(), "in-progress" | "duplicate-submission"))
    }
}

/// Time windows of active faults; a 5xx inside one (plus a grace) is excused.
#[derive(Default)]
struct FaultClock {
    windows: Mutex<Vec<(Instant, Option<Instant>)>>,
}

const FAULT_GRACE: Duration = Duration::from_secs(3);

impl FaultClock {
    fn open(&self) -> usize {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.push((Instant::now(), None));
        windows.len() - 1
    }

    fn close(&self, index: usize) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(window) = windows.get_mut(index) {
            window.1 = Some(Instant::now());
        }
    }

    fn excused(&self, started: Instant, ended: Instant) -> bool {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        windows.iter().any(|(from, to)| {
            let to = to.map_or(ended, |to| to + FAULT_GRACE);
            started <= to && ended + FAULT_GRACE >= *from
        })
    }
}

/// What the clients saw and sent.
#[derive(Default)]
pub(crate) struct Log {
    originals: HashMap<String, (u16, Vec<u8>)>,
    client: ClientFacts,
    duplicates: BTreeMap<String, u64>,
    payments: HashSet<String>,
    unresolved: Vec<Pending>,
    /// Payments the workload left waiting for good: the attacker's victims.
    pub(crate) victims: Vec<Victim>,
    /// What the attacker sent.
    pub(crate) attacks: AttackLog,
}

/// A keyed request that had no final answer when its client gave up; quiescence finishes it.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) label: String,
    pub(crate) tenant: usize,
    pub(crate) path: String,
    pub(crate) body: Value,
    pub(crate) key: String,
    pub(crate) token_needed: bool,
    pub(crate) kind: PendingKind,
}

#[derive(Clone, Debug)]
pub(crate) enum PendingKind {
    Payment,
    Credit {
        user: String,
        amount: i64,
    },
    Deduct {
        user: String,
        order: String,
        amount: i64,
    },
}

pub(crate) struct Shared {
    /// Prefix of every id the storm makes (orders, users, keys), unique per run.
    pub(crate) run: String,
    http: reqwest::Client,
    pub(crate) bases: Vec<String>,
    sim_base: String,
    pub(crate) tenants: Vec<TenantAccess>,
    faults: FaultClock,
    log: Mutex<Log>,
    requests: AtomicU64,
    excused: AtomicU64,
}

impl Shared {
    /// The tenants' hot wallet owner.
    fn hot(&self) -> String {
        format!("{}-hot", self.run)
    }

    pub(crate) fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, source: &str) {
        *self.log().duplicates.entry(source.to_owned()).or_default() += 1;
    }

    /// One request to instance `instance`; `None` when no answer came (connection refused,
    /// reset, timed out).
    #[allow(clippy::too_many_arguments)] // the parts of one HTTP request, each used once
    async fn send(
        &self,
        instance: usize,
        tenant: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> Option<Answer> {
        let base = &self.bases[instance % self.bases.len()];
        let mut request = self
            .http
            .request(method, format!("{base}{path}"))
            .bearer_auth(&self.tenants[tenant % self.tenants.len()].api_key)
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|value| value == "true");
        let body = response.bytes().await.ok()?.to_vec();
        self.account_for(status, started, path, &body);
        Some(Answer {
            status,
            replayed,
            body,
        })
    }

    /// A 5xx is excused inside a fault window (and counted); outside one it is a violation.
    fn account_for(&self, status: u16, started: Instant, path: &str, body: &[u8]) {
        if status < 500 {
            return;
        }
        if self.faults.excused(started, Instant::now()) {
            self.excused.fetch_add(1, Ordering::Relaxed);
        } else {
            let detail = String::from_utf8_lossy(body)
                .chars()
                .take(200)
                .collect::<String>();
            self.log()
                .client
                .unexcused_errors
                .push(format!("{status} on {path}: {detail}"));
        }
    }

    /// A channel notify (no API key: the channel's signature is its credential) to instance
    /// `instance`; the status and body, `None` when no answer came.
    pub(crate) async fn post_notify(
        &self,
        instance: usize,
        channel: &str,
        content_type: &str,
        headers: &[(String, String)],
        body: String,
    ) -> Option<(u16, Vec<u8>)> {
        let base = &self.bases[instance % self.bases.len()];
        let path = format!("/v1/channels/{channel}/notify");
        let mut request = self
            .http
            .post(format!("{base}{path}"))
            .header("content-type", content_type)
            .timeout(Duration::from_secs(20))
            .body(body);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let body = response.bytes().await.ok()?.to_vec();
        self.account_for(status, started, &path, &body);
        Some((status, body))
    }

    pub(crate) async fn sim(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Option<Value> {
        let response = self
            .http
            .request(method, format!("{}{path}", self.sim_base))
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    /// Records a final answer for `label` (operation + key) and checks it against the first.
    fn settle(&self, label: &str, answer: &Answer) {
        let mut log = self.log();
        match log.originals.get(label) {
            None => {
                log.originals
                    .insert(label.to_owned(), (answer.status, answer.body.clone()));
            }
            Some((status, body)) => {
                if *status != answer.status || *body != answer.body {
                    let mismatch = format!(
                        "{label}: first {status} {}, then {} {}",
                        String::from_utf8_lossy(body),
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    );
                    log.client.replay_mismatches.push(mismatch);
                } else if answer.replayed {
                    *log.duplicates
                        .entry("replayed byte for byte".to_owned())
                        .or_default() += 1;
                }
            }
        }
    }
}

/// Runs the storm: deploy, workload with faults, quiescence, audit.
pub async fn run(
    args: StormArgs,
    identity: (SimConfig, MerchantKeys),
    progress: bool,
) -> anyhow::Result<StormReport> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| u64::try_from(elapsed.as_nanos() % u128::from(u64::MAX)).unwrap_or(1))
            .unwrap_or(1)
    });
    let run_id = format!("storm{}x{}", seed % 1_000_000_007, fastrand::u32(..));
    let external = !args.target.is_empty();
    let leaked_channel_key = args.break_layer == Some(BreakLayer::ChannelKey);
    anyhow::ensure!(
        !(leaked_channel_key && args.no_attacker),
        "--break-layer channel-key leaks the key to the attacker: leave out --no-attacker"
    );
    anyhow::ensure!(
        !(leaked_channel_key && external),
        "--break-layer channel-key forges payments: not against a deployment the storm did not start"
    );
    let attacker_keys = (!args.no_attacker).then(|| AttackerKeys::of(&identity.0, &identity.1));
    let (mut deployment, bases, sim_base, tenants, database_url, stack_label) = if external {
        let tenants = args
            .tenant_key
            .iter()
            .map(|pair| {
                pair.split_once(':')
                    .map(|(id, key)| TenantAccess {
                        id: id.to_owned(),
                        api_key: key.to_owned(),
                    })
                    .context("--tenant-key takes id:api-key")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(
            !tenants.is_empty(),
            "--target needs at least one --tenant-key"
        );
        let sim = args.sim_url.clone().context("--target needs --sim-url")?;
        let database = args
            .database_url
            .clone()
            .context("--target needs --database-url (read by the audit only)")?;
        let label = format!("the deployment at {}", args.target.join(", "));
        (None, args.target.clone(), sim, tenants, database, label)
    } else {
        let stack = args.stack.stack(&args.dir, &args.servers);
        let label = stack.label().to_owned();
        let mut payments = PaymentSettings {
            lock_wait: Duration::from_millis(500),
            duplicate_wait: Duration::from_millis(500),
            ..PaymentSettings::default()
        };
        if let Some(layer) = args.break_layer {
            layer.apply(&mut payments);
        }
        let deployment = Deployment::start(
            identity,
            DeployOptions {
                stack,
                instances: usize::from(args.instances),
                tenants: usize::from(args.tenants),
                payments,
                // Every instance reconciles often: rounds overlap callbacks all the time.
                reconcile: Some(ReconcileSettings {
                    min_age: Duration::from_secs(3),
                    batch: 100,
                    interval: Duration::from_secs(5),
                    tenant: None,
                }),
                events: true,
                run_id: run_id.clone(),
            },
        )
        .await?;
        let (bases, sim, tenants, database) = (
            deployment.bases(),
            deployment.sim_base.clone(),
            deployment.tenants.clone(),
            deployment.database_url.clone(),
        );
        (Some(deployment), bases, sim, tenants, database, label)
    };
    let shared = Arc::new(Shared {
        run: run_id,
        http: reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(64)
            .build()?,
        bases,
        sim_base,
        tenants,
        faults: FaultClock::default(),
        log: Mutex::new(Log::default()),
        requests: AtomicU64::new(0),
        excused: AtomicU64::new(0),
    });
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(args.duration_secs);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} storm {elapsed_precise} [{bar:40}] {pos}/{len} s {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };

    // Every tenant's hot wallet gets money first.
    for tenant in 0..shared.tenants.len() {
        let key = format!("{}-seed-credit-{tenant}", shared.run);
        credit(
            &shared,
            &mut fastrand::Rng::with_seed(seed),
            tenant,
            &shared.hot(),
            &key,
            50_000_000,
        )
        .await;
    }

    let deadline = Instant::now() + Duration::from_secs(args.duration_secs);
    let counter = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for client in 0..args.concurrency {
        let shared = shared.clone();
        let counter = counter.clone();
        let client_seed = seed ^ (u64::from(client) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(client_seed);
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let tenant = rng.usize(..shared.tenants.len());
                match rng.u8(..100) {
                    0..60 => order_script(&shared, &mut rng, tenant, n).await,
                    60..85 => deduct_script(&shared, &mut rng, tenant, n).await,
                    _ => {
                        let user = format!("{}-u{}", shared.run, rng.u16(..200));
                        let key = format!("{}-cr-{n}", shared.run);
                        let amount = rng.i64(100..10_000);
                        credit(&shared, &mut rng, tenant, &user, &key, amount).await;
                    }
                }
            }
        }));
    }

    // The attacker, beside the workload for the whole run.
    if let Some(keys) = attacker_keys {
        let shared = shared.clone();
        let attacker_seed = seed.rotate_left(31) ^ 0xA77A_C4E2;
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(attacker_seed);
            attacker::attack_until(&shared, &keys, &mut rng, deadline, leaked_channel_key).await;
        }));
    }

    // The fault schedule, on the deployment (which only this task touches meanwhile).
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut fault_rng = fastrand::Rng::with_seed(seed.rotate_left(17));
    // Every kind in turn, from a seeded start: a short storm still meets each one.
    let mut fault_cycle = fault_rng.u64(..5);
    let started = Instant::now();
    while Instant::now() < deadline {
        bar.set_position(started.elapsed().as_secs().min(args.duration_secs));
        bar.set_message(format!(
            "{} requests",
            shared.requests.load(Ordering::Relaxed)
        ));
        if args.fault_every_secs == 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        tokio::time::sleep(
            Duration::from_secs(args.fault_every_secs)
                .min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
        if Instant::now() >= deadline {
            break;
        }
        let kind = inject(deployment.as_mut(), &shared, &mut fault_rng, fault_cycle).await?;
        fault_cycle += 1;
        *faults.entry(kind.to_owned()).or_default() += 1;
    }
    for client in clients {
        let _ = client.await;
    }
    bar.set_position(args.duration_secs);
    bar.set_message("quiescence");

    // Quiescence: everything back, pending keys answered, notifies settled, reconciliation
    // rounds until nothing changes, the outbox and the queue drained.
    let quiet = Instant::now();
    if let Some(deployment) = deployment.as_mut() {
        deployment.restore_redis();
        deployment.restore_broker();
        for index in 0..deployment.instance_count() {
            deployment.restart(index).await?;
        }
    }
    finish_pending(&shared).await;
    let payments: Vec<String> = shared.log().payments.iter().cloned().collect();
    settle_notifies(&shared, &payments).await;
    if let Some(deployment) = &deployment {
        let operator = deployment.operator().clone();
        let everything = ReconcileSettings {
            min_age: Duration::ZERO,
            batch: 1000,
            interval: Duration::from_secs(1),
            tenant: None,
        };
        for _ in 0..20 {
            let round = reconcile_once(&operator.ports, &everything).await?;
            if round.paid == 0 && round.closed == 0 && round.unknown == 0 && round.busy == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        drain_events(&operator).await?;
    }

    // The audit; a deployment the storm did not start is given time for its own workers
    // (reconciliation, relay, consumer) to settle, and audited again until it holds or the
    // time is up.
    let settle_until = Instant::now() + Duration::from_secs(args.settle_secs);
    let (violations, figures) = loop {
        let audited = audit_now(&shared, &database_url).await?;
        if deployment.is_some() || audited.0.is_empty() || Instant::now() >= settle_until {
            break audited;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    bar.finish_and_clear();
    let duplicates = shared.log().duplicates.clone();
    let metrics = match &deployment {
        Some(_) => mideng_pay::app::metrics_handle()
            .map(|handle| handle.render())
            .unwrap_or_default(),
        None => {
            let mut text = String::new();
            for base in &args.target_metrics {
                if let Ok(response) = shared.http.get(format!("{base}/metrics")).send().await
                    && let Ok(body) = response.text().await
                {
                    text.push_str(&body);
                    text.push('\n');
                }
            }
            text
        }
    };
    let report = StormReport {
        seed,
        stack: stack_label,
        instances: shared.bases.len(),
        duration_secs: args.duration_secs,
        quiescence_secs: quiet.elapsed().as_secs(),
        requests: shared.requests.load(Ordering::Relaxed),
        errors_during_faults: shared.excused.load(Ordering::Relaxed),
        duplicates,
        faults,
        layers: layers(&metrics),
        audit: figures,
        violations,
        broken_layer: args.break_layer,
        attacks: (!args.no_attacker).then(|| shared.log().attacks.report()),
    };
    if let Some(deployment) = deployment {
        deployment.stop().await;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// The channel applies the next creation but its answer is lost.
async fn lose_next_channel_answer(shared: &Shared, rng: &mut fastrand::Rng) {
    let method = if rng.bool() {
        "alipay.trade.precreate"
    } else {
        "wechat.native"
    };
    shared
        .sim(
            reqwest::Method::POST,
            "/sim/fail-next",
            json!({"method": method, "apply_anyway": true}),
        )
        .await;
}

/// Reads the database and the channel and checks every invariant, over this run's own ids.
async fn audit_now(
    shared: &Shared,
    database_url: &str,
) -> anyhow::Result<(Vec<Violation>, AuditFigures)> {
    let pool = PoolSettings {
        connections_max: 2,
        ..PoolSettings::default()
    };
    let snapshot = if database_url.starts_with("sqlite") {
        audit::snapshot(&SqliteStore::connect(database_url, pool).await?).await?
    } else if database_url.starts_with("mysql") || database_url.starts_with("mariadb") {
        let url = database_url.replacen("mariadb://", "mysql://", 1);
        audit::snapshot(&MySqlStore::connect(&url, pool).await?).await?
    } else {
        audit::snapshot(&PostgresStore::connect(database_url, pool).await?).await?
    };
    let tenants: HashSet<String> = shared
        .tenants
        .iter()
        .map(|tenant| tenant.id.clone())
        .collect();
    let snapshot = snapshot.of_run(&tenants, &shared.run);
    let channel = channel_facts(shared, &snapshot).await?;
    let client = {
        let log = shared.log();
        ClientFacts {
            attacked: log.attacks.victims().clone(),
            accepted_attacks: log.attacks.accepted.clone(),
            ..log.client.clone()
        }
    };
    Ok(audit::check(&snapshot, &channel, &client))
}

/// One fault, held for a moment, then undone; its name.
async fn inject(
    deployment: Option<&mut Deployment>,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    cycle: u64,
) -> anyhow::Result<&'static str> {
    // A deployment the storm did not start gets the simulator's faults only.
    let Some(deployment) = deployment else {
        let window = shared.faults.open();
        lose_next_channel_answer(shared, rng).await;
        shared.faults.close(window);
        return Ok("channel answer lost after applying");
    };
    let kinds: u8 = if deployment.has_servers() { 5 } else { 2 };
    let choice = u8::try_from(cycle % u64::from(kinds)).unwrap_or(0);
    let hold = Duration::from_millis(rng.u64(500..2000));
    let window = shared.faults.open();
    let kind = match choice {
        0 => {
            let index = rng.usize(..deployment.instance_count());
            deployment.crash(index);
            tokio::time::sleep(hold).await;
            deployment.restart(index).await?;
            "instance killed mid-request"
        }
        1 => {
            lose_next_channel_answer(shared, rng).await;
            "channel answer lost after applying"
        }
        2 => {
            deployment.cut_redis();
            tokio::time::sleep(hold).await;
            deployment.restore_redis();
            "Redis cut off"
        }
        3 => {
            deployment.cut_broker();
            tokio::time::sleep(hold).await;
            deployment.restore_broker();
            "broker cut off"
        }
        _ => {
            deployment.kill_database_connections().await?;
            "database connections killed"
        }
    };
    shared.faults.close(window);
    Ok(kind)
}

/// Sends a keyed request until it has a final answer (or gives up, leaving it to quiescence),
/// the way a client retries: same key, another instance, after a pause.
pub(crate) async fn keyed(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    pending: Pending,
    mut token: Option<String>,
    first_timeout: Duration,
    attempts: usize,
) -> (Option<Answer>, Option<String>) {
    let mut instance = rng.usize(..shared.bases.len());
    for attempt in 0..attempts {
        if pending.token_needed && token.is_none() {
            token = issue_token(shared, pending.tenant, instance).await;
            if token.is_none() {
                // No token now (its store is down): never send the request without one.
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        }
        let mut headers = vec![("Idempotency-Key", pending.key.as_str())];
        if let Some(token) = &token {
            headers.push(("Idempotency-Token", token.as_str()));
        }
        let timeout = if attempt == 0 {
            first_timeout
        } else {
            Duration::from_secs(20)
        };
        let answer = shared
            .send(
                instance,
                pending.tenant,
                reqwest::Method::POST,
                &pending.path,
                Some(&pending.body),
                &headers,
                timeout,
            )
            .await;
        match answer {
            Some(answer) if answer.is_final() => {
                // Every final answer counts, not only the one the caller keeps: with a layer
                // off, two copies of a double click may both have taken effect.
                shared.settle(&pending.label, &answer);
                record(shared, &pending, &answer);
                return (Some(answer), token);
            }
            Some(answer) if answer.code() == "duplicate-submission" => {
                // The token was used by an attempt whose answer was lost: a fresh one.
                token = None;
            }
            _ => {}
        }
        if attempt + 1 < attempts {
            shared.count("retry after timeout or failure");
            instance = (instance + 1) % shared.bases.len();
            tokio::time::sleep(Duration::from_millis(rng.u64(50..300))).await;
        }
    }
    shared.log().unresolved.push(pending);
    (None, token)
}

async fn issue_token(shared: &Shared, tenant: usize, instance: usize) -> Option<String> {
    for attempt in 0..10 {
        let answer = shared
            .send(
                instance + attempt,
                tenant,
                reqwest::Method::POST,
                "/v1/tokens",
                Some(&json!({})),
                &[],
                Duration::from_secs(10),
            )
            .await;
        if let Some(answer) = answer
            && answer.status == 201
        {
            return answer.json()["token"].as_str().map(str::to_owned);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// A keyed request sent the way this iteration's client behaves: once, twice at once (double
/// click, to two instances), or with a first attempt that gives up after a few milliseconds.
async fn keyed_with_duplicates(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    pending: Pending,
) -> (Option<Answer>, Option<String>) {
    let token = if pending.token_needed {
        issue_token(shared, pending.tenant, rng.usize(..shared.bases.len())).await
    } else {
        None
    };
    match rng.u8(..10) {
        0..3 => {
            shared.count("double click");
            if shared.bases.len() > 1 {
                shared.count("same request to two instances");
            }
            let mut other = fastrand::Rng::with_seed(rng.u64(..));
            let ((first, token), (second, _)) = tokio::join!(
                keyed(
                    shared,
                    rng,
                    pending.clone(),
                    token.clone(),
                    Duration::from_secs(20),
                    8
                ),
                keyed(
                    shared,
                    &mut other,
                    pending,
                    token,
                    Duration::from_secs(20),
                    8
                )
            );
            (first.or(second), token)
        }
        3..5 => {
            shared.count("retry after a client timeout");
            let timeout = Duration::from_millis(rng.u64(1..30));
            keyed(shared, rng, pending, token, timeout, 8).await
        }
        _ => keyed(shared, rng, pending, token, Duration::from_secs(20), 8).await,
    }
}

async fn credit(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    user: &str,
    key: &str,
    amount: i64,
) {
    let pending = Pending {
        label: format!("credit/{tenant}/{key}"),
        tenant,
        path: format!("/v1/wallets/{user}/credit"),
        body: json!({"amount": amount, "reference": key}),
        key: key.to_owned(),
        token_needed: false,
        kind: PendingKind::Credit {
            user: user.to_owned(),
            amount,
        },
    };
    keyed_with_duplicates(shared, rng, pending).await;
}

/// Writes what a final answer means into the client facts.
fn record(shared: &Shared, pending: &Pending, answer: &Answer) {
    let tenant = shared.tenants[pending.tenant % shared.tenants.len()]
        .id
        .clone();
    let mut log = shared.log();
    match &pending.kind {
        PendingKind::Credit { user, amount } if answer.status == 200 => {
            log.client
                .credits
                .insert((tenant, user.clone(), pending.key.clone()), *amount);
        }
        PendingKind::Deduct {
            user,
            order,
            amount,
        } if answer.status == 200 => {
            log.client.deducts.insert(
                (tenant, user.clone(), pending.key.clone()),
                (order.clone(), *amount),
            );
        }
        PendingKind::Payment => {
            if let Some(number) = answer.json()["payment_no"].as_str() {
                log.payments.insert(number.to_owned());
            }
        }
        _ => {}
    }
}

async fn deduct_script(shared: &Shared, rng: &mut fastrand::Rng, tenant: usize, n: u64) {
    let order = format!("{}-do-{n}", shared.run);
    let key = format!("{}-dd-{n}", shared.run);
    let hot = shared.hot();
    let amount = rng.i64(1..5_000);
    let pending = Pending {
        label: format!("deduct/{tenant}/{key}"),
        tenant,
        path: format!("/v1/wallets/{hot}/deduct"),
        body: json!({"order_id": order, "amount": amount}),
        key: key.clone(),
        token_needed: false,
        kind: PendingKind::Deduct {
            user: hot,
            order,
            amount,
        },
    };
    keyed_with_duplicates(shared, rng, pending.clone()).await;
    if rng.u8(..10) == 0 {
        // The same order under a new request key: the business key refuses a second debit.
        shared.count("same order, new key");
        let again = Pending {
            label: format!("deduct/{tenant}/{key}-again"),
            key: format!("{key}-again"),
            ..pending.clone()
        };
        keyed(shared, rng, again, None, Duration::from_secs(20), 8).await;
    }
    if rng.u8(..10) < 2 {
        // The same request again, long after its answer.
        shared.count("manual replay");
        keyed(shared, rng, pending, None, Duration::from_secs(20), 8).await;
    }
}

const NOTIFY_MODES: [&str; 8] = [
    "normal",
    "normal",
    "duplicate",
    "concurrent",
    "delay",
    "reorder",
    "drop",
    "normal",
];

async fn order_script(shared: &Shared, rng: &mut fastrand::Rng, tenant: usize, n: u64) {
    let order_id = format!("{}-o-{n}", shared.run);
    let user = format!("{}-u{}", shared.run, rng.u16(..200));
    let amount = rng.i64(1..100_000);
    let mut body =
        json!({"order_id": order_id, "user_id": user, "amount": amount, "currency": "CNY"});
    if rng.u8(..10) < 7 {
        body["entitlement"] = json!({"sku": "vip-month", "quantity": 1});
    }
    // Creating the order: a double click half the time; retried until answered.
    let instance = rng.usize(..shared.bases.len());
    let mut created = false;
    for attempt in 0..20 {
        let sends = if attempt == 0 && rng.bool() {
            shared.count("double click");
            2
        } else {
            1
        };
        let answers = create_order(shared, instance + attempt, tenant, &body, sends).await;
        if answers
            .iter()
            .flatten()
            .any(|answer| matches!(answer.status, 200 | 201))
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !created {
        return;
    }
    let channel = if rng.bool() { "alipay" } else { "wechat" };
    if rng.u8(..10) < 2 {
        keyless_double_click(shared, rng, tenant, &order_id, channel).await;
    }
    let pending = Pending {
        label: format!("payment/{tenant}/pay-{order_id}"),
        tenant,
        path: format!("/v1/orders/{order_id}/payments"),
        body: json!({"channel": channel}),
        key: format!("pay-{order_id}"),
        token_needed: true,
        kind: PendingKind::Payment,
    };
    let (Some(answer), token) = keyed_with_duplicates(shared, rng, pending.clone()).await else {
        return;
    };
    let Some(number) = answer.json()["payment_no"].as_str().map(str::to_owned) else {
        return;
    };
    let mode = NOTIFY_MODES[rng.usize(..NOTIFY_MODES.len())];
    if mode != "normal" {
        shared.count(&format!("notify {mode}"));
    }
    let mut policy = json!({"mode": mode, "out_trade_no": number});
    if matches!(mode, "delay" | "reorder") {
        policy["delay_seconds"] = json!(rng.u64(1..4));
    }
    shared
        .sim(reqwest::Method::PUT, "/sim/notify-policy", policy)
        .await;
    let roll = rng.u8(..100);
    if roll < 75 {
        let pay_path = format!("/sim/trades/{number}/pay");
        let close_path = format!("/v1/payments/{number}/close");
        let empty = json!({});
        let pay = shared.sim(reqwest::Method::POST, &pay_path, json!({}));
        if roll < 10 {
            // The buyer pays while the merchant closes: never both.
            shared.count("close racing the payment");
            let close = shared.send(
                rng.usize(..shared.bases.len()),
                tenant,
                reqwest::Method::POST,
                &close_path,
                Some(&empty),
                &[],
                Duration::from_secs(20),
            );
            let _ = tokio::join!(pay, close);
        } else {
            pay.await;
        }
    } else {
        // The buyer never pays and nobody closes it: nothing legitimate changes this payment
        // before its expiry, so it is a victim for the attacker (the audit checks it stays
        // as it is). Only a trade the channel confirmed (a pay URL) qualifies.
        let view = answer.json();
        if view["status"] == "PENDING" && view["pay_url"].is_string() {
            let mut log = shared.log();
            if log.victims.len() < attacker::VICTIMS_MAX {
                log.victims.push(Victim {
                    tenant,
                    payment_no: number.clone(),
                    channel: channel.to_owned(),
                    amount_fen: amount,
                });
            }
        }
    }
    if rng.u8(..10) < 3 {
        // The same request again, token included, long after its answer.
        shared.count("manual replay");
        keyed(shared, rng, pending, token, Duration::from_secs(20), 8).await;
    }
}

/// A checkout without `Idempotency-Key`: the same form posted twice with one token (the token
/// layer refuses the second), or from two tabs with two tokens (the order lock and the
/// one-pending constraint give both the same payment).
async fn keyless_double_click(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    order_id: &str,
    channel: &str,
) {
    let instance = rng.usize(..shared.bases.len());
    let Some(first) = issue_token(shared, tenant, instance).await else {
        return;
    };
    let two_tabs = rng.bool();
    let second = if two_tabs {
        shared.count("two tabs, two tokens, no key");
        issue_token(shared, tenant, instance).await
    } else {
        shared.count("double click, one token, no key");
        Some(first.clone())
    };
    let Some(second) = second else {
        return;
    };
    let path = format!("/v1/orders/{order_id}/payments");
    let body = json!({"channel": channel});
    let send = |token: String, instance: usize| {
        let path = path.clone();
        let body = body.clone();
        async move {
            shared
                .send(
                    instance,
                    tenant,
                    reqwest::Method::POST,
                    &path,
                    Some(&body),
                    &[("Idempotency-Token", token.as_str())],
                    Duration::from_secs(20),
                )
                .await
        }
    };
    let (one, two) = tokio::join!(send(first, instance), send(second, instance + 1));
    for answer in [one, two].into_iter().flatten() {
        if let Some(number) = answer.json()["payment_no"].as_str() {
            shared.log().payments.insert(number.to_owned());
        }
    }
}

/// Sends the order creation `count` times at once (to neighbouring instances).
pub(crate) async fn create_order(
    shared: &Shared,
    instance: usize,
    tenant: usize,
    body: &Value,
    count: usize,
) -> Vec<Option<Answer>> {
    let first = shared.send(
        instance,
        tenant,
        reqwest::Method::POST,
        "/v1/orders",
        Some(body),
        &[],
        Duration::from_secs(20),
    );
    if count < 2 {
        return vec![first.await];
    }
    let second = shared.send(
        instance + 1,
        tenant,
        reqwest::Method::POST,
        "/v1/orders",
        Some(body),
        &[],
        Duration::from_secs(20),
    );
    let (first, second) = tokio::join!(first, second);
    vec![first, second]
}

/// Answers every keyed request that had none when its client gave up (leases of crashed
/// owners run out, then the key is taken over).
async fn finish_pending(shared: &Shared) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rng = fastrand::Rng::with_seed(7);
    loop {
        let pending: Vec<Pending> = std::mem::take(&mut shared.log().unresolved);
        if pending.is_empty() || Instant::now() > deadline {
            shared.log().unresolved.extend(pending);
            return;
        }
        for request in pending {
            keyed(shared, &mut rng, request, None, Duration::from_secs(20), 3).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until no notify of these trades is being delivered or due within a few seconds.
/// Later retries of the channels' schedules (minutes apart) are not waited for: whatever they
/// would bring, reconciliation asks the channel for it, and a late duplicate changes nothing.
async fn settle_notifies(shared: &Shared, payments: &[String]) {
    let now = shared
        .sim(reqwest::Method::GET, "/sim/clock", Value::Null)
        .await
        .and_then(|clock| clock["now_ms"].as_i64())
        .unwrap_or(0);
    let horizon = now.saturating_add(10_000);
    let deadline = Instant::now() + Duration::from_secs(60);
    for number in payments {
        loop {
            let trade = shared
                .sim(
                    reqwest::Method::GET,
                    &format!("/sim/trades/{number}"),
                    Value::Null,
                )
                .await
                .unwrap_or(Value::Null);
            let busy = trade["notifies"].as_array().is_some_and(|notifies| {
                notifies
                    .iter()
                    .any(|notify| match notify["state"].as_str() {
                        Some("delivering") => true,
                        Some("scheduled") => notify["next_delivery_at_ms"]
                            .as_i64()
                            .is_some_and(|due| due <= horizon),
                        _ => false,
                    })
            });
            if !busy || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits until the outbox is empty and the in-database queue drained, then a moment for the
/// consumers' last acknowledgements.
async fn drain_events(operator: &mideng_pay::api::AppState) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let backlog = operator.ports.store.events.outbox_backlog().await?;
        let queued = operator
            .ports
            .store
            .events
            .queue_depth(PAYMENT_SUCCEEDED)
            .await?;
        if backlog.unsent == 0 && queued == 0 {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("events never drained: {backlog:?}, {queued} queued");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

/// The channel's side of every payment the database knows.
async fn channel_facts(
    shared: &Shared,
    snapshot: &audit::Snapshot,
) -> anyhow::Result<ChannelFacts> {
    let ledger = shared
        .sim(reqwest::Method::GET, "/sim/ledger", Value::Null)
        .await
        .context("the simulator's ledger")?;
    // This run's trades: those its clients were told of and those its orders hold (a simulator
    // the storm did not start may have others).
    let mut ours: HashSet<String> = shared.log().payments.clone();
    ours.extend(
        snapshot
            .payments
            .iter()
            .map(|payment| payment.payment_no.clone()),
    );
    let mut facts = ChannelFacts::default();
    for entry in ledger["entries"].as_array().into_iter().flatten() {
        if entry["kind"] == "charge"
            && let (Some(number), Some(amount)) =
                (entry["out_trade_no"].as_str(), entry["amount_fen"].as_i64())
            && ours.contains(number)
        {
            facts
                .charges
                .entry(number.to_owned())
                .or_default()
                .push(amount);
        }
    }
    for payment in &snapshot.payments {
        let trade = shared
            .sim(
                reqwest::Method::GET,
                &format!("/sim/trades/{}", payment.payment_no),
                Value::Null,
            )
            .await
            .unwrap_or(Value::Null);
        if let Some(status) = trade["status"].as_str() {
            facts.trades.insert(
                payment.payment_no.clone(),
                TradeFact {
                    status: status.to_owned(),
                    exists: trade["exists_at_channel"].as_bool().unwrap_or(true),
                },
            );
        }
    }
    Ok(facts)
}

/// Outcomes that are a first arrival let through, not a duplicate caught.
const FIRST_ARRIVALS: [&str; 15] = [
    "off",
    "proceed",
    "no_key",
    "stored",
    "token_consumed",
    "acquired",
    "inserted",
    "created",
    "credited",
    "debited",
    "granted",
    "nothing_to_grant",
    "paid",
    "closed",
    "acknowledged",
];

/// The service's decision counters, by layer: what each layer caught in this process.
fn layers(metrics: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut layers: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        // Counters render as whole numbers.
        let Ok(count) = value.parse::<u64>() else {
            continue;
        };
        let label = |name: &str| {
            let marker = format!("{name}=\"");
            series
                .split_once(&marker)
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(value, _)| value.to_owned())
        };
        let (layer, outcome) = if series.starts_with("mideng_service_decisions_total{") {
            let (Some(layer), Some(operation), Some(outcome)) =
                (label("layer"), label("operation"), label("outcome"))
            else {
                continue;
            };
            (layer, format!("{operation}:{outcome}"))
        } else if series.starts_with("mideng_idempotency_decisions_total{") {
            let (Some(operation), Some(decision)) = (label("operation"), label("decision")) else {
                continue;
            };
            let layer = if decision.starts_with("token_") {
                "token"
            } else {
                "key"
            };
            (layer.to_owned(), format!("{operation}:{decision}"))
        } else {
            continue;
        };
        // Only what a layer stopped or settled, not the first arrivals that it let through.
        let first_arrival = FIRST_ARRIVALS
            .iter()
            .any(|first| outcome.rsplit(':').next() == Some(*first));
        let found_by_reconciliation =
            layer == "reconciliation" && !outcome.ends_with("left_pending");
        if first_arrival && !found_by_reconciliation || outcome.ends_with("left_pending") {
            continue;
        }
        if count > 0 {
            *layers.entry(layer).or_default().entry(outcome).or_default() += count;
        }
    }
    layers
}

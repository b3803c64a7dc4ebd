//! What `mideng storm` is asked to do: its flags, and the layer a run may turn off to show
//! what that layer prevents. Parsed once here; the rest of the storm reads these values.

use std::path::PathBuf;

use mideng_pay::domain::wallet::WalletStrategy;
use mideng_pay::flows::{BrokenLayer, PaymentSettings};
use serde::Serialize;

use crate::deploy::{ServerArgs, StackKind};

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
    /// The order lock's fences (with `--processes` only): a process paused past its lease
    /// (the schedule's SIGSTOP) wakes and writes under a lock another instance has since
    /// taken and used, and the write commits. The instances count each such fenced-off write,
    /// and the audit must name them.
    Fences,
    /// PostgreSQL's synchronous standby (replicated stack): left asynchronous, and each
    /// failover preceded by a moment of lag, so that the promoted standby lacks commits the
    /// primary acknowledged. The audit must name the lost acknowledged writes.
    SyncStandby,
}

impl BreakLayer {
    pub(super) fn name(self) -> &'static str {
        match self {
            BreakLayer::Keys => "keys",
            BreakLayer::Tokens => "tokens",
            BreakLayer::OrderLock => "order-lock",
            BreakLayer::NotifyDedup => "notify-dedup",
            BreakLayer::GrantDedup => "grant-dedup",
            BreakLayer::ChannelKey => "channel-key",
            BreakLayer::Fences => "fences",
            BreakLayer::SyncStandby => "sync-standby",
        }
    }

    /// The layers expected to hold in its place, with the operation whose duplicates they
    /// then catch.
    pub(super) fn deeper(self) -> &'static [(&'static str, &'static str)] {
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
            // The audit names the fenced-off writes themselves; the compare-and-sets and
            // constraints beneath may still keep the money right, which is not the fence's
            // doing.
            BreakLayer::Fences => &[],
            // Nothing deeper: a commit the database forgot is gone from every layer.
            BreakLayer::SyncStandby => &[],
        }
    }

    pub(super) fn apply(self, payments: &mut PaymentSettings) {
        match self {
            BreakLayer::Keys => payments.idempotency = false,
            BreakLayer::Tokens => payments.broken = Some(BrokenLayer::Tokens),
            BreakLayer::OrderLock => payments.broken = Some(BrokenLayer::OrderLock),
            BreakLayer::NotifyDedup => payments.broken = Some(BrokenLayer::NotifyDedup),
            BreakLayer::GrantDedup => payments.broken = Some(BrokenLayer::GrantDedup),
            // The service is unchanged; the attacker holds the key.
            BreakLayer::ChannelKey => {}
            BreakLayer::Fences => payments.broken = Some(BrokenLayer::Fences),
            // The service is unchanged; the servers are not.
            BreakLayer::SyncStandby => {}
        }
    }
}

/// `mideng storm` flags.
#[derive(Clone, Debug, clap::Args)]
#[command(
    after_long_help = "While it runs, the terminal shows a progress bar with the live \
    counters (requests sent, duplicates, faults injected, violations seen so far); the log of \
    the services and the storm goes to a file (--log-file), whose path is printed at the end \
    with the report. --json and --html write the same report as JSON and as a self-contained \
    HTML page with its charts."
)]
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
    /// Rounds of every fault kind the stack has that the run owes: the workload goes on past
    /// `--duration-secs` (at most twice as long) until each kind ran this many times (0 to 10;
    /// 0: as many as the duration holds).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub fault_rounds: u32,
    /// Where the embedded stack's database goes.
    #[arg(long, default_value = ".mideng/storm")]
    pub dir: PathBuf,
    /// The servers of the servers stack.
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page here: duplicates by source, what
    /// each layer caught over time with the fault windows shaded, latency percentiles per
    /// operation, and every invariant with its result.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Also write the clients' history here, as JSON lines in Jepsen's shape: every attempt's
    /// invocation and its completion (`ok`, `fail`, or `info` when its outcome is unknown),
    /// for a checker outside the storm (docs/storm.md describes the fields).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// Where the log goes (the service's and the storm's own lines; `RUST_LOG` filters it).
    /// Default: `storm-<unix time>-<pid>.log` in `--dir`. The terminal shows only the progress
    /// bar and the report.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Turn one layer off (a test switch): the audit must then report what that layer
    /// prevents, or the report names the deeper layer that held.
    #[arg(long, value_enum)]
    pub break_layer: Option<BreakLayer>,
    /// Run the simulator and each service instance as a process of its own (`mideng sim`,
    /// `mideng serve` with a configuration written for it in `--dir`): the instance crash is
    /// then SIGKILL and a new process. Not with `--break-layer` (a configuration cannot turn a
    /// layer off) nor `--target`.
    #[arg(long)]
    pub processes: bool,
    /// With `--processes`: the `mideng` executable to run (default: this one).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// With `--processes`: instance 0 runs with its wall clock this many seconds ahead
    /// (negative: behind) of the machine's, the simulator's and the other instances' — leases,
    /// tokens, expiries and notify timestamps then meet a clock that disagrees. Made with
    /// Debian's libfaketime (package `faketime`), the monotonic clock left alone; at most
    /// 600 s either way.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub clock_skew_secs: i64,
    /// With `--processes`: the simulator's data directory, whose identity the storm signs with
    /// (set by `mideng storm` from its `--data-dir`).
    #[arg(skip)]
    pub identity_dir: Option<PathBuf>,
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
    /// How the deployment's deducts race on one wallet: `row-lock`, `optimistic` or
    /// `conditional-update` (the service's default); the audit holds for each.
    #[arg(long, default_value_t = WalletStrategy::default(), value_parser = wallet_strategy)]
    pub wallet_strategy: WalletStrategy,
}

fn wallet_strategy(name: &str) -> Result<WalletStrategy, String> {
    WalletStrategy::parse(name).ok_or_else(|| {
        let names: Vec<_> = WalletStrategy::ALL.iter().map(|s| s.as_str()).collect();
        format!("one of {}", names.join(", "))
    })
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
            fault_rounds: 0,
            dir: PathBuf::from(".mideng/storm"),
            servers: ServerArgs::default(),
            json: None,
            html: None,
            history: None,
            log_file: None,
            break_layer: None,
            processes: false,
            binary: None,
            clock_skew_secs: 0,
            identity_dir: None,
            target: Vec::new(),
            tenant_key: Vec::new(),
            sim_url: None,
            database_url: None,
            settle_secs: 120,
            target_metrics: Vec::new(),
            no_attacker: false,
            wallet_strategy: WalletStrategy::default(),
        }
    }
}

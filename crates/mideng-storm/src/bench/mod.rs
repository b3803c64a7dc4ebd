//! `mideng bench`: what the idempotency machinery costs, next to what the machine can do,
//! measured in one run.
//!
//! Two deployments of the service ([`crate::deploy`]) run side by side on the chosen stack, each
//! with its own simulator, database and tenant: one with the machinery on (the production
//! setting: `Idempotency-Key` records on payment creation, credit and deduct, a wallet
//! operation's record begun and completed in its own transaction), one with it off
//! ([`mideng_pay::flows::PaymentSettings::idempotency`] `= false`: no layer, no record; each
//! operation still one transaction, the ledger's one-debit-per-order constraint still there).
//! Both run the default wallet strategy. The scenarios alternate between the two, so that both
//! see the same machine at nearly the same moment. Speed is never asserted; it is reported next
//! to a baseline of the same run.
//!
//! ## One run per concurrency
//!
//! `--concurrency 16,64` repeats the whole run at each concurrency, in that order, each time on
//! new deployments and databases: the limits, the scenarios, the wallet strategies, the ratios
//! and the goals. The report keeps them apart (`runs`, one per concurrency).
//!
//! ## Scenarios
//!
//! `--concurrency` clients in a closed loop (each sends its next request when the last is
//! answered) for `--duration-secs`, per scenario:
//!
//! | operation | first-time | replay (on) / repeat (off) |
//! |---|---|---|
//! | payment creation (Alipay) | a new order each time (orders made beforehand, not timed) | the same request again: on, the key's record answers (201 replayed); off, the service answers the order's pending payment (200) |
//! | callback | a signed `TRADE_SUCCESS` notify for each payment created above: the payment and its order become PAID | the same notify again, as a channel retries: the dedup record by notify id answers |
//! | deduct, distinct wallets | 1 fen for a new order, each client on its own wallet | the same deduct again: on, replayed from the record; off, refused by the ledger's constraint (409 `already-deducted`) |
//! | deduct, one hot wallet | the same, every client on one wallet (the strategy decides how they wait for each other) | as above |
//!
//! A first-time scenario also ends when its inputs run out (payment creation, callbacks).
//!
//! ## Wallet strategies
//!
//! The deducts (distinct wallets and the hot one, first-time and replay) run once per strategy
//! of `--wallet-strategies` (all four by default), each on a new deployment of its own with the
//! machinery on and [`mideng_pay::flows::PaymentSettings::wallet_strategy`] set, so that every
//! strategy meets the same conditions (the "on" deployment above has created payments before
//! its deducts; the goals use its figures, with the default strategy). A replay is answered from
//! its record before the wallet store is reached, so there the replays run at most
//! [`STRATEGY_REPLAY_SECS_MAX`] seconds, mostly before the in-process cache of answers fills:
//! they check that each deployment replays (the table counts them), they do not compare
//! strategies. The table gives each strategy's first-time figures on both kinds of wallet,
//! their fraction of the relevant limit (the SQL deduct for distinct wallets, the hot-row
//! update for the hot one) and the fastest strategy on each.
//!
//! ## Limits
//!
//! Measured at each concurrency on the "on" deployment's database, in tables of the bench's
//! own (`limits`):
//! - **through the same driver** as the service: the same pool size (16) and write transaction
//!   (`BEGIN IMMEDIATE` on SQLite): a one-row insert; the conditional update of one hot row
//!   (`UPDATE … SET balance = balance - 1 WHERE id = 1 AND balance >= 1`); and a deduct by SQL
//!   alone, each client on a row of its own — a record-like row inserted, the balance
//!   decremented if it suffices, a ledger row inserted — in one statement on PostgreSQL
//!   (data-modifying CTEs), in three statements in one transaction on MySQL, MariaDB and SQLite,
//!   which have no writable CTEs (the limit's name says which). Each is one commit.
//! - **with pgbench** (`pgbench`), on PostgreSQL when it is on `PATH`: the same three
//!   statements, each its own transaction, `-M prepared`, one connection per client. This is the
//!   database's own speed; the same driver's figures beside it show what the driver, the pool
//!   and the transaction's round trips cost. When pgbench is missing or fails, its figures are
//!   left out with a note, and the goals use the same driver's instead (their detail says so).
//! - **Redis** round trips on the servers stack (alternating `SET NX PX` and `GET`) through the
//!   same multiplexed client as the service, to Redis directly, as the service connects
//!   (the bench's deployments skip the storm's fault proxies).
//!
//! Choices worth knowing:
//! - **No one-time tokens.** Payment creation runs with `token_required = false` and sends no
//!   token: a token is one more request, made ahead of the click (when the pay page renders),
//!   so the measured layer is the key's record. With the machinery off there is no token guard.
//! - **Callbacks are signed by the bench.** The bench plays the channel: it signs the Alipay
//!   notify the simulator's dispatcher would send after the buyer paid, with the simulator's
//!   own gateway key, and posts it to the service's notify endpoint. Going through
//!   `/sim/trades/{no}/pay` would time the simulator's delivery schedule plus a poll, and the
//!   simulator has no "send again". Signing happens before the timed phase. The notify path
//!   has no switch (its dedup by notify id is what makes a channel's retries safe), so it is
//!   measured with the machinery on only; the trades stay unpaid at the simulator, whose
//!   ledger is not audited here. A notify's answer carries no replay mark: the service's own
//!   dedup counter tells how many replays it recognised.
//! - **Databases.** The servers stack's SQL server is `--database`: PostgreSQL, or MySQL /
//!   MariaDB (`mysql://…`); the run creates its databases beside the one named, and drops them.
//!
//! ## How to read the report
//!
//! - **req/s** is answers per second of wall time; **p50/p99** are the latencies the clients
//!   saw, loopback HTTP included. Everything (service, simulator, clients, database) shares
//!   the machine, so the absolute figures are this machine's, not the service's alone.
//! - **errors** are answers the scenario does not expect (and transport failures); a run with
//!   errors measured something else. **replayed** counts answers marked
//!   `Idempotent-Replayed: true` (for notifies: recognised by the dedup record); **refused**
//!   the expected 409s of a repeated deduct with the machinery off.
//! - **Layer overhead** (first-time, on / off): throughput 0.80 means the machinery costs a
//!   fifth of the throughput; p50 1.25 means the median request takes a quarter longer.
//! - **Replay speed-up** (machinery on, replay / first-time): how much cheaper an answered
//!   duplicate is than the work. A replay of an answer this instance stored or replayed before
//!   is answered from its memory (the replay cache, sized by the bench to hold every answer of
//!   a run: the replay scenarios go through all the keys in order, a scan that a smaller
//!   cache would miss on nearly every request); it never reaches the channel or the ledger.
//! - **Fraction of the database limit**: a first-time scenario's req/s divided by the same
//!   driver's one-row-insert commits/s. A request commits several transactions (payment
//!   creation with the machinery on: the record's start, the payment, its pay URL, the record's
//!   answer; off: the two in the middle; a deduct one, on or off), so a fraction near 1 / (its
//!   commits) says the database is the bottleneck, and a much lower one that the time goes
//!   elsewhere (HTTP, signatures, the channel call, locks). SQLite has one writer at a time:
//!   its commit rate does not grow with concurrency.
//! - **Driver and pool** (same driver / pgbench, per limit): what our side of the connection
//!   costs on the same statement.
//! - **Open loop** (`--open-loop-percent`, 50 by default): the deducts on distinct wallets
//!   (first-time on and off, replay) sent again on a fixed schedule at that share of their
//!   closed loop's rate; each latency counts from the request's due time, so a stall shows in
//!   every request it delayed (the closed loop would not have sent them): p50, p99, p99.9 and
//!   the slowest.
//! - **CPU µs per request** ([`cpu`]): the kernel's count of the time the service's threads,
//!   the bench's clients, the database's processes and Redis spent, divided by the requests
//!   answered, and the throughput the cores would allow at that cost. Where the sum is near
//!   the measured rate, the scenario is CPU-bound and only less work per request helps;
//!   `--profile DIR` writes a flamegraph per scenario that says which work.
//! - **Goals**, each on its own line with its target and whether this run met it, and in the
//!   detail what was divided by what: the first-time deduct (distinct wallets, machinery on)
//!   over the same deduct by SQL alone through the bench's own client (≥ 0.8) and by pgbench
//!   (≥ 0.5), over one-row-insert commits (≥ 0.5; pgbench's, and the same driver's beside
//!   them), over itself with the machinery off (≥ 0.9); the hot-wallet deduct over the hot-row
//!   update (≥ 0.7); the replay over the first time (≥ 10) and over a Redis round trip (≥ 0.5,
//!   servers stack); payment creation on over off (≥ 0.95); and, when the `group-commit`
//!   strategy was benched, its deduct over pgbench's SQL deduct (≥ 1.0) and its hot-wallet
//!   deduct over pgbench's hot-row update (≥ 0.7).

/// The replay cache of a bench deployment: more answers than a run makes at 64 clients on
/// this kind of machine (about 5 000 first-time requests a second for 5 s per scenario).
const REPLAY_CACHE_ENTRIES: usize = 200_000;

pub mod cpu;
mod html;
mod limits;
mod load;
pub mod memory;
mod pgbench;
mod profile;
mod report;
mod rounds;
mod scenarios;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use mideng_pay::domain::wallet::WalletStrategy;
use mideng_pay::flows::PaymentSettings;
use mideng_sim::{MerchantKeys, SimConfig};

pub use report::{
    BenchReport, BenchRun, Figures, Goal, GoalKind, LimitKind, LimitResult, Machinery,
    OpenLoopResult, Operation, PathKind, Ratio, ScenarioResult, StrategyResult, Via,
};

use crate::deploy::{DeployOptions, Deployment, ServerArgs, Stack, StackKind, drop_run_database};
use limits::{BenchDatabase, Work};
use load::{Load, Tally};
use rounds::{deducts, payment_creation_and_callbacks};
use scenarios::{Api, Wallets};

/// At most this many concurrencies in one bench: each repeats the whole run.
pub const CONCURRENCY_LEVELS_MAX: usize = 8;
/// The most concurrent clients of a run.
const CONCURRENCY_MAX: u16 = 512;
/// How long, at most, a replay runs on the deployment of a wallet strategy, seconds: a replay
/// never reaches the wallet store, so it is checked there, not compared, and the run stays
/// short.
pub const STRATEGY_REPLAY_SECS_MAX: u64 = 1;

/// `mideng bench` flags.
#[derive(Clone, Debug, clap::Args)]
#[command(
    after_long_help = "While it runs, the terminal shows a progress bar of the timed \
    steps and the one running; the log of the services and the bench goes to a file \
    (--log-file), whose path is printed at the end with the report. --json and --html write \
    the same report as JSON and as a self-contained HTML page with its charts."
)]
pub struct BenchArgs {
    /// The stack to deploy.
    #[arg(long, value_enum, default_value_t = StackKind::Embedded)]
    pub stack: StackKind,
    /// Concurrent clients, or several comma-separated (`16,64`, each 1 to 512, at most 8): the
    /// whole run repeats at each.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16",
        value_parser = clap::value_parser!(u16).range(1..=512)
    )]
    pub concurrency: Vec<u16>,
    /// Seconds per scenario (1 to 600); a first-time scenario ends sooner if its inputs do.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub duration_secs: u64,
    /// The wallet strategies whose deducts are benched, comma-separated: `row-lock`,
    /// `optimistic`, `conditional-update`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "row-lock,optimistic,conditional-update",
        value_parser = parse_wallet_strategy
    )]
    pub wallet_strategies: Vec<WalletStrategy>,
    /// Where the embedded stack's databases go (deleted after the run).
    #[arg(long, default_value = ".mideng/bench")]
    pub dir: PathBuf,
    /// The servers of the servers stack (the run creates its databases there, and drops
    /// them).
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page here: throughput, ratios and
    /// goals as bar charts, with their tables.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Where the log goes (the service's and the bench's own lines; `RUST_LOG` filters it).
    /// Default: `bench-<unix time>-<pid>.log` in `--dir`. The terminal shows only the progress
    /// bar and the report.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Also sample the process while each scenario runs and write its flamegraph (SVG) here,
    /// one file per scenario and concurrency; the service's threads are the "service" tower.
    /// Sampling costs a few per cent of the throughput: compare figures of runs without it.
    #[arg(long, value_name = "DIR")]
    pub profile: Option<PathBuf>,
    /// The open loop's offered load, in per cent of the closed loop's throughput of the same
    /// scenario in the same run (0 to 200; 0: no open loop): the deducts on distinct wallets,
    /// first-time on and off and replayed, are sent again on that fixed schedule, and their
    /// p50/p99/p999 latency counted from each request's due time.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=200))]
    pub open_loop_percent: u8,
}

impl Default for BenchArgs {
    fn default() -> Self {
        Self {
            stack: StackKind::Embedded,
            concurrency: vec![16],
            duration_secs: 5,
            wallet_strategies: WalletStrategy::ALL.to_vec(),
            dir: PathBuf::from(".mideng/bench"),
            servers: ServerArgs::default(),
            json: None,
            html: None,
            log_file: None,
            profile: None,
            open_loop_percent: 50,
        }
    }
}

fn parse_wallet_strategy(name: &str) -> Result<WalletStrategy, String> {
    WalletStrategy::parse(name).ok_or_else(|| {
        let names: Vec<&str> = WalletStrategy::ALL.iter().map(|s| s.as_str()).collect();
        format!("one of {}", names.join(", "))
    })
}

/// `values` without repeats, in their first order.
fn distinct<T: Copy + PartialEq>(values: &[T]) -> Vec<T> {
    let mut kept = Vec::with_capacity(values.len());
    for &value in values {
        if !kept.contains(&value) {
            kept.push(value);
        }
    }
    kept
}

/// Runs the bench at each concurrency: deploys (machinery on and off), measures the limits and
/// every scenario, then each wallet strategy's deducts on a deployment of its own; stops and
/// deletes every deployment, and returns the report (also written as JSON with `--json`, as
/// HTML with `--html`). With `progress`, a progress bar on the terminal counts the timed
/// steps and names the one running.
pub async fn run(
    args: BenchArgs,
    identity: (SimConfig, MerchantKeys),
    progress: bool,
) -> anyhow::Result<BenchReport> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let levels = distinct(&args.concurrency);
    anyhow::ensure!(
        (1..=CONCURRENCY_LEVELS_MAX).contains(&levels.len()),
        "--concurrency takes 1 to {CONCURRENCY_LEVELS_MAX} values"
    );
    anyhow::ensure!(
        levels
            .iter()
            .all(|level| (1..=CONCURRENCY_MAX).contains(level)),
        "--concurrency: each from 1 to {CONCURRENCY_MAX}"
    );
    let strategies = distinct(&args.wallet_strategies);
    anyhow::ensure!(
        !strategies.is_empty(),
        "--wallet-strategies names at least one"
    );
    let unix_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    let run_id = format!("bench-{unix_secs}-{:04x}", fastrand::u16(..));
    let stack = args.stack.stack(&args.dir, &args.servers);
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(timed_steps(
            &stack,
            strategies.len(),
            levels.len(),
            args.open_loop_percent > 0,
        ));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} bench {elapsed_precise} [{bar:20}] {pos}/{len} steps · {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(250));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let memory_before = memory::now();
    let mut report = BenchReport {
        stack: stack.label().to_owned(),
        duration_secs: args.duration_secs,
        open_loop_percent: args.open_loop_percent,
        concurrency: levels.clone(),
        wallet_strategies: strategies.clone(),
        runs: Vec::new(),
        memory: None,
        notes: notes(&stack),
    };
    for concurrency in levels {
        tracing::info!(concurrency, "bench: a run");
        let run = run_at(
            &args,
            &identity,
            &stack,
            &format!("{run_id}-c{concurrency}"),
            concurrency,
            &strategies,
            &bar,
        )
        .await
        .with_context(|| format!("the run at {concurrency} concurrent clients"))?;
        report.runs.push(run);
    }
    bar.finish_and_clear();
    report.memory = memory::between(memory_before, memory::now());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, report.html())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// The timed steps of a bench, for its progress bar: per concurrency, the same driver's three
/// limits (and Redis' on the servers stack), the fourteen scenarios, three in the open loop
/// and four per wallet strategy. pgbench's three are added when it runs.
fn timed_steps(stack: &Stack, strategies: usize, levels: usize, open_loop: bool) -> u64 {
    let limits = if matches!(stack, Stack::Embedded { .. }) {
        3
    } else {
        4
    };
    let per_level = limits + 14 + if open_loop { 3 } else { 0 } + 4 * strategies;
    u64::try_from(per_level * levels).unwrap_or(u64::MAX)
}

/// What every run of this stack shares, to read the figures.
fn notes(stack: &Stack) -> Vec<String> {
    let mut notes = vec![
        "payment creation calls the simulated channel (RSA signatures both ways), which \
         dominates its first-time cost; it sends no one-time token (token_required = false): \
         the measured layer is the Idempotency-Key record"
            .to_owned(),
        "repeat (machinery off): the same request without a record; payment creation answers \
         the order's pending payment, a deduct is refused by the ledger's constraint"
            .to_owned(),
        "a request commits several transactions (payment creation on: 4, off: 2; a callback: 1; \
         deduct on or off: 1): read the fraction of the database limit against that"
            .to_owned(),
        "callbacks: the notify path has no switch (its dedup by notify id keeps a channel's \
         retries safe); measured with the machinery on, with notifies the bench signs as the \
         channel"
            .to_owned(),
        format!(
            "wallet strategies: each on a new deployment of its own with the machinery on; the \
             goals use the main \"on\" deployment's deducts, with the default strategy ({}); \
             the strategies' replays run at most {STRATEGY_REPLAY_SECS_MAX} s, mostly before the \
             cache of answers fills: a replay never reaches the wallet store, so they are \
             counted, not compared",
            WalletStrategy::default()
        ),
        "limits: the same driver runs each statement in the service's write transaction through \
         a pool of 16; pgbench (PostgreSQL) runs the same statements as transactions of their \
         own, one connection per client"
            .to_owned(),
    ];
    if matches!(stack, Stack::Embedded { .. }) {
        notes.push(
            "no Redis on the embedded stack (tokens and locks are in-process): no round trip \
             measured; no pgbench (SQLite)"
                .to_owned(),
        );
    }
    notes
}

/// The options of one of the run's deployments.
fn options(
    stack: &Stack,
    idempotency: bool,
    wallet_strategy: WalletStrategy,
    run_id: String,
) -> DeployOptions {
    DeployOptions {
        stack: stack.clone(),
        instances: 1,
        tenants: 1,
        payments: PaymentSettings {
            token_required: false,
            idempotency,
            wallet_strategy,
            // Room for every answer of a run: the replay scenarios go through all the keys
            // of the first-time ones in order, a scan that a cache smaller than the scan
            // (the default 10 000) misses on nearly every request.
            replay_cache_entries: REPLAY_CACHE_ENTRIES,
            ..PaymentSettings::default()
        },
        reconcile: None,
        events: false,
        run_id,
        processes: None,
        // The instances connect to the servers directly: the storm's fault proxies would be
        // measured with them (a profile showed their pumps on the same two cores).
        fault_links: false,
    }
}

/// The whole run at `concurrency`.
async fn run_at(
    args: &BenchArgs,
    identity: &(SimConfig, MerchantKeys),
    stack: &Stack,
    run_id: &str,
    concurrency: u16,
    strategies: &[WalletStrategy],
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<BenchRun> {
    let mut bench = Bench::new(args, concurrency, bar.clone())?;
    bench.step("starting the deployments");
    let deploy = |idempotency: bool, strategy: WalletStrategy, label: &str| {
        Deployment::start(
            identity.clone(),
            options(stack, idempotency, strategy, format!("{run_id}-{label}")),
        )
    };
    let default = WalletStrategy::default();
    let on = deploy(true, default, "on")
        .await
        .context("starting the deployment with the machinery on")?;
    let off = match deploy(false, default, "off").await {
        Ok(off) => off,
        Err(error) => {
            let urls = [on.database_url.clone()];
            on.stop().await;
            cleanup(args, &urls).await;
            return Err(error.context("starting the deployment with the machinery off"));
        }
    };
    let measured = bench.measure(args, &identity.0, run_id, &on, &off).await;
    let urls = [on.database_url.clone(), off.database_url.clone()];
    on.stop().await;
    off.stop().await;
    cleanup(args, &urls).await;
    measured?;

    for &strategy in strategies {
        tracing::info!(strategy = strategy.as_str(), "bench: a wallet strategy");
        bench.step(&format!("starting the {strategy} strategy's deployment"));
        let deployment = deploy(true, strategy, strategy.as_str())
            .await
            .with_context(|| format!("starting the deployment of the {strategy} strategy"))?;
        let swept = bench.strategy(strategy, &deployment).await;
        let urls = [deployment.database_url.clone()];
        deployment.stop().await;
        cleanup(args, &urls).await;
        swept?;
    }
    bench.run.compute();
    if let Some(mut profiler) = bench.profiler.take() {
        profiler.finish()?;
        if let Some(first) = profiler.written.first() {
            let dir = first.parent().unwrap_or(first);
            bench.run.notes.push(format!(
                "{} flamegraphs of the scenarios in {}",
                profiler.written.len(),
                dir.display()
            ));
        }
    }
    Ok(bench.run)
}

/// The run being filled, and how each scenario runs.
struct Bench {
    concurrency: usize,
    duration: Duration,
    client: reqwest::Client,
    run: report::BenchRun,
    /// The progress bar: one position per timed step done.
    bar: indicatif::ProgressBar,
    /// `--profile`: the scenarios' flamegraphs.
    profiler: Option<profile::Profiler>,
    /// `--open-loop-percent`.
    open_loop_percent: u8,
}

impl Bench {
    fn new(
        args: &BenchArgs,
        concurrency: u16,
        bar: indicatif::ProgressBar,
    ) -> anyhow::Result<Self> {
        let clients = usize::from(concurrency.clamp(1, CONCURRENCY_MAX));
        Ok(Self {
            concurrency: clients,
            duration: Duration::from_secs(args.duration_secs.clamp(1, 600)),
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(clients)
                .build()?,
            run: BenchRun::new(concurrency),
            bar,
            profiler: args
                .profile
                .as_deref()
                .map(profile::Profiler::new)
                .transpose()?,
            open_loop_percent: args.open_loop_percent,
        })
    }

    /// Names the step now running on the progress bar.
    fn step(&self, what: &str) {
        self.bar
            .set_message(format!("{} clients · {what}", self.run.concurrency));
    }

    /// The deployment's first instance and tenant, as the clients see them.
    fn api(&self, deployment: &Deployment, machinery: Machinery) -> anyhow::Result<Api> {
        let base = deployment
            .bases()
            .into_iter()
            .next()
            .context("an instance")?;
        let tenant = deployment.tenants.first().context("a tenant")?;
        Ok(Api::new(
            self.client.clone(),
            &base,
            &tenant.api_key,
            machinery,
        ))
    }

    fn announce(&mut self, operation: Operation, machinery: Machinery, path: PathKind) {
        let scenario = format!(
            "{} · machinery {} · {}",
            operation.label(),
            machinery.label(),
            path.label()
        );
        self.step(&scenario);
        if let Some(profiler) = &mut self.profiler {
            let stem = profile::file_stem(self.run.concurrency, &scenario);
            if let Err(error) = profiler.start(stem) {
                let note = format!("no flamegraph for {scenario}: {error:#}");
                self.run.notes.push(note);
            }
        }
        tracing::info!(
            scenario = operation.label(),
            machinery = ?machinery,
            path = ?path,
            "bench scenario"
        );
    }

    fn push(&mut self, operation: Operation, machinery: Machinery, path: PathKind, tally: Tally) {
        if let Some(profiler) = &mut self.profiler {
            match profiler.finish() {
                Ok(Some(written)) => tracing::info!(path = %written.display(), "bench: flamegraph"),
                Ok(None) => {}
                Err(error) => self
                    .run
                    .notes
                    .push(format!("a flamegraph was lost: {error:#}")),
            }
        }
        self.run
            .scenarios
            .push(scenario_result(operation, machinery, path, tally));
        self.bar.inc(1);
    }

    /// An open-loop run of the scenario whose closed loop reached `closed_per_second`.
    fn push_open(
        &mut self,
        operation: Operation,
        machinery: Machinery,
        path: PathKind,
        closed_per_second: f64,
        load: Load,
        tally: Tally,
    ) {
        let offered_per_second = match load {
            Load::Open { per_second, .. } => per_second,
            Load::Closed { .. } => 0.0,
        };
        let figures = tally.figures();
        self.run.open_loop.push(OpenLoopResult {
            operation,
            machinery,
            path,
            closed_per_second,
            offered_per_second,
            p999_ms: tally.latency_ms(999),
            max_ms: tally.latency_ms(1000),
            replayed: tally.replayed,
            figures,
            first_error: tally.first_failure,
        });
        self.bar.inc(1);
    }

    fn limit(
        &mut self,
        kind: LimitKind,
        via: Via,
        name: String,
        figures: Figures,
        first_error: Option<String>,
    ) {
        self.run.limits.push(LimitResult {
            name,
            kind,
            via,
            figures,
            first_error,
        });
        self.bar.inc(1);
    }

    fn note(&mut self, note: impl Into<String>) {
        self.run.notes.push(note.into());
    }

    /// The limits, then every scenario of the two deployments.
    async fn measure(
        &mut self,
        args: &BenchArgs,
        config: &SimConfig,
        run_id: &str,
        on: &Deployment,
        off: &Deployment,
    ) -> anyhow::Result<()> {
        let (on_api, off_api) = (self.api(on, Machinery::On)?, self.api(off, Machinery::Off)?);
        self.limits(args, run_id, on).await?;
        payment_creation_and_callbacks(self, config, &on_api, &off_api).await?;
        for wallets in [Wallets::Distinct, Wallets::Hot] {
            deducts(self, wallets, &on_api, &off_api).await?;
        }
        Ok(())
    }

    /// The machine's limits on the database of `on` (and Redis, and pgbench).
    async fn limits(
        &mut self,
        args: &BenchArgs,
        run_id: &str,
        on: &Deployment,
    ) -> anyhow::Result<()> {
        tracing::info!("bench: the machine's limits");
        let (concurrency, duration) = (self.concurrency, self.duration);
        let database = Arc::new(
            BenchDatabase::open(&on.database_url, concurrency)
                .await
                .context("opening the deployment's database for the limits")?,
        );
        let engine = database.engine();
        let sql_deduct = format!("SQL deduct {}", database.deduct_shape());
        let what = |kind| match kind {
            LimitKind::OneRowInsert => "one-row-insert commit".to_owned(),
            LimitKind::HotRowUpdate => "hot-row conditional UPDATE, one per commit".to_owned(),
            LimitKind::SqlDeduct => sql_deduct.clone(),
            LimitKind::RedisRoundTrip => "Redis round trip (SET NX PX / GET)".to_owned(),
        };
        for (work, kind) in [
            (Work::InsertRow, LimitKind::OneRowInsert),
            (Work::UpdateHotRow, LimitKind::HotRowUpdate),
            (Work::SqlDeduct, LimitKind::SqlDeduct),
        ] {
            tracing::info!(limit = ?kind, "bench: a limit through the same driver");
            self.step(&format!("limit: {}, same driver", what(kind)));
            let tally = limits::same_driver(&database, work, concurrency, duration).await;
            let name = format!("{}, {engine}, same driver", what(kind));
            self.limit(
                kind,
                Via::SameDriver,
                name,
                tally.figures(),
                tally.first_failure,
            );
        }
        database.close().await;
        if on.has_servers() {
            self.step("limit: Redis round trips");
            let round_trips = limits::redis(
                &args.servers.redis,
                &format!("mideng-bench:{run_id}"),
                concurrency,
                duration,
            )
            .await?;
            self.limit(
                LimitKind::RedisRoundTrip,
                Via::SameDriver,
                format!("{}, same client", what(LimitKind::RedisRoundTrip)),
                round_trips.figures(),
                round_trips.first_failure,
            );
        }
        if engine == "PostgreSQL" {
            self.pgbench_limits(run_id, &on.database_url, &what).await;
        }
        Ok(())
    }

    /// The same statements run by pgbench; each one missing is a note, never a failed bench.
    async fn pgbench_limits(
        &mut self,
        run_id: &str,
        database_url: &str,
        what: &impl Fn(LimitKind) -> String,
    ) {
        let version = match pgbench::version().await {
            Ok(version) => version,
            Err(why) => {
                tracing::warn!(%why, "no pgbench figures");
                self.note(format!(
                    "no pgbench figures ({why}): the goals use the same driver's"
                ));
                return;
            }
        };
        let workdir = std::env::temp_dir().join(format!("mideng-{run_id}-pgbench"));
        if let Err(error) = std::fs::create_dir_all(&workdir) {
            self.note(format!(
                "no pgbench figures (creating {}: {error}): the goals use the same driver's",
                workdir.display()
            ));
            return;
        }
        let scripts = limits::pgbench_scripts();
        self.bar
            .inc_length(u64::try_from(scripts.len()).unwrap_or_default());
        for (kind, script) in scripts {
            tracing::info!(limit = ?kind, "bench: a limit with pgbench");
            self.step(&format!("limit: {}, pgbench", what(kind)));
            let name = match kind {
                LimitKind::OneRowInsert => "insert",
                LimitKind::HotRowUpdate => "hot-row",
                LimitKind::SqlDeduct | LimitKind::RedisRoundTrip => "deduct",
            };
            let measured = pgbench::run(
                database_url,
                name,
                &script,
                self.concurrency,
                self.duration,
                &workdir,
            )
            .await;
            match measured {
                Ok(figures) => {
                    let name = format!("{}, PostgreSQL, pgbench", what(kind));
                    self.limit(kind, Via::Pgbench, name, figures, None);
                }
                Err(why) => {
                    self.bar.inc(1);
                    tracing::warn!(%why, limit = ?kind, "no pgbench figure");
                    self.note(format!(
                        "{}: no pgbench figure ({why}); its goals use the same driver's",
                        what(kind)
                    ));
                }
            }
        }
        if let Err(error) = std::fs::remove_dir_all(&workdir) {
            tracing::warn!(
                %error,
                dir = %workdir.display(),
                "pgbench's scripts and logs are left behind"
            );
        }
        self.note(format!("pgbench: {version}"));
    }

    /// The deducts of `strategy` on its own deployment: distinct wallets, then the hot one,
    /// each first-time and replayed.
    async fn strategy(
        &mut self,
        strategy: WalletStrategy,
        deployment: &Deployment,
    ) -> anyhow::Result<()> {
        let (concurrency, duration) = (self.concurrency, self.duration);
        let replay_duration = duration.min(Duration::from_secs(STRATEGY_REPLAY_SECS_MAX));
        let api = self.api(deployment, Machinery::On)?;
        for wallets in [Wallets::Distinct, Wallets::Hot] {
            let operation = deduct_operation(wallets);
            scenarios::fund(&api, wallets, concurrency).await?;
            tracing::info!(
                strategy = strategy.as_str(),
                scenario = operation.label(),
                "bench: a wallet strategy's deducts"
            );
            self.step(&format!("{} · {strategy} strategy", operation.label()));
            let load = Load::Closed {
                clients: concurrency,
            };
            let (tally, deducted) = scenarios::deduct(&api, wallets, load, duration).await;
            let first_time = scenario_result(operation, Machinery::On, PathKind::FirstTime, tally);
            let tally =
                scenarios::deduct_again(&api, Arc::new(deducted), load, replay_duration).await;
            let replay = scenario_result(operation, Machinery::On, PathKind::Replay, tally);
            self.run.strategies.push(StrategyResult {
                strategy,
                operation,
                first_time,
                replay,
                limit: None,
                fraction_of_limit: None,
            });
            self.bar.inc(2);
        }
        Ok(())
    }
}

fn scenario_result(
    operation: Operation,
    machinery: Machinery,
    path: PathKind,
    tally: Tally,
) -> ScenarioResult {
    ScenarioResult {
        operation,
        machinery,
        path,
        figures: tally.figures(),
        replayed: tally.replayed,
        refused: tally.refused,
        first_error: tally.first_failure,
    }
}

fn deduct_operation(wallets: Wallets) -> Operation {
    match wallets {
        Wallets::Distinct => Operation::DeductDistinctWallets,
        Wallets::Hot => Operation::DeductHotWallet,
    }
}

/// Deletes the deployments' databases: the SQLite files, or the run's databases on the SQL
/// server.
async fn cleanup(args: &BenchArgs, urls: &[String]) {
    for url in urls {
        if let Some(path) = url.strip_prefix("sqlite://") {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        } else if let Err(error) = drop_run_database(&args.servers.database, url).await {
            tracing::warn!(%error, "the run's database is left behind");
        }
    }
}

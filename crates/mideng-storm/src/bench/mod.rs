//! `mideng bench`: what the idempotency machinery costs, next to what the machine can do,
//! measured in one run.
//!
//! Two deployments of the service ([`crate::deploy`]) run side by side on the chosen stack, each
//! with its own simulator, database and tenant: one with the machinery on (the production
//! setting: `Idempotency-Key` records on payment creation, credit and deduct, a wallet
//! operation's record completed in its own transaction), one with it off
//! ([`mideng_pay::flows::PaymentSettings::idempotency`] `= false`: no layer, no record; each
//! operation still one transaction, the ledger's one-debit-per-order constraint still there).
//! The scenarios alternate between the two, so that both see the same machine at nearly the
//! same moment. Speed is never asserted; it is reported next to a baseline of the same run.
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
//! | deduct, one hot wallet | the same, every client on one wallet (its row lock serializes them) | as above |
//!
//! A first-time scenario also ends when its inputs run out (payment creation, callbacks).
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
//! - **Limits.** One-row-insert commits on the "on" deployment's database, through the same
//!   driver, pool size (16) and write transaction as the service (`BEGIN IMMEDIATE` on
//!   SQLite), at the same concurrency; on the servers stack, Redis round trips (alternating
//!   `SET NX PX` and `GET`) through the same multiplexed client as the service, to Redis
//!   directly (the service itself goes through the deployment's in-process proxy).
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
//!   duplicate is than the work. A replay still authenticates, reads the record and (on SQL)
//!   runs a short write transaction; it never reaches the channel or the ledger.
//! - **Fraction of the database limit**: a first-time scenario's req/s divided by the
//!   one-row-insert commits/s. A request commits several transactions (payment creation with
//!   the machinery on: the record's start, the payment, its pay URL, the record's answer; off:
//!   the two in the middle; a deduct two on, one off), so a fraction near 1 / (its commits) says
//!   the database is the bottleneck, and a much lower one that the time goes elsewhere (HTTP,
//!   signatures, the channel call, locks). SQLite has one writer at a time: its commit rate
//!   does not grow with concurrency.

mod limits;
mod load;
mod report;
mod scenarios;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use mideng_pay::flows::PaymentSettings;
use mideng_sim::{MerchantKeys, SimConfig};

pub use report::{
    BenchReport, Figures, LimitResult, Machinery, Operation, PathKind, Ratio, ScenarioResult,
};

use crate::deploy::{DeployOptions, Deployment, ServerArgs, StackKind, drop_run_database};
use load::Tally;
use scenarios::{Api, Wallets};

/// `mideng bench` flags.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// The stack to deploy.
    #[arg(long, value_enum, default_value_t = StackKind::Embedded)]
    pub stack: StackKind,
    /// Concurrent clients (1 to 512).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=512))]
    pub concurrency: u16,
    /// Seconds per scenario (1 to 600); a first-time scenario ends sooner if its inputs do.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub duration_secs: u64,
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
}

impl Default for BenchArgs {
    fn default() -> Self {
        Self {
            stack: StackKind::Embedded,
            concurrency: 16,
            duration_secs: 5,
            dir: PathBuf::from(".mideng/bench"),
            servers: ServerArgs::default(),
            json: None,
        }
    }
}

/// Runs the bench: deploys twice (machinery on and off), measures the limits and every
/// scenario, stops and deletes both deployments, and returns the report (also written as JSON
/// with `--json`).
pub async fn run(
    args: BenchArgs,
    identity: (SimConfig, MerchantKeys),
) -> anyhow::Result<BenchReport> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let unix_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    let run_id = format!("bench-{unix_secs}-{:04x}", fastrand::u16(..));
    let stack = args.stack.stack(&args.dir, &args.servers);
    let options = |idempotency: bool| DeployOptions {
        stack: stack.clone(),
        instances: 1,
        tenants: 1,
        payments: PaymentSettings {
            token_required: false,
            idempotency,
            ..PaymentSettings::default()
        },
        reconcile: None,
        events: false,
        run_id: format!("{run_id}-{}", if idempotency { "on" } else { "off" }),
    };
    let config = identity.0.clone();
    let on = Deployment::start(identity.clone(), options(true))
        .await
        .context("starting the deployment with the machinery on")?;
    let off = match Deployment::start(identity, options(false)).await {
        Ok(off) => off,
        Err(error) => {
            let urls = [on.database_url.clone()];
            on.stop().await;
            cleanup(&args, &urls).await;
            return Err(error.context("starting the deployment with the machinery off"));
        }
    };
    let measured = measure(&args, &config, &run_id, stack.label(), &on, &off).await;
    let urls = [on.database_url.clone(), off.database_url.clone()];
    on.stop().await;
    off.stop().await;
    cleanup(&args, &urls).await;
    let report = measured?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// The report being filled, and how each scenario runs.
struct Bench {
    concurrency: usize,
    duration: Duration,
    report: BenchReport,
}

impl Bench {
    fn announce(&self, operation: Operation, machinery: Machinery, path: PathKind) {
        tracing::info!(
            scenario = operation.label(),
            machinery = ?machinery,
            path = ?path,
            "bench scenario"
        );
    }

    fn push(&mut self, operation: Operation, machinery: Machinery, path: PathKind, tally: Tally) {
        self.report.scenarios.push(ScenarioResult {
            operation,
            machinery,
            path,
            figures: tally.figures(),
            replayed: tally.replayed,
            refused: tally.refused,
            first_error: tally.first_failure,
        });
    }

    fn limit(&mut self, name: String, tally: Tally) {
        self.report.limits.push(LimitResult {
            name,
            figures: tally.figures(),
            first_error: tally.first_failure,
        });
    }

    fn note(&mut self, note: impl Into<String>) {
        self.report.notes.push(note.into());
    }
}

async fn measure(
    args: &BenchArgs,
    config: &SimConfig,
    run_id: &str,
    stack_label: &str,
    on: &Deployment,
    off: &Deployment,
) -> anyhow::Result<BenchReport> {
    let concurrency = usize::from(args.concurrency.clamp(1, 512));
    let duration = Duration::from_secs(args.duration_secs.clamp(1, 600));
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(concurrency)
        .build()?;
    let api = |deployment: &Deployment, machinery| -> anyhow::Result<Api> {
        let base = deployment
            .bases()
            .into_iter()
            .next()
            .context("an instance")?;
        let tenant = deployment.tenants.first().context("a tenant")?;
        Ok(Api::new(client.clone(), &base, &tenant.api_key, machinery))
    };
    let (on_api, off_api) = (api(on, Machinery::On)?, api(off, Machinery::Off)?);
    let mut bench = Bench {
        concurrency,
        duration,
        report: BenchReport {
            stack: stack_label.to_owned(),
            concurrency: args.concurrency,
            duration_secs: args.duration_secs,
            scenarios: Vec::new(),
            limits: Vec::new(),
            ratios: Vec::new(),
            goals: Vec::new(),
            notes: Vec::new(),
        },
    };

    bench.note(
        "payment creation calls the simulated channel (RSA signatures both ways), which \
         dominates its first-time cost; it sends no one-time token (token_required = false): \
         the measured layer is the Idempotency-Key record",
    );
    bench.note(
        "repeat (machinery off): the same request without a record; payment creation answers \
         the order's pending payment, a deduct is refused by the ledger's constraint",
    );
    bench.note(
        "a request commits several transactions (payment creation on: 4, off: 2; a callback: 1; \
         deduct on: 2, off: 1): read the fraction of the database limit against that",
    );
    tracing::info!("bench: the machine's limits");
    let dialect = if on.database_url.starts_with("sqlite:") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    let commits = limits::database(&on.database_url, concurrency, duration).await?;
    bench.limit(
        format!("one-row-insert commit, {dialect}, same driver"),
        commits,
    );
    if on.has_servers() {
        let round_trips = limits::redis(
            &args.servers.redis,
            &format!("mideng-bench:{run_id}"),
            concurrency,
            duration,
        )
        .await?;
        bench.limit(
            "Redis round trip (SET NX PX / GET), same client".to_owned(),
            round_trips,
        );
    } else {
        bench.note(
            "no Redis on the embedded stack (tokens and locks are in-process): no round trip \
             measured",
        );
    }

    payment_creation_and_callbacks(&mut bench, config, &on_api, &off_api).await?;
    for wallets in [Wallets::Distinct, Wallets::Hot] {
        deducts(&mut bench, wallets, &on_api, &off_api).await?;
    }

    let database_limit = bench.report.limits.first().cloned();
    bench.report.compute_ratios(database_limit.as_ref());
    Ok(bench.report)
}

async fn payment_creation_and_callbacks(
    bench: &mut Bench,
    config: &SimConfig,
    on_api: &Api,
    off_api: &Api,
) -> anyhow::Result<()> {
    let (concurrency, duration) = (bench.concurrency, bench.duration);
    tracing::info!("bench: preparing orders");
    let ((on_orders, on_prepared), (off_orders, off_prepared)) = tokio::join!(
        scenarios::prepare_orders(on_api, concurrency, duration),
        scenarios::prepare_orders(off_api, concurrency, duration),
    );
    for prepared in [&on_prepared, &off_prepared] {
        if let Some(failure) = &prepared.first_failure {
            bench.note(format!(
                "{} of {} orders could not be prepared: {failure}",
                prepared.failed,
                prepared.requests()
            ));
        }
    }

    let operation = Operation::PaymentCreation;
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let (tally, on_created) =
        scenarios::create_payments(on_api, on_orders, concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::Off, PathKind::FirstTime);
    let (tally, off_created) =
        scenarios::create_payments(off_api, off_orders, concurrency, duration).await;
    bench.push(operation, Machinery::Off, PathKind::FirstTime, tally);
    let on_created = Arc::new(on_created);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let tally =
        scenarios::create_payments_again(on_api, on_created.clone(), concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    bench.announce(operation, Machinery::Off, PathKind::Repeat);
    let tally =
        scenarios::create_payments_again(off_api, Arc::new(off_created), concurrency, duration)
            .await;
    bench.push(operation, Machinery::Off, PathKind::Repeat, tally);

    let operation = Operation::Callback;
    tracing::info!("bench: signing notifies");
    let forms = Arc::new(sign_in_parallel(config, &on_created, duration).await?);
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let tally = scenarios::callbacks(on_api, forms.clone(), false, concurrency, duration).await;
    // The first-time scenario hands out the forms in order, one per request, and may end at
    // its deadline before the last: only those sent are replays the second time.
    let sent = usize::try_from(tally.requests()).unwrap_or(usize::MAX);
    let forms = Arc::new(forms.iter().take(sent).cloned().collect::<Vec<_>>());
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let before = notify_duplicates();
    let mut tally = scenarios::callbacks(on_api, forms, true, concurrency, duration).await;
    match (before, notify_duplicates()) {
        (Some(before), Some(after)) => tally.mark_replayed(after.saturating_sub(before)),
        _ => bench.note("no metrics recorder in this process: replays of notifies are not counted"),
    }
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    bench.note(
        "callbacks: the notify path has no switch (its dedup by notify id keeps a channel's \
         retries safe); measured with the machinery on, with notifies the bench signs as the \
         channel",
    );
    Ok(())
}

/// Signs the notifies of `created` on every core, for up to `budget`.
async fn sign_in_parallel(
    config: &SimConfig,
    created: &Arc<Vec<scenarios::Created>>,
    budget: Duration,
) -> anyhow::Result<Vec<String>> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let share = created.len().div_ceil(cores).max(1);
    let signers: Vec<_> = (0..cores)
        .map(|core| {
            let (config, created) = (config.clone(), created.clone());
            tokio::task::spawn_blocking(move || {
                let start = (core * share).min(created.len());
                let end = (start + share).min(created.len());
                scenarios::sign_notifies(&config, created.get(start..end).unwrap_or(&[]), budget)
            })
        })
        .collect();
    let mut forms = Vec::with_capacity(created.len());
    for signer in signers {
        forms.extend(signer.await.context("a signing task ended")??);
    }
    Ok(forms)
}

/// Notifies the service recognised as duplicates by their dedup record, so far, in this
/// process; `None` without a metrics recorder.
fn notify_duplicates() -> Option<u64> {
    let handle = mideng_pay::app::metrics_handle()?;
    let operation = format!(
        "operation=\"{}\"",
        mideng_pay::flows::operation::NOTIFY_ALIPAY
    );
    let count = handle
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("mideng_service_decisions_total{")
                && line.contains("layer=\"dedup\"")
                && line.contains("outcome=\"duplicate\"")
                && line.contains(&operation)
        })
        // Counters render as integers; a trailing fraction would be `.0`.
        .filter_map(|line| {
            let (_, value) = line.rsplit_once(' ')?;
            value.split('.').next()?.parse::<u64>().ok()
        })
        .sum();
    Some(count)
}

async fn deducts(
    bench: &mut Bench,
    wallets: Wallets,
    on_api: &Api,
    off_api: &Api,
) -> anyhow::Result<()> {
    let (concurrency, duration) = (bench.concurrency, bench.duration);
    let operation = match wallets {
        Wallets::Distinct => Operation::DeductDistinctWallets,
        Wallets::Hot => Operation::DeductHotWallet,
    };
    scenarios::fund(on_api, wallets, concurrency).await?;
    scenarios::fund(off_api, wallets, concurrency).await?;
    bench.announce(operation, Machinery::On, PathKind::FirstTime);
    let (tally, on_deducted) = scenarios::deduct(on_api, wallets, concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::Off, PathKind::FirstTime);
    let (tally, off_deducted) = scenarios::deduct(off_api, wallets, concurrency, duration).await;
    bench.push(operation, Machinery::Off, PathKind::FirstTime, tally);
    bench.announce(operation, Machinery::On, PathKind::Replay);
    let tally = scenarios::deduct_again(on_api, Arc::new(on_deducted), concurrency, duration).await;
    bench.push(operation, Machinery::On, PathKind::Replay, tally);
    bench.announce(operation, Machinery::Off, PathKind::Repeat);
    let tally =
        scenarios::deduct_again(off_api, Arc::new(off_deducted), concurrency, duration).await;
    bench.push(operation, Machinery::Off, PathKind::Repeat, tally);
    Ok(())
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

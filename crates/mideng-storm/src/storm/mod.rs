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
//! - **refunds**: the same refund twice at once to two instances, retried after a client
//!   timeout, replayed on another instance; partial refunds racing under distinct keys past
//!   the payment's amount; the whole amount asked after a partial refund; a key reused with
//!   another amount;
//! - **reversals**: the same deduction put back twice at once, to two instances, and again
//!   long after;
//! - **callbacks**: per trade, the simulator's notify policy is normal, duplicate, concurrent,
//!   delayed, reordered or dropped (then only reconciliation finds the payment);
//! - **a success after a cancel**: the merchant cancels an order whose payment is open and
//!   the buyer pays it anyway; the charge is a refund case, refunded by reconciliation;
//! - **reconciliation overlapping callbacks**: every instance runs its reconciler every 5 s over
//!   payments pending (and refunds processing) for 3 s, and rounds by hand run at the end,
//!   until no refund is PROCESSING;
//! - **broker redelivery**: a relay or consumer killed with its instance, a broker cut off;
//! - **webhooks**: the merchant (`merchant`) answers some messages 500 and some after the
//!   dispatcher's timeout, so the service sends them again under the same `webhook-id`.
//!
//! Faults (servers stack; the embedded stack has the crash and the simulator's faults only): an
//! instance crashed mid-request and restarted, Redis cut off and back, the broker cut off and
//! back, every database connection terminated, and the simulator's faults, armed together:
//! channel answers lost after the channel applied them (`/sim/fail-next` with `apply_anyway`:
//! the next trade creation and the next refund) and the next WeChat Pay refund ending CLOSED or
//! ABNORMAL at the channel (`/sim/refund-outcome`). The replicated stack has real failovers
//! instead of the cuts: the PostgreSQL primary killed and its synchronous standby promoted, a
//! Redis Cluster master killed and its replica promoted, a NATS JetStream node killed, each
//! repaired before the next fault and at quiescence, and each of those servers crashed in place
//! and restarted (the primary into crash recovery, every Redis node with its memory lost, the
//! whole NATS cluster). With `--processes` the simulator and the instances are `mideng`
//! processes, and the instance crash is SIGKILL.
//!
//! Attacks (unless `--no-attacker`): the [`attacker`] runs beside the workload and sends
//! replayed, retargeted, polluted, wrongly signed, cross-channel and stale notifies at payments
//! the workload leaves waiting; the audit checks that none was accepted and none moved.
//!
//! A 5xx is excused only while a fault is active (and for a short grace after it); any other
//! is a violation, and so is a 500 anywhere (the service's own failure, which no fault excuses). The layer table counts, from the service's own decision counters, what each
//! layer caught.
//!
//! The modules, in the order a run goes through them:
//! - `args` — the flags ([`StormArgs`]) and the layer a run may turn off ([`BreakLayer`]);
//! - [`run`], here — deploys (or points at `--target`), starts the clients, the attacker and
//!   the fault schedule, waits for quiescence, then audits; `quiescence` — what it waits for
//!   (pending keys answered, notifies settled, reconciliation rounds and the bills, webhooks
//!   and events drained);
//! - `clients` — the state the clients share and the scripts they run, which send every
//!   source of duplicates and log what they were told; `reads` — the reader, which reads the
//!   raced wallets throughout; `history` — every attempt recorded for the audit and for
//!   `--history` (Jepsen's shape); `deducts` — the deduct script;
//! - `refunds` — the refund and reversal scripts;
//! - `merchant` — the webhook receiver every tenant registers, which fails some messages on
//!   purpose and writes down what each `webhook-id` was about;
//! - `faults` — the faults of the schedule and the clock that excuses a 5xx during one;
//!   `excuses` — which codes each kind of fault excuses, and its ceiling on unavailability;
//! - `facts` — the database's snapshot, the channel's side and the decision counters, which
//!   [`crate::audit`] checks;
//! - `sampler` — while the storm runs: the progress bar's live counters, and what each layer
//!   caught per interval, for the timeline; `latency` — the clients' latencies per operation;
//! - `report` — [`StormReport`] and its text table; `html` — the same as one HTML page with
//!   its charts (`--html`).

mod args;
pub mod attacker;
pub mod availability;
mod checkout;
mod clients;
mod deducts;
mod excuses;
mod facts;
mod faults;
mod history;
mod html;
mod latency;
mod merchant;
mod quiescence;
mod rare;
mod reads;
mod refunds;
mod report;
mod sampler;
mod workload_end;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::workers::reconcile::ReconcileSettings;
use mideng_pay::workers::webhooks::WebhookSettings;
use mideng_sim::{MerchantKeys, SimConfig};

pub use self::args::{BreakLayer, StormArgs};
use self::attacker::{AttackerKeys, BoundaryTargets};
pub(crate) use self::checkout::create_order;
pub(crate) use self::clients::{Answer, Pending, PendingKind, Shared, keyed};
use self::clients::{Log, credit, order_script};
use self::deducts::deduct_script;
use self::facts::{audit_now, layers};
use self::faults::{FAULT_KINDS, FaultClock, inject};
use self::quiescence::{
    channel_now_ms, drain_events, drain_webhooks, finish_pending, reconcile_bills,
    settle_by_reconciliation, settle_notifies,
};
use self::refunds::refund_script;
pub use self::report::{
    FaultAvailability, FaultWindow, LatencySummary, LayerSample, StormReport, Timeline,
};
use self::sampler::{Metrics, Sampler};
use self::workload_end::WorkloadEnd;
pub use crate::deploy::StackKind;
use crate::deploy::{
    CLOCK_SKEW_SECS_MAX, DeployOptions, Deployment, Processes, Stack, TenantAccess,
};

/// What each tenant's hot wallet starts with, fen: more than its deducts take in any run.
const HOT_START_FEN: i64 = 50_000_000;

/// What each tenant's lean wallet starts with, fen: about one deduct's worth, so that
/// refusals begin within the first seconds.
const LEAN_START_FEN: i64 = 2_000;

/// The lean wallet's top-ups, fen: 1 550 on average against its deducts' 2 500, so that the
/// money it gets covers only some of them.
const LEAN_TOP_UP_FEN: std::ops::Range<i64> = 100..3_000;

/// How long quiescence's reconciliation, the drains and the audit may take at most, for
/// deciding whether a payment code can expire before the audit is done.
const AUDIT_MARGIN: Duration = Duration::from_secs(300);

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
    let break_fences = args.break_layer == Some(BreakLayer::Fences);
    let async_standby = args.break_layer == Some(BreakLayer::SyncStandby);
    anyhow::ensure!(
        !async_standby || args.stack == StackKind::Replicated,
        "--break-layer sync-standby makes scripts/replicated's standby asynchronous: with \
         --stack replicated (under Patroni, Patroni decides)"
    );
    anyhow::ensure!(
        !args.processes || args.break_layer.is_none() || break_fences || async_standby,
        "--break-layer turns a layer off inside the service: not with --processes, whose \
         instances read only their configuration (but fences, a test flag of mideng serve)"
    );
    anyhow::ensure!(
        !break_fences || args.processes,
        "--break-layer fences shows what the fences hold against a process paused past its \
         leases: with --processes"
    );
    anyhow::ensure!(
        !(args.processes && external),
        "--processes starts the deployment's processes: not with --target"
    );
    anyhow::ensure!(
        args.clock_skew_secs == 0 || args.processes,
        "--clock-skew-secs skews a process's clock: with --processes"
    );
    anyhow::ensure!(
        args.clock_skew_secs.abs() <= CLOCK_SKEW_SECS_MAX,
        "--clock-skew-secs: at most {CLOCK_SKEW_SECS_MAX} either way"
    );
    let processes = if args.processes {
        let binary = match &args.binary {
            Some(binary) => binary.clone(),
            None => std::env::current_exe().context("finding this executable (--binary)")?,
        };
        Some(Processes {
            binary,
            identity_dir: args
                .identity_dir
                .clone()
                .context("--processes needs the simulator's data directory")?,
            dir: args.dir.join(format!("{run_id}-processes")),
            clock_skew_secs: args.clock_skew_secs,
            break_fences,
        })
    } else {
        None
    };
    let attacker_keys = (!args.no_attacker).then(|| AttackerKeys::of(&identity.0, &identity.1));
    // The merchant's receiver and the boundary attacker's listeners listen before the
    // deployment starts, on a deployment the storm makes: the service is told of the
    // merchant's address and the stall's as allowed webhook targets, on its default outbound
    // rule otherwise (no private targets), so the attacker meets the guard as it ships.
    let (merchant, boundary) = if external {
        (None, None)
    } else {
        let merchant = merchant::Merchant::start().await?;
        let boundary = match &attacker_keys {
            Some(_) => Some(BoundaryTargets::start().await?),
            None => None,
        };
        (Some(merchant), boundary)
    };
    let (mut deployment, bases, sim_base, tenants, database_url, stack_label) = if external {
        let tenants = args
            .tenant_key
            .iter()
            .map(|pair| {
                pair.split_once(':')
                    // A deployment the storm did not make: its publishable keys are unknown.
                    .map(|(id, key)| TenantAccess {
                        id: id.to_owned(),
                        api_key: key.to_owned(),
                        publishable_key: None,
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
        let mut stack = args.stack.stack(&args.dir, &args.servers);
        if let Stack::Replicated {
            async_standby: asynchronous,
            ..
        } = &mut stack
        {
            *asynchronous = async_standby;
        }
        let label = stack.label().to_owned();
        let mut allowed = Vec::new();
        if let Some(merchant) = &merchant {
            allowed.push(merchant.address()?);
        }
        if let Some(boundary) = &boundary {
            allowed.push(boundary.stall_address());
        }
        let mut payments = PaymentSettings {
            lock_wait: Duration::from_millis(500),
            duplicate_wait: Duration::from_millis(500),
            wallet_strategy: args.wallet_strategy,
            // The merchant's receiver and the stall listen on loopback: allowed by address and
            // port, nothing else private.
            webhook_allowed_targets: allowed,
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
                processes,
                fault_links: true,
            },
        )
        .await?;
        let (bases, sim, tenants, database) = (
            deployment.bases(),
            deployment.sim_base.clone(),
            deployment.tenants.clone(),
            deployment.database_url.clone(),
        );
        let label = if args.clock_skew_secs == 0 {
            label
        } else {
            format!(
                "{label} · instance 0's clock {:+} s off",
                args.clock_skew_secs
            )
        };
        (Some(deployment), bases, sim, tenants, database, label)
    };
    let shared = Arc::new(Shared {
        run: run_id,
        started: Instant::now(),
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
        scripts: AtomicU64::new(0),
        excused: AtomicU64::new(0),
        processes: AtomicU64::new(0),
        clock_refusals_expected: Duration::from_secs(args.clock_skew_secs.unsigned_abs())
            > mideng_pay::flows::PaymentSettings::default().clock_skew_max,
        clock_refused: AtomicU64::new(0),
        notifies_sent_back: AtomicU64::new(0),
        refusals_armed: AtomicU64::new(0),
        bills_reconciled: deployment.is_some(),
        latencies: Mutex::new(BTreeMap::new()),
        killed_metrics: Mutex::new(Vec::new()),
    });
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(args.duration_secs);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} storm {elapsed_precise} [{bar:20}] {pos}/{len} s · {prefix} · {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix("setting up");
        bar.enable_steady_tick(Duration::from_millis(250));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let metrics = match &deployment {
        Some(deployment) if deployment.runs_processes() => {
            Metrics::Listeners(deployment.metrics_bases())
        }
        Some(_) => Metrics::InProcess,
        None => Metrics::Listeners(args.target_metrics.clone()),
    };

    // The merchant registers its webhook endpoints first (a deployment the storm started).
    if let Some(merchant) = &merchant {
        merchant.register(&shared).await?;
    }

    // Every tenant's hot wallet gets money first: plenty, so that its deducts race each
    // other, not the balance. Its lean wallet gets a little, so that its deducts race the
    // top-ups and are refused when the money does not cover them. Both credits are in the
    // history: a wallet starts at 0.
    for tenant in 0..shared.tenants.len() {
        for (wallet, key, amount) in [
            (shared.hot(), "seed-credit", HOT_START_FEN),
            (shared.lean(), "seed-lean", LEAN_START_FEN),
        ] {
            let key = format!("{}-{key}-{tenant}", shared.run);
            credit(
                &shared,
                &mut fastrand::Rng::with_seed(seed),
                tenant,
                &wallet,
                &key,
                amount,
            )
            .await;
        }
    }

    // The channel's time when the workload starts: the first day whose bills are reconciled.
    let channel_start_ms = channel_now_ms(&shared).await;
    // The timeline's clock starts with the workload.
    let origin = Instant::now();
    let end = WorkloadEnd::new(origin, Duration::from_secs(args.duration_secs));
    bar.set_prefix("workload");
    let sampler = Sampler::start(
        shared.clone(),
        metrics.clone(),
        bar.clone(),
        origin,
        sampler::interval_for(args.duration_secs),
    );
    let mut clients = Vec::new();
    for client in 0..args.concurrency {
        let shared = shared.clone();
        let end = end.clone();
        let client_seed = seed ^ (u64::from(client) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(client_seed);
            while !end.passed() {
                let n = shared.scripts.fetch_add(1, Ordering::Relaxed);
                let tenant = rng.usize(..shared.tenants.len());
                match rng.u8(..100) {
                    0..52 => order_script(&shared, &mut rng, tenant, n).await,
                    // A paid payment's refunds, when one is PAID by now; else an order.
                    52..60 => {
                        if !refund_script(&shared, &mut rng, n).await {
                            order_script(&shared, &mut rng, tenant, n).await;
                        }
                    }
                    60..85 => deduct_script(&shared, &mut rng, tenant, n).await,
                    // A third of the credits top up the lean wallet, by less on average
                    // than its deducts take.
                    85..90 => {
                        let key = format!("{}-cr-{n}", shared.run);
                        let amount = rng.i64(LEAN_TOP_UP_FEN);
                        credit(&shared, &mut rng, tenant, &shared.lean(), &key, amount).await;
                    }
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

    // The reader, beside the clients for the whole workload, faults included.
    {
        let shared = shared.clone();
        let reader_seed = seed.rotate_left(23) ^ 0x4EAD_E45E_ED00;
        let end = end.clone();
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(reader_seed);
            reads::read_until(&shared, &mut rng, &end).await;
        }));
    }

    // Events no consumer can process, written into the outbox of a deployment the storm
    // started (its database is the storm's own).
    if deployment.is_some() {
        let shared = shared.clone();
        let database_url = database_url.clone();
        let end = end.clone();
        clients.push(tokio::spawn(async move {
            if let Err(error) = rare::write_poison_events(&shared, &database_url, &end).await {
                tracing::warn!(%error, "the events no consumer can process were not written");
            }
        }));
    }

    // The attacker, beside the workload for the whole run.
    if let Some(keys) = attacker_keys {
        let shared = shared.clone();
        let attacker_seed = seed.rotate_left(31) ^ 0xA77A_C4E2;
        let end = end.clone();
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(attacker_seed);
            attacker::attack_until(&shared, &keys, &mut rng, &end, leaked_channel_key).await;
        }));
    }
    // The boundary attacker beside it: private webhook targets, the page's key on secret
    // routes, a page's own moves (its price, squatted order ids, keys replayed across key
    // kinds, a burst of tokens), a stalled endpoint. Each dispatcher may hold its per-endpoint
    // limit open there.
    if let Some(boundary) = boundary.clone() {
        let shared = shared.clone();
        let boundary_seed = seed.rotate_left(43) ^ 0xB0DA_7EE5;
        let allowed = u64::try_from(
            WebhookSettings::default()
                .in_flight_per_endpoint_max
                .saturating_mul(shared.bases.len()),
        )
        .unwrap_or(u64::MAX);
        let end = end.clone();
        clients.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(boundary_seed);
            attacker::probe_until(&shared, &boundary, &mut rng, &end, allowed).await;
        }));
    }

    // The fault schedule, on the deployment (which only this task touches meanwhile).
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut fault_rng = fastrand::Rng::with_seed(seed.rotate_left(17));
    // Every kind in turn, from a seeded start: a short storm still meets each one.
    let mut fault_cycle = fault_rng.u64(..FAULT_KINDS);
    // The rounds owed: the workload goes on past its planned end (at most twice as long) until
    // every kind of this stack has run that many times.
    let owed = u64::from(args.fault_rounds).saturating_mul(faults::kinds(deployment.as_ref()));
    let mut injected: u64 = 0;
    loop {
        if args.fault_every_secs > 0 && injected < owed {
            end.hold();
        } else {
            end.release();
        }
        bar.set_length(end.at().saturating_duration_since(origin).as_secs());
        if end.passed() {
            break;
        }
        if args.fault_every_secs == 0 {
            tokio::time::sleep(Duration::from_millis(500).min(end.left())).await;
            continue;
        }
        tokio::time::sleep(Duration::from_secs(args.fault_every_secs).min(end.left())).await;
        if end.passed() {
            break;
        }
        let done = inject(deployment.as_mut(), &shared, &mut fault_rng, fault_cycle).await?;
        fault_cycle += 1;
        injected += 1;
        for kind in done {
            *faults.entry((*kind).to_owned()).or_default() += 1;
        }
    }
    if injected < owed {
        tracing::warn!(
            injected,
            owed,
            "the workload reached twice its planned length before every fault round ran"
        );
    }
    let deadline = end.at();
    bar.set_prefix("workload done: the clients' last scripts");
    for client in clients {
        let _ = client.await;
    }

    // Quiescence: everything back, pending keys answered, notifies settled, reconciliation
    // rounds until nothing changes, the outbox and the queue drained.
    let quiet = Instant::now();
    bar.set_prefix("quiescence: restarting what the faults stopped");
    if let Some(deployment) = deployment.as_mut() {
        deployment.restore_redis();
        deployment.restore_broker();
        // The replicated stack: the last failover's standby or replica brought back.
        deployment
            .repair_replicated()
            .await
            .context("repairing the replicated servers")?;
        for index in 0..deployment.instance_count() {
            deployment.restart(index).await?;
        }
    }
    bar.set_prefix("quiescence: answering pending requests");
    finish_pending(&shared).await;
    let payments: Vec<String> = shared.log().payments.iter().cloned().collect();
    bar.set_prefix("quiescence: settling notifies");
    settle_notifies(&shared, &payments).await;
    // The channel closes an unpaid code when it expires; this service closes it here once its
    // expiry and the grace have passed. The first code was made at `origin`, the last before
    // `deadline`.
    let payment_settings = PaymentSettings::default();
    let channel_expiry = payment_settings.expire_after;
    let code_expiry = channel_expiry + payment_settings.expiry_grace;
    let first_channel_expiry = origin + channel_expiry;
    let mut waited_for_expiry = false;
    if deployment.is_some() {
        // A payment nobody pays is closed by the channel itself when its code expires. One
        // that expires between the audit's reading of the database and of the channel reads as
        // closed there and pending here (seen at the end of a 80-minute storm): when a code may
        // expire around the audit, wait until the last one has (no payment is created from now
        // on), so that the rounds below close every one of them first.
        let expiry = code_expiry;
        if Instant::now() + AUDIT_MARGIN >= first_channel_expiry {
            waited_for_expiry = true;
            bar.set_prefix("quiescence: waiting for the last payment codes to expire");
            tracing::info!(
                secs = expiry.as_secs(),
                "waiting for the last payment codes to expire before reconciling"
            );
            tokio::time::sleep(expiry).await;
        }
    }
    let mut bill_reports = None;
    if let Some(deployment) = &deployment {
        bar.set_prefix("quiescence: reconciling");
        let operator = deployment.operator().clone();
        let everything = ReconcileSettings {
            min_age: Duration::ZERO,
            batch: 1000,
            interval: Duration::from_secs(1),
            tenant: None,
        };
        settle_by_reconciliation(&operator.ports, &everything).await?;
        bar.set_prefix("quiescence: draining events and webhooks");
        drain_events(&operator).await?;
        drain_webhooks(&operator).await?;
        bar.set_prefix("quiescence: parking what no consumer can process");
        rare::wait_until_parked(&shared, &database_url, Duration::from_secs(90)).await?;
        bar.set_prefix("quiescence: the channels' bills");
        let reports =
            reconcile_bills(&operator, channel_start_ms, channel_now_ms(&shared).await).await;
        if reports.iter().any(|report| report.repaired > 0) {
            // Charges only the bills told of (every notify lost, the attempt FAILED or CLOSED
            // here) became refund cases: refunded by the rounds, their events delivered.
            bar.set_prefix("quiescence: refunding what the bills found");
            settle_by_reconciliation(&operator.ports, &everything).await?;
            drain_events(&operator).await?;
            drain_webhooks(&operator).await?;
        }
        bill_reports = Some(reports);
        // The quiescence above can outlast the margin (rounds over a grown database, refunds
        // settling one round at a time): a replicated run's codes expired at the channel during
        // it and read as closed there, pending here — the last ones of a long run, the first
        // ones of a run whose workload and quiescence together came near the expiry. If any
        // code may expire at the channel before the audit has read it, wait until the last
        // one has expired here too, and reconcile once more.
        let last_expiry = deadline + code_expiry + Duration::from_secs(5);
        if !waited_for_expiry && Instant::now() + AUDIT_MARGIN >= first_channel_expiry {
            bar.set_prefix("quiescence: the last payment codes expire: reconciling again");
            tokio::time::sleep_until(last_expiry.into()).await;
            settle_by_reconciliation(&operator.ports, &everything).await?;
            drain_events(&operator).await?;
            drain_webhooks(&operator).await?;
        }
    }

    // The audit; a deployment the storm did not start is given time for its own workers
    // (reconciliation, relay, consumer) to settle, and audited again until it holds or the
    // time is up.
    let settle_until = Instant::now() + Duration::from_secs(args.settle_secs);
    bar.set_prefix("audit");
    let (mut violations, mut figures) = loop {
        let webhooks = merchant.as_ref().map(merchant::Merchant::facts);
        let audited = audit_now(&shared, &database_url, webhooks).await?;
        if deployment.is_some() || audited.0.is_empty() || Instant::now() >= settle_until {
            break audited;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    if let Some(reports) = &bill_reports {
        violations.extend(crate::audit::check_bills(reports, &mut figures));
    }
    let samples = sampler.stop().await;
    bar.finish_and_clear();
    let timeline = Timeline {
        interval_ms: faults::millis(sampler::interval_for(args.duration_secs)),
        workload_end_ms: faults::millis(deadline.saturating_duration_since(origin)),
        quiescence_start_ms: faults::millis(quiet.saturating_duration_since(origin)),
        end_ms: faults::millis(origin.elapsed()),
        samples,
        fault_windows: shared.faults.windows(origin),
    };
    let latencies = shared
        .latencies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(operation, histogram)| (operation.clone(), histogram.summary()))
        .collect();
    let availability =
        availability::availability(&shared.log().client.history, &timeline.fault_windows);
    violations.extend(
        availability
            .iter()
            .filter(|kind| kind.without_ok_max_ms > kind.without_ok_ceiling_ms)
            .map(|kind| {
                crate::audit::unavailable_too_long(
                    &kind.kind,
                    kind.without_ok_max_ms,
                    kind.without_ok_ceiling_ms,
                )
            }),
    );
    let mut metrics = metrics.render(&shared.http, Duration::from_secs(30)).await;
    // A killed process's counters died with it; what it had counted up to just before.
    for text in shared
        .killed_metrics
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        metrics.push_str(text);
        metrics.push('\n');
    }
    let layers = layers(&metrics);
    // Read after quiescence, when every paused process has long resumed and written what it
    // was going to.
    violations.extend(crate::audit::fenced_off_writes(&layers));
    let invariants = crate::audit::invariant_results(
        &violations,
        merchant.is_some(),
        !args.no_attacker,
        bill_reports.is_some(),
    );
    let duplicates = shared.log().duplicates.clone();
    let report = StormReport {
        commit: report::commit(),
        seed,
        stack: stack_label,
        instances: shared.bases.len(),
        duration_secs: deadline.saturating_duration_since(origin).as_secs(),
        quiescence_secs: quiet.elapsed().as_secs(),
        requests: shared.requests.load(Ordering::Relaxed),
        errors_during_faults: shared.excused.load(Ordering::Relaxed),
        errors_during_faults_by_kind: shared.faults.excused_by_kind(),
        clock_refusals: shared.clock_refused.load(Ordering::Relaxed),
        notifies_sent_back: shared.notifies_sent_back.load(Ordering::Relaxed),
        commit_answers_lost: deployment
            .as_ref()
            .map_or(0, crate::deploy::Deployment::commits_swallowed),
        duplicates,
        faults,
        layers,
        audit: figures,
        violations,
        broken_layer: args.break_layer,
        wallet_strategy: args
            .target
            .is_empty()
            .then(|| args.wallet_strategy.as_str().to_owned()),
        attacks: (!args.no_attacker).then(|| {
            let log = shared.log();
            let mut report = log.attacks.report();
            report.boundary = log.boundary.report();
            report
        }),
        timeline,
        availability,
        latencies,
        invariants,
    };
    if let Some(deployment) = deployment {
        deployment.stop().await;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, report.html())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.history {
        let lines = crate::audit::jepsen::lines(&shared.log().client.operations);
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

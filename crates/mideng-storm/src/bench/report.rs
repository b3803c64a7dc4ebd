//! The bench's report: per concurrency, one row per scenario, per limit and per wallet
//! strategy, then the ratios and the goals; and a plain-text table of it all (its HTML page is
//! in `html`).

use mideng_pay::domain::wallet::WalletStrategy;
use serde::Serialize;

mod table;

/// Throughput and latency of one measured run.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Requests (or operations) answered, failed ones included.
    pub requests: u64,
    /// Failed ones: answers the scenario does not expect, transport errors.
    pub errors: u64,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Requests per second: `requests / seconds`.
    pub per_second: f64,
    /// Median latency as the client saw it, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// CPU time per request of the service, the bench's clients (for pgbench's figures,
    /// pgbench), the database and Redis ([`super::cpu`]); none where the kernel's accounting
    /// is unreadable.
    pub cpu: Option<super::cpu::CpuPerRequest>,
}

/// An operation of the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `POST /v1/orders/{id}/payments`.
    PaymentCreation,
    /// `POST /v1/channels/alipay/notify` with a signed `TRADE_SUCCESS`.
    Callback,
    /// `POST /v1/wallets/{user}/deduct`, each client on a wallet of its own.
    DeductDistinctWallets,
    /// `POST /v1/wallets/{user}/deduct`, every client on the same wallet.
    DeductHotWallet,
}

impl Operation {
    /// Every operation, in report order.
    pub const ALL: [Operation; 4] = [
        Operation::PaymentCreation,
        Operation::Callback,
        Operation::DeductDistinctWallets,
        Operation::DeductHotWallet,
    ];

    /// The two deducts, in report order.
    pub const DEDUCTS: [Operation; 2] =
        [Operation::DeductDistinctWallets, Operation::DeductHotWallet];

    /// How the table names it.
    pub fn label(self) -> &'static str {
        match self {
            Operation::PaymentCreation => "payment creation",
            Operation::Callback => "callback (Alipay notify)",
            Operation::DeductDistinctWallets => "deduct, distinct wallets",
            Operation::DeductHotWallet => "deduct, one hot wallet",
        }
    }
}

/// Whether the idempotency machinery ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Machinery {
    /// Keys and records on the money routes (the production setting).
    On,
    /// `PaymentSettings::idempotency = false`: no layer, no record.
    Off,
}

impl Machinery {
    pub(super) fn label(self) -> &'static str {
        match self {
            Machinery::On => "on",
            Machinery::Off => "off",
        }
    }
}

/// Which path of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathKind {
    /// Every request new: the work is done.
    FirstTime,
    /// Requests sent before, again, with the machinery on: answered from the record.
    Replay,
    /// Requests sent before, again, with the machinery off: no record, the service's own
    /// checks answer (the order's pending payment; the ledger constraint's 409).
    Repeat,
}

impl PathKind {
    pub(super) fn label(self) -> &'static str {
        match self {
            PathKind::FirstTime => "first-time",
            PathKind::Replay => "replay",
            PathKind::Repeat => "repeat",
        }
    }
}

/// One scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// The operation.
    pub operation: Operation,
    /// Machinery on or off.
    pub machinery: Machinery,
    /// First-time, replay or repeat.
    pub path: PathKind,
    /// Throughput and latency.
    #[serde(flatten)]
    pub figures: Figures,
    /// Answers marked as replays (`Idempotent-Replayed: true`; for notifies, the service's
    /// dedup counter).
    pub replayed: u64,
    /// Expected refusals (a repeated deduct's 409 `already-deducted`).
    pub refused: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
}

/// A scenario sent again on a fixed schedule (the open loop, `--open-loop-percent`): the
/// latency a client sees at a load the service carries, each request's counted from when it
/// was due, so that a slow answer delays no later measurement.
#[derive(Clone, Debug, Serialize)]
pub struct OpenLoopResult {
    /// The operation.
    pub operation: Operation,
    /// Machinery on or off.
    pub machinery: Machinery,
    /// First-time or replay.
    pub path: PathKind,
    /// What the same scenario's closed loop reached in this run, requests a second.
    pub closed_per_second: f64,
    /// The rate offered: `--open-loop-percent` of `closed_per_second`.
    pub offered_per_second: f64,
    /// What was answered, the latency's median and 99th percentile, and the CPU per request.
    #[serde(flatten)]
    pub figures: Figures,
    /// 99.9th percentile latency, milliseconds.
    pub p999_ms: f64,
    /// The slowest request, milliseconds.
    pub max_ms: f64,
    /// Answers marked as replays (`Idempotent-Replayed: true`).
    pub replayed: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
}

/// What a limit measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// One transaction inserting one row, committed.
    OneRowInsert,
    /// `UPDATE … SET balance = balance - 1 WHERE id = 1 AND balance >= 1`, every client on that
    /// one row, one commit per update.
    HotRowUpdate,
    /// A deduct done by SQL alone, each client on a row of its own: a record-like row
    /// inserted, the balance decremented if it suffices, a ledger row inserted; one commit.
    SqlDeduct,
    /// A Redis `SET NX PX` or `GET`.
    RedisRoundTrip,
}

/// How a limit was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// Through the same driver, pool size and transaction shape (or Redis client) as the
    /// service.
    SameDriver,
    /// With PostgreSQL's own load generator, `pgbench` (prepared statements, one connection
    /// per client, each statement its own transaction).
    Pgbench,
}

/// One of the machine's limits, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct LimitResult {
    /// What was measured, in words.
    pub name: String,
    /// What was measured.
    pub kind: LimitKind,
    /// How.
    pub via: Via,
    /// Operations per second and latency.
    #[serde(flatten)]
    pub figures: Figures,
    /// The first error, if any.
    pub first_error: Option<String>,
}

/// The deducts of one wallet strategy on one kind of wallet, machinery on.
#[derive(Clone, Debug, Serialize)]
pub struct StrategyResult {
    /// The strategy the deployment ran.
    pub strategy: WalletStrategy,
    /// Distinct wallets or one hot wallet.
    pub operation: Operation,
    /// Every deduct new.
    pub first_time: ScenarioResult,
    /// The same deducts again, answered from their records. It runs briefly
    /// ([`crate::bench::STRATEGY_REPLAY_SECS_MAX`]), mostly before the in-process cache of
    /// answers fills: a check that the deployment replays, not a speed to compare.
    pub replay: ScenarioResult,
    /// The limit the first-time throughput is divided by: the SQL deduct for distinct wallets,
    /// the hot-row update for the hot one (pgbench's when measured, else the same driver's).
    pub limit: Option<String>,
    /// First-time req/s over that limit's ops/s.
    pub fraction_of_limit: Option<f64>,
}

/// A ratio between two rows.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// What it compares.
    pub name: String,
    /// The ratio.
    pub value: f64,
    /// The figures it comes from.
    pub detail: String,
}

/// Which of the money path's goals (issue 15's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalKind {
    /// The first-time deduct (distinct wallets) over the same deduct done by SQL alone through
    /// the bench's own client (the same driver and pool as the service).
    DeductVsSqlDeduct,
    /// The first-time deduct over the same deduct done by SQL alone by pgbench (when measured).
    DeductVsSqlDeductPgbench,
    /// The first-time deduct over one-row-insert commits (pgbench's when measured).
    DeductVsInsertCommit,
    /// The first-time deduct over the same driver's one-row-insert commits, beside pgbench's.
    DeductVsInsertCommitSameDriver,
    /// The first-time deduct with the machinery on over off.
    DeductOnOff,
    /// The first-time deduct on one hot wallet over the hot-row conditional update.
    HotDeductVsHotRowUpdate,
    /// The deduct's replay over its first time.
    ReplayVsFirstTime,
    /// The deduct's replay over a Redis round trip.
    ReplayVsRedis,
    /// Payment creation with the machinery on over off.
    PaymentCreationOnOff,
    /// The first-time deduct with group commit (its wallet strategy's deployment, distinct
    /// wallets) over the same deduct done by SQL alone by pgbench, one commit each.
    GroupCommitVsSqlDeductPgbench,
    /// The first-time deduct on one hot wallet with group commit over pgbench's hot-row
    /// update.
    GroupCommitHotVsHotRowUpdate,
}

/// One of the money path's speed goals, as this run measured it: a ratio against a baseline
/// measured in the same run, and the value it should reach.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// Which goal.
    pub kind: GoalKind,
    /// What it compares.
    pub name: String,
    /// The ratio measured.
    pub value: f64,
    /// The value it should reach (at least).
    pub goal: f64,
    /// Whether it did.
    pub met: bool,
    /// The figures it comes from: what was divided by what.
    pub detail: String,
}

/// Everything measured at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRun {
    /// Concurrent clients (and pgbench clients).
    pub concurrency: u16,
    /// The scenarios of the two deployments (machinery on and off, the default wallet
    /// strategy), in the order they ran.
    pub scenarios: Vec<ScenarioResult>,
    /// The machine's limits.
    pub limits: Vec<LimitResult>,
    /// The open loop's scenarios, in the order they ran (none with `--open-loop-percent 0`).
    pub open_loop: Vec<OpenLoopResult>,
    /// The deducts of each wallet strategy, distinct wallets then the hot one.
    pub strategies: Vec<StrategyResult>,
    /// The strategy with the most first-time deducts per second on distinct wallets.
    pub fastest_on_distinct_wallets: Option<WalletStrategy>,
    /// The strategy with the most first-time deducts per second on the hot wallet.
    pub fastest_on_hot_wallet: Option<WalletStrategy>,
    /// Layer overhead, replay speed-up, fraction of the database limit, driver over pgbench.
    pub ratios: Vec<Ratio>,
    /// The money path's goals, each on its own line (those this stack can measure).
    pub goals: Vec<Goal>,
    /// What was skipped or is worth knowing at this concurrency.
    pub notes: Vec<String>,
}

/// Everything `mideng bench` measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The stack.
    pub stack: String,
    /// Seconds per scenario (at most: a first-time scenario ends when its inputs do).
    pub duration_secs: u64,
    /// The open loop's offered load, per cent of the closed loop's throughput (0: none).
    pub open_loop_percent: u8,
    /// The concurrencies, in the order they ran.
    pub concurrency: Vec<u16>,
    /// The wallet strategies benched.
    pub wallet_strategies: Vec<WalletStrategy>,
    /// One run per concurrency.
    pub runs: Vec<BenchRun>,
    /// Resident memory of this process (clients and the in-process service) before, at the
    /// peak of and after the runs; `None` where `/proc` is not.
    pub memory: Option<super::memory::Resident>,
    /// What is worth knowing to read the figures.
    pub notes: Vec<String>,
}

impl BenchRun {
    /// An empty run at `concurrency`.
    pub(super) fn new(concurrency: u16) -> Self {
        Self {
            concurrency,
            scenarios: Vec::new(),
            limits: Vec::new(),
            open_loop: Vec::new(),
            strategies: Vec::new(),
            fastest_on_distinct_wallets: None,
            fastest_on_hot_wallet: None,
            ratios: Vec::new(),
            goals: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The scenario of `operation` with `machinery` on `path`.
    pub fn scenario(
        &self,
        operation: Operation,
        machinery: Machinery,
        path: PathKind,
    ) -> Option<&ScenarioResult> {
        self.scenarios.iter().find(|scenario| {
            scenario.operation == operation
                && scenario.machinery == machinery
                && scenario.path == path
        })
    }

    /// The limit of `kind` measured `via`.
    pub fn limit(&self, kind: LimitKind, via: Via) -> Option<&LimitResult> {
        self.limits
            .iter()
            .find(|limit| limit.kind == kind && limit.via == via)
    }

    /// The goal of `kind`, when this run could measure it.
    pub fn goal(&self, kind: GoalKind) -> Option<&Goal> {
        self.goals.iter().find(|goal| goal.kind == kind)
    }

    /// The strategy's deducts on distinct wallets or the hot one.
    pub fn strategy(
        &self,
        strategy: WalletStrategy,
        operation: Operation,
    ) -> Option<&StrategyResult> {
        self.strategies
            .iter()
            .find(|row| row.strategy == strategy && row.operation == operation)
    }

    /// The baseline of a goal or a fraction: pgbench's figure when it was measured, else the
    /// same driver's; and whether it fell back.
    fn baseline(&self, kind: LimitKind) -> Option<(&LimitResult, bool)> {
        let clean = |via| {
            self.limit(kind, via)
                .filter(|limit| limit.figures.errors == 0)
        };
        clean(Via::Pgbench)
            .map(|limit| (limit, false))
            .or_else(|| clean(Via::SameDriver).map(|limit| (limit, true)))
    }

    /// The limit a deduct's first-time throughput is read against: the SQL deduct for
    /// distinct wallets, the hot-row update for the hot one.
    fn deduct_baseline(&self, operation: Operation) -> Option<(&LimitResult, bool)> {
        match operation {
            Operation::DeductHotWallet => self.baseline(LimitKind::HotRowUpdate),
            _ => self.baseline(LimitKind::SqlDeduct),
        }
    }

    /// Computes the ratios, each strategy's fraction of its limit, the fastest strategies and
    /// the goals from the scenarios and the limits.
    pub(super) fn compute(&mut self) {
        self.ratios = self.compute_ratios();
        let fractions: Vec<(Option<String>, Option<f64>)> = self
            .strategies
            .iter()
            .map(|row| match self.deduct_baseline(row.operation) {
                Some((limit, _)) => (
                    Some(limit.name.clone()),
                    divide(row.first_time.figures.per_second, limit.figures.per_second),
                ),
                None => (None, None),
            })
            .collect();
        for (row, (limit, fraction)) in self.strategies.iter_mut().zip(fractions) {
            row.limit = limit;
            row.fraction_of_limit = fraction;
        }
        self.fastest_on_distinct_wallets = self.fastest(Operation::DeductDistinctWallets);
        self.fastest_on_hot_wallet = self.fastest(Operation::DeductHotWallet);
        self.goals = self.compute_goals();
    }

    /// The strategy whose first-time deducts on `operation`'s wallets went fastest, without
    /// errors.
    fn fastest(&self, operation: Operation) -> Option<WalletStrategy> {
        self.strategies
            .iter()
            .filter(|row| row.operation == operation && row.first_time.figures.errors == 0)
            .filter(|row| row.first_time.figures.per_second > 0.0)
            .max_by(|left, right| {
                left.first_time
                    .figures
                    .per_second
                    .total_cmp(&right.first_time.figures.per_second)
            })
            .map(|row| row.strategy)
    }

    fn compute_ratios(&self) -> Vec<Ratio> {
        let mut ratios = Vec::new();
        let first = |operation, machinery| {
            self.scenario(operation, machinery, PathKind::FirstTime)
                .map(|scenario| &scenario.figures)
        };
        for operation in Operation::ALL {
            if let (Some(on), Some(off)) = (
                first(operation, Machinery::On),
                first(operation, Machinery::Off),
            ) {
                if let Some(value) = divide(on.per_second, off.per_second) {
                    ratios.push(Ratio {
                        name: format!(
                            "layer overhead, {}: first-time throughput on / off",
                            operation.label()
                        ),
                        value,
                        detail: format!("{:.1} / {:.1} req/s", on.per_second, off.per_second),
                    });
                }
                if let Some(value) = divide(on.p50_ms, off.p50_ms) {
                    ratios.push(Ratio {
                        name: format!(
                            "layer overhead, {}: first-time p50 on / off",
                            operation.label()
                        ),
                        value,
                        detail: format!(
                            "{:.2} / {:.2} ms ({:+.2} ms)",
                            on.p50_ms,
                            off.p50_ms,
                            on.p50_ms - off.p50_ms
                        ),
                    });
                }
            }
        }
        for operation in Operation::ALL {
            let replay = self
                .scenario(operation, Machinery::On, PathKind::Replay)
                .map(|scenario| &scenario.figures);
            if let (Some(first), Some(replay)) = (first(operation, Machinery::On), replay) {
                if let Some(value) = divide(replay.per_second, first.per_second) {
                    ratios.push(Ratio {
                        name: format!(
                            "replay speed-up, {}: throughput replay / first-time",
                            operation.label()
                        ),
                        value,
                        detail: format!("{:.1} / {:.1} req/s", replay.per_second, first.per_second),
                    });
                }
                if let Some(value) = divide(first.p50_ms, replay.p50_ms) {
                    ratios.push(Ratio {
                        name: format!(
                            "replay speed-up, {}: p50 first-time / replay",
                            operation.label()
                        ),
                        value,
                        detail: format!("{:.2} / {:.2} ms", first.p50_ms, replay.p50_ms),
                    });
                }
            }
        }
        if let Some(limit) = self.limit(LimitKind::OneRowInsert, Via::SameDriver) {
            for scenario in &self.scenarios {
                if scenario.path != PathKind::FirstTime {
                    continue;
                }
                if let Some(value) = divide(scenario.figures.per_second, limit.figures.per_second) {
                    ratios.push(Ratio {
                        name: format!(
                            "fraction of the database limit, {} ({})",
                            scenario.operation.label(),
                            scenario.machinery.label()
                        ),
                        value,
                        detail: format!(
                            "{:.1} req/s / {:.1} one-row commits/s (same driver)",
                            scenario.figures.per_second, limit.figures.per_second
                        ),
                    });
                }
            }
        }
        for kind in [
            LimitKind::OneRowInsert,
            LimitKind::HotRowUpdate,
            LimitKind::SqlDeduct,
        ] {
            let (Some(driver), Some(pgbench)) = (
                self.limit(kind, Via::SameDriver),
                self.limit(kind, Via::Pgbench),
            ) else {
                continue;
            };
            if let Some(value) = divide(driver.figures.per_second, pgbench.figures.per_second) {
                ratios.push(Ratio {
                    name: format!(
                        "driver and pool, {}: same driver / pgbench",
                        kind_label(kind)
                    ),
                    value,
                    detail: format!(
                        "{:.1} / {:.1} ops/s",
                        driver.figures.per_second, pgbench.figures.per_second
                    ),
                });
            }
        }
        ratios
    }

    /// The money path's goals (issue 33's targets), each against a baseline of this run: the
    /// same deduct by SQL alone through the bench's own client and, where measured, by
    /// pgbench; pgbench's figures for the other limits where measured (else the same
    /// driver's, and the detail says so),
    /// the same deduct without the machinery, its own first time, a Redis round trip (servers
    /// only). The deduct figures are the main "on" deployment's, which runs the default wallet
    /// strategy.
    fn compute_goals(&self) -> Vec<Goal> {
        // Each side of a ratio: what it is, its rate, and the rate's unit.
        let scenario = |operation, machinery, path| {
            self.scenario(operation, machinery, path)
                .filter(|scenario| scenario.figures.errors == 0)
                .map(|scenario| {
                    (
                        operation_name(scenario),
                        scenario.figures.per_second,
                        "req/s",
                    )
                })
        };
        let deduct = Operation::DeductDistinctWallets;
        let deduct_on = scenario(deduct, Machinery::On, PathKind::FirstTime);
        let deduct_off = scenario(deduct, Machinery::Off, PathKind::FirstTime);
        let deduct_replay = scenario(deduct, Machinery::On, PathKind::Replay);
        let hot_on = scenario(
            Operation::DeductHotWallet,
            Machinery::On,
            PathKind::FirstTime,
        );
        let creation_on = scenario(
            Operation::PaymentCreation,
            Machinery::On,
            PathKind::FirstTime,
        );
        let creation_off = scenario(
            Operation::PaymentCreation,
            Machinery::Off,
            PathKind::FirstTime,
        );
        // A limit as a baseline: its name, its rate, and why it is the same driver's when
        // pgbench's was wanted.
        let limit = |found: Option<(&LimitResult, bool)>| {
            found.map(|(limit, fell_back)| {
                let name = if fell_back {
                    format!("{}; no pgbench figure in this run", limit.name)
                } else {
                    limit.name.clone()
                };
                (name, limit.figures.per_second, "ops/s")
            })
        };
        let same_driver = |kind| {
            self.limit(kind, Via::SameDriver)
                .filter(|limit| limit.figures.errors == 0)
                .map(|limit| (limit.name.clone(), limit.figures.per_second, "ops/s"))
        };
        let group_commit = |operation| {
            self.strategy(WalletStrategy::GroupCommit, operation)
                .filter(|row| row.first_time.figures.errors == 0)
                .map(|row| {
                    (
                        format!("{}, group-commit strategy", operation_name(&row.first_time)),
                        row.first_time.figures.per_second,
                        "req/s",
                    )
                })
        };
        let pgbench = |kind| {
            self.limit(kind, Via::Pgbench)
                .filter(|limit| limit.figures.errors == 0)
                .map(|limit| (limit.name.clone(), limit.figures.per_second, "ops/s"))
        };
        let insert_pgbench_measured = self.limit(LimitKind::OneRowInsert, Via::Pgbench).is_some();
        let candidates = [
            (
                GoalKind::DeductVsSqlDeduct,
                "deduct, distinct wallets, first-time (on) / the same deduct by SQL alone, same driver",
                deduct_on.clone(),
                same_driver(LimitKind::SqlDeduct),
                0.8,
            ),
            (
                GoalKind::DeductVsSqlDeductPgbench,
                "deduct, distinct wallets, first-time (on) / the same deduct by SQL alone, pgbench",
                deduct_on.clone(),
                pgbench(LimitKind::SqlDeduct),
                0.5,
            ),
            (
                GoalKind::DeductVsInsertCommit,
                "deduct, distinct wallets, first-time (on) / one-row-insert commits",
                deduct_on.clone(),
                limit(self.baseline(LimitKind::OneRowInsert)),
                0.5,
            ),
            (
                GoalKind::DeductVsInsertCommitSameDriver,
                "deduct, distinct wallets, first-time (on) / one-row-insert commits, same driver",
                deduct_on.clone().filter(|_| insert_pgbench_measured),
                same_driver(LimitKind::OneRowInsert),
                0.5,
            ),
            (
                GoalKind::DeductOnOff,
                "deduct, distinct wallets, first-time, machinery on / off",
                deduct_on.clone(),
                deduct_off,
                0.9,
            ),
            (
                GoalKind::HotDeductVsHotRowUpdate,
                "deduct, one hot wallet, first-time (on) / hot-row conditional UPDATE",
                hot_on,
                limit(self.baseline(LimitKind::HotRowUpdate)),
                0.7,
            ),
            (
                GoalKind::ReplayVsFirstTime,
                "deduct, distinct wallets, replay / first-time",
                deduct_replay.clone(),
                deduct_on,
                10.0,
            ),
            (
                GoalKind::ReplayVsRedis,
                "deduct, distinct wallets, replay / Redis round trip",
                deduct_replay,
                same_driver(LimitKind::RedisRoundTrip),
                0.5,
            ),
            (
                GoalKind::PaymentCreationOnOff,
                "payment creation, first-time, machinery on / off",
                creation_on,
                creation_off,
                0.95,
            ),
            (
                GoalKind::GroupCommitVsSqlDeductPgbench,
                "deduct, distinct wallets, first-time, group commit / the same deduct by SQL alone, pgbench",
                group_commit(Operation::DeductDistinctWallets),
                pgbench(LimitKind::SqlDeduct),
                1.0,
            ),
            (
                GoalKind::GroupCommitHotVsHotRowUpdate,
                "deduct, one hot wallet, first-time, group commit / hot-row conditional UPDATE, pgbench",
                group_commit(Operation::DeductHotWallet),
                pgbench(LimitKind::HotRowUpdate),
                0.7,
            ),
        ];
        candidates
            .into_iter()
            .filter_map(|(kind, name, numerator, denominator, goal)| {
                let (
                    (numerator_name, numerator, numerator_unit),
                    (denominator_name, denominator, denominator_unit),
                ) = (numerator?, denominator?);
                let value = divide(numerator, denominator)?;
                Some(Goal {
                    kind,
                    name: name.to_owned(),
                    value,
                    goal,
                    met: value >= goal,
                    detail: format!(
                        "{numerator:.1} {numerator_unit} ({numerator_name}) / {denominator:.1} \
                         {denominator_unit} ({denominator_name})"
                    ),
                })
            })
            .collect()
    }
}

/// A scenario in words, as a goal's detail names it.
fn operation_name(scenario: &ScenarioResult) -> String {
    format!(
        "{}, {}, machinery {}",
        scenario.operation.label(),
        scenario.path.label(),
        scenario.machinery.label()
    )
}

fn kind_label(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::OneRowInsert => "one-row-insert commit",
        LimitKind::HotRowUpdate => "hot-row conditional UPDATE",
        LimitKind::SqlDeduct => "SQL deduct",
        LimitKind::RedisRoundTrip => "Redis round trip",
    }
}

/// `numerator / denominator`, when both are positive.
fn divide(numerator: f64, denominator: f64) -> Option<f64> {
    (numerator > 0.0 && denominator > 0.0).then(|| numerator / denominator)
}

#[cfg(test)]
mod tests;

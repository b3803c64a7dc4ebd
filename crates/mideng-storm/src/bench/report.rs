//! The bench's report: one row per scenario and per limit, the ratios, and a plain-text table.

use std::fmt::Write as _;

use serde::Serialize;

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
    fn label(self) -> &'static str {
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
    fn label(self) -> &'static str {
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

/// One of the machine's limits, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct LimitResult {
    /// What was measured.
    pub name: String,
    /// Operations per second and latency.
    #[serde(flatten)]
    pub figures: Figures,
    /// The first error, if any.
    pub first_error: Option<String>,
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

/// One of the money path's speed goals, as this run measured it: a ratio against a baseline
/// measured in the same run, and the value it should reach.
#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    /// What it compares.
    pub name: String,
    /// The ratio measured.
    pub value: f64,
    /// The value it should reach (at least).
    pub goal: f64,
    /// Whether it did.
    pub met: bool,
    /// The figures it comes from.
    pub detail: String,
}

/// Everything `mideng bench` measured.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The stack.
    pub stack: String,
    /// Concurrent clients.
    pub concurrency: u16,
    /// Seconds per scenario (at most: a first-time scenario ends when its inputs do).
    pub duration_secs: u64,
    /// The scenarios, in the order they ran.
    pub scenarios: Vec<ScenarioResult>,
    /// The machine's limits.
    pub limits: Vec<LimitResult>,
    /// Layer overhead, replay speed-up, fraction of the database limit.
    pub ratios: Vec<Ratio>,
    /// The money path's goals, each on its own line (those this stack can measure).
    pub goals: Vec<Goal>,
    /// What was skipped or is worth knowing to read the figures.
    pub notes: Vec<String>,
}

impl BenchReport {
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

    /// Computes the ratios from the scenarios and the limits.
    pub(super) fn compute_ratios(&mut self, database_limit: Option<&LimitResult>) {
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
        if let Some(limit) = database_limit {
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
                            "{:.1} req/s / {:.1} one-row commits/s",
                            scenario.figures.per_second, limit.figures.per_second
                        ),
                    });
                }
            }
        }
        self.ratios = ratios;
        self.goals = self.compute_goals(database_limit);
    }

    /// The money path's goals: the first-time deduct against the same-driver commit rate and
    /// against itself without the machinery, payment creation with and without it, and the
    /// replay against the first-time deduct and against a Redis round trip (servers only).
    fn compute_goals(&self, database_limit: Option<&LimitResult>) -> Vec<Goal> {
        let figures = |operation, machinery, path| {
            self.scenario(operation, machinery, path)
                .map(|scenario| scenario.figures.per_second)
        };
        let deduct = Operation::DeductDistinctWallets;
        let deduct_on = figures(deduct, Machinery::On, PathKind::FirstTime);
        let deduct_off = figures(deduct, Machinery::Off, PathKind::FirstTime);
        let deduct_replay = figures(deduct, Machinery::On, PathKind::Replay);
        let creation_on = figures(
            Operation::PaymentCreation,
            Machinery::On,
            PathKind::FirstTime,
        );
        let creation_off = figures(
            Operation::PaymentCreation,
            Machinery::Off,
            PathKind::FirstTime,
        );
        let commits = database_limit.map(|limit| limit.figures.per_second);
        let redis = self
            .limits
            .iter()
            .find(|limit| limit.name.starts_with("Redis round trip"))
            .map(|limit| limit.figures.per_second);
        let candidates = [
            (
                "deduct, distinct wallets, first-time (on) / one-row-insert commits",
                deduct_on,
                commits,
                0.5,
                "req/s / commits/s",
            ),
            (
                "deduct, distinct wallets, first-time, machinery on / off",
                deduct_on,
                deduct_off,
                0.9,
                "req/s / req/s",
            ),
            (
                "payment creation, first-time, machinery on / off",
                creation_on,
                creation_off,
                0.95,
                "req/s / req/s",
            ),
            (
                "deduct, distinct wallets, replay / first-time",
                deduct_replay,
                deduct_on,
                10.0,
                "req/s / req/s",
            ),
            (
                "deduct, distinct wallets, replay / Redis round trip",
                deduct_replay,
                redis,
                0.3,
                "req/s / round trips/s",
            ),
        ];
        candidates
            .into_iter()
            .filter_map(|(name, numerator, denominator, goal, unit)| {
                let (numerator, denominator) = (numerator?, denominator?);
                let value = divide(numerator, denominator)?;
                Some(Goal {
                    name: name.to_owned(),
                    value,
                    goal,
                    met: value >= goal,
                    detail: format!("{numerator:.1} / {denominator:.1} {unit}"),
                })
            })
            .collect()
    }

    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "mideng bench: {}, {} concurrent clients, up to {} s per scenario",
            self.stack, self.concurrency, self.duration_secs
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<26} {:<4} {:<10} {:>9} {:>6} {:>9} {:>7} {:>10} {:>9} {:>9}",
            "scenario",
            "idem",
            "path",
            "requests",
            "errors",
            "replayed",
            "refused",
            "req/s",
            "p50 ms",
            "p99 ms"
        );
        for scenario in &self.scenarios {
            let figures = &scenario.figures;
            let _ = writeln!(
                out,
                "{:<26} {:<4} {:<10} {:>9} {:>6} {:>9} {:>7} {:>10.1} {:>9.2} {:>9.2}",
                scenario.operation.label(),
                scenario.machinery.label(),
                scenario.path.label(),
                figures.requests,
                figures.errors,
                scenario.replayed,
                scenario.refused,
                figures.per_second,
                figures.p50_ms,
                figures.p99_ms
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<51} {:>9} {:>6} {:>10} {:>9} {:>9}",
            "machine limit", "ops", "errors", "ops/s", "p50 ms", "p99 ms"
        );
        for limit in &self.limits {
            let figures = &limit.figures;
            let _ = writeln!(
                out,
                "{:<51} {:>9} {:>6} {:>10.1} {:>9.2} {:>9.2}",
                limit.name,
                figures.requests,
                figures.errors,
                figures.per_second,
                figures.p50_ms,
                figures.p99_ms
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "ratios");
        for ratio in &self.ratios {
            let _ = writeln!(
                out,
                "  {:<75} {:>7.3}  ({})",
                ratio.name, ratio.value, ratio.detail
            );
        }
        if !self.goals.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "goals");
            for goal in &self.goals {
                let _ = writeln!(
                    out,
                    "  {:<63} {:>7.3}  goal {:>5.2}  {}  ({})",
                    goal.name,
                    goal.value,
                    goal.goal,
                    if goal.met { "met    " } else { "not met" },
                    goal.detail
                );
            }
        }
        let failures: Vec<String> = self
            .scenarios
            .iter()
            .filter_map(|scenario| {
                scenario.first_error.as_ref().map(|error| {
                    format!(
                        "{} ({}, {}): {error}",
                        scenario.operation.label(),
                        scenario.machinery.label(),
                        scenario.path.label()
                    )
                })
            })
            .chain(self.limits.iter().filter_map(|limit| {
                limit
                    .first_error
                    .as_ref()
                    .map(|error| format!("{}: {error}", limit.name))
            }))
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "first errors");
            for failure in failures {
                let _ = writeln!(out, "  {failure}");
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "notes");
            for note in &self.notes {
                let _ = writeln!(out, "  - {note}");
            }
        }
        out
    }
}

/// `numerator / denominator`, when both are positive.
fn divide(numerator: f64, denominator: f64) -> Option<f64> {
    (numerator > 0.0 && denominator > 0.0).then(|| numerator / denominator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(per_second: f64) -> Figures {
        Figures {
            requests: 100,
            errors: 0,
            seconds: 1.0,
            per_second,
            p50_ms: 1.0,
            p99_ms: 2.0,
        }
    }

    fn scenario(
        operation: Operation,
        machinery: Machinery,
        path: PathKind,
        rate: f64,
    ) -> ScenarioResult {
        ScenarioResult {
            operation,
            machinery,
            path,
            figures: figures(rate),
            replayed: 0,
            refused: 0,
            first_error: None,
        }
    }

    fn limit(name: &str, rate: f64) -> LimitResult {
        LimitResult {
            name: name.to_owned(),
            figures: figures(rate),
            first_error: None,
        }
    }

    #[test]
    fn each_goal_is_its_ratio_against_the_same_run_and_says_whether_it_is_met() {
        use Machinery::{Off, On};
        use Operation::{DeductDistinctWallets as Deduct, PaymentCreation as Creation};
        use PathKind::{FirstTime, Replay};
        let mut report = BenchReport {
            stack: "servers".to_owned(),
            concurrency: 16,
            duration_secs: 5,
            scenarios: vec![
                scenario(Creation, On, FirstTime, 96.0),
                scenario(Creation, Off, FirstTime, 100.0),
                scenario(Deduct, On, FirstTime, 1_000.0),
                scenario(Deduct, Off, FirstTime, 2_000.0),
                scenario(Deduct, On, Replay, 12_000.0),
            ],
            limits: vec![
                limit("one-row-insert commit, PostgreSQL, same driver", 4_000.0),
                limit("Redis round trip (SET NX PX / GET), same client", 100_000.0),
            ],
            ratios: Vec::new(),
            goals: Vec::new(),
            notes: Vec::new(),
        };
        let commits = report.limits[0].clone();
        report.compute_ratios(Some(&commits));
        let goal = |name: &str| {
            report
                .goals
                .iter()
                .find(|goal| goal.name.starts_with(name))
                .map(|goal| (goal.value, goal.met))
        };
        assert_eq!(
            goal("deduct, distinct wallets, first-time (on) /"),
            Some((0.25, false))
        );
        assert_eq!(
            goal("deduct, distinct wallets, first-time, machinery"),
            Some((0.5, false))
        );
        assert_eq!(goal("payment creation"), Some((0.96, true)));
        assert_eq!(
            goal("deduct, distinct wallets, replay / first-time"),
            Some((12.0, true))
        );
        assert_eq!(
            goal("deduct, distinct wallets, replay / Redis"),
            Some((0.12, false))
        );
        assert!(report.table().contains("goals"), "the table shows them");

        // Without Redis (the embedded stack) that goal is left out, not reported as zero.
        report.limits.pop();
        report.compute_ratios(Some(&commits));
        assert_eq!(report.goals.len(), 4);
    }
}

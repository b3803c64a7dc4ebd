//! The report as a plain-text table: a section per concurrency, then the notes.

use crate::bench::cpu::CpuPerRequest;
use std::fmt::Write as _;

use super::*;

impl BenchReport {
    /// The run at `concurrency`.
    pub fn run(&self, concurrency: u16) -> Option<&BenchRun> {
        self.runs.iter().find(|run| run.concurrency == concurrency)
    }

    /// The report as a plain-text table: a section per concurrency, then the notes.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let concurrency: Vec<String> = self.concurrency.iter().map(u16::to_string).collect();
        let strategies: Vec<&str> = self
            .wallet_strategies
            .iter()
            .map(|strategy| strategy.as_str())
            .collect();
        let _ = writeln!(
            out,
            "mideng bench: {}, up to {} s per scenario, {} concurrent clients, wallet \
             strategies {}",
            self.stack,
            self.duration_secs,
            concurrency.join(" then "),
            strategies.join(", ")
        );
        for run in &self.runs {
            let _ = writeln!(out);
            run.write_table(&mut out);
        }
        if let Some(memory) = &self.memory {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "resident memory of this process (clients and the in-process service): \
                 {:.1} MiB before, {:.1} MiB at the peak, {:.1} MiB after",
                mib(memory.before_kib),
                mib(memory.peak_kib),
                mib(memory.after_kib)
            );
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

impl BenchRun {
    fn write_table(&self, out: &mut String) {
        let _ = writeln!(out, "== {} concurrent clients ==", self.concurrency);
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
        self.write_limits(out);
        self.write_open_loop(out);
        self.write_strategies(out);
        self.write_cpu(out);
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
            let width = self
                .goals
                .iter()
                .map(|goal| goal.name.len())
                .max()
                .unwrap_or(0);
            let _ = writeln!(out);
            let _ = writeln!(out, "goals at {} concurrent clients", self.concurrency);
            for goal in &self.goals {
                let _ = writeln!(
                    out,
                    "  {:<width$} {:>7.3}  goal {:>5.2}  {}  ({})",
                    goal.name,
                    goal.value,
                    goal.goal,
                    if goal.met { "met    " } else { "not met" },
                    goal.detail
                );
            }
        }
        self.write_failures(out);
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "notes at {} concurrent clients", self.concurrency);
            for note in &self.notes {
                let _ = writeln!(out, "  - {note}");
            }
        }
    }

    fn write_limits(&self, out: &mut String) {
        let width = self
            .limits
            .iter()
            .map(|limit| limit.name.len())
            .max()
            .unwrap_or(0)
            .max("machine limit".len());
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<width$} {:>9} {:>6} {:>10} {:>9} {:>9}",
            "machine limit", "ops", "errors", "ops/s", "p50 ms", "p99 ms"
        );
        for limit in &self.limits {
            let figures = &limit.figures;
            let _ = writeln!(
                out,
                "{:<width$} {:>9} {:>6} {:>10.1} {:>9.2} {:>9.2}",
                limit.name,
                figures.requests,
                figures.errors,
                figures.per_second,
                figures.p50_ms,
                figures.p99_ms
            );
        }
    }

    /// CPU time per request, per scenario and limit that has it: where the machine's time
    /// goes, and the throughput the cores would allow if they did nothing else.
    fn write_cpu(&self, out: &mut String) {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let rows: Vec<(String, CpuPerRequest)> = self
            .scenarios
            .iter()
            .filter_map(|scenario| {
                let name = format!(
                    "{} {} {}",
                    scenario.operation.label(),
                    scenario.machinery.label(),
                    scenario.path.label()
                );
                scenario.figures.cpu.map(|cpu| (name, cpu))
            })
            .chain(
                self.limits
                    .iter()
                    .filter_map(|limit| limit.figures.cpu.map(|cpu| (limit.name.clone(), cpu))),
            )
            .collect();
        if rows.is_empty() {
            return;
        }
        let width = rows
            .iter()
            .map(|(name, _)| name.len())
            .max()
            .unwrap_or(0)
            .max("CPU µs per request".len());
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<width$} {:>8} {:>8} {:>9} {:>8} {:>8} {:>13}",
            "CPU µs per request",
            "service",
            "client",
            "database",
            "redis",
            "total",
            format!("ceiling/s ({cores} cores)")
        );
        for (name, cpu) in rows {
            let _ = writeln!(
                out,
                "{:<width$} {:>8.1} {:>8.1} {:>9.1} {:>8.1} {:>8.1} {:>13.0}",
                name,
                cpu.service_us,
                cpu.client_us,
                cpu.database_us,
                cpu.redis_us,
                cpu.total_us(),
                cpu.ceiling_per_second(cores).unwrap_or(0.0)
            );
        }
    }

    /// The open loop's latency: each scenario on a fixed schedule at a share of its closed
    /// loop's throughput.
    fn write_open_loop(&self, out: &mut String) {
        if self.open_loop.is_empty() {
            return;
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "open loop (requests on a fixed schedule; latency from each one's due time)"
        );
        let _ = writeln!(
            out,
            "{:<26} {:<4} {:<10} {:>10} {:>10} {:>6} {:>9} {:>9} {:>9} {:>9}",
            "scenario",
            "idem",
            "path",
            "offered/s",
            "answered/s",
            "errors",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms"
        );
        for row in &self.open_loop {
            let figures = &row.figures;
            let _ = writeln!(
                out,
                "{:<26} {:<4} {:<10} {:>10.1} {:>10.1} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                row.operation.label(),
                row.machinery.label(),
                row.path.label(),
                row.offered_per_second,
                figures.per_second,
                figures.errors,
                figures.p50_ms,
                figures.p99_ms,
                row.p999_ms,
                row.max_ms
            );
        }
    }

    fn write_strategies(&self, out: &mut String) {
        if self.strategies.is_empty() {
            return;
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "wallet strategies (deducts, machinery on: first-time; then how many of the replays \
             were answered as replays)"
        );
        let _ = writeln!(
            out,
            "{:<19} {:<9} {:>9} {:>6} {:>10} {:>9} {:>9} {:>9} {:>15}",
            "strategy",
            "wallets",
            "requests",
            "errors",
            "req/s",
            "p50 ms",
            "p99 ms",
            "/ limit",
            "replays"
        );
        for row in &self.strategies {
            let figures = &row.first_time.figures;
            let fraction = row
                .fraction_of_limit
                .map_or_else(|| "-".to_owned(), |fraction| format!("{fraction:.3}"));
            let replays = format!("{}/{}", row.replay.replayed, row.replay.figures.requests);
            let _ = writeln!(
                out,
                "{:<19} {:<9} {:>9} {:>6} {:>10.1} {:>9.2} {:>9.2} {:>9} {:>15}",
                row.strategy.as_str(),
                match row.operation {
                    Operation::DeductHotWallet => "hot",
                    _ => "distinct",
                },
                figures.requests,
                figures.errors + row.replay.figures.errors,
                figures.per_second,
                figures.p50_ms,
                figures.p99_ms,
                fraction,
                replays
            );
        }
        for operation in Operation::DEDUCTS {
            if let Some((limit, _)) = self.deduct_baseline(operation) {
                let _ = writeln!(
                    out,
                    "  / limit, {}: first-time req/s / {} ops/s",
                    operation.label(),
                    limit.name
                );
            }
        }
        for (operation, fastest) in [
            (
                Operation::DeductDistinctWallets,
                self.fastest_on_distinct_wallets,
            ),
            (Operation::DeductHotWallet, self.fastest_on_hot_wallet),
        ] {
            if let Some(row) = fastest.and_then(|strategy| self.strategy(strategy, operation)) {
                let _ = writeln!(
                    out,
                    "  fastest, {}: {} ({:.1} req/s)",
                    operation.label(),
                    row.strategy.as_str(),
                    row.first_time.figures.per_second
                );
            }
        }
    }

    fn write_failures(&self, out: &mut String) {
        let scenario_failure = |scenario: &ScenarioResult, strategy: Option<WalletStrategy>| {
            scenario.first_error.as_ref().map(|error| {
                let strategy =
                    strategy.map_or_else(String::new, |strategy| format!(", {strategy}"));
                format!(
                    "{} ({}, {}{strategy}): {error}",
                    scenario.operation.label(),
                    scenario.machinery.label(),
                    scenario.path.label()
                )
            })
        };
        let failures: Vec<String> = self
            .scenarios
            .iter()
            .filter_map(|scenario| scenario_failure(scenario, None))
            .chain(self.strategies.iter().flat_map(|row| {
                [
                    scenario_failure(&row.first_time, Some(row.strategy)),
                    scenario_failure(&row.replay, Some(row.strategy)),
                ]
                .into_iter()
                .flatten()
            }))
            .chain(self.open_loop.iter().filter_map(|row| {
                row.first_error.as_ref().map(|error| {
                    format!(
                        "{} ({}, {}, open loop): {error}",
                        row.operation.label(),
                        row.machinery.label(),
                        row.path.label()
                    )
                })
            }))
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
    }
}

/// KiB as MiB, for the table.
fn mib(kib: u64) -> f64 {
    f64::from(u32::try_from(kib).unwrap_or(u32::MAX)) / 1024.0
}

//! What a storm found, as a value (serialized with `--json`), as the text table the CLI
//! prints and as an HTML page (`--html`, in `html`): duplicates sent, faults injected, what
//! each layer caught (in total and over time), the clients' latencies, the attacker's tally,
//! the audit's figures and every invariant with its result.

use std::collections::BTreeMap;

use serde::Serialize;

use super::args::BreakLayer;
use super::attacker::AttackReport;
pub use super::availability::FaultAvailability;
pub use super::latency::LatencySummary;
use crate::audit::{AuditFigures, InvariantResult, Violation};

/// What the storm sampled while it ran, on one clock: milliseconds since the workload began.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// The sampling interval, milliseconds.
    pub interval_ms: u64,
    /// When the workload's deadline passed.
    pub workload_end_ms: u64,
    /// When quiescence began (the clients' last scripts done).
    pub quiescence_start_ms: u64,
    /// When sampling stopped (after the audit).
    pub end_ms: u64,
    /// What each layer caught in each interval, in order.
    pub samples: Vec<LayerSample>,
    /// Every fault, from its start to its end.
    pub fault_windows: Vec<FaultWindow>,
}

/// One sampling interval: what each layer caught in it (the service's decision counters, first
/// arrivals left out, as in [`StormReport::layers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LayerSample {
    /// Start of the interval.
    pub from_ms: u64,
    /// End of the interval.
    pub to_ms: u64,
    /// Requests sent in it.
    pub requests: u64,
    /// Caught in it, by layer (layers that caught nothing are left out).
    pub caught: BTreeMap<String, u64>,
}

/// A fault held from `from_ms` to `to_ms` (the simulator's faults are armed in an instant and
/// strike at the next call they name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FaultWindow {
    /// What the fault was.
    pub kind: String,
    /// When it began.
    pub from_ms: u64,
    /// When it was undone.
    pub to_ms: u64,
}

/// One kind of fault over a run: how often it struck, how long its windows lasted, and what
/// each layer caught in the sampling intervals those windows touched ("around it": an interval
/// is the sampling interval, a second or more, so a catch just before or after a window counts
/// too).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FaultKindSummary {
    /// The kind, as the timeline names it.
    pub kind: String,
    /// Its windows.
    pub count: usize,
    /// When the first began, milliseconds since the workload began.
    pub first_ms: u64,
    /// The median window's length, milliseconds.
    pub median_ms: u64,
    /// The longest window's length, milliseconds.
    pub max_ms: u64,
    /// Caught by each layer in the intervals its windows touched.
    pub caught: BTreeMap<String, u64>,
}

impl Timeline {
    /// Every kind of fault on the timeline, in the order they first struck.
    pub fn fault_kinds(&self) -> Vec<FaultKindSummary> {
        by_kind(&self.fault_windows)
            .into_iter()
            .map(|(kind, windows)| {
                let mut lengths: Vec<u64> = windows
                    .iter()
                    .map(|window| window.to_ms.saturating_sub(window.from_ms))
                    .collect();
                lengths.sort_unstable();
                let mut caught: BTreeMap<String, u64> = BTreeMap::new();
                // Each interval once, however many of the kind's windows touch it.
                for sample in self.samples.iter().filter(|sample| {
                    windows.iter().any(|window| {
                        sample.from_ms <= window.to_ms && window.from_ms <= sample.to_ms
                    })
                }) {
                    for (layer, count) in &sample.caught {
                        *caught.entry(layer.clone()).or_default() += count;
                    }
                }
                FaultKindSummary {
                    kind: kind.to_owned(),
                    count: windows.len(),
                    first_ms: windows
                        .iter()
                        .map(|window| window.from_ms)
                        .min()
                        .unwrap_or(0),
                    median_ms: lengths.get(lengths.len() / 2).copied().unwrap_or(0),
                    max_ms: lengths.last().copied().unwrap_or(0),
                    caught,
                }
            })
            .collect()
    }
}

/// Fault windows grouped by kind, the kinds in the order they first struck.
pub(crate) fn by_kind(windows: &[FaultWindow]) -> Vec<(&str, Vec<&FaultWindow>)> {
    let mut kinds: Vec<(&str, Vec<&FaultWindow>)> = Vec::new();
    for window in windows {
        match kinds.iter_mut().find(|(kind, _)| *kind == window.kind) {
            Some((_, same)) => same.push(window),
            None => kinds.push((window.kind.as_str(), vec![window])),
        }
    }
    kinds
}

/// What the storm did and found.
#[derive(Clone, Debug, Serialize)]
pub struct StormReport {
    /// The commit the run's code came from: `git rev-parse HEAD` where the storm ran, with
    /// `-dirty` when the work tree had changes, `unknown` outside a checkout. A kept report
    /// names the code it vouches for.
    pub commit: String,
    /// The seed (run it again with `--seed` to repeat the workload and the fault schedule).
    pub seed: u64,
    /// The stack.
    pub stack: String,
    /// Instances.
    pub instances: usize,
    /// Workload seconds: `--duration-secs`, or longer when `--fault-rounds` held it on.
    pub duration_secs: u64,
    /// Quiescence seconds.
    pub quiescence_secs: u64,
    /// Requests sent to the service.
    pub requests: u64,
    /// 5xx answers while a fault was active (excused).
    pub errors_during_faults: u64,
    /// Those 5xx by the kind of fault that excused them, then by status and code: a fault
    /// excuses only the codes of the dependency it takes away.
    pub errors_during_faults_by_kind: BTreeMap<String, BTreeMap<String, u64>>,
    /// `503 clock-unsynchronised` answers of an instance whose clock the run skewed past the
    /// service's bound (its clock guard refusing, as it must).
    pub clock_refusals: u64,
    /// WeChat Pay notifies answered 503 "send it again" (the order's lock or the database
    /// busy): the protocol's resend request, not a failure; Alipay's are 200 `fail` and not
    /// counted here.
    pub notifies_sent_back: u64,
    /// Commits whose answer the database link swallowed (the fault `database commit answers
    /// lost`): each a commit outcome the service could not know, for the key to settle.
    pub commit_answers_lost: u64,
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
    /// How the deployment's deducts raced on one wallet (`None`: a `--target` deployment,
    /// whose configuration the storm does not know).
    pub wallet_strategy: Option<String>,
    /// What the attacker sent and how it was answered (`None`: `--no-attacker`).
    pub attacks: Option<AttackReport>,
    /// What each layer caught over time, and the fault windows.
    pub timeline: Timeline,
    /// What each kind of fault did to the clients: unanswered attempts, stretches without an
    /// ok answer, how the operations left without an answer ended.
    pub availability: Vec<FaultAvailability>,
    /// The latencies the clients saw, by operation (`POST /v1/orders/{id}/payments`, …).
    pub latencies: BTreeMap<String, LatencySummary>,
    /// Every invariant of the audit, with its number of violations.
    pub invariants: Vec<InvariantResult>,
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
            "mideng storm — seed {} · {} · {} instance(s) · {} s workload, {} s quiescence{}",
            self.seed,
            self.stack,
            self.instances,
            self.duration_secs,
            self.quiescence_secs,
            self.wallet_strategy
                .as_deref()
                .map(|strategy| format!(" · wallet strategy {strategy}"))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "commit {}", self.commit);
        let _ = writeln!(
            out,
            "requests {} · 5xx during faults {} (excused){}",
            self.requests,
            self.errors_during_faults,
            if self.clock_refusals > 0 {
                format!(
                    " · refused by the skewed instance's clock guard {}",
                    self.clock_refusals
                )
            } else {
                String::new()
            }
        );
        for (kind, codes) in &self.errors_during_faults_by_kind {
            let codes = codes
                .iter()
                .map(|(code, count)| format!("{code} × {count}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(out, "  excused by \"{kind}\": {codes}");
        }
        if self.notifies_sent_back > 0 {
            let _ = writeln!(
                out,
                "WeChat notifies answered 503 \"send it again\" (lock or database busy): {}",
                self.notifies_sent_back
            );
        }
        if self.commit_answers_lost > 0 {
            let _ = writeln!(
                out,
                "commit answers lost on the database link {} (commit outcome unknown to the service; the history below says how each operation settled)",
                self.commit_answers_lost
            );
        }
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
        let kinds = self.timeline.fault_kinds();
        if !kinds.is_empty() {
            let _ = writeln!(
                out,
                "around each fault (first at, windows, median and longest, what the layers caught in the intervals they touched):"
            );
            for kind in kinds {
                let _ = writeln!(
                    out,
                    "  {} · first at {:.1} s · {} × {:.1} s median, {:.1} s longest · {}",
                    kind.kind,
                    kind.first_ms as f64 / 1000.0,
                    kind.count,
                    kind.median_ms as f64 / 1000.0,
                    kind.max_ms as f64 / 1000.0,
                    if kind.caught.is_empty() {
                        "nothing caught".to_owned()
                    } else {
                        join(&kind.caught)
                    }
                );
            }
        }
        if !self.availability.is_empty() {
            let _ = writeln!(
                out,
                "what each fault did to the clients (attempts sent inside its windows; the longest stretch without an ok answer to any client, from a window's start to {} s after its end; the operations left without an answer there, and how they ended):",
                super::availability::AFTER_WINDOW_MS / 1000
            );
            for kind in &self.availability {
                let _ = writeln!(
                    out,
                    "  {} · {} window(s) · {} attempts, {} unanswered · no ok answer for {:.1} s median, {:.1} s longest (ceiling {:.0} s) · {} operations unanswered: {} ok on a retry, {} refused on a retry, {} never answered",
                    kind.kind,
                    kind.windows,
                    kind.attempts,
                    kind.unanswered,
                    kind.without_ok_median_ms as f64 / 1000.0,
                    kind.without_ok_max_ms as f64 / 1000.0,
                    kind.without_ok_ceiling_ms as f64 / 1000.0,
                    kind.unanswered_operations,
                    kind.settled_ok,
                    kind.settled_refused,
                    kind.never_answered
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<16} {:>8}  what it caught", "layer", "count");
        for (layer, outcomes) in &self.layers {
            let total: u64 = outcomes.values().sum();
            let _ = writeln!(out, "{layer:<16} {total:>8}  {}", join(outcomes));
        }
        if !self.audit.history.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{:<10} {:>6} {:>8} {:>9} {:>6} {:>7} {:>7} {:>8} {:>9} {:>8}",
                "history",
                "ops",
                "attempts",
                "no answer",
                "ok",
                "refused",
                "unknown",
                "→applied",
                "→nothing",
                "by retry"
            );
            for (kind, counts) in &self.audit.history {
                let _ = writeln!(
                    out,
                    "{kind:<10} {:>6} {:>8} {:>9} {:>6} {:>7} {:>7} {:>8} {:>9} {:>8}",
                    counts.operations,
                    counts.attempts,
                    counts.unknown_attempts,
                    counts.ok,
                    counts.refused,
                    counts.unknown,
                    counts.unknown_applied,
                    counts.unknown_not_applied,
                    counts.settled_by_retry
                );
            }
        }
        let linearizable = &self.audit.linearizable;
        if linearizable.wallets > 0 {
            let _ = writeln!(out);
            let hottest = linearizable
                .hottest
                .as_ref()
                .map_or(String::new(), |hottest| {
                    format!(
                        "; the hottest, {}: {} operations in {} steps",
                        hottest.key, hottest.operations, hottest.steps
                    )
                });
            let _ = writeln!(
                out,
                "linearizability: {} of {} wallets checked ({} operations, {} reads, {} deducts refused for funds{hottest})",
                linearizable.checked,
                linearizable.wallets,
                linearizable.operations,
                linearizable.reads,
                linearizable.refused_for_funds
            );
            if !linearizable.unchecked.is_empty() {
                let _ = writeln!(
                    out,
                    "UNCHECKED (search past {} steps, neither passed nor failed): {}",
                    crate::audit::linearizable::SEARCH_STEPS_MAX,
                    linearizable.unchecked.join(", ")
                );
            }
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
                "{:<24} {:>6} {:>6} {:>8} {:>9}  stopped by",
                "attack", "sent", "acked", "refused", "no answer"
            );
            for (kind, counts) in attacks.kinds.iter().chain(&attacks.boundary.kinds) {
                let _ = writeln!(
                    out,
                    "{kind:<24} {:>6} {:>6} {:>8} {:>9}  {}",
                    counts.sent,
                    counts.acknowledged,
                    counts.refused,
                    counts.unanswered,
                    counts.stopped_by
                );
            }
            let boundary = &attacks.boundary;
            if !boundary.kinds.is_empty() {
                let _ = writeln!(
                    out,
                    "canary (no tenant may reach it): {} connections · stalled endpoint: {} \
                     requests, at most {} open at once (the dispatchers may hold {})",
                    boundary.canary_connections,
                    boundary.stall_requests,
                    boundary.stall_open_max,
                    boundary.stall_open_allowed
                );
            }
        }
        if !self.latencies.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "{:<48} {:>8} {:>9} {:>9} {:>9} {:>9}",
                "latency (ms)", "answers", "p50", "p90", "p99", "max"
            );
            for (operation, latency) in &self.latencies {
                let _ = writeln!(
                    out,
                    "{operation:<48} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                    latency.count, latency.p50_ms, latency.p90_ms, latency.p99_ms, latency.max_ms
                );
            }
        }
        let _ = writeln!(out);
        let audit = &self.audit;
        let _ = writeln!(out, "audit: {}", audit_summary(audit));
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

/// What the audit looked at, in one line (the text and the HTML report both show it).
pub(crate) fn audit_summary(audit: &AuditFigures) -> String {
    format!(
        "{} orders ({} asked for by the merchant's server), {} payments, {} PAID, {} charged at the channel, {} grants ({} revoked), {} refund cases, {} refunds ({} SUCCESS), {} ledger entries, {} deducts, {} reversals, {} events logged, {} webhooks ({} copies), {} attacked payments, {} lines on the channels' bills ({} matched, {} repaired)",
        audit.orders,
        audit.priced,
        audit.payments,
        audit.paid,
        audit.charged,
        audit.grants,
        audit.grants_revoked,
        audit.refund_cases,
        audit.refunds,
        audit.refunds_succeeded,
        audit.ledger_entries,
        audit.deducts,
        audit.reversals,
        audit.events_logged,
        audit.webhook_deliveries,
        audit.webhook_copies,
        audit.attacked,
        audit.bill_lines,
        audit.bill_matched,
        audit.bill_repaired
    ) + &open_cases(audit)
}

/// The refund cases left open at the end, named: money owed back is never only a count.
fn open_cases(audit: &AuditFigures) -> String {
    if audit.cases_open == 0 {
        return String::new();
    }
    let more = audit.cases_open.saturating_sub(audit.open_cases.len());
    format!(
        "; {} refund cases open for a person: {}{}",
        audit.cases_open,
        audit.open_cases.join("; "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// The commit of the checkout the storm runs in (see [`StormReport::commit`]).
pub(crate) fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "HEAD"]) else {
        return "unknown".to_owned();
    };
    // Untracked files count as changes too: a new source file not yet committed ran.
    match git(&["status", "--porcelain"]) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

#[cfg(test)]
impl FaultWindow {
    /// A window of `kind`, for tests.
    pub(crate) fn of(kind: &str, from_ms: u64, to_ms: u64) -> Self {
        Self {
            kind: kind.to_owned(),
            from_ms,
            to_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(kind: &str, from_ms: u64, to_ms: u64) -> FaultWindow {
        FaultWindow::of(kind, from_ms, to_ms)
    }

    fn sample(from_ms: u64, caught: &[(&str, u64)]) -> LayerSample {
        LayerSample {
            from_ms,
            to_ms: from_ms + 1_000,
            requests: 10,
            caught: caught
                .iter()
                .map(|(layer, count)| ((*layer).to_owned(), *count))
                .collect(),
        }
    }

    #[test]
    fn each_fault_kind_is_summarised_with_what_was_caught_around_its_windows() {
        let timeline = Timeline {
            interval_ms: 1_000,
            samples: vec![
                sample(0, &[("key", 1)]),
                sample(1_000, &[("key", 2), ("lock", 5)]),
                sample(2_000, &[("constraint", 7)]),
                sample(3_000, &[("key", 100)]),
                sample(4_000, &[("dedup", 3)]),
            ],
            fault_windows: vec![
                window("Redis restarted, memory lost", 1_200, 2_500),
                window("NATS node killed", 4_100, 4_300),
                window("Redis restarted, memory lost", 2_100, 2_200),
            ],
            ..Timeline::default()
        };
        let kinds = timeline.fault_kinds();
        assert_eq!(kinds.len(), 2);
        let redis = &kinds[0];
        assert_eq!(redis.kind, "Redis restarted, memory lost");
        assert_eq!((redis.count, redis.first_ms), (2, 1_200));
        assert_eq!((redis.median_ms, redis.max_ms), (1_300, 1_300));
        // The intervals 1-2 s and 2-3 s, each once though both windows touch the second.
        assert_eq!(
            redis.caught,
            BTreeMap::from([
                ("constraint".to_owned(), 7),
                ("key".to_owned(), 2),
                ("lock".to_owned(), 5)
            ])
        );
        assert_eq!(kinds[1].kind, "NATS node killed");
        assert_eq!(kinds[1].caught, BTreeMap::from([("dedup".to_owned(), 3)]));
        assert!(Timeline::default().fault_kinds().is_empty());
    }
}

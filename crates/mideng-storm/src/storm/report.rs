//! What a storm found, as a value (serialized with `--json`), as the text table the CLI
//! prints and as an HTML page (`--html`, in `html`): duplicates sent, faults injected, what
//! each layer caught (in total and over time), the clients' latencies, the attacker's tally,
//! the audit's figures and every invariant with its result.

use std::collections::BTreeMap;

use serde::Serialize;

use super::args::BreakLayer;
pub use super::latency::LatencySummary;
use crate::attacker::AttackReport;
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
    /// How the deployment's deducts raced on one wallet (`None`: a `--target` deployment,
    /// whose configuration the storm does not know).
    pub wallet_strategy: Option<String>,
    /// What the attacker sent and how it was answered (`None`: `--no-attacker`).
    pub attacks: Option<AttackReport>,
    /// What each layer caught over time, and the fault windows.
    pub timeline: Timeline,
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
        "{} payments, {} PAID, {} charged at the channel, {} grants, {} refund cases, {} refunds ({} SUCCESS), {} ledger entries, {} deducts, {} reversals, {} webhooks ({} copies), {} attacked payments",
        audit.payments,
        audit.paid,
        audit.charged,
        audit.grants,
        audit.refund_cases,
        audit.refunds,
        audit.refunds_succeeded,
        audit.ledger_entries,
        audit.deducts,
        audit.reversals,
        audit.webhook_deliveries,
        audit.webhook_copies,
        audit.attacked
    )
}

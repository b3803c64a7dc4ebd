//! # mideng-storm — the proof and the measure
//!
//! - [`deploy`] — a deployment the storm and the bench start themselves, in this process: the
//!   channel simulator, one or several service instances (each on its own runtime, so that one
//!   can crash mid-request: its runtime is dropped with every future, transaction and connection
//!   it held), on the embedded default or on PostgreSQL + Redis + RabbitMQ, with proxies in
//!   front of Redis and the broker for outages. What a deployment is made of comes from
//!   `mideng_pay::testing`, shared with the service's tests.
//! - [`storm`] — the seeded workload with every source of duplicates, the fault schedule,
//!   quiescence and the report; its [`storm::attacker`] runs beside the workload and sends
//!   replayed, retargeted, polluted, wrongly signed, cross-channel and stale channel notifies
//!   (the audit checks that none moved anything) and probes the boundary.
//! - [`audit`] — the service's invariants checked against the database and the
//!   simulator's ledger: pure rules over a snapshot.
//! - [`bench`](mod@bench) — first-time and replay paths with the idempotency machinery on and off, next to
//!   the machine's own limits, measured in the same run.
//! - `html` — the pieces of both reports' HTML pages (`--html`): escaping, bar and line charts
//!   as inline SVG, tables.

pub mod audit;
pub mod bench;
pub mod deploy;
mod html;
pub mod storm;

/// The log file of a run of `command` (`storm`, `bench`) when `--log-file` names none: in the
/// run's directory, named by the time and the process, so that runs side by side keep theirs.
pub fn default_log_file(dir: &std::path::Path, command: &str) -> std::path::PathBuf {
    let unix_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    dir.join(format!("{command}-{unix_secs}-{}.log", std::process::id()))
}

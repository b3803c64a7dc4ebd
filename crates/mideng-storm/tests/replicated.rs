//! The storm on replicated servers: `scripts/replicated`'s PostgreSQL primary and synchronous
//! standby, Redis Cluster and NATS JetStream cluster, which the storm starts itself and fails
//! over for real (a primary killed and its standby promoted, a master killed and its replica
//! promoted, a node killed) while the workload runs. The audit must find nothing, and each
//! failover must be on the report's timeline.
//!
//! The script's ports are fixed (one deployment per machine): this binary holds this one test,
//! in the nextest group of the deployments (`.config/nextest.toml`).

mod support;

use std::path::Path;

use mideng_storm::deploy::ServerArgs;
use mideng_storm::storm::{StackKind, StormArgs, run};

/// Stops and removes the script's servers when the test ends, passed or not: their ports are
/// fixed, and a later run from another checkout must find them free.
struct Teardown(std::path::PathBuf);

impl Drop for Teardown {
    fn drop(&mut self) {
        let stopped = std::process::Command::new(&self.0)
            .args(["all", "clean"])
            .status();
        if !matches!(stopped, Ok(status) if status.success()) {
            eprintln!("scripts/replicated all clean failed: {stopped:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_failovers_leave_every_invariant_intact() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let _teardown = Teardown(root.join("scripts/replicated"));
    let started = std::time::Instant::now();
    let report = run(
        StormArgs {
            seed: Some(4_242),
            stack: StackKind::Replicated,
            instances: 2,
            // Five kinds in turn, one every 3 s plus the failover's own time (Redis: ~7 s):
            // each kind at least once within 45 s.
            duration_secs: 45,
            concurrency: 6,
            tenants: 2,
            fault_every_secs: 3,
            dir: Path::new(env!("CARGO_TARGET_TMPDIR")).join("storm-replicated"),
            servers: ServerArgs {
                replicated_script: root.join("scripts/replicated"),
                ..ServerArgs::default()
            },
            ..StormArgs::default()
        },
        support::identity(),
        false,
    )
    .await
    .expect("the storm ran (scripts/replicated starts its servers)");
    let table = report.table();
    eprintln!("{table}");
    eprintln!(
        "fault windows: {:?}; whole run {:?}",
        report
            .timeline
            .fault_windows
            .iter()
            .map(|window| (
                window.kind.as_str(),
                window.from_ms,
                window.to_ms - window.from_ms
            ))
            .collect::<Vec<_>>(),
        started.elapsed()
    );
    assert!(report.passed(), "{table}");
    assert!(report.violations.is_empty(), "{table}");
    assert!(report.audit.paid > 0, "nothing was paid: {table}");
    assert!(report.audit.grants > 0, "nothing was granted: {table}");
    assert!(report.audit.deducts > 0, "nothing was deducted: {table}");
    for kind in [
        "PostgreSQL primary killed, standby promoted",
        "Redis master killed, replica promoted",
        "NATS node killed",
    ] {
        assert!(
            report
                .timeline
                .fault_windows
                .iter()
                .any(|window| window.kind == kind),
            "no window \"{kind}\" on the timeline: {table}"
        );
    }
}

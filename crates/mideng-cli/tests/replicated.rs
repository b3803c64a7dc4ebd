//! `mideng storm --stack ha --processes`, as a user runs it: the storm starts PostgreSQL under
//! Patroni (`scripts/ha`: two nodes, etcd x3, HAProxy in front, the instances' only address)
//! and `scripts/replicated`'s Redis Cluster of three masters and three replicas and NATS
//! JetStream cluster of three, the simulator and three service instances as `mideng` processes
//! of their own, and while the workload runs it kills instances with SIGKILL and starts new
//! ones, kills the PostgreSQL primary's node and lets Patroni promote the standby (nothing tells
//! Patroni to switch over), pauses the primary with SIGSTOP, fails Redis and NATS over for real
//! and crashes them in place (Redis with its memory lost, the whole NATS cluster stopped), with
//! the primary's node cut off from etcd and the standby (both ways, and one way: nftables
//! rules in its network namespace) and its link made lossy, the instances' link to HAProxy
//! slowed and losing the answers to COMMIT, a service process paused with SIGSTOP past its
//! order locks' leases and claims and resumed (its stale writes refused by the fences), with
//! instance 0's wall clock seven seconds ahead of the
//! others' (libfaketime: leases, tokens and expiries judged by clocks that disagree). The audit
//! must find nothing, and every kind of fault must be on the report's timeline. Then the toolkit's cluster store meets every Redis node
//! restarted at once, and must issue tokens again by itself.
//!
//! The script's ports are fixed (one deployment per machine): this binary holds this one test,
//! in the nextest group of the deployments (`.config/nextest.toml`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mideng::Scope;
use mideng::store::redis::RedisStore;
use mideng::token::TokenStore;

/// Stops and removes the scripts' servers when the test ends, passed or not: their ports are
/// fixed, and a later run from another checkout must find them free.
struct Teardown(PathBuf, PathBuf);

impl Drop for Teardown {
    fn drop(&mut self) {
        // Not under another deployment that started on the same ports after this test's storm
        // ended: the storm's own lock on them, waited for here (`deploy/replicated.rs`).
        let lock = std::env::temp_dir().join("mideng-replicated-ports.lock");
        let held = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock)
            .and_then(|file| file.lock().map(|()| file));
        if let Err(error) = &held {
            eprintln!("could not lock {}: {error}", lock.display());
        }
        let stopped = Command::new(&self.0).args(["all", "clean"]).status();
        if !matches!(stopped, Ok(status) if status.success()) {
            eprintln!("scripts/replicated all clean failed: {stopped:?}");
        }
        let stopped = Command::new(&self.1).arg("clean").status();
        if !matches!(stopped, Ok(status) if status.success()) {
            eprintln!("scripts/ha clean failed: {stopped:?}");
        }
    }
}

/// Every kind of fault the `ha` stack's schedule has, as the timeline names them.
const FAULT_KINDS: [&str; 16] = [
    "service process killed (SIGKILL)",
    "simulator's faults armed",
    "PostgreSQL primary's node killed, Patroni promoted the standby",
    "Redis master killed, replica promoted",
    "NATS node killed",
    "PostgreSQL primary paused (SIGSTOP), resumed",
    "Redis restarted, memory lost",
    "NATS cluster stopped and started",
    "PostgreSQL primary cut off from etcd and the standby (clients still reach it)",
    "PostgreSQL primary unheard by etcd and the standby (one-way drop)",
    "PostgreSQL primary's link: 5 % of packets lost each way",
    "database link: 300 ms latency, ±200 ms jitter",
    "database commit answers lost",
    "Redis master cut off from everything, replica promoted",
    "Redis master cut off from its peers (clients still reach it): split brain",
    "service process paused (SIGSTOP) past its leases, resumed",
];

#[test]
fn processes_on_replicated_servers_survive_every_failover_and_crash() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("scripts/replicated");
    let ha = root.join("scripts/ha");
    let _teardown = Teardown(script.clone(), ha.clone());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("storm-processes");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the run's directory");
    let json = dir.join("report.json");
    let started = std::time::Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_mideng"))
        .args(["storm", "--stack", "ha", "--processes", "--seed", "4242"])
        .args(["--instances", "3", "--tenants", "2", "--concurrency", "6"])
        .args(["--clock-skew-secs", "7"])
        // Every kind in turn, one a second after the last was repaired, and every kind at
        // least once: the workload runs 120 s and on until the round is done. A round takes
        // 200 to 240 s (a failover ~12 s and its repair as long, the NATS cluster's restart 12
        // to 22 s, each partition of the primary as long as a failover and a rejoin); a fixed
        // duration left the last kinds out on a slower machine.
        .args([
            "--duration-secs",
            "120",
            "--fault-every-secs",
            "1",
            "--fault-rounds",
            "1",
        ])
        .arg("--dir")
        .arg(&dir)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--replicated-script")
        .arg(&script)
        .arg("--ha-script")
        .arg(&ha)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("mideng storm runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "{stdout}\n{}\nwhole run {:?}",
        String::from_utf8_lossy(&output.stderr),
        started.elapsed()
    );
    // What failed, kept short: CI shows the start and the end of a long output, and the
    // violations sit in the middle of the text report.
    let report: Option<serde_json::Value> = std::fs::read(&json)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let violations = report
        .as_ref()
        .map(|report| report["violations"].clone())
        .unwrap_or_default();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr_tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    assert!(
        output.status.success(),
        "the storm failed. violations: {violations:#}; the storm's stderr ends:\n{}",
        stderr_tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    let report = report.expect("the JSON report");
    assert_eq!(violations, serde_json::json!([]), "violations");
    assert_eq!(report["instances"], 3);
    assert!(
        report["stack"]
            .as_str()
            .is_some_and(|stack| stack.contains("instance 0's clock +7 s off")),
        "the run says its clock skew: {stdout}"
    );
    // The instances' link to HAProxy lost COMMIT answers: errors for commits that happened,
    // which the retries settled (the audit and the history check above).
    assert!(
        report["commit_answers_lost"].as_u64().unwrap_or(0) > 0,
        "no commit answer lost: {stdout}"
    );
    for figure in ["paid", "grants", "deducts", "refunds"] {
        assert!(
            report["audit"][figure].as_u64().unwrap_or(0) > 0,
            "no {figure} in the audit: {stdout}"
        );
    }
    let windows = report["timeline"]["fault_windows"]
        .as_array()
        .expect("fault windows");
    for kind in FAULT_KINDS {
        assert!(
            windows.iter().any(|window| window["kind"] == kind),
            "no window \"{kind}\" on the timeline: {stdout}"
        );
    }
    // The instances really were processes, restarted after each SIGKILL: their logs are in the
    // run's directory, and the service's counters came from their metrics listeners.
    let logs: Vec<String> = std::fs::read_dir(&dir)
        .expect("the run's directory")
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .flat_map(|run| {
            std::fs::read_dir(run.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    for name in ["simulator.log", "instance-0.log", "instance-2.toml"] {
        assert!(logs.iter().any(|file| file == name), "no {name}: {logs:?}");
    }
    assert!(
        report["layers"]
            .as_object()
            .is_some_and(|layers| !layers.is_empty()),
        "no layer counted a catch: {stdout}"
    );
    cluster_store_issues_tokens_again_after_every_node_restarted(&script);
}

/// How long after `redis restart-all` returned (the cluster healthy again) the toolkit's store
/// has to issue a token again: redis-rs's bounded retries plus one fresh connection from the
/// seed nodes, with room for a loaded machine.
const STORE_RECOVERY_BOUND: Duration = Duration::from_secs(15);

/// The toolkit's cluster store, on the servers the storm left up: every node killed and
/// started again with its memory lost, and the same store value (nothing rebuilt by its caller)
/// issues tokens again within a bounded wait once the cluster answers.
fn cluster_store_issues_tokens_again_after_every_node_restarted(script: &Path) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let nodes: Vec<String> = (7100..7103)
        .map(|port| format!("redis://127.0.0.1:{port}/"))
        .collect();
    let scope = Scope::new("tenant", "restart-all").expect("a scope");
    let ttl = Duration::from_secs(60);
    let store = runtime.block_on(async {
        let store = RedisStore::connect_cluster(&nodes)
            .await
            .expect("the script's Redis Cluster");
        store
            .issue_token(&scope, ttl)
            .await
            .expect("a token before the restart");
        store
    });
    // The runtime's workers keep driving the store's connection while this thread waits.
    let restarted = Command::new(script)
        .args(["redis", "restart-all", "0"])
        .status();
    assert!(
        matches!(restarted, Ok(status) if status.success()),
        "redis restart-all: {restarted:?}"
    );
    let answered = Instant::now();
    runtime.block_on(async {
        loop {
            match store.issue_token(&scope, ttl).await {
                Ok(_) => break,
                Err(error) if answered.elapsed() < STORE_RECOVERY_BOUND => {
                    eprintln!(
                        "not yet, {:?} after the restart: {error}",
                        answered.elapsed()
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!(
                    "no token {STORE_RECOVERY_BOUND:?} after the cluster answered again: {error}"
                ),
            }
        }
    });
    eprintln!(
        "the store issued tokens again {:?} after the cluster answered ({} fresh connections)",
        answered.elapsed(),
        store.connection().rebuilds()
    );
}

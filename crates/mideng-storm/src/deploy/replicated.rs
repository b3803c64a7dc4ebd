//! `scripts/replicated`, driven by the deployment: its servers brought up, failed over,
//! crashed in place and repaired, each command bounded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

/// The URLs `scripts/replicated all up` prints.
#[derive(Clone, Debug)]
pub(super) struct ReplicatedUrls {
    /// The PostgreSQL front.
    pub(super) postgres: String,
    /// The Redis Cluster's nodes.
    pub(super) redis_cluster: Vec<String>,
    /// The NATS servers, comma-separated.
    pub(super) nats: String,
}

/// How long one command of `scripts/replicated` may take: an `up` from nothing takes seconds,
/// a failover up to the script's own bounded waits (60 s), a lock held by another command up
/// to 300 s.
pub(super) const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a deployment waits for another one on the same ports to end.
const PORTS_WAIT: Duration = Duration::from_secs(60 * 60);

/// The file whose lock a deployment holds for as long as it uses the script's servers. Their
/// ports are fixed, so the lock is the machine's, whatever `--dir` says: a second storm, or a
/// test of the replicated stack started beside a running storm, waits for it instead of
/// stopping its servers under it (which made a storm's audit fail for reasons of its own).
fn ports_lock_path() -> PathBuf {
    std::env::temp_dir().join("mideng-replicated-ports.lock")
}

/// Takes the lock of [`ports_lock_path`], waiting up to [`PORTS_WAIT`] for its holder to end;
/// the lock lasts as long as the returned file is open (the process's end releases it).
async fn hold_ports() -> anyhow::Result<std::fs::File> {
    let path = ports_lock_path();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !told {
                    tracing::warn!(
                        lock = %path.display(),
                        "another deployment uses the replicated servers' ports; waiting for it to end"
                    );
                    told = true;
                }
                if started.elapsed() >= PORTS_WAIT {
                    anyhow::bail!(
                        "the replicated servers' ports stayed in use by another deployment for {PORTS_WAIT:?} ({})",
                        path.display()
                    );
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(error).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// `scripts/replicated`, and what the failovers left to repair.
#[derive(Debug)]
pub(super) struct Replicated {
    pub(super) script: PathBuf,
    pub(super) dir: Option<PathBuf>,
    /// A primary was killed and its standby promoted: the old one is to be rebuilt.
    pub(super) pg_degraded: bool,
    /// A master was killed: it is to be brought back as a replica.
    pub(super) redis_degraded: bool,
    /// This deployment's hold on the servers' ports ([`ports_lock_path`]), from the first `up`.
    ports: std::sync::OnceLock<std::fs::File>,
}

impl Replicated {
    pub(super) fn new(script: &Path, dir: Option<&Path>) -> Self {
        Self {
            script: script.to_path_buf(),
            dir: dir.map(Path::to_path_buf),
            pg_degraded: false,
            redis_degraded: false,
            ports: std::sync::OnceLock::new(),
        }
    }

    /// Runs the script with `args` (after `--dir`), bounded by [`SCRIPT_TIMEOUT`]; its stdout.
    /// A failure or a timeout is an error naming the command and the end of its stderr.
    pub(super) async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = tokio::process::Command::new(&self.script);
        if let Some(dir) = &self.dir {
            command.arg("--dir").arg(dir);
        }
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let what = format!("{} {}", self.script.display(), args.join(" "));
        let started = std::time::Instant::now();
        let output = tokio::time::timeout(SCRIPT_TIMEOUT, command.output())
            .await
            .with_context(|| format!("{what} took longer than {SCRIPT_TIMEOUT:?}"))?
            .with_context(|| {
                format!(
                    "running {what} (the replicated stack needs scripts/replicated: \
                         --replicated-script)"
                )
            })?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            anyhow::bail!("{what} failed ({}): {}", output.status, tail.join(" | "));
        }
        tracing::info!(
            command = %what,
            elapsed = ?started.elapsed(),
            "replicated: {}",
            stderr.trim()
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `all up`: every server up and replicated (repairing what an earlier run left); the
    /// URLs it prints.
    pub(super) async fn up(&self) -> anyhow::Result<ReplicatedUrls> {
        if self.ports.get().is_none() {
            let _ = self.ports.set(hold_ports().await?);
        }
        let printed = self.run(&["all", "up"]).await?;
        let value = |name: &str| {
            printed
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
                .with_context(|| format!("scripts/replicated all up printed no {name}"))
        };
        Ok(ReplicatedUrls {
            postgres: value("MIDENG_TEST_POSTGRES_URL")?,
            redis_cluster: value("MIDENG_TEST_REDIS_CLUSTER_URLS")?
                .split(',')
                .map(str::to_owned)
                .collect(),
            nats: value("REPLICATED_NATS_URLS")?,
        })
    }
}

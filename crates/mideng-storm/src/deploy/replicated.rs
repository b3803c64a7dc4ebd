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
    /// `scripts/ha`, when PostgreSQL runs under Patroni (in its own default directory).
    pub(super) patroni: Option<PathBuf>,
    /// `MIDENG_PG_ASYNC_STANDBY=1` for the script: the negative control's asynchronous standby.
    async_standby: bool,
    /// A primary was killed and its standby promoted: the old one is to be rebuilt.
    pub(super) pg_degraded: bool,
    /// A master was killed: it is to be brought back as a replica.
    pub(super) redis_degraded: bool,
    /// This deployment's hold on the servers' ports ([`ports_lock_path`]), from the first `up`.
    ports: std::sync::OnceLock<std::fs::File>,
}

impl Replicated {
    pub(super) fn new(
        script: &Path,
        dir: Option<&Path>,
        patroni: Option<&Path>,
        async_standby: bool,
    ) -> Self {
        Self {
            script: script.to_path_buf(),
            dir: dir.map(Path::to_path_buf),
            patroni: patroni.map(Path::to_path_buf),
            async_standby,
            pg_degraded: false,
            redis_degraded: false,
            ports: std::sync::OnceLock::new(),
        }
    }

    /// Runs the script with `args` (after `--dir`), bounded by [`SCRIPT_TIMEOUT`]; its stdout.
    /// A failure or a timeout is an error naming the command and the end of its stderr.
    pub(super) async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run_script(&self.script, self.dir.as_deref(), args)
            .await
    }

    /// Runs `scripts/ha` with `args`, as [`Replicated::run`] does the other.
    pub(super) async fn run_ha(&self, args: &[&str]) -> anyhow::Result<String> {
        let script = self
            .patroni
            .as_deref()
            .context("not the ha stack: PostgreSQL is not under Patroni")?;
        self.run_script(script, None, args).await
    }

    async fn run_script(
        &self,
        script: &Path,
        dir: Option<&Path>,
        args: &[&str],
    ) -> anyhow::Result<String> {
        let mut command = tokio::process::Command::new(script);
        if let Some(dir) = dir {
            command.arg("--dir").arg(dir);
        }
        if self.async_standby {
            command.env("MIDENG_PG_ASYNC_STANDBY", "1");
        }
        command
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let what = format!("{} {}", script.display(), args.join(" "));
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
    /// URLs it prints. With Patroni, `redis up` and `nats up` of this script and `up` of
    /// `scripts/ha`, whose HAProxy front is the PostgreSQL URL.
    pub(super) async fn up(&self) -> anyhow::Result<ReplicatedUrls> {
        if self.ports.get().is_none() {
            let _ = self.ports.set(hold_ports().await?);
        }
        let printed = if self.patroni.is_some() {
            self.run(&["redis", "up"]).await?;
            self.run(&["nats", "up"]).await?;
            self.run_ha(&["up"]).await?;
            format!(
                "{}\n{}",
                self.run(&["env"]).await?,
                self.run_ha(&["env"]).await?
            )
        } else {
            self.run(&["all", "up"]).await?
        };
        // The last line naming each: `scripts/ha env`'s PostgreSQL URL wins over this
        // script's own.
        let value = |name: &str| {
            printed
                .lines()
                .rev()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
                .with_context(|| format!("the replicated stack's scripts printed no {name}"))
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

/// How long Patroni may take to promote the standby after the primary's node died (its
/// leader key's ttl is 10 s; the drill sees about 10 s).
const PROMOTION_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

impl Replicated {
    /// The PostgreSQL primary and standby up and synchronous again: `pg up`, or with Patroni
    /// `scripts/ha up` (a killed node's Patroni started again, which rejoins as the standby).
    pub(super) async fn pg_up(&self) -> anyhow::Result<()> {
        if self.patroni.is_some() {
            self.run_ha(&["up"]).await?;
        } else {
            self.run(&["pg", "up"]).await?;
        }
        Ok(())
    }

    /// Kills the primary's node (its Patroni and its PostgreSQL, -9) and waits until Patroni
    /// has promoted the other and HAProxy routes writes to it: nothing here tells Patroni what
    /// to do. The new primary's port.
    pub(super) async fn patroni_failover(&mut self) -> anyhow::Result<String> {
        let before = self.run_ha(&["primary"]).await?.trim().to_owned();
        self.run_ha(&["kill-primary"]).await?;
        self.pg_degraded = true;
        self.promoted_after(&before).await
    }

    /// Waits until Patroni calls a node other than the one on port `before` the primary, and
    /// HAProxy has had time to follow; the new primary's port.
    async fn promoted_after(&self, before: &str) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + PROMOTION_BOUND;
        loop {
            if let Ok(port) = self.run_ha(&["primary"]).await {
                let port = port.trim().to_owned();
                if !port.is_empty() && port != before {
                    // HAProxy checks every 500 ms: two checks, and it routes there.
                    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
                    return Ok(port);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("Patroni promoted no standby within {PROMOTION_BOUND:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// Cuts the primary's node off from etcd and the standby (`fault`: both ways, or only what
    /// it sends), waits until Patroni has promoted the other node and HAProxy follows, and heals
    /// the network. Nothing tells the old primary it was deposed: its Patroni finds out from
    /// etcd once it hears it again, and rejoins as the standby (with pg_rewind), which the
    /// repair outside the window waits for.
    pub(super) async fn patroni_partition(&mut self, fault: PgNetFault) -> anyhow::Result<String> {
        let before = self.run_ha(&["primary"]).await?.trim().to_owned();
        let command = match fault {
            PgNetFault::Isolated => "isolate-primary",
            PgNetFault::Muted => "mute-primary",
            PgNetFault::Lossy { .. } => anyhow::bail!("{fault:?} is not a partition"),
        };
        let index = self.run_ha(&[command]).await?;
        self.pg_degraded = true;
        let promoted = self.promoted_after(&before).await;
        // Healed whatever happened: a partition left in place would outlive its window.
        let healed = self.run_ha(&["heal"]).await;
        let port = promoted?;
        healed?;
        Ok(format!(
            "p{} on {before} cut off ({command}), the standby on {port} promoted",
            index.trim()
        ))
    }

    /// Drops `percent` % of the primary's node's packets each way for `hold`, then heals. A
    /// failover is not expected, but is not excluded either: the repair outside the window
    /// checks for a synchronous standby all the same.
    pub(super) async fn patroni_loss(
        &mut self,
        percent: u8,
        hold: std::time::Duration,
    ) -> anyhow::Result<String> {
        let index = self
            .run_ha(&["lossy-primary", &percent.to_string()])
            .await?;
        self.pg_degraded = true;
        tokio::time::sleep(hold).await;
        self.run_ha(&["heal"]).await?;
        Ok(format!(
            "p{} lost {percent} % of its packets for {hold:?}",
            index.trim()
        ))
    }

    /// Pauses the primary's PostgreSQL (SIGSTOP: a disk that hangs) for `hold`, shorter than
    /// Patroni's ttl, and resumes it: a stall every connection waits out, no failover.
    pub(super) async fn patroni_pause(&self, hold: std::time::Duration) -> anyhow::Result<String> {
        let index = self.run_ha(&["stop-primary"]).await?;
        tokio::time::sleep(hold.min(PAUSE_MAX)).await;
        self.run_ha(&["cont"]).await?;
        Ok(format!(
            "p{} paused for {:?}",
            index.trim(),
            hold.min(PAUSE_MAX)
        ))
    }
}

/// The longest pause of the primary: well inside Patroni's 10 s ttl. A longer one lets the
/// standby be promoted while the old primary is frozen; when that one resumes, its Patroni
/// finds the leader key taken — the hazard `docs/scaling.md` describes.
const PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(4);

/// The replicated stacks' faults, on the deployment: failovers, crashes in place, and their
/// repair.
impl super::Deployment {
    fn replicated_servers(&mut self) -> anyhow::Result<&mut Replicated> {
        self.replicated
            .as_mut()
            .context("not the replicated stack: no primary, master or node to fail over")
    }

    /// Kills the PostgreSQL primary (`pg kill-primary`), waits `hold`, and promotes its
    /// synchronous standby (`pg promote`, which re-points the front). A standby left down by
    /// an earlier failover is rebuilt first (`pg up`): the caller runs
    /// [`Deployment::repair_replicated`](super::Deployment::repair_replicated) outside the fault's window for that. The new
    /// primary's port.
    pub async fn pg_failover(&mut self, hold: Duration) -> anyhow::Result<String> {
        let servers = self.replicated_servers()?;
        if servers.patroni.is_some() {
            return servers.patroni_failover().await;
        }
        servers.run(&["pg", "kill-primary"]).await?;
        servers.pg_degraded = true;
        tokio::time::sleep(hold).await;
        let port = servers.run(&["pg", "promote"]).await?;
        Ok(port.trim().to_owned())
    }

    /// Whether PostgreSQL runs under Patroni (the `ha` stack).
    pub fn has_patroni(&self) -> bool {
        self.replicated
            .as_ref()
            .is_some_and(|servers| servers.patroni.is_some())
    }

    /// A network fault on the PostgreSQL primary's node under Patroni (the `ha` stack), held
    /// for `hold` when it is not a partition (a partition lasts until Patroni has promoted the
    /// standby). What happened.
    pub async fn pg_network_fault(
        &mut self,
        fault: PgNetFault,
        hold: Duration,
    ) -> anyhow::Result<String> {
        let servers = self.replicated_servers()?;
        if servers.patroni.is_none() {
            anyhow::bail!("network faults on a PostgreSQL node need the ha stack");
        }
        match fault {
            PgNetFault::Lossy { percent } => servers.patroni_loss(percent, hold).await,
            _ => servers.patroni_partition(fault).await,
        }
    }

    /// Kills -9 the Redis master of slot range `index` (0 to 2) and waits until a replica
    /// holds its slots and the cluster is ok (`redis kill-master N`); the new master.
    pub async fn redis_failover(&mut self, index: usize) -> anyhow::Result<String> {
        let servers = self.replicated_servers()?;
        servers.redis_degraded = true;
        let master = servers
            .run(&["redis", "kill-master", &index.to_string()])
            .await?;
        Ok(master.trim().to_owned())
    }

    /// Cuts the Redis master of slot range `index` (0 to 2) off as `partition` says, holds the
    /// cut until a replica took its slots over, heals it and waits until the old master is a
    /// synced replica again (`redis isolate-master N` / `redis split-master N`); the new
    /// master. Nothing is left to repair.
    pub async fn redis_partition(
        &mut self,
        partition: RedisPartition,
        index: usize,
    ) -> anyhow::Result<String> {
        let servers = self.replicated_servers()?;
        let command = match partition {
            RedisPartition::Isolated => "isolate-master",
            RedisPartition::Split => "split-master",
        };
        let master = servers.run(&["redis", command, &index.to_string()]).await?;
        Ok(master.trim().to_owned())
    }

    /// Kills -9 NATS node `index` (0 to 2), waits `hold`, starts it again and waits until
    /// JetStream is current on it (`nats kill-node N`, `nats start-node N`).
    pub async fn nats_outage(&mut self, index: usize, hold: Duration) -> anyhow::Result<()> {
        let servers = self.replicated_servers()?;
        let index = index.to_string();
        servers.run(&["nats", "kill-node", &index]).await?;
        tokio::time::sleep(hold).await;
        servers.run(&["nats", "start-node", &index]).await?;
        Ok(())
    }

    /// Crashes a replicated server in place and starts it again, held down for `hold`: the
    /// PostgreSQL primary stopped with `-m immediate` and restarted into crash recovery (no
    /// promotion: `pg restart-primary`), every Redis node killed and restarted with its memory
    /// lost (no persistence: every token and lock gone, `redis restart-all`), or the whole NATS
    /// cluster stopped and started (`nats restart-all`). What the script printed.
    pub async fn server_restart(
        &mut self,
        server: ServerRestart,
        hold: Duration,
    ) -> anyhow::Result<String> {
        let servers = self.replicated_servers()?;
        let seconds = format!("{:.1}", hold.as_secs_f64());
        let printed = match server {
            ServerRestart::Postgres if servers.patroni.is_some() => {
                servers.patroni_pause(hold).await?
            }
            ServerRestart::Postgres => servers.run(&["pg", "restart-primary", &seconds]).await?,
            ServerRestart::Redis => servers.run(&["redis", "restart-all", &seconds]).await?,
            ServerRestart::Nats => servers.run(&["nats", "restart-all", &seconds]).await?,
        };
        Ok(printed.trim().to_owned())
    }

    /// Brings back what the failovers left down, so that the next one has a standby or a
    /// replica to promote: the old PostgreSQL primary rebuilt as the synchronous standby of
    /// the new one (`pg up`), the old Redis master back as a replica (`redis up`). What it
    /// repaired, with how long each took. A no-op on other stacks or when nothing is down.
    pub async fn repair_replicated(&mut self) -> anyhow::Result<Vec<(&'static str, Duration)>> {
        let mut repaired = Vec::new();
        let Some(servers) = self.replicated.as_mut() else {
            return Ok(repaired);
        };
        if servers.pg_degraded {
            let started = std::time::Instant::now();
            servers.pg_up().await?;
            servers.pg_degraded = false;
            repaired.push(("PostgreSQL standby rebuilt", started.elapsed()));
        }
        if servers.redis_degraded {
            let started = std::time::Instant::now();
            servers.run(&["redis", "up"]).await?;
            servers.redis_degraded = false;
            repaired.push(("Redis master back as a replica", started.elapsed()));
        }
        Ok(repaired)
    }

    /// Brings every replicated server back up and replicated (`all up`), whatever a failed
    /// fault left behind; nothing is left to repair after it.
    pub async fn restore_replicated(&mut self) -> anyhow::Result<()> {
        let servers = self.replicated_servers()?;
        servers.up().await?;
        servers.pg_degraded = false;
        servers.redis_degraded = false;
        Ok(())
    }
}

/// A partition of a Redis Cluster master, as nftables rules on the nodes' own loopback
/// addresses (`scripts/replicated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisPartition {
    /// Cut off from everything: the other nodes, its replica, the clients.
    Isolated,
    /// Cut off from the other nodes and its replica while the clients still reach it: the
    /// split brain, where what it acknowledges until it notices is lost when it rejoins.
    Split,
}

/// A network fault of the PostgreSQL primary's node, as nftables rules inside its network
/// namespace (`scripts/ha`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgNetFault {
    /// Cut off from etcd and from the standby, both ways; the clients (HAProxy) still reach it.
    Isolated,
    /// What it sends to etcd and to the standby is dropped; what they send reaches it.
    Muted,
    /// `percent` % of its packets dropped each way, to everyone, at random.
    Lossy {
        /// From 1 to 99.
        percent: u8,
    },
}

/// A replicated server [`Deployment::server_restart`](super::Deployment::server_restart) crashes in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerRestart {
    /// The PostgreSQL primary, into crash recovery.
    Postgres,
    /// Every Redis node, memory lost.
    Redis,
    /// Every NATS node.
    Nats,
}

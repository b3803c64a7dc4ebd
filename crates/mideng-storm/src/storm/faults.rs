//! The fault schedule's faults, and the clock that excuses a 5xx while one is active.
//!
//! A fault is held for a moment and then undone. The embedded stack has only the instance crash
//! and the simulator's faults, armed together (a trade's creation and a refund applied with
//! their answers lost, a WeChat Pay refund that ends CLOSED or ABNORMAL); the servers stack adds
//! Redis and the broker cut off, every database connection terminated, and the instances' link
//! to the database troubled (`mideng_pay::testing::proxy`): slowed by 300 ms ± 200 ms,
//! partitioned (nothing passes, nothing closes, everything flows again when it heals), and
//! every COMMIT's answer lost (its connection closed a moment later: commit outcome unknown,
//! settled by the client's retry under its key); the replicated stack
//! has real failovers of its replicated servers instead of the cuts (the PostgreSQL primary
//! killed and its synchronous standby promoted, a Redis Cluster master killed and its replica
//! promoted, a NATS JetStream node killed and started again), each repaired before the next
//! fault's window opens (the old primary rebuilt as the standby, the old master back as a
//! replica), so that every failover has a standby or replica to promote, and the same servers
//! crashed in place and restarted (the primary stopped with `-m immediate` into crash recovery,
//! every Redis node restarted with its memory lost, the whole NATS cluster stopped and started);
//! the `ha` stack leaves PostgreSQL's failovers to Patroni and adds partitions: of the primary's
//! node (both ways, one way, a lossy link), of the instances' link to HAProxy (latency, COMMIT
//! answers lost), and of a Redis master (from everything, and from its peers only: the split
//! brain); a deployment the storm did not start gets the simulator's faults only.
//!
//! A Redis fault's window (a master failed over, every node restarted) closes when every
//! running instance issues a token again (`POST /v1/tokens`, the one request that needs Redis
//! and has no database fallback), not when the script sees the cluster healthy: the instances'
//! own connections reconnect only after that. That wait is bounded by
//! [`REDIS_RECOVERY_BOUND`]; an instance still refusing tokens then is a violation of its own
//! (the window closes regardless, so every 5xx after it counts too).
//!
//! With `--processes` the instance crash is a `mideng serve` process killed with SIGKILL and a
//! new one started, and every stack the storm started has one kind more, last in its schedule:
//! a process paused with SIGSTOP for [`PAUSE_HOLD`], past the leases and claims it held, and
//! resumed with SIGCONT — the zombie owner the order lock's fences exist for. It wakes up with
//! requests in flight, an order lock another instance has taken and used, relay and consumer
//! claims others have taken over, and whatever it then writes on the strength of what it held
//! must be refused (the fence, a compare-and-set, a constraint), never committed.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::clients::Shared;
use super::report::FaultWindow;
use crate::deploy::{Deployment, PgNetFault, RedisPartition, ServerRestart};
use mideng_pay::testing::LinkFault;
use mideng_pay::testing::proxy::SWALLOWED_FOR;

/// Time windows of active faults, each with its kind; a 5xx inside one (plus a grace) is
/// excused when its code is one the window's kind produces ([`super::excuses`]), and the report
/// shades them on its timeline.
#[derive(Default)]
pub(super) struct FaultClock {
    windows: Mutex<Vec<(&'static str, Instant, Option<Instant>)>>,
    /// The 5xx each kind excused, by status and code.
    excused: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
}

const FAULT_GRACE: Duration = Duration::from_secs(3);

impl FaultClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, Instant, Option<Instant>)>> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn open(&self, kind: &'static str) -> usize {
        let mut windows = self.lock();
        windows.push((kind, Instant::now(), None));
        windows.len() - 1
    }

    pub(super) fn close(&self, index: usize) {
        if let Some(window) = self.lock().get_mut(index) {
            window.2 = Some(Instant::now());
        }
    }

    /// The kind of the fault, active between `started` and `ended` (give or take the grace),
    /// that produces a `status` answer with the problem `code`; counted under it. `None`: no
    /// active fault gives such an answer.
    pub(super) fn excused(
        &self,
        started: Instant,
        ended: Instant,
        status: u16,
        code: &str,
    ) -> Option<&'static str> {
        let kind = self.lock().iter().find_map(|(kind, from, to)| {
            let to = to.map_or(ended, |to| to + FAULT_GRACE);
            (started <= to
                && ended + FAULT_GRACE >= *from
                && super::excuses::produces(kind, status, code))
            .then_some(*kind)
        })?;
        *self
            .excused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind.to_owned())
            .or_default()
            .entry(format!("{status} {code}"))
            .or_default() += 1;
        Some(kind)
    }

    /// The 5xx each kind excused, by status and code.
    pub(super) fn excused_by_kind(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.excused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Faults injected so far.
    pub(super) fn count(&self) -> usize {
        self.lock().len()
    }

    /// The windows in milliseconds since `origin` (one still open ends now).
    pub(super) fn windows(&self, origin: Instant) -> Vec<FaultWindow> {
        let since = |at: Instant| millis(at.saturating_duration_since(origin));
        let now = Instant::now();
        self.lock()
            .iter()
            .map(|(kind, from, to)| FaultWindow {
                kind: (*kind).to_owned(),
                from_ms: since(*from),
                to_ms: since(to.unwrap_or(now)),
            })
            .collect()
    }
}

/// A duration in whole milliseconds.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The schedule starts at a seeded one of the first this many kinds (every stack has them; the
/// `ha` stack has seven more, which the cycle reaches in turn).
pub(super) const FAULT_KINDS: u64 = 8;

/// Kinds the embedded stack has (the first ones): the crash and the simulator's faults.
const EMBEDDED_KINDS: u64 = 2;

/// Kinds the servers stack has ([`WINDOW_KINDS`]).
const SERVERS_KINDS: u64 = 8;

/// What each kind's window is called on the report's timeline, in the schedule's order.
const WINDOW_KINDS: [&str; 8] = [
    "instance killed mid-request",
    "simulator's faults armed",
    "Redis cut off",
    "broker cut off",
    "database connections killed",
    DB_LATENCY,
    DB_PARTITION,
    DB_COMMIT_LOST,
];

/// The instances' database link slowed: every chunk each way 300 ms ± 200 ms later.
const DB_LATENCY: &str = "database link: 300 ms latency, ±200 ms jitter";
/// The instances' database link partitioned: nothing passes either way, no connection is
/// closed, and everything flows again when it heals (as TCP retransmits).
const DB_PARTITION: &str = "database link partitioned";
/// Every connection that sends COMMIT hears nothing back and is closed a moment later: the
/// transaction committed, and its client cannot know.
const DB_COMMIT_LOST: &str = "database commit answers lost";

/// The replicated stack's kinds, in the schedule's order: the crash and the simulator's faults,
/// one failover of each replicated server, then each server crashed in place and restarted.
const REPLICATED_WINDOW_KINDS: [&str; 8] = [
    "instance killed mid-request",
    "simulator's faults armed",
    PG_FAILOVER,
    REDIS_FAILOVER,
    NATS_OUTAGE,
    PG_RESTART,
    REDIS_RESTART,
    NATS_RESTART,
];

/// The `ha` stack's kinds: the replicated stack's, with PostgreSQL's failover and crash left to
/// Patroni, then the primary's node partitioned both ways and one way, its link lossy, and the
/// instances' link to HAProxy slowed and losing COMMIT's answers, and a Redis master
/// partitioned from everything and from its peers only.
const HA_WINDOW_KINDS: [&str; 15] = [
    "instance killed mid-request",
    "simulator's faults armed",
    PG_PATRONI_FAILOVER,
    REDIS_FAILOVER,
    NATS_OUTAGE,
    PG_PAUSE,
    REDIS_RESTART,
    NATS_RESTART,
    PG_ISOLATED,
    PG_MUTED,
    PG_LOSSY,
    DB_LATENCY,
    DB_COMMIT_LOST,
    REDIS_ISOLATED,
    REDIS_SPLIT,
];

/// A Redis master cut off from every other node, its replica and the clients, until its
/// replica took over; then healed, and it rejoins as a replica.
const REDIS_ISOLATED: &str = "Redis master cut off from everything, replica promoted";
/// A Redis master cut off from the other nodes and its replica but not from the clients, until
/// its replica took over: it acknowledges writes until it notices (cluster-node-timeout), and
/// they are lost when it rejoins as a replica.
const REDIS_SPLIT: &str =
    "Redis master cut off from its peers (clients still reach it): split brain";

/// The primary's node cut off from etcd and from the standby, both ways, while HAProxy (the
/// clients) still reaches it; healed once Patroni has promoted the standby.
const PG_ISOLATED: &str =
    "PostgreSQL primary cut off from etcd and the standby (clients still reach it)";
/// What the primary's node sends to etcd and to the standby dropped; what they send arrives.
const PG_MUTED: &str = "PostgreSQL primary unheard by etcd and the standby (one-way drop)";
/// How many of the primary's packets [`PG_LOSSY`] drops, in percent.
const LOSS_PERCENT: u8 = 5;
/// The primary's node drops [`LOSS_PERCENT`] % of its packets each way, clients' too.
const PG_LOSSY: &str = "PostgreSQL primary's link: 5 % of packets lost each way";

/// The primary's node killed (its Patroni and PostgreSQL, -9); Patroni promotes the
/// synchronous standby when the leader key expires, and HAProxy follows its health checks.
const PG_PATRONI_FAILOVER: &str = "PostgreSQL primary's node killed, Patroni promoted the standby";
/// The primary's PostgreSQL stopped (SIGSTOP) for a few seconds, inside Patroni's ttl, and
/// resumed: every connection waits it out.
const PG_PAUSE: &str = "PostgreSQL primary paused (SIGSTOP), resumed";

/// A replicated stack's fault whose script failed (the servers were then brought back whole
/// with `all up` and the run went on); the log has the script's error.
const FAULT_FAILED: &str = "fault not injected: its script failed (servers brought back)";

/// The instance crash when the instances are processes.
const PROCESS_KILLED: &str = "service process killed (SIGKILL)";

/// One `mideng serve` process stopped with SIGSTOP for [`PAUSE_HOLD`] and resumed: past its
/// order locks' leases and its claims, while the other instances take them over. The name says
/// "process" on purpose: [`super::excuses`] then excuses only `handler-timeout` (its clients
/// see no answer until it resumes, not a 5xx; those waiting on a lock it held wait out the
/// lease), under the instance's ceiling.
const PROCESS_PAUSED: &str = "service process paused (SIGSTOP) past its leases, resumed";

/// How long [`PROCESS_PAUSED`] keeps the process stopped: more than twice the order lock's
/// lease the processes run with ([`crate::deploy::PROCESS_ORDER_LOCK_LEASE`], 5 s), so that
/// another writer can take an order's lock after it lapsed and write under it before the
/// paused holder wakes; past the relay's claim lease and the consumer's visibility (5 s each in
/// the storm's schedules). Not past an idempotency key's in-flight lease (60 s, above the
/// handler's 30 s timeout, which keeps a live handler from losing its key): a retry of a paused
/// request meets 409 in progress until the process resumes and finishes it. 12 s keeps the
/// window inside the instance's 15 s unavailability ceiling.
const PAUSE_HOLD: Duration = Duration::from_secs(12);

/// Stops one instance's process for [`PAUSE_HOLD`], then resumes it (resumed even when the
/// wait is the only thing that ran: a process left stopped would hang the run's quiescence).
async fn pause_process(
    deployment: &Deployment,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<&'static [&'static str]> {
    let index = rng.usize(..deployment.instance_count());
    deployment
        .pause_process(index, true)
        .context("stopping an instance's process")?;
    tracing::info!(index, hold = ?PAUSE_HOLD, "{PROCESS_PAUSED}: stopped");
    tokio::time::sleep(PAUSE_HOLD).await;
    deployment
        .pause_process(index, false)
        .context("resuming an instance's process")?;
    tracing::info!(index, "{PROCESS_PAUSED}: resumed");
    Ok(&[PROCESS_PAUSED])
}

/// Whether `kind` is the schedule's process pause: the kind after the stack's own, with
/// `--processes` only ([`kinds`]).
fn is_process_pause(deployment: &Deployment, kind: u64) -> bool {
    deployment.runs_processes() && kind == stack_kinds(deployment)
}

/// The PostgreSQL primary killed (`pg_ctl stop -m immediate`), held down, and its synchronous
/// standby promoted (the front re-pointed at it).
const PG_FAILOVER: &str = "PostgreSQL primary killed, standby promoted";
/// A Redis Cluster master killed -9, until a replica holds its slots and the cluster is ok.
const REDIS_FAILOVER: &str = "Redis master killed, replica promoted";
/// A NATS JetStream node killed -9, held down, started again and current.
const NATS_OUTAGE: &str = "NATS node killed";
/// The PostgreSQL primary stopped with `-m immediate`, held down, and started again: crash
/// recovery, no promotion.
const PG_RESTART: &str = "PostgreSQL primary crashed and restarted";
/// Every Redis node killed -9 and started again with its memory lost: every token and lock
/// gone.
const REDIS_RESTART: &str = "Redis restarted, memory lost";
/// The whole NATS cluster stopped, held down, and started again.
const NATS_RESTART: &str = "NATS cluster stopped and started";

/// The simulator's faults, armed together (each is consumed by the next call it names): the
/// next trade creation and the next refund applied with their answers lost, and the next
/// WeChat Pay refund ending CLOSED or ABNORMAL.
const SIMULATOR_FAULTS: [&str; 3] = [
    "channel answer lost after applying",
    "refund answer lost after applying",
    "WeChat refund closed or abnormal",
];

/// The channel applies the next creation but its answer is lost.
async fn lose_next_channel_answer(shared: &Shared, rng: &mut fastrand::Rng) {
    let method = if rng.bool() {
        "alipay.trade.precreate"
    } else {
        "wechat.native"
    };
    shared
        .sim(
            reqwest::Method::POST,
            "/sim/fail-next",
            json!({"method": method, "apply_anyway": true}),
        )
        .await;
}

/// The channel applies the next refund but its answer is lost: the service's refund stays
/// PROCESSING (or is settled by the query it makes after a refusal) until the refund's notify
/// or reconciliation, which asks under the same refund number, settles it.
async fn lose_next_refund_answer(shared: &Shared, rng: &mut fastrand::Rng) {
    let method = if rng.bool() {
        "alipay.trade.refund"
    } else {
        "wechat.refund"
    };
    shared
        .sim(
            reqwest::Method::POST,
            "/sim/fail-next",
            json!({"method": method, "apply_anyway": true}),
        )
        .await;
}

/// The next WeChat Pay refund a merchant asks for is accepted and then ends CLOSED (nothing
/// moved) or ABNORMAL (the buyer's account cannot take it; its amount stays held), with its
/// notify: the service must end it the same way, from the notify or by reconciliation.
async fn end_next_refund_unsuccessfully(shared: &Shared, rng: &mut fastrand::Rng) {
    let outcome = if rng.bool() { "closed" } else { "abnormal" };
    shared
        .sim(
            reqwest::Method::POST,
            "/sim/refund-outcome",
            json!({"outcome": outcome}),
        )
        .await;
}

/// Arms the simulator's faults ([`SIMULATOR_FAULTS`]).
async fn arm_simulator_faults(shared: &Shared, rng: &mut fastrand::Rng) {
    lose_next_channel_answer(shared, rng).await;
    lose_next_refund_answer(shared, rng).await;
    end_next_refund_unsuccessfully(shared, rng).await;
}

/// How late the channel's answers come while [`CHANNEL_LATE`] holds: past the service's whole
/// channel call timeout, so that every call answered then was applied by the channel and given
/// up on by the service (its outcome unknown, for the query, the notify or reconciliation to
/// settle).
const CHANNEL_ANSWER_DELAY: Duration =
    mideng_channel::adapter::CALL_TIMEOUT.saturating_add(Duration::from_secs(2));
/// The instances' link to the channel answers late.
const CHANNEL_LATE: &str = "channel answers late, past the service's timeout";
/// The instances' link to the channel resets each connection once the channel has answered.
const CHANNEL_RESET: &str = "channel connection reset after applying";

/// The simulator's faults armed, and the instances' link to the channel troubled until one
/// answer was (at most for `hold`): answers late, or connections reset once the channel acted
/// (by turns, seeded).
async fn channel_faults(
    deployment: &Deployment,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    hold: Duration,
) -> &'static [&'static str] {
    arm_simulator_faults(shared, rng).await;
    let (fault, names): (LinkFault, &'static [&'static str]) = if rng.bool() {
        (LinkFault::AnswersLate(CHANNEL_ANSWER_DELAY), &LATE_FAULTS)
    } else {
        (LinkFault::ResetAfterAnswer, &RESET_FAULTS)
    };
    // Healed as soon as one answer was troubled (or after `hold`, when no call came): every
    // call answered late holds its client for the whole delay, and a window that caught them
    // all would stall the workload that the other faults need.
    let before = deployment.channel_answers_troubled();
    deployment.trouble_channel_link(fault);
    let until = tokio::time::Instant::now() + hold;
    while deployment.channel_answers_troubled() == before && tokio::time::Instant::now() < until {
        tokio::time::sleep(CHANNEL_POLL).await;
    }
    deployment.trouble_channel_link(LinkFault::None);
    names
}

/// How often [`channel_faults`] looks whether an answer was troubled yet.
const CHANNEL_POLL: Duration = Duration::from_millis(10);

/// What a window of [`channel_faults`] struck, the link late.
const LATE_FAULTS: [&str; 4] = [
    SIMULATOR_FAULTS[0],
    SIMULATOR_FAULTS[1],
    SIMULATOR_FAULTS[2],
    CHANNEL_LATE,
];
/// What a window of [`channel_faults`] struck, the link resetting.
const RESET_FAULTS: [&str; 4] = [
    SIMULATOR_FAULTS[0],
    SIMULATOR_FAULTS[1],
    SIMULATOR_FAULTS[2],
    CHANNEL_RESET,
];

/// The kinds every stack the storm started has (the schedule's first two): an instance killed
/// mid-request and started again after `hold` (0), or the simulator's faults armed (1).
async fn common_fault(
    deployment: &mut Deployment,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    kind: u64,
    hold: Duration,
) -> anyhow::Result<&'static [&'static str]> {
    if kind == 0 {
        let index = rng.usize(..deployment.instance_count());
        super::sampler::read_before_kill(shared, deployment.metrics_base(index), index).await;
        deployment.crash(index).await;
        tokio::time::sleep(hold).await;
        deployment.restart(index).await?;
        Ok(if deployment.runs_processes() {
            &[PROCESS_KILLED]
        } else {
            &["instance killed mid-request"]
        })
    } else {
        Ok(channel_faults(deployment, shared, rng, hold).await)
    }
}

/// How many kinds of fault the schedule cycles through on `deployment` (the simulator's faults
/// only on one the storm did not start).
pub(super) fn kinds(deployment: Option<&Deployment>) -> u64 {
    let Some(deployment) = deployment else {
        return 1;
    };
    stack_kinds(deployment) + u64::from(deployment.runs_processes())
}

/// The kinds of the stack's own schedule, before the process pause that `--processes` adds.
fn stack_kinds(deployment: &Deployment) -> u64 {
    let replicated = deployment.is_replicated();
    if replicated && deployment.has_patroni() {
        HA_WINDOW_KINDS.len() as u64
    } else if replicated {
        REPLICATED_WINDOW_KINDS.len() as u64
    } else if deployment.has_servers() {
        SERVERS_KINDS
    } else {
        EMBEDDED_KINDS
    }
}

/// What the window of fault `kind` is called on the timeline, in a stack's list of `kinds`
/// (the crash is a process's SIGKILL when the instances are processes).
fn window_kind(deployment: &Deployment, kinds: &[&'static str], kind: u64) -> &'static str {
    if kind == 0 && deployment.runs_processes() {
        return PROCESS_KILLED;
    }
    if is_process_pause(deployment, kind) {
        return PROCESS_PAUSED;
    }
    usize::try_from(kind)
        .ok()
        .and_then(|kind| kinds.get(kind))
        .copied()
        .unwrap_or("fault")
}

/// One fault of the schedule, held for a moment, then undone; the names of what it did.
pub(super) async fn inject(
    deployment: Option<&mut Deployment>,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    cycle: u64,
) -> anyhow::Result<&'static [&'static str]> {
    // A deployment the storm did not start gets the simulator's faults only.
    let Some(deployment) = deployment else {
        let window = shared.faults.open(WINDOW_KINDS[1]);
        arm_simulator_faults(shared, rng).await;
        shared.faults.close(window);
        return Ok(&SIMULATOR_FAULTS);
    };
    let replicated = deployment.is_replicated();
    let kinds = kinds(Some(deployment));
    let hold = Duration::from_millis(rng.u64(500..2000));
    let kind = cycle % kinds;
    if replicated {
        // Outside every window: what the last failover left down comes back first, so that
        // this fault (a second PostgreSQL failover above all) has a standby to promote.
        for (repaired, took) in deployment
            .repair_replicated()
            .await
            .context("repairing the replicated servers")?
        {
            tracing::info!(took = ?took, "replicated: {repaired}");
        }
        return match inject_replicated(deployment, shared, rng, kind, hold).await {
            Ok(done) => Ok(done),
            Err(error) => {
                // A server that would not fail over or restart as asked: logged, the deployment
                // brought back whole, and the run goes on (if that fails too, the run ends);
                // the audit then fails the run, which did not strike what it says it struck.
                tracing::error!("{error:#}; bringing every replicated server back");
                shared
                    .log()
                    .client
                    .faults_not_injected
                    .push(format!("{error:#}"));
                deployment
                    .restore_replicated()
                    .await
                    .context("bringing the replicated servers back after a failed fault")?;
                Ok(&[FAULT_FAILED])
            }
        };
    }
    let window = shared
        .faults
        .open(window_kind(deployment, &WINDOW_KINDS, kind));
    let done: anyhow::Result<&'static [&'static str]> = async {
        if is_process_pause(deployment, kind) {
            return pause_process(deployment, rng).await;
        }
        Ok(match kind {
            0 | 1 => common_fault(deployment, shared, rng, kind, hold).await?,
            2 => {
                deployment.cut_redis();
                tokio::time::sleep(hold).await;
                deployment.restore_redis();
                &["Redis cut off"]
            }
            3 => {
                deployment.cut_broker();
                tokio::time::sleep(hold).await;
                deployment.restore_broker();
                &["broker cut off"]
            }
            4 => {
                deployment.kill_database_connections().await?;
                &["database connections killed"]
            }
            5 => database_link_fault(deployment, DB_LATENCY, hold).await,
            6 => database_link_fault(deployment, DB_PARTITION, hold).await,
            _ => database_link_fault(deployment, DB_COMMIT_LOST, hold).await,
        })
    }
    .await;
    // Closed whatever happened: a window left open would excuse every later 5xx.
    shared.faults.close(window);
    done
}

/// Troubles the instances' database link as `kind` says ([`DB_LATENCY`], [`DB_PARTITION`] or
/// [`DB_COMMIT_LOST`]) for about `hold`, and clears it.
async fn database_link_fault(
    deployment: &Deployment,
    kind: &'static str,
    hold: Duration,
) -> &'static [&'static str] {
    match kind {
        DB_LATENCY => {
            deployment.trouble_database_link(LinkFault::Latency {
                latency: Duration::from_millis(300),
                jitter: Duration::from_millis(200),
            });
            tokio::time::sleep(hold * 2).await;
            deployment.trouble_database_link(LinkFault::None);
            &[DB_LATENCY]
        }
        DB_PARTITION => {
            deployment.trouble_database_link(LinkFault::Held);
            tokio::time::sleep(hold).await;
            deployment.trouble_database_link(LinkFault::None);
            &[DB_PARTITION]
        }
        _ => {
            deployment.trouble_database_link(LinkFault::CommitAnswersLost);
            tokio::time::sleep(hold).await;
            deployment.trouble_database_link(LinkFault::None);
            // The swallowed connections close within their own moment.
            tokio::time::sleep(SWALLOWED_FOR).await;
            &[DB_COMMIT_LOST]
        }
    }
}

/// One fault of the replicated stack's schedule (`kind` below [`FAULT_KINDS`]): the crash, the
/// simulator's faults, or a failover of one replicated server, in a window of its kind.
async fn inject_replicated(
    deployment: &mut Deployment,
    shared: &Shared,
    rng: &mut fastrand::Rng,
    kind: u64,
    hold: Duration,
) -> anyhow::Result<&'static [&'static str]> {
    let patroni = deployment.has_patroni();
    let kinds: &[&'static str] = if patroni {
        &HA_WINDOW_KINDS
    } else {
        &REPLICATED_WINDOW_KINDS
    };
    let name = window_kind(deployment, kinds, kind);
    let window = shared.faults.open(name);
    let started = Instant::now();
    let done: anyhow::Result<&'static [&'static str]> = async {
        if is_process_pause(deployment, kind) {
            return pause_process(deployment, rng).await;
        }
        Ok(match kind {
            0 | 1 => common_fault(deployment, shared, rng, kind, hold).await?,
            2 => {
                let port = deployment
                    .pg_failover(hold)
                    .await
                    .context("the PostgreSQL failover")?;
                tracing::info!(took = ?started.elapsed(), port, "replicated: {name}");
                if patroni {
                    &[PG_PATRONI_FAILOVER]
                } else {
                    &[PG_FAILOVER]
                }
            }
            3 => {
                let master = deployment
                    .redis_failover(rng.usize(..3))
                    .await
                    .context("the Redis failover")?;
                tracing::info!(took = ?started.elapsed(), master, "replicated: {REDIS_FAILOVER}");
                tokens_issued_again(deployment, shared, REDIS_FAILOVER).await;
                &[REDIS_FAILOVER]
            }
            4 => {
                deployment
                    .nats_outage(rng.usize(..3), hold)
                    .await
                    .context("the NATS node's outage")?;
                tracing::info!(took = ?started.elapsed(), "replicated: {NATS_OUTAGE}");
                &[NATS_OUTAGE]
            }
            13 | 14 => {
                let (partition, done) = if kind == 13 {
                    (RedisPartition::Isolated, REDIS_ISOLATED)
                } else {
                    (RedisPartition::Split, REDIS_SPLIT)
                };
                let master = deployment
                    .redis_partition(partition, rng.usize(..3))
                    .await
                    .context(done)?;
                tracing::info!(took = ?started.elapsed(), master, "replicated: {done}");
                tokens_issued_again(deployment, shared, done).await;
                if partition == RedisPartition::Isolated {
                    &[REDIS_ISOLATED]
                } else {
                    &[REDIS_SPLIT]
                }
            }
            11 => database_link_fault(deployment, DB_LATENCY, hold).await,
            12 => database_link_fault(deployment, DB_COMMIT_LOST, hold).await,
            8..=10 => {
                let (fault, done) = match kind {
                    8 => (PgNetFault::Isolated, PG_ISOLATED),
                    9 => (PgNetFault::Muted, PG_MUTED),
                    _ => (
                        PgNetFault::Lossy {
                            percent: LOSS_PERCENT,
                        },
                        PG_LOSSY,
                    ),
                };
                let printed = deployment
                    .pg_network_fault(fault, hold * 2)
                    .await
                    .context(done)?;
                tracing::info!(took = ?started.elapsed(), printed, "replicated: {done}");
                match fault {
                    PgNetFault::Isolated => &[PG_ISOLATED],
                    PgNetFault::Muted => &[PG_MUTED],
                    PgNetFault::Lossy { .. } => &[PG_LOSSY],
                }
            }
            _ => {
                let server = match kind {
                    5 => ServerRestart::Postgres,
                    6 => ServerRestart::Redis,
                    _ => ServerRestart::Nats,
                };
                let printed = deployment
                    .server_restart(server, hold)
                    .await
                    .context(name)?;
                tracing::info!(took = ?started.elapsed(), printed, "replicated: {name}");
                if server == ServerRestart::Redis {
                    tokens_issued_again(deployment, shared, name).await;
                }
                match server {
                    ServerRestart::Postgres if patroni => &[PG_PAUSE],
                    ServerRestart::Postgres => &[PG_RESTART],
                    ServerRestart::Redis => &[REDIS_RESTART],
                    ServerRestart::Nats => &[NATS_RESTART],
                }
            }
        })
    }
    .await;
    // Closed whatever happened: a window left open would excuse every later 5xx.
    shared.faults.close(window);
    done
}

/// How long every running instance has, after a Redis fault's script returned, to issue a
/// token again before its refusals count as violations.
const REDIS_RECOVERY_BOUND: Duration = Duration::from_secs(10);

/// Waits until every running instance issues a token, up to [`REDIS_RECOVERY_BOUND`]; an
/// instance that does not is recorded as a violation of fault `kind`. The probes are the
/// storm's own requests, not the workload's: they are neither counted nor timed.
async fn tokens_issued_again(deployment: &Deployment, shared: &Shared, kind: &str) {
    let started = Instant::now();
    let deadline = started + REDIS_RECOVERY_BOUND;
    let Some(tenant) = shared.tenants.first() else {
        return;
    };
    for (index, base) in shared.bases.iter().enumerate() {
        if !deployment.is_up(index) {
            continue;
        }
        loop {
            let issued = shared
                .http
                .post(format!("{base}/v1/tokens"))
                .bearer_auth(&tenant.api_key)
                .json(&json!({}))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|response| response.status() == reqwest::StatusCode::CREATED);
            if issued {
                break;
            }
            if Instant::now() >= deadline {
                tracing::error!(
                    instance = index,
                    bound = ?REDIS_RECOVERY_BOUND,
                    "issued no token within the bound after \"{kind}\""
                );
                shared.log().client.unexcused_errors.push(format!(
                    "instance {index} issued no token within {}s after \"{kind}\"",
                    REDIS_RECOVERY_BOUND.as_secs()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tracing::info!(took = ?started.elapsed(), "every instance issues tokens again after \"{kind}\"");
}

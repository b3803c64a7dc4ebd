//! CPU time per request, from the kernel's own accounting: on two cores the bench's clients,
//! the service and the database share the CPU, so the time each spends on a request decides
//! the throughput more than anything a wall clock shows.
//!
//! A [`CpuSample`] reads `/proc/<pid>/task/<tid>/schedstat` (nanoseconds on a CPU) of every
//! thread of this process and of every process of the servers the bench measures against. Each
//! is put in one [`CpuGroup`]: the service instances run on runtimes whose threads are named
//! [`SERVICE_THREAD`]; PostgreSQL's, MariaDB's or MySQL's processes (every backend and
//! background process) are the database; `redis-server`'s are Redis; and the rest of this
//! process's time (`/proc/self/stat`, which keeps what ended threads spent) is the bench's
//! clients' (and the in-process simulator's, idle in the wallet scenarios). Two samples around
//! a run give each group's time, divided by the requests answered. Linux only; elsewhere there
//! is no figure, never a wrong one.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// The name of every thread of a service instance's runtime (workers and blocking threads).
pub const SERVICE_THREAD: &str = "mideng-service";

/// Whether a thread's name, as the kernel keeps it (15 bytes) or as it was given, is a
/// service instance's.
pub(super) fn is_service_thread(name: &str) -> bool {
    name.starts_with(&SERVICE_THREAD[..SERVICE_THREAD.len().min(15)])
}

/// Where CPU time goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuGroup {
    /// The service instances' threads.
    Service,
    /// The bench's own threads: its clients (and the in-process simulator).
    Client,
    /// The SQL server's processes (PostgreSQL, MariaDB or MySQL).
    Database,
    /// Redis's processes.
    Redis,
}

impl CpuGroup {
    /// Every group, in report order.
    pub const ALL: [CpuGroup; 4] = [
        CpuGroup::Service,
        CpuGroup::Client,
        CpuGroup::Database,
        CpuGroup::Redis,
    ];

    /// The group's name in the report.
    pub fn label(self) -> &'static str {
        match self {
            CpuGroup::Service => "service",
            CpuGroup::Client => "client",
            CpuGroup::Database => "database",
            CpuGroup::Redis => "redis",
        }
    }

    /// The group of another process, by its command name; `None` for one the bench does not
    /// count.
    fn of_process(comm: &str) -> Option<CpuGroup> {
        match comm {
            "postgres" | "mariadbd" | "mysqld" => Some(CpuGroup::Database),
            "redis-server" => Some(CpuGroup::Redis),
            _ => None,
        }
    }

    /// The group of a thread of this process, by its name.
    fn of_own_thread(comm: &str) -> CpuGroup {
        if is_service_thread(comm) {
            CpuGroup::Service
        } else {
            CpuGroup::Client
        }
    }
}

/// CPU time so far of every thread of this process and of every server process, nanoseconds,
/// each with its group; and this process's whole time, dead threads' included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// Per thread of this process, per server process (its threads summed) and per server
    /// process's reaped children: the group and the time.
    tasks: BTreeMap<Task, (CpuGroup, u64)>,
    /// This process's user and system time and its reaped children's, from `/proc/self/stat`,
    /// nanoseconds: unlike the threads' own figures it keeps what threads that have ended
    /// spent (Tokio's blocking threads end after an idle while), and what a child such as
    /// pgbench spent once it was waited for.
    process_ns: Option<u64>,
}

/// What a time in a sample belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Task {
    /// A thread of this process.
    Own(u32),
    /// A server process, its threads summed.
    Process(u32),
    /// A server process's children that ended and were waited for: PostgreSQL's backends,
    /// once the postmaster reaped them (pgbench's connections end with it). A child alive at
    /// the first sample and reaped before the second counts whole; the bench's pools keep
    /// their connections through a scenario.
    Reaped(u32),
}

impl CpuSample {
    /// Reads the time so far of this process's threads and of the servers' processes.
    pub fn now() -> CpuSample {
        let mut sample = CpuSample {
            process_ns: read_process_ns(),
            ..CpuSample::default()
        };
        if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
            for task in tasks.flatten() {
                let path = task.path();
                let Some(tid) = task.file_name().to_str().and_then(|tid| tid.parse().ok()) else {
                    continue;
                };
                if let (Some(comm), Some(ns)) = (read_comm(&path), read_on_cpu_ns(&path)) {
                    sample
                        .tasks
                        .insert(Task::Own(tid), (CpuGroup::of_own_thread(&comm), ns));
                }
            }
        }
        let own = std::process::id();
        if let Ok(processes) = std::fs::read_dir("/proc") {
            for process in processes.flatten() {
                let Some(pid) = process
                    .file_name()
                    .to_str()
                    .and_then(|pid| pid.parse::<u32>().ok())
                else {
                    continue;
                };
                if pid == own {
                    continue;
                }
                let path = process.path();
                let Some(group) = read_comm(&path).and_then(|comm| CpuGroup::of_process(&comm))
                else {
                    continue;
                };
                if let Some(ns) = process_on_cpu_ns(&path) {
                    sample.tasks.insert(Task::Process(pid), (group, ns));
                }
                let reaped = std::fs::read_to_string(path.join("stat"))
                    .ok()
                    .and_then(|stat| parse_stat_ticks(&stat))
                    .map(|(_, children)| ticks_ns(children));
                if let Some(ns) = reaped {
                    sample.tasks.insert(Task::Reaped(pid), (group, ns));
                }
            }
        }
        sample
    }

    /// Time spent from `self` to `later` per group, nanoseconds: per thread or process alive
    /// at `later` (one born in between counts from zero). This process's threads that ended in
    /// between are in its whole time, which the service's threads are taken from: what is left
    /// is the clients'.
    fn spent(&self, later: &CpuSample) -> Option<BTreeMap<CpuGroup, u64>> {
        let (Some(before), Some(after)) = (self.process_ns, later.process_ns) else {
            return None;
        };
        let mut spent: BTreeMap<CpuGroup, u64> = BTreeMap::new();
        for (task, (group, ns)) in &later.tasks {
            let earlier = self.tasks.get(task).map_or(0, |(_, earlier)| *earlier);
            let total = spent.entry(*group).or_default();
            *total = total.saturating_add(ns.saturating_sub(earlier));
        }
        let service = spent.get(&CpuGroup::Service).copied().unwrap_or(0);
        spent.insert(
            CpuGroup::Client,
            after.saturating_sub(before).saturating_sub(service),
        );
        Some(spent)
    }

    /// Each group's time from `self` to `later` per request, microseconds; `None` when the
    /// accounting was unreadable or nothing was answered.
    pub fn per_request(&self, later: &CpuSample, requests: u64) -> Option<CpuPerRequest> {
        if requests == 0 {
            return None;
        }
        let spent = self.spent(later)?;
        let per =
            |group| spent.get(&group).copied().unwrap_or(0) as f64 / 1_000.0 / requests as f64;
        Some(CpuPerRequest {
            service_us: per(CpuGroup::Service),
            client_us: per(CpuGroup::Client),
            database_us: per(CpuGroup::Database),
            redis_us: per(CpuGroup::Redis),
        })
    }
}

/// CPU time per request answered, microseconds, per group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CpuPerRequest {
    /// The service instances.
    pub service_us: f64,
    /// The bench's clients (and the in-process simulator).
    pub client_us: f64,
    /// The SQL server, every process of it.
    pub database_us: f64,
    /// Redis.
    pub redis_us: f64,
}

impl CpuPerRequest {
    /// The group's figure.
    pub fn of(&self, group: CpuGroup) -> f64 {
        match group {
            CpuGroup::Service => self.service_us,
            CpuGroup::Client => self.client_us,
            CpuGroup::Database => self.database_us,
            CpuGroup::Redis => self.redis_us,
        }
    }

    /// All groups together: what one request cost the machine.
    pub fn total_us(&self) -> f64 {
        CpuGroup::ALL.iter().map(|group| self.of(*group)).sum()
    }

    /// The CPU-bound ceiling of the throughput on `cores` cores: requests per second if the
    /// cores did nothing but this.
    pub fn ceiling_per_second(&self, cores: usize) -> Option<f64> {
        let total = self.total_us();
        (total > 0.0).then(|| cores as f64 * 1_000_000.0 / total)
    }
}

/// This process's user and system time and its waited-for children's (`/proc/self/stat`),
/// nanoseconds.
fn read_process_ns() -> Option<u64> {
    parse_stat_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)
        .map(|(own, children)| ticks_ns(own.saturating_add(children)))
}

/// Clock ticks in nanoseconds: Linux's USER_HZ is 100 on every architecture it runs on.
fn ticks_ns(ticks: u64) -> u64 {
    ticks.saturating_mul(10_000_000)
}

/// (utime + stime, cutime + cstime) of a `stat` line, in clock ticks: fields 14 to 17. The
/// command name (field 2) may hold spaces and parentheses, so the fields are counted from the
/// last `)`.
fn parse_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state (field 3), ppid (4), … utime is field 14, the 12th here.
    let ticks: Vec<u64> = rest
        .split_ascii_whitespace()
        .skip(11)
        .take(4)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    match ticks[..] {
        [utime, stime, cutime, cstime] => {
            Some((utime.saturating_add(stime), cutime.saturating_add(cstime)))
        }
        _ => None,
    }
}

fn read_comm(path: &Path) -> Option<String> {
    let comm = std::fs::read_to_string(path.join("comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

/// The first field of `schedstat`: time on a CPU, nanoseconds.
fn read_on_cpu_ns(path: &Path) -> Option<u64> {
    parse_schedstat(&std::fs::read_to_string(path.join("schedstat")).ok()?)
}

/// A process's time: every thread's (a process's own schedstat is its main thread's only).
fn process_on_cpu_ns(path: &Path) -> Option<u64> {
    let tasks = std::fs::read_dir(path.join("task")).ok()?;
    let mut total = 0_u64;
    for task in tasks.flatten() {
        total = total.saturating_add(read_on_cpu_ns(&task.path()).unwrap_or(0));
    }
    Some(total)
}

fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

/// Time spent on a CPU by this thread so far (for tests: a busy loop shows).
#[cfg(test)]
fn own_thread_ns() -> Option<u64> {
    read_on_cpu_ns(Path::new("/proc/thread-self"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_gives_user_and_system_ticks_whatever_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 40 2 20 0 3 0";
        assert_eq!(parse_stat_ticks(line), Some((325, 42)));
        assert_eq!(parse_stat_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn schedstat_gives_the_time_on_cpu() {
        assert_eq!(
            parse_schedstat("557021492 1852040637 1357\n"),
            Some(557_021_492)
        );
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn work_on_a_named_service_thread_counts_as_the_services() {
        let before = CpuSample::now();
        if before.process_ns.is_none() {
            // Not Linux, or no schedstat: no figure, which per_request says.
            assert_eq!(before.per_request(&CpuSample::now(), 1), None);
            return;
        }
        // The thread stays alive until it has been sampled: an ended thread takes its time
        // with it.
        let (worked, done) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::Builder::new()
            .name(SERVICE_THREAD.to_owned())
            .spawn(move || {
                let start = own_thread_ns().unwrap_or(0);
                let mut x = 0_u64;
                while own_thread_ns().unwrap_or(u64::MAX) < start + 50_000_000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                let _ = worked.send(());
                let _ = released.recv();
                x
            })
            .expect("a thread");
        done.recv().expect("the thread worked");
        let cpu = before.per_request(&CpuSample::now(), 1).expect("readable");
        let _ = release.send(());
        let _ = worker.join();
        assert!(
            cpu.service_us >= 50_000.0,
            "50 ms of a service thread's work counts as the service's: {cpu:?}"
        );
        assert!(cpu.total_us() >= cpu.service_us);
    }

    #[test]
    fn the_ceiling_is_the_cores_divided_by_the_cost() {
        let cost = CpuPerRequest {
            service_us: 300.0,
            client_us: 100.0,
            database_us: 100.0,
            redis_us: 0.0,
        };
        assert_eq!(cost.total_us(), 500.0);
        assert_eq!(cost.ceiling_per_second(2), Some(4_000.0));
        assert_eq!(CpuPerRequest::default().ceiling_per_second(2), None);
    }
}

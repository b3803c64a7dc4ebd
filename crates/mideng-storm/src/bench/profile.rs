//! `mideng bench --profile DIR`: a flamegraph (SVG) of each scenario, sampled in this process by
//! a timer signal (SIGPROF through `setitimer`: no kernel perf events needed, so it works where
//! `perf` does not). The service instances run in the bench's process, on threads named
//! [`SERVICE_THREAD`](super::cpu::SERVICE_THREAD); the flamegraph's first level parts their
//! time from the bench's clients' (and the in-process simulator's), so the service's share is
//! the "service" tower.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::cpu::is_service_thread;

/// Samples per second per busy thread: a prime, so that the samples do not beat with periodic
/// work.
const FREQUENCY: i32 = 997;

/// Shared objects whose frames the sampler skips: unwinding through them inside a signal
/// handler can deadlock (pprof's advice), and the vDSO's unwind tables are unreliable.
const BLOCKLIST: [&str; 4] = ["libc", "libgcc", "pthread", "vdso"];

/// The flamegraphs of one bench run: at most one scenario sampled at a time.
pub(super) struct Profiler {
    dir: PathBuf,
    running: Option<(String, pprof::ProfilerGuard<'static>)>,
    /// The flamegraphs written, in order.
    pub(super) written: Vec<PathBuf>,
}

impl Profiler {
    /// Flamegraphs go to `dir` (created).
    pub(super) fn new(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            running: None,
            written: Vec::new(),
        })
    }

    /// Starts sampling for the scenario called `name` (a file name's stem); one still running
    /// is written first.
    pub(super) fn start(&mut self, name: String) -> anyhow::Result<()> {
        self.finish()?;
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(FREQUENCY)
            .blocklist(&BLOCKLIST)
            .build()
            .context("starting the profiler")?;
        self.running = Some((name, guard));
        Ok(())
    }

    /// Stops the running scenario's sampling and writes its flamegraph, `<name>.svg`; the
    /// path, or `None` when nothing was running or nothing was sampled.
    pub(super) fn finish(&mut self) -> anyhow::Result<Option<PathBuf>> {
        let Some((name, guard)) = self.running.take() else {
            return Ok(None);
        };
        let mut builder = guard.report();
        builder.frames_post_processor(|frames: &mut pprof::Frames| {
            frames.thread_name = thread_group(&frames.thread_name).to_owned();
        });
        let report = builder.build().context("the profiler's report")?;
        drop(guard);
        if report.data.is_empty() {
            return Ok(None);
        }
        let path = self.dir.join(format!("{name}.svg"));
        let file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut options = pprof::flamegraph::Options::default();
        options.title = format!("mideng bench · {name}");
        report
            .flamegraph_with_options(std::io::BufWriter::new(file), &mut options)
            .with_context(|| format!("writing {}", path.display()))?;
        self.written.push(path.clone());
        Ok(Some(path))
    }
}

/// A flamegraph's first level: the service, or the bench (its clients and the simulator).
fn thread_group(thread_name: &str) -> &'static str {
    if is_service_thread(thread_name) {
        "service"
    } else {
        "bench client and simulator"
    }
}

/// A scenario's flamegraph's name: `c16-deduct-distinct-wallets-on-first-time`.
pub(super) fn file_stem(concurrency: u16, scenario: &str) -> String {
    let mut stem = format!("c{concurrency}-");
    let mut dash = false;
    for character in scenario.chars() {
        if character.is_ascii_alphanumeric() {
            stem.push(character.to_ascii_lowercase());
            dash = false;
        } else if !dash {
            stem.push('-');
            dash = true;
        }
    }
    stem.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::super::cpu::SERVICE_THREAD;
    use super::*;

    #[test]
    fn service_threads_are_one_tower_and_the_rest_another() {
        assert_eq!(thread_group("mideng-service-"), "service");
        assert_eq!(thread_group("mideng-service"), "service");
        assert_eq!(
            thread_group("tokio-runtime-w"),
            "bench client and simulator"
        );
        assert_eq!(
            file_stem(16, "deduct, distinct wallets · machinery on · first-time"),
            "c16-deduct-distinct-wallets-machinery-on-first-time"
        );
    }

    #[test]
    fn a_busy_scenario_leaves_a_flamegraph_naming_its_work() {
        let dir = std::env::temp_dir().join(format!("mideng-profile-{}", std::process::id()));
        let mut profiler = Profiler::new(&dir).expect("a directory");
        profiler
            .start("busy".to_owned())
            .expect("the profiler starts");
        let worker = std::thread::Builder::new()
            .name(SERVICE_THREAD.to_owned())
            .spawn(|| {
                let started = std::time::Instant::now();
                let mut x = 0_u64;
                // 300 ms of work: about 300 samples at 997 per second.
                while started.elapsed() < std::time::Duration::from_millis(300) {
                    x = std::hint::black_box(
                        x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1),
                    );
                }
                x
            })
            .expect("a thread");
        let _ = worker.join();
        let written = profiler.finish().expect("the flamegraph is written");
        let svg = written
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(svg.contains("<svg"), "an SVG");
        assert!(
            svg.contains("<title>service ("),
            "the service's tower is named"
        );
        assert!(profiler.finish().expect("nothing running").is_none());
    }
}

//! The load loop: `concurrency` clients in a closed loop (each sends its next request as soon as
//! the last one is answered) until the time is up or the inputs run out, and what they counted.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cpu::{CpuPerRequest, CpuSample};
use super::report::Figures;

/// How one request went, judged by the scenario.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The answer the scenario expects.
    Done,
    /// The answer the scenario expects, marked as a replay (`Idempotent-Replayed: true`, or
    /// the dedup record for a notify).
    Replayed,
    /// A refusal the scenario expects (a repeated deduct refused by the ledger's constraint).
    Refused,
    /// Anything else: an error of the run.
    Failed(String),
}

/// What a load run counted.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) done: u64,
    pub(super) replayed: u64,
    pub(super) refused: u64,
    pub(super) failed: u64,
    pub(super) first_failure: Option<String>,
    latencies: Vec<Duration>,
    pub(super) elapsed: Duration,
    /// CPU time per request answered, once the run is over.
    pub(super) cpu: Option<CpuPerRequest>,
}

impl Tally {
    fn record(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Done => self.done += 1,
            Outcome::Replayed => self.replayed += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Failed(why) => {
                self.failed += 1;
                self.first_failure.get_or_insert(why);
            }
        }
        self.latencies.push(latency);
    }

    fn merge(&mut self, other: Tally) {
        self.done += other.done;
        self.replayed += other.replayed;
        self.refused += other.refused;
        self.failed += other.failed;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
        self.latencies.extend(other.latencies);
    }

    /// A failure outside any request (a worker that panicked).
    fn fail(&mut self, why: String) {
        self.failed += 1;
        self.first_failure.get_or_insert(why);
    }

    /// Counts `count` of the expected answers as replays (the notify path marks nothing in its
    /// answer; its dedup counter tells).
    pub(super) fn mark_replayed(&mut self, count: u64) {
        let moved = count.min(self.done);
        self.done -= moved;
        self.replayed += moved;
    }

    /// Requests answered (or failed).
    pub(super) fn requests(&self) -> u64 {
        self.done + self.replayed + self.refused + self.failed
    }

    /// Throughput and latency percentiles.
    pub(super) fn figures(&self) -> Figures {
        let seconds = self.elapsed.as_secs_f64();
        let requests = self.requests();
        let (p50_ms, p99_ms) = percentiles_ms(self.latencies.clone());
        Figures {
            requests,
            errors: self.failed,
            seconds,
            per_second: if seconds > 0.0 {
                requests as f64 / seconds
            } else {
                0.0
            },
            p50_ms,
            p99_ms,
            cpu: self.cpu,
        }
    }
}

/// The median and the 99th percentile of `latencies`, milliseconds (zero when there are none).
pub(super) fn percentiles_ms(mut latencies: Vec<Duration>) -> (f64, f64) {
    latencies.sort_unstable();
    (
        milliseconds(percentile(&latencies, 50)),
        milliseconds(percentile(&latencies, 99)),
    )
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The nearest-rank percentile of sorted latencies (zero when there are none).
fn percentile(sorted: &[Duration], per_cent: usize) -> Duration {
    let rank = (sorted.len() * per_cent).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// Runs `concurrency` clients for `duration`: each calls `step(client, iteration)` again and
/// again, timing it, until the time is up or `step` answers `None` (no input left). A request
/// in flight at the deadline is finished and counted; the elapsed time includes it.
pub(super) async fn drive<S, F>(concurrency: usize, duration: Duration, step: S) -> Tally
where
    S: Fn(usize, u64) -> F + Send + Sync + 'static,
    F: Future<Output = Option<Outcome>> + Send + 'static,
{
    let step = Arc::new(step);
    let cpu_before = CpuSample::now();
    let started = Instant::now();
    let deadline = started + duration;
    let clients: Vec<_> = (0..concurrency.max(1))
        .map(|client| {
            let step = step.clone();
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut iteration = 0_u64;
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let Some(outcome) = step(client, iteration).await else {
                        break;
                    };
                    tally.record(outcome, sent.elapsed());
                    iteration += 1;
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for client in clients {
        match client.await {
            Ok(tally) => total.merge(tally),
            Err(error) => total.fail(format!("a client task ended: {error}")),
        }
    }
    total.elapsed = started.elapsed();
    total.cpu = cpu_before.per_request(&CpuSample::now(), total.requests());
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&sorted, 50), Duration::from_millis(50));
        assert_eq!(percentile(&sorted, 99), Duration::from_millis(99));
        assert_eq!(percentile(&sorted[..1], 99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[test]
    fn replays_are_moved_from_the_expected_answers() {
        let mut tally = Tally {
            done: 3,
            ..Tally::default()
        };
        tally.mark_replayed(5);
        assert_eq!((tally.done, tally.replayed), (0, 3));
    }
}

//! The load loops, and what they counted: `concurrency` clients in a closed loop (each sends its
//! next request as soon as the last one is answered) until the time is up or the inputs run
//! out; and the open loop, requests sent on a fixed schedule whatever the answers do, each
//! one's latency counted from when it was due.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

    /// The latency below which `per_mille` thousandths of the requests were answered,
    /// milliseconds (nearest rank; zero when there were none).
    pub(super) fn latency_ms(&self, per_mille: usize) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        milliseconds(quantile(&sorted, per_mille))
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
    quantile(sorted, per_cent.saturating_mul(10))
}

/// The nearest-rank quantile of sorted latencies, in thousandths (zero when there are none).
fn quantile(sorted: &[Duration], per_mille: usize) -> Duration {
    let rank = sorted.len().saturating_mul(per_mille).div_ceil(1000).max(1);
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

/// How a scenario's requests are sent.
#[derive(Clone, Copy, Debug)]
pub(super) enum Load {
    /// `clients` in a closed loop ([`drive`]).
    Closed { clients: usize },
    /// `per_second` requests a second on a schedule, spread over `slots` inputs (a scenario's
    /// wallets) ([`drive_open`]).
    Open { per_second: f64, slots: usize },
}

impl Load {
    /// Runs `step` under this load for `duration`.
    pub(super) async fn drive<S, F>(self, duration: Duration, step: S) -> Tally
    where
        S: Fn(usize, u64) -> F + Send + Sync + 'static,
        F: Future<Output = Option<Outcome>> + Send + 'static,
    {
        match self {
            Load::Closed { clients } => drive(clients, duration, step).await,
            Load::Open { per_second, slots } => drive_open(per_second, slots, duration, step).await,
        }
    }
}

/// Open-loop requests are numbered from here, so that the order ids of a scenario's open-loop
/// run never meet those of its closed-loop run.
pub(super) const OPEN_LOOP_ITERATIONS_FROM: u64 = 1 << 32;

/// The most open-loop requests in flight at once: past it, the schedule waits for an answer
/// (and the wait counts in the latency of the requests it delays).
const OPEN_LOOP_IN_FLIGHT_MAX: usize = 1024;

/// Sends `per_second` requests a second for `duration`, on a schedule kept by a thread of its
/// own (a sleeping thread wakes within tens of microseconds; the runtime's timer ticks in
/// milliseconds), whatever the answers do: request `i` is due `i / per_second` after the start
/// and calls `step(i % slots, OPEN_LOOP_ITERATIONS_FROM + i / slots)`. Each latency counts from
/// when its request was due, so that a slow answer delays no measurement (the closed loop's
/// coordinated omission). Ends early when `step` answers `None`.
pub(super) async fn drive_open<S, F>(
    per_second: f64,
    slots: usize,
    duration: Duration,
    step: S,
) -> Tally
where
    S: Fn(usize, u64) -> F + Send + Sync + 'static,
    F: Future<Output = Option<Outcome>> + Send + 'static,
{
    let slots = slots.max(1);
    let interval = Duration::from_secs_f64(1.0 / per_second.max(1.0));
    let step = Arc::new(step);
    let runtime = tokio::runtime::Handle::current();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(OPEN_LOOP_IN_FLIGHT_MAX));
    let exhausted = Arc::new(AtomicBool::new(false));
    let (sent, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let cpu_before = CpuSample::now();
    let started = Instant::now();
    let end = started + duration;
    let pacer = {
        let exhausted = exhausted.clone();
        std::thread::Builder::new()
            .name("bench-pacer".to_owned())
            .spawn(move || {
                let mut due = started;
                let mut index: u64 = 0;
                while due < end && !exhausted.load(Ordering::Acquire) {
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let Ok(permit) = runtime.block_on(in_flight.clone().acquire_owned()) else {
                        break;
                    };
                    let slot = usize::try_from(index).unwrap_or(usize::MAX) % slots;
                    let iteration = OPEN_LOOP_ITERATIONS_FROM + index / slots as u64;
                    let (step, exhausted) = (step.clone(), exhausted.clone());
                    let task = runtime.spawn(async move {
                        let outcome = step(slot, iteration).await;
                        let latency = due.elapsed();
                        drop(permit);
                        if outcome.is_none() {
                            exhausted.store(true, Ordering::Release);
                        }
                        outcome.map(|outcome| (outcome, latency))
                    });
                    if sent.send(task).is_err() {
                        break;
                    }
                    index += 1;
                    due =
                        started + interval.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
                }
            })
    };
    let mut total = Tally::default();
    if let Err(error) = pacer {
        total.fail(format!("the pacing thread did not start: {error}"));
        return total;
    }
    while let Some(task) = answers.recv().await {
        match task.await {
            Ok(Some((outcome, latency))) => total.record(outcome, latency),
            Ok(None) => {}
            Err(error) => total.fail(format!("a request task ended: {error}")),
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
    fn quantiles_are_nearest_rank_in_thousandths() {
        let sorted: Vec<Duration> = (1..=2000).map(Duration::from_micros).collect();
        assert_eq!(quantile(&sorted, 999), Duration::from_micros(1998));
        assert_eq!(quantile(&sorted, 500), Duration::from_micros(1000));
        assert_eq!(quantile(&sorted[..10], 999), Duration::from_micros(10));
    }

    /// The schedule holds whatever the answers do: requests that take ten intervals each are
    /// still sent one an interval, where the closed loop would wait for them; each latency
    /// counts from its due time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_open_loop_keeps_its_schedule_while_answers_are_slow() {
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = calls.clone();
        let tally = drive_open(
            200.0,
            4,
            Duration::from_millis(500),
            move |slot, iteration| {
                let seen = seen.clone();
                async move {
                    seen.lock().expect("the calls").push((slot, iteration));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some(Outcome::Done)
                }
            },
        )
        .await;
        // 200 a second for half a second: 100 sent, though each answer took ten intervals.
        assert_eq!(tally.requests(), 100, "{tally:?}");
        assert!(tally.latency_ms(500) >= 50.0);
        let calls = calls.lock().expect("the calls").clone();
        assert_eq!(calls[0], (0, OPEN_LOOP_ITERATIONS_FROM));
        assert_eq!(calls[5], (1, OPEN_LOOP_ITERATIONS_FROM + 1));
        // The closed loop over the same half second, four clients: four at a time, ~40.
        let closed = drive(4, Duration::from_millis(500), |_, _| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some(Outcome::Done)
        })
        .await;
        assert!(closed.requests() < 60, "{closed:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_open_loop_ends_when_its_inputs_do() {
        let tally = drive_open(
            1000.0,
            2,
            Duration::from_secs(30),
            |_, iteration| async move {
                (iteration < OPEN_LOOP_ITERATIONS_FROM + 5).then_some(Outcome::Done)
            },
        )
        .await;
        assert!(tally.requests() >= 10, "{tally:?}");
        assert!(tally.elapsed < Duration::from_secs(5), "{tally:?}");
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

//! When the workload ends: `--duration-secs` after it started, or later while the fault
//! schedule still owes rounds (`--fault-rounds`). Every client reads it before each script, the
//! fault schedule moves it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How far ahead of now the end is held while a fault round is owed: longer than the slowest
/// fault (a failover and its repair), so that no client stops between two faults.
const HELD_AHEAD: Duration = Duration::from_secs(90);

/// The workload's end, shared by the clients and the fault schedule.
#[derive(Clone, Debug)]
pub(crate) struct WorkloadEnd {
    origin: Instant,
    /// The planned end, `--duration-secs` after `origin`.
    planned: Duration,
    /// The latest end the schedule may hold: twice the planned duration.
    latest: Duration,
    /// The end now, in milliseconds after `origin`.
    now_ms: Arc<AtomicU64>,
}

impl WorkloadEnd {
    /// The end `duration` after `origin`.
    pub(crate) fn new(origin: Instant, duration: Duration) -> Self {
        Self {
            origin,
            planned: duration,
            latest: duration.saturating_mul(2),
            now_ms: Arc::new(AtomicU64::new(super::faults::millis(duration))),
        }
    }

    /// When the workload ends, as things stand.
    pub(crate) fn at(&self) -> Instant {
        self.origin + Duration::from_millis(self.now_ms.load(Ordering::Acquire))
    }

    /// Whether the workload has ended.
    pub(crate) fn passed(&self) -> bool {
        Instant::now() >= self.at()
    }

    /// How long the workload has left.
    pub(crate) fn left(&self) -> Duration {
        self.at().saturating_duration_since(Instant::now())
    }

    /// A fault round is still owed: the end is held [`HELD_AHEAD`] of now, never past twice
    /// the planned duration. False when that bound is reached (the round is not finished).
    pub(crate) fn hold(&self) -> bool {
        let wanted = self.origin.elapsed().saturating_add(HELD_AHEAD);
        let held = wanted.min(self.latest).max(self.planned);
        self.now_ms
            .fetch_max(super::faults::millis(held), Ordering::AcqRel);
        self.origin.elapsed() < self.latest
    }

    /// No round owed any more: the end is the planned one, or now if that has passed.
    pub(crate) fn release(&self) {
        let end = self.origin.elapsed().max(self.planned);
        self.now_ms
            .store(super::faults::millis(end), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An origin `ago` before now. The test's moments are placed by origin, never by sleeping,
    /// so that a busy machine's scheduling cannot move them: every margin is minutes.
    fn started(ago: Duration) -> Instant {
        Instant::now()
            .checked_sub(ago)
            .expect("the machine has been up longer than the test's origins")
    }

    #[test]
    fn an_owed_round_holds_the_end_until_released_and_never_past_twice_the_plan() {
        let plan = Duration::from_secs(600);
        let fresh = WorkloadEnd::new(started(Duration::ZERO), plan);
        assert!(!fresh.passed());
        // Ten minutes and a half in: the planned end passed.
        let origin = started(Duration::from_secs(630));
        let end = WorkloadEnd::new(origin, plan);
        assert!(end.passed(), "the planned end passed");
        // Held: the end moves ahead of now by HELD_AHEAD, not past twice the plan.
        assert!(
            end.hold(),
            "a round may still be finished before twenty minutes"
        );
        let ahead = end.at().saturating_duration_since(Instant::now());
        assert!(
            ahead > HELD_AHEAD - Duration::from_secs(30) && ahead <= HELD_AHEAD,
            "held {ahead:?} ahead"
        );
        assert!(!end.passed());
        // Near twice the plan: held only up to it.
        let late = WorkloadEnd::new(started(Duration::from_secs(1_180)), plan);
        assert!(late.hold());
        assert_eq!(late.at(), late.origin + plan * 2);
        // Past twice the plan: the round is given up, and the end has passed.
        let over = WorkloadEnd::new(started(Duration::from_secs(1_300)), plan);
        assert!(
            !over.hold(),
            "twice the plan reached: the round is given up"
        );
        assert!(over.passed());
        // Released before the plan: the plan stands; after it: the workload ends now.
        let long = WorkloadEnd::new(started(Duration::ZERO), plan);
        assert!(long.hold());
        long.release();
        assert!(long.left() > Duration::from_secs(500), "the plan stands");
        let released = WorkloadEnd::new(started(Duration::from_secs(700)), plan);
        assert!(released.hold());
        released.release();
        assert!(released.passed(), "released after the plan: it ends now");
    }
}

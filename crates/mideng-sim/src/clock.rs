//! The simulator's clock: channel time that runs `speed` times faster than real time and can be
//! advanced by hand.
//!
//! Every channel timer — trade expiry, the notify retry schedules, WeChat Pay's timestamp
//! window — is measured on this clock, so a test can run a channel day in seconds. Channel time
//! starts at the host's wall clock, so that with speed 1 and no advance it is real time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Channel time in Unix milliseconds, derived from a monotonic real clock.
#[derive(Debug)]
pub(crate) struct SimClock {
    /// The real instant channel time was anchored at.
    started: Instant,
    /// Channel time at `started`, Unix milliseconds.
    started_channel_ms: i64,
    /// Channel seconds per real second.
    speed: u32,
    /// Sum of all explicit advances, milliseconds. Atomic so that reading the clock never takes
    /// a lock.
    advanced_ms: AtomicI64,
}

impl SimClock {
    /// A clock starting at the host's wall-clock time.
    pub(crate) fn new(speed: u32) -> Self {
        Self {
            started: Instant::now(),
            started_channel_ms: wall_clock_ms(),
            speed: speed.max(1),
            advanced_ms: AtomicI64::new(0),
        }
    }

    /// Channel seconds per real second.
    pub(crate) fn speed(&self) -> u32 {
        self.speed
    }

    /// Channel time now, Unix milliseconds.
    pub(crate) fn now_ms(&self) -> i64 {
        let real_micros = i128::try_from(self.started.elapsed().as_micros()).unwrap_or(i128::MAX);
        let scaled_ms = real_micros.saturating_mul(i128::from(self.speed)) / 1000;
        let scaled_ms = i64::try_from(scaled_ms).unwrap_or(i64::MAX);
        self.started_channel_ms
            .saturating_add(scaled_ms)
            .saturating_add(self.advanced_ms.load(Ordering::Acquire))
    }

    /// Moves channel time forward by `seconds`.
    pub(crate) fn advance(&self, seconds: u64) {
        let milliseconds = i64::try_from(seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        self.advanced_ms.fetch_add(milliseconds, Ordering::AcqRel);
    }

    /// How long, in real time, until channel time reaches `channel_ms` (zero if it has).
    pub(crate) fn real_time_until(&self, channel_ms: i64) -> Duration {
        let remaining_ms = channel_ms.saturating_sub(self.now_ms());
        if remaining_ms <= 0 {
            return Duration::ZERO;
        }
        let remaining_ms = u64::try_from(remaining_ms).unwrap_or(u64::MAX);
        let real_micros = remaining_ms
            .saturating_mul(1000)
            .div_ceil(u64::from(self.speed));
        Duration::from_micros(real_micros)
    }
}

/// The host's wall clock, Unix milliseconds.
pub(crate) fn wall_clock_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_runs_ahead_and_advances_add_up() {
        let clock = SimClock::new(3600);
        let start = clock.now_ms();
        std::thread::sleep(Duration::from_millis(20));
        let elapsed_ms = clock.now_ms() - start;
        assert!(elapsed_ms >= 72_000, "20 ms real is at least 72 s channel");
        clock.advance(3600);
        assert!(clock.now_ms() - start >= 3_672_000);
    }

    #[test]
    fn real_time_until_scales_by_the_speed() {
        let clock = SimClock::new(1000);
        let target = clock.now_ms() + 10_000;
        let real = clock.real_time_until(target);
        assert!(real <= Duration::from_millis(10) && real > Duration::from_millis(5));
        assert_eq!(clock.real_time_until(clock.now_ms() - 1), Duration::ZERO);
    }
}

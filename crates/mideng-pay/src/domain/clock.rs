//! Time, as the service sees it: one clock for the flows, the workers and the store, the wall
//! clock in production, a clock a test or the storm can set. Nothing else reads the time.
//!
//! [`ClockReading`] is the rule that compares it with the database's clock, the one clock every
//! instance shares: leases, expiries and signatures are judged by clocks of different machines,
//! and an instance whose clock is off by more than a bound must stop acting on it.

/// The one source of "now".
pub trait Clock: Send + Sync {
    /// Unix milliseconds, now.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        mideng::clock::now_ms()
    }
}

/// One comparison of this instance's clock with the database's: how far ahead this clock is
/// (negative: behind), and how much of that the round trip could hide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// This clock minus the database's, in milliseconds, at the midpoint of the round trip.
    pub skew_ms: i64,
    /// Half the round trip, plus the database clock's own millisecond: the skew is known to
    /// this much.
    pub uncertainty_ms: i64,
}

impl ClockReading {
    /// The reading of a question sent at `sent_ms` and answered at `received_ms` (both by this
    /// clock), to which the database answered `database_ms`.
    pub fn of(sent_ms: i64, database_ms: i64, received_ms: i64) -> Self {
        let half_trip = received_ms.saturating_sub(sent_ms).max(0) / 2;
        Self {
            skew_ms: sent_ms
                .saturating_add(half_trip)
                .saturating_sub(database_ms),
            uncertainty_ms: half_trip.saturating_add(1),
        }
    }

    /// Whether this clock is off by more than `max_ms` whatever the round trip hid (a slow
    /// answer never condemns a good clock).
    pub fn off_by_more_than(&self, max_ms: i64) -> bool {
        self.skew_ms
            .saturating_abs()
            .saturating_sub(self.uncertainty_ms)
            > max_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_is_off_only_when_the_round_trip_cannot_explain_it() {
        // Ahead by 7 s, asked and answered within 10 ms.
        let ahead = ClockReading::of(1_000_000 + 7_000, 1_000_005, 1_000_010 + 7_000);
        assert_eq!(ahead.skew_ms, 7_000);
        assert!(ahead.off_by_more_than(5_000));
        assert!(!ahead.off_by_more_than(10_000));
        // Behind just as much.
        let behind = ClockReading::of(1_000_000 - 7_000, 1_000_005, 1_000_010 - 7_000);
        assert_eq!(behind.skew_ms, -7_000);
        assert!(behind.off_by_more_than(5_000));
        // A good clock behind a slow answer: 12 s round trip, the database read in the middle.
        let slow = ClockReading::of(0, 6_000, 12_000);
        assert_eq!(slow.skew_ms, 0);
        assert!(!slow.off_by_more_than(0));
        // The database answered at the very start of a 12 s round trip: 6 s off at the
        // midpoint, all of it within what the trip hides.
        let early = ClockReading::of(0, 0, 12_000);
        assert!(!early.off_by_more_than(0));
        // A clock that went back between sending and receiving counts no round trip.
        let backwards = ClockReading::of(5_000, 0, 4_000);
        assert_eq!(backwards.uncertainty_ms, 1);
        assert!(backwards.off_by_more_than(4_000));
        // Extreme values saturate instead of overflowing.
        assert!(ClockReading::of(i64::MAX, i64::MIN, i64::MAX).off_by_more_than(0));
    }
}

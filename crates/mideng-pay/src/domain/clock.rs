//! Time, as the service sees it: one clock for the flows, the workers and the store, the wall
//! clock in production, a clock a test or the storm can set. Nothing else reads the time.

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

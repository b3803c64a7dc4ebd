//! The clock guard: an instance whose clock disagrees with the database's by more than
//! [`crate::flows::PaymentSettings::clock_skew_max`] stops acting on it.
//!
//! Leases (idempotency records, the order lock), payment expiries and their grace, webhook and
//! channel signatures are all judged by clocks of different machines. An instance whose clock
//! is far off takes over keys others still work on, closes payments the channel still accepts
//! and signs requests the channel refuses (measured in docs/limits.md). So each instance
//! compares its clock with the database's — the one clock they all share — when it starts and
//! then every [`CHECK_INTERVAL`]; while it is off, the API answers 503 `clock-unsynchronised`
//! (the client retries elsewhere), readiness fails, and reconciliation and webhook deliveries
//! wait. A database that cannot be asked leaves the last verdict standing.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use mideng::StoreError;

use crate::domain::clock::ClockReading;
use crate::flows::Ports;

/// How often a running instance compares its clock with the database's.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The last verdict on this instance's clock, shared by the API and the workers.
#[derive(Debug)]
pub struct ClockGuard {
    /// The bound, in milliseconds; 0: the guard is off.
    max_ms: i64,
    off: AtomicBool,
    skew_ms: AtomicI64,
}

impl ClockGuard {
    /// A guard refusing past `max` (zero: never), trusting the clock until its first reading.
    pub fn new(max: Duration) -> Self {
        Self {
            max_ms: i64::try_from(max.as_millis()).unwrap_or(i64::MAX),
            off: AtomicBool::new(false),
            skew_ms: AtomicI64::new(0),
        }
    }

    /// Whether this instance must not act on its clock now.
    pub fn refuses(&self) -> bool {
        self.off.load(Ordering::Relaxed)
    }

    /// The last skew measured (this clock minus the database's), in milliseconds.
    pub fn skew_ms(&self) -> i64 {
        self.skew_ms.load(Ordering::Relaxed)
    }

    /// Takes `reading` as the verdict; whether it changed the verdict.
    pub fn record(&self, reading: ClockReading) -> bool {
        let off = self.max_ms > 0 && reading.off_by_more_than(self.max_ms);
        self.skew_ms.store(reading.skew_ms, Ordering::Relaxed);
        self.off.swap(off, Ordering::Relaxed) != off
    }
}

/// Compares the service's clock with the database's once, records the verdict, and logs and
/// counts a change of it.
pub async fn check(ports: &Ports) -> Result<ClockReading, StoreError> {
    let sent_ms = ports.clock.now_ms();
    let database_ms = ports.store.backend.database_time_ms().await?;
    let reading = ClockReading::of(sent_ms, database_ms, ports.clock.now_ms());
    let guard = &ports.clock_guard;
    let changed = guard.record(reading);
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(crate::metrics::CLOCK_SKEW).set(reading.skew_ms as f64 / 1000.0);
    if changed && guard.refuses() {
        tracing::error!(
            skew_ms = reading.skew_ms,
            uncertainty_ms = reading.uncertainty_ms,
            max_ms = guard.max_ms,
            "this instance's clock disagrees with the database's: refusing requests until it agrees"
        );
    } else if changed {
        tracing::warn!(
            skew_ms = reading.skew_ms,
            "this instance's clock agrees with the database's again"
        );
    }
    Ok(reading)
}

/// Checks every [`CHECK_INTERVAL`] until `stop` turns true.
pub async fn run(ports: Ports, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        if let Err(error) = check(&ports).await {
            tracing::warn!(%error, "could not compare the clock with the database's");
        }
        tokio::select! {
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

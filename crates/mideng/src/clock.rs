//! Wall-clock time as Unix milliseconds, the unit every store persists.
//!
//! Times are stored as integers so that the three SQL dialects and Redis agree on them without
//! time-zone or precision conversions. Leases compare times written by different processes, so
//! instances must keep their clocks synchronised (NTP); the owner check on `complete` keeps a
//! skewed clock from corrupting a record, at worst it lets a take-over happen early.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A duration in whole milliseconds as the signed integer the stores use, saturating.
pub fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

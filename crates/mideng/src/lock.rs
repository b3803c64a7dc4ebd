//! Distributed locks with owner-checked release and fencing tokens.
//!
//! A lock is held by an owner nonce until its time-to-live runs out. Release and renewal only
//! act when the caller is still the owner, so a holder whose lock expired cannot release the
//! next holder's lock (the flaw of a plain `DEL`). Every acquisition gets a fence strictly
//! greater than all earlier ones for that name; a lock alone is not safe across pauses and
//! failovers, so the database that applies the guarded effect should refuse a fence lower
//! than one it has seen.
//!
//! What a store keeps is bounded by what is held, not by every name ever locked: a lock's
//! entry goes when it is released or its time runs out, and fences come from
//! [`FENCE_SLOTS`] counters shared by the names that hash to them ([`fence_slot`]; the memory
//! store has one counter for all). A counter only grows, so every name's fences keep growing
//! although its own entry is forgotten; they are not consecutive for one name. Every store's
//! next fence is also at least the time in microseconds ([`next_fence`]), so a fence kept
//! beside the guarded data is not undercut by a store that lost its counters.
//!
//! Where a write follows the lock, the write carries the guard's fence and the data refuses a
//! fence lower than the highest it has seen (the service keeps it in the order's row): a holder
//! paused past its lease, whose lock was taken over, cannot write over the next holder's work.
//! [`keep_alive`] renews a long holder's lease while it works, up to a bound.
//!
//! Waiting is by polling with capped back-off: "wait briefly, then re-check state", never a
//! long queue. The wait is bounded by [`crate::limits::LOCK_WAIT_MS_MAX`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use sha2::{Digest, Sha256};

use crate::error::{InvalidInput, StoreError};
use crate::key::Name;
use crate::limits::{LEASE_MS_MAX, LEASE_MS_MIN, LOCK_WAIT_MS_MAX};

/// A held lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockGuard {
    /// The lock's name.
    pub name: Name,
    /// This holder's nonce.
    pub owner: String,
    /// Fencing token: strictly greater than the fence of every earlier holder of this name.
    pub fence: u64,
    /// When the lock runs out unless renewed (Unix ms).
    pub held_until_ms: i64,
}

/// How many fence counters a shared store (SQL, Redis) keeps, whatever the number of names.
pub const FENCE_SLOTS: u16 = 1024;

/// The fence counter of `name`: a stable hash of the name, below [`FENCE_SLOTS`].
pub fn fence_slot(name: &Name) -> u16 {
    let digest = Sha256::digest(name.as_str().as_bytes());
    u16::from_be_bytes([digest[0], digest[1]]) % FENCE_SLOTS
}

/// The fence after `last` when the clock reads `now_ms`: one more than `last`, and never below
/// the time in microseconds. A store that lost its counters (a memory store in a new process,
/// a Redis without its data) therefore starts above every fence it gave before, unless the
/// clock went back, and a fence stored beside the guarded data stays meaningful across such a
/// loss.
pub fn next_fence(last: u64, now_ms: i64) -> u64 {
    last.saturating_add(1).max(fence_floor(now_ms))
}

/// The lowest fence a store hands out when the clock reads `now_ms`: the time in microseconds.
pub fn fence_floor(now_ms: i64) -> u64 {
    u64::try_from(now_ms).unwrap_or(0).saturating_mul(1000)
}

/// Checks a lock time-to-live and returns it in milliseconds.
pub(crate) fn ttl_ms(ttl: Duration) -> Result<i64, InvalidInput> {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if !(LEASE_MS_MIN..=LEASE_MS_MAX).contains(&ttl_ms) {
        return Err(InvalidInput::OutOfRange {
            what: "lock time-to-live",
            min_ms: LEASE_MS_MIN,
            max_ms: LEASE_MS_MAX,
        });
    }
    Ok(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

/// First pause between attempts while waiting for a lock.
const POLL_MS_FIRST: u64 = 5;
/// Longest pause between attempts: short, since the holder is usually done within milliseconds.
const POLL_MS_CAP: u64 = 50;

/// Storage of locks.
#[async_trait]
pub trait LockStore: Send + Sync {
    /// Takes the lock if it is free or its holder's time ran out; `None` if it is held.
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError>;

    /// Releases the lock if `guard` still owns it; returns whether it did. Releasing a lock
    /// someone else now holds has no effect.
    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError>;

    /// Extends the lock to `ttl` from now if `guard` still owns it; returns whether it did.
    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError>;

    /// Forgets at most `limit` locks whose time ran out before `now_ms` (their holders never
    /// released them); returns how many. Stores whose locks go by themselves (memory, Redis)
    /// have nothing to do and return 0.
    async fn purge_expired_locks(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _ = (now_ms, limit);
        Ok(0)
    }

    /// Takes the lock, retrying with capped back-off for at most `wait` (itself at most
    /// [`LOCK_WAIT_MS_MAX`]); `None` when the wait ran out. Callers then re-check the state
    /// they wanted to change rather than report a failure.
    async fn acquire(
        &self,
        name: &Name,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        if wait > Duration::from_millis(LOCK_WAIT_MS_MAX) {
            return Err(InvalidInput::OutOfRange {
                what: "lock wait",
                min_ms: 0,
                max_ms: LOCK_WAIT_MS_MAX,
            }
            .into());
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause_ms = POLL_MS_FIRST;
        loop {
            if let Some(guard) = self.try_acquire(name, ttl).await? {
                return Ok(Some(guard));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let pause = Duration::from_millis(pause_ms).min(deadline - now);
            tokio::time::sleep(pause).await;
            pause_ms = (pause_ms * 2).min(POLL_MS_CAP);
        }
    }
}

/// A lease renewed in the background while its holder works ([`keep_alive`]). Dropping it stops
/// the renewals; the lock then runs out at the end of its last lease unless released.
#[derive(Debug)]
pub struct KeepAlive {
    held: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeepAlive {
    /// Whether every renewal so far succeeded and the longest hold has not been reached. `false`
    /// means the lock may be someone else's by now: the holder should stop, and its writes,
    /// which carry the fence, are refused anyway once the next holder has written.
    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Renews `guard`'s lock to `ttl` every third of `ttl` while the returned [`KeepAlive`] lives,
/// for at most `max_hold` from now (a holder stuck in a loop must not keep the lock for ever;
/// `max_hold` is itself at most [`LEASE_MS_MAX`]). The first renewal that fails, or that finds
/// the lock no longer this guard's, ends the renewals and [`KeepAlive::held`] turns `false`;
/// so does reaching `max_hold`. It renews on the runtime of the caller.
pub fn keep_alive(
    store: Arc<dyn LockStore>,
    guard: LockGuard,
    ttl: Duration,
    max_hold: Duration,
) -> Result<KeepAlive, InvalidInput> {
    ttl_ms(ttl)?;
    let max_hold = max_hold.min(Duration::from_millis(LEASE_MS_MAX));
    let held = Arc::new(AtomicBool::new(true));
    let flag = Arc::clone(&held);
    let task = tokio::spawn(async move {
        let until = tokio::time::Instant::now() + max_hold;
        let every = ttl / 3;
        loop {
            let next = tokio::time::Instant::now() + every;
            if next >= until {
                // The last lease runs out on its own; the holder learns it from `held`.
                tokio::time::sleep_until(until).await;
                break;
            }
            tokio::time::sleep_until(next).await;
            match store.renew(&guard, ttl).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(lock = %guard.name, fence = guard.fence, "lock lost before its holder finished");
                    break;
                }
                Err(error) => {
                    tracing::warn!(lock = %guard.name, %error, "lock renewal failed; the holder may lose it");
                    break;
                }
            }
        }
        flag.store(false, Ordering::Release);
    });
    Ok(KeepAlive { held, task })
}

//! The simulator's whole mutable state behind one lock: trades and ledger, the notify queue,
//! the armed faults.
//!
//! One lock, held for one whole operation and never across an `.await`, is what makes every
//! transition atomic (a close and a payment of the same trade cannot interleave) and keeps a
//! trade's notifies in the order of its events. Each operation first *settles* the world to the
//! clock: trades whose expiry has passed are closed before anyone can observe them, so an
//! answer is always consistent with the channel time it was given at. The critical sections are
//! short (map look-ups, at most one AES encryption); signing and HTTP happen outside.

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;

use crate::config::SimConfig;
use crate::faults::Faults;
use crate::notify::payload::notify_for_event;
use crate::notify::queue::NotifyQueue;
use crate::trades::{TradeBook, TradeEvent};

/// Trades, notifies and faults.
#[derive(Debug, Default)]
pub(crate) struct World {
    pub(crate) trades: TradeBook,
    pub(crate) notifies: NotifyQueue,
    pub(crate) faults: Faults,
}

impl World {
    /// Closes expired trades (queuing their notifies).
    pub(crate) fn settle(&mut self, config: &SimConfig, now_ms: i64) {
        let events = self.trades.expire_due_trades(now_ms);
        self.publish(config, events, now_ms);
    }

    /// Queues the notifies of `events`.
    pub(crate) fn publish(
        &mut self,
        config: &SimConfig,
        events: impl IntoIterator<Item = TradeEvent>,
        now_ms: i64,
    ) {
        for event in events {
            let Some(trade) = self.trades.find_trade(&event.out_trade_no) else {
                continue;
            };
            if let Some(notify) = notify_for_event(config, trade, event.kind, now_ms) {
                self.notifies.enqueue(notify, now_ms);
            }
        }
    }

    /// When the dispatcher must look again: the next delivery or expiry.
    pub(crate) fn next_wake_ms(&self) -> Option<i64> {
        match (self.notifies.next_due_ms(), self.trades.next_expiry_ms()) {
            (Some(due_ms), Some(expiry_ms)) => Some(due_ms.min(expiry_ms)),
            (due_ms, expiry_ms) => due_ms.or(expiry_ms),
        }
    }
}

/// The locked world, settled at `now_ms`. Dropping it wakes the dispatcher if notifies were
/// queued meanwhile.
pub(crate) struct WorldGuard<'a> {
    pub(crate) guard: MutexGuard<'a, World>,
    pub(crate) wake: &'a tokio::sync::Notify,
    pub(crate) now_ms: i64,
}

impl WorldGuard<'_> {
    /// The channel time the world was settled at; use it for every change made under this
    /// guard, so that times and expiries agree.
    pub(crate) fn now_ms(&self) -> i64 {
        self.now_ms
    }
}

impl Deref for WorldGuard<'_> {
    type Target = World;

    fn deref(&self) -> &World {
        &self.guard
    }
}

impl DerefMut for WorldGuard<'_> {
    fn deref_mut(&mut self) -> &mut World {
        &mut self.guard
    }
}

impl Drop for WorldGuard<'_> {
    fn drop(&mut self) {
        if self.guard.notifies.take_changed() {
            self.wake.notify_one();
        }
    }
}

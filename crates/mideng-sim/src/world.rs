//! The simulator's whole mutable state behind one lock: trades, refunds and ledger, the notify
//! queue, the armed faults, the bills waiting for their download.
//!
//! One lock, held for one whole operation and never across an `.await`, is what makes every
//! transition atomic (a close and a payment of the same trade cannot interleave) and keeps a
//! trade's notifies in the order of its events. Each operation first *settles* the world to the
//! clock: trades whose expiry has passed are closed and refunds whose processing has ended end
//! before anyone can observe them, so an answer is always consistent with the channel time it
//! was given at. The critical sections are short (map look-ups, a few AES encryptions); signing
//! and HTTP happen outside.

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;

use crate::bills::BillFiles;
use crate::config::SimConfig;
use crate::faults::Faults;
use crate::notify::payload::notify_for_event;
use crate::notify::queue::NotifyQueue;
use crate::trades::{TradeBook, TradeEvent};

/// Trades, notifies and faults.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) trades: TradeBook,
    pub(crate) notifies: NotifyQueue,
    pub(crate) faults: Faults,
    /// Bills rendered for a download.
    pub(crate) bills: BillFiles,
}

/// Channel numbers of one simulator start at a random multiple of this, below
/// [`NUMBERS_START_SLOTS`] of them: room for that many trades each, and still at most 13
/// digits, the width of the sequence in an Alipay trade number.
const NUMBERS_PER_START: u64 = 100_000;
const NUMBERS_START_SLOTS: u64 = 10_000_000;

impl Default for World {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // A random start without a dependency: the standard library seeds each RandomState
        // from the OS.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self {
            trades: TradeBook::numbered_from(
                (random % NUMBERS_START_SLOTS).saturating_mul(NUMBERS_PER_START),
            ),
            notifies: NotifyQueue::default(),
            faults: Faults::default(),
            bills: BillFiles::default(),
        }
    }
}

impl World {
    /// Closes expired trades and ends refunds whose processing is over (queuing their
    /// notifies).
    pub(crate) fn settle(&mut self, config: &SimConfig, now_ms: i64) {
        let mut events = self.trades.expire_due_trades(now_ms);
        events.extend(self.trades.settle_due_refunds(now_ms));
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
            if let Some(notify) = notify_for_event(config, trade, &event.kind, now_ms) {
                self.notifies.enqueue(notify, now_ms);
            }
        }
    }

    /// When the dispatcher must look again: the next delivery, expiry or end of a refund's
    /// processing.
    pub(crate) fn next_wake_ms(&self) -> Option<i64> {
        [
            self.notifies.next_due_ms(),
            self.trades.next_expiry_ms(),
            self.trades.next_refund_settlement_ms(),
        ]
        .into_iter()
        .flatten()
        .min()
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

//! The order's lock, and the one policy of every writer that takes it (seed 000, layer 3 ①):
//! wait briefly for the lock, and when the wait runs out re-check the state and answer from it
//! if it already decides, or answer "processing" if it does not. Creation, close, a success
//! notify, reconciliation and the bill's repairs take the same lock, named by the order
//! ([`order_lock_name`]).
//!
//! | writer | the lock is busy for the whole wait | answer |
//! |---|---|---|
//! | payment creation | the order's pending payment, if it has its pay URL | 201/200 with it, or 202 `Retry-After` (not stored: the retry runs again) |
//! | close | the payment, if it is already CLOSED or PAID | that state, or 409 `payment-busy` |
//! | success notify | the payment, if it is already PAID (a resend) | accepted, or "failure" to the channel, which resends |
//! | reconciliation | nothing to re-check: the next round asks again | counted `busy` |
//! | the daily bill's repair of a charge | nothing to wait for: the channel settled it | the success flow under the database's guard alone |
//!
//! While a flow holds the lock its lease is renewed in the background ([`mideng::lock::keep_alive`],
//! up to [`ORDER_LOCK_HOLD_MAX`]), and every store write it makes carries the lock's fence
//! ([`OrderFence`]): a holder paused past its lease (a stopped process, a long collection
//! pause), whose lock another writer took and used, has its writes refused with
//! [`mideng::StoreError::StaleFence`] and answers as if the lock had been busy (with the
//! fences switched off, [`BrokenLayer::Fences`], such a write commits and is counted). The
//! lease is [`crate::flows::PaymentSettings::order_lock_lease`]. When the lock
//! store itself fails, or the layer is switched off, the flow goes on without the lock: the
//! database's row locks and compare-and-sets still decide (logged and counted as `degraded`).

use mideng::lock::{KeepAlive, LockGuard, keep_alive};

use crate::flows::{BrokenLayer, Ports, decision, order_lock_name};
use crate::limits::ORDER_LOCK_HOLD_MAX;
use crate::store::OrderFence;

/// The order's lock as a flow holds it: the guard, its renewal and the fence its writes carry.
pub struct OrderLock {
    guard: LockGuard,
    fence: OrderFence,
    renewal: Option<KeepAlive>,
}

impl OrderLock {
    /// The fence every store write under this lock carries.
    pub fn fence(&self) -> &OrderFence {
        &self.fence
    }
}

/// What asking for the order's lock gave.
pub enum Locked {
    /// Held: the flow runs under it, its writes fenced.
    Held(OrderLock),
    /// No lock (the lock store failed, or the layer is off): the flow runs under the
    /// database's guard alone.
    Unguarded,
    /// Another writer held it for the whole wait: re-check, then answer (the table above).
    Busy,
}

impl Locked {
    /// The fence for the flow's writes: `None` without the lock.
    pub fn fence(&self) -> Option<&OrderFence> {
        match self {
            Locked::Held(lock) => Some(lock.fence()),
            Locked::Unguarded | Locked::Busy => None,
        }
    }
}

/// Takes the order's lock, waiting up to the configured wait ([`Locked`]).
pub async fn lock_order(
    ports: &Ports,
    operation: &'static str,
    tenant: &str,
    order_id: &str,
) -> Locked {
    let Some(name) = order_lock_name(tenant, order_id) else {
        return Locked::Unguarded;
    };
    if !ports.settings.layer_on(BrokenLayer::OrderLock) {
        decision("lock", operation, tenant, order_id, "off");
        return Locked::Unguarded;
    }
    match ports
        .locks
        .acquire(
            &name,
            ports.settings.order_lock_lease,
            ports.settings.lock_wait,
        )
        .await
    {
        Ok(Some(guard)) => {
            decision("lock", operation, tenant, order_id, "acquired");
            let renewal = keep_alive(
                ports.locks.clone(),
                guard.clone(),
                ports.settings.order_lock_lease,
                ORDER_LOCK_HOLD_MAX,
            )
            .ok();
            Locked::Held(OrderLock {
                fence: OrderFence {
                    tenant_id: tenant.to_owned(),
                    order_id: order_id.to_owned(),
                    fence: guard.fence,
                    enforced: ports.settings.layer_on(BrokenLayer::Fences),
                },
                guard,
                renewal,
            })
        }
        Ok(None) => {
            decision("lock", operation, tenant, order_id, "busy");
            Locked::Busy
        }
        Err(error) => {
            tracing::warn!(%error, "lock store unavailable; going on under the database's guard");
            decision("lock", operation, tenant, order_id, "degraded");
            Locked::Unguarded
        }
    }
}

/// Ends the flow's hold: stops the renewal, then releases the lock (a lock lost meanwhile is
/// left to its new holder).
pub async fn unlock(ports: &Ports, locked: Locked) {
    if let Locked::Held(OrderLock { guard, renewal, .. }) = locked {
        drop(renewal);
        if let Err(error) = ports.locks.release(&guard).await {
            tracing::warn!(%error, "releasing an order lock failed; it expires by itself");
        }
    }
}

/// Whether `error` is a write refused because a later holder of the order's lock has written:
/// the flow answers as if the lock had been busy.
pub fn lost_the_lock(error: &mideng::StoreError) -> bool {
    matches!(error, mideng::StoreError::StaleFence { .. })
}

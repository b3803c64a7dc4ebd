//! Payment attempts: [`create`](mod@create), [`close`](mod@close) and the one
//! [`settle`](mod@settle) table they share with reconciliation.

pub mod close;
pub mod create;
pub mod settle;

pub use close::{Closed, close, close_sibling};
pub use create::{Created, create};
pub use settle::{OnClose, Settled, settle};

use mideng::lock::LockGuard;

use crate::flows::{BrokenLayer, Ports, decision, order_lock_name};
use crate::limits::ORDER_LOCK_TTL;

/// Takes the order's lock, waiting up to the configured wait. `None` when the wait ran out;
/// `Some(None)` when the flow goes on without a lock: the lock store itself failed (the
/// database still decides; the degradation is logged and counted), or the layer is off.
pub(in crate::flows) async fn lock_order(
    ports: &Ports,
    operation: &'static str,
    tenant: &str,
    order_id: &str,
) -> Option<Option<LockGuard>> {
    let Some(name) = order_lock_name(tenant, order_id) else {
        return Some(None);
    };
    if !ports.settings.layer_on(BrokenLayer::OrderLock) {
        decision("lock", operation, tenant, order_id, "off");
        return Some(None);
    }
    match ports
        .locks
        .acquire(&name, ORDER_LOCK_TTL, ports.settings.lock_wait)
        .await
    {
        Ok(Some(guard)) => {
            decision("lock", operation, tenant, order_id, "acquired");
            Some(Some(guard))
        }
        Ok(None) => {
            decision("lock", operation, tenant, order_id, "busy");
            None
        }
        Err(error) => {
            tracing::warn!(%error, "lock store unavailable; going on under the database's guard");
            decision("lock", operation, tenant, order_id, "degraded");
            Some(None)
        }
    }
}

pub(in crate::flows) async fn unlock(ports: &Ports, guard: Option<LockGuard>) {
    if let Some(guard) = guard
        && let Err(error) = ports.locks.release(&guard).await
    {
        tracing::warn!(%error, "releasing an order lock failed; it expires by itself");
    }
}

//! Orders: creation idempotent by the order id (the business key: the same order again is a
//! replay, another content under the same id is refused), and transitions as compare-and-set on
//! the status. PAID is reached only through a payment, REFUNDING and REFUNDED only through a
//! refund: each of those moves is written with the money's own (the payment, the refund), so a
//! request that only names the status would leave the order saying what the money does not.

use mideng::StoreError;

use crate::domain::ids::OrderId;
use crate::domain::order::{Order, OrderStatus};
use crate::domain::payment::Payment;
use crate::flows::{Ports, decision, operation};
use crate::store::{OrderInsert, OrderTransition};

/// What creating an order came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderCreated {
    /// Created now.
    Created,
    /// The same order was created before: it as it is now, with its payments.
    Replayed(Box<Order>, Vec<Payment>),
    /// Another order with this id and a different content exists.
    IdReused,
    /// The order vanished between the conflict and the read (it cannot be deleted, so only a
    /// corrupt store gets here).
    Vanished,
}

/// The tenant's order `order_id` and its payments, if it exists.
pub async fn show(
    ports: &Ports,
    tenant: &str,
    order_id: &OrderId,
) -> Result<Option<(Order, Vec<Payment>)>, StoreError> {
    ports.store.orders.order(tenant, order_id.as_str()).await
}

/// The tenant's orders in the order they were created, each with its payments, a page at a
/// time; `None` when `after` is none of the tenant's.
pub async fn page(
    ports: &Ports,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<(Order, Vec<Payment>)>>, StoreError> {
    ports.store.orders.orders_page(tenant, after, limit).await
}

/// Creates `order` unless its id exists in its tenant.
pub async fn create(ports: &Ports, order: &Order) -> Result<OrderCreated, StoreError> {
    let tenant = order.tenant_id.as_str();
    let subject = order.order_id.as_str();
    Ok(match ports.store.orders.create_order(order).await? {
        OrderInsert::Created => {
            decision(
                "business-key",
                operation::ORDER_CREATE,
                tenant,
                subject,
                "created",
            );
            OrderCreated::Created
        }
        OrderInsert::Existing(existing) if existing.fingerprint == order.fingerprint => {
            ports.store.backend.fence().await?;
            decision(
                "business-key",
                operation::ORDER_CREATE,
                tenant,
                subject,
                "replay",
            );
            match ports.store.orders.order(tenant, subject).await? {
                Some((current, payments)) => OrderCreated::Replayed(Box::new(current), payments),
                None => OrderCreated::Vanished,
            }
        }
        OrderInsert::Existing(_) => {
            decision(
                "business-key",
                operation::ORDER_CREATE,
                tenant,
                subject,
                "mismatch",
            );
            OrderCreated::IdReused
        }
    })
}

/// What a transition request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transitioned {
    /// Moved now, or it was there already: the order as it is now, with its payments.
    Done(Box<Order>, Vec<Payment>),
    /// No such order in this tenant.
    NoOrder,
    /// PAID is reached only through a payment.
    OnlyByPayment,
    /// REFUNDING and REFUNDED are reached only through a refund.
    OnlyByRefund,
    /// Not allowed from the current status (or lost a race to another transition).
    Refused {
        /// The current status.
        current: OrderStatus,
    },
}

/// Moves the tenant's order `order_id` to `to`.
pub async fn transition(
    ports: &Ports,
    tenant: &str,
    order_id: &str,
    to: OrderStatus,
) -> Result<Transitioned, StoreError> {
    match to {
        OrderStatus::Paid => return Ok(Transitioned::OnlyByPayment),
        // The refund flow moves the order along with the refund it records; moved by hand,
        // the order would say REFUNDED over a payment still PAID, a grant still held and the
        // whole amount still refundable.
        OrderStatus::Refunding | OrderStatus::Refunded => return Ok(Transitioned::OnlyByRefund),
        OrderStatus::Created
        | OrderStatus::Shipped
        | OrderStatus::Delivered
        | OrderStatus::Completed
        | OrderStatus::Canceled => {}
    }
    let outcome = ports
        .store
        .orders
        .transition_order(tenant, order_id, to)
        .await?;
    let label = match outcome {
        OrderTransition::NoOrder => return Ok(Transitioned::NoOrder),
        OrderTransition::Applied { .. } => "applied",
        OrderTransition::AlreadyThere => "already_there",
        OrderTransition::Refused { .. } => "refused",
    };
    decision("cas", operation::ORDER_TRANSITION, tenant, order_id, label);
    if let OrderTransition::Refused { current } = outcome {
        return Ok(Transitioned::Refused { current });
    }
    Ok(match ports.store.orders.order(tenant, order_id).await? {
        Some((order, payments)) => Transitioned::Done(Box::new(order), payments),
        None => Transitioned::NoOrder,
    })
}

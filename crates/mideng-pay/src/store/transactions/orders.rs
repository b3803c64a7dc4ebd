//! The orders port: an order created once per order id, read with its payments, moved along
//! its state machine ([`crate::domain::order`]) by compare-and-set under its row lock.

use async_trait::async_trait;
use mideng::StoreError;
use mideng::store::sql::Dialect;

use crate::domain::keys::ClientSecret;
use crate::domain::order::{Order, OrderStatus};
use crate::domain::payment::Payment;
use crate::store::rows::orders::{self, OrderInsert, find_order, insert_order, transition_order};
use crate::store::rows::payments;
use crate::store::sql::SqlPay;

/// What an order transition request found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderTransition {
    /// No such order in this tenant.
    NoOrder,
    /// Moved from `from`.
    Applied {
        /// The status it left.
        from: OrderStatus,
    },
    /// It was in the target status already.
    AlreadyThere,
    /// Not allowed from the current status (or lost a race to another transition).
    Refused {
        /// The current status.
        current: OrderStatus,
    },
}

/// Orders: created once per order id (the business key), moved by compare-and-set.
#[async_trait]
pub trait Orders: Send + Sync {
    /// Inserts an order unless its id exists in its tenant.
    async fn create_order(&self, order: &Order) -> Result<OrderInsert, StoreError>;
    /// The order and its payments.
    async fn order(
        &self,
        tenant_id: &str,
        order_id: &str,
    ) -> Result<Option<(Order, Vec<Payment>)>, StoreError>;
    /// The tenant's order that `secret` opens (expired or not).
    async fn order_by_client_secret(
        &self,
        tenant_id: &str,
        secret: &ClientSecret,
    ) -> Result<Option<Order>, StoreError>;
    /// The tenant's orders in the order they were created, each with its payments, after the
    /// order `after`, at most `limit`; `None` when `after` is none of the tenant's. One read of
    /// the page, then one indexed read of each order's payments, on one connection.
    async fn orders_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<(Order, Vec<Payment>)>>, StoreError>;
    /// Moves an order along its state machine (CAS on the current status).
    async fn transition_order(
        &self,
        tenant_id: &str,
        order_id: &str,
        to: OrderStatus,
    ) -> Result<OrderTransition, StoreError>;
}

#[async_trait]
impl<D: Dialect> Orders for SqlPay<D> {
    async fn create_order(&self, order: &Order) -> Result<OrderInsert, StoreError> {
        let _timer = self.timer("orders.create_order");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| Box::pin(insert_order::<D>(transaction, order, now_ms)))
            .await
    }

    async fn order_by_client_secret(
        &self,
        tenant_id: &str,
        secret: &ClientSecret,
    ) -> Result<Option<Order>, StoreError> {
        let _timer = self.timer("orders.order_by_client_secret");
        let mut connection = self.connection().await?;
        orders::find_order_by_client_secret::<D>(&mut connection, tenant_id, secret).await
    }

    async fn orders_page(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<(Order, Vec<Payment>)>>, StoreError> {
        let _timer = self.timer("orders.page");
        let mut connection = self.connection().await?;
        let Some(orders) =
            orders::tenant_page::<D>(&mut connection, tenant_id, after, i64::from(limit)).await?
        else {
            return Ok(None);
        };
        let mut shown = Vec::with_capacity(orders.len());
        for order in orders {
            let payments =
                payments::payments_for_order::<D>(&mut connection, tenant_id, &order.order_id)
                    .await?;
            shown.push((order, payments));
        }
        Ok(Some(shown))
    }

    async fn order(
        &self,
        tenant_id: &str,
        order_id: &str,
    ) -> Result<Option<(Order, Vec<Payment>)>, StoreError> {
        let _timer = self.timer("orders.order");
        let mut connection = self.connection().await?;
        let Some(order) = find_order::<D>(&mut connection, tenant_id, order_id, false).await?
        else {
            return Ok(None);
        };
        let payments =
            payments::payments_for_order::<D>(&mut connection, tenant_id, order_id).await?;
        Ok(Some((order, payments)))
    }

    async fn transition_order(
        &self,
        tenant_id: &str,
        order_id: &str,
        to: OrderStatus,
    ) -> Result<OrderTransition, StoreError> {
        let _timer = self.timer("orders.transition_order");
        use mideng::state::StateMachine;
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let Some(order) =
                        find_order::<D>(transaction, tenant_id, order_id, true).await?
                    else {
                        return Ok(OrderTransition::NoOrder);
                    };
                    if order.status == to {
                        return Ok(OrderTransition::AlreadyThere);
                    }
                    if !OrderStatus::allows(order.status, to) {
                        return Ok(OrderTransition::Refused {
                            current: order.status,
                        });
                    }
                    let moved = transition_order::<D>(
                        transaction,
                        tenant_id,
                        order_id,
                        order.status,
                        to,
                        now_ms,
                    )
                    .await?;
                    Ok(if moved {
                        OrderTransition::Applied { from: order.status }
                    } else {
                        OrderTransition::Refused {
                            current: order.status,
                        }
                    })
                })
            })
            .await
    }
}

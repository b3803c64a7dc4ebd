//! The events the service publishes through its outbox, and what each one asks of a consumer.
//!
//! One event per payment that becomes PAID: `payment.succeeded`, written in the same
//! transaction as the payment and order updates. It also stands for the order's move to PAID
//! (`order_paid`), so there is one event per paid order, never two to keep in step. A payment
//! that became PAID on an order that no longer waited for it (canceled meanwhile: a refund case)
//! carries `order_paid: false` and grants nothing.
//!
//! One event per payment closed unpaid: `payment.closed`, written with its move to CLOSED.
//!
//! One event per refund that succeeds: `refund.succeeded`, written with the refund's move to
//! SUCCESS; it says whether the payment is now refunded in full.

use serde::{Deserialize, Serialize};

/// Topic of [`PaymentSucceeded`].
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";

/// Topic of [`PaymentClosed`].
pub const PAYMENT_CLOSED: &str = "payment.closed";

/// A pending payment was closed unpaid (by the merchant, by expiry, by reconciliation or by
/// the channel's notify): written in the same transaction as its move to CLOSED.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentClosed {
    /// Tenant.
    pub tenant_id: String,
    /// The payment number.
    pub payment_no: String,
    /// The order.
    pub order_id: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// When it was closed here (Unix ms).
    pub closed_at_ms: i64,
}

/// Topic of [`RefundSucceeded`].
pub const REFUND_SUCCEEDED: &str = "refund.succeeded";

/// A refund's money went back to the buyer: written in the same transaction as the refund's
/// move to SUCCESS, so there is exactly one per refund.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundSucceeded {
    /// Tenant.
    pub tenant_id: String,
    /// The refund number.
    pub refund_no: String,
    /// The payment it refunds.
    pub payment_no: String,
    /// The order.
    pub order_id: String,
    /// Fen refunded by this refund.
    pub amount: i64,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// The channel's number for the refund.
    pub channel_refund_no: String,
    /// When the money went back (Unix ms).
    pub refunded_at_ms: i64,
    /// Whether the payment is now refunded in full (its order moved to REFUNDED).
    pub payment_refunded: bool,
}

/// Dedup kind of entitlement grants: one grant per payment number.
pub const GRANT_KIND: &str = "entitlement.grant";

/// Dedup kind of grant revocations: one per refund number.
pub const REVOKE_KIND: &str = "entitlement.revoke";

/// What a paid order grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantedItem {
    /// The SKU.
    pub sku: String,
    /// Units.
    pub quantity: i64,
}

/// A payment became PAID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentSucceeded {
    /// Tenant.
    pub tenant_id: String,
    /// The payment number.
    pub payment_no: String,
    /// The order.
    pub order_id: String,
    /// The buyer.
    pub user_id: String,
    /// Fen.
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// `alipay` or `wechat`.
    pub channel: String,
    /// The channel's trade number.
    pub channel_trade_no: String,
    /// When the channel took the money (Unix ms).
    pub paid_at_ms: i64,
    /// Whether the order moved to PAID with this payment (false: it had been canceled).
    pub order_paid: bool,
    /// What the order grants, if anything.
    pub entitlement: Option<GrantedItem>,
}

impl PaymentSucceeded {
    /// The grant this event asks for: only an order that is PAID with this payment and
    /// carries an entitlement grants one.
    pub fn grant(&self) -> Option<&GrantedItem> {
        if self.order_paid {
            self.entitlement.as_ref()
        } else {
            None
        }
    }

    /// The grant's number, derived from the payment so that the primary key is a further
    /// guard against a second grant.
    pub fn grant_no(&self) -> String {
        format!("g-{}", self.payment_no)
    }
}

/// A grant .
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Grant number.
    pub grant_no: String,
    /// Tenant.
    pub tenant_id: String,
    /// The holder.
    pub user_id: String,
    /// The payment that paid for it.
    pub payment_no: String,
    /// Its order.
    pub order_id: String,
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: i64,
    /// When (Unix ms).
    pub created_at_ms: i64,
    /// When it was revoked (its payment refunded in full), if it was.
    pub revoked_at_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(order_paid: bool, entitlement: Option<GrantedItem>) -> PaymentSucceeded {
        PaymentSucceeded {
            tenant_id: "t".to_owned(),
            payment_no: "P1".to_owned(),
            order_id: "o1".to_owned(),
            user_id: "u1".to_owned(),
            amount: 100,
            currency: "CNY".to_owned(),
            channel: "alipay".to_owned(),
            channel_trade_no: "T1".to_owned(),
            paid_at_ms: 1,
            order_paid,
            entitlement,
        }
    }

    #[test]
    fn only_a_paid_order_with_an_entitlement_grants() {
        let item = GrantedItem {
            sku: "vip-month".to_owned(),
            quantity: 1,
        };
        assert_eq!(event(true, Some(item.clone())).grant(), Some(&item));
        assert_eq!(event(false, Some(item)).grant(), None, "refund case");
        assert_eq!(event(true, None).grant(), None);
        assert_eq!(event(true, None).grant_no(), "g-P1");
    }
}

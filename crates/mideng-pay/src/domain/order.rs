//! Orders: the merchant's orders the payments are for, and their state machine.
//!
//! ```text
//! CREATED ─► PAID ─► SHIPPED ─► DELIVERED ─► COMPLETED
//!    │         │                    │
//!    ▼         └──► REFUNDING ◄─────┘
//! CANCELED             │
//!                      ▼
//!                  REFUNDED
//! ```
//!
//! Every transition is a compare-and-set on the order's current status, so of two racing
//! requests (a payment callback and a cancel, two callbacks) exactly one applies.

use mideng::state::StateMachine;
use serde::Serialize;
use thiserror::Error;

use super::ids::Sku;
use super::keys::ClientSecret;

/// An order's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Created, not paid.
    Created,
    /// Paid through exactly one payment.
    Paid,
    /// Shipped by the merchant.
    Shipped,
    /// Delivered to the buyer.
    Delivered,
    /// Done.
    Completed,
    /// Canceled before payment.
    Canceled,
    /// A refund is under way.
    Refunding,
    /// Refunded.
    Refunded,
}

impl StateMachine for OrderStatus {
    const KIND: &'static str = "order";
    const TRANSITIONS: &'static [(Self, Self)] = &[
        (OrderStatus::Created, OrderStatus::Paid),
        (OrderStatus::Paid, OrderStatus::Shipped),
        (OrderStatus::Shipped, OrderStatus::Delivered),
        (OrderStatus::Delivered, OrderStatus::Completed),
        (OrderStatus::Created, OrderStatus::Canceled),
        (OrderStatus::Paid, OrderStatus::Refunding),
        (OrderStatus::Delivered, OrderStatus::Refunding),
        (OrderStatus::Refunding, OrderStatus::Refunded),
    ];

    fn as_str(self) -> &'static str {
        match self {
            OrderStatus::Created => "CREATED",
            OrderStatus::Paid => "PAID",
            OrderStatus::Shipped => "SHIPPED",
            OrderStatus::Delivered => "DELIVERED",
            OrderStatus::Completed => "COMPLETED",
            OrderStatus::Canceled => "CANCELED",
            OrderStatus::Refunding => "REFUNDING",
            OrderStatus::Refunded => "REFUNDED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            OrderStatus::Created,
            OrderStatus::Paid,
            OrderStatus::Shipped,
            OrderStatus::Delivered,
            OrderStatus::Completed,
            OrderStatus::Canceled,
            OrderStatus::Refunding,
            OrderStatus::Refunded,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

impl OrderStatus {
    /// Whether a new payment attempt may be created for an order in this status.
    pub fn accepts_payment(self) -> bool {
        self == OrderStatus::Created
    }
}

/// Most units of one entitlement per order.
pub const ENTITLEMENT_QUANTITY_MAX: u32 = 1_000;

/// What a paid order grants its user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entitlement {
    /// What is granted.
    pub sku: Sku,
    /// How many, 1 to [`ENTITLEMENT_QUANTITY_MAX`].
    pub quantity: u32,
}

/// An entitlement that breaks the rules.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("entitlement quantity must be 1 to {ENTITLEMENT_QUANTITY_MAX}")]
pub struct QuantityError;

impl Entitlement {
    /// Validates an entitlement.
    pub fn new(sku: Sku, quantity: u32) -> Result<Self, QuantityError> {
        if (1..=ENTITLEMENT_QUANTITY_MAX).contains(&quantity) {
            Ok(Self { sku, quantity })
        } else {
            Err(QuantityError)
        }
    }
}

/// An order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Tenant.
    pub tenant_id: String,
    /// The merchant's order id.
    pub order_id: String,
    /// The buyer.
    pub user_id: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// Currency.
    pub currency: String,
    /// Status.
    pub status: OrderStatus,
    /// Granted SKU, if the order carries an entitlement.
    pub entitlement_sku: Option<String>,
    /// Granted quantity.
    pub entitlement_quantity: Option<i64>,
    /// Fingerprint of the creating request, to tell a repeat from a different order.
    pub fingerprint: String,
    /// Number of transitions applied.
    pub version: i64,
    /// What a page shows, with the publishable key, to pay this order and read it
    /// ([`crate::domain::keys`]); `None` for an order made before client secrets existed,
    /// which no page can pay.
    pub client_secret: Option<ClientSecret>,
    /// When the client secret stops opening anything (ms since the epoch).
    pub client_secret_expires_at_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_paths_are_the_only_paths() {
        use OrderStatus::*;
        assert!(OrderStatus::allows(Created, Paid));
        assert!(OrderStatus::allows(Delivered, Refunding));
        for (from, to) in [
            (Paid, Created),
            (Canceled, Paid),
            (Created, Shipped),
            (Refunded, Paid),
            (Completed, Refunding),
        ] {
            assert!(!OrderStatus::allows(from, to), "{from:?} -> {to:?}");
        }
        for status in [
            Created, Paid, Shipped, Delivered, Completed, Canceled, Refunding, Refunded,
        ] {
            assert_eq!(OrderStatus::parse(status.as_str()), Some(status));
        }
        assert!(
            Created.accepts_payment() && !Paid.accepts_payment() && !Canceled.accepts_payment()
        );
    }

    #[test]
    fn entitlement_quantities_are_bounded() {
        let sku = Sku::parse("vip-30d").expect("sku");
        assert!(Entitlement::new(sku.clone(), 1).is_ok());
        assert_eq!(Entitlement::new(sku.clone(), 0), Err(QuantityError));
        assert_eq!(
            Entitlement::new(sku, ENTITLEMENT_QUANTITY_MAX + 1),
            Err(QuantityError)
        );
    }
}

//! Reading one payment attempt: as its tenant sees it (with its refunds and what is left to
//! refund), and as the demo checkout page may pay it.

use mideng::StoreError;

use crate::domain::ids::PaymentNo;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::refund::{Refund, refundable};
use crate::flows::Ports;

/// A payment with what its refunds leave of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The payment.
    pub payment: Payment,
    /// Its refunds, oldest first.
    pub refunds: Vec<Refund>,
    /// What can still be refunded, in fen (zero unless PAID).
    pub refundable_fen: i64,
}

/// The tenant's payments in the order they were created, a page at a time; `None` when `after`
/// is none of the tenant's.
pub async fn page(
    ports: &Ports,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<Payment>>, StoreError> {
    ports
        .store
        .payments
        .payments_page(tenant, after, limit)
        .await
}

/// The tenant's payment `payment_no` with its refunds, if it exists.
pub async fn show(
    ports: &Ports,
    tenant: &str,
    payment_no: &PaymentNo,
) -> Result<Option<Shown>, StoreError> {
    let Some(payment) = super::close::own_payment(ports, tenant, payment_no).await? else {
        return Ok(None);
    };
    let refunds = ports.store.refunds.refunds_of(&payment.payment_no).await?;
    let refundable_fen = refundable(
        payment.status == PaymentStatus::Paid,
        payment.amount.fen(),
        &refunds,
    );
    Ok(Some(Shown {
        payment,
        refunds,
        refundable_fen,
    }))
}

/// What the checkout page may do with a payment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payable {
    /// Pending, of the page's order: the page may pay it.
    Pending(Payment),
    /// No such payment in the tenant, or one of another order (a page pays only the order
    /// its client secret opens, as on the API).
    NotFound,
    /// Not pending any more.
    Settled(PaymentStatus),
}

/// Whether the page of the tenant's order `order_id` may pay `payment_no`.
pub async fn payable(
    ports: &Ports,
    tenant: &str,
    order_id: &str,
    payment_no: &PaymentNo,
) -> Result<Payable, StoreError> {
    let Some(payment) = super::close::own_payment(ports, tenant, payment_no).await? else {
        return Ok(Payable::NotFound);
    };
    Ok(match (payment.order_id == order_id, payment.status) {
        (false, _) => Payable::NotFound,
        (true, PaymentStatus::Pending) => Payable::Pending(payment),
        (true, status) => Payable::Settled(status),
    })
}

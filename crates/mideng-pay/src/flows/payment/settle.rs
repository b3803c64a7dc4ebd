//! The one table "the channel says X about a trade → do Y here", used by creation (after the
//! channel refused to create a trade), by the close route and by reconciliation:
//!
//! | the channel says | here |
//! |---|---|
//! | paid | the one success flow (row lock, amount check, CAS on payment and order, the event) |
//! | closed | close the payment (and, for an expiry, cancel its order) |
//! | no such trade, past expiry and grace | the same as closed: the code can no longer be paid |
//! | no such trade, within expiry and grace | nothing: Alipay has no trade until the buyer scans, and the code stays payable |
//! | pending | nothing (the caller decides whether to close at the channel first) |
//! | refunded | nothing here: reported |
//!
//! "Past expiry" is the payment's expiry plus [`super::super::PaymentSettings::expiry_grace`],
//! one setting for every caller.

use mideng::StoreError;
use mideng_channel::adapter::TradeState;

use crate::domain::payment::Payment;
use crate::flows::Ports;
use crate::store::{LocalClose, OrderFence, SuccessOutcome};

/// What closing a payment here also does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClose {
    /// Close the payment only (the merchant's close; creation's refusal path): the order may
    /// take another attempt.
    PaymentOnly,
    /// Close the payment and cancel its order if it still waits (an expired attempt:
    /// reconciliation).
    CancelOrder,
}

/// What the channel's word did here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Paid at the channel: the success flow ran, with this outcome.
    Paid(SuccessOutcome),
    /// Closed at the channel (or gone past its expiry): the local close ran, with this outcome.
    Closed(LocalClose),
    /// The channel has no trade, and the code is still payable: nothing changed.
    NotYetAtChannel,
    /// Pending at the channel (`expired`: past expiry and grace): nothing changed.
    Pending {
        /// Past the payment's expiry and the grace.
        expired: bool,
    },
    /// Refunded at the channel while not paid here: nothing changed; reported.
    Refunded,
}

/// Applies what the channel says about `payment`'s trade; every write carries `fence`, the
/// order lock's fence when the caller holds it.
pub async fn settle(
    ports: &Ports,
    payment: &Payment,
    found: TradeState,
    on_close: OnClose,
    fence: Option<&OrderFence>,
) -> Result<Settled, StoreError> {
    let expired = ports.expired(payment.expires_at_ms);
    Ok(match found {
        TradeState::Paid(paid) => Settled::Paid(
            ports
                .store
                .payments
                .apply_success(&payment.payment_no, &paid, fence)
                .await?,
        ),
        TradeState::Closed => Settled::Closed(close_here(ports, payment, on_close, fence).await?),
        TradeState::NotFound if expired => {
            Settled::Closed(close_here(ports, payment, on_close, fence).await?)
        }
        TradeState::NotFound => Settled::NotYetAtChannel,
        TradeState::Pending => Settled::Pending { expired },
        TradeState::Refunded => {
            tracing::warn!(payment_no = %payment.payment_no, "refunded at the channel while not paid here");
            Settled::Refunded
        }
    })
}

async fn close_here(
    ports: &Ports,
    payment: &Payment,
    on_close: OnClose,
    fence: Option<&OrderFence>,
) -> Result<LocalClose, StoreError> {
    let payments = &ports.store.payments;
    Ok(match on_close {
        OnClose::PaymentOnly => payments.close_payment(&payment.payment_no, fence).await?,
        OnClose::CancelOrder => payments.expire_payment(&payment.payment_no, fence).await?.0,
    })
}

//! Refunding a paid payment, in full or in part. Below the route's `Idempotency-Key` it stacks:
//!
//! 1. the refund's business key: one refund per tenant and request key (a unique key), so a
//!    retry — or the same request taken over after a crash — finds its refund and resumes it;
//! 2. the payment's row lock and its running refund total under a CHECK: concurrent refunds
//!    that together exceed the paid amount are refused by the database, exactly the ones that
//!    do not fit;
//! 3. the channel's own idempotency by the refund number (`out_request_no`, `out_refund_no`):
//!    asking again after a lost answer, by the client's retry or by reconciliation, uses the
//!    same number and never refunds twice;
//! 4. the refund's state machine, moved by compare-and-set: the channel's answer, its notify
//!    and reconciliation may all report one refund; it settles once.

use mideng::StoreError;
use mideng_channel::adapter::{ChannelError, RefundState, RefundTrade};

use crate::domain::payment::PaymentStatus;
use crate::domain::refund::{Refund, RefundStatus};
use crate::flows::{Ports, decision, operation};
use crate::store::{NewRefund, OpenRefund, SettledRefund};

/// What asking for a refund came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    /// A new refund, as the channel's answer left it (PROCESSING when the channel has not
    /// finished or did not answer; CLOSED when it refused).
    New(Refund),
    /// The refund this request key made before, asked of the channel again if it was still
    /// PROCESSING.
    Existing(Refund),
    /// The request key made another refund (another payment or amount) before.
    KeyReused(Refund),
    /// No such payment in this tenant.
    NoPayment,
    /// The payment is not PAID.
    NotPaid(PaymentStatus),
    /// More than is left to refund.
    Exceeds {
        /// Fen that can still be refunded.
        refundable_fen: i64,
    },
    /// The payment's charge is a refund case (paid after its order was canceled): it goes
    /// back in full through the case.
    InCase,
}

/// What a client asks.
#[derive(Clone, Copy, Debug)]
pub struct RefundRequest<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// The payment to refund.
    pub payment_no: &'a str,
    /// The client's `Idempotency-Key`.
    pub request_key: &'a str,
    /// Fen.
    pub amount_fen: i64,
    /// Why.
    pub reason: &'a str,
}

/// Opens (or finds) the request's refund and asks the channel for it.
pub async fn request(ports: &Ports, asked: RefundRequest<'_>) -> Result<Requested, StoreError> {
    let op = operation::REFUND_CREATE;
    let refund_no = crate::domain::ids::new_refund_no(ports.clock.now_ms());
    let opened = ports
        .store
        .refunds
        .open_refund(&NewRefund {
            tenant_id: asked.tenant,
            request_key: asked.request_key,
            payment_no: asked.payment_no,
            amount_fen: asked.amount_fen,
            reason: asked.reason,
            refund_no: &refund_no,
        })
        .await?;
    Ok(match opened {
        OpenRefund::Created(refund) => {
            decision("constraint", op, asked.tenant, asked.payment_no, "reserved");
            Requested::New(ask(ports, *refund).await?)
        }
        OpenRefund::Existing(refund) => {
            decision(
                "business-key",
                op,
                asked.tenant,
                asked.payment_no,
                "existing",
            );
            if refund.status == RefundStatus::Processing {
                Requested::Existing(ask(ports, *refund).await?)
            } else {
                Requested::Existing(*refund)
            }
        }
        OpenRefund::KeyReused(refund) => {
            decision(
                "business-key",
                op,
                asked.tenant,
                asked.payment_no,
                "key_reused",
            );
            Requested::KeyReused(*refund)
        }
        // A case's asks are counted by the case's refunds only; a merchant's refund is not one.
        OpenRefund::NoPayment | OpenRefund::AsksUsedUp => Requested::NoPayment,
        OpenRefund::NotPaid(status) => Requested::NotPaid(status),
        OpenRefund::Exceeds { refundable_fen } => {
            decision("constraint", op, asked.tenant, asked.payment_no, "exceeds");
            Requested::Exceeds { refundable_fen }
        }
        OpenRefund::InCase => {
            decision("constraint", op, asked.tenant, asked.payment_no, "in_case");
            Requested::InCase
        }
    })
}

/// Asks the channel to refund `refund` under its number, and settles it with the answer. An
/// unknown outcome leaves it PROCESSING for reconciliation; a refusal is checked with a query
/// before it closes the refund (an earlier ask whose answer was lost may have applied it).
pub async fn ask(ports: &Ports, refund: Refund) -> Result<Refund, StoreError> {
    let Some(channel) = ports.channels.named(&refund.channel) else {
        tracing::warn!(refund_no = %refund.refund_no, channel = %refund.channel, "refund of a channel not configured here; left PROCESSING");
        return Ok(refund);
    };
    let Some(payment) = ports.store.payments.payment(&refund.payment_no).await? else {
        return Err(StoreError::Corrupt(
            "a refund without its payment".to_owned(),
        ));
    };
    let asked = RefundTrade {
        out_trade_no: refund.payment_no.clone(),
        out_refund_no: refund.refund_no.clone(),
        refund_fen: refund.amount_fen,
        total_fen: payment.amount.fen(),
        reason: refund.reason.clone(),
    };
    match channel.refund(&asked).await {
        Ok(state) => apply(ports, refund, state).await,
        Err(error @ ChannelError::OutcomeUnknown(_)) => {
            tracing::warn!(%error, refund_no = %refund.refund_no, "refund without a definite answer; reconciliation asks again under the same number");
            Ok(refund)
        }
        Err(error @ ChannelError::Rejected { .. }) => {
            tracing::warn!(%error, refund_no = %refund.refund_no, "channel refused the refund; asking what it holds");
            match channel
                .query_refund(&refund.payment_no, &refund.refund_no)
                .await
            {
                Ok(RefundState::NotFound) => apply(ports, refund, RefundState::Closed).await,
                Ok(state) => apply(ports, refund, state).await,
                Err(error) => {
                    tracing::warn!(%error, refund_no = %refund.refund_no, "refund query failed; left PROCESSING");
                    Ok(refund)
                }
            }
        }
        Err(error) => {
            // Nothing was sent: the refund cannot be made as asked.
            tracing::warn!(%error, refund_no = %refund.refund_no, "the refund could not be sent; closed");
            apply(ports, refund, RefundState::Closed).await
        }
    }
}

/// Settles `refund` with what the channel says about it (an answer, a query, a notify's
/// decoded state): PROCESSING and "no such refund" change nothing here.
pub async fn apply(
    ports: &Ports,
    refund: Refund,
    state: RefundState,
) -> Result<Refund, StoreError> {
    let (to, succeeded) = match state {
        RefundState::NotFound | RefundState::Processing => return Ok(refund),
        RefundState::Succeeded(done) => {
            if done.refund_fen != refund.amount_fen {
                tracing::error!(
                    refund_no = %refund.refund_no, ours = refund.amount_fen, theirs = done.refund_fen,
                    "the channel reports another amount for this refund; left for a person"
                );
                return Ok(refund);
            }
            (RefundStatus::Success, Some(done))
        }
        RefundState::Closed => (RefundStatus::Closed, None),
        RefundState::Abnormal => (RefundStatus::Abnormal, None),
    };
    Ok(
        match ports
            .store
            .refunds
            .settle_refund(&refund.refund_no, to, succeeded.as_ref())
            .await?
        {
            SettledRefund::Moved(moved) => {
                decision(
                    "cas",
                    operation::REFUND_CREATE,
                    &moved.tenant_id,
                    &moved.refund_no,
                    match to {
                        RefundStatus::Success => "refund_success",
                        RefundStatus::Closed => "refund_closed",
                        RefundStatus::Abnormal => "refund_abnormal",
                        RefundStatus::Processing => "refund_processing",
                    },
                );
                if to == RefundStatus::Abnormal {
                    tracing::error!(refund_no = %moved.refund_no, "refund ABNORMAL at the channel: the buyer's account cannot take it; a person must settle it");
                }
                *moved
            }
            SettledRefund::Unchanged(current) => *current,
            SettledRefund::Unknown => refund,
        },
    )
}

/// Reconciliation of one PROCESSING refund: what the channel holds settles it; a refund the
/// channel never received is asked again under the same number.
pub async fn reconcile(ports: &Ports, refund: Refund) -> Result<Refund, StoreError> {
    let Some(channel) = ports.channels.named(&refund.channel) else {
        return Ok(refund);
    };
    match channel
        .query_refund(&refund.payment_no, &refund.refund_no)
        .await
    {
        Ok(RefundState::NotFound) => {
            decision(
                "reconciliation",
                operation::RECONCILE,
                &refund.tenant_id,
                &refund.refund_no,
                "refund_asked_again",
            );
            ask(ports, refund).await
        }
        Ok(state) => {
            let before = refund.status;
            let after = apply(ports, refund, state).await?;
            if after.status != before {
                decision(
                    "reconciliation",
                    operation::RECONCILE,
                    &after.tenant_id,
                    &after.refund_no,
                    "refund_settled",
                );
            }
            Ok(after)
        }
        Err(error) => {
            tracing::warn!(%error, refund_no = %refund.refund_no, "refund query failed; next round");
            Ok(refund)
        }
    }
}

/// The tenant's refunds in the order they were created, a page at a time; `None` when `after`
/// is none of the tenant's.
pub async fn page(
    ports: &Ports,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<Refund>>, StoreError> {
    ports.store.refunds.refunds_page(tenant, after, limit).await
}

/// A refund of this tenant, by its number.
pub async fn own_refund(
    ports: &Ports,
    tenant: &str,
    refund_no: &str,
) -> Result<Option<Refund>, StoreError> {
    Ok(ports
        .store
        .refunds
        .refund(refund_no)
        .await?
        .filter(|refund| refund.tenant_id == tenant))
}

/// Refunds a refund case (a charge this service will not keep): its refund, under the request
/// key `auto-<payment_no>`, asked of the channel like any other. A refund the channel closes
/// (nothing moved) reopens the case, and the next round asks again under the next key, up to
/// [`crate::store::CASE_ASKS_MAX`] refunds. `None` when the case is no longer open or
/// cannot be refunded (logged for a person; the case stays OPEN).
pub async fn refund_case(ports: &Ports, payment_no: &str) -> Result<Option<Refund>, StoreError> {
    let refund_no = crate::domain::ids::new_refund_no(ports.clock.now_ms());
    match ports
        .store
        .refund_cases
        .open_case_refund(payment_no, &refund_no)
        .await?
    {
        OpenRefund::Created(refund) => {
            decision(
                "reconciliation",
                operation::RECONCILE,
                &refund.tenant_id,
                payment_no,
                "refund_case_refunded",
            );
            tracing::warn!(payment_no, refund_no = %refund.refund_no, fen = refund.amount_fen, "refunding a charge this service does not keep");
            Ok(Some(ask(ports, *refund).await?))
        }
        OpenRefund::Existing(refund) => Ok(Some(*refund)),
        OpenRefund::Exceeds { refundable_fen } => {
            tracing::error!(
                payment_no,
                refundable_fen,
                "a refund case cannot be refunded in full (refunds were made by hand?); left for a person"
            );
            Ok(None)
        }
        OpenRefund::AsksUsedUp => {
            tracing::error!(
                payment_no,
                asks = crate::store::CASE_ASKS_MAX,
                "the channel closed every refund of a refund case; left open for a person"
            );
            Ok(None)
        }
        OpenRefund::KeyReused(_)
        | OpenRefund::NoPayment
        | OpenRefund::NotPaid(_)
        | OpenRefund::InCase => Ok(None),
    }
}

//! Entitlements: the effect of `payment.succeeded` (one grant per paid order that carries an
//! entitlement) and of `refund.succeeded` (the grant of a payment refunded in full revoked),
//! each deduplicated in its own transaction ([`crate::store::Grants`]); a person's replay or
//! discard of an event the consumer parked; and a user's grants as the tenant reads them. The
//! broker's side — deliveries, acks, failure counts, parking — is the consumer's
//! ([`crate::workers::consumer`]), which applies each delivery through the same effect.

use mideng::StoreError;

use crate::domain::events::{GRANT_KIND, Grant, PaymentSucceeded, REVOKE_KIND, RefundSucceeded};
use crate::domain::ids::UserId;
use crate::flows::{Ports, decision};
use crate::store::{EventFailures, FailureStatus, GrantOutcome, Grants, RevokeOutcome};

/// The tenant's grants to `user_id`, newest first (at most 100).
pub async fn grants(
    ports: &Ports,
    tenant: &str,
    user_id: &UserId,
) -> Result<Vec<Grant>, StoreError> {
    ports.store.grants.grants(tenant, user_id.as_str()).await
}

/// The effect of one event, or why there is none now.
pub(crate) enum Effect {
    /// Applied (or a duplicate): this label for the decision log.
    Done(GrantOutcome, &'static str, &'static str),
    /// Another consumer holds the event's dedup claim: ask again, not a failure.
    Busy,
    /// Failed: counted, parked after too many.
    Failed(String),
}

/// The tenant and the business number an event is about, for the decision log.
pub(crate) struct About {
    pub(crate) tenant: String,
    pub(crate) subject: String,
}

/// Applies `payload` as `kind` (the grant of `payment.succeeded`, the revocation of
/// `refund.succeeded`); an unreadable payload is `None`.
pub(crate) async fn apply(
    grants: &dyn Grants,
    kind: &'static str,
    payload: &[u8],
    dedup: bool,
) -> Option<(About, Effect)> {
    if kind == REVOKE_KIND {
        let event: RefundSucceeded = serde_json::from_slice(payload).ok()?;
        let about = About {
            tenant: event.tenant_id.clone(),
            subject: event.refund_no.clone(),
        };
        let effect = match grants.revoke(&event).await {
            Ok(RevokeOutcome::Revoked) => {
                Effect::Done(GrantOutcome::NothingToGrant, "dedup", "revoked")
            }
            Ok(RevokeOutcome::NothingToRevoke) => {
                Effect::Done(GrantOutcome::NothingToGrant, "dedup", "nothing_to_revoke")
            }
            Ok(RevokeOutcome::Duplicate) => {
                Effect::Done(GrantOutcome::NothingToGrant, "dedup", "duplicate")
            }
            Ok(RevokeOutcome::Busy) => Effect::Busy,
            Err(error) => Effect::Failed(error.to_string()),
        };
        return Some((about, effect));
    }
    let event: PaymentSucceeded = serde_json::from_slice(payload).ok()?;
    let about = About {
        tenant: event.tenant_id.clone(),
        subject: event.payment_no.clone(),
    };
    let effect = match grants.grant(&event, dedup).await {
        Ok(GrantOutcome::Busy) => Effect::Busy,
        Ok(outcome @ GrantOutcome::Granted) => Effect::Done(outcome, "dedup", "granted"),
        Ok(outcome @ GrantOutcome::NothingToGrant) => {
            Effect::Done(outcome, "dedup", "nothing_to_grant")
        }
        Ok(outcome @ GrantOutcome::Duplicate) => Effect::Done(outcome, "dedup", "duplicate"),
        Ok(outcome @ GrantOutcome::ConstraintHeld) => {
            Effect::Done(outcome, "constraint", "grant_exists")
        }
        Err(error) => Effect::Failed(error.to_string()),
    };
    Some((about, effect))
}

/// What a replay came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// Processed now (or found applied already: the dedup record answered).
    Processed,
    /// Failed again: still parked, with the new error.
    FailedAgain,
    /// No parked event has this id.
    NotParked,
}

/// Replays a parked event through the same effect as a delivery, with `reason` recorded.
pub async fn replay(
    ports: &Ports,
    message_id: &str,
    reason: &str,
    dedup: bool,
) -> Result<Replayed, StoreError> {
    let Some(event) = ports.store.event_failures.failed_event(message_id).await? else {
        return Ok(Replayed::NotParked);
    };
    if event.status != FailureStatus::Parked {
        return Ok(Replayed::NotParked);
    }
    let kind = if event.consumer == REVOKE_KIND {
        REVOKE_KIND
    } else {
        GRANT_KIND
    };
    let resolution = format!("replayed: {reason}");
    match apply(ports.store.grants.as_ref(), kind, &event.payload, dedup).await {
        Some((about, Effect::Done(_, layer, label))) => {
            decision(layer, kind, &about.tenant, &about.subject, label);
            let settled = ports
                .store
                .event_failures
                .settle(
                    message_id,
                    FailureStatus::Replayed,
                    Some(&resolution),
                    &event.last_error,
                )
                .await?;
            Ok(if settled {
                Replayed::Processed
            } else {
                Replayed::NotParked
            })
        }
        other => {
            let error = match other {
                None => "unreadable payload".to_owned(),
                Some((_, Effect::Busy)) => "busy: another consumer holds it".to_owned(),
                Some((_, Effect::Failed(error))) => error,
                Some((_, Effect::Done(..))) => String::new(),
            };
            ports
                .store
                .event_failures
                .settle(message_id, FailureStatus::Parked, None, &error)
                .await?;
            Ok(Replayed::FailedAgain)
        }
    }
}

/// Discards a parked event, with `reason` recorded; false when none is parked under the id.
pub async fn discard(
    failures: &dyn EventFailures,
    message_id: &str,
    reason: &str,
) -> Result<bool, StoreError> {
    let Some(event) = failures.failed_event(message_id).await? else {
        return Ok(false);
    };
    let resolution = format!("discarded: {reason}");
    failures
        .settle(
            message_id,
            FailureStatus::Discarded,
            Some(&resolution),
            &event.last_error,
        )
        .await
}

//! The entitlement consumer: `payment.succeeded` → one grant per paid order that carries an
//! entitlement, however often the event is delivered.
//!
//! Each delivery is handled in one database transaction that claims the dedup entry
//! (`entitlement.grant`, payment number), inserts the grant and completes the entry
//! ([`crate::store::Grants::grant`]); only then is the delivery acknowledged. So:
//! a redelivery finds the entry done and is acknowledged without effect; two consumers racing
//! on one event serialise on the dedup row, and the loser sees it done (or in progress, and
//! asks for redelivery); a crash before the commit leaves nothing, so the redelivery grants; a
//! crash between the commit and the ack leaves a grant and a done entry, so the redelivery is a
//! duplicate. A payload that cannot be read is logged as an error, counted and acknowledged:
//! it would fail the same way forever.
//!
//! Beside it, when [`ConsumerSettings::revoke_on_refund`] is on, the revocation consumer of
//! `refund.succeeded` ([`run_revocations`]) revokes the grant of a payment refunded in full,
//! once: a dedup claim per refund number and a compare-and-set on the grant, in one
//! transaction, before the ack.

use std::sync::Arc;
use std::time::Duration;

use mideng::outbox::{Delivery, Subscriber};

use crate::domain::events::{GRANT_KIND, PaymentSucceeded, REVOKE_KIND, RefundSucceeded};
use crate::flows::decision;
use crate::store::grants::RevokeOutcome;
use crate::store::{GrantOutcome, Grants};
use crate::workers::{ConsumerSettings, pause_or_stop};

/// How long one poll waits for a delivery before checking the stop signal.
const POLL_WAIT: Duration = Duration::from_millis(500);
/// Longest pause after broker errors.
const ERROR_PAUSE_MAX: Duration = Duration::from_secs(10);

/// What one delivery came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Processed (granted, or nothing to grant) and acknowledged.
    Processed(GrantOutcome),
    /// Unreadable: logged, counted and acknowledged.
    Malformed,
    /// Not processed now; redelivery requested.
    Retried,
}

/// Handles one delivery: grant (deduplicated), then acknowledge; or ask for redelivery.
pub async fn handle(
    grants: &dyn Grants,
    delivery: Delivery,
    settings: &ConsumerSettings,
) -> Handled {
    let id = delivery.message.id.clone();
    let event: PaymentSucceeded = match serde_json::from_slice(&delivery.message.payload) {
        Ok(event) => event,
        Err(error) => {
            tracing::error!(%id, %error, "unreadable payment.succeeded; acknowledged and dropped");
            decision("dedup", GRANT_KIND, "-", &id, "malformed");
            if let Err(error) = delivery.ack().await {
                tracing::warn!(%id, %error, "ack failed");
            }
            return Handled::Malformed;
        }
    };
    let outcome = match grants.grant(&event, settings.dedup).await {
        Ok(GrantOutcome::Busy) => None,
        Ok(outcome) => Some(outcome),
        Err(error) => {
            tracing::warn!(%id, payment_no = %event.payment_no, %error, "grant not applied now; redelivery requested");
            None
        }
    };
    let Some(outcome) = outcome else {
        decision(
            "dedup",
            GRANT_KIND,
            &event.tenant_id,
            &event.payment_no,
            "busy",
        );
        if let Err(error) = delivery.retry(settings.retry_after).await {
            tracing::warn!(%id, %error, "retry request failed; the broker redelivers after its own timeout");
        }
        return Handled::Retried;
    };
    let (layer, label) = match outcome {
        GrantOutcome::Granted => ("dedup", "granted"),
        GrantOutcome::NothingToGrant => ("dedup", "nothing_to_grant"),
        GrantOutcome::Duplicate => ("dedup", "duplicate"),
        GrantOutcome::Busy => ("dedup", "busy"),
        GrantOutcome::ConstraintHeld => ("constraint", "grant_exists"),
    };
    decision(
        layer,
        GRANT_KIND,
        &event.tenant_id,
        &event.payment_no,
        label,
    );
    if let Err(error) = delivery.ack().await {
        // The grant is committed; the redelivery this causes is a duplicate.
        tracing::warn!(%id, %error, "ack failed after the grant committed");
    }
    Handled::Processed(outcome)
}

/// Consumes from `subscriber` until `stop` turns true.
pub async fn run(
    grants: Arc<dyn Grants>,
    subscriber: Box<dyn Subscriber>,
    settings: ConsumerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let handler = |delivery| {
        let (grants, settings) = (grants.clone(), settings.clone());
        async move { handle(grants.as_ref(), delivery, &settings).await }
    };
    drive(subscriber, settings.retry_after, stop, handler).await;
}

/// Handles one `refund.succeeded` delivery: when the payment is refunded in full, its grant is
/// revoked (deduplicated by the refund number, by compare-and-set on the grant), then the
/// delivery is acknowledged; or redelivery is asked for.
pub async fn handle_refund(
    grants: &dyn Grants,
    delivery: Delivery,
    settings: &ConsumerSettings,
) -> Handled {
    let id = delivery.message.id.clone();
    let event: RefundSucceeded = match serde_json::from_slice(&delivery.message.payload) {
        Ok(event) => event,
        Err(error) => {
            tracing::error!(%id, %error, "unreadable refund.succeeded; acknowledged and dropped");
            decision("dedup", REVOKE_KIND, "-", &id, "malformed");
            if let Err(error) = delivery.ack().await {
                tracing::warn!(%id, %error, "ack failed");
            }
            return Handled::Malformed;
        }
    };
    let label = match grants.revoke(&event).await {
        Ok(RevokeOutcome::Revoked) => "revoked",
        Ok(RevokeOutcome::NothingToRevoke) => "nothing_to_revoke",
        Ok(RevokeOutcome::Duplicate) => "duplicate",
        Ok(RevokeOutcome::Busy) | Err(_) => {
            decision(
                "dedup",
                REVOKE_KIND,
                &event.tenant_id,
                &event.refund_no,
                "busy",
            );
            if let Err(error) = delivery.retry(settings.retry_after).await {
                tracing::warn!(%id, %error, "retry request failed; the broker redelivers after its own timeout");
            }
            return Handled::Retried;
        }
    };
    decision(
        "dedup",
        REVOKE_KIND,
        &event.tenant_id,
        &event.refund_no,
        label,
    );
    if let Err(error) = delivery.ack().await {
        tracing::warn!(%id, %error, "ack failed after the revocation committed");
    }
    Handled::Processed(GrantOutcome::NothingToGrant)
}

/// The revocation consumer: `refund.succeeded` → the grant of a payment refunded in full is
/// revoked once. Runs until `stop` turns true.
pub async fn run_revocations(
    grants: Arc<dyn Grants>,
    subscriber: Box<dyn Subscriber>,
    settings: ConsumerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let handler = |delivery| {
        let (grants, settings) = (grants.clone(), settings.clone());
        async move { handle_refund(grants.as_ref(), delivery, &settings).await }
    };
    drive(subscriber, settings.retry_after, stop, handler).await;
}

/// The consuming loop: one delivery at a time to `handler`, a pause after a delivery it asked
/// to see again and after broker errors (growing, bounded), until `stop` turns true.
async fn drive<F, Fut>(
    mut subscriber: Box<dyn Subscriber>,
    retry_after: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    handler: F,
) where
    F: Fn(Delivery) -> Fut,
    Fut: std::future::Future<Output = Handled>,
{
    let mut failures = 0_u32;
    loop {
        if *stop.borrow() {
            return;
        }
        match subscriber.next(POLL_WAIT).await {
            Ok(Some(delivery)) => {
                failures = 0;
                if handler(delivery).await == Handled::Retried
                    && pause_or_stop(retry_after, &mut stop).await
                {
                    return;
                }
            }
            Ok(None) => failures = 0,
            Err(error) => {
                failures = failures.saturating_add(1);
                let pause = mideng::outbox::retry_delay(failures, ERROR_PAUSE_MAX);
                tracing::warn!(%error, subscriber = subscriber.name(), "consumer cannot fetch; pausing");
                if pause_or_stop(pause, &mut stop).await {
                    return;
                }
            }
        }
    }
}

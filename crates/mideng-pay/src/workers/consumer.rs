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
//! duplicate.
//!
//! A delivery whose effect fails (the database refused, a bug) is counted per message
//! ([`crate::store::EventFailures`]) and comes again after a pause that doubles per failure
//! (`retry_after`, at most `retry_cap`); after `park_after` failures — at once for a payload
//! nobody can read — the event is **parked** with its payload and last error and acknowledged,
//! so that the broker stops sending it for ever and a person sees it (the console, `mideng
//! events`, `mideng_events_parked_total`); a copy of it the broker still delivers is
//! acknowledged without effect, as is one of a discarded event. A person replays a parked event
//! through the same effect or discards it ([`crate::flows::grant`]).
//!
//! Beside it, when [`ConsumerSettings::revoke_on_refund`] is on, the revocation consumer of
//! `refund.succeeded` ([`run_revocations`]) revokes the grant of a payment refunded in full,
//! once: a dedup claim per refund number and a compare-and-set on the grant, in one
//! transaction, before the ack.

use std::sync::Arc;
use std::time::Duration;

use mideng::outbox::{Delivery, Subscriber};

use crate::domain::events::{GRANT_KIND, REVOKE_KIND};
use crate::flows::decision;
use crate::flows::grant::{About, Effect, apply};
use crate::store::{EventFailures, FailureStatus, GrantOutcome, Grants};
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
    /// Failed once more, or unreadable, too often: parked with its last error and
    /// acknowledged, for a person to replay or discard.
    Parked,
    /// Not processed now; redelivery requested (after a backoff when it failed).
    Retried,
}

/// What a consumer needs: where its effect goes, and where its failures are counted.
#[derive(Clone)]
pub struct ConsumerPorts {
    /// The grants (and their dedup records).
    pub grants: Arc<dyn Grants>,
    /// Failed and parked events.
    pub failures: Arc<dyn EventFailures>,
}

/// Handles one delivery of `payment.succeeded` ([`GRANT_KIND`]) or `refund.succeeded`
/// ([`REVOKE_KIND`]): the effect (deduplicated), then the ack. A failure is counted: the
/// delivery comes again after a growing pause, and after `settings.park_after` failures (at
/// once for a payload nobody can read) the event is parked with its last error and
/// acknowledged, so that the broker stops sending it and a person sees it.
pub async fn handle(
    ports: &ConsumerPorts,
    kind: &'static str,
    delivery: Delivery,
    settings: &ConsumerSettings,
) -> Handled {
    let message = delivery.message.clone();
    // A parked (or discarded) event is a person's now: a copy the broker still holds is
    // acknowledged without its effect.
    match ports.failures.failed_event(&message.id).await {
        Ok(Some(kept))
            if matches!(
                kept.status,
                FailureStatus::Parked | FailureStatus::Discarded
            ) =>
        {
            decision("dedup", kind, "-", &message.id, "parked_copy");
            if let Err(error) = delivery.ack().await {
                tracing::warn!(id = %message.id, %error, "ack of a parked event's copy failed");
            }
            return Handled::Parked;
        }
        Ok(_) => {}
        Err(error) => {
            tracing::warn!(id = %message.id, %error, "the event's failures cannot be read; redelivery requested");
            if let Err(error) = delivery.retry(settings.retry_after).await {
                tracing::warn!(id = %message.id, %error, "retry request failed");
            }
            return Handled::Retried;
        }
    }
    let applied = apply(
        ports.grants.as_ref(),
        kind,
        &message.payload,
        settings.dedup,
    )
    .await;
    let (about, error, unreadable) = match applied {
        None => (
            About {
                tenant: "-".to_owned(),
                subject: message.id.clone(),
            },
            "unreadable payload".to_owned(),
            true,
        ),
        Some((about, Effect::Busy)) => {
            decision("dedup", kind, &about.tenant, &about.subject, "busy");
            if let Err(error) = delivery.retry(settings.retry_after).await {
                tracing::warn!(id = %message.id, %error, "retry request failed; the broker redelivers after its own timeout");
            }
            return Handled::Retried;
        }
        Some((about, Effect::Done(outcome, layer, label))) => {
            decision(layer, kind, &about.tenant, &about.subject, label);
            if let Err(error) = ports.failures.clear(&message.id).await {
                tracing::warn!(id = %message.id, %error, "the event's failure count could not be cleared");
            }
            if let Err(error) = delivery.ack().await {
                // The effect is committed; the redelivery this causes is a duplicate.
                tracing::warn!(id = %message.id, %error, "ack failed after the effect committed");
            }
            return Handled::Processed(outcome);
        }
        Some((about, Effect::Failed(error))) => (about, error, false),
    };
    // It would fail the same way for ever: parked at once.
    let park_after = if unreadable { 1 } else { settings.park_after };
    match ports
        .failures
        .fail(kind, &message, &error, park_after)
        .await
    {
        Ok(failed) if failed.status != FailureStatus::Failing => {
            tracing::error!(id = %message.id, topic = %message.topic, attempts = failed.attempts, %error, "event parked for a person: replay or discard it");
            decision("dedup", kind, &about.tenant, &about.subject, "parked");
            metrics::counter!(crate::metrics::EVENTS_PARKED, "consumer" => kind).increment(1);
            if let Err(error) = delivery.ack().await {
                tracing::warn!(id = %message.id, %error, "ack of a parked event failed; it comes again and stays parked");
            }
            Handled::Parked
        }
        Ok(failed) => {
            let attempts = u32::try_from(failed.attempts).unwrap_or(u32::MAX);
            let pause = backoff(settings, attempts);
            tracing::warn!(id = %message.id, attempts, %error, retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX), "event not processed; redelivery requested");
            decision("dedup", kind, &about.tenant, &about.subject, "failed");
            if let Err(error) = delivery.retry(pause).await {
                tracing::warn!(id = %message.id, %error, "retry request failed; the broker redelivers after its own timeout");
            }
            Handled::Retried
        }
        Err(store) => {
            tracing::warn!(id = %message.id, %error, %store, "event not processed, its failure not counted; redelivery requested");
            if let Err(error) = delivery.retry(settings.retry_after).await {
                tracing::warn!(id = %message.id, %error, "retry request failed");
            }
            Handled::Retried
        }
    }
}

/// The pause before the next delivery of an event that failed `attempts` times: `retry_after`
/// doubled per failure, at most `retry_cap`.
pub fn backoff(settings: &ConsumerSettings, attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    settings
        .retry_after
        .saturating_mul(1_u32 << doublings)
        .min(settings.retry_cap)
}

/// Consumes `payment.succeeded` from `subscriber` until `stop` turns true.
pub async fn run(
    ports: ConsumerPorts,
    subscriber: Box<dyn Subscriber>,
    settings: ConsumerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    drive_kind(ports, GRANT_KIND, subscriber, settings, stop).await;
}

/// The revocation consumer: `refund.succeeded` → the grant of a payment refunded in full is
/// revoked once. Runs until `stop` turns true.
pub async fn run_revocations(
    ports: ConsumerPorts,
    subscriber: Box<dyn Subscriber>,
    settings: ConsumerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    drive_kind(ports, REVOKE_KIND, subscriber, settings, stop).await;
}

async fn drive_kind(
    ports: ConsumerPorts,
    kind: &'static str,
    subscriber: Box<dyn Subscriber>,
    settings: ConsumerSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let handler = |delivery| {
        let (ports, settings) = (ports.clone(), settings.clone());
        async move { handle(&ports, kind, delivery, &settings).await }
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

//! The webhook dispatcher: posts each due delivery to its endpoint, signed after the Standard
//! Webhooks specification, and records the attempt.
//!
//! A round reads the due deliveries of enabled endpoints, claims each by compare-and-set (so a
//! dispatcher on every instance is safe: a delivery is attempted by one of them), and sends up
//! to `concurrency` at once, each bounded by `timeout`. Only a 2xx acknowledges; anything else
//! (another status, a redirect, a refused connection, a timeout) schedules the next attempt
//! after the schedule's next delay, and the schedule's last failure fails the delivery and
//! disables its endpoint, its deliveries kept. A dispatcher that dies mid-attempt leaves the
//! delivery due again once its claim runs out: delivery is at least once, and the unchanged
//! `webhook-id` lets the receiver apply it once. One whose attempt or write outlasts its claim
//! finds the delivery claimed again: its 2xx still settles it, its failure is only recorded
//! (it would otherwise undo a later `DELIVERED`, or fail the delivery and disable the endpoint).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use mideng::StoreError;

use crate::domain::webhook::{SCHEDULE, next_delay, secret_key, signature};
use crate::store::Webhooks;
use crate::store::webhooks::{Attempt, AttemptOutcome, DueDelivery};
use crate::workers::pause_or_stop;

/// How the dispatcher runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Delay before each attempt, the first counted from the event (default
    /// [`SCHEDULE`]: at once, then 5 s … 10 h, about 27.6 hours in all).
    pub schedule: Vec<Duration>,
    /// Whole-attempt timeout (default 10 s).
    pub timeout: Duration,
    /// Pause between rounds that found nothing (default 1 s).
    pub interval: Duration,
    /// Deliveries read per round (default 100).
    pub batch: u32,
    /// Attempts in flight at once (default 8).
    pub concurrency: usize,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            schedule: SCHEDULE.to_vec(),
            timeout: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            batch: 100,
            concurrency: 8,
        }
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Deliveries attempted by this round.
    pub attempted: u32,
    /// Acknowledged with a 2xx.
    pub delivered: u32,
    /// Failed, to be attempted again.
    pub retried: u32,
    /// Failed for good (their endpoints disabled).
    pub exhausted: u32,
}

/// The HTTP client of the dispatcher: no redirects (an endpoint answers itself or fails), the
/// attempt's timeout.
pub fn client(settings: &WebhookSettings) -> Result<reqwest::Client, reqwest::Error> {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(settings.timeout.min(Duration::from_secs(5)))
        .timeout(settings.timeout)
        .user_agent("mideng-webhooks/1")
        .build()
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One attempt: the signed POST and what came of it.
async fn attempt(client: &reqwest::Client, due: &DueDelivery) -> (Attempt, bool) {
    let started = Instant::now();
    let at_ms = mideng::clock::now_ms();
    let timestamp = at_ms.div_euclid(1000);
    let delivery = &due.delivery;
    let (status_code, error) = match secret_key(&due.secret) {
        None => (None, Some("the endpoint's secret is unreadable".to_owned())),
        Some(key) => {
            let signed = signature(
                &key,
                &delivery.event_id,
                timestamp,
                delivery.payload.as_bytes(),
            );
            let sent = client
                .post(&due.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("webhook-id", &delivery.event_id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signed)
                .body(delivery.payload.clone())
                .send()
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    (Some(i64::from(response.status().as_u16())), None)
                }
                Ok(response) => (
                    Some(i64::from(response.status().as_u16())),
                    Some(format!("answered {}", response.status())),
                ),
                Err(error) if error.is_timeout() => (None, Some("timed out".to_owned())),
                Err(error) if error.is_connect() => (None, Some("connection failed".to_owned())),
                Err(_) => (None, Some("transport failure".to_owned())),
            }
        }
    };
    let delivered = error.is_none();
    (
        Attempt {
            attempt: delivery.attempts.saturating_add(1),
            at_ms,
            status_code,
            error,
            duration_ms: ms(started.elapsed()),
        },
        delivered,
    )
}

/// One round: every due delivery (at most `batch`), claimed, sent and recorded.
pub async fn dispatch_once(
    store: &dyn Webhooks,
    client: &reqwest::Client,
    settings: &WebhookSettings,
) -> Result<DispatchReport, StoreError> {
    let now_ms = mideng::clock::now_ms();
    let due = store.due(now_ms, settings.batch.max(1)).await?;
    // The claim outlasts the attempt, so that no other dispatcher takes it meanwhile.
    let until_ms = now_ms.saturating_add(ms(settings.timeout.saturating_mul(2)));
    let mut claimed = Vec::with_capacity(due.len());
    for mut candidate in due {
        if store.claim(&candidate.delivery, until_ms).await? {
            // The claim is its mark: the attempt's result counts only while it is still there.
            candidate.delivery.next_attempt_at_ms = until_ms;
            claimed.push(candidate);
        }
    }
    let results: Vec<_> = futures_util::stream::iter(claimed)
        .map(|due| async move {
            let (attempt, delivered) = attempt(client, &due).await;
            (due, attempt, delivered)
        })
        .buffer_unordered(settings.concurrency.max(1))
        .collect()
        .await;
    let mut report = DispatchReport::default();
    for (due, attempt, delivered) in results {
        report.attempted += 1;
        let delivery = &due.delivery;
        let step = usize::try_from(delivery.step.saturating_add(1)).unwrap_or(usize::MAX);
        let outcome = if delivered {
            report.delivered += 1;
            AttemptOutcome::Delivered
        } else if let Some(delay) = next_delay(&settings.schedule, step) {
            report.retried += 1;
            AttemptOutcome::Retry {
                next_at_ms: attempt.at_ms.saturating_add(ms(delay)),
            }
        } else {
            report.exhausted += 1;
            tracing::error!(
                delivery_id = %delivery.delivery_id, endpoint_id = %delivery.endpoint_id,
                "webhook delivery exhausted its schedule; the endpoint is disabled"
            );
            AttemptOutcome::Exhausted
        };
        let label = match outcome {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry { .. } => "retried",
            AttemptOutcome::Exhausted => "exhausted",
        };
        metrics::counter!("mideng_webhook_attempts_total", "outcome" => label).increment(1);
        tracing::info!(
            delivery_id = %delivery.delivery_id, webhook_id = %delivery.event_id,
            event_type = %delivery.event_type, attempt = attempt.attempt,
            status = ?attempt.status_code, error = ?attempt.error, outcome = label,
            "webhook attempt"
        );
        store.finish(delivery, &attempt, outcome).await?;
    }
    Ok(report)
}

/// Dispatches until `stop` turns true.
pub async fn run(
    store: Arc<dyn Webhooks>,
    settings: WebhookSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let client = match client(&settings) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "no webhook dispatcher: its HTTP client cannot be built");
            return;
        }
    };
    loop {
        let pause = match dispatch_once(store.as_ref(), &client, &settings).await {
            Ok(report) if report.attempted >= settings.batch => Duration::ZERO,
            Ok(_) => settings.interval,
            Err(error) => {
                tracing::warn!(%error, "webhook round failed");
                settings.interval.max(Duration::from_secs(1))
            }
        };
        if pause_or_stop(pause, &mut stop).await {
            return;
        }
    }
}

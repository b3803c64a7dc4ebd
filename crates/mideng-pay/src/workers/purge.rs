//! Retention purge: idempotency records (and with them the channel-notify dedup records),
//! one-time tokens whose retention ended, locks whose holders' time ran out, outbox rows sent longer ago than their retention
//! (7 days by default), webhook deliveries, with their attempts, untouched for the webhook
//! retention (30 days by default), and the tenants' event log for that retention too, deleted
//! in bounded batches. Unsent outbox rows are never
//! purged.
//!
//! What is kept how long: records of the money-moving routes (payment creation, wallet credit
//! and deduct) for [`crate::flows::PaymentSettings::funds_retention`] (30 days by default: a
//! client may replay a funds request that late and must get the original answer), notify dedup
//! records for three days (longer than any channel resends), tokens until they expire. Orders,
//! payments, ledger entries and grants are business records and are never purged. Redis
//! expires its own keys; the purge there deletes nothing.

use std::sync::Arc;
use std::time::Duration;

use mideng::StoreError;
use mideng::lock::LockStore;
use mideng::record::RecordStore;
use mideng::token::TokenStore;

use crate::domain::clock::Clock;
use crate::store::webhooks::Webhooks;
use crate::store::{EventLog, Events};

/// What the purge deletes from: the idempotency records, the tokens and the outbox.
#[derive(Clone)]
pub struct Retained {
    /// Idempotency and dedup records.
    pub records: Arc<dyn RecordStore>,
    /// One-time tokens.
    pub tokens: Arc<dyn TokenStore>,
    /// Locks (their holders' expired entries, on a store that keeps them until a purge).
    pub locks: Arc<dyn LockStore>,
    /// The outbox.
    pub events: Arc<dyn Events>,
    /// Webhook deliveries.
    pub webhooks: Arc<dyn Webhooks>,
    /// The tenants' event log.
    pub event_log: Arc<dyn EventLog>,
    /// The service's clock: what is past its retention is judged by it.
    pub clock: Arc<dyn Clock>,
}

/// How the purge runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PurgeSettings {
    /// Rows per batch (1 ..= 10 000).
    pub batch: u32,
    /// Most batches per round and kind, so that one round stays short; the next round goes on.
    pub batches_per_round: u32,
    /// Pause between rounds of the scheduled worker.
    pub interval: Duration,
    /// How long sent outbox rows are kept (for audits of what was published).
    pub sent_events_retention: Duration,
    /// How long a webhook delivery is kept after its last change.
    pub webhook_retention: Duration,
}

impl Default for PurgeSettings {
    fn default() -> Self {
        Self {
            batch: 1_000,
            batches_per_round: 100,
            interval: Duration::from_secs(60),
            sent_events_retention: Duration::from_secs(7 * 24 * 3600),
            webhook_retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// What one round deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Idempotency and dedup records.
    pub records: u64,
    /// One-time tokens.
    pub tokens: u64,
    /// Locks whose holders' time ran out without a release.
    pub locks: u64,
    /// Sent outbox rows.
    pub events: u64,
    /// Webhook deliveries (with their attempts).
    pub webhook_deliveries: u64,
    /// Logged events.
    pub logged_events: u64,
}

/// One round: batches until a batch comes back short (or the round's bound is reached).
pub async fn purge_once(
    retained: &Retained,
    settings: &PurgeSettings,
) -> Result<PurgeReport, StoreError> {
    let now_ms = retained.clock.now_ms();
    let batch = settings
        .batch
        .clamp(1, mideng::limits::PURGE_BATCH_ROWS_MAX);
    let mut report = PurgeReport::default();
    for _ in 0..settings.batches_per_round {
        let deleted = retained.records.purge_expired(now_ms, batch).await?;
        report.records += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    for _ in 0..settings.batches_per_round {
        let deleted = retained.tokens.purge_expired_tokens(now_ms, batch).await?;
        report.tokens += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    for _ in 0..settings.batches_per_round {
        let deleted = retained.locks.purge_expired_locks(now_ms, batch).await?;
        report.locks += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    let sent_before_ms = now_ms.saturating_sub(
        i64::try_from(settings.sent_events_retention.as_millis()).unwrap_or(i64::MAX),
    );
    for _ in 0..settings.batches_per_round {
        let deleted = retained
            .events
            .purge_sent_events(sent_before_ms, batch)
            .await?;
        report.events += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    let untouched_since_ms = now_ms
        .saturating_sub(i64::try_from(settings.webhook_retention.as_millis()).unwrap_or(i64::MAX));
    for _ in 0..settings.batches_per_round {
        let deleted = retained
            .webhooks
            .purge_deliveries(untouched_since_ms, batch)
            .await?;
        report.webhook_deliveries += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    for _ in 0..settings.batches_per_round {
        let deleted = retained
            .event_log
            .purge_logged(untouched_since_ms, batch)
            .await?;
        report.logged_events += deleted;
        if deleted < u64::from(batch) {
            break;
        }
    }
    metrics::counter!(crate::metrics::PURGED, "kind" => "events").increment(report.events);
    metrics::counter!(crate::metrics::PURGED, "kind" => "logged_events")
        .increment(report.logged_events);
    metrics::counter!(crate::metrics::PURGED, "kind" => "webhook_deliveries")
        .increment(report.webhook_deliveries);
    metrics::counter!(crate::metrics::PURGED, "kind" => "records").increment(report.records);
    metrics::counter!(crate::metrics::PURGED, "kind" => "tokens").increment(report.tokens);
    metrics::counter!(crate::metrics::PURGED, "kind" => "locks").increment(report.locks);
    if report.records
        + report.tokens
        + report.locks
        + report.events
        + report.webhook_deliveries
        + report.logged_events
        > 0
    {
        tracing::info!(?report, "purged past their retention");
    }
    Ok(report)
}

/// The scheduled worker: a round every `settings.interval` until `stop` turns true.
pub async fn run(
    retained: Retained,
    settings: PurgeSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(error) = purge_once(&retained, &settings).await {
            tracing::warn!(%error, "purge round failed");
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

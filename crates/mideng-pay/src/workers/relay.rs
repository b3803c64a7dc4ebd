//! The relay worker: outbox → broker, in rounds, as long as the service runs.
//!
//! A full batch is followed at once by the next round; otherwise the worker pauses for its
//! interval. A failed round (database down) is logged and retried after the interval; rows the
//! broker did not confirm wait with their own back-off in the outbox, so a broker outage costs
//! no events — they go out when it returns.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{Events, OutboxRelay};
use crate::workers::{RelayWorkerSettings, pause_or_stop};

/// How often the backlog gauge is refreshed.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// Runs `relay` until `stop` turns true.
pub async fn run(
    store: Arc<dyn Events>,
    relay: Arc<dyn OutboxRelay>,
    settings: RelayWorkerSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let publisher = relay.publisher();
    let mut last_gauge = tokio::time::Instant::now() - BACKLOG_EVERY;
    loop {
        let pause = match relay.run_once().await {
            Ok(round) => {
                metrics::counter!(crate::metrics::OUTBOX_PUBLISHED, "publisher" => publisher)
                    .increment(u64::from(round.sent));
                metrics::counter!(crate::metrics::OUTBOX_DEFERRED, "publisher" => publisher)
                    .increment(u64::from(round.deferred));
                if round.claimed > 0 {
                    tracing::debug!(?round, publisher, "relay round");
                }
                if round.claimed >= settings.relay.batch && round.deferred == 0 {
                    Duration::ZERO
                } else {
                    settings.interval
                }
            }
            Err(error) => {
                tracing::warn!(%error, publisher, "relay round failed");
                settings.interval.max(Duration::from_secs(1))
            }
        };
        if last_gauge.elapsed() >= BACKLOG_EVERY {
            last_gauge = tokio::time::Instant::now();
            if let Ok(backlog) = store.outbox_backlog().await {
                #[allow(clippy::cast_precision_loss)]
                metrics::gauge!(crate::metrics::OUTBOX_UNSENT).set(backlog.unsent as f64);
            }
        }
        if pause_or_stop(pause, &mut stop).await {
            return;
        }
    }
}

//! What the storm watches while it runs: once a second, the progress bar's live counters
//! (requests sent, duplicates, faults injected, violations seen so far); at every sampling
//! interval, what each layer caught since the last one, for the report's timeline.
//!
//! The layers' figures are the service's own decision counters, read the way the final layer
//! table reads them ([`layers`]): one render of this process's metrics recorder (a deployment
//! the storm started), or one `GET /metrics` per `--target-metrics` listener. Both are cheap
//! next to the workload; a listener that does not answer within [`SAMPLE_TIMEOUT`] leaves its
//! counters out of that sample (its catches then show in the next one).
//!
//! Violations seen so far are those the clients can tell before the audit: a 5xx outside a
//! fault window, a replay that differs from its first answer, an attack acknowledged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::clients::Shared;
use super::facts::layers;
use super::faults::millis;
use super::report::LayerSample;

/// How long one sample waits for a metrics listener.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the progress bar's counters are refreshed.
const TICK: Duration = Duration::from_secs(1);
/// Samples a workload is cut into at most: a day-long storm is sampled every few minutes, a
/// short one every second.
const WORKLOAD_SAMPLES_MAX: u64 = 300;

/// Where the service's decision counters are read.
#[derive(Clone, Debug)]
pub(super) enum Metrics {
    /// This process's recorder: the deployment the storm started.
    InProcess,
    /// The metrics listeners of a deployment the storm did not start (maybe none).
    Listeners(Vec<String>),
}

impl Metrics {
    /// Each source's counters in Prometheus' text format, apart (`None`: that source did not
    /// answer), so that a source that restarts counts from zero on its own: on their sum, one
    /// instance of three restarted would read as the other two's whole counts caught at once.
    async fn render_each(&self, http: &reqwest::Client, timeout: Duration) -> Vec<Option<String>> {
        match self {
            Metrics::InProcess => {
                vec![mideng_pay::app::metrics_handle().map(|handle| handle.render())]
            }
            Metrics::Listeners(bases) => {
                let mut texts = Vec::with_capacity(bases.len());
                for base in bases {
                    texts.push(read_listener(http, base, timeout).await.ok());
                }
                texts
            }
        }
    }

    /// The counters in Prometheus' text format, every answering source's after the other.
    pub(super) async fn render(&self, http: &reqwest::Client, timeout: Duration) -> String {
        let mut text = String::new();
        for body in self.render_each(http, timeout).await.into_iter().flatten() {
            text.push_str(&body);
            text.push('\n');
        }
        text
    }
}

/// One metrics listener's counters in Prometheus' text format, or why they could not be read.
pub(super) async fn read_listener(
    http: &reqwest::Client,
    base: &str,
    timeout: Duration,
) -> Result<String, String> {
    let response = http
        .get(format!("{base}/metrics"))
        .timeout(timeout)
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    response.text().await.map_err(|error| error.to_string())
}

/// Reads the counters of process instance `index` just before it is killed, and keeps them in
/// `shared`: its counters die with it, and the final layer table adds what it had counted up
/// to this reading (counts made between the reading and the kill are lost).
pub(super) async fn read_before_kill(shared: &Shared, base: Option<String>, index: usize) {
    let Some(base) = base else {
        return;
    };
    match read_listener(&shared.http, &base, SAMPLE_TIMEOUT).await {
        Ok(text) => shared
            .killed_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text),
        Err(error) => tracing::warn!(%error, index, "an instance's metrics before its kill"),
    }
}

/// The sampling interval of a workload of `duration_secs`: a second, or longer so that the
/// workload makes at most [`WORKLOAD_SAMPLES_MAX`] samples.
pub(super) fn interval_for(duration_secs: u64) -> Duration {
    Duration::from_secs(duration_secs.div_ceil(WORKLOAD_SAMPLES_MAX).max(1))
}

/// Every layer's total so far.
fn layer_totals(metrics: &str) -> BTreeMap<String, u64> {
    layers(metrics)
        .into_iter()
        .map(|(layer, outcomes)| (layer, outcomes.values().sum()))
        .collect()
}

/// Every source's totals now; a source that did not answer keeps its `previous` totals (or
/// none), so that it counts nothing in this interval and its next reading is compared with its
/// last.
async fn source_totals(
    metrics: &Metrics,
    http: &reqwest::Client,
    previous: Vec<Option<BTreeMap<String, u64>>>,
) -> Vec<Option<BTreeMap<String, u64>>> {
    metrics
        .render_each(http, SAMPLE_TIMEOUT)
        .await
        .into_iter()
        .enumerate()
        .map(|(index, text)| match text {
            Some(text) => Some(layer_totals(&text)),
            None => previous.get(index).cloned().flatten(),
        })
        .collect()
}

/// What each layer caught between two readings, source by source, summed.
fn caught_by_sources(
    before: &[Option<BTreeMap<String, u64>>],
    after: &[Option<BTreeMap<String, u64>>],
) -> BTreeMap<String, u64> {
    let mut caught: BTreeMap<String, u64> = BTreeMap::new();
    for (index, after) in after.iter().enumerate() {
        let (Some(Some(before)), Some(after)) = (before.get(index), after) else {
            continue;
        };
        for (layer, count) in caught_between(before, after) {
            *caught.entry(layer).or_default() += count;
        }
    }
    caught
}

/// What each layer caught between two readings of the totals (a counter that went down, an
/// instance of a foreign deployment restarted, counts from zero again).
fn caught_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(layer, total)| {
            let earlier = before.get(layer).copied().unwrap_or(0);
            let caught = if *total >= earlier {
                total - earlier
            } else {
                *total
            };
            (layer.clone(), caught)
        })
        .filter(|(_, caught)| *caught > 0)
        .collect()
}

/// Appends `sample`, or, when it is shorter than half an interval (the last one, cut short
/// by the end of sampling), adds it to the one before: a rate over a few milliseconds would
/// be noise.
fn push_sample(samples: &mut Vec<LayerSample>, sample: LayerSample, interval_ms: u64) {
    let short = sample.to_ms.saturating_sub(sample.from_ms) < interval_ms / 2;
    match samples.last_mut() {
        Some(previous) if short => {
            previous.to_ms = sample.to_ms;
            previous.requests += sample.requests;
            for (layer, caught) in sample.caught {
                *previous.caught.entry(layer).or_default() += caught;
            }
        }
        _ => samples.push(sample),
    }
}

/// The bar's message: the live counters (requests sent, duplicates sent, faults injected,
/// violations seen so far).
fn live_counters(shared: &Shared) -> String {
    let requests = shared.requests.load(Ordering::Relaxed);
    let faults = shared.faults.count();
    let (duplicates, violations) = {
        let log = shared.log();
        (
            log.duplicates.values().sum::<u64>(),
            log.client.unexcused_errors.len()
                + log.client.replay_mismatches.len()
                + log.attacks.accepted.len(),
        )
    };
    format!("{requests} req · {duplicates} dup · {faults} faults · {violations} violations so far")
}

/// The running sampler; [`Sampler::stop`] ends it and hands over the samples. Dropped
/// without it (a storm that failed), it stops at once.
pub(super) struct Sampler {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Vec<LayerSample>>>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Sampler {
    /// Starts sampling now, on the clock of `origin`, every `interval`; refreshes `bar` every
    /// second (its position: seconds since `origin`, up to its length).
    pub(super) fn start(
        shared: Arc<Shared>,
        metrics: Metrics,
        bar: indicatif::ProgressBar,
        origin: Instant,
        interval: Duration,
    ) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut totals = source_totals(&metrics, &shared.http, Vec::new()).await;
            let mut requests = shared.requests.load(Ordering::Relaxed);
            let mut from = Instant::now();
            let mut ticker = tokio::time::interval(TICK);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let last = tokio::select! {
                    _ = ticker.tick() => false,
                    _ = &mut stopped => true,
                };
                bar.set_position(
                    origin
                        .elapsed()
                        .as_secs()
                        .min(bar.length().unwrap_or(u64::MAX)),
                );
                bar.set_message(live_counters(&shared));
                // Half a tick of slack: the ticks, not the readings, keep the time.
                if !last && from.elapsed() + TICK / 2 < interval {
                    continue;
                }
                let now_totals = source_totals(&metrics, &shared.http, totals.clone()).await;
                let now_requests = shared.requests.load(Ordering::Relaxed);
                let to = Instant::now();
                push_sample(
                    &mut samples,
                    LayerSample {
                        from_ms: millis(from.saturating_duration_since(origin)),
                        to_ms: millis(to.saturating_duration_since(origin)),
                        requests: now_requests.saturating_sub(requests),
                        caught: caught_by_sources(&totals, &now_totals),
                    },
                    millis(interval),
                );
                (totals, requests, from) = (now_totals, now_requests, to);
                if last {
                    return samples;
                }
            }
        });
        Self {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Takes a last sample, stops, and returns every sample in order.
    pub(super) async fn stop(mut self) -> Vec<LayerSample> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_holds_what_each_layer_caught_in_its_interval() {
        let before = BTreeMap::from([("key".to_owned(), 10), ("cas".to_owned(), 4)]);
        let after = BTreeMap::from([
            ("key".to_owned(), 15),
            ("cas".to_owned(), 4),
            ("dedup".to_owned(), 2),
        ]);
        assert_eq!(
            caught_between(&before, &after),
            BTreeMap::from([("key".to_owned(), 5), ("dedup".to_owned(), 2)])
        );
        // A counter that went down counts again from zero.
        let restarted = BTreeMap::from([("key".to_owned(), 3)]);
        assert_eq!(
            caught_between(&before, &restarted),
            BTreeMap::from([("key".to_owned(), 3)])
        );
    }

    #[test]
    fn a_last_sample_cut_short_joins_the_one_before() {
        let sample = |from_ms, to_ms, requests, caught| LayerSample {
            from_ms,
            to_ms,
            requests,
            caught: BTreeMap::from([("key".to_owned(), caught)]),
        };
        let mut samples = Vec::new();
        push_sample(&mut samples, sample(0, 1000, 1, 5), 1000);
        push_sample(&mut samples, sample(1000, 2000, 1, 7), 1000);
        push_sample(&mut samples, sample(2000, 2040, 1, 2), 1000);
        assert_eq!(samples, [sample(0, 1000, 1, 5), sample(1000, 2040, 2, 9)]);
    }

    #[test]
    fn one_source_restarting_counts_only_its_own_new_catches() {
        let totals = |key: u64| Some(BTreeMap::from([("key".to_owned(), key)]));
        // Three instances; the second is killed (no answer), then back counting from zero.
        let first = vec![totals(100), totals(200), totals(300)];
        let down = vec![totals(110), totals(200), totals(305)];
        let back = vec![totals(120), totals(7), totals(310)];
        assert_eq!(
            caught_by_sources(&first, &down),
            BTreeMap::from([("key".to_owned(), 15)])
        );
        assert_eq!(
            caught_by_sources(&down, &back),
            BTreeMap::from([("key".to_owned(), 22)]),
            "10 + 7 new on the restarted one + 5, not the others' whole totals"
        );
        assert!(caught_by_sources(&[None], &[totals(5)]).is_empty());
    }

    #[test]
    fn layer_totals_sum_a_layers_outcomes_from_the_services_counters() {
        let metrics = "\
mideng_service_decisions_total{layer=\"cas\",operation=\"notify.alipay\",outcome=\"already_paid\"} 3
mideng_service_decisions_total{layer=\"cas\",operation=\"payment.close\",outcome=\"already_paid\"} 2
mideng_service_decisions_total{layer=\"cas\",operation=\"notify.alipay\",outcome=\"paid\"} 40
mideng_idempotency_decisions_total{operation=\"wallet.deduct\",decision=\"replayed\"} 7
";
        assert_eq!(
            layer_totals(metrics),
            BTreeMap::from([("cas".to_owned(), 5), ("key".to_owned(), 7)])
        );
    }

    #[test]
    fn sampling_intervals_stay_bounded() {
        assert_eq!(interval_for(20), Duration::from_secs(1));
        assert_eq!(interval_for(300), Duration::from_secs(1));
        assert_eq!(interval_for(600), Duration::from_secs(2));
        assert_eq!(interval_for(86_400), Duration::from_secs(288));
    }
}

//! The latencies the storm's clients saw, per operation (`POST /v1/orders/{id}/payments`, …),
//! for the report's percentiles.
//!
//! A storm may run for a day at thousands of requests a second, so latencies are not kept one
//! by one: each operation has a log-linear histogram of microseconds (32 buckets per power of
//! two, so a percentile is within 1/32 ≈ 3 % of the true value, reported at its bucket's upper
//! bound) of at most [`BUCKETS_MAX`] counters, plus the exact maximum. Only answered requests
//! are recorded: one the client gave up on has no latency, only a timeout.

use std::time::Duration;

use serde::Serialize;

/// Buckets per power of two, as a power of two.
const SUB_BUCKET_BITS: u32 = 5;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Buckets of a histogram that has seen `u64::MAX` microseconds: its bound.
pub(super) const BUCKETS_MAX: usize = 1920;

/// One operation's latencies.
#[derive(Clone, Debug, Default)]
pub(super) struct LatencyHistogram {
    /// Counts by bucket, grown to the highest bucket seen.
    counts: Vec<u64>,
    count: u64,
    max_us: u64,
}

/// An operation's percentiles, as the report gives them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Answered requests.
    pub count: u64,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 90th percentile, milliseconds.
    pub p90_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// The slowest, milliseconds (exact).
    pub max_ms: f64,
}

/// The bucket of `micros`: exact below [`SUB_BUCKETS`], then [`SUB_BUCKETS`] per power of two.
fn bucket_of(micros: u64) -> usize {
    if micros < SUB_BUCKETS {
        return usize::try_from(micros).unwrap_or(usize::MAX);
    }
    let exponent = 63 - micros.leading_zeros();
    let shift = exponent - SUB_BUCKET_BITS;
    let sub = (micros >> shift) - SUB_BUCKETS;
    let index = SUB_BUCKETS * (u64::from(shift) + 1) + sub;
    usize::try_from(index).unwrap_or(usize::MAX)
}

/// The highest value of bucket `index`.
fn bucket_upper(index: usize) -> u64 {
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    if index < SUB_BUCKETS {
        return index;
    }
    let shift = index / SUB_BUCKETS - 1;
    let low = (SUB_BUCKETS + index % SUB_BUCKETS) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl LatencyHistogram {
    /// Counts one answered request.
    pub(super) fn record(&mut self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let bucket = bucket_of(micros).min(BUCKETS_MAX - 1);
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(micros);
    }

    /// The latency at or below which a fraction `quantile` of the requests were answered,
    /// microseconds (0 when nothing was recorded).
    fn quantile_us(&self, quantile: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        // The rank of the request at that quantile, 1-based: at least the first.
        let wanted = (quantile.clamp(0.0, 1.0) * count_f64(self.count)).ceil();
        let mut seen = 0u64;
        for (index, bucket) in self.counts.iter().enumerate() {
            seen += bucket;
            if count_f64(seen) >= wanted && seen > 0 {
                return bucket_upper(index).min(self.max_us);
            }
        }
        self.max_us
    }

    /// The percentiles the report gives.
    pub(super) fn summary(&self) -> LatencySummary {
        let ms = |micros: u64| count_f64(micros) / 1000.0;
        LatencySummary {
            count: self.count,
            p50_ms: ms(self.quantile_us(0.50)),
            p90_ms: ms(self.quantile_us(0.90)),
            p99_ms: ms(self.quantile_us(0.99)),
            max_ms: ms(self.max_us),
        }
    }
}

/// A count as a float (exact up to 2^53, far beyond any storm's counts and microseconds).
fn count_f64(count: u64) -> f64 {
    count as f64
}

/// The operation a request is counted under: its method and its path with the ids replaced.
/// The service's paths are `/v1/{collection}/{id}/{action or collection}/{id}/…`: the ids sit
/// at the even positions after the version — except a channel's name, kept because each
/// channel has a notify of its own.
pub(super) fn operation_of(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    let mut operation = format!("{method} ");
    let mut previous = "";
    for (index, segment) in path.trim_start_matches('/').split('/').enumerate() {
        operation.push('/');
        let is_id = index >= 2 && index % 2 == 0 && previous != "channels";
        operation.push_str(if is_id { "{id}" } else { segment });
        previous = segment;
    }
    operation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_name_the_route_not_the_ids() {
        assert_eq!(
            operation_of("POST", "/v1/orders/storm1-o-7/payments"),
            "POST /v1/orders/{id}/payments"
        );
        assert_eq!(operation_of("POST", "/v1/orders"), "POST /v1/orders");
        assert_eq!(
            operation_of("POST", "/v1/wallets/u1/deductions/D9/reverse"),
            "POST /v1/wallets/{id}/deductions/{id}/reverse"
        );
        assert_eq!(
            operation_of("POST", "/v1/channels/alipay/notify"),
            "POST /v1/channels/alipay/notify"
        );
        assert_eq!(
            operation_of("GET", "/v1/payments/P1?x=1"),
            "GET /v1/payments/{id}"
        );
    }

    #[test]
    fn buckets_cover_every_value_within_a_thirty_second() {
        for micros in [
            0,
            1,
            31,
            32,
            33,
            63,
            64,
            65,
            1000,
            12_345,
            9_999_999,
            u64::MAX,
        ] {
            let bucket = bucket_of(micros);
            assert!(bucket < BUCKETS_MAX, "{micros}");
            let upper = bucket_upper(bucket);
            assert!(upper >= micros, "{micros} above its bucket's {upper}");
            assert!(
                upper - micros <= micros / 32,
                "{micros} is {upper} in its bucket"
            );
            assert!(bucket == 0 || bucket_upper(bucket - 1) < micros, "{micros}");
        }
    }

    #[test]
    fn percentiles_of_known_latencies() {
        let mut histogram = LatencyHistogram::default();
        // 1 ms to 100 ms, one each: p50 is 50 ms, p90 90 ms, p99 99 ms, max 100 ms.
        for millis in 1..=100 {
            histogram.record(Duration::from_millis(millis));
        }
        let summary = histogram.summary();
        assert_eq!(summary.count, 100);
        for (got, want) in [
            (summary.p50_ms, 50.0),
            (summary.p90_ms, 90.0),
            (summary.p99_ms, 99.0),
        ] {
            assert!(
                got >= want && got <= want * (1.0 + 1.0 / 32.0),
                "{got} for {want}"
            );
        }
        assert_eq!(summary.max_ms, 100.0);
        assert_eq!(
            LatencyHistogram::default().summary(),
            LatencySummary::default()
        );
    }
}

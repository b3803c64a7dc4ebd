//! The latency histograms the toolkit records, through a real axum router on the in-process
//! store: every decision of the layer under its operation and decision, every store operation
//! under its backend and op. A test binary of its own, because the recorder it installs is
//! process-wide.

#![cfg(all(feature = "axum", feature = "memory"))]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use mideng::http::observe::REQUEST_DURATION_HISTOGRAM;
use mideng::http::{IdempotencyLayer, RouteConfig, TenantSource};
use mideng::latency::STORE_DURATION_HISTOGRAM;
use mideng::store::memory::MemoryStore;
use tower::ServiceExt;

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The observations of histogram `name` whose labels include every one of `labels`.
fn observations(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> usize {
    snapshot
        .iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == name
                && labels.iter().all(|(wanted_key, wanted_value)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *wanted_key && label.value() == *wanted_value)
                })
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Histogram(values) => values.len(),
            _ => 0,
        })
        .sum()
}

fn request(key: &str) -> Request<Body> {
    Request::post("/v1/payments")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from("{\"amount\":1}"))
        .expect("valid request")
}

#[tokio::test]
async fn every_decision_and_every_store_operation_is_timed() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test process");
    let store = Arc::new(MemoryStore::new());
    let config = RouteConfig::builder(store, "payment.create")
        .tenant(TenantSource::Fixed("t-1".to_owned()))
        .build()
        .expect("valid config");
    let app = Router::new().route(
        "/v1/payments",
        post(|| async { (StatusCode::CREATED, "paid") }).route_layer(IdempotencyLayer::new(config)),
    );

    for _ in 0..2 {
        let answer = app.clone().oneshot(request("k-1")).await.expect("answer");
        assert_eq!(answer.status(), StatusCode::CREATED);
    }
    let other_body = Request::post("/v1/payments")
        .header("idempotency-key", "k-1")
        .body(Body::from("{\"amount\":2}"))
        .expect("valid request");
    let refused = app.clone().oneshot(other_body).await.expect("answer");
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let snapshot: Snapshot = snapshotter.snapshot().into_vec();
    for (decision, count) in [
        ("proceed", 1),
        ("stored", 1),
        ("replay", 1),
        ("mismatch", 1),
    ] {
        assert_eq!(
            observations(
                &snapshot,
                REQUEST_DURATION_HISTOGRAM,
                &[("operation", "payment.create"), ("decision", decision)],
            ),
            count,
            "{decision}"
        );
    }
    for (op, count) in [("record_begin", 3), ("record_complete", 1)] {
        assert_eq!(
            observations(
                &snapshot,
                STORE_DURATION_HISTOGRAM,
                &[("backend", "memory"), ("op", op)],
            ),
            count,
            "{op}"
        );
    }
}

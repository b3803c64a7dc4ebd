//! What an operator scrapes: the real service on PostgreSQL with tokens on Redis, driven
//! through its API, then `/metrics` read from its own listener. The latency histograms are
//! there as Prometheus histograms (`_bucket` lines): per route template, per idempotency
//! decision, and per database and Redis round trip.
//!
//! The metrics recorder is process-wide, so this is a test binary of its own; every assertion
//! asks for "at least", which other tests in the same process could not break.

use std::sync::Arc;

use mideng_channel::keys::PrivateKey;
use mideng_pay::Application;
use mideng_pay::testing::{Blueprint, TenantAccess, start_simulator};
use mideng_sim::SimConfig;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

fn env_or(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

fn unique(prefix: &str) -> String {
    let mut bytes = [0_u8; 6];
    getrandom::fill(&mut bytes).expect("random");
    format!("{prefix}-{}", hex::encode(bytes))
}

fn fixture(name: &str) -> PrivateKey {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mideng-channel/tests/fixtures")
        .join(name);
    let pem = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    PrivateKey::from_pem(&pem).expect("fixture key")
}

/// The values of the series `name` whose labels include every one of `labels`.
fn values(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (label_text, value) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(key, wanted)| {
                    label_text
                        .split(',')
                        .any(|label| label == format!("{key}=\"{wanted}\""))
                })
                .then(|| value.trim().parse::<f64>().ok())
                .flatten()
        })
        .collect()
}

/// How many observations the histogram `name` holds under `labels`, from its `_bucket` lines
/// (the `+Inf` bucket counts them all); panics, showing the scrape, when it has none.
fn observed(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let bucket = format!("{name}_bucket");
    let mut with_infinity = labels.to_vec();
    with_infinity.push(("le", "+Inf"));
    let buckets = values(text, &bucket, labels);
    assert!(
        buckets.len() > 1,
        "no buckets of {name} {labels:?} in the scrape:\n{text}"
    );
    let total: f64 = values(text, &bucket, &with_infinity).iter().sum();
    assert!(total > 0.0, "{name} {labels:?} observed nothing:\n{text}");
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_show_latency_per_route_per_decision_and_per_round_trip() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (stop, stopped) = watch::channel(false);
    let identity = Arc::new(SimConfig::with_keys(
        fixture("merchant-private.pem"),
        fixture("channel-private.pem"),
    ));
    let simulator = start_simulator(&identity.0, stopped.clone())
        .await
        .expect("simulator");
    let tenant = TenantAccess::new(unique("tenant"), unique("key-0123456789"));
    let blueprint = Blueprint {
        redis_url: Some(env_or("MIDENG_TEST_REDIS_URL", "redis://127.0.0.1:6379/")),
        tenants: vec![tenant.clone()],
        ..Blueprint::new(
            identity,
            &simulator.base,
            env_or(
                "MIDENG_TEST_POSTGRES_URL",
                "postgres://mideng:mideng@127.0.0.1:5432/mideng_test",
            ),
        )
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let application = Application::build(blueprint.settings(&base).expect("settings"), listener)
        .await
        .expect("the service starts (scripts/services up)")
        .with_metrics_listener(metrics_listener);
    let metrics_base = format!(
        "http://{}",
        application.metrics_address().expect("metrics listener")
    );
    let mut serving = stopped.clone();
    tokio::spawn(application.run_until(async move {
        let _ = serving.wait_for(|stop| *stop).await;
    }));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let post = |path: &str, body: serde_json::Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(&tenant.api_key)
            .json(&body)
    };

    // An order, created and read under its id: the id must never become a label.
    let order_id = unique("order");
    let created = post(
        "/v1/orders",
        json!({"order_id": order_id, "user_id": "u-1", "amount": 1999, "currency": "CNY"}),
    )
    .send()
    .await
    .expect("answer");
    assert_eq!(created.status().as_u16(), 201);
    let shown = client
        .get(format!("{base}/v1/orders/{order_id}"))
        .bearer_auth(&tenant.api_key)
        .send()
        .await
        .expect("answer");
    assert_eq!(shown.status().as_u16(), 200);
    // A one-time token: a Redis round trip.
    let token = post("/v1/tokens", json!({})).send().await.expect("answer");
    assert_eq!(token.status().as_u16(), 201);
    // A credit, then its retry: the second answer is a replay.
    let key = unique("credit");
    let credit = json!({"amount": 500, "reference": key});
    for replayed in [false, true] {
        let answer = post("/v1/wallets/u-1/credit", credit.clone())
            .header("Idempotency-Key", &key)
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), 200);
        assert_eq!(
            answer.headers().contains_key("idempotent-replayed"),
            replayed
        );
    }
    // A path no route matches.
    let unknown = client
        .get(format!("{base}/v1/no-such-thing/{order_id}"))
        .send()
        .await
        .expect("answer");
    assert_eq!(unknown.status().as_u16(), 404);

    let scraped = client
        .get(format!("{metrics_base}/metrics"))
        .send()
        .await
        .expect("answer");
    assert_eq!(scraped.status().as_u16(), 200);
    let text = scraped.text().await.expect("text");

    // Per route: the template, never the path.
    let per_route = "mideng_http_request_duration_seconds";
    observed(
        &text,
        per_route,
        &[
            ("route", "/v1/orders/{order_id}"),
            ("method", "GET"),
            ("status_class", "2xx"),
        ],
    );
    observed(
        &text,
        per_route,
        &[("route", "/v1/orders"), ("method", "POST")],
    );
    observed(
        &text,
        per_route,
        &[("route", "unmatched"), ("status_class", "4xx")],
    );
    assert!(!text.contains(&order_id), "a raw path became a label");

    // Per decision.
    let per_decision = "mideng_idempotency_request_duration_seconds";
    observed(
        &text,
        per_decision,
        &[("operation", "wallet.credit"), ("decision", "replay")],
    );
    observed(
        &text,
        per_decision,
        &[("operation", "wallet.credit"), ("decision", "stored")],
    );

    // Round trips: the service's port calls and the toolkit's operations.
    let round_trips = "mideng_store_duration_seconds";
    for op in [
        "tenants.tenant_by_key",
        "orders.create_order",
        "orders.order",
        "wallets.credit",
    ] {
        observed(&text, round_trips, &[("backend", "postgres"), ("op", op)]);
    }
    observed(
        &text,
        round_trips,
        &[("backend", "redis"), ("op", "token_issue")],
    );
    stop.send_replace(true);
}

//! Merchant webhooks end to end: a receiver on loopback that verifies every message with the
//! Standard Webhooks reference library, fails and times out on a schedule, and a second one
//! that never answers 2xx; the service retries under one `webhook-id`, records every attempt,
//! redelivers by hand and disables an endpoint whose delivery exhausted its schedule.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Backend, Service, unique};

/// What the receiver saw: per message, its `webhook-id`, whether the reference library
/// verified it, and its body.
#[derive(Clone, Default)]
struct Received {
    messages: Arc<Mutex<Vec<(String, bool, Value)>>>,
    secret: Arc<Mutex<Option<String>>>,
    hook_calls: Arc<Mutex<u32>>,
}

async fn hook(State(received): State<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    record(&received, &headers, &body);
    let call = {
        let mut calls = received.hook_calls.lock().expect("lock");
        *calls += 1;
        *calls
    };
    match call {
        // Two failures, then an answer slower than the dispatcher's timeout, then 204.
        1 | 2 => StatusCode::INTERNAL_SERVER_ERROR,
        3 => {
            tokio::time::sleep(Duration::from_millis(3_000)).await;
            StatusCode::NO_CONTENT
        }
        _ => StatusCode::NO_CONTENT,
    }
}

async fn down(State(received): State<Received>, headers: HeaderMap, body: Bytes) -> StatusCode {
    record(&received, &headers, &body);
    StatusCode::SERVICE_UNAVAILABLE
}

fn record(received: &Received, headers: &HeaderMap, body: &Bytes) {
    let verified = received
        .secret
        .lock()
        .expect("lock")
        .as_deref()
        .and_then(|secret| standardwebhooks::Webhook::new(secret).ok())
        .is_some_and(|webhook| webhook.verify(body, headers).is_ok());
    let id = headers
        .get("webhook-id")
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let value = serde_json::from_slice(body).unwrap_or(Value::Null);
    received
        .messages
        .lock()
        .expect("lock")
        .push((id, verified, value));
}

async fn receiver(received: Received) -> String {
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .route("/down", post(down))
        .with_state(received);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

/// Waits until `check` holds for the tenant's deliveries; them.
async fn deliveries_until(service: &Service, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let answer = service.get("/v1/webhook-deliveries").await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        let deliveries = answer.json().as_array().cloned().unwrap_or_default();
        if check(&deliveries) {
            return deliveries;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "deliveries never got there: {deliveries:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn of_type<'a>(deliveries: &'a [Value], event_type: &str, endpoint: &str) -> Option<&'a Value> {
    deliveries.iter().find(|delivery| {
        delivery["event_type"] == event_type && delivery["endpoint_id"] == endpoint
    })
}

pub(crate) async fn webhooks_retry_under_one_id_until_acknowledged(backend: Backend) {
    let service = Service::start(backend).await;
    let received = Received::default();
    let base = receiver(received.clone()).await;

    let hook_url = format!("{base}/hook");
    let registered = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": hook_url, "events": ["refund.succeeded", "payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());
    let endpoint = registered.json();
    let secret = endpoint["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with("whsec_"));
    *received.secret.lock().expect("lock") = Some(secret);
    let again = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": hook_url, "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(again.status, 200, "the same URL: the same endpoint");
    assert_eq!(again.json()["endpoint_id"], endpoint["endpoint_id"]);
    for bad in [
        json!({"url": "ftp://merchant.example/h", "events": ["payment.succeeded"]}),
        json!({"url": hook_url, "events": ["payment.created"]}),
        json!({"url": hook_url, "events": []}),
    ] {
        let refused = service.post("/v1/webhook-endpoints", bad, &[]).await;
        assert_eq!(refused.status, 422, "{}", refused.json());
    }
    let down_endpoint = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{base}/down"), "events": ["refund.succeeded"]}),
            &[],
        )
        .await
        .json();

    // A paid order: 500, 500, a timeout, then 204 — under one webhook-id.
    let order_id = unique("o");
    service.create_order(&order_id, "u-w", 1_500).await;
    let created = service.create_payment(&order_id, "alipay").await;
    let number = created.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    service.pay_at_channel(&number).await;
    let endpoint_id = endpoint["endpoint_id"].as_str().expect("id");
    let deliveries = deliveries_until(&service, |deliveries| {
        of_type(deliveries, "payment.succeeded", endpoint_id)
            .is_some_and(|delivery| delivery["status"] == "DELIVERED")
    })
    .await;
    let paid = of_type(&deliveries, "payment.succeeded", endpoint_id).expect("delivery");
    let attempts = paid["attempts"].as_array().expect("attempts");
    // The receiver answers its first two calls with 500, its third after the dispatcher's
    // timeout, and then 204. Every instance on the database dispatches (other tests' services
    // too): one that stops mid-attempt leaves its attempt unrecorded and the delivery due again
    // when its claim runs out — so at most four attempts are recorded, the last the 204, every
    // one before it a failure, and the receiver saw at least four copies.
    assert!(attempts.len() <= 4, "{paid:#}");
    let (last, failed) = attempts.split_last().expect("an attempt");
    assert_eq!(last["status_code"], 204, "{paid:#}");
    assert_eq!(last["error"], Value::Null, "{paid:#}");
    for failed in failed {
        assert!(failed["error"].is_string(), "{paid:#}");
    }
    let webhook_id = paid["webhook_id"].as_str().expect("id").to_owned();
    let messages = received.messages.lock().expect("lock").clone();
    let for_payment: Vec<_> = messages
        .iter()
        .filter(|(_, _, body)| body["data"]["payment_no"] == number.as_str())
        .collect();
    assert!(
        for_payment.len() >= 4 && for_payment.len() >= attempts.len(),
        "{messages:?}"
    );
    assert!(
        for_payment
            .iter()
            .all(|(id, verified, body)| *id == webhook_id
                && *verified
                && body["type"] == "payment.succeeded"),
        "one id, every copy verified by the reference library: {for_payment:?}"
    );

    // By hand: once more, the same id.
    let delivery_id = paid["delivery_id"].as_str().expect("id");
    let redelivered = service
        .post(
            &format!("/v1/webhook-deliveries/{delivery_id}/redeliver"),
            json!({}),
            &[],
        )
        .await;
    assert_eq!(redelivered.status, 202, "{}", redelivered.json());
    let copies_before = for_payment.len();
    let started = Instant::now();
    loop {
        let answer = service
            .get(&format!("/v1/webhook-deliveries?event_id={webhook_id}"))
            .await;
        let shown = answer.json();
        if shown[0]["status"] == "DELIVERED"
            && shown[0]["attempts"]
                .as_array()
                .is_some_and(|again| again.len() > attempts.len())
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{shown:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let copies = received
        .messages
        .lock()
        .expect("lock")
        .iter()
        .filter(|(id, verified, _)| *id == webhook_id && *verified)
        .count();
    assert!(copies > copies_before, "the redelivery carries the same id");

    // A refund: acknowledged by the first endpoint; the second never answers 2xx, exhausts the
    // schedule (four attempts), fails and is disabled, its delivery kept.
    let refund = service
        .post(
            &format!("/v1/payments/{number}/refunds"),
            json!({"amount": 1_500}),
            &[("Idempotency-Key", &unique("rk"))],
        )
        .await;
    assert_eq!(refund.status, 201, "{}", refund.json());
    let down_id = down_endpoint["endpoint_id"].as_str().expect("id");
    let deliveries = deliveries_until(&service, |deliveries| {
        of_type(deliveries, "refund.succeeded", down_id)
            .is_some_and(|delivery| delivery["status"] == "FAILED")
            && of_type(deliveries, "refund.succeeded", endpoint_id)
                .is_some_and(|delivery| delivery["status"] == "DELIVERED")
    })
    .await;
    let failed = of_type(&deliveries, "refund.succeeded", down_id).expect("delivery");
    assert_eq!(
        failed["attempts"].as_array().map(Vec::len),
        Some(4),
        "{failed:#}"
    );
    let endpoints = service.get("/v1/webhook-endpoints").await.json();
    let statuses: Vec<_> = endpoints
        .as_array()
        .expect("list")
        .iter()
        .map(|endpoint| (endpoint["endpoint_id"].clone(), endpoint["status"].clone()))
        .collect();
    assert!(
        statuses.contains(&(json!(down_id), json!("DISABLED"))),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&(json!(endpoint_id), json!("ENABLED"))),
        "{statuses:?}"
    );
}

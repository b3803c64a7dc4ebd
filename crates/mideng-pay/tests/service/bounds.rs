//! Bounds and refusals an attacker probed, each through the real service: one-time tokens past
//! a tenant's limit, refund states asked for without a refund, redeliveries past a delivery's
//! last attempt, and refund reasons that display another text than the one stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use mideng::limits::TOKENS_PER_SCOPE_MAX;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::workers::EventSettings;
use mideng_pay::workers::webhooks::WebhookSettings;
use serde_json::{Value, json};

use crate::harness::{Answer, Backend, Service, WAIT_LIMIT, fast_webhooks, queue_events, unique};

/// A paid payment of `amount` fen on Alipay: its order id and number.
async fn paid(service: &Service, user_id: &str, amount: i64) -> (String, String) {
    service.paid_payment(user_id, "alipay", amount).await
}

async fn refund(service: &Service, payment_no: &str, body: Value, key: &str) -> Answer {
    service
        .post(
            &format!("/v1/payments/{payment_no}/refunds"),
            body,
            &[("Idempotency-Key", key)],
        )
        .await
}

async fn refundable(service: &Service, payment_no: &str) -> i64 {
    let view = service.get(&format!("/v1/payments/{payment_no}")).await;
    assert_eq!(view.status, 200, "{}", view.json());
    view.json()["refundable"].as_i64().expect("refundable")
}

/// A tenant holds at most its limit of unspent tokens: the next one is 429 `too-many-tokens`
/// with `Retry-After`, and spending one (a payment created with it) makes room for one more.
pub(crate) async fn a_tenant_past_its_token_limit_is_answered_429(backend: Backend) {
    let service = Service::start(backend).await;
    let mut held = Vec::new();
    for _ in 0..TOKENS_PER_SCOPE_MAX {
        held.push(service.token().await);
    }
    let assert_refused = |refused: Answer| {
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (429, "too-many-tokens"),
            "{}",
            refused.json()
        );
        let retry_after: u64 = refused
            .header("retry-after")
            .and_then(|seconds| seconds.parse().ok())
            .unwrap_or_else(|| panic!("a Retry-After in seconds: {:?}", refused.headers));
        // Until the earliest token expires: at most a token's life (30 minutes).
        assert!((1..=1_800).contains(&retry_after), "{retry_after}");
    };
    assert_refused(service.post("/v1/tokens", json!({}), &[]).await);

    // A token spent by its payment frees its place.
    let order_id = unique("o");
    service.create_order(&order_id, "u-t", 100).await;
    let created = service
        .post(
            &format!("/v1/orders/{order_id}/payments"),
            json!({"channel": "alipay"}),
            &[("Idempotency-Token", &held[0])],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
    service.token().await;
    assert_refused(service.post("/v1/tokens", json!({}), &[]).await);
}

/// REFUNDING and REFUNDED are reached only through a refund: asked for by transition, they are
/// 409 `illegal-transition`, the order and its payment stay PAID, the grant stays, and a real
/// refund afterwards still refunds the whole amount and moves the order.
pub(crate) async fn refund_states_are_reached_only_through_a_refund(backend: Backend) {
    let service = Service::start(backend).await;
    let user_id = unique("u");
    let (order_id, number) = paid(&service, &user_id, 2_000).await;
    service.settled_grants(&user_id, 1).await;
    for to in ["REFUNDING", "REFUNDED"] {
        let refused = service
            .post(
                &format!("/v1/orders/{order_id}/transitions"),
                json!({ "to": to }),
                &[],
            )
            .await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (409, "illegal-transition"),
            "{}",
            refused.json()
        );
        let detail = refused.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(detail.contains(to) && detail.contains("refund"), "{detail}");
    }
    let order = service.order(&order_id).await;
    assert_eq!(order["status"], "PAID", "{order}");
    assert_eq!(order["payments"][0]["status"], "PAID", "{order}");
    assert_eq!(refundable(&service, &number).await, 2_000);
    let grants = service.settled_grants(&user_id, 1).await;
    assert!(grants[0]["revoked_at"].is_null(), "{grants:#?}");

    let refunded = refund(
        &service,
        &number,
        json!({"amount": 2_000, "reason": "退货"}),
        &unique("rk"),
    )
    .await;
    assert_eq!(refunded.status, 201, "{}", refunded.json());
    let started = Instant::now();
    while service.order(&order_id).await["status"] != "REFUNDED" {
        assert!(started.elapsed() < WAIT_LIMIT, "never refunded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(refundable(&service, &number).await, 0);
}

/// A refund's reason is refused, 422 `invalid-request` naming the field, when it holds a
/// bidirectional control, a line separator or a control character, and nothing is refunded;
/// a refund key reused for another amount or payment is 422 `idempotency-key-reused`, the
/// answer of the key's record (see the error codes in docs/api.md).
pub(crate) async fn refund_reasons_and_keys_are_checked(backend: Backend) {
    let service = Service::start(backend).await;
    let (_, number) = paid(&service, &unique("u"), 3_000).await;
    for reason in [
        "退货\u{202E}gpj.exe",
        "a\u{2066}b\u{2069}",
        "\u{200F}x",
        "line\u{2028}break",
        "nul\u{0}",
        "new\nline",
    ] {
        let refused = refund(
            &service,
            &number,
            json!({"amount": 100, "reason": reason}),
            &unique("rk"),
        )
        .await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (422, "invalid-request"),
            "{reason:?}: {}",
            refused.json()
        );
        assert!(
            refused.json()["detail"]
                .as_str()
                .is_some_and(|detail| detail.starts_with("reason")),
            "{}",
            refused.json()
        );
    }
    assert_eq!(
        refundable(&service, &number).await,
        3_000,
        "nothing refunded"
    );

    let key = unique("rk");
    let first = refund(
        &service,
        &number,
        json!({"amount": 500, "reason": "七天无理由"}),
        &key,
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.json());
    let (_, other) = paid(&service, &unique("u"), 3_000).await;
    for (payment_no, amount) in [(&number, 600), (&other, 500)] {
        let reused = refund(
            &service,
            payment_no,
            json!({"amount": amount, "reason": "七天无理由"}),
            &key,
        )
        .await;
        assert_eq!(
            (reused.status, reused.code().as_str()),
            (422, "idempotency-key-reused"),
            "{}",
            reused.json()
        );
    }
    assert_eq!(refundable(&service, &number).await, 2_500);
    assert_eq!(refundable(&service, &other).await, 3_000);
}

/// Every `webhook-id` the receiver was sent, and how often; it answers 500 to all.
#[derive(Clone, Default)]
struct Failing {
    sent: Arc<Mutex<HashMap<String, usize>>>,
}

impl Failing {
    fn copies(&self, webhook_id: &str) -> usize {
        self.sent
            .lock()
            .expect("lock")
            .get(webhook_id)
            .copied()
            .unwrap_or(0)
    }
}

async fn failing_receiver(failing: Failing) -> String {
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |axum::extract::State(failing): axum::extract::State<Failing>,
                 headers: HeaderMap| async move {
                    let id = headers
                        .get("webhook-id")
                        .and_then(|id| id.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    *failing.sent.lock().expect("lock").entry(id).or_default() += 1;
                    StatusCode::INTERNAL_SERVER_ERROR
                },
            ),
        )
        .with_state(failing);
    crate::harness::serve_on_loopback(app).await
}

/// The delivery of `webhook_id` once it is FAILED.
async fn failed_delivery(service: &Service, webhook_id: Option<&str>) -> Value {
    let path = match webhook_id {
        Some(id) => format!("/v1/webhook-deliveries?event_id={id}"),
        None => "/v1/webhook-deliveries".to_owned(),
    };
    let started = Instant::now();
    loop {
        let answer = service.get(&path).await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        let shown = answer.json();
        if let Some(delivery) = shown["data"]
            .as_array()
            .and_then(|deliveries| deliveries.first())
            .filter(|delivery| delivery["status"] == "FAILED")
        {
            return delivery.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "never failed: {shown:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A delivery is attempted at most 100 times, redeliveries by hand included: the schedule that
/// reaches the bound ends there, the next redelivery is 409 `attempts-exhausted`, and the
/// delivery stays listed with its hundred attempts. On a database of its own (SQLite), so that
/// no other test's dispatcher attempts it too.
pub(crate) async fn a_delivery_is_attempted_at_most_a_hundred_times() {
    const SCHEDULE: usize = 30;
    let events = EventSettings {
        webhooks: Some(WebhookSettings {
            schedule: vec![Duration::ZERO; SCHEDULE],
            interval: Duration::from_millis(10),
            ..fast_webhooks()
        }),
        ..queue_events()
    };
    let service = Service::start_on(
        Backend::Sqlite,
        Backend::Sqlite.database_url(),
        None,
        None,
        PaymentSettings::default(),
        events,
    )
    .await;
    let failing = Failing::default();
    let base = failing_receiver(failing.clone()).await;
    let registered = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{base}/hook"), "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());
    paid(&service, &unique("u"), 800).await;

    let delivery = failed_delivery(&service, None).await;
    let (delivery_id, webhook_id) = (
        delivery["delivery_id"].as_str().expect("id").to_owned(),
        delivery["webhook_id"].as_str().expect("id").to_owned(),
    );
    let redeliver_path = format!("/v1/webhook-deliveries/{delivery_id}/redeliver");
    let redeliver = || service.post(&redeliver_path, json!({}), &[]);
    // 30 attempts a schedule: three by hand after the first reach 120 unbounded.
    for (round, expected) in [(0, 30), (1, 60), (2, 90), (3, 100)] {
        let delivery = failed_delivery(&service, Some(&webhook_id)).await;
        let attempts = delivery["attempts"].as_array().map(Vec::len);
        assert_eq!(attempts, Some(expected), "round {round}: {delivery:#}");
        if expected < 100 {
            // PENDING again when it answers, so the next FAILED seen is this schedule's end.
            let redelivered = redeliver().await;
            assert_eq!(redelivered.status, 202, "{}", redelivered.json());
            assert_eq!(redelivered.json()["status"], "PENDING");
        }
    }
    let refused = redeliver().await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (409, "attempts-exhausted"),
        "{}",
        refused.json()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        failing.copies(&webhook_id),
        100,
        "nothing sent past the bound"
    );
    let listed = service.get("/v1/webhook-deliveries").await.json();
    let shown = listed["data"]
        .as_array()
        .and_then(|deliveries| {
            deliveries
                .iter()
                .find(|delivery| delivery["delivery_id"] == delivery_id.as_str())
        })
        .unwrap_or_else(|| panic!("the delivery stays listed: {listed:#}"));
    assert_eq!(shown["status"], "FAILED", "{shown:#}");
    let attempts = shown["attempts"].as_array().expect("attempts");
    let numbers: Vec<i64> = attempts
        .iter()
        .map(|attempt| attempt["attempt"].as_i64().expect("number"))
        .collect();
    assert_eq!(
        numbers,
        (1..=100).collect::<Vec<_>>(),
        "every attempt shown"
    );
}

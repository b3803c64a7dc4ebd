//! Merchant webhooks end to end: a receiver on loopback that verifies every message with the
//! Standard Webhooks reference library, fails and times out on a schedule, and a second one
//! that never answers 2xx; the service retries under one `webhook-id`, records every attempt,
//! redelivers by hand and disables an endpoint whose delivery exhausted its schedule; and an
//! endpoint that never answers, which delays no other tenant's deliveries, and the read of due
//! deliveries that keeps one endpoint from filling it. The URLs that must never be reached are
//! in `webhook_targets`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::store::webhooks::{DueDelivery, DueQuery};
use mideng_pay::workers::EventSettings;
use mideng_pay::workers::webhooks::WebhookSettings;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::harness::{
    Backend, Service, WAIT_LIMIT, fast_webhooks, isolated_database, queue_events, unique,
};

/// What the receiver saw: per message, its `webhook-id`, whether the reference library
/// verified it, and its body.
#[derive(Clone, Default)]
struct Received {
    messages: Arc<Mutex<Vec<(String, bool, Value)>>>,
    secret: Arc<Mutex<Option<String>>>,
    hook_calls: Arc<Mutex<u32>>,
    /// `/down` answers 204 from when this turns true.
    recovered: Arc<std::sync::atomic::AtomicBool>,
    /// The `webhook-id` of every message `/down` was sent.
    down_ids: Arc<Mutex<Vec<String>>>,
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
    let id = headers
        .get("webhook-id")
        .and_then(|id| id.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    received.down_ids.lock().expect("lock").push(id);
    if received.recovered.load(Ordering::SeqCst) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
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
    crate::harness::serve_on_loopback(app).await
}

/// Waits until `check` holds for the tenant's deliveries; them.
pub(crate) async fn deliveries_until(
    service: &Service,
    check: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let answer = service.get("/v1/webhook-deliveries").await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        let deliveries = answer.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
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
    // The same attempts a page of one at a time, then refusals of a cursor that is no number
    // and of a delivery that is not this tenant's.
    let delivery_path = format!(
        "/v1/webhook-deliveries/{}/attempts",
        paid["delivery_id"].as_str().expect("id")
    );
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = service
            .get(&format!("{delivery_path}?limit=1&starting_after={after}"))
            .await
            .json();
        let data = page["data"].as_array().expect("data").clone();
        if let Some(last) = data.last() {
            after = last["attempt"].as_i64().expect("number");
        }
        paged.extend(data);
        if page["has_more"] != true {
            break;
        }
    }
    // Other instances may record one more attempt meanwhile: the pages start as the list did.
    assert_eq!(&paged[..attempts.len()], &attempts[..], "{paged:#?}");
    let refused = service
        .get(&format!("{delivery_path}?starting_after=first"))
        .await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (400, "invalid-query")
    );
    assert_eq!(
        service
            .get("/v1/webhook-deliveries/W20260101000000aaaaaaaaaaaaaaaa/attempts")
            .await
            .status,
        404
    );
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
        if shown["data"][0]["status"] == "DELIVERED"
            && shown["data"][0]["attempts"]
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

    // While it is disabled, a refund of another payment: its delivery to the disabled endpoint
    // is kept, PENDING and not attempted.
    let (_, other_no) = service.paid_payment("u-w", "alipay", 700).await;
    let refund = service
        .post(
            &format!("/v1/payments/{other_no}/refunds"),
            json!({"amount": 700}),
            &[("Idempotency-Key", &unique("rk"))],
        )
        .await;
    assert_eq!(refund.status, 201, "{}", refund.json());
    let refund_no = refund.json()["refund_no"]
        .as_str()
        .expect("number")
        .to_owned();
    let is_waiting = |delivery: &Value| {
        delivery["event_type"] == "refund.succeeded"
            && delivery["endpoint_id"] == down_id
            && delivery["status"] == "PENDING"
    };
    let deliveries = deliveries_until(&service, |deliveries| {
        deliveries.iter().any(is_waiting)
            && deliveries.iter().any(|delivery| {
                delivery["event_type"] == "refund.succeeded"
                    && delivery["endpoint_id"] == endpoint_id
                    && delivery["status"] == "DELIVERED"
                    && delivery["webhook_id"] != failed["webhook_id"]
            })
    })
    .await;
    let waiting = deliveries
        .iter()
        .find(|delivery| is_waiting(delivery))
        .expect("waiting")
        .clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting_id = waiting["webhook_id"].as_str().expect("id").to_owned();
    let sent_to_disabled = |id: &str| {
        received
            .down_ids
            .lock()
            .expect("lock")
            .iter()
            .filter(|sent| *sent == id)
            .count()
    };
    assert_eq!(
        sent_to_disabled(&waiting_id),
        0,
        "nothing sent while disabled"
    );
    let shown = service
        .get(&format!("/v1/webhook-deliveries?event_id={waiting_id}"))
        .await
        .json();
    let kept = shown["data"]
        .as_array()
        .and_then(|deliveries| {
            deliveries
                .iter()
                .find(|delivery| delivery["endpoint_id"] == down_id)
        })
        .expect("kept");
    assert_eq!(kept["status"], "PENDING", "{kept:#}");
    assert_eq!(kept["attempts"], json!([]), "{kept:#}");

    // The merchant fixes the endpoint and redelivers the failed delivery: the answer shows its
    // four attempts, the endpoint is enabled, and the delivery kept while it was disabled goes
    // out too, under its own webhook-id, with the refund it was written for.
    received.recovered.store(true, Ordering::SeqCst);
    let failed_delivery_id = failed["delivery_id"].as_str().expect("id");
    let redelivered = service
        .post(
            &format!("/v1/webhook-deliveries/{failed_delivery_id}/redeliver"),
            json!({}),
            &[],
        )
        .await;
    assert_eq!(redelivered.status, 202, "{}", redelivered.json());
    assert_eq!(
        redelivered.json()["attempts"].as_array().map(Vec::len),
        Some(4),
        "the redelivery's answer shows the delivery's attempts: {}",
        redelivered.json()
    );
    deliveries_until(&service, |deliveries| {
        let down_refunds: Vec<_> = deliveries
            .iter()
            .filter(|delivery| {
                delivery["event_type"] == "refund.succeeded" && delivery["endpoint_id"] == down_id
            })
            .collect();
        down_refunds.len() == 2
            && down_refunds
                .iter()
                .all(|delivery| delivery["status"] == "DELIVERED")
    })
    .await;
    assert!(sent_to_disabled(&waiting_id) >= 1, "sent once enabled");
    let messages = received.messages.lock().expect("lock").clone();
    let late: Vec<_> = messages
        .iter()
        .filter(|(id, _, _)| *id == waiting_id)
        .collect();
    assert!(
        late.iter()
            .all(|(_, _, body)| body["type"] == "refund.succeeded"
                && body["data"]["refund_no"] == refund_no.as_str()),
        "{late:?}"
    );
}

/// What the stalled receiver saw: requests open now and the most open at once, requests
/// received, and requests answered (none until the test releases them).
#[derive(Clone)]
struct Stalled {
    open: Arc<AtomicUsize>,
    open_max: Arc<AtomicUsize>,
    received: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    released: watch::Receiver<bool>,
}

/// Counts a request open until its handler ends, answered or cut off.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts the request and answers only once the test releases it.
async fn stall(State(stalled): State<Stalled>) -> StatusCode {
    let open_now = stalled.open.fetch_add(1, Ordering::SeqCst) + 1;
    let _open = Open(stalled.open.clone());
    stalled.open_max.fetch_max(open_now, Ordering::SeqCst);
    stalled.received.fetch_add(1, Ordering::SeqCst);
    let mut released = stalled.released.clone();
    let _ = released.wait_for(|released| *released).await;
    stalled.answered.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// `/stall` (see [`stall`]) and `/ok`, which answers 204 at once.
async fn stalling_receiver(stalled: Stalled) -> String {
    let app = axum::Router::new()
        .route("/stall", post(stall))
        .route("/ok", post(|| async { StatusCode::NO_CONTENT }))
        .with_state(stalled);
    crate::harness::serve_on_loopback(app).await
}

/// An order of the tenant's, paid at the channel: a `payment.succeeded` event.
pub(crate) async fn paid_order(service: &Service) {
    let order_id = unique("o");
    service.create_order(&order_id, "u-stall", 900).await;
    let created = service.create_payment(&order_id, "alipay").await;
    assert_eq!(created.status, 201, "{}", created.json());
    let number = created.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    service.pay_at_channel(&number).await;
}

/// Waits until `check` holds; fails the test after [`WAIT_LIMIT`].
pub(crate) async fn until(what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < WAIT_LIMIT, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One tenant's endpoint that accepts and never answers, twenty of its events queued, holds
/// only its own slots: another tenant's deliveries all arrive while its attempts still hang,
/// and it never has more than `in_flight_per_endpoint_max` requests open. One dispatcher serves
/// both tenants, on a database of its own (every instance on a database dispatches), with an
/// attempt timeout longer than the test's every wait, so that nothing here comes of a timeout.
pub(crate) async fn a_stalled_endpoint_delays_only_its_own_deliveries(backend: Backend) {
    const STALLED_EVENTS: usize = 20;
    const HEALTHY_EVENTS: usize = 10;
    let cap = WebhookSettings::default().in_flight_per_endpoint_max;
    let database_url = isolated_database(backend).await;
    let dispatching = EventSettings {
        webhooks: Some(WebhookSettings {
            timeout: Duration::from_secs(120),
            ..fast_webhooks()
        }),
        ..queue_events()
    };
    let stalled_tenant = Service::start_on(
        backend,
        database_url.clone(),
        None,
        None,
        PaymentSettings::default(),
        dispatching,
    )
    .await;
    // The other tenant, on a second instance of the deployment without a dispatcher of its
    // own: the first instance's dispatcher serves both.
    let healthy_tenant = Service::start_on(
        backend,
        database_url,
        Some(stalled_tenant.sim.clone()),
        None,
        PaymentSettings::default(),
        EventSettings {
            webhooks: None,
            ..queue_events()
        },
    )
    .await;
    assert_ne!(stalled_tenant.tenant, healthy_tenant.tenant);

    let (release, released) = watch::channel(false);
    let stalled = Stalled {
        open: Arc::default(),
        open_max: Arc::default(),
        received: Arc::default(),
        answered: Arc::default(),
        released,
    };
    let base = stalling_receiver(stalled.clone()).await;
    for (service, path) in [(&stalled_tenant, "/stall"), (&healthy_tenant, "/ok")] {
        let registered = service
            .post(
                "/v1/webhook-endpoints",
                json!({"url": format!("{base}{path}"), "events": ["payment.succeeded"]}),
                &[],
            )
            .await;
        assert_eq!(registered.status, 201, "{}", registered.json());
    }

    // The stalled tenant's events queued, its first attempts hanging.
    for _ in 0..STALLED_EVENTS {
        paid_order(&stalled_tenant).await;
    }
    deliveries_until(&stalled_tenant, |deliveries| {
        deliveries.len() == STALLED_EVENTS
    })
    .await;
    until("the stalled endpoint holds its slots", || {
        stalled.open.load(Ordering::SeqCst) == cap
    })
    .await;

    // The healthy tenant's events, all delivered while the stalled attempts still hang.
    for _ in 0..HEALTHY_EVENTS {
        paid_order(&healthy_tenant).await;
    }
    let delivered = deliveries_until(&healthy_tenant, |deliveries| {
        deliveries.len() == HEALTHY_EVENTS
            && deliveries
                .iter()
                .all(|delivery| delivery["status"] == "DELIVERED")
    })
    .await;
    assert_eq!(
        stalled.answered.load(Ordering::SeqCst),
        0,
        "the stalled endpoint answered nothing while the other tenant's {} deliveries arrived",
        delivered.len()
    );
    assert_eq!(
        stalled.open.load(Ordering::SeqCst),
        cap,
        "its attempts still hang"
    );
    assert_eq!(
        stalled.received.load(Ordering::SeqCst),
        cap,
        "no more of its deliveries were started meanwhile"
    );
    let pending = stalled_tenant.get("/v1/webhook-deliveries").await.json();
    assert!(
        pending["data"]
            .as_array()
            .expect("list")
            .iter()
            .all(|delivery| delivery["status"] == "PENDING"),
        "{pending:#}"
    );

    // Released, every one of its deliveries arrives, once each, never more than `cap` at once.
    release.send_replace(true);
    deliveries_until(&stalled_tenant, |deliveries| {
        deliveries.len() == STALLED_EVENTS
            && deliveries
                .iter()
                .all(|delivery| delivery["status"] == "DELIVERED")
    })
    .await;
    assert_eq!(stalled.received.load(Ordering::SeqCst), STALLED_EVENTS);
    assert_eq!(stalled.answered.load(Ordering::SeqCst), STALLED_EVENTS);
    assert!(
        stalled.open_max.load(Ordering::SeqCst) <= cap,
        "at most {cap} open at once, saw {}",
        stalled.open_max.load(Ordering::SeqCst)
    );
}

/// A read of the due deliveries, as the dispatcher makes it, on every backend: at most
/// `per_endpoint` of each endpoint (its oldest due), none of the endpoints and tenants left
/// out, whatever their ids hold, oldest due first. On a database of its own with no dispatcher,
/// so that every delivery stays due.
pub(crate) async fn a_read_of_due_deliveries_takes_a_few_per_endpoint_and_leaves_out_what_is_held(
    backend: Backend,
) {
    let database_url = isolated_database(backend).await;
    let quiet = || EventSettings {
        webhooks: None,
        ..queue_events()
    };
    let first = Service::start_on(
        backend,
        database_url.clone(),
        None,
        None,
        PaymentSettings::default(),
        quiet(),
    )
    .await;
    let second = Service::start_on(
        backend,
        database_url,
        Some(first.sim.clone()),
        None,
        PaymentSettings::default(),
        quiet(),
    )
    .await;
    let register = async |service: &Service, path: &str| {
        let registered = service
            .post(
                "/v1/webhook-endpoints",
                // Never attempted: no dispatcher runs.
                json!({"url": format!("http://127.0.0.1:9/{path}"), "events": ["payment.succeeded"]}),
                &[],
            )
            .await;
        assert_eq!(registered.status, 201, "{}", registered.json());
        registered.json()["endpoint_id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let (one, two) = (register(&first, "one").await, register(&first, "two").await);
    let three = register(&second, "three").await;
    for _ in 0..3 {
        paid_order(&first).await;
    }
    paid_order(&second).await;
    deliveries_until(&first, |deliveries| deliveries.len() == 6).await;
    deliveries_until(&second, |deliveries| deliveries.len() == 1).await;

    let store = &first.state.ports.store.webhooks;
    let read = async |query: DueQuery<'_>| {
        let due = store.due(&query).await.expect("a read");
        let order: Vec<_> = due
            .iter()
            .map(|due| {
                (
                    due.delivery.next_attempt_at_ms,
                    due.delivery.delivery_id.clone(),
                )
            })
            .collect();
        assert!(order.is_sorted(), "oldest due first: {order:?}");
        due
    };
    let per_endpoint = |due: &[DueDelivery], endpoint: &str| {
        due.iter()
            .filter(|due| due.delivery.endpoint_id == endpoint)
            .count()
    };
    let all = read(DueQuery::all(i64::MAX, 100)).await;
    assert_eq!(all.len(), 7);

    let few = read(DueQuery {
        per_endpoint: 2,
        ..DueQuery::all(i64::MAX, 100)
    })
    .await;
    assert_eq!(
        [&one, &two, &three].map(|endpoint| per_endpoint(&few, endpoint)),
        [2, 2, 1]
    );
    for due in &few {
        let oldest: Vec<_> = all
            .iter()
            .filter(|other| other.delivery.endpoint_id == due.delivery.endpoint_id)
            .take(2)
            .map(|other| &other.delivery.delivery_id)
            .collect();
        assert!(
            oldest.contains(&&due.delivery.delivery_id),
            "its endpoint's oldest"
        );
    }

    // Ids with the characters a list could confuse (quotes, commas, brackets) leave nothing
    // else out.
    let held = [one.clone(), "x\",\"y], [\\".to_owned()];
    let without_one = read(DueQuery {
        skip_endpoints: &held,
        ..DueQuery::all(i64::MAX, 100)
    })
    .await;
    assert_eq!(
        [&one, &two, &three].map(|endpoint| per_endpoint(&without_one, endpoint)),
        [0, 3, 1]
    );
    let full = [first.tenant.clone(), "'); --".to_owned()];
    let without_first = read(DueQuery {
        skip_tenants: &full,
        ..DueQuery::all(i64::MAX, 100)
    })
    .await;
    assert_eq!(
        [&one, &two, &three].map(|endpoint| per_endpoint(&without_first, endpoint)),
        [0, 0, 1]
    );
    let limited = read(DueQuery::all(i64::MAX, 3)).await;
    assert_eq!(
        limited
            .iter()
            .map(|due| &due.delivery.delivery_id)
            .collect::<Vec<_>>(),
        all.iter()
            .take(3)
            .map(|due| &due.delivery.delivery_id)
            .collect::<Vec<_>>()
    );
    assert!(read(DueQuery::all(0, 100)).await.is_empty(), "none due yet");
}

//! Retention purge through the service: what is past its retention goes, funds answers stay
//! for their 30 days. On the embedded default only: the purge is global by design, and on the
//! servers' shared test databases it would reach into other tests' records (the SQL of the
//! purge itself is held to the toolkit's conformance suite on every store).

use std::time::Duration;

use mideng::record::{Decision, RecordPolicy, StoredResponse};
use mideng::{Fingerprint, IdempotencyKey, Scope, clock};
use mideng_pay::workers::purge::{PurgeSettings, purge_once};
use serde_json::json;

use crate::harness::{Backend, Service, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_purge_deletes_only_what_is_past_its_retention() {
    let service = Service::start(Backend::Sqlite).await;
    let user = unique("u");
    let credit = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 100, "reference": "r"}),
            &[("Idempotency-Key", "keep-credit")],
        )
        .await;
    assert_eq!(credit.status, 200);
    // A record whose retention ends in a moment, as a short-lived route would leave.
    let scope = Scope::new(&service.tenant, "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse("gone-soon").expect("key");
    let policy =
        RecordPolicy::new(Duration::from_millis(100), Duration::from_millis(300)).expect("policy");
    let Decision::Proceed(lease) = service
        .state
        .records
        .begin(&scope, &key, &Fingerprint::of_parts(&[b"x"]), &policy)
        .await
        .expect("begin")
    else {
        panic!("a fresh key proceeds");
    };
    let done = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: b"{}".to_vec(),
    };
    service
        .state
        .records
        .complete(&lease, &done)
        .await
        .expect("complete");
    let token = service.token().await;

    let early = purge_once(&service.state.retained(), &PurgeSettings::default())
        .await
        .expect("purge");
    assert_eq!(early.records, 0, "nothing is past its retention yet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let report = purge_once(
        &service.state.retained(),
        &PurgeSettings {
            batch: 1,
            ..PurgeSettings::default()
        },
    )
    .await
    .expect("purge");
    assert_eq!(report.records, 1, "{report:?}");

    let gone = service
        .get("/v1/idempotency-keys/gone-soon?operation=wallet.deduct")
        .await;
    assert_eq!(gone.status, 404);
    let kept = service
        .get("/v1/idempotency-keys/keep-credit?operation=wallet.credit")
        .await;
    assert_eq!(kept.status, 200);
    let record = service
        .state
        .records
        .find_record(
            &Scope::new(&service.tenant, "wallet.credit").expect("scope"),
            &IdempotencyKey::parse("keep-credit").expect("key"),
        )
        .await
        .expect("find")
        .expect("kept");
    assert!(
        record.expires_at_ms > clock::now_ms() + 29 * 24 * 3600 * 1000,
        "funds answers are kept 30 days"
    );
    let replay = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 100, "reference": "r"}),
            &[("Idempotency-Key", "keep-credit")],
        )
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    // A merchant's endpoint, so that the payment's event has a delivery to keep and purge.
    let hooked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hooked.clone();
    let base = crate::harness::serve_on_loopback(axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { axum::http::StatusCode::NO_CONTENT }
        }),
    ))
    .await;
    let registered = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{base}/hook"), "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());

    // The unexpired token survived too.
    let order_id = unique("o");
    service.create_order(&order_id, &user, 100).await;
    let paid = service
        .post(
            &format!("/v1/orders/{order_id}/payments"),
            json!({"channel": "alipay"}),
            &[("Idempotency-Token", &token)],
        )
        .await;
    assert_eq!(paid.status, 201, "{}", paid.json());

    // The payment's event: sent, kept for its retention, then purged; its grant stays.
    let payment_no = paid.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    assert_eq!(service.pay_at_channel(&payment_no).await["outcome"], "paid");
    service.settled_grants(&user, 1).await;
    // The relay marks the row sent just after the queue took it; the consumer may be faster.
    let started = std::time::Instant::now();
    while service
        .state
        .ports
        .store
        .events
        .outbox_backlog()
        .await
        .expect("backlog")
        .unsent
        > 0
    {
        assert!(started.elapsed() < crate::harness::WAIT_LIMIT, "never sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let recent = purge_once(&service.state.retained(), &PurgeSettings::default())
        .await
        .expect("purge");
    assert_eq!(recent.events, 0, "sent a moment ago: kept for 7 days");
    // Its webhook delivery: delivered, kept for the webhook retention (30 days), then purged
    // with its attempts.
    let started = std::time::Instant::now();
    let delivered = |shown: &serde_json::Value| {
        shown["data"].as_array().is_some_and(|deliveries| {
            deliveries.len() == 1
                && deliveries[0]["status"] == "DELIVERED"
                && deliveries[0]["attempts"].as_array().map(Vec::len) == Some(1)
        })
    };
    loop {
        let shown = service.get("/v1/webhook-deliveries").await.json();
        if delivered(&shown) {
            break;
        }
        assert!(started.elapsed() < crate::harness::WAIT_LIMIT, "{shown:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(recent.webhook_deliveries, 0, "{recent:?}");
    assert_eq!(recent.logged_events, 0, "{recent:?}");
    let logged = service.get("/v1/events").await.json();
    assert_eq!(
        logged["data"].as_array().map(Vec::len),
        Some(1),
        "{logged:#}"
    );
    let expired = purge_once(
        &service.state.retained(),
        &PurgeSettings {
            sent_events_retention: Duration::ZERO,
            webhook_retention: Duration::ZERO,
            ..PurgeSettings::default()
        },
    )
    .await
    .expect("purge");
    assert_eq!(expired.events, 1, "{expired:?}");
    assert_eq!(expired.webhook_deliveries, 1, "{expired:?}");
    assert_eq!(
        expired.logged_events, 1,
        "the event log keeps the webhook retention"
    );
    assert_eq!(
        service.get("/v1/events").await.json(),
        json!({"data": [], "has_more": false})
    );
    let shown = service.get("/v1/webhook-deliveries").await.json();
    assert_eq!(
        shown,
        json!({"data": [], "has_more": false}),
        "purged with its attempts"
    );
    assert_eq!(
        hooked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "delivered once"
    );
    assert_eq!(service.grants(&user).await.len(), 1);
}

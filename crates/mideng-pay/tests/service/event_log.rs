//! What happened to a tenant, read back in order a page at a time (`GET /v1/events`): every
//! event its webhooks carry, under the same id as their messages, in the order it happened,
//! paged by cursor without a gap or a repeat, and no other tenant's; its payments and refunds
//! and orders listed the same way.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Backend, Service, unique};

/// Every page of the tenant's events, `limit` at a time; each page's answer too.
async fn every_page(service: &Service, limit: u32) -> (Vec<Value>, Vec<Value>) {
    every_page_of(service, "/v1/events", "event_id", limit).await
}

/// Every page of the list at `list`, whose items' ids are `id`, `limit` at a time.
async fn every_page_of(
    service: &Service,
    list: &str,
    id: &str,
    limit: u32,
) -> (Vec<Value>, Vec<Value>) {
    let (mut events, mut pages) = (Vec::new(), Vec::new());
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(after) => format!("{list}?limit={limit}&starting_after={after}"),
            None => format!("{list}?limit={limit}"),
        };
        let answer = service.get(&path).await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        let page = answer.json();
        let data = page["data"].as_array().expect("data").clone();
        assert!(data.len() <= limit as usize, "{page:#}");
        after = data
            .last()
            .map(|item| item[id].as_str().expect("id").to_owned());
        events.extend(data);
        let more = page["has_more"] == true;
        pages.push(page);
        if !more {
            return (events, pages);
        }
        assert!(pages.len() < 50, "pages never end");
    }
}

pub(crate) async fn a_tenant_reads_what_happened_in_order_a_page_at_a_time(backend: Backend) {
    let service = Service::start(backend).await;
    // A receiver that acknowledges everything: the messages' ids are the events' ids.
    let hooks = crate::harness::serve_on_loopback(
        axum::Router::new().route("/hook", post(|| async { StatusCode::NO_CONTENT })),
    )
    .await;
    let endpoint = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{hooks}/hook"), "events": ["payment.succeeded", "refund.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(endpoint.status, 201, "{}", endpoint.json());
    let empty = service.get("/v1/events").await.json();
    assert_eq!(empty, json!({"data": [], "has_more": false}));

    let mut paid = Vec::new();
    for amount in [100, 200, 300] {
        paid.push(service.paid_payment("u-log", "alipay", amount).await.1);
    }
    let refund = service
        .post(
            &format!("/v1/payments/{}/refunds", paid[0]),
            json!({"amount": 100}),
            &[("Idempotency-Key", &unique("rk"))],
        )
        .await;
    assert_eq!(refund.status, 201, "{}", refund.json());
    let started = Instant::now();
    let events = loop {
        let (events, _) = every_page(&service, 100).await;
        if events.len() >= 4 {
            break events;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{events:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // In the order it happened: three payments, in the order they were paid, then the refund.
    let kinds: Vec<_> = events
        .iter()
        .map(|event| {
            (
                event["type"].as_str().expect("type").to_owned(),
                event["data"]["payment_no"]
                    .as_str()
                    .expect("payment")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("payment.succeeded".to_owned(), paid[0].clone()),
            ("payment.succeeded".to_owned(), paid[1].clone()),
            ("payment.succeeded".to_owned(), paid[2].clone()),
            ("refund.succeeded".to_owned(), paid[0].clone()),
        ]
    );
    let times: Vec<_> = events
        .iter()
        .map(|event| event["created_at"].as_str().expect("time").to_owned())
        .collect();
    assert!(times.windows(2).all(|pair| pair[0] <= pair[1]), "{times:?}");

    // Pages of one, then of three: the same events, each once, has_more on all but the last.
    for limit in [1, 3] {
        let (paged, pages) = every_page(&service, limit).await;
        assert_eq!(paged, events, "limit {limit}");
        let expected_pages = events.len().div_ceil(limit as usize);
        assert_eq!(pages.len(), expected_pages, "limit {limit}: {pages:#?}");
    }

    // One by id; the ids are the messages' webhook-ids.
    let first = &events[0];
    let id = first["event_id"].as_str().expect("id");
    let shown = service.get(&format!("/v1/events/{id}")).await;
    assert_eq!(shown.status, 200);
    assert_eq!(&shown.json(), first);
    let webhook_ids: BTreeSet<String> =
        crate::webhooks::deliveries_until(&service, |deliveries| deliveries.len() >= 4)
            .await
            .iter()
            .map(|delivery| delivery["webhook_id"].as_str().expect("id").to_owned())
            .collect();
    let event_ids: BTreeSet<String> = events
        .iter()
        .map(|event| event["event_id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(webhook_ids, event_ids);

    // The payments and the refunds, listed the same way.
    for limit in [1, 2, 100] {
        let (payments, _) = every_page_of(&service, "/v1/payments", "payment_no", limit).await;
        let numbers: Vec<_> = payments
            .iter()
            .map(|payment| payment["payment_no"].as_str().expect("number").to_owned())
            .collect();
        assert_eq!(numbers, paid, "limit {limit}");
        let (orders, _) = every_page_of(&service, "/v1/orders", "order_id", limit).await;
        let paid_orders: Vec<_> = orders
            .iter()
            .map(|order| {
                order["payments"][0]["payment_no"]
                    .as_str()
                    .expect("paid")
                    .to_owned()
            })
            .collect();
        assert_eq!(paid_orders, paid, "limit {limit}: {orders:#?}");
        let (refunds, _) = every_page_of(&service, "/v1/refunds", "refund_no", limit).await;
        assert_eq!(refunds.len(), 1, "{refunds:#?}");
        assert_eq!(refunds[0]["payment_no"], paid[0].as_str());
    }

    // Refused: a limit out of range, a cursor that is nobody's.
    for query in [
        "limit=0",
        "limit=101",
        "starting_after=evt_nobody",
        "limit=x",
    ] {
        let refused = service.get(&format!("/v1/events?{query}")).await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (400, "invalid-query"),
            "{query}"
        );
    }
    assert_eq!(service.get("/v1/events/evt_nobody").await.status, 404);

    // Another tenant sees none of it, and cannot page from this tenant's event.
    let stranger = Service::beside(&service, false).await;
    assert_eq!(
        stranger.get("/v1/events").await.json(),
        json!({"data": [], "has_more": false})
    );
    assert_eq!(stranger.get(&format!("/v1/events/{id}")).await.status, 404);
    assert_eq!(
        stranger.get("/v1/payments").await.json(),
        json!({"data": [], "has_more": false})
    );
    assert_eq!(
        stranger
            .get(&format!("/v1/payments?starting_after={}", paid[0]))
            .await
            .status,
        400
    );
    assert_eq!(
        stranger
            .get(&format!("/v1/events?starting_after={id}"))
            .await
            .status,
        400
    );
}

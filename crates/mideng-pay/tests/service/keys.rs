//! The two kinds of API key, from the outside: a publishable key (what a checkout page shows
//! every visitor) opens the checkout's routes on the orders a publishable key made, and nothing
//! else; the secret key opens everything, those orders included.

use std::time::Instant;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Answer, Backend, Service, WAIT_LIMIT, unique};

/// A request of the test: method, path, body and extra headers.
type Request = (
    Method,
    String,
    Option<Value>,
    Vec<(&'static str, &'static str)>,
);

/// A request with the service's publishable key.
async fn as_page(
    service: &Service,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> Answer {
    let body = body.map(|body| serde_json::to_vec(&body).expect("json"));
    service
        .send_as(&service.publishable_key, method, path, body, headers)
        .await
}

/// A publishable key is refused 403 `key-not-allowed` on every route that only a secret key
/// opens, before anything runs (no refund, no endpoint, no wallet entry); on the checkout's
/// routes it pays for an order it made and reads that order's grant, and it sees none of the
/// orders that the merchant's server made with the secret key.
pub(crate) async fn a_publishable_key_opens_the_checkout_and_nothing_else(backend: Backend) {
    let service = Service::start(backend).await;

    // The merchant's own order, made and paid with the secret key.
    let (merchants, merchants_payment) = service.paid_payment("buyer-1", "alipay", 1999).await;

    // Every secret route refuses the page's key, and nothing happens.
    let refused: Vec<Request> = vec![
        (
            Method::POST,
            format!("/v1/payments/{merchants_payment}/refunds"),
            Some(json!({"amount": 1999})),
            vec![("Idempotency-Key", "page-refund-1")],
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints".to_owned(),
            Some(json!({"url": "https://merchant.example/hooks", "events": ["payment.succeeded"]})),
            vec![],
        ),
        (
            Method::GET,
            "/v1/webhook-endpoints".to_owned(),
            None,
            vec![],
        ),
        (
            Method::GET,
            "/v1/webhook-deliveries".to_owned(),
            None,
            vec![],
        ),
        (Method::GET, "/v1/events".to_owned(), None, vec![]),
        (Method::GET, "/v1/payments".to_owned(), None, vec![]),
        (Method::GET, "/v1/orders".to_owned(), None, vec![]),
        (
            Method::GET,
            "/v1/webhook-deliveries/W1/attempts".to_owned(),
            None,
            vec![],
        ),
        (Method::GET, "/v1/refunds".to_owned(), None, vec![]),
        (Method::GET, "/v1/events/evt_1".to_owned(), None, vec![]),
        (
            Method::GET,
            "/v1/webhook-endpoints/E1".to_owned(),
            None,
            vec![],
        ),
        (
            Method::PATCH,
            "/v1/webhook-endpoints/E1".to_owned(),
            Some(json!({"status": "DISABLED"})),
            vec![],
        ),
        (
            Method::DELETE,
            "/v1/webhook-endpoints/E1".to_owned(),
            None,
            vec![],
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints/E1/rotate-secret".to_owned(),
            Some(json!({})),
            vec![("Idempotency-Key", "rotate-1")],
        ),
        (
            Method::POST,
            "/v1/webhook-deliveries/D1/redeliver".to_owned(),
            Some(json!({})),
            vec![],
        ),
        (
            Method::GET,
            format!("/v1/payments/{merchants_payment}"),
            None,
            vec![],
        ),
        (
            Method::POST,
            format!("/v1/payments/{merchants_payment}/close"),
            Some(json!({})),
            vec![],
        ),
        (Method::GET, "/v1/refunds/R1".to_owned(), None, vec![]),
        (
            Method::POST,
            format!("/v1/orders/{merchants}/transitions"),
            Some(json!({"to": "SHIPPED"})),
            vec![],
        ),
        (
            Method::POST,
            "/v1/wallets/buyer-1/credit".to_owned(),
            Some(json!({"amount": 100, "reference": "page-credit"})),
            vec![("Idempotency-Key", "page-credit-1")],
        ),
        (
            Method::POST,
            "/v1/wallets/buyer-1/deduct".to_owned(),
            Some(json!({"amount": 100, "order_id": "o-1"})),
            vec![("Idempotency-Key", "page-deduct-1")],
        ),
        (
            Method::POST,
            "/v1/wallets/buyer-1/deductions/W1/reverse".to_owned(),
            Some(json!({})),
            vec![],
        ),
        (Method::GET, "/v1/wallets/buyer-1".to_owned(), None, vec![]),
        (
            Method::GET,
            "/v1/idempotency-keys/page-refund-1".to_owned(),
            None,
            vec![],
        ),
        (
            Method::GET,
            "/v1/entitlements?user_id=buyer-1".to_owned(),
            None,
            vec![],
        ),
    ];
    for (method, path, body, headers) in refused {
        let answer = as_page(&service, method.clone(), &path, body, &headers).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (403, "key-not-allowed"),
            "{method} {path}"
        );
    }
    let payment = service
        .get(&format!("/v1/payments/{merchants_payment}"))
        .await
        .json();
    assert_eq!(payment["status"], "PAID", "no refund was made: {payment}");
    assert_eq!(payment["refundable"], 1999, "{payment}");
    let endpoints = service.get("/v1/webhook-endpoints").await.json();
    assert_eq!(
        endpoints.as_array().map(Vec::len),
        Some(0),
        "no endpoint was registered: {endpoints}"
    );
    let wallet = service.get("/v1/wallets/buyer-1").await;
    assert!(
        wallet.status == 404 || wallet.json()["balance"] == 0,
        "no credit was made: {}",
        wallet.json()
    );

    // The merchant's order is invisible to the page's key, whatever the route.
    let unseen = as_page(
        &service,
        Method::GET,
        &format!("/v1/orders/{merchants}"),
        None,
        &[],
    )
    .await;
    assert_eq!((unseen.status, unseen.code().as_str()), (404, "not-found"));
    let token = service.token().await;
    let attempt = as_page(
        &service,
        Method::POST,
        &format!("/v1/orders/{merchants}/payments"),
        Some(json!({"channel": "alipay"})),
        &[("Idempotency-Token", token.as_str())],
    )
    .await;
    assert_eq!(
        (attempt.status, attempt.code().as_str()),
        (404, "not-found")
    );
    let same_body = as_page(
        &service,
        Method::POST,
        "/v1/orders",
        Some(
            json!({"order_id": merchants, "user_id": "buyer-1", "amount": 1999, "currency": "CNY",
                    "entitlement": {"sku": "vip-month", "quantity": 1}}),
        ),
        &[],
    )
    .await;
    assert_eq!(
        (same_body.status, same_body.code().as_str()),
        (422, "order-id-reused"),
        "the same body under the merchant's order id shows nothing of it"
    );
    let grants = as_page(
        &service,
        Method::GET,
        &format!("/v1/entitlements?user_id=buyer-1&order_id={merchants}"),
        None,
        &[],
    )
    .await;
    assert_eq!((grants.status, grants.code().as_str()), (404, "not-found"));

    // The checkout's own flow works with the page's key alone.
    let token = as_page(&service, Method::POST, "/v1/tokens", Some(json!({})), &[]).await;
    assert_eq!(token.status, 201, "{}", token.json());
    let token = token.json()["token"].as_str().expect("token").to_owned();
    let order_id = unique("order");
    let made = as_page(
        &service,
        Method::POST,
        "/v1/orders",
        Some(
            json!({"order_id": order_id, "user_id": "buyer-2", "amount": 500, "currency": "CNY",
                    "entitlement": {"sku": "vip-month", "quantity": 1}}),
        ),
        &[],
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.json());
    let created = as_page(
        &service,
        Method::POST,
        &format!("/v1/orders/{order_id}/payments"),
        Some(json!({"channel": "wechat"})),
        &[("Idempotency-Token", token.as_str())],
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let payment_no = created.json()["payment_no"]
        .as_str()
        .expect("no")
        .to_owned();
    service.pay_at_channel(&payment_no).await;
    let started = Instant::now();
    loop {
        let order = as_page(
            &service,
            Method::GET,
            &format!("/v1/orders/{order_id}"),
            None,
            &[],
        )
        .await;
        assert_eq!(order.status, 200, "{}", order.json());
        if order.json()["status"] == "PAID" {
            break;
        }
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "the checkout's order was never paid"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    loop {
        let grants = as_page(
            &service,
            Method::GET,
            &format!("/v1/entitlements?user_id=buyer-2&order_id={order_id}"),
            None,
            &[],
        )
        .await;
        assert_eq!(grants.status, 200, "{}", grants.json());
        let grants = grants.json()["grants"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !grants.is_empty() {
            assert!(
                grants
                    .iter()
                    .all(|grant| grant["order_id"] == order_id.as_str())
            );
            break;
        }
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "the checkout's order was never granted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // The secret key sees the checkout's order too, and refunds it.
    assert_eq!(service.order(&order_id).await["status"], "PAID");
    let refund = service
        .post(
            &format!("/v1/payments/{payment_no}/refunds"),
            json!({"amount": 500}),
            &[("Idempotency-Key", "server-refund-1")],
        )
        .await;
    assert!(
        refund.status == 201 || refund.status == 202,
        "{}: {}",
        refund.status,
        refund.json()
    );
}

//! The two kinds of API key and the client secret, from the outside, with two tenants: the
//! merchant's server prices (the secret key makes every order and gets its client secret), the
//! page pays (the publishable key with that client secret takes a token, pays that one order and
//! reads it). Nothing a visitor sends prices an order, replays or poisons the server's keys, or
//! exhausts what the server needs.

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

/// A request with the service's publishable key and, when given, a client secret.
async fn as_page(
    service: &Service,
    secret: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> Answer {
    let body = body.map(|body| serde_json::to_vec(&body).expect("json"));
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if let Some(secret) = secret {
        all.push(("Mideng-Client-Secret", secret));
    }
    service
        .send_as(&service.publishable_key, method, path, body, &all)
        .await
}

/// An order made by the merchant's server: its client secret.
async fn priced(service: &Service, order_id: &str, user_id: &str, amount: i64) -> String {
    let order = service.create_order(order_id, user_id, amount).await;
    let secret = order["client_secret"].as_str().expect("a client secret");
    assert!(secret.starts_with("mdcs_"), "{order}");
    assert!(order["client_secret_expires_at"].is_string(), "{order}");
    secret.to_owned()
}

/// A token for the page of the order whose client secret is `secret`.
async fn page_token(service: &Service, secret: &str) -> String {
    let answer = as_page(service, Some(secret), Method::POST, "/v1/tokens", None, &[]).await;
    assert_eq!(answer.status, 201, "{}", answer.json());
    answer.json()["token"].as_str().expect("token").to_owned()
}

/// The page of the order whose client secret is `secret` asks, with a fresh token of its own,
/// for a payment of `order_id` on Alipay, under `key`.
async fn page_pays(service: &Service, secret: &str, order_id: &str, key: &str) -> Answer {
    let token = page_token(service, secret).await;
    as_page(
        service,
        Some(secret),
        Method::POST,
        &format!("/v1/orders/{order_id}/payments"),
        Some(json!({"channel": "alipay"})),
        &[
            ("Idempotency-Key", key),
            ("Idempotency-Token", token.as_str()),
        ],
    )
    .await
}

/// A publishable key is 403 on every route that only a secret key opens (making an order
/// included: it cannot price), and on the checkout's routes it does nothing without a valid
/// client secret, nor with another tenant's or another order's; with its order's client secret
/// it pays that order, reads it and its grant, and sees no client secret in what it reads.
pub(crate) async fn a_page_pays_what_the_server_priced_and_nothing_else(backend: Backend) {
    let service = Service::start(backend).await;
    let other_tenant = Service::beside(&service, false).await;

    // The merchant's own paid order, and an order of the other tenant.
    let (merchants, merchants_payment) = service.paid_payment("buyer-1", "alipay", 1999).await;
    let elsewhere = unique("elsewhere");
    let elsewhere_secret = priced(&other_tenant, &elsewhere, "buyer-9", 700).await;

    // Every secret route refuses the page's key, and nothing happens.
    let refused: Vec<Request> = vec![
        (
            Method::POST,
            "/v1/orders".to_owned(),
            Some(
                json!({"order_id": "pk-cheap", "user_id": "victim-user", "amount": 1,
                        "currency": "CNY", "entitlement": {"sku": "vip-year", "quantity": 1000}}),
            ),
            vec![],
        ),
        (Method::GET, "/v1/orders".to_owned(), None, vec![]),
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
        (Method::GET, "/v1/events".to_owned(), None, vec![]),
        (Method::GET, "/v1/payments".to_owned(), None, vec![]),
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
        (Method::GET, "/v1/wallets/buyer-1".to_owned(), None, vec![]),
        (
            Method::GET,
            "/v1/idempotency-keys/page-refund-1?operation=refund.create".to_owned(),
            None,
            vec![],
        ),
    ];
    let any_secret = priced(&service, &unique("any"), "buyer-1", 100).await;
    for (method, path, body, headers) in refused {
        for secret in [None, Some(any_secret.as_str())] {
            let answer = as_page(
                &service,
                secret,
                method.clone(),
                &path,
                body.clone(),
                &headers,
            )
            .await;
            assert_eq!(
                (answer.status, answer.code().as_str()),
                (403, "key-not-allowed"),
                "{method} {path}"
            );
        }
    }
    assert_eq!(
        service.get("/v1/orders/pk-cheap").await.status,
        404,
        "no order was priced"
    );
    let payment = service
        .get(&format!("/v1/payments/{merchants_payment}"))
        .await
        .json();
    assert_eq!(payment["refundable"], 1999, "no refund was made: {payment}");

    // The checkout's routes without a valid client secret: none, a made-up one, another
    // tenant's, two at once. One answer for all, and nothing spent or made.
    let order_id = unique("order");
    let secret = priced(&service, &order_id, "buyer-2", 500).await;
    let made_up = format!("mdcs_{}", "0".repeat(64));
    let checkout: Vec<Request> = vec![
        (Method::POST, "/v1/tokens".to_owned(), None, vec![]),
        (Method::GET, format!("/v1/orders/{order_id}"), None, vec![]),
        (
            Method::POST,
            format!("/v1/orders/{order_id}/payments"),
            Some(json!({"channel": "alipay"})),
            vec![],
        ),
        (
            Method::GET,
            format!("/v1/entitlements?user_id=buyer-2&order_id={order_id}"),
            None,
            vec![],
        ),
    ];
    for (method, path, body, headers) in &checkout {
        for wrong in [
            None,
            Some(made_up.as_str()),
            Some(elsewhere_secret.as_str()),
            Some("not a secret"),
        ] {
            let answer =
                as_page(&service, wrong, method.clone(), path, body.clone(), headers).await;
            assert_eq!(
                (answer.status, answer.code().as_str()),
                (401, "client-secret-invalid"),
                "{method} {path} with {wrong:?}"
            );
        }
        let mut twice = headers.clone();
        twice.push(("Mideng-Client-Secret", "x"));
        let answer = as_page(
            &service,
            Some(&secret),
            method.clone(),
            path,
            body.clone(),
            &twice,
        )
        .await;
        assert_eq!(answer.status, 401, "two client secrets: {method} {path}");
    }
    assert!(
        service.order(&order_id).await["payments"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );

    // With its order's client secret, the page sees no other order: not the merchant's, not
    // its payment, not its grant.
    let token = page_token(&service, &secret).await;
    for (method, path, body) in [
        (Method::GET, format!("/v1/orders/{merchants}"), None),
        (
            Method::POST,
            format!("/v1/orders/{merchants}/payments"),
            Some(json!({"channel": "alipay"})),
        ),
        (
            Method::GET,
            format!("/v1/entitlements?user_id=buyer-1&order_id={merchants}"),
            None,
        ),
    ] {
        let answer = as_page(
            &service,
            Some(&secret),
            method.clone(),
            &path,
            body,
            &[("Idempotency-Token", token.as_str())],
        )
        .await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (404, "not-found"),
            "{method} {path}"
        );
    }

    // Its own order: it reads it (without the client secret), pays it (with the token above:
    // the refusals spent nothing), and reads its grant.
    let read = as_page(
        &service,
        Some(&secret),
        Method::GET,
        &format!("/v1/orders/{order_id}"),
        None,
        &[],
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.json());
    assert!(
        read.json().get("client_secret").is_none(),
        "{}",
        read.json()
    );
    assert_eq!(read.json()["amount"], 500, "the server's price");
    let created = as_page(
        &service,
        Some(&secret),
        Method::POST,
        &format!("/v1/orders/{order_id}/payments"),
        Some(json!({"channel": "wechat"})),
        &[("Idempotency-Token", token.as_str())],
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.json());
    assert_eq!(created.json()["amount"], 500);
    let payment_no = created.json()["payment_no"]
        .as_str()
        .expect("no")
        .to_owned();
    service.pay_at_channel(&payment_no).await;
    let started = Instant::now();
    loop {
        let grants = as_page(
            &service,
            Some(&secret),
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
            "the page's order was never granted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(service.order(&order_id).await["status"], "PAID");
}

/// An `Idempotency-Key` a page sends lives in that page's scope: sent first by a visitor (on an
/// order it may not pay, so a 404 is stored), it does not answer the merchant's own request
/// under the same key; sent after the merchant's, it is not a replay of the merchant's answer.
pub(crate) async fn a_pages_keys_never_meet_the_servers(backend: Backend) {
    let service = Service::start(backend).await;
    let visitors_secret = priced(&service, &unique("visitors"), "buyer-v", 300).await;
    let merchants = unique("merchants");
    priced(&service, &merchants, "buyer-m", 900).await;

    // The visitor goes first, under the key the merchant will use, on the merchant's order.
    let key = format!("pay-{merchants}");
    let squatted = page_pays(&service, &visitors_secret, &merchants, &key).await;
    assert_eq!(squatted.status, 404, "{}", squatted.json());
    let server_token = service.token().await;
    let merchants_payment = service
        .post(
            &format!("/v1/orders/{merchants}/payments"),
            json!({"channel": "alipay"}),
            &[
                ("Idempotency-Key", key.as_str()),
                ("Idempotency-Token", server_token.as_str()),
            ],
        )
        .await;
    assert_eq!(
        merchants_payment.status,
        201,
        "{}",
        merchants_payment.json()
    );
    assert_eq!(merchants_payment.header("Idempotent-Replayed"), None);

    // Another visitor after the merchant, under the merchant's key, on its own order: its own
    // payment of its own order, not the merchant's answer.
    let second = unique("second");
    let second_secret = priced(&service, &second, "buyer-w", 300).await;
    let own = page_pays(&service, &second_secret, &second, &key).await;
    assert_eq!(own.status, 201, "{}", own.json());
    assert_eq!(own.json()["order_id"], second.as_str());
    assert_eq!(own.json()["amount"], 300);
    assert_ne!(
        own.json()["payment_no"],
        merchants_payment.json()["payment_no"]
    );

    // The merchant's retry still replays its own answer.
    let retried = service
        .post(
            &format!("/v1/orders/{merchants}/payments"),
            json!({"channel": "alipay"}),
            &[
                ("Idempotency-Key", key.as_str()),
                ("Idempotency-Token", server_token.as_str()),
            ],
        )
        .await;
    assert_eq!(retried.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(
        retried.json()["payment_no"],
        merchants_payment.json()["payment_no"]
    );
}

/// Visitors flooding one order's page with token and payment requests, many at once, get 429
/// with `Retry-After` once past the page's caps, while the merchant's server, at the same time,
/// takes a token and creates a payment for each of its orders at the first try.
pub(crate) async fn a_visitors_flood_leaves_the_server_paying(backend: Backend) {
    let service = std::sync::Arc::new(Service::start(backend).await);
    let flooded = unique("flooded");
    let secret = priced(&service, &flooded, "buyer-f", 100).await;
    let orders: Vec<String> = (0..6)
        .map(|index| unique(&format!("server-{index}")))
        .collect();
    for order_id in &orders {
        priced(&service, order_id, "buyer-s", 250).await;
    }

    let mut flood = tokio::task::JoinSet::new();
    for index in 0..60 {
        let service = service.clone();
        let secret = secret.clone();
        let flooded = flooded.clone();
        flood.spawn(async move {
            if index % 2 == 0 {
                as_page(
                    &service,
                    Some(&secret),
                    Method::POST,
                    "/v1/tokens",
                    None,
                    &[],
                )
                .await
            } else {
                let key = format!("flood-{index}");
                as_page(
                    &service,
                    Some(&secret),
                    Method::POST,
                    &format!("/v1/orders/{flooded}/payments"),
                    Some(json!({"channel": "alipay"})),
                    &[("Idempotency-Key", key.as_str())],
                )
                .await
            }
        });
    }
    let mut server = tokio::task::JoinSet::new();
    for order_id in orders.clone() {
        let service = service.clone();
        server.spawn(async move {
            (
                order_id.clone(),
                service.create_payment(&order_id, "alipay").await,
            )
        });
    }
    while let Some(done) = server.join_next().await {
        let (order_id, answer) = done.expect("the server's task");
        assert_eq!(answer.status, 201, "{order_id}: {}", answer.json());
    }
    let mut tokens = 0;
    let mut limited = 0;
    while let Some(done) = flood.join_next().await {
        let answer = done.expect("a visitor's task");
        match answer.status {
            201 => tokens += 1,
            429 => {
                limited += 1;
                assert!(
                    ["too-many-tokens", "rate-limited"].contains(&answer.code().as_str()),
                    "{}",
                    answer.json()
                );
                let wait: u64 = answer
                    .header("Retry-After")
                    .and_then(|value| value.parse().ok())
                    .expect("Retry-After");
                assert!(wait >= 1, "{wait}");
            }
            _ => {}
        }
    }
    assert!(
        tokens <= 5,
        "at most 5 unspent tokens per order's page: {tokens}"
    );
    assert!(limited >= 30, "the flood was refused: {limited} of 60");

    // The server's own tokens are as many as ever.
    for _ in 0..10 {
        service.token().await;
    }
}

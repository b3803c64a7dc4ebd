//! The pages beside the API: served only as configured, hardened, and guarded by their keys.
//! (What the pages do in a browser is `scripts/browser`'s part.)

use std::time::Instant;

use mideng_pay::api::api_key_hash;
use mideng_pay::web::journal::Journal;
use mideng_pay::web::{CheckoutSettings, ConsoleSettings, PageSettings};
use serde_json::{Value, json};

use crate::harness::{Backend, Service, WAIT_LIMIT, queue_events, unique};

const CONSOLE_KEY: &str = "console-key-for-the-page-tests";

async fn raw(
    service: &Service,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = service
        .client
        .request(method, format!("{}{path}", service.base));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("answer");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("body"))
}

async fn overview(service: &Service) -> Value {
    let (status, _, body) = raw(
        service,
        reqwest::Method::GET,
        "/console/overview",
        Some(CONSOLE_KEY),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

pub(crate) async fn pages_are_served_only_as_configured_and_guarded(backend: Backend) {
    let service = Service::start_with_pages(
        backend,
        backend.database_url(),
        None,
        None,
        Default::default(),
        queue_events(),
        |tenant, publishable_key, sim| PageSettings {
            checkout: Some(CheckoutSettings {
                tenant_id: tenant.to_owned(),
                publishable_key: publishable_key.to_owned(),
                simulator_url: Some(sim.to_owned()),
            }),
            console: Some(ConsoleSettings {
                api_key_sha256: api_key_hash(CONSOLE_KEY),
                journal: Journal::new(0),
            }),
        },
    )
    .await;

    // The checkout: HTML, hardened, carrying its tenant's publishable key and never the secret
    // one; assets by name only.
    let (status, headers, page) = raw(&service, reqwest::Method::GET, "/", None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert!(
        headers["content-security-policy"]
            .to_str()
            .expect("ascii")
            .contains("default-src 'none'")
    );
    assert_eq!(headers["cache-control"], "no-store");
    assert!(page.contains(&service.publishable_key));
    assert!(
        !page.contains(&service.api_key),
        "the secret key is not on the page"
    );
    let (status, _, _) = raw(&service, reqwest::Method::GET, "/assets/checkout.js", None).await;
    assert_eq!(status, 200);
    let (status, _, body) = raw(&service, reqwest::Method::GET, "/assets/..%2Fmod.rs", None).await;
    assert_eq!(status, 404, "{body}");
    let (status, headers, svg) = raw(
        &service,
        reqwest::Method::GET,
        "/demo/qr?text=weixin%3A%2F%2Fwxpay%2Fbizpayurl%3Fpr%3Dx",
        None,
    )
    .await;
    assert_eq!(
        (status, &headers["content-type"]),
        (200, &"image/svg+xml".parse().expect("value"))
    );
    assert!(svg.contains("<svg"));
    let (status, _, _) = raw(
        &service,
        reqwest::Method::GET,
        "/demo/qr?text=a&text=b",
        None,
    )
    .await;
    assert_eq!(status, 400, "a repeated parameter is ambiguous");

    // The console's data: the console key only, not a tenant's.
    for key in [
        None,
        Some(service.api_key.as_str()),
        Some(service.publishable_key.as_str()),
        Some("console-key-for-the-page-testz"),
    ] {
        let (status, _, _) = raw(&service, reqwest::Method::GET, "/console/overview", key).await;
        assert_eq!(status, 401, "{key:?}");
    }

    // The demo merchant's server prices: the page names a product of the catalog and gets its
    // order's client secret; a price, an unknown product or a stray field is refused.
    for refused in [
        json!({"sku": "membership-annual", "user_id": "buyer", "amount": 1}),
        json!({"sku": "vip-year", "user_id": "buyer"}),
        json!({"user_id": "buyer"}),
    ] {
        let answer = service
            .client
            .post(format!("{}/demo/checkout", service.base))
            .json(&refused)
            .send()
            .await
            .expect("answer");
        assert!(
            answer.status().is_client_error(),
            "{refused}: {}",
            answer.status()
        );
    }
    let started_checkout: Value = {
        let answer = service
            .client
            .post(format!("{}/demo/checkout", service.base))
            .json(&json!({"sku": "membership-annual", "user_id": "buyer"}))
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), 201);
        answer.json().await.expect("json")
    };
    assert_eq!(started_checkout["amount"], 1999, "the catalog's price");
    let order_id = started_checkout["order_id"]
        .as_str()
        .expect("order id")
        .to_owned();
    let client_secret = started_checkout["client_secret"]
        .as_str()
        .expect("client secret")
        .to_owned();
    assert_eq!(service.order(&order_id).await["amount"], 1999);

    // "Scan and pay": with the page's key and its order's client secret, for that order's
    // pending payment only.
    let merchants = unique("order");
    service.create_order(&merchants, "buyer", 1999).await;
    let merchants_payment = service.create_payment(&merchants, "alipay").await;
    let merchants_no = merchants_payment.json()["payment_no"]
        .as_str()
        .expect("no")
        .to_owned();
    let pay_as_page = |path: String, secret: Option<String>| {
        let service = &service;
        async move {
            let mut request = service
                .client
                .post(format!("{}{path}", service.base))
                .bearer_auth(&service.publishable_key);
            if let Some(secret) = secret {
                request = request.header("Mideng-Client-Secret", secret);
            }
            let response = request.send().await.expect("answer");
            (
                response.status().as_u16(),
                response.text().await.expect("body"),
            )
        }
    };
    let (status, body) = pay_as_page(
        format!("/demo/payments/{merchants_no}/pay"),
        Some(client_secret.clone()),
    )
    .await;
    assert_eq!(status, 404, "another order's payment: {body}");
    let as_page =
        |method, path: String, body: serde_json::Value, headers: Vec<(&'static str, String)>| {
            let service = &service;
            let secret = client_secret.clone();
            async move {
                let mut headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(name, value)| (*name, value.as_str()))
                    .collect();
                headers.push(("Mideng-Client-Secret", secret.as_str()));
                let body = serde_json::to_vec(&body).expect("json");
                service
                    .send_as(
                        &service.publishable_key,
                        method,
                        &path,
                        Some(body),
                        &headers,
                    )
                    .await
            }
        };
    let token = as_page(
        reqwest::Method::POST,
        "/v1/tokens".to_owned(),
        json!({}),
        Vec::new(),
    )
    .await;
    assert_eq!(token.status, 201, "{}", token.json());
    let token = token.json()["token"].as_str().expect("token").to_owned();
    let created = as_page(
        reqwest::Method::POST,
        format!("/v1/orders/{order_id}/payments"),
        serde_json::json!({"channel": "alipay"}),
        vec![("idempotency-token", token)],
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let payment_no = created.json()["payment_no"]
        .as_str()
        .expect("no")
        .to_owned();
    let pay_path = format!("/demo/payments/{payment_no}/pay");
    let (status, _, _) = raw(&service, reqwest::Method::POST, &pay_path, None).await;
    assert_eq!(status, 401);
    let (status, body) = pay_as_page(pay_path.clone(), None).await;
    assert_eq!(status, 401, "no client secret: {body}");
    let (status, _, _) = raw(
        &service,
        reqwest::Method::POST,
        &pay_path,
        Some(CONSOLE_KEY),
    )
    .await;
    assert_eq!(status, 401, "the console key is not the page's");

    let other = Service::beside(&service, false).await;
    let other_order = unique("order");
    other.create_order(&other_order, "buyer", 500).await;
    let theirs = other.create_payment(&other_order, "alipay").await;
    let their_no = theirs.json()["payment_no"].as_str().expect("no").to_owned();
    let (status, body) = pay_as_page(
        format!("/demo/payments/{their_no}/pay"),
        Some(client_secret.clone()),
    )
    .await;
    assert_eq!(status, 404, "another tenant's payment: {body}");
    assert_eq!(other.sim_trade(&their_no).await["status"], "PENDING");

    let before = overview(&service).await;
    let (status, body) = pay_as_page(pay_path.clone(), Some(client_secret.clone())).await;
    assert_eq!(status, 202, "{body}");
    let started = Instant::now();
    while service.order(&order_id).await["status"] != "PAID" {
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "the simulator's notify never paid the order"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (status, body) = pay_as_page(pay_path.clone(), Some(client_secret.clone())).await;
    assert_eq!(status, 409, "paid already: {body}");

    // The counts by state see it (after the cached answer's few seconds).
    let paid_before = before["store"]["payments"]["PAID"].as_u64().unwrap_or(0);
    let started = Instant::now();
    loop {
        let now = overview(&service).await;
        if now["store"]["payments"]["PAID"].as_u64().unwrap_or(0) > paid_before {
            assert!(now["journal"]["totals"].is_object());
            break;
        }
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "the overview never counted the payment: {now}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // A service without pages serves none of them.
    for path in [
        "/",
        "/console",
        "/console/overview",
        "/assets/app.css",
        "/demo/qr?text=x",
    ] {
        let (status, _, body) = raw(&other, reqwest::Method::GET, path, Some(CONSOLE_KEY)).await;
        assert_eq!(status, 404, "{path}: {body}");
        let problem: Value = serde_json::from_str(&body).expect("a problem document");
        assert_eq!(problem["code"], json!("not-found"));
    }
}

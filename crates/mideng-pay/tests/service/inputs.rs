//! Bad input: every mistake a client can make is a 4xx problem document, and writes nothing.

use serde_json::json;

use crate::harness::{Backend, Service, unique};

pub(crate) async fn bad_input_is_a_problem_and_writes_nothing(backend: Backend) {
    let service = Service::start(backend).await;
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("/v1/orders", "{not json".into(), 400, "malformed-json"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":1,"currency":"CNY","extra":1}"#.into(), 422, "invalid-request"),
        // Every wrong amount, on every route, is the same refusal.
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":-5,"currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":0,"currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":100000000000000000000000,"currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":10000000001,"currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":"100","currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/wallets/u-bad/credit", r#"{"amount":1.5,"reference":"r"}"#.into(), 422, "invalid-amount"),
        ("/v1/wallets/u-bad/deduct", r#"{"order_id":"o-1","amount":100000000000000000000000}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":100,"currency":"USD"}"#.into(), 422, "unsupported-currency"),
        ("/v1/orders", r#"{"order_id":"o x","user_id":"u","amount":100,"currency":"CNY"}"#.into(), 422, "invalid-request"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":1.5,"currency":"CNY"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":1,"currency":"CNY","entitlement":{"sku":"s","quantity":0}}"#.into(), 422, "invalid-request"),
        ("/v1/orders", r#"{"order_id":"o-x","user_id":"u","amount":1,"currency":"CNY","entitlement":{"sku":"s","quantity":1001}}"#.into(), 422, "invalid-request"),
        ("/v1/orders", format!(r#"{{"order_id":"{}"}}"#, "x".repeat(70_000)), 413, "payload-too-large"),
        ("/v1/wallets/u-bad/deduct", r#"{"order_id":"o-1","amount":-1}"#.into(), 422, "invalid-amount"),
        ("/v1/wallets/u-bad/credit", r#"{"amount":9223372036854775807,"reference":"r"}"#.into(), 422, "invalid-amount"),
        ("/v1/orders/o-x/transitions", r#"{"to":"FLYING"}"#.into(), 422, "invalid-request"),
    ];
    for (index, (path, body, status, code)) in cases.into_iter().enumerate() {
        let answer = service
            .send(
                reqwest::Method::POST,
                path,
                Some(body.as_bytes().to_vec()),
                &[("Idempotency-Key", &format!("k-bad-{index}"))],
            )
            .await;
        assert_eq!(
            answer.status,
            status,
            "{path} {}: {}",
            &body[..body.len().min(80)],
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.code(), code, "{path}");
    }
    // Hostile identifiers — NUL, control characters, a right-to-left override, spaces,
    // non-ASCII, over 64 bytes — are refused by the one identifier rule, naming the field.
    let hostile = [
        "r\\u0000x",
        "r\\u001bx",
        "r\\nx",
        "r\\u007fx",
        "r\\u202ex",
        "r x",
        "ré",
        "",
    ];
    let long = "r".repeat(65);
    for (index, text) in hostile.iter().copied().chain([long.as_str()]).enumerate() {
        let cases = [
            (
                "/v1/wallets/u-bad/credit",
                format!(r#"{{"amount":5,"reference":"{text}"}}"#),
                "reference",
            ),
            (
                "/v1/wallets/u-bad/deduct",
                format!(r#"{{"amount":5,"order_id":"{text}"}}"#),
                "order_id",
            ),
            (
                "/v1/orders",
                format!(r#"{{"order_id":"{text}","user_id":"u","amount":1,"currency":"CNY"}}"#),
                "order_id",
            ),
            (
                "/v1/orders",
                format!(r#"{{"order_id":"o-x","user_id":"{text}","amount":1,"currency":"CNY"}}"#),
                "user_id",
            ),
            (
                "/v1/orders",
                format!(
                    r#"{{"order_id":"o-x","user_id":"u","amount":1,"currency":"CNY","entitlement":{{"sku":"{text}","quantity":1}}}}"#
                ),
                "sku",
            ),
        ];
        for (case, (path, body, field)) in cases.into_iter().enumerate() {
            let answer = service
                .send(
                    reqwest::Method::POST,
                    path,
                    Some(body.into_bytes()),
                    &[("Idempotency-Key", &format!("k-hostile-{index}-{case}"))],
                )
                .await;
            assert_eq!(
                (answer.status, answer.code().as_str()),
                (422, "invalid-request"),
                "{path} {field} {text:?}"
            );
            assert_eq!(
                answer.header("content-type"),
                Some("application/problem+json")
            );
            let detail = answer.json()["detail"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(detail.starts_with(field), "{detail:?} names {field}");
        }
    }

    // Keys: missing and malformed.
    let missing = service
        .post(
            "/v1/wallets/u-bad/deduct",
            json!({"order_id": "o-1", "amount": 1}),
            &[],
        )
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (400, "idempotency-key-missing")
    );
    let malformed = service
        .post(
            "/v1/wallets/u-bad/deduct",
            json!({"order_id": "o-1", "amount": 1}),
            &[("Idempotency-Key", "bad key")],
        )
        .await;
    assert_eq!(
        (malformed.status, malformed.code().as_str()),
        (400, "idempotency-key-malformed")
    );
    // Unknown ids.
    for path in [
        "/v1/orders/o-nope",
        "/v1/payments/P-nope",
        "/v1/nothing-here",
    ] {
        let answer = service.get(path).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (404, "not-found"),
            "{path}"
        );
    }
    let token = service.token().await;
    let unknown_order = service
        .post(
            "/v1/orders/o-nope/payments",
            json!({"channel": "alipay"}),
            &[("Idempotency-Token", &token)],
        )
        .await;
    assert_eq!(
        (unknown_order.status, unknown_order.code().as_str()),
        (404, "not-found")
    );
    let token = service.token().await;
    let paypal = service
        .post(
            "/v1/orders/o-nope/payments",
            json!({"channel": "paypal"}),
            &[("Idempotency-Token", &token)],
        )
        .await;
    assert_eq!(
        (paypal.status, paypal.code().as_str()),
        (422, "invalid-request")
    );
    // No credentials, wrong credentials.
    let anonymous = service
        .client
        .get(format!("{}/v1/orders/o-1", service.base))
        .send()
        .await
        .expect("answer");
    assert_eq!(anonymous.status(), 401);
    let wrong = service
        .client
        .get(format!("{}/v1/orders/o-1", service.base))
        .bearer_auth("not-a-key")
        .send()
        .await
        .expect("answer");
    assert_eq!(wrong.status(), 401);

    // Nothing was written: the wallet is empty and no order exists.
    let wallet = service.get("/v1/wallets/u-bad").await.json();
    assert_eq!(wallet["balance"], 0);
    assert!(wallet["entries"].as_array().expect("entries").is_empty());
    assert_eq!(service.get("/v1/orders/o-x").await.status, 404);

    // The same order id with other content: 422; the same order again: 200.
    let order_id = unique("o");
    service.create_order(&order_id, "u-1", 100).await;
    let same = service
        .post(
            "/v1/orders",
            json!({"order_id": order_id, "user_id": "u-1", "amount": 100, "currency": "CNY",
                                   "entitlement": {"sku": "vip-month", "quantity": 1}}),
            &[],
        )
        .await;
    assert_eq!(same.status, 200);
    assert_eq!(same.header("idempotent-replayed"), Some("true"));
    let other = service
        .post(
            "/v1/orders",
            json!({"order_id": order_id, "user_id": "u-1", "amount": 101, "currency": "CNY"}),
            &[],
        )
        .await;
    assert_eq!(
        (other.status, other.code().as_str()),
        (422, "order-id-reused")
    );
    // Transitions: illegal ones are refused; a repeat of a done one is fine.
    let ship = service
        .post(
            &format!("/v1/orders/{order_id}/transitions"),
            json!({"to": "SHIPPED"}),
            &[],
        )
        .await;
    assert_eq!(
        (ship.status, ship.code().as_str()),
        (409, "illegal-transition")
    );
    for _ in 0..2 {
        let cancel = service
            .post(
                &format!("/v1/orders/{order_id}/transitions"),
                json!({"to": "CANCELED"}),
                &[],
            )
            .await;
        assert_eq!(cancel.status, 200, "{}", cancel.json());
        assert_eq!(cancel.json()["status"], "CANCELED");
    }
    let pay_canceled = service.create_payment(&order_id, "alipay").await;
    assert_eq!(
        (pay_canceled.status, pay_canceled.code().as_str()),
        (409, "order-not-payable")
    );
    // A wallet body that is not declared JSON (another type, or two Content-Type headers) is
    // refused like on every other route, and credits nothing.
    for (index, content_type) in ["text/plain", "application/json"].into_iter().enumerate() {
        let key = format!("ctype-{index}-{}", unique("k"));
        let credit = service
            .send(
                reqwest::Method::POST,
                "/v1/wallets/u-ctype/credit",
                None,
                &[
                    ("content-type", "text/plain"),
                    ("content-type", content_type),
                    ("idempotency-key", &key),
                ],
            )
            .await;
        assert_eq!(
            (credit.status, credit.code().as_str()),
            (415, "unsupported-media-type")
        );
    }
    assert_eq!(
        service.get("/v1/wallets/u-ctype").await.json()["balance"],
        0
    );
}

pub(crate) async fn tenants_never_see_each_other(backend: Backend) {
    let first = Service::start(backend).await;
    let second = Service::beside(&first, false).await;
    let order_id = unique("o");
    first.create_order(&order_id, "u-1", 100).await;
    let payment = first.create_payment(&order_id, "alipay").await.json();
    let number = payment["payment_no"].as_str().expect("number");
    // The second tenant, on another instance of the same deployment: nothing to see.
    assert_eq!(
        second.get(&format!("/v1/orders/{order_id}")).await.status,
        404
    );
    assert_eq!(
        second.get(&format!("/v1/payments/{number}")).await.status,
        404
    );
    let close = second
        .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
        .await;
    assert_eq!(close.status, 404);
    // The same order id is free in the second tenant, and the same key does not replay across.
    second.create_order(&order_id, "u-1", 999).await;
    for service in [&first, &second] {
        let answer = service
            .post(
                "/v1/wallets/u-1/credit",
                json!({"amount": 5, "reference": "r"}),
                &[("Idempotency-Key", "shared-key")],
            )
            .await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.header("idempotent-replayed"),
            None,
            "no replay across tenants"
        );
    }
    assert_eq!(
        first.order(&order_id).await["payments"][0]["status"],
        "PENDING"
    );
}

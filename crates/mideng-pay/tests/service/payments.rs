//! Payment creation, notifies and close, under duplicates and races.

use std::sync::Arc;

use mideng_channel::alipay;
use serde_json::{Value, json};

use crate::harness::{Backend, Service, fixture_channel_key, race, unique};

pub(crate) fn payment_no(answer: &Value) -> String {
    answer["payment_no"]
        .as_str()
        .expect("payment_no")
        .to_owned()
}

/// The order's payments, as the API lists them.
async fn payments_of(service: &Service, order_id: &str) -> Vec<Value> {
    service.order(order_id).await["payments"]
        .as_array()
        .expect("payments")
        .clone()
}

pub(crate) async fn identical_concurrent_creations_make_one_payment(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let order_id = unique("o");
    service.create_order(&order_id, "u-1", 1999).await;
    let token = service.token().await;
    let key = unique("k");
    let answers = race(100, |_| {
        let (service, order_id, token, key) = (
            service.clone(),
            order_id.clone(),
            token.clone(),
            key.clone(),
        );
        async move {
            service
                .post(
                    &format!("/v1/orders/{order_id}/payments"),
                    json!({"channel": "alipay"}),
                    &[("Idempotency-Token", &token), ("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let mut numbers = std::collections::BTreeSet::new();
    let mut created = 0;
    for answer in &answers {
        match answer.status {
            201 | 200 => {
                numbers.insert(payment_no(&answer.json()));
                created += usize::from(answer.header("idempotent-replayed").is_none());
            }
            409 => assert_eq!(
                answer.code(),
                "in-progress",
                "only a wait that ran out may refuse"
            ),
            other => panic!("{other}: {}", String::from_utf8_lossy(&answer.body)),
        }
    }
    assert_eq!(created, 1, "exactly one request created the payment");
    assert_eq!(numbers.len(), 1, "every answer names the same payment");
    let payments = payments_of(&service, &order_id).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0]["status"], "PENDING");
    assert!(payments[0]["pay_url"].is_string(), "created at the channel");
}

pub(crate) async fn fresh_tokens_race_to_one_pending_payment(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let order_id = unique("o");
    service.create_order(&order_id, "u-1", 500).await;
    let mut tokens = Vec::new();
    for _ in 0..24 {
        tokens.push(service.token().await);
    }
    let tokens = Arc::new(tokens);
    let answers = race(24, |index| {
        let (service, order_id, tokens) = (service.clone(), order_id.clone(), tokens.clone());
        async move {
            service
                .post(
                    &format!("/v1/orders/{order_id}/payments"),
                    json!({"channel": if index % 2 == 0 { "alipay" } else { "wechat" }}),
                    &[("Idempotency-Token", &tokens[index])],
                )
                .await
        }
    })
    .await;
    let mut numbers = std::collections::BTreeSet::new();
    for answer in &answers {
        match answer.status {
            201 | 200 => {
                numbers.insert(payment_no(&answer.json()));
            }
            409 => assert_eq!(answer.code(), "in-progress"),
            other => panic!("{other}: {}", String::from_utf8_lossy(&answer.body)),
        }
    }
    assert_eq!(
        answers.iter().filter(|answer| answer.status == 201).count(),
        1,
        "one creation; the others found it"
    );
    assert_eq!(numbers.len(), 1);
    assert_eq!(payments_of(&service, &order_id).await.len(), 1);
}

pub(crate) async fn a_used_token_creates_nothing(backend: Backend) {
    let service = Service::start(backend).await;
    let (first, second) = (unique("o"), unique("o"));
    service.create_order(&first, "u-1", 100).await;
    service.create_order(&second, "u-1", 100).await;
    let token = service.token().await;
    let path = |order: &str| format!("/v1/orders/{order}/payments");
    let created = service
        .post(
            &path(&first),
            json!({"channel": "wechat"}),
            &[("Idempotency-Token", &token)],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
    for order in [&first, &second] {
        let again = service
            .post(
                &path(order),
                json!({"channel": "wechat"}),
                &[("Idempotency-Token", &token)],
            )
            .await;
        assert_eq!(again.status, 409);
        assert_eq!(again.code(), "duplicate-submission");
    }
    let unknown = service
        .post(
            &path(&second),
            json!({"channel": "wechat"}),
            &[("Idempotency-Token", "a".repeat(64).as_str())],
        )
        .await;
    assert_eq!(unknown.status, 400);
    assert_eq!(unknown.code(), "idempotency-token-unknown");
    let missing = service
        .post(&path(&second), json!({"channel": "wechat"}), &[])
        .await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.code(), "idempotency-token-missing");
    assert_eq!(payments_of(&service, &first).await.len(), 1);
    assert!(
        payments_of(&service, &second).await.is_empty(),
        "nothing was written"
    );
}

pub(crate) async fn duplicate_and_concurrent_notifies_pay_once(backend: Backend) {
    let service = Service::start(backend).await;
    for (channel, mode) in [
        ("alipay", "duplicate"),
        ("wechat", "concurrent"),
        ("alipay", "concurrent"),
        ("wechat", "duplicate"),
    ] {
        let order_id = unique("o");
        service.create_order(&order_id, "u-2", 2500).await;
        let created = service.create_payment(&order_id, channel).await;
        assert_eq!(created.status, 201, "{}", created.json());
        let number = payment_no(&created.json());
        service
            .sim_put(
                "/sim/notify-policy",
                json!({"mode": mode, "out_trade_no": number}),
            )
            .await;
        let paid = service.pay_at_channel(&number).await;
        assert_eq!(paid["outcome"], "paid", "{paid}");
        let trade = service.settled_trade(&number).await;
        let deliveries: Vec<&Value> = trade["notifies"]
            .as_array()
            .expect("notifies")
            .iter()
            .flat_map(|notify| notify["deliveries"].as_array().expect("deliveries"))
            .collect();
        assert!(
            deliveries.len() >= 2,
            "{mode}: both copies went out: {trade}"
        );
        assert!(
            deliveries
                .iter()
                .all(|delivery| delivery["acknowledged"] == true),
            "{mode}: every copy is acknowledged, the duplicate too: {trade}"
        );
        let order = service.order(&order_id).await;
        assert_eq!(order["status"], "PAID");
        assert_eq!(order["version"], 1, "one transition, however many notifies");
        let payment = &order["payments"][0];
        assert_eq!(payment["status"], "PAID");
        assert_eq!(payment["channel_trade_no"], trade["channel_trade_id"]);

        let again = service.create_payment(&order_id, channel).await;
        assert_eq!(again.status, 409);
        assert_eq!(again.code(), "order-already-paid");
        assert_eq!(again.json()["existing"]["payment_no"], number.as_str());
        let close = service
            .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
            .await;
        assert_eq!(close.status, 409);
        assert_eq!(close.code(), "already-paid");
    }
}

pub(crate) async fn close_racing_payment_is_never_both(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let mut numbers = Vec::new();
    for index in 0..8 {
        let order_id = unique("o");
        service.create_order(&order_id, "u-3", 100 + index).await;
        let channel = if index % 2 == 0 { "alipay" } else { "wechat" };
        let created = service.create_payment(&order_id, channel).await;
        assert_eq!(created.status, 201, "{}", created.json());
        numbers.push((order_id, payment_no(&created.json())));
    }
    let numbers = Arc::new(numbers);
    let outcomes = race(16, |index| {
        let (service, numbers) = (service.clone(), numbers.clone());
        async move {
            let (_, number) = &numbers[index / 2];
            if index % 2 == 0 {
                let paid = service.pay_at_channel(number).await;
                (index / 2, None, Some(paid))
            } else {
                let closed = service
                    .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
                    .await;
                (index / 2, Some((closed.status, closed.body)), None)
            }
        }
    })
    .await;
    for (slot, (order_id, number)) in numbers.iter().enumerate() {
        let close = outcomes
            .iter()
            .find_map(|(at, close, _)| (*at == slot).then_some(close.clone()).flatten())
            .expect("close answer");
        let trade = service.settled_trade(number).await;
        let order = service.order(order_id).await;
        let local = order["payments"][0]["status"]
            .as_str()
            .expect("status")
            .to_owned();
        let remote = trade["status"].as_str().expect("status").to_owned();
        match (local.as_str(), remote.as_str()) {
            ("PAID", "PAID") => {
                // The close lost to the payment (409), or came before the scan, when Alipay has
                // no trade to close and the code stays payable (202).
                assert!(matches!(close.0, 409 | 202), "close answered {}", close.0);
                assert_eq!(order["status"], "PAID");
            }
            ("CLOSED", "CLOSED") => {
                assert_eq!(close.0, 200, "the close won");
                assert_eq!(
                    order["status"], "CREATED",
                    "closing an attempt does not cancel the order"
                );
            }
            other => panic!(
                "{number}: local and channel disagree: {other:?}; close {}",
                String::from_utf8_lossy(&close.1)
            ),
        }
    }
}

/// Form-encodes an Alipay notify signed by `key` (the channel's, or a forger's).
pub(crate) fn alipay_notify(
    key: &mideng_channel::keys::PrivateKey,
    fields: &[(&str, &str)],
) -> String {
    let content = alipay::notify_sign_content(fields.iter().copied());
    let signature = key.sign(content.as_bytes()).expect("sign");
    let mut all: Vec<(&str, &str)> = fields.to_vec();
    all.push(("sign", &signature));
    all.push(("sign_type", "RSA2"));
    serde_urlencoded::to_string(&all).expect("form")
}

pub(crate) async fn forged_callbacks_change_nothing(backend: Backend) {
    let service = Service::start(backend).await;
    let order_id = unique("o");
    service.create_order(&order_id, "u-4", 1000).await;
    let created = service.create_payment(&order_id, "alipay").await;
    let number = payment_no(&created.json());
    let channel_key = fixture_channel_key();
    let forger = mideng_channel::keys::PrivateKey::from_pem(include_str!(
        "../../../mideng-channel/tests/fixtures/merchant-private.pem"
    ))
    .expect("key");
    let (config, _) = crate::harness::sim_identity();
    let app_id = config.alipay_app_id.as_str();
    let notify = |amount: &'static str, out_trade_no: String, app: &'static str| {
        move |key: &mideng_channel::keys::PrivateKey| {
            alipay_notify(
                key,
                &[
                    ("app_id", app),
                    ("notify_id", "forged-1"),
                    ("notify_time", "2026-11-30 10:00:00"),
                    ("out_trade_no", &out_trade_no),
                    ("total_amount", amount),
                    ("trade_no", "2026113022001400000000099999"),
                    ("trade_status", "TRADE_SUCCESS"),
                ],
            )
        }
    };
    let app: &'static str = Box::leak(app_id.to_owned().into_boxed_str());
    let bodies = [
        // Signed by someone else.
        notify("10.00", number.clone(), app)(&forger),
        // Signed by the channel, but not our amount.
        notify("0.01", number.clone(), app)(&channel_key),
        // Signed by the channel, for a trade we do not have.
        notify("10.00", unique("P"), app)(&channel_key),
        // Signed by the channel, for another merchant.
        notify("10.00", number.clone(), "2021999999999999")(&channel_key),
        // Not a notify at all.
        "garbage=%%%".to_owned(),
    ];
    for body in bodies {
        let answer = service
            .client
            .post(format!("{}/v1/channels/alipay/notify", service.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.expect("body"), "failure");
    }
    let forged_wechat = service
        .client
        .post(format!("{}/v1/channels/wechat/notify", service.base))
        .header("content-type", "application/json")
        .header(
            "wechatpay-serial",
            "PUB_KEY_ID_0112340000000000000000000000000001",
        )
        .header("wechatpay-signature", "Zm9yZ2Vk")
        .header("wechatpay-timestamp", "1796000000")
        .header("wechatpay-nonce", "n")
        .body(r#"{"id":"x","event_type":"TRANSACTION.SUCCESS","resource":{}}"#)
        .send()
        .await
        .expect("answer");
    assert_eq!(
        forged_wechat.status(),
        400,
        "a refused notify is the sender's fault: a 4xx (WeChat resends any non-2xx), never a 5xx"
    );
    let body: Value = forged_wechat.json().await.expect("json");
    assert_eq!(body["code"], "FAIL");

    let order = service.order(&order_id).await;
    assert_eq!(order["status"], "CREATED");
    assert_eq!(order["version"], 0);
    assert_eq!(order["payments"][0]["status"], "PENDING");
    // The real payment still goes through afterwards.
    service.pay_at_channel(&number).await;
    service.settled_trade(&number).await;
    assert_eq!(service.order(&order_id).await["status"], "PAID");
}

/// The order's lock held elsewhere, by a node that then pauses past its lease (a stopped
/// process, a long collection pause): creation waits briefly, re-checks the order and answers
/// 409 `in-progress` with `Retry-After`, creating nothing and storing nothing under the key.
/// Once the lease has run out, the same requests (same keys, same tokens) make exactly one
/// payment; and the paused holder, waking up, cannot write with its fence, nor release the
/// lock, while a later holder can.
pub(crate) async fn a_held_order_lock_answers_in_progress_and_fences_off_its_paused_holder(
    backend: Backend,
) {
    use mideng::lock::LockStore;
    use mideng_pay::store::{LocalClose, OrderFence};
    let service = Arc::new(Service::start(backend).await);
    let order_id = unique("o");
    service.create_order(&order_id, "u-5", 300).await;
    let redis = backend.redis_url().expect("a backend with Redis");
    let locks = mideng::store::redis::RedisStore::connect(&redis)
        .await
        .expect("redis");
    let name = mideng_pay::flows::order_lock_name(&service.tenant, &order_id).expect("name");
    // Long enough for the first round of requests to wait and answer within it.
    let lease = std::time::Duration::from_secs(8);
    let paused = locks
        .try_acquire(&name, lease)
        .await
        .expect("lock store")
        .expect("free");
    let mut submissions = Vec::new();
    for _ in 0..4 {
        submissions.push((unique("k"), service.token().await));
    }
    let submissions = Arc::new(submissions);
    let send_all = || {
        race(4, |i| {
            let (service, order_id, submissions) =
                (service.clone(), order_id.clone(), submissions.clone());
            async move {
                let (key, token) = &submissions[i];
                service
                    .post(
                        &format!("/v1/orders/{order_id}/payments"),
                        json!({"channel": "alipay"}),
                        &[("Idempotency-Key", key), ("Idempotency-Token", token)],
                    )
                    .await
            }
        })
    };
    for answer in send_all().await {
        assert_eq!(
            answer.status,
            409,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.json()["code"], "in-progress");
        assert!(answer.headers.contains_key("retry-after"));
    }
    assert!(payments_of(&service, &order_id).await.is_empty());

    // The holder never renews: its lease runs out, and the retries go through.
    let until = paused.held_until_ms + 200;
    while mideng::clock::now_ms() <= until {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let answers = send_all().await;
    let statuses: Vec<u16> = answers.iter().map(|answer| answer.status).collect();
    assert_eq!(
        statuses.iter().filter(|status| **status == 201).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|status| matches!(status, 200 | 201)),
        "{statuses:?}"
    );
    let numbers: std::collections::BTreeSet<String> = answers
        .iter()
        .map(|answer| payment_no(&answer.json()))
        .collect();
    assert_eq!(numbers.len(), 1, "one payment answered to all: {numbers:?}");
    assert_eq!(payments_of(&service, &order_id).await.len(), 1);
    let number = numbers.into_iter().next().expect("a payment");

    // The paused holder wakes up and writes under its old fence: refused, nothing changed.
    let payments = &service.state.ports.store.payments;
    let fence_of = |fence| OrderFence {
        tenant_id: service.tenant.clone(),
        order_id: order_id.clone(),
        fence,
        enforced: true,
    };
    let refused = payments
        .close_payment(&number, Some(&fence_of(paused.fence)))
        .await;
    assert!(
        matches!(refused, Err(mideng::StoreError::StaleFence { .. })),
        "{refused:?}"
    );
    assert_eq!(
        service.order(&order_id).await["payments"][0]["status"],
        "PENDING"
    );
    assert!(
        !locks.release(&paused).await.expect("release"),
        "a holder whose lease ran out cannot release the lock"
    );
    // A later holder writes.
    let next = locks
        .try_acquire(&name, lease)
        .await
        .expect("lock store")
        .expect("free again once the flows released it");
    assert!(next.fence > paused.fence);
    let closed = payments
        .close_payment(&number, Some(&fence_of(next.fence)))
        .await
        .expect("a current fence writes");
    assert!(matches!(closed, LocalClose::Closed(_)), "{closed:?}");
    assert!(locks.release(&next).await.expect("release"));
}

/// Scenario 3 of the channels: Alipay has no trade before the scan, so a close cannot close
/// it, and the buyer may still pay; WeChat Pay closes at once and refuses the payment.
pub(crate) async fn a_close_before_the_scan_never_strands_a_payment(backend: Backend) {
    let service = Service::start(backend).await;
    let order_id = unique("o");
    service.create_order(&order_id, "u-6", 700).await;
    let number = payment_no(&service.create_payment(&order_id, "alipay").await.json());
    let close = service
        .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
        .await;
    assert_eq!(close.status, 202, "{}", close.json());
    assert_eq!(close.json()["status"], "PENDING");
    let paid = service.pay_at_channel(&number).await;
    assert_eq!(
        paid["outcome"], "paid",
        "the code was still payable: {paid}"
    );
    service.settled_trade(&number).await;
    let order = service.order(&order_id).await;
    assert_eq!(
        order["payments"][0]["status"], "PAID",
        "paid at the channel, paid here"
    );
    assert_eq!(order["status"], "PAID");

    let order_id = unique("o");
    service.create_order(&order_id, "u-6", 700).await;
    let number = payment_no(&service.create_payment(&order_id, "wechat").await.json());
    let close = service
        .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
        .await;
    assert_eq!(close.status, 200, "{}", close.json());
    assert_eq!(close.json()["status"], "CLOSED");
    let again = service
        .post(&format!("/v1/payments/{number}/close"), json!({}), &[])
        .await;
    assert_eq!(again.status, 200, "closing again is fine");
    let refused = service.pay_at_channel(&number).await;
    assert_ne!(refused["outcome"], "paid", "{refused}");
    assert_eq!(service.sim_trade(&number).await["status"], "CLOSED");
    // A new attempt for the same order is possible once the first is closed.
    let retry = service.create_payment(&order_id, "wechat").await;
    assert_eq!(retry.status, 201, "{}", retry.json());
    assert_ne!(payment_no(&retry.json()), number);
}

/// Scenario 6 of the channels at creation: the channel's answer is lost (applied or not). The
/// attempt is kept (202, no pay URL, its number reserved, the answer not stored under the
/// key); the retry with the same key and token creates the trade again under the same number,
/// and the buyer pays once.
pub(crate) async fn a_lost_channel_answer_keeps_the_attempt(backend: Backend) {
    let service = Service::start(backend).await;
    for (channel, method, applied) in [
        ("wechat", "wechat.native", true),
        ("alipay", "alipay.trade.precreate", false),
    ] {
        let order_id = unique("o");
        service.create_order(&order_id, "u-10", 990).await;
        service
            .sim_post(
                "/sim/fail-next",
                json!({"method": method, "apply_anyway": applied}),
            )
            .await;
        // The client sends a key: the 202 is not stored under it, and the retry after
        // Retry-After with the same key and the same (spent, bound) token gets the outcome.
        let (key, token) = (unique("k"), service.token().await);
        let path = format!("/v1/orders/{order_id}/payments");
        let headers = [
            ("Idempotency-Key", key.as_str()),
            ("Idempotency-Token", token.as_str()),
        ];
        let first = service
            .post(&path, json!({"channel": channel}), &headers)
            .await;
        assert_eq!(first.status, 202, "{}", first.json());
        assert_eq!(first.header("retry-after"), Some("2"));
        assert_eq!(first.json()["status"], "PENDING");
        assert!(first.json()["pay_url"].is_null());
        let number = payment_no(&first.json());
        let second = service
            .post(&path, json!({"channel": channel}), &headers)
            .await;
        assert_eq!(second.status, 200, "{}", second.json());
        assert_eq!(
            payment_no(&second.json()),
            number,
            "the same attempt, created at the channel now"
        );
        assert!(second.json()["pay_url"].is_string());
        assert_eq!(service.pay_at_channel(&number).await["outcome"], "paid");
        service.settled_trade(&number).await;
        let order = service.order(&order_id).await;
        assert_eq!(order["status"], "PAID");
        assert_eq!(order["payments"].as_array().map(Vec::len), Some(1));
    }

    // The trade was created (answer lost) and the buyer paid it before anyone asked again,
    // with the notify lost too: the channel refuses a second creation ("already paid"). That
    // is the success flow, never a failed attempt.
    let order_id = unique("o");
    service.create_order(&order_id, "u-10", 990).await;
    service
        .sim_post(
            "/sim/fail-next",
            json!({"method": "wechat.native", "apply_anyway": true}),
        )
        .await;
    let first = service.create_payment(&order_id, "wechat").await;
    assert_eq!(first.status, 202, "{}", first.json());
    let number = payment_no(&first.json());
    service
        .sim_put(
            "/sim/notify-policy",
            json!({"mode": "drop", "out_trade_no": number}),
        )
        .await;
    assert_eq!(service.pay_at_channel(&number).await["outcome"], "paid");
    service.settled_trade(&number).await;
    let again = service.create_payment(&order_id, "wechat").await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (409, "order-already-paid"),
        "{}",
        again.json()
    );
    let order = service.order(&order_id).await;
    assert_eq!(
        (
            order["status"].as_str(),
            order["payments"][0]["status"].as_str()
        ),
        (Some("PAID"), Some("PAID")),
        "{order}"
    );
}

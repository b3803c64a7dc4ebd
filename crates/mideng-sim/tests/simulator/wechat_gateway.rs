//! WeChat Pay v3: native create, query and close, `Authorization` checks, signed responses,
//! encrypted notifies and the 16-delivery retry schedule.

use std::time::Duration;

use mideng_channel::keys::PrivateKey;
use mideng_channel::wechat;
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{
    API_V3_KEY, CERTIFICATE_SERIAL, Merchant, TestSim, WECHAT_APPID, WECHAT_MCHID,
    channel_public_key, merchant_key, notify_state, rfc3339_after, wall_clock_ms,
};

fn native_order(sim: &TestSim, out_trade_no: &str, total: i64, notify_url: &str) -> Value {
    json!({
        "appid": WECHAT_APPID,
        "mchid": WECHAT_MCHID,
        "description": "订单 1001",
        "out_trade_no": out_trade_no,
        "time_expire": rfc3339_after(sim, 30 * 24 * 3600),
        "notify_url": notify_url,
        "amount": { "total": total, "currency": "CNY" },
    })
}

fn query_path(out_trade_no: &str) -> String {
    format!(
        "{}{out_trade_no}?mchid={WECHAT_MCHID}",
        wechat::PATH_OUT_TRADE_NO
    )
}

fn close_path(out_trade_no: &str) -> String {
    format!("{}{out_trade_no}/close", wechat::PATH_OUT_TRADE_NO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_query_and_close_round_trip_with_signed_answers() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let order = native_order(&sim, "W1", 46000, &merchant.url);
    let created = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let code_url = created.json["code_url"]
        .as_str()
        .expect("code_url")
        .to_owned();
    let again = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(again.json["code_url"], code_url.as_str());
    let other = sim
        .wechat(
            Method::POST,
            wechat::PATH_NATIVE,
            Some(&native_order(&sim, "W1", 46001, &merchant.url)),
        )
        .await;
    assert_eq!(other.status, 403);
    assert_eq!(other.json["code"], "OUT_TRADE_NO_USED");

    let query = sim.wechat(Method::GET, &query_path("W1"), None).await;
    assert_eq!(query.status, 200, "{}", query.body);
    assert_eq!(query.json["trade_state"], wechat::STATE_NOTPAY);
    assert_eq!(query.json["amount"]["total"], 46000);
    assert_eq!(query.json["mchid"], WECHAT_MCHID);

    let close = sim
        .wechat(
            Method::POST,
            &close_path("W1"),
            Some(&json!({ "mchid": WECHAT_MCHID })),
        )
        .await;
    assert_eq!(close.status, 204, "{}", close.body);
    assert!(close.body.is_empty());
    let query = sim.wechat(Method::GET, &query_path("W1"), None).await;
    assert_eq!(query.json["trade_state"], wechat::STATE_CLOSED);
    // Closing a closed or unknown order also answers 204.
    let close = sim
        .wechat(
            Method::POST,
            &close_path("W1"),
            Some(&json!({ "mchid": WECHAT_MCHID })),
        )
        .await;
    assert_eq!(close.status, 204);
    let close = sim
        .wechat(
            Method::POST,
            &close_path("NOPE1"),
            Some(&json!({ "mchid": WECHAT_MCHID })),
        )
        .await;
    assert_eq!(close.status, 204);
    let unknown = sim.wechat(Method::GET, &query_path("NOPE1"), None).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json["code"], "ORDER_NOT_EXIST");
    let reuse = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(reuse.json["code"], "ORDER_CLOSED");
    assert!(merchant.received().is_empty(), "closes are never notified");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_is_notified_encrypted_and_cannot_be_closed() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let order = native_order(&sim, "W2", 1, &merchant.url);
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    sim.pay("W2").await;

    let received = merchant.wait_for(1).await;
    let notify = &received[0];
    assert!(notify.wechat_signature_valid());
    let notification = notify.wechat_notification();
    assert_eq!(notification.event_type, "TRANSACTION.SUCCESS");
    assert_eq!(notification.resource.algorithm, "AEAD_AES_256_GCM");
    assert_eq!(notification.resource.associated_data, "transaction");
    assert_eq!(notification.resource.nonce.len(), 12);
    let transaction = notify.wechat_transaction();
    assert_eq!(transaction["out_trade_no"], "W2");
    assert_eq!(transaction["trade_state"], wechat::STATE_SUCCESS);
    assert_eq!(transaction["amount"]["total"], 1);
    assert_eq!(transaction["mchid"], WECHAT_MCHID);
    assert_eq!(transaction["appid"], WECHAT_APPID);

    let query = sim.wechat(Method::GET, &query_path("W2"), None).await;
    assert_eq!(query.json["trade_state"], wechat::STATE_SUCCESS);
    assert_eq!(query.json["transaction_id"], transaction["transaction_id"]);
    assert_eq!(query.json["amount"]["payer_total"], 1);
    assert!(query.json["success_time"].is_string());

    let close = sim
        .wechat(
            Method::POST,
            &close_path("W2"),
            Some(&json!({ "mchid": WECHAT_MCHID })),
        )
        .await;
    assert_eq!(close.status, 400);
    assert_eq!(close.json["code"], "ORDERPAID");
    sim.wait_for_trade("W2", |trade| notify_state(trade, 0) == "acknowledged")
        .await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_recent_signature_are_refused_with_401() {
    let sim = TestSim::start(1).await;
    let now = wall_clock_ms() / 1000;
    let path = query_path("W3");

    let stranger = PrivateKey::from_pem(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../mideng-channel/tests/fixtures/channel-private.pem"),
        )
        .expect("fixture"),
    )
    .expect("key");
    let forged = sim
        .wechat_at(Method::GET, &path, None, now, &stranger)
        .await;
    assert_eq!(forged.status, 401);
    assert_eq!(forged.json["code"], "SIGN_ERROR");
    assert!(forged.signature_valid, "error answers are signed too");

    for skewed in [now - 301, now + 310, now - 3600] {
        let stale = sim
            .wechat_at(Method::GET, &path, None, skewed, merchant_key())
            .await;
        assert_eq!(stale.status, 401, "timestamp {skewed} vs {now}");
        assert_eq!(stale.json["code"], "SIGN_ERROR");
    }
    let fresh = sim
        .wechat_at(Method::GET, &path, None, now - 240, merchant_key())
        .await;
    assert_eq!(fresh.status, 404, "a valid request for an unknown order");

    // The signature covers the URL: the same header on another path fails.
    let response = sim
        .client
        .get(format!("{}{}", sim.base, query_path("W4")))
        .header(
            "authorization",
            "WECHATPAY2-SHA256-RSA2048 mchid=\"1230000109\"",
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 401);
    let response = sim
        .client
        .get(format!("{}{}", sim.base, query_path("W4")))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 401);

    // A merchant signing with the channel's advanced clock is accepted too.
    sim.advance(24 * 3600).await;
    let channel_now = sim.simulator.now_ms() / 1000;
    let advanced = sim
        .wechat_at(Method::GET, &path, None, channel_now, merchant_key())
        .await;
    assert_eq!(advanced.status, 404);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_authorization_or_query_parameter_is_refused() {
    let sim = TestSim::start(1).await;
    let now = wall_clock_ms() / 1000;
    let path = query_path("W5");
    let genuine = TestSim::wechat_authorization(&Method::GET, &path, "", now, merchant_key());
    let forged = format!("{genuine},mchid=\"1230000999\"");
    for authorizations in [vec![genuine.clone(), genuine.clone()], vec![forged]] {
        let mut request = sim.client.get(format!("{}{path}", sim.base));
        for value in authorizations {
            request = request.header("authorization", value);
        }
        let answer = TestSim::wechat_answer(request.send().await.expect("answer")).await;
        assert_eq!(answer.status, 401, "{}", answer.body);
        assert_eq!(answer.json["code"], "SIGN_ERROR");
    }
    // The signed URL itself names mchid twice: refused, though the signature covers it.
    let doubled = format!("{path}&mchid=1230000999");
    let answer = sim
        .wechat_at(Method::GET, &doubled, None, now, merchant_key())
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.json["code"], "PARAM_ERROR");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_orders_get_param_errors() {
    let sim = TestSim::start(1).await;
    let mut order = native_order(&sim, "W5", 0, "http://127.0.0.1:1/notify");
    let zero = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(zero.status, 400);
    assert_eq!(zero.json["code"], "PARAM_ERROR");
    order["amount"]["total"] = json!(100);
    order["appid"] = json!("wx0000000000000000");
    let wrong_app = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(wrong_app.json["code"], "APPID_MCHID_NOT_MATCH");
    let not_an_order = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&json!([1, 2, 3])))
        .await;
    assert_eq!(not_an_order.status, 400);
    let no_mchid = sim
        .wechat(
            Method::GET,
            &format!("{}W5", wechat::PATH_OUT_TRADE_NO),
            None,
        )
        .await;
    assert_eq!(no_mchid.status, 400);
    let response = sim
        .client
        .post(format!("{}{}", sim.base, wechat::PATH_NATIVE))
        .body(vec![b'x'; 70 * 1024])
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 400, "oversize bodies are refused");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_notify_is_delivered_sixteen_times_with_one_id() {
    // 20 000 channel seconds per real second: WeChat Pay's 24-hour schedule takes about 4.3 s.
    let sim = TestSim::start(20_000).await;
    let merchant = Merchant::start(|_| (500, r#"{"code":"FAIL"}"#), Duration::ZERO).await;
    let order = native_order(&sim, "W6", 990, &merchant.url);
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    sim.pay("W6").await;
    let trade = sim
        .wait_for_trade("W6", |trade| notify_state(trade, 0) == "exhausted")
        .await;
    let received = merchant.received();
    assert_eq!(received.len(), 16);
    let id = received[0].wechat_notification().id;
    let mut nonces = std::collections::BTreeSet::new();
    for notify in &received {
        assert!(notify.wechat_signature_valid());
        assert_eq!(notify.wechat_notification().id, id);
        nonces.insert(
            notify
                .headers
                .get(wechat::HEADER_NONCE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(
        nonces.len(),
        16,
        "fresh signature headers on every delivery"
    );
    let paid_at_ms = trade["paid_at_ms"].as_i64().expect("paid_at_ms");
    let deliveries = trade["notifies"][0]["deliveries"]
        .as_array()
        .expect("deliveries");
    for (delivery, offset_seconds) in deliveries.iter().zip(wechat::NOTIFY_SCHEDULE_SECS) {
        let offset_ms = delivery["at_ms"].as_i64().expect("at_ms") - paid_at_ms;
        assert!(offset_ms >= i64::try_from(offset_seconds * 1000).expect("fits"));
        assert_eq!(delivery["status"], 500);
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_without_time_expire_closes_after_two_hours() {
    let sim = TestSim::start(1).await;
    let mut order = native_order(&sim, "W7", 100, "http://127.0.0.1:1/notify");
    order.as_object_mut().expect("object").remove("time_expire");
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    sim.advance(2 * 3600 - 60).await;
    let query = sim.wechat(Method::GET, &query_path("W7"), None).await;
    assert_eq!(query.json["trade_state"], wechat::STATE_NOTPAY);
    sim.advance(61).await;
    let query = sim.wechat(Method::GET, &query_path("W7"), None).await;
    assert_eq!(query.json["trade_state"], wechat::STATE_CLOSED);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_and_notifies_name_their_signature_type_and_carry_a_request_id() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let created = sim
        .wechat(
            Method::POST,
            wechat::PATH_NATIVE,
            Some(&native_order(&sim, "W9", 1, &merchant.url)),
        )
        .await;
    let refused = sim.wechat(Method::GET, &query_path("NOPE9"), None).await;
    assert_eq!(
        refused.status, 404,
        "an error answer is signed the same way"
    );
    for answer in [&created, &refused] {
        assert!(answer.signature_valid, "{answer:?}");
        assert!(!answer.request_id.is_empty(), "{answer:?}");
    }
    assert_ne!(created.request_id, refused.request_id);

    sim.pay("W9").await;
    let notify = &merchant.wait_for(1).await[0];
    assert_eq!(
        notify.header(wechat::HEADER_SIGNATURE_TYPE),
        "WECHATPAY2-SHA256-RSA2048"
    );
    assert!(notify.wechat_signature_valid());
    assert!(!notify.header(wechat::HEADER_REQUEST_ID).is_empty());
    sim.stop().await;
}

fn transaction_id_path(transaction_id: &str, mchid: &str) -> String {
    format!(
        "{}{transaction_id}?mchid={mchid}",
        wechat::PATH_TRANSACTION_ID
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_transaction_is_found_by_its_transaction_id_as_by_its_out_trade_no() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let order = native_order(&sim, "W10", 300, &merchant.url);
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    let unknown = sim
        .wechat(
            Method::GET,
            &transaction_id_path("4200000000000000000000000000", WECHAT_MCHID),
            None,
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.json["code"].as_str()),
        (404, Some("ORDER_NOT_EXIST"))
    );

    sim.pay("W10").await;
    let by_out_trade_no = sim.wechat(Method::GET, &query_path("W10"), None).await;
    let transaction_id = by_out_trade_no.json["transaction_id"]
        .as_str()
        .expect("a paid trade has a transaction_id")
        .to_owned();
    let by_id = sim
        .wechat(
            Method::GET,
            &transaction_id_path(&transaction_id, WECHAT_MCHID),
            None,
        )
        .await;
    assert_eq!(by_id.status, 200, "{}", by_id.body);
    assert_eq!(by_id.json, by_out_trade_no.json);
    assert_eq!(by_id.json["out_trade_no"], "W10");

    let other_merchant = sim
        .wechat(
            Method::GET,
            &transaction_id_path(&transaction_id, "1900000001"),
            None,
        )
        .await;
    assert_eq!(other_merchant.status, 400);
    assert_eq!(other_merchant.json["code"], "PARAM_ERROR");
    let malformed = sim
        .wechat(
            Method::GET,
            &transaction_id_path("42%2F00", WECHAT_MCHID),
            None,
        )
        .await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.json["code"], "PARAM_ERROR");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_v3_requests_answer_wechat_errors_signed_like_any_answer() {
    let sim = TestSim::start(1).await;
    for (method, path) in [
        // Public-key mode: there are no platform certificates to serve.
        (Method::GET, "/v3/certificates"),
        (Method::GET, "/v3/pay/transactions/nothing-here"),
        (Method::GET, wechat::PATH_NATIVE),
        (Method::DELETE, &*query_path("W11")),
    ] {
        // `sim.wechat` asserts the answer is signed by the platform.
        let answer = sim.wechat(method.clone(), path, None).await;
        assert_eq!(answer.status, 404, "{method} {path}");
        assert_eq!(answer.json["code"], "NOT_FOUND", "{method} {path}");
        assert!(answer.json["message"].is_string());
    }
    let control = sim
        .client
        .get(format!("{}/sim/no-such-thing", sim.base))
        .send()
        .await
        .expect("answer");
    assert_eq!(control.status(), 404);
    assert_eq!(
        control.headers()["content-type"],
        "application/problem+json",
        "the control API keeps its own format"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_mode_serves_the_platform_certificate_encrypted_under_its_serial() {
    use base64::Engine as _;
    let sim = TestSim::start_in_certificate_mode().await;
    let answer = sim
        .wechat(Method::GET, wechat::PATH_CERTIFICATES, None)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.serial, CERTIFICATE_SERIAL,
        "answers are signed under the certificate"
    );
    let entries = answer.json["data"].as_array().expect("data");
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry["serial_no"], CERTIFICATE_SERIAL);
    let effective_ms = wechat::parse_rfc3339(entry["effective_time"].as_str().expect("effective"))
        .expect("RFC 3339");
    let expire_ms =
        wechat::parse_rfc3339(entry["expire_time"].as_str().expect("expire")).expect("RFC 3339");
    assert!(effective_ms < wall_clock_ms() && wall_clock_ms() < expire_ms);
    assert!(
        expire_ms - effective_ms > 4 * 365 * 86_400_000,
        "valid for years"
    );
    let envelope = &entry["encrypt_certificate"];
    assert_eq!(envelope["algorithm"], "AEAD_AES_256_GCM");
    assert_eq!(envelope["associated_data"], "certificate");
    let pem = mideng_channel::keys::aes_gcm_decrypt(
        API_V3_KEY.as_bytes(),
        envelope["nonce"].as_str().expect("nonce").as_bytes(),
        b"certificate",
        envelope["ciphertext"].as_str().expect("ciphertext"),
    )
    .expect("the API v3 key opens it");
    let pem = String::from_utf8(pem).expect("PEM text");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let der_of = |pem: &str| {
        let body: String = pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64")
    };
    let certificate = der_of(&pem);
    let platform_key = der_of(&channel_public_key().to_pem().expect("PEM"));
    let contains = |needle: &[u8]| {
        certificate
            .windows(needle.len())
            .any(|window| window == needle)
    };
    assert!(
        contains(&platform_key),
        "the certificate carries the platform key"
    );
    let serial: Vec<u8> = (0..CERTIFICATE_SERIAL.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&CERTIFICATE_SERIAL[at..at + 2], 16).expect("hex"))
        .collect();
    assert!(contains(&serial), "the certificate has the serial");

    let unsigned = sim
        .client
        .get(format!("{}{}", sim.base, wechat::PATH_CERTIFICATES))
        .send()
        .await
        .expect("answer");
    assert_eq!(
        unsigned.status(),
        401,
        "the certificates are a signed call like any other"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_signs_under_a_new_certificate_listed_beside_the_old_one() {
    let sim = TestSim::start_in_certificate_mode().await;
    let (status, rotated) = sim
        .control(Method::POST, "/sim/wechat/platform/rotate", None)
        .await;
    assert_eq!(status, 200, "{rotated}");
    let new_serial = rotated["serial_no"].as_str().expect("serial_no").to_owned();
    assert_eq!(new_serial.len(), 40);
    assert_ne!(new_serial, CERTIFICATE_SERIAL);

    // An answer now: signed under the new serial, by the new key and not the old one.
    let path = query_path("NOPE12");
    let response = sim
        .client
        .get(format!("{}{path}", sim.base))
        .header(
            "authorization",
            TestSim::wechat_authorization(
                &Method::GET,
                &path,
                "",
                wall_clock_ms() / 1000,
                merchant_key(),
            ),
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 404);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (serial, signature) = (header("wechatpay-serial"), header("wechatpay-signature"));
    let (timestamp, nonce) = (header("wechatpay-timestamp"), header("wechatpay-nonce"));
    let body = response.text().await.expect("body");
    let message = wechat::notify_message(&timestamp, &nonce, &body);
    assert_eq!(
        serial, new_serial,
        "answers are signed under the new serial"
    );
    let new_key = sim.simulator.wechat_platform_public_key();
    assert!(new_key.verify(message.as_bytes(), &signature));
    assert!(!channel_public_key().verify(message.as_bytes(), &signature));

    let listed = sim
        .wechat_at(
            Method::GET,
            wechat::PATH_CERTIFICATES,
            None,
            wall_clock_ms() / 1000,
            merchant_key(),
        )
        .await;
    let serials: Vec<&str> = listed.json["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|entry| entry["serial_no"].as_str().expect("serial"))
        .collect();
    assert_eq!(serials, [CERTIFICATE_SERIAL, new_serial.as_str()]);
    sim.stop().await;

    let public_key_mode = TestSim::start(1).await;
    let (status, refusal) = public_key_mode
        .control(Method::POST, "/sim/wechat/platform/rotate", None)
        .await;
    assert_eq!(
        (status, refusal["code"].as_str()),
        (409, Some("not-certificate-mode"))
    );
    public_key_mode.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_signed_at_the_wall_clock_even_when_the_channel_clock_runs_fast() {
    // 600 channel seconds a second: the channel clock is minutes ahead within a second.
    let sim = TestSim::start(600).await;
    sim.advance(3600).await;
    let response = sim
        .client
        .get(format!("{}{}", sim.base, query_path("NOPE13")))
        .header(
            "authorization",
            TestSim::wechat_authorization(
                &Method::GET,
                &query_path("NOPE13"),
                "",
                wall_clock_ms() / 1000,
                merchant_key(),
            ),
        )
        .send()
        .await
        .expect("answer");
    let signed_at: i64 = response.headers()["wechatpay-timestamp"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("seconds");
    assert!(
        wechat::timestamp_is_fresh(signed_at, wall_clock_ms()),
        "an SDK's five-minute check against its own clock passes"
    );
    sim.stop().await;
}

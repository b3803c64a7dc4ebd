//! Alipay OpenAPI v3 (`POST /v3/alipay/trade/…`): the same trades as `/gateway.do`, requests
//! authenticated by the `authorization` header, answers signed in `alipay-*` headers, and the
//! refusals the official SDK expects (401 for authentication, 400 for a bad call, 500 for an
//! unknown outcome).

use mideng_channel::alipay::{self, v3};
use mideng_channel::keys::random_nonce;
use serde_json::{Value, json};

use crate::harness::{ALIPAY_APP_ID, Merchant, TestSim, channel_public_key, merchant_key};

/// How a test request is signed and sent; [`V3Request::signed`] is what the SDK sends.
struct V3Request {
    path: &'static str,
    body: String,
    timestamp_ms: i64,
    app_id: &'static str,
    nonce: String,
    /// Sent in `alipay-app-auth-token` (and signed when `sign_token`).
    app_auth_token: Option<&'static str>,
    sign_token: bool,
    /// Replaces the signature.
    signature: Option<String>,
    /// Extra header lines, added after the signed ones.
    extra_headers: Vec<(&'static str, String)>,
}

impl V3Request {
    fn signed(path: &'static str, body: &Value) -> Self {
        Self {
            path,
            body: body.to_string(),
            timestamp_ms: crate::harness::wall_clock_ms(),
            app_id: ALIPAY_APP_ID,
            nonce: random_nonce(32),
            app_auth_token: None,
            sign_token: true,
            signature: None,
            extra_headers: Vec::new(),
        }
    }

    fn auth_string(&self) -> String {
        format!(
            "app_id={},nonce={},timestamp={}",
            self.app_id, self.nonce, self.timestamp_ms
        )
    }

    fn authorization(&self) -> String {
        let auth_string = self.auth_string();
        let token = self.app_auth_token.filter(|_| self.sign_token);
        let message = v3::request_message(&auth_string, "POST", self.path, &self.body, token);
        let signature = self.signature.clone().unwrap_or_else(|| {
            merchant_key()
                .sign(message.as_bytes())
                .expect("the fixture key signs")
        });
        v3::authorization(&auth_string, &signature)
    }

    async fn send(&self, sim: &TestSim) -> V3Answer {
        let mut request = sim
            .client
            .post(format!("{}{}", sim.base, self.path))
            .header("content-type", "application/json")
            .header("authorization", self.authorization());
        if let Some(token) = self.app_auth_token {
            request = request.header(v3::HEADER_APP_AUTH_TOKEN, token);
        }
        for (name, value) in &self.extra_headers {
            request = request.header(*name, value);
        }
        let response = request
            .body(self.body.clone())
            .send()
            .await
            .expect("the simulator answers");
        let status = response.status().as_u16();
        let header = |name: &str| {
            let mut values = response.headers().get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(value), None) => value.to_str().unwrap_or_default().to_owned(),
                _ => String::new(),
            }
        };
        let (timestamp, nonce, signature) = (
            header(v3::HEADER_TIMESTAMP),
            header(v3::HEADER_NONCE),
            header(v3::HEADER_SIGNATURE),
        );
        let body = response.text().await.expect("a body");
        let signature_valid = channel_public_key().verify(
            v3::response_message(&timestamp, &nonce, &body).as_bytes(),
            &signature,
        );
        V3Answer {
            status,
            json: serde_json::from_str(&body).unwrap_or(Value::Null),
            body,
            signature_valid,
        }
    }
}

#[derive(Debug)]
struct V3Answer {
    status: u16,
    body: String,
    json: Value,
    signature_valid: bool,
}

async fn call(sim: &TestSim, path: &'static str, body: Value) -> V3Answer {
    let answer = V3Request::signed(path, &body).send(sim).await;
    assert!(answer.signature_valid, "every answer is signed: {answer:?}");
    answer
}

fn order(out_trade_no: &str, total_amount: &str, notify_url: &str) -> Value {
    json!({
        "out_trade_no": out_trade_no,
        "total_amount": total_amount,
        "subject": "拿铁 latte",
        "notify_url": notify_url,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v3_trade_is_created_queried_paid_notified_and_closed_with_signed_answers() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let created = call(
        &sim,
        v3::PATH_PRECREATE,
        order("V1", "88.80", &merchant.url),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert_eq!(created.json["out_trade_no"], "V1");
    assert!(created.json["qr_code"].is_string(), "{}", created.body);
    assert!(
        created.json.get("code").is_none(),
        "v3 has no gateway code on success"
    );

    // Before the scan the trade does not exist at the channel: a 400 with the ACQ code.
    let early = call(&sim, v3::PATH_QUERY, json!({ "out_trade_no": "V1" })).await;
    assert_eq!(early.status, 400);
    assert_eq!(early.json["code"], alipay::SUB_TRADE_NOT_EXIST);
    assert!(early.json["message"].is_string());

    // The same precreate again is the same answer; other terms are refused.
    let again = call(
        &sim,
        v3::PATH_PRECREATE,
        order("V1", "88.80", &merchant.url),
    )
    .await;
    assert_eq!(again.json["qr_code"], created.json["qr_code"]);
    let other = call(
        &sim,
        v3::PATH_PRECREATE,
        order("V1", "88.81", &merchant.url),
    )
    .await;
    assert_eq!(other.status, 400);
    assert_eq!(other.json["code"], alipay::SUB_CONTEXT_INCONSISTENT);

    sim.pay("V1").await;
    let received = merchant.wait_for(1).await;
    assert!(received[0].alipay_signature_valid());
    assert_eq!(received[0].param("out_trade_no"), "V1");
    let paid = call(&sim, v3::PATH_QUERY, json!({ "out_trade_no": "V1" })).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.json["trade_status"], alipay::TRADE_SUCCESS);
    assert_eq!(paid.json["total_amount"], "88.80");
    assert_eq!(
        paid.json["trade_no"],
        received[0].param("trade_no").as_str()
    );
    let refused = call(&sim, v3::PATH_CLOSE, json!({ "out_trade_no": "V1" })).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json["code"], alipay::SUB_TRADE_STATUS_ERROR);

    // A trade created over v3 is the same trade over /gateway.do, and closes either way.
    call(&sim, v3::PATH_PRECREATE, order("V2", "1.00", &merchant.url)).await;
    sim.control(reqwest::Method::POST, "/sim/trades/V2/scan", None)
        .await;
    let over_gateway = sim
        .alipay("alipay.trade.query", json!({ "out_trade_no": "V2" }), None)
        .await;
    assert_eq!(
        over_gateway.node["trade_status"],
        alipay::TRADE_WAIT_BUYER_PAY
    );
    let closed = call(&sim, v3::PATH_CLOSE, json!({ "out_trade_no": "V2" })).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    assert_eq!(closed.json["trade_no"], over_gateway.node["trade_no"]);
    let query = call(&sim, v3::PATH_QUERY, json!({ "out_trade_no": "V2" })).await;
    assert_eq!(query.json["trade_status"], alipay::TRADE_CLOSED);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_refuses_unauthenticated_or_ambiguous_requests_with_401_and_changes_nothing() {
    let sim = TestSim::start(1).await;
    let body = json!({ "out_trade_no": "V3", "total_amount": "1.00", "subject": "s" });
    let refused = |code: &'static str| {
        move |answer: V3Answer| {
            assert_eq!(answer.status, 401, "{}", answer.body);
            assert_eq!(answer.json["code"], code, "{}", answer.body);
            assert!(answer.signature_valid, "refusals are signed too");
        }
    };

    let mut forged = V3Request::signed(v3::PATH_PRECREATE, &body);
    forged.signature = Some("c2lnbmF0dXJl".to_owned());
    refused("invalid-signature")(forged.send(&sim).await);

    // The body signed is not the body sent.
    let mut tampered = V3Request::signed(v3::PATH_PRECREATE, &body);
    let authorization = tampered.authorization();
    tampered.body =
        json!({ "out_trade_no": "V3", "total_amount": "9.00", "subject": "s" }).to_string();
    tampered.signature = authorization
        .rsplit_once(",sign=")
        .map(|(_, signature)| signature.to_owned());
    refused("invalid-signature")(tampered.send(&sim).await);

    for minutes in [-6, 6] {
        let mut stale = V3Request::signed(v3::PATH_PRECREATE, &body);
        stale.timestamp_ms += minutes * 60 * 1000;
        refused("invalid-timestamp")(stale.send(&sim).await);
    }
    let mut within = V3Request::signed(v3::PATH_QUERY, &json!({ "out_trade_no": "V0" }));
    within.timestamp_ms -= 4 * 60 * 1000;
    assert_eq!(
        within.send(&sim).await.status,
        400,
        "4 minutes old is in time"
    );

    let mut other_app = V3Request::signed(v3::PATH_PRECREATE, &body);
    other_app.app_id = "2021000000000002";
    refused("invalid-app-id")(other_app.send(&sim).await);

    // A second authorization line, even a genuine one: which was verified would be up to
    // the reader.
    let mut twice = V3Request::signed(v3::PATH_PRECREATE, &body);
    twice.extra_headers = vec![("authorization", twice.authorization())];
    refused("invalid-authorization")(twice.send(&sim).await);

    // An auth field named twice.
    let request = V3Request::signed(v3::PATH_PRECREATE, &body);
    let repeated_field =
        request
            .authorization()
            .replacen(" app_id=", " app_id=2021000000000001,app_id=", 1);
    let answer = sim
        .client
        .post(format!("{}{}", sim.base, v3::PATH_PRECREATE))
        .header("authorization", repeated_field)
        .body(request.body.clone())
        .send()
        .await
        .expect("answers");
    assert_eq!(answer.status(), 401);

    // An app auth token is part of what is signed, and named once.
    let mut unsigned_token = V3Request::signed(v3::PATH_PRECREATE, &body);
    unsigned_token.app_auth_token = Some("202512BB0f1a");
    unsigned_token.sign_token = false;
    refused("invalid-signature")(unsigned_token.send(&sim).await);
    let mut two_tokens = V3Request::signed(v3::PATH_PRECREATE, &body);
    two_tokens.app_auth_token = Some("202512BB0f1a");
    two_tokens.extra_headers = vec![(v3::HEADER_APP_AUTH_TOKEN, "202512BB0f1a".to_owned())];
    refused("invalid-authorization")(two_tokens.send(&sim).await);

    let (status, trade) = sim
        .control(reqwest::Method::GET, "/sim/trades/V3", None)
        .await;
    assert_eq!(status, 404, "no refused request created the trade: {trade}");

    let mut signed_token = V3Request::signed(v3::PATH_PRECREATE, &body);
    signed_token.app_auth_token = Some("202512BB0f1a");
    let answer = signed_token.send(&sim).await;
    assert_eq!(
        answer.status, 200,
        "a signed token is accepted: {}",
        answer.body
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_refuses_a_body_with_a_repeated_key_or_bad_fields_with_400() {
    let sim = TestSim::start(1).await;
    let mut repeated = V3Request::signed(v3::PATH_PRECREATE, &json!({}));
    repeated.body =
        r#"{"out_trade_no":"V4","total_amount":"0.01","subject":"s","total_amount":"100.00"}"#
            .to_owned();
    let answer = repeated.send(&sim).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.json["code"], "invalid-parameter");

    let mut nested = V3Request::signed(v3::PATH_QUERY, &json!({}));
    nested.body = r#"{"out_trade_no":"V4","extend":{"a":1,"a":2}}"#.to_owned();
    assert_eq!(nested.send(&sim).await.status, 400);

    let bad_amount = call(
        &sim,
        v3::PATH_PRECREATE,
        json!({ "out_trade_no": "V4", "total_amount": "1e3", "subject": "s" }),
    )
    .await;
    assert_eq!(bad_amount.status, 400);
    assert_eq!(bad_amount.json["code"], "ACQ.INVALID_PARAMETER");
    let missing = call(&sim, v3::PATH_CLOSE, json!({})).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json["code"], "missing-parameter");
    let bad_url = call(
        &sim,
        v3::PATH_PRECREATE,
        json!({ "out_trade_no": "V4", "total_amount": "1.00", "subject": "s", "notify_url": 7 }),
    )
    .await;
    assert_eq!(bad_url.status, 400);

    let (status, _) = sim
        .control(reqwest::Method::GET, "/sim/trades/V4", None)
        .await;
    assert_eq!(status, 404);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v3_system_error_is_a_500_and_the_close_it_hid_is_seen_by_a_query() {
    let sim = TestSim::start(1).await;
    call(
        &sim,
        v3::PATH_PRECREATE,
        order("V5", "5.00", "http://127.0.0.1:9/n"),
    )
    .await;
    sim.control(reqwest::Method::POST, "/sim/trades/V5/scan", None)
        .await;
    sim.fail_next(json!({ "method": "alipay.trade.close", "code": "20000", "apply_anyway": true }))
        .await;
    let lost = call(&sim, v3::PATH_CLOSE, json!({ "out_trade_no": "V5" })).await;
    assert_eq!(lost.status, 500, "{}", lost.body);
    let query = call(&sim, v3::PATH_QUERY, json!({ "out_trade_no": "V5" })).await;
    assert_eq!(query.json["trade_status"], alipay::TRADE_CLOSED);

    sim.fail_next(json!({ "method": "alipay.trade.query", "code": "40004" }))
        .await;
    let failed = call(&sim, v3::PATH_QUERY, json!({ "out_trade_no": "V5" })).await;
    assert_eq!(failed.status, 500);
    assert_eq!(failed.json["code"], alipay::SUB_SYSTEM_ERROR);
    sim.stop().await;
}

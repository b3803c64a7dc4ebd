//! `/gateway.do`: precreate, query and close under GET and POST, signatures, reuse rules,
//! expiry, the retry schedule and the gateway's error answers.

use std::time::{Duration, Instant};

use mideng_channel::alipay;
use serde_json::json;

use crate::harness::{Merchant, TestSim, notify_state};

const PRECREATE: &str = "alipay.trade.precreate";
const QUERY: &str = "alipay.trade.query";
const CLOSE: &str = "alipay.trade.close";

fn order(out_trade_no: &str, total_amount: &str) -> serde_json::Value {
    json!({ "out_trade_no": out_trade_no, "total_amount": total_amount, "subject": "订单 1001" })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precreate_query_and_close_round_trip_with_signed_answers() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let created = sim
        .alipay(PRECREATE, order("A1", "460.00"), Some(&merchant.url))
        .await;
    assert_eq!(created.code(), alipay::CODE_SUCCESS, "{}", created.body);
    assert_eq!(created.node["out_trade_no"], "A1");
    let qr_code = created.node["qr_code"]
        .as_str()
        .expect("qr_code")
        .to_owned();

    // Before the scan the trade does not exist at the channel.
    let query = sim
        .alipay(QUERY, json!({ "out_trade_no": "A1" }), None)
        .await;
    assert_eq!(query.code(), alipay::CODE_BUSINESS_FAILED);
    assert_eq!(query.sub_code(), alipay::SUB_TRADE_NOT_EXIST);
    let close = sim
        .alipay(CLOSE, json!({ "out_trade_no": "A1" }), None)
        .await;
    assert_eq!(close.sub_code(), alipay::SUB_TRADE_NOT_EXIST);

    // The same precreate again is the same answer.
    let again = sim
        .alipay(PRECREATE, order("A1", "460.00"), Some(&merchant.url))
        .await;
    assert_eq!(again.node["qr_code"], qr_code.as_str());
    let other = sim
        .alipay(PRECREATE, order("A1", "461.00"), Some(&merchant.url))
        .await;
    assert_eq!(other.sub_code(), alipay::SUB_CONTEXT_INCONSISTENT);

    let (status, _) = sim
        .control(reqwest::Method::POST, "/sim/trades/A1/scan", None)
        .await;
    assert_eq!(status, 200);
    let query = sim
        .alipay(QUERY, json!({ "out_trade_no": "A1" }), None)
        .await;
    assert_eq!(query.code(), alipay::CODE_SUCCESS, "{}", query.body);
    assert_eq!(query.node["trade_status"], alipay::TRADE_WAIT_BUYER_PAY);
    assert_eq!(query.node["total_amount"], "460.00");
    let trade_no = query.node["trade_no"]
        .as_str()
        .expect("trade_no")
        .to_owned();
    assert_eq!(trade_no.len(), 28);
    let by_trade_no = sim
        .alipay(QUERY, json!({ "trade_no": trade_no }), None)
        .await;
    assert_eq!(by_trade_no.node["out_trade_no"], "A1");

    let close = sim
        .alipay(CLOSE, json!({ "out_trade_no": "A1" }), None)
        .await;
    assert_eq!(close.code(), alipay::CODE_SUCCESS, "{}", close.body);
    assert_eq!(close.node["trade_no"], trade_no.as_str());
    let query = sim
        .alipay(QUERY, json!({ "trade_no": trade_no }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_CLOSED);
    let close_again = sim
        .alipay(CLOSE, json!({ "out_trade_no": "A1" }), None)
        .await;
    assert_eq!(close_again.sub_code(), alipay::SUB_TRADE_STATUS_ERROR);
    let reuse = sim
        .alipay(PRECREATE, order("A1", "460.00"), Some(&merchant.url))
        .await;
    assert_eq!(reuse.sub_code(), alipay::SUB_TRADE_HAS_CLOSE);

    // The close is notified, signed by the gateway.
    let received = merchant.wait_for(1).await;
    assert!(received[0].alipay_signature_valid());
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_CLOSED);
    assert_eq!(received[0].param("trade_no"), trade_no);
    assert_eq!(received[0].param("app_id"), crate::harness::ALIPAY_APP_ID);
    assert_eq!(received[0].param("notify_type"), "trade_status_sync");
    assert!(!received[0].param("gmt_close").is_empty());
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_is_notified_queried_charged_once_and_cannot_be_closed() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    sim.alipay(PRECREATE, order("A2", "0.01"), Some(&merchant.url))
        .await;
    let paid = sim.pay("A2").await;
    assert_eq!(paid["outcome"], "paid");
    assert_eq!(sim.pay("A2").await["outcome"], "already-paid");

    let received = merchant.wait_for(1).await;
    let notify = &received[0];
    assert!(notify.alipay_signature_valid());
    assert_eq!(notify.param("trade_status"), alipay::TRADE_SUCCESS);
    assert_eq!(notify.param("out_trade_no"), "A2");
    assert_eq!(notify.param("total_amount"), "0.01");
    assert_eq!(notify.param("sign_type"), "RSA2");
    assert!(!notify.param("notify_id").is_empty());
    assert!(!notify.param("gmt_payment").is_empty());
    // The fields the real channel adds to a payment's notify.
    assert_eq!(notify.param("seller_id"), crate::harness::ALIPAY_SELLER_ID);
    assert_eq!(notify.param("auth_app_id"), crate::harness::ALIPAY_APP_ID);
    assert_eq!(notify.param("invoice_amount"), "0.01");
    assert_eq!(notify.param("point_amount"), "0.00");
    assert!(
        notify.param("buyer_logon_id").contains("****"),
        "the buyer's account is masked"
    );
    assert!(!notify.param("gmt_create").is_empty());
    let fund_bills: serde_json::Value =
        serde_json::from_str(&notify.param("fund_bill_list")).expect("fund_bill_list is JSON");
    assert_eq!(
        fund_bills,
        json!([{ "amount": "0.01", "fundChannel": "ALIPAYACCOUNT" }])
    );

    let query = sim
        .alipay(QUERY, json!({ "out_trade_no": "A2" }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_SUCCESS);
    assert_eq!(query.node["buyer_pay_amount"], "0.01");
    assert!(query.node["send_pay_date"].is_string());
    assert_eq!(query.node["trade_no"], notify.param("trade_no").as_str());

    let close = sim
        .alipay(CLOSE, json!({ "out_trade_no": "A2" }), None)
        .await;
    assert_eq!(close.sub_code(), alipay::SUB_TRADE_STATUS_ERROR);
    let reuse = sim
        .alipay(PRECREATE, order("A2", "0.01"), Some(&merchant.url))
        .await;
    assert_eq!(reuse.sub_code(), alipay::SUB_TRADE_HAS_SUCCESS);

    let trade = sim
        .wait_for_trade("A2", |trade| notify_state(trade, 0) == "acknowledged")
        .await;
    assert_eq!(trade["notifies"][0]["deliveries"][0]["answer"], "success");
    let (_, ledger) = sim.control(reqwest::Method::GET, "/sim/ledger", None).await;
    assert_eq!(ledger["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(ledger["charged_fen"], 1);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_refuses_bad_calls_with_its_documented_codes() {
    let sim = TestSim::start(1).await;
    let form = TestSim::alipay_form(PRECREATE, &order("A3", "1.00"), None);

    // A tampered signature.
    let tampered = form.replace("1.00", "2.00");
    let answer = sim.alipay_raw(PRECREATE, tampered).await;
    assert_eq!(answer.code(), alipay::CODE_ILLEGAL_PARAMETER);
    assert_eq!(answer.sub_code(), alipay::SUB_INVALID_SIGNATURE);
    assert!(answer.signature_valid, "error answers are signed too");

    // No signature at all.
    let unsigned: Vec<(String, String)> =
        serde_urlencoded::from_str::<Vec<(String, String)>>(&form)
            .expect("form")
            .into_iter()
            .filter(|(key, _)| key != "sign")
            .collect();
    let answer = sim
        .alipay_raw(
            PRECREATE,
            serde_urlencoded::to_string(&unsigned).expect("form"),
        )
        .await;
    assert_eq!(answer.code(), alipay::CODE_MISSING_PARAMETER);
    assert_eq!(answer.sub_code(), "isv.missing-signature");

    // An unknown method, before anything else.
    let answer = sim
        .alipay_raw(
            "alipay.trade.pay",
            TestSim::alipay_form("alipay.trade.pay", &order("A3", "1.00"), None),
        )
        .await;
    assert!(answer.body.contains("error_response"), "{}", answer.body);
    assert_eq!(answer.sub_code(), "isv.invalid-method");

    // Signed, but with bad business content.
    let answer = sim.alipay(PRECREATE, order("A3", "1.001"), None).await;
    assert_eq!(answer.code(), alipay::CODE_BUSINESS_FAILED);
    assert_eq!(answer.sub_code(), "ACQ.INVALID_PARAMETER");
    let answer = sim
        .alipay(
            PRECREATE,
            json!({ "total_amount": "1.00", "subject": "x" }),
            None,
        )
        .await;
    assert_eq!(answer.code(), alipay::CODE_MISSING_PARAMETER);
    let answer = sim.alipay(QUERY, json!({}), None).await;
    assert_eq!(answer.code(), alipay::CODE_MISSING_PARAMETER);
    let answer = sim
        .alipay(
            PRECREATE,
            json!({ "out_trade_no": "A3", "total_amount": "1.00", "subject": "x", "timeout_express": "16d" }),
            None,
        )
        .await;
    assert_eq!(answer.sub_code(), "ACQ.INVALID_PARAMETER");

    // Garbage, and a body over the limit.
    let answer = sim.alipay_raw(PRECREATE, "%%%&&&==".to_owned()).await;
    assert!(answer.code().starts_with("400"), "{}", answer.body);
    let answer = sim
        .alipay_raw(
            PRECREATE,
            format!("{form}&padding={}", "x".repeat(70 * 1024)),
        )
        .await;
    assert_eq!(answer.code(), alipay::CODE_ILLEGAL_PARAMETER);
    sim.stop().await;
}

/// The parameters of a signed form, split into those named in `in_query` (the query string) and
/// the rest (the body).
fn split_form(form: &str, in_query: &[&str]) -> (String, String) {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(form).expect("form");
    let (query, body): (Vec<_>, Vec<_>) = pairs
        .into_iter()
        .partition(|(key, _)| in_query.contains(&key.as_str()));
    (
        serde_urlencoded::to_string(&query).expect("query"),
        serde_urlencoded::to_string(&body).expect("body"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_get_and_post_with_parameters_in_the_query_the_body_or_both() {
    let sim = TestSim::start(1).await;

    // python-alipay-sdk: a GET with every signed parameter in the query string.
    let form = TestSim::alipay_form(PRECREATE, &order("G1", "1.00"), None);
    let answer = sim
        .alipay_sent(reqwest::Method::GET, PRECREATE, &form, String::new())
        .await;
    assert!(answer.signature_valid, "{}", answer.body);
    assert_eq!(answer.code(), alipay::CODE_SUCCESS, "{}", answer.body);
    assert_eq!(answer.node["out_trade_no"], "G1");

    // The Node SDK: common parameters in the query string, biz_content in the body.
    let form = TestSim::alipay_form(PRECREATE, &order("G2", "2.00"), None);
    let common = [
        "app_id",
        "method",
        "format",
        "charset",
        "sign_type",
        "timestamp",
        "version",
        "sign",
    ];
    let (query, body) = split_form(&form, &common);
    let answer = sim
        .alipay_sent(reqwest::Method::POST, PRECREATE, &query, body.clone())
        .await;
    assert_eq!(answer.code(), alipay::CODE_SUCCESS, "{}", answer.body);
    assert_eq!(answer.node["out_trade_no"], "G2");

    // The same split under GET is served alike: the body is read whatever the verb.
    let answer = sim
        .alipay_sent(reqwest::Method::GET, PRECREATE, &query, body)
        .await;
    assert_eq!(answer.code(), alipay::CODE_SUCCESS, "{}", answer.body);
    assert_eq!(answer.node["out_trade_no"], "G2");

    // A query string and a body that each carry biz_content are ambiguous, even when the
    // signature covers one of them: refused before anything is created.
    let signed = TestSim::alipay_form(PRECREATE, &order("G3", "3.00"), None);
    let (query, _) = split_form(&signed, &common);
    let (_, other_body) = split_form(
        &TestSim::alipay_form(PRECREATE, &order("G4", "4.00"), None),
        &common,
    );
    let answer = sim
        .alipay_sent(
            reqwest::Method::POST,
            PRECREATE,
            &signed,
            other_body.clone(),
        )
        .await;
    assert!(answer.signature_valid, "{}", answer.body);
    assert_eq!(
        answer.code(),
        alipay::CODE_ILLEGAL_PARAMETER,
        "{}",
        answer.body
    );
    let answer = sim
        .alipay_sent(
            reqwest::Method::GET,
            PRECREATE,
            &format!("{query}&{other_body}"),
            other_body,
        )
        .await;
    assert_eq!(
        answer.code(),
        alipay::CODE_ILLEGAL_PARAMETER,
        "{}",
        answer.body
    );
    let (status, _) = sim
        .control(reqwest::Method::GET, "/sim/trades/G3", None)
        .await;
    assert_eq!(status, 404, "the refused call created nothing");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_starts_at_the_scan_and_an_expired_trade_closes_with_a_notify() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let biz = json!({ "out_trade_no": "A4", "total_amount": "9.99", "subject": "x", "timeout_express": "15m" });
    sim.alipay(PRECREATE, biz, Some(&merchant.url)).await;
    // An hour before the scan does not count.
    sim.advance(3600).await;
    sim.control(reqwest::Method::POST, "/sim/trades/A4/scan", None)
        .await;
    sim.advance(14 * 60).await;
    let query = sim
        .alipay(QUERY, json!({ "out_trade_no": "A4" }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_WAIT_BUYER_PAY);
    sim.advance(61).await;
    let query = sim
        .alipay(QUERY, json!({ "out_trade_no": "A4" }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_CLOSED);
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_CLOSED);
    let trade = sim.trade("A4").await;
    assert_eq!(trade["close_cause"], "expired");
    let (status, problem) = sim
        .control(reqwest::Method::POST, "/sim/trades/A4/pay", None)
        .await;
    assert_eq!(status, 409);
    assert_eq!(problem["code"], "trade-closed");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_clock_expires_trades_without_any_request() {
    // One real second is an hour: a one-minute timeout passes in about 17 ms.
    let sim = TestSim::start(3600).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let biz = json!({ "out_trade_no": "A5", "total_amount": "1.00", "subject": "x", "timeout_express": "1m" });
    sim.alipay(PRECREATE, biz, Some(&merchant.url)).await;
    sim.control(reqwest::Method::POST, "/sim/trades/A5/scan", None)
        .await;
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_CLOSED);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_notify_is_delivered_eight_times_with_one_notify_id() {
    // 20 000 channel seconds per real second: Alipay's 24.4-hour schedule takes about 4.4 s.
    let sim = TestSim::start(20_000).await;
    let merchant = Merchant::start(|_| (200, alipay::NOTIFY_NACK), Duration::ZERO).await;
    let started = Instant::now();
    sim.alipay(PRECREATE, order("A6", "12.34"), Some(&merchant.url))
        .await;
    sim.pay("A6").await;
    let trade = sim
        .wait_for_trade("A6", |trade| notify_state(trade, 0) == "exhausted")
        .await;
    let elapsed = started.elapsed();
    let received = merchant.received();
    assert_eq!(received.len(), 8);
    let notify_id = received[0].param("notify_id");
    for notify in &received {
        assert_eq!(notify.param("notify_id"), notify_id);
        assert!(notify.alipay_signature_valid());
    }
    let notify_times: std::collections::BTreeSet<String> = received
        .iter()
        .map(|notify| notify.param("notify_time"))
        .collect();
    assert_eq!(
        notify_times.len(),
        8,
        "a fresh notify_time on every delivery"
    );
    // Each delivery went out no earlier than its slot in the schedule.
    let deliveries = trade["notifies"][0]["deliveries"]
        .as_array()
        .expect("deliveries");
    assert_eq!(deliveries.len(), 8);
    let paid_at_ms = trade["paid_at_ms"].as_i64().expect("paid_at_ms");
    for (delivery, offset_seconds) in deliveries.iter().zip(alipay::NOTIFY_SCHEDULE_SECS) {
        let offset_ms = delivery["at_ms"].as_i64().expect("at_ms") - paid_at_ms;
        assert!(
            offset_ms >= i64::try_from(offset_seconds * 1000).expect("fits"),
            "delivery at +{offset_ms} ms, scheduled at +{offset_seconds} s"
        );
        assert_eq!(delivery["answer"], "failure");
    }
    eprintln!("Alipay's full schedule took {elapsed:?} of real time");
    sim.stop().await;
}

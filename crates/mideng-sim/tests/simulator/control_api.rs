//! The control API: races between close and pay, fail-next with unknown outcomes, refunds and
//! the ledger, the clock, and bad input.

use mideng_channel::{alipay, wechat};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Merchant, TestSim, WECHAT_APPID, WECHAT_MCHID, notify_state, rfc3339_after};

/// Concurrent attempts of each side per trade.
const RACERS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closes_racing_payments_end_in_exactly_one_outcome() {
    let sim = TestSim::start(1).await;
    let trades = ["RACE1", "RACE2", "RACE3", "RACE4"];
    let mut forms = Vec::new();
    for out_trade_no in trades {
        let answer = sim
            .alipay(
                "alipay.trade.precreate",
                json!({ "out_trade_no": out_trade_no, "total_amount": "3.00", "subject": "x" }),
                None,
            )
            .await;
        assert_eq!(answer.code(), alipay::CODE_SUCCESS);
        sim.control(
            Method::POST,
            &format!("/sim/trades/{out_trade_no}/scan"),
            None,
        )
        .await;
        // Sign before the race so that the racers start together.
        let form = TestSim::alipay_form(
            "alipay.trade.close",
            &json!({ "out_trade_no": out_trade_no }),
            None,
        );
        forms.push((out_trade_no, form));
    }
    let sim = std::sync::Arc::new(sim);
    let mut racers = tokio::task::JoinSet::new();
    for (out_trade_no, form) in &forms {
        for _ in 0..RACERS {
            let (sim_for_close, form) = (std::sync::Arc::clone(&sim), form.clone());
            let closed_trade = (*out_trade_no).to_owned();
            racers.spawn(async move {
                let answer = sim_for_close.alipay_raw("alipay.trade.close", form).await;
                (closed_trade, "close", answer.code() == alipay::CODE_SUCCESS)
            });
            let sim_for_pay = std::sync::Arc::clone(&sim);
            let paid_trade = (*out_trade_no).to_owned();
            racers.spawn(async move {
                let (_, body) = sim_for_pay
                    .control(Method::POST, &format!("/sim/trades/{paid_trade}/pay"), None)
                    .await;
                (paid_trade, "pay", body["outcome"] == "paid")
            });
        }
    }
    let mut wins: Vec<(String, &str)> = Vec::new();
    while let Some(result) = racers.join_next().await {
        let (out_trade_no, side, won) = result.expect("racer");
        if won {
            wins.push((out_trade_no, side));
        }
    }
    let (_, ledger) = sim.control(Method::GET, "/sim/ledger", None).await;
    for out_trade_no in trades {
        let winners: Vec<&str> = wins
            .iter()
            .filter(|(trade, _)| trade == out_trade_no)
            .map(|(_, side)| *side)
            .collect();
        assert_eq!(
            winners.len(),
            1,
            "{out_trade_no}: exactly one winner, got {winners:?}"
        );
        let trade = sim.trade(out_trade_no).await;
        let charges = ledger["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|entry| entry["out_trade_no"] == out_trade_no)
            .count();
        match winners[0] {
            "pay" => {
                assert_eq!(trade["status"], "PAID");
                assert_eq!(charges, 1);
            }
            _ => {
                assert_eq!(trade["status"], "CLOSED");
                assert_eq!(charges, 0);
            }
        }
    }
    if let Ok(sim) = std::sync::Arc::try_unwrap(sim) {
        sim.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wechat_close_racing_payments_never_charges_a_closed_order() {
    let sim = std::sync::Arc::new(TestSim::start(1).await);
    let order = json!({
        "appid": WECHAT_APPID, "mchid": WECHAT_MCHID, "description": "x", "out_trade_no": "WRACE",
        "time_expire": rfc3339_after(&sim, 3600), "notify_url": "http://127.0.0.1:1/notify",
        "amount": { "total": 300 },
    });
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    let close_path = format!("{}WRACE/close", wechat::PATH_OUT_TRADE_NO);
    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..RACERS {
        let (for_close, for_pay) = (std::sync::Arc::clone(&sim), std::sync::Arc::clone(&sim));
        let close_path = close_path.clone();
        racers.spawn(async move {
            let answer = for_close
                .wechat(
                    Method::POST,
                    &close_path,
                    Some(&json!({ "mchid": WECHAT_MCHID })),
                )
                .await;
            ("close", answer.status)
        });
        racers.spawn(async move {
            let (status, body) = for_pay
                .control(Method::POST, "/sim/trades/WRACE/pay", None)
                .await;
            let paid = u16::from(body["outcome"] == "paid");
            ("pay", if status == 200 { 200 + paid } else { status })
        });
    }
    let mut outcomes = Vec::new();
    while let Some(result) = racers.join_next().await {
        outcomes.push(result.expect("racer"));
    }
    let paid = outcomes
        .iter()
        .filter(|outcome| **outcome == ("pay", 201))
        .count();
    let trade = sim.trade("WRACE").await;
    if paid == 1 {
        assert_eq!(trade["status"], "PAID");
        assert!(outcomes.iter().all(|outcome| *outcome != ("pay", 409)));
    } else {
        assert_eq!(paid, 0);
        assert_eq!(trade["status"], "CLOSED");
        assert!(
            outcomes
                .iter()
                .all(|(side, status)| *side == "close" || *status == 409)
        );
        assert!(
            outcomes
                .iter()
                .all(|(side, status)| *side == "pay" || *status == 204)
        );
    }
    let (_, ledger) = sim.control(Method::GET, "/sim/ledger", None).await;
    assert_eq!(ledger["entries"].as_array().map(Vec::len), Some(paid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_next_can_apply_the_change_and_lose_the_answer() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let biz = json!({ "out_trade_no": "F1", "total_amount": "1.00", "subject": "x" });
    sim.alipay("alipay.trade.precreate", biz, Some(&merchant.url))
        .await;
    sim.control(Method::POST, "/sim/trades/F1/scan", None).await;

    // Close applied, answer lost.
    sim.fail_next(json!({ "method": "alipay.trade.close", "code": 20000, "apply_anyway": true }))
        .await;
    let close = sim
        .alipay("alipay.trade.close", json!({ "out_trade_no": "F1" }), None)
        .await;
    assert_eq!(close.code(), alipay::CODE_UNKNOWN);
    assert_eq!(close.sub_code(), alipay::SUB_UNKNOWN_ERROR);
    let query = sim
        .alipay("alipay.trade.query", json!({ "out_trade_no": "F1" }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_CLOSED);
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_CLOSED);
    let close = sim
        .alipay("alipay.trade.close", json!({ "out_trade_no": "F1" }), None)
        .await;
    assert_eq!(
        close.sub_code(),
        alipay::SUB_TRADE_STATUS_ERROR,
        "the fault was used up"
    );

    // A failed query.
    sim.fail_next(json!({ "method": "alipay.trade.query", "code": "ACQ.SYSTEM_ERROR" }))
        .await;
    let query = sim
        .alipay("alipay.trade.query", json!({ "out_trade_no": "F1" }), None)
        .await;
    assert_eq!(query.code(), alipay::CODE_BUSINESS_FAILED);
    assert_eq!(query.sub_code(), alipay::SUB_SYSTEM_ERROR);

    // A precreate applied, answer lost: the buyer can still scan it.
    sim.fail_next(json!({ "method": "alipay.trade.precreate", "apply_anyway": true }))
        .await;
    let biz = json!({ "out_trade_no": "F2", "total_amount": "1.00", "subject": "x" });
    let created = sim.alipay("alipay.trade.precreate", biz, None).await;
    assert_eq!(created.code(), alipay::CODE_UNKNOWN);
    let (status, _) = sim.control(Method::POST, "/sim/trades/F2/scan", None).await;
    assert_eq!(status, 200);

    // WeChat Pay: a close that failed without applying, a create applied.
    let order = json!({
        "appid": WECHAT_APPID, "mchid": WECHAT_MCHID, "description": "x", "out_trade_no": "F3",
        "time_expire": rfc3339_after(&sim, 3600), "notify_url": "http://127.0.0.1:1/notify",
        "amount": { "total": 100, "currency": "CNY" },
    });
    sim.fail_next(json!({ "method": "wechat.native", "apply_anyway": true }))
        .await;
    let created = sim
        .wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    assert_eq!(created.status, 500);
    assert_eq!(created.json["code"], "SYSTEM_ERROR");
    sim.fail_next(
        json!({ "method": "wechat.close", "code": "SYSTEM_ERROR", "apply_anyway": false }),
    )
    .await;
    let close_path = format!("{}F3/close", wechat::PATH_OUT_TRADE_NO);
    let close = sim
        .wechat(
            Method::POST,
            &close_path,
            Some(&json!({ "mchid": WECHAT_MCHID })),
        )
        .await;
    assert_eq!(close.status, 500);
    let query_path = format!("{}F3?mchid={WECHAT_MCHID}", wechat::PATH_OUT_TRADE_NO);
    let query = sim.wechat(Method::GET, &query_path, None).await;
    assert_eq!(query.json["trade_state"], wechat::STATE_NOTPAY);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_and_refund_are_notified_and_ledgered() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let biz = json!({ "out_trade_no": "M1", "total_amount": "88.00", "subject": "x" });
    sim.alipay("alipay.trade.precreate", biz, Some(&merchant.url))
        .await;
    let (status, problem) = sim
        .control(Method::POST, "/sim/trades/M1/refund", None)
        .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("trade-not-paid"))
    );
    sim.pay("M1").await;
    merchant.wait_for(1).await;
    let (status, finished) = sim
        .control(Method::POST, "/sim/trades/M1/finish", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(finished["trade"]["channel_status"], alipay::TRADE_FINISHED);
    // Notifies of one trade may overtake each other; wait so the order below is fixed.
    merchant.wait_for(2).await;
    let (status, refunded) = sim
        .control(Method::POST, "/sim/trades/M1/refund", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(refunded["outcome"], "refunded");
    let (_, again) = sim
        .control(Method::POST, "/sim/trades/M1/refund", None)
        .await;
    assert_eq!(again["outcome"], "already-refunded");
    let received = merchant.wait_for(3).await;
    let statuses: Vec<String> = received
        .iter()
        .map(|notify| notify.param("trade_status"))
        .collect();
    assert_eq!(
        statuses,
        [
            alipay::TRADE_SUCCESS,
            alipay::TRADE_FINISHED,
            alipay::TRADE_CLOSED
        ]
    );
    assert_eq!(received[2].param("refund_fee"), "88.00");
    let query = sim
        .alipay("alipay.trade.query", json!({ "out_trade_no": "M1" }), None)
        .await;
    assert_eq!(query.node["trade_status"], alipay::TRADE_CLOSED);
    let (_, ledger) = sim.control(Method::GET, "/sim/ledger", None).await;
    assert_eq!(ledger["charged_fen"], 8800);
    assert_eq!(ledger["refunded_fen"], 8800);
    assert_eq!(ledger["net_fen"], 0);
    let kinds: Vec<&str> = ledger["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|entry| entry["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["charge", "refund"]);
    let trade = sim
        .wait_for_trade("M1", |trade| notify_state(trade, 2) == "acknowledged")
        .await;
    assert_eq!(trade["status"], "REFUNDED");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_runs_at_its_speed_and_advances_on_request() {
    let sim = TestSim::start(600).await;
    let (status, clock) = sim.control(Method::GET, "/sim/clock", None).await;
    assert_eq!(status, 200);
    assert_eq!(clock["speed"], 600);
    let before = clock["now_ms"].as_i64().expect("now_ms");
    let (status, after) = sim
        .control(
            Method::POST,
            "/sim/clock/advance",
            Some(json!({ "seconds": 86_400 })),
        )
        .await;
    assert_eq!(status, 200);
    assert!(after["now_ms"].as_i64().expect("now_ms") - before >= 86_400_000);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_control_input_gets_problem_json_never_a_server_error() {
    let sim = TestSim::start(1).await;
    let expect_problem = |status: u16, body: &Value, want_status: u16, want_code: &str| {
        assert_eq!(status, want_status, "{body}");
        assert_eq!(body["code"], want_code, "{body}");
    };
    let (status, body) = sim.control(Method::GET, "/sim/trades/NOPE", None).await;
    expect_problem(status, &body, 404, "trade-not-found");
    let (status, body) = sim
        .control(Method::POST, "/sim/trades/NOPE/pay", None)
        .await;
    expect_problem(status, &body, 404, "trade-not-found");
    let (status, body) = sim.control(Method::GET, "/sim/trades/a%2Fb", None).await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(
            Method::POST,
            "/sim/clock/advance",
            Some(json!({ "seconds": -5 })),
        )
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(
            Method::POST,
            "/sim/clock/advance",
            Some(json!({ "seconds": 1_000_000_000 })),
        )
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(Method::POST, "/sim/clock/advance", Some(json!("soon")))
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(
            Method::PUT,
            "/sim/notify-policy",
            Some(json!({ "mode": "explode" })),
        )
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(
            Method::POST,
            "/sim/fail-next",
            Some(json!({ "method": "alipay.trade.pay" })),
        )
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim
        .control(
            Method::POST,
            "/sim/fail-next",
            Some(json!({ "method": "wechat.close", "code": 20000 })),
        )
        .await;
    expect_problem(status, &body, 400, "invalid-request");
    let (status, body) = sim.control(Method::GET, "/sim/no-such-thing", None).await;
    expect_problem(status, &body, 404, "not-found");

    let response = sim
        .client
        .post(format!("{}/sim/clock/advance", sim.base))
        .body(vec![b' '; 70 * 1024])
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), 413);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|value| value.to_str().ok()),
        Some("application/problem+json")
    );

    // A WeChat Pay order cannot be finished.
    let order = json!({
        "appid": WECHAT_APPID, "mchid": WECHAT_MCHID, "description": "x", "out_trade_no": "B1",
        "notify_url": "http://127.0.0.1:1/notify", "amount": { "total": 100 },
    });
    sim.wechat(Method::POST, wechat::PATH_NATIVE, Some(&order))
        .await;
    sim.pay("B1").await;
    let (status, body) = sim
        .control(Method::POST, "/sim/trades/B1/finish", None)
        .await;
    expect_problem(status, &body, 409, "not-supported");
    sim.stop().await;
}

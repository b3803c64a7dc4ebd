//! `PUT /sim/notify-policy`: drop, duplicate, concurrent, delay, reorder and stop_after, global
//! and per trade.

use std::time::Duration;

use mideng_channel::alipay;
use serde_json::json;

use crate::harness::{Merchant, TestSim, notify_state};

async fn precreate(sim: &TestSim, out_trade_no: &str, notify_url: &str) {
    let answer = sim
        .alipay(
            "alipay.trade.precreate",
            json!({ "out_trade_no": out_trade_no, "total_amount": "5.00", "subject": "x" }),
            Some(notify_url),
        )
        .await;
    assert_eq!(answer.code(), alipay::CODE_SUCCESS, "{}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_loses_notifies_for_good_unless_the_trade_has_its_own_policy() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    sim.set_policy(json!({ "mode": "drop" })).await;
    sim.set_policy(json!({ "mode": "normal", "out_trade_no": "D1" }))
        .await;
    precreate(&sim, "D1", &merchant.url).await;
    precreate(&sim, "D2", &merchant.url).await;
    sim.pay("D2").await;
    sim.pay("D1").await;
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("out_trade_no"), "D1");
    sim.advance(2 * 24 * 3600).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(merchant.received().len(), 1);
    let dropped = sim.trade("D2").await;
    assert_eq!(notify_state(&dropped, 0), "dropped");
    assert_eq!(dropped["notifies"][0]["deliveries_made"], 0);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_sends_every_delivery_twice_one_after_the_other() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::start(|_| (200, alipay::NOTIFY_ACK), Duration::from_millis(100)).await;
    sim.set_policy(json!({ "mode": "duplicate", "out_trade_no": "U1" }))
        .await;
    precreate(&sim, "U1", &merchant.url).await;
    sim.pay("U1").await;
    let received = merchant.wait_for(2).await;
    assert_eq!(
        received[0].param("notify_id"),
        received[1].param("notify_id")
    );
    assert_eq!(merchant.in_flight_max(), 1, "in sequence");
    let trade = sim
        .wait_for_trade("U1", |trade| notify_state(trade, 0) == "acknowledged")
        .await;
    let copies: Vec<i64> = trade["notifies"][0]["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|delivery| delivery["copy"].as_i64().expect("copy"))
        .collect();
    assert_eq!(copies, [1, 2]);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_two_copies_at_the_same_time() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::start(|_| (200, alipay::NOTIFY_ACK), Duration::from_millis(500)).await;
    sim.set_policy(json!({ "mode": "concurrent" })).await;
    precreate(&sim, "C1", &merchant.url).await;
    sim.pay("C1").await;
    let received = merchant.wait_for(2).await;
    assert_eq!(
        received[0].param("notify_id"),
        received[1].param("notify_id")
    );
    sim.wait_for_trade("C1", |trade| notify_state(trade, 0) == "acknowledged")
        .await;
    assert_eq!(
        merchant.in_flight_max(),
        2,
        "both copies were in flight together"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_holds_the_first_delivery_on_the_channel_clock() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    sim.set_policy(json!({ "mode": "delay", "delay_seconds": 600 }))
        .await;
    precreate(&sim, "L1", &merchant.url).await;
    sim.pay("L1").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(merchant.received().is_empty(), "held");
    let trade = sim.trade("L1").await;
    let paid_at_ms = trade["paid_at_ms"].as_i64().expect("paid_at_ms");
    assert_eq!(
        trade["notifies"][0]["next_delivery_at_ms"].as_i64(),
        Some(paid_at_ms + 600_000)
    );
    sim.advance(601).await;
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_SUCCESS);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_after_ends_the_retries_early() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::start(|_| (200, alipay::NOTIFY_NACK), Duration::ZERO).await;
    sim.set_policy(json!({ "mode": "normal", "out_trade_no": "S1", "stop_after": 3 }))
        .await;
    precreate(&sim, "S1", &merchant.url).await;
    sim.pay("S1").await;
    sim.advance(2 * 24 * 3600).await;
    let trade = sim
        .wait_for_trade("S1", |trade| notify_state(trade, 0) == "stopped")
        .await;
    assert_eq!(trade["notifies"][0]["deliveries_made"], 3);
    assert_eq!(merchant.received().len(), 3);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorder_lets_a_later_notify_overtake_an_earlier_one() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    sim.set_policy(json!({ "mode": "reorder", "out_trade_no": "R1", "delay_seconds": 120 }))
        .await;
    precreate(&sim, "R1", &merchant.url).await;
    sim.pay("R1").await;
    let (status, refunded) = sim
        .control(reqwest::Method::POST, "/sim/trades/R1/refund", None)
        .await;
    assert_eq!(status, 200, "{refunded}");
    let received = merchant.wait_for(1).await;
    assert_eq!(received[0].param("trade_status"), alipay::TRADE_CLOSED);
    assert_eq!(received[0].param("refund_fee"), "5.00");
    sim.advance(121).await;
    let received = merchant.wait_for(2).await;
    assert_eq!(received[1].param("trade_status"), alipay::TRADE_SUCCESS);
    sim.stop().await;
}

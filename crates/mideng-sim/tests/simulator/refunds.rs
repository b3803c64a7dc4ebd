//! Refunds through the service's channel adapters against the simulator: partial refunds that
//! add up to the payment and no further, one refund per number however often it is asked for
//! (after a lost answer, or by concurrent duplicates), WeChat Pay's PROCESSING that ends
//! SUCCESS, ABNORMAL or CLOSED on the channel clock with a `REFUND.*` notify the adapter
//! verifies, and Alipay over both of its APIs.

use mideng_channel::adapter::alipay::AlipayApi;
use mideng_channel::adapter::{
    Channel, ChannelError, CreateTrade, NotifiedState, Refund, RefundState, RefundTrade, TradeState,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::adapters::{alipay_over, raw, trade, wechat};
use crate::harness::{ALIPAY_SELLER_ID, Merchant, Received, TestSim, wall_clock_ms};

/// The amount of every trade here, in fen (`adapters::trade`).
const TOTAL_FEN: i64 = 46000;

fn refund(out_trade_no: &str, out_refund_no: &str, refund_fen: i64) -> RefundTrade {
    RefundTrade {
        out_trade_no: out_trade_no.to_owned(),
        out_refund_no: out_refund_no.to_owned(),
        refund_fen,
        total_fen: TOTAL_FEN,
        reason: "商品缺货".to_owned(),
    }
}

/// A trade whose channel expiry is far beyond any clock advance or fast clock of a test.
fn long_lived_trade(sim: &TestSim, out_trade_no: &str) -> CreateTrade {
    CreateTrade {
        expires_at_ms: sim.simulator.now_ms() + 10 * 24 * 3600 * 1000,
        ..trade(out_trade_no)
    }
}

fn rejected_with(result: &Result<RefundState, ChannelError>, wanted: &str) -> bool {
    matches!(result, Err(ChannelError::Rejected { sub_code, .. }) if sub_code == wanted)
}

fn succeeded_with(state: &RefundState, fen: i64) -> bool {
    matches!(
        state,
        RefundState::Succeeded(Refund { refund_fen, channel_refund_no, refunded_at_ms: Some(_) })
            if *refund_fen == fen && !channel_refund_no.is_empty()
    )
}

/// The refunds the ledger holds for `out_trade_no`, in fen, oldest first.
async fn ledgered_refunds(sim: &TestSim, out_trade_no: &str) -> Vec<i64> {
    let (status, ledger) = sim.control(Method::GET, "/sim/ledger", None).await;
    assert_eq!(status, 200, "{ledger}");
    ledger["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|entry| entry["kind"] == "refund" && entry["out_trade_no"] == out_trade_no)
        .filter_map(|entry| entry["amount_fen"].as_i64())
        .collect()
}

/// The trade view's refunds as (number, amount, status).
fn refunds_of(trade: &Value) -> Vec<(String, i64, String)> {
    trade["refunds"]
        .as_array()
        .expect("refunds")
        .iter()
        .map(|refund| {
            (
                refund["out_refund_no"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                refund["amount_fen"].as_i64().unwrap_or_default(),
                refund["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The refund notify a WeChat Pay merchant received for `out_refund_no`, as the adapter
/// verifies it: its state.
fn verified_refund_notify(channel: &dyn Channel, notify: &Received) -> (String, RefundState) {
    let verified = channel
        .verify_notify(&raw(notify), wall_clock_ms())
        .expect("the adapter verifies and decrypts the refund notify");
    assert_eq!(
        verified.check_against(Some(TOTAL_FEN)),
        Ok(()),
        "a refund notify carries the trade's amount, so the merchant's check holds"
    );
    match verified.state {
        NotifiedState::Refund {
            out_refund_no,
            state,
            ..
        } => (out_refund_no, state),
        other => panic!("not a refund notify: {other:?}"),
    }
}

/// Waits for the merchant's notify whose body mentions `needle`.
async fn notify_mentioning(merchant: &Merchant, needle: &str) -> Received {
    let deadline = std::time::Instant::now() + crate::harness::WAIT_LIMIT;
    loop {
        if let Some(found) = merchant
            .received()
            .into_iter()
            .find(|notify| notify.body.contains(needle))
        {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no notify mentions {needle}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Partial refunds of one Alipay trade over `api`, up to its amount and no further, each
/// number refunding once.
async fn alipay_refunds_add_up_to_the_payment_and_each_number_refunds_once(api: AlipayApi) {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay_over(&sim, &merchant, ALIPAY_SELLER_ID, api);
    channel
        .create_trade(&trade("RA1"))
        .await
        .expect("precreate");
    sim.control(Method::POST, "/sim/trades/RA1/scan", None)
        .await;
    let unpaid = channel.refund(&refund("RA1", "R0", 100)).await;
    assert!(
        rejected_with(&unpaid, "ACQ.TRADE_STATUS_ERROR"),
        "an unpaid trade is not refunded: {unpaid:?}"
    );
    sim.pay("RA1").await;
    merchant.wait_for(1).await;

    let first = channel
        .refund(&refund("RA1", "R1", 10000))
        .await
        .expect("refund");
    assert!(succeeded_with(&first, 10000), "{first:?}");
    assert_eq!(
        channel
            .refund(&refund("RA1", "R1", 10000))
            .await
            .expect("the same refund again"),
        first,
        "fund_change N: the adapter's query finds the refund made before"
    );
    let discordant = channel.refund(&refund("RA1", "R1", 12000)).await;
    assert!(
        rejected_with(&discordant, "ACQ.DISCORDANT_REPEAT_REQUEST"),
        "{discordant:?}"
    );
    let second = channel
        .refund(&refund("RA1", "R2", 30000))
        .await
        .expect("refund");
    assert!(succeeded_with(&second, 30000), "{second:?}");
    let over = channel.refund(&refund("RA1", "R3", 6001)).await;
    assert!(
        rejected_with(&over, "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL"),
        "6000 fen are left: {over:?}"
    );
    assert_eq!(
        channel.query_refund("RA1", "R2").await.expect("query"),
        second
    );
    assert_eq!(
        channel.query_refund("RA1", "R9").await.expect("query"),
        RefundState::NotFound
    );
    let last = channel
        .refund(&refund("RA1", "R3", 6000))
        .await
        .expect("refund");
    assert!(succeeded_with(&last, 6000), "{last:?}");

    assert_eq!(ledgered_refunds(&sim, "RA1").await, [10000, 30000, 6000]);
    let (_, ledger) = sim.control(Method::GET, "/sim/ledger", None).await;
    assert_eq!(
        (
            &ledger["charged_fen"],
            &ledger["refunded_fen"],
            &ledger["net_fen"]
        ),
        (&json!(TOTAL_FEN), &json!(TOTAL_FEN), &json!(0))
    );
    let view = sim.trade("RA1").await;
    assert_eq!(view["status"], "REFUNDED");
    assert_eq!(view["refundable_fen"], 0);
    assert_eq!(
        refunds_of(&view),
        [
            ("R1".to_owned(), 10000, "SUCCESS".to_owned()),
            ("R2".to_owned(), 30000, "SUCCESS".to_owned()),
            ("R3".to_owned(), 6000, "SUCCESS".to_owned()),
        ]
    );
    assert_eq!(
        channel.query_trade("RA1").await.expect("query"),
        TradeState::Closed,
        "a trade refunded in full is TRADE_CLOSED"
    );

    // Each refund is also the trade's notify with the refund fields: genuine, and only a hint.
    let notifies = merchant.wait_for(4).await;
    let closing = notifies
        .iter()
        .find(|notify| notify.param("out_biz_no") == "R3")
        .expect("the last refund's notify");
    assert_eq!(closing.param("trade_status"), "TRADE_CLOSED");
    assert_eq!(closing.param("refund_fee"), "460.00");
    let partial = notifies
        .iter()
        .find(|notify| notify.param("out_biz_no") == "R1")
        .expect("the first refund's notify");
    assert_eq!(partial.param("trade_status"), "TRADE_SUCCESS");
    assert_eq!(partial.param("refund_fee"), "100.00");
    for notify in [closing, partial] {
        let verified = channel
            .verify_notify(&raw(notify), wall_clock_ms())
            .expect("verifies");
        assert!(
            matches!(verified.state, NotifiedState::Other(_)),
            "a refund's trade notify settles nothing: {:?}",
            verified.state
        );
    }

    // What the channels would refuse for its form is refused before anything is sent.
    for invalid in [
        refund("RA1", "R4", 0),
        refund("RA1", "R4", TOTAL_FEN + 1),
        refund("RA1", "R/4", 100),
    ] {
        assert!(
            matches!(
                channel.refund(&invalid).await,
                Err(ChannelError::Invalid(_))
            ),
            "{invalid:?}"
        );
    }
    assert_eq!(ledgered_refunds(&sim, "RA1").await.len(), 3);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alipay_refunds_add_up_to_the_payment_and_each_number_refunds_once_through_gateway_do() {
    alipay_refunds_add_up_to_the_payment_and_each_number_refunds_once(AlipayApi::Gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alipay_refunds_add_up_to_the_payment_and_each_number_refunds_once_over_openapi_v3() {
    alipay_refunds_add_up_to_the_payment_and_each_number_refunds_once(AlipayApi::V3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_refund_answer_is_asked_again_under_its_number_and_refunds_once() {
    let sim = TestSim::start(1).await;
    let alipay_merchant = Merchant::alipay_acknowledging().await;
    let wechat_merchant = Merchant::wechat_acknowledging().await;
    for (api, out_trade_no) in [(AlipayApi::Gateway, "RL1"), (AlipayApi::V3, "RL2")] {
        let channel = alipay_over(&sim, &alipay_merchant, ALIPAY_SELLER_ID, api);
        channel
            .create_trade(&trade(out_trade_no))
            .await
            .expect("precreate");
        sim.pay(out_trade_no).await;

        // The channel refunded, and the answer was lost.
        sim.fail_next(json!({ "method": "alipay.trade.refund", "apply_anyway": true }))
            .await;
        let lost = channel.refund(&refund(out_trade_no, "R1", 20000)).await;
        assert!(
            matches!(lost, Err(ChannelError::OutcomeUnknown(_))),
            "{api:?}: {lost:?}"
        );
        assert_eq!(ledgered_refunds(&sim, out_trade_no).await, [20000]);
        let retried = channel
            .refund(&refund(out_trade_no, "R1", 20000))
            .await
            .expect("the retry under the same number");
        assert!(succeeded_with(&retried, 20000), "{api:?}: {retried:?}");
        assert_eq!(
            ledgered_refunds(&sim, out_trade_no).await,
            [20000],
            "{api:?}: one refund, however often it is asked for"
        );

        // The channel failed before refunding: the query says so, and the retry refunds.
        sim.fail_next(json!({ "method": "alipay.trade.refund", "code": "ACQ.SYSTEM_ERROR" }))
            .await;
        assert!(matches!(
            channel.refund(&refund(out_trade_no, "R2", 1000)).await,
            Err(ChannelError::OutcomeUnknown(_))
        ));
        assert_eq!(
            channel
                .query_refund(out_trade_no, "R2")
                .await
                .expect("query"),
            RefundState::NotFound
        );
        sim.fail_next(json!({ "method": "alipay.trade.fastpay.refund.query" }))
            .await;
        assert!(matches!(
            channel.query_refund(out_trade_no, "R2").await,
            Err(ChannelError::OutcomeUnknown(_))
        ));
        assert!(succeeded_with(
            &channel
                .refund(&refund(out_trade_no, "R2", 1000))
                .await
                .expect("refund"),
            1000
        ));
        assert_eq!(ledgered_refunds(&sim, out_trade_no).await, [20000, 1000]);
    }

    // Concurrent duplicates of one refund: every caller is answered the refund, made once.
    let channel: std::sync::Arc<dyn Channel> = std::sync::Arc::from(alipay_over(
        &sim,
        &alipay_merchant,
        ALIPAY_SELLER_ID,
        AlipayApi::Gateway,
    ));
    channel
        .create_trade(&trade("RL4"))
        .await
        .expect("precreate");
    sim.pay("RL4").await;
    let mut duplicates = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let channel = std::sync::Arc::clone(&channel);
        duplicates.spawn(async move { channel.refund(&refund("RL4", "R1", 5000)).await });
    }
    while let Some(answer) = duplicates.join_next().await {
        let state = answer.expect("task").expect("refund");
        assert!(succeeded_with(&state, 5000), "{state:?}");
    }
    assert_eq!(ledgered_refunds(&sim, "RL4").await, [5000]);

    let channel = wechat(&sim, &wechat_merchant);
    channel
        .create_trade(&long_lived_trade(&sim, "RL3"))
        .await
        .expect("native");
    sim.pay("RL3").await;
    sim.fail_next(json!({ "method": "wechat.refund", "apply_anyway": true }))
        .await;
    let lost = channel.refund(&refund("RL3", "R1", 20000)).await;
    assert!(
        matches!(lost, Err(ChannelError::OutcomeUnknown(_))),
        "{lost:?}"
    );
    assert_eq!(
        channel
            .refund(&refund("RL3", "R1", 20000))
            .await
            .expect("the retry under the same number"),
        RefundState::Processing,
        "the refund accepted before the answer was lost"
    );
    sim.fail_next(json!({ "method": "wechat.refund.query" }))
        .await;
    assert!(matches!(
        channel.query_refund("RL3", "R1").await,
        Err(ChannelError::OutcomeUnknown(_))
    ));
    sim.advance(5).await;
    assert!(succeeded_with(
        &channel.query_refund("RL3", "R1").await.expect("query"),
        20000
    ));
    assert_eq!(
        refunds_of(&sim.trade("RL3").await),
        [("R1".to_owned(), 20000, "SUCCESS".to_owned())]
    );
    assert_eq!(ledgered_refunds(&sim, "RL3").await, [20000]);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wechat_refund_processes_then_succeeds_with_a_notify_the_adapter_verifies() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = wechat(&sim, &merchant);
    channel
        .create_trade(&long_lived_trade(&sim, "RW1"))
        .await
        .expect("native");
    let not_paid = channel.refund(&refund("RW1", "R0", 100)).await;
    assert!(rejected_with(&not_paid, "INVALID_REQUEST"), "{not_paid:?}");
    sim.pay("RW1").await;
    merchant.wait_for(1).await;

    assert_eq!(
        channel
            .refund(&refund("RW1", "R1", 20000))
            .await
            .expect("refund"),
        RefundState::Processing
    );
    assert_eq!(
        channel.query_refund("RW1", "R1").await.expect("query"),
        RefundState::Processing
    );
    assert_eq!(
        refunds_of(&sim.trade("RW1").await),
        [("R1".to_owned(), 20000, "PROCESSING".to_owned())]
    );
    assert!(
        ledgered_refunds(&sim, "RW1").await.is_empty(),
        "no money moved yet"
    );
    let over = channel.refund(&refund("RW1", "R2", 26001)).await;
    assert!(
        rejected_with(&over, "INVALID_REQUEST"),
        "the processing refund holds its amount: {over:?}"
    );

    sim.advance(5).await;
    let succeeded = channel.query_refund("RW1", "R1").await.expect("query");
    assert!(succeeded_with(&succeeded, 20000), "{succeeded:?}");
    assert_eq!(
        channel
            .refund(&refund("RW1", "R1", 20000))
            .await
            .expect("the same number again"),
        succeeded,
        "the same refund, as it is now"
    );
    let notify = notify_mentioning(&merchant, "REFUND.SUCCESS").await;
    let (out_refund_no, state) = verified_refund_notify(channel.as_ref(), &notify);
    assert_eq!(out_refund_no, "R1");
    assert_eq!(state, succeeded, "the notify and the query agree");
    assert_eq!(ledgered_refunds(&sim, "RW1").await, [20000]);
    let partly_refunded = channel.query_trade("RW1").await.expect("query");
    assert!(
        matches!(&partly_refunded, TradeState::Paid(payment) if payment.amount_fen == TOTAL_FEN),
        "a partly refunded trade stays paid: {partly_refunded:?}"
    );

    assert_eq!(
        channel
            .refund(&refund("RW1", "R2", 26000))
            .await
            .expect("the rest"),
        RefundState::Processing
    );
    sim.advance(5).await;
    assert!(succeeded_with(
        &channel.query_refund("RW1", "R2").await.expect("query"),
        26000
    ));
    assert_eq!(
        channel.query_trade("RW1").await.expect("query"),
        TradeState::Refunded,
        "refunded in full: trade_state REFUND"
    );
    assert_eq!(ledgered_refunds(&sim, "RW1").await, [20000, 26000]);
    assert_eq!(
        channel.query_refund("RW1", "NEVER").await.expect("query"),
        RefundState::NotFound
    );

    // Refusals change nothing: an unknown order, a total that is not the order's, a refund
    // number of another order (WeChat Pay numbers name one refund per merchant).
    channel
        .create_trade(&long_lived_trade(&sim, "RW2"))
        .await
        .expect("native");
    sim.pay("RW2").await;
    let unknown = channel.refund(&refund("NEVER-CREATED", "R9", 100)).await;
    assert!(
        rejected_with(&unknown, "RESOURCE_NOT_EXISTS"),
        "{unknown:?}"
    );
    let other_total = channel
        .refund(&RefundTrade {
            total_fen: TOTAL_FEN - 1,
            ..refund("RW2", "R9", 100)
        })
        .await;
    assert!(
        rejected_with(&other_total, "INVALID_REQUEST"),
        "{other_total:?}"
    );
    let reused = channel.refund(&refund("RW2", "R1", 20000)).await;
    assert!(rejected_with(&reused, "INVALID_REQUEST"), "{reused:?}");
    assert!(ledgered_refunds(&sim, "RW2").await.is_empty());
    let view = sim.trade("RW1").await;
    assert_eq!(view["status"], "REFUNDED");
    assert_eq!(view["refunded_fen"], TOTAL_FEN);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abnormal_and_closed_refunds_move_no_money_and_are_notified_on_a_fast_clock() {
    // One real second is a channel minute: refunds end without any advance.
    let sim = TestSim::start(60).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = wechat(&sim, &merchant);
    channel
        .create_trade(&long_lived_trade(&sim, "RX1"))
        .await
        .expect("native");
    sim.pay("RX1").await;
    merchant.wait_for(1).await;

    let (status, body) = sim
        .control(
            Method::POST,
            "/sim/refund-outcome",
            Some(json!({ "outcome": "explode" })),
        )
        .await;
    assert_eq!((status, &body["code"]), (400, &json!("invalid-request")));
    for (outcome, out_refund_no, event, expected) in [
        ("abnormal", "RA", "REFUND.ABNORMAL", RefundState::Abnormal),
        ("closed", "RC", "REFUND.CLOSED", RefundState::Closed),
    ] {
        let (status, body) = sim
            .control(
                Method::POST,
                "/sim/refund-outcome",
                Some(json!({ "outcome": outcome })),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            channel
                .refund(&refund("RX1", out_refund_no, 10000))
                .await
                .expect("accepted"),
            RefundState::Processing
        );
        let notify = notify_mentioning(&merchant, event).await;
        assert_eq!(
            verified_refund_notify(channel.as_ref(), &notify),
            (out_refund_no.to_owned(), expected.clone())
        );
        assert_eq!(
            channel
                .query_refund("RX1", out_refund_no)
                .await
                .expect("query"),
            expected
        );
    }
    assert!(
        ledgered_refunds(&sim, "RX1").await.is_empty(),
        "neither moved money"
    );
    let view = sim.trade("RX1").await;
    assert_eq!(
        refunds_of(&view),
        [
            ("RA".to_owned(), 10000, "ABNORMAL".to_owned()),
            ("RC".to_owned(), 10000, "CLOSED".to_owned()),
        ]
    );
    assert_eq!(
        view["refundable_fen"], 36000,
        "the abnormal refund holds its amount, the closed one freed its"
    );

    // The armed outcome applied to one refund each: the next one succeeds.
    assert_eq!(
        channel
            .refund(&refund("RX1", "RS", 36000))
            .await
            .expect("accepted"),
        RefundState::Processing
    );
    let notify = notify_mentioning(&merchant, "REFUND.SUCCESS").await;
    let (out_refund_no, state) = verified_refund_notify(channel.as_ref(), &notify);
    assert_eq!(out_refund_no, "RS");
    assert!(succeeded_with(&state, 36000), "{state:?}");
    assert_eq!(ledgered_refunds(&sim, "RX1").await, [36000]);
    assert_eq!(sim.trade("RX1").await["status"], "PAID");
    sim.stop().await;
}

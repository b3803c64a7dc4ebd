//! The service's channel adapters against the simulator over real HTTP: every method of both
//! channels through the `Channel` trait, notifies verified by the adapters, and the scenarios
//! of docs/channels.md as the merchant sees them (close refused because the buyer paid, query
//! and close before the scan, duplicate and lost notifies, unknown outcomes).

use std::time::Duration;

use mideng_channel::adapter::alipay::{AlipayApi, AlipayChannel, AlipayConfig};
use mideng_channel::adapter::wechat::{PlatformKeySource, WechatChannel, WechatConfig};
use mideng_channel::adapter::{
    Channel, ChannelError, CreateTrade, NotifiedState, NotifyRejection, RawNotify, TradeState,
};
use serde_json::json;

use crate::harness::{
    ALIPAY_APP_ID, ALIPAY_SELLER_ID, API_V3_KEY, MERCHANT_SERIAL, Merchant, PLATFORM_SERIAL,
    Received, TestSim, WECHAT_APPID, WECHAT_MCHID, channel_public_key, merchant_key, wall_clock_ms,
};

pub(crate) fn alipay(sim: &TestSim, merchant: &Merchant) -> Box<dyn Channel> {
    alipay_of_seller(sim, merchant, ALIPAY_SELLER_ID)
}

/// The Alipay adapter of a merchant whose partner id is `seller_id`.
fn alipay_of_seller(sim: &TestSim, merchant: &Merchant, seller_id: &str) -> Box<dyn Channel> {
    alipay_over(sim, merchant, seller_id, AlipayApi::Gateway)
}

/// The Alipay adapter of a merchant whose partner id is `seller_id`, over `api`.
pub(crate) fn alipay_over(
    sim: &TestSim,
    merchant: &Merchant,
    seller_id: &str,
    api: AlipayApi,
) -> Box<dyn Channel> {
    Box::new(AlipayChannel::new(alipay_config(sim, merchant, seller_id, api)).expect("adapter"))
}

fn alipay_config(
    sim: &TestSim,
    merchant: &Merchant,
    seller_id: &str,
    api: AlipayApi,
) -> AlipayConfig {
    AlipayConfig {
        gateway_url: format!("{}/gateway.do", sim.base),
        api,
        app_id: ALIPAY_APP_ID.to_owned(),
        seller_id: Some(seller_id.to_owned()),
        merchant_key: merchant_key().clone(),
        gateway_public_key: channel_public_key(),
        notify_url: merchant.url.clone(),
    }
}

pub(crate) fn wechat(sim: &TestSim, merchant: &Merchant) -> Box<dyn Channel> {
    Box::new(
        WechatChannel::new(WechatConfig {
            base_url: sim.base.clone(),
            mchid: WECHAT_MCHID.to_owned(),
            appid: WECHAT_APPID.to_owned(),
            merchant_serial: MERCHANT_SERIAL.to_owned(),
            merchant_key: merchant_key().clone(),
            platform_keys: PlatformKeySource::PublicKey {
                key: channel_public_key(),
                serial: PLATFORM_SERIAL.to_owned(),
            },
            api_v3_key: API_V3_KEY.to_owned(),
            notify_url: merchant.url.clone(),
        })
        .expect("adapter"),
    )
}

pub(crate) fn trade(out_trade_no: &str) -> CreateTrade {
    CreateTrade {
        out_trade_no: out_trade_no.to_owned(),
        amount_fen: 46000,
        subject: "订单 1001".to_owned(),
        expires_at_ms: wall_clock_ms() + 30 * 60 * 1000,
    }
}

pub(crate) fn raw(received: &Received) -> RawNotify {
    RawNotify {
        headers: received
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    value.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        body: received.body.as_bytes().to_vec(),
    }
}

fn paid(state: &TradeState) -> bool {
    matches!(state, TradeState::Paid(payment) if payment.amount_fen == 46000 && !payment.channel_trade_no.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alipay_round_trip_through_the_adapter() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay(&sim, &merchant);

    // One request, sent twice: its expiry is computed once (a second computed across a
    // second boundary would be other parameters, which the channel refuses).
    let request = trade("PA1");
    let created = channel.create_trade(&request).await.expect("precreate");
    assert!(!created.pay_url.is_empty());
    assert_eq!(
        channel
            .create_trade(&request)
            .await
            .expect("same parameters again"),
        created,
        "idempotent at the channel"
    );
    // Scenario 3: before the buyer scans, the channel has no such trade; a close cannot close it.
    assert_eq!(
        channel.query_trade("PA1").await.expect("query"),
        TradeState::NotFound
    );
    assert_eq!(
        channel.close_trade("PA1").await.expect("close"),
        TradeState::NotFound
    );

    sim.pay("PA1").await;
    assert!(paid(&channel.query_trade("PA1").await.expect("query")));
    let notify = &merchant.wait_for(1).await[0];
    let verified = channel
        .verify_notify(&raw(notify), wall_clock_ms())
        .expect("the adapter accepts the simulator's notify");
    assert_eq!(
        (verified.out_trade_no.as_str(), verified.amount_fen),
        ("PA1", 46000)
    );
    assert!(matches!(verified.state, NotifiedState::Paid(_)));
    assert_eq!(verified.check_against(Some(46000)), Ok(()));
    // The notify names the seller, and a merchant of another seller id refuses it.
    assert_eq!(notify.param("seller_id"), ALIPAY_SELLER_ID);
    let other_seller = alipay_of_seller(&sim, &merchant, "2088000000000777");
    assert_eq!(
        other_seller.verify_notify(&raw(notify), wall_clock_ms()),
        Err(NotifyRejection::WrongMerchant)
    );

    // Scenario 1: a close after the buyer paid reports the payment, never a closed trade.
    assert!(paid(&channel.close_trade("PA1").await.expect("close")));

    let second = trade("PA2");
    channel.create_trade(&second).await.expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PA2/scan", None)
        .await;
    assert_eq!(
        channel.query_trade("PA2").await.expect("query"),
        TradeState::Pending
    );
    assert_eq!(
        channel.close_trade("PA2").await.expect("close"),
        TradeState::Closed
    );
    assert_eq!(
        channel.query_trade("PA2").await.expect("query"),
        TradeState::Closed
    );
    let rejected = channel.create_trade(&second).await;
    assert!(
        matches!(rejected, Err(ChannelError::Rejected { ref sub_code, .. }) if sub_code == "ACQ.TRADE_HAS_CLOSE"),
        "{rejected:?}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wechat_round_trip_through_the_adapter() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = wechat(&sim, &merchant);

    assert!(
        channel
            .create_trade(&trade("PW1"))
            .await
            .expect("native")
            .pay_url
            .starts_with("weixin://")
    );
    assert_eq!(
        channel.query_trade("PW1").await.expect("query"),
        TradeState::Pending
    );
    assert_eq!(
        channel
            .close_trade("PW1")
            .await
            .expect("close, confirmed by a query"),
        TradeState::Closed
    );
    assert_eq!(
        channel.query_trade("NEVER-CREATED").await.expect("query"),
        TradeState::NotFound
    );

    channel.create_trade(&trade("PW2")).await.expect("native");
    sim.pay("PW2").await;
    let notify = &merchant.wait_for(1).await[0];
    let verified = channel
        .verify_notify(&raw(notify), wall_clock_ms())
        .expect("the adapter accepts and decrypts the notify");
    assert_eq!(
        (verified.out_trade_no.as_str(), verified.amount_fen),
        ("PW2", 46000)
    );
    assert!(matches!(verified.state, NotifiedState::Paid(_)));
    assert!(paid(&channel.query_trade("PW2").await.expect("query")));
    // ORDERPAID: the close lost the race; the adapter reports the payment.
    assert!(paid(&channel.close_trade("PW2").await.expect("close")));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alipay_round_trip_through_the_adapter_over_openapi_v3() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay_over(&sim, &merchant, ALIPAY_SELLER_ID, AlipayApi::V3);

    let request = trade("PV1");
    let created = channel.create_trade(&request).await.expect("precreate");
    assert!(!created.pay_url.is_empty());
    assert_eq!(
        channel.create_trade(&request).await.expect("again"),
        created,
        "idempotent at the channel"
    );
    assert_eq!(
        channel.query_trade("PV1").await.expect("query"),
        TradeState::NotFound,
        "v3's 400 ACQ.TRADE_NOT_EXIST before the scan"
    );
    assert_eq!(
        channel.close_trade("PV1").await.expect("close"),
        TradeState::NotFound
    );

    sim.pay("PV1").await;
    assert!(paid(&channel.query_trade("PV1").await.expect("query")));
    let notify = &merchant.wait_for(1).await[0];
    let verified = channel
        .verify_notify(&raw(notify), wall_clock_ms())
        .expect("the notify of a v3 trade is the same form notify");
    assert_eq!(
        (verified.out_trade_no.as_str(), verified.amount_fen),
        ("PV1", 46000)
    );
    assert!(paid(&channel.close_trade("PV1").await.expect("close")));

    let second = trade("PV2");
    channel.create_trade(&second).await.expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PV2/scan", None)
        .await;
    assert_eq!(
        channel.query_trade("PV2").await.expect("query"),
        TradeState::Pending
    );
    assert_eq!(
        channel.close_trade("PV2").await.expect("close"),
        TradeState::Closed
    );
    let rejected = channel.create_trade(&second).await;
    assert!(
        matches!(rejected, Err(ChannelError::Rejected { ref sub_code, .. }) if sub_code == "ACQ.TRADE_HAS_CLOSE"),
        "{rejected:?}"
    );

    // Unknown outcomes: a 500 after the close was applied, and answers that do not verify.
    channel
        .create_trade(&trade("PV3"))
        .await
        .expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PV3/scan", None)
        .await;
    sim.fail_next(json!({ "method": "alipay.trade.close", "code": "20000", "apply_anyway": true }))
        .await;
    let lost = channel.close_trade("PV3").await;
    assert!(
        matches!(lost, Err(ChannelError::OutcomeUnknown(_))),
        "{lost:?}"
    );
    assert_eq!(
        channel.query_trade("PV3").await.expect("query"),
        TradeState::Closed,
        "the query finds what happened"
    );
    let mut misconfigured = alipay_config(&sim, &merchant, ALIPAY_SELLER_ID, AlipayApi::V3);
    misconfigured.gateway_public_key = merchant_key().public_key();
    let misconfigured = AlipayChannel::new(misconfigured).expect("adapter");
    let unverified = misconfigured.create_trade(&trade("PV4")).await;
    assert!(
        matches!(unverified, Err(ChannelError::OutcomeUnknown(_))),
        "a success that does not verify is not believed: {unverified:?}"
    );
    let unverified = misconfigured.query_trade("PV5").await;
    assert!(
        matches!(unverified, Err(ChannelError::OutcomeUnknown(_))),
        "nor a signed refusal that does not verify: {unverified:?}"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_are_reported_as_unknown_and_resolved_by_a_query() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay(&sim, &merchant);
    channel
        .create_trade(&trade("PU1"))
        .await
        .expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PU1/scan", None)
        .await;

    // Scenario 6: the channel closed the trade but the answer was lost.
    sim.fail_next(json!({ "method": "alipay.trade.close", "code": "20000", "apply_anyway": true }))
        .await;
    let lost = channel.close_trade("PU1").await;
    assert!(
        matches!(lost, Err(ChannelError::OutcomeUnknown(_))),
        "{lost:?}"
    );
    assert_eq!(
        channel.query_trade("PU1").await.expect("query"),
        TradeState::Closed,
        "the query finds what happened"
    );

    channel
        .create_trade(&trade("PU2"))
        .await
        .expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PU2/scan", None)
        .await;
    sim.fail_next(
        json!({ "method": "alipay.trade.close", "code": "40004", "apply_anyway": false }),
    )
    .await;
    assert!(
        matches!(
            channel.close_trade("PU2").await,
            Err(ChannelError::OutcomeUnknown(_))
        ),
        "ACQ.SYSTEM_ERROR is unknown too"
    );
    assert_eq!(
        channel.query_trade("PU2").await.expect("query"),
        TradeState::Pending,
        "this time nothing was applied"
    );

    let wechat_merchant = Merchant::wechat_acknowledging().await;
    let wechat = wechat(&sim, &wechat_merchant);
    wechat.create_trade(&trade("PU3")).await.expect("native");
    sim.fail_next(json!({ "method": "wechat.query" })).await;
    assert!(
        matches!(
            wechat.query_trade("PU3").await,
            Err(ChannelError::OutcomeUnknown(_))
        ),
        "a 5xx is unknown"
    );
    assert_eq!(
        wechat.query_trade("PU3").await.expect("query"),
        TradeState::Pending
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_notifies_carry_one_id_and_a_lost_one_is_found_by_query() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay(&sim, &merchant);

    // Scenario 4: the same notify twice, at once.
    channel
        .create_trade(&trade("PD1"))
        .await
        .expect("precreate");
    sim.set_policy(json!({ "mode": "concurrent", "out_trade_no": "PD1" }))
        .await;
    sim.pay("PD1").await;
    let copies = merchant.wait_for(2).await;
    let ids: Vec<String> = copies
        .iter()
        .map(|copy| {
            channel
                .verify_notify(&raw(copy), wall_clock_ms())
                .expect("each copy verifies")
                .notify_id
        })
        .collect();
    assert_eq!(
        ids[0], ids[1],
        "duplicates share the notify id: the channel key to deduplicate on"
    );

    // Scenario 5: a notify lost for good; only a query finds the payment.
    channel
        .create_trade(&trade("PD2"))
        .await
        .expect("precreate");
    sim.set_policy(json!({ "mode": "drop", "out_trade_no": "PD2" }))
        .await;
    sim.pay("PD2").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        merchant
            .received()
            .iter()
            .all(|notify| !notify.body.contains("PD2")),
        "nothing arrived"
    );
    assert!(paid(&channel.query_trade("PD2").await.expect("query")));
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_takes_payment_until_its_own_expiry_and_a_late_notify_still_verifies() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::alipay_acknowledging().await;
    let channel = alipay(&sim, &merchant);

    // Scenario 2: the merchant gave up on the payment locally after 45 s, but the channel's
    // expiry is 60 s: a buyer paying at 50 s is charged, and the success arrives "late".
    let mut late = trade("PL1");
    late.expires_at_ms = sim.simulator.now_ms() + 60_000;
    channel.create_trade(&late).await.expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PL1/scan", None)
        .await;
    sim.advance(50).await;
    sim.pay("PL1").await;
    let notify = &merchant.wait_for(1).await[0];
    assert!(matches!(
        channel
            .verify_notify(&raw(notify), wall_clock_ms())
            .expect("verifies")
            .state,
        NotifiedState::Paid(_)
    ));

    // Past the channel's own expiry the buyer can no longer pay: the trade closed itself.
    let mut expired = trade("PL2");
    expired.expires_at_ms = sim.simulator.now_ms() + 60_000;
    channel.create_trade(&expired).await.expect("precreate");
    sim.control(reqwest::Method::POST, "/sim/trades/PL2/scan", None)
        .await;
    sim.advance(61).await;
    let (status, _) = sim
        .control(reqwest::Method::POST, "/sim/trades/PL2/pay", None)
        .await;
    assert_eq!(status, 409, "an expired trade cannot be paid");
    assert_eq!(
        channel.query_trade("PL2").await.expect("query"),
        TradeState::Closed
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_can_arrive_after_a_query_already_settled_the_payment() {
    let sim = TestSim::start(1).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = wechat(&sim, &merchant);
    channel.create_trade(&trade("PQ1")).await.expect("native");
    sim.set_policy(json!({ "mode": "delay", "out_trade_no": "PQ1", "delay_seconds": 120 }))
        .await;
    sim.pay("PQ1").await;
    // The merchant's reconciliation queries first and settles the payment …
    assert!(paid(&channel.query_trade("PQ1").await.expect("query")));
    assert!(merchant.received().is_empty(), "the notify is still held");
    // … and the notify comes afterwards, still genuine: the consumer must treat it as a duplicate.
    sim.advance(121).await;
    let notify = &merchant.wait_for(1).await[0];
    let verified = channel
        .verify_notify(&raw(notify), wall_clock_ms())
        .expect("verifies");
    assert_eq!(verified.out_trade_no, "PQ1");
    sim.stop().await;
}

/// A stand-in for the platform that answers every query with a transaction signed by the
/// channel's key, under the given `Wechatpay-Signature-Type` headers.
async fn platform_answering_with_types(types: &'static [&'static str]) -> String {
    use axum::http::HeaderValue;
    let app = axum::Router::new().fallback(move || async move {
        let body = json!({
            "mchid": WECHAT_MCHID, "appid": WECHAT_APPID, "out_trade_no": "PT1",
            "trade_state": "NOTPAY", "amount": { "total": 46000, "currency": "CNY" },
        })
        .to_string();
        let timestamp = (wall_clock_ms() / 1000).to_string();
        let signature = crate::harness::keys()
            .1
            .sign(mideng_channel::wechat::notify_message(&timestamp, "N1", &body).as_bytes())
            .expect("sign");
        let mut response = axum::response::IntoResponse::into_response(body);
        let headers = response.headers_mut();
        for (name, value) in [
            ("wechatpay-timestamp", timestamp),
            ("wechatpay-nonce", "N1".to_owned()),
            ("wechatpay-signature", signature),
            ("wechatpay-serial", PLATFORM_SERIAL.to_owned()),
        ] {
            headers.insert(name, HeaderValue::try_from(value).expect("ASCII"));
        }
        for scheme in types {
            headers.append("wechatpay-signature-type", HeaderValue::from_static(scheme));
        }
        response
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wechat_answer_under_another_signature_type_is_not_believed() {
    let merchant = Merchant::wechat_acknowledging().await;
    let channel_at = |base_url: String| {
        WechatChannel::new(WechatConfig {
            base_url,
            mchid: WECHAT_MCHID.to_owned(),
            appid: WECHAT_APPID.to_owned(),
            merchant_serial: MERCHANT_SERIAL.to_owned(),
            merchant_key: merchant_key().clone(),
            platform_keys: PlatformKeySource::PublicKey {
                key: channel_public_key(),
                serial: PLATFORM_SERIAL.to_owned(),
            },
            api_v3_key: API_V3_KEY.to_owned(),
            notify_url: merchant.url.clone(),
        })
        .expect("adapter")
    };
    let older_server = channel_at(platform_answering_with_types(&[]).await);
    assert_eq!(
        older_server
            .query_trade("PT1")
            .await
            .expect("no type named: older servers"),
        TradeState::Pending
    );
    let ours = channel_at(platform_answering_with_types(&["WECHATPAY2-SHA256-RSA2048"]).await);
    assert_eq!(
        ours.query_trade("PT1").await.expect("our scheme"),
        TradeState::Pending
    );
    for types in [
        &["WECHATPAY2-SM2-WITH-SM3"][..],
        &["WECHATPAY2-SHA256-RSA2048", "WECHATPAY2-SHA256-RSA2048"][..],
    ] {
        let other = channel_at(platform_answering_with_types(types).await);
        assert!(
            matches!(
                other.query_trade("PT1").await,
                Err(ChannelError::OutcomeUnknown(_))
            ),
            "{types:?}"
        );
    }
}

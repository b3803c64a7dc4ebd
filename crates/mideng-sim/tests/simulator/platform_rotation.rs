//! The WeChat adapter in certificate mode against the simulator in certificate mode: it
//! downloads and verifies the platform certificates, follows a rotation with one download, and
//! does not let notifies under made-up serials make it download more than once per interval.

use std::time::Duration;

use mideng_channel::adapter::wechat::{PlatformKeySource, WechatChannel, WechatConfig};
use mideng_channel::adapter::{
    Channel, ChannelError, CreateTrade, NotifyRejection, RawNotify, TradeState,
};
use mideng_channel::keys::random_characters;
use reqwest::Method;

use crate::harness::{
    API_V3_KEY, MERCHANT_SERIAL, Merchant, Received, TestSim, WAIT_LIMIT, WECHAT_APPID,
    WECHAT_MCHID, merchant_key, wall_clock_ms,
};

/// An adapter in certificate mode that downloads at most once per `refresh_interval`.
fn downloading(
    sim: &TestSim,
    merchant: &Merchant,
    api_v3_key: &str,
    refresh_interval: Duration,
) -> WechatChannel {
    WechatChannel::new(WechatConfig {
        base_url: sim.base.clone(),
        mchid: WECHAT_MCHID.to_owned(),
        appid: WECHAT_APPID.to_owned(),
        merchant_serial: MERCHANT_SERIAL.to_owned(),
        merchant_key: merchant_key().clone(),
        platform_keys: PlatformKeySource::Certificates {
            initial: None,
            refresh_interval,
        },
        api_v3_key: api_v3_key.to_owned(),
        notify_url: merchant.url.clone(),
    })
    .expect("adapter")
}

fn trade(out_trade_no: &str) -> CreateTrade {
    CreateTrade {
        out_trade_no: out_trade_no.to_owned(),
        amount_fen: 46000,
        subject: "订单 1001".to_owned(),
        expires_at_ms: wall_clock_ms() + 30 * 60 * 1000,
    }
}

fn raw(received: &Received) -> RawNotify {
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

/// Waits, bounded, until `channel` has downloaded `count` times.
async fn wait_for_downloads(channel: &WechatChannel, count: u64) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while channel.platform_certificate_downloads() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no download {count}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_downloads_the_platform_certificates_and_completes_create_query_close() {
    let sim = TestSim::start_in_certificate_mode().await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = downloading(&sim, &merchant, API_V3_KEY, Duration::from_secs(60));
    assert!(
        channel
            .create_trade(&trade("PC1"))
            .await
            .expect("native, its answer verified with the downloaded certificate")
            .pay_url
            .starts_with("weixin://")
    );
    assert_eq!(
        channel.query_trade("PC1").await.expect("query"),
        TradeState::Pending
    );
    assert_eq!(
        channel.close_trade("PC1").await.expect("close"),
        TradeState::Closed
    );
    assert_eq!(
        channel.platform_certificate_downloads(),
        1,
        "one download serves every later answer"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_the_next_answer_and_notify_verify_after_one_download() {
    let sim = TestSim::start_in_certificate_mode().await;
    let merchant = Merchant::wechat_acknowledging().await;
    let interval = Duration::from_millis(200);
    let answers = downloading(&sim, &merchant, API_V3_KEY, interval);
    let notifies = downloading(&sim, &merchant, API_V3_KEY, interval);
    answers.create_trade(&trade("PC2")).await.expect("native");
    notifies.create_trade(&trade("PC3")).await.expect("native");
    tokio::time::sleep(interval).await;
    let (status, rotated) = sim
        .control(Method::POST, "/sim/wechat/platform/rotate", None)
        .await;
    assert_eq!(status, 200, "{rotated}");

    assert_eq!(
        answers
            .query_trade("PC2")
            .await
            .expect("an answer under the new serial verifies"),
        TradeState::Pending
    );
    assert_eq!(answers.platform_certificate_downloads(), 2);

    sim.pay("PC3").await;
    let notify = raw(&merchant.wait_for(1).await[0]);
    assert_eq!(
        notifies.verify_notify(&notify, wall_clock_ms()).map(|_| ()),
        Err(NotifyRejection::UnknownSerial),
        "refused at once, while the new certificate downloads"
    );
    wait_for_downloads(&notifies, 2).await;
    let verified = notifies
        .verify_notify(&notify, wall_clock_ms())
        .expect("the channel's resend verifies with the new key");
    assert_eq!(verified.out_trade_no, "PC3");
    assert_eq!(notifies.platform_certificate_downloads(), 2);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifies_under_made_up_serials_cause_at_most_one_download_per_interval() {
    let sim = TestSim::start_in_certificate_mode().await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = downloading(&sim, &merchant, API_V3_KEY, Duration::from_secs(60));
    for _ in 0..500 {
        let forged = RawNotify {
            headers: vec![
                (
                    "wechatpay-timestamp".to_owned(),
                    (wall_clock_ms() / 1000).to_string(),
                ),
                ("wechatpay-nonce".to_owned(), "N".to_owned()),
                ("wechatpay-signature".to_owned(), "AAAA".to_owned()),
                (
                    "wechatpay-serial".to_owned(),
                    random_characters(b"0123456789ABCDEF", 40),
                ),
            ],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            channel.verify_notify(&forged, wall_clock_ms()).map(|_| ()),
            Err(NotifyRejection::UnknownSerial)
        );
    }
    wait_for_downloads(&channel, 1).await;
    // Answers under the serial the one download brought verify without another.
    channel.create_trade(&trade("PC4")).await.expect("native");
    assert_eq!(channel.platform_certificate_downloads(), 1);
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_list_sealed_under_another_api_v3_key_is_refused() {
    let sim = TestSim::start_in_certificate_mode().await;
    let merchant = Merchant::wechat_acknowledging().await;
    let channel = downloading(
        &sim,
        &merchant,
        "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
        Duration::from_secs(60),
    );
    assert!(
        matches!(
            channel.create_trade(&trade("PC5")).await,
            Err(ChannelError::OutcomeUnknown(_))
        ),
        "no key to verify the answer with: its outcome is unknown"
    );
    assert_eq!(channel.platform_certificate_downloads(), 1);
    sim.stop().await;
}

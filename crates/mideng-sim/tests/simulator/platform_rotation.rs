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

const TRUSTED_SERIAL: &str = "1A2B3C4D5E6F708192A3B4C5D6E7F80912345678";
const ROTATED_SERIAL: &str = "7132D72A03E93CDDF8C03BBD1F37EEDF43F8E5E1";

/// The channel key's certificate under `serial` (rcgen's default validity spans centuries).
fn channel_certificate(serial: &str) -> String {
    let pem = crate::harness::keys().1.to_pem().expect("pem");
    let pair = rcgen::KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256).expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    let serial_bytes: Vec<u8> = (0..serial.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&serial[at..at + 2], 16).expect("hex"))
        .collect();
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial_bytes));
    params.self_signed(&pair).expect("certificate").pem()
}

/// A stand-in platform signing with the channel key: its first query answer names
/// [`ROTATED_SERIAL`], later ones [`TRUSTED_SERIAL`]; its certificate list is tampered (the
/// trusted certificate listed under the rotated serial). Counts the list's downloads.
async fn platform_with_a_tampered_list(
    downloads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> String {
    use axum::http::{HeaderValue, Uri};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let queries = std::sync::Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let (queries, downloads) = (queries.clone(), downloads.clone());
        async move {
            let (body, serial) = if uri.path() == mideng_channel::wechat::PATH_CERTIFICATES {
                downloads.fetch_add(1, Ordering::SeqCst);
                let nonce = "0123456789ab";
                let ciphertext = mideng_channel::keys::aes_gcm_encrypt(
                    API_V3_KEY.as_bytes(),
                    nonce.as_bytes(),
                    b"certificate",
                    channel_certificate(TRUSTED_SERIAL).as_bytes(),
                )
                .expect("encrypt");
                let list = serde_json::json!({ "data": [{
                    "serial_no": ROTATED_SERIAL,
                    "encrypt_certificate": {
                        "algorithm": "AEAD_AES_256_GCM", "nonce": nonce,
                        "associated_data": "certificate", "ciphertext": ciphertext,
                    },
                }]});
                (list.to_string(), TRUSTED_SERIAL)
            } else {
                let transaction = serde_json::json!({
                    "mchid": WECHAT_MCHID, "appid": WECHAT_APPID, "out_trade_no": "PT1",
                    "trade_state": "NOTPAY", "amount": { "total": 46000, "currency": "CNY" },
                });
                let first = queries.fetch_add(1, Ordering::SeqCst) == 0;
                let serial = if first {
                    ROTATED_SERIAL
                } else {
                    TRUSTED_SERIAL
                };
                (transaction.to_string(), serial)
            };
            let timestamp = (wall_clock_ms() / 1000).to_string();
            let signature = crate::harness::keys()
                .1
                .sign(mideng_channel::wechat::notify_message(&timestamp, "N1", &body).as_bytes())
                .expect("sign");
            let mut response = axum::response::IntoResponse::into_response(body);
            for (name, value) in [
                ("wechatpay-timestamp", timestamp),
                ("wechatpay-nonce", "N1".to_owned()),
                ("wechatpay-signature", signature),
                ("wechatpay-serial", serial.to_owned()),
            ] {
                response
                    .headers_mut()
                    .insert(name, HeaderValue::try_from(value).expect("ASCII"));
            }
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_certificate_list_is_refused_and_the_keys_held_before_stay() {
    let merchant = Merchant::wechat_acknowledging().await;
    let downloads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let base_url = platform_with_a_tampered_list(downloads.clone()).await;
    let initial =
        mideng_channel::platform_keys::parse_certificate_pem(&channel_certificate(TRUSTED_SERIAL))
            .expect("certificate");
    let channel = WechatChannel::new(WechatConfig {
        base_url,
        mchid: WECHAT_MCHID.to_owned(),
        appid: WECHAT_APPID.to_owned(),
        merchant_serial: MERCHANT_SERIAL.to_owned(),
        merchant_key: merchant_key().clone(),
        platform_keys: PlatformKeySource::Certificates {
            initial: Some(initial),
            refresh_interval: Duration::from_secs(60),
        },
        api_v3_key: API_V3_KEY.to_owned(),
        notify_url: merchant.url.clone(),
    })
    .expect("adapter");
    assert!(
        matches!(
            channel.query_trade("PT1").await,
            Err(ChannelError::OutcomeUnknown(_))
        ),
        "an answer under a serial the tampered list cannot vouch for is not believed"
    );
    assert_eq!(downloads.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        channel
            .query_trade("PT1")
            .await
            .expect("the initial certificate still verifies"),
        TradeState::Pending
    );
}

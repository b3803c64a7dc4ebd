//! Notify verification in the adapters: genuine notifies are accepted; forged ones (bad
//! signature, probe, wrong merchant, wrong amount, someone else's trade) are rejected. The
//! channel's side is played with the fixture keys.

use mideng_channel::adapter::alipay::{AlipayChannel, AlipayConfig};
use mideng_channel::adapter::wechat::{WechatChannel, WechatConfig};
use mideng_channel::adapter::{Channel, NotifiedState, NotifyRejection, RawNotify};
use mideng_channel::keys::{PrivateKey, PublicKey, aes_gcm_encrypt};
use mideng_channel::{alipay, wechat};

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn channel_key() -> PrivateKey {
    PrivateKey::from_pem(&fixture("channel-private.pem")).expect("channel key")
}

fn merchant_key() -> PrivateKey {
    PrivateKey::from_pem(&fixture("merchant-private.pem")).expect("merchant key")
}

fn alipay_channel() -> AlipayChannel {
    AlipayChannel::new(AlipayConfig {
        gateway_url: "http://127.0.0.1:1/gateway.do".to_owned(),
        app_id: "2021000000000001".to_owned(),
        seller_id: Some("2088000000000001".to_owned()),
        merchant_key: merchant_key(),
        gateway_public_key: PublicKey::from_pem(&fixture("channel-public.pem"))
            .expect("gateway key"),
        notify_url: "http://127.0.0.1:8080/v1/channels/alipay/notify".to_owned(),
    })
    .expect("adapter")
}

/// A notify as the gateway sends it, signed with `signer`, with `changes` applied first.
fn alipay_notify(signer: &PrivateKey, changes: &[(&str, &str)]) -> RawNotify {
    let mut params: Vec<(String, String)> = [
        ("notify_time", "2026-11-29 12:05:01"),
        ("notify_type", "trade_status_sync"),
        ("notify_id", "ac05099524730693a8b330c5ecf72da9786"),
        ("app_id", "2021000000000001"),
        ("charset", "utf-8"),
        ("version", "1.0"),
        ("sign_type", "RSA2"),
        ("trade_no", "2026112922001400000000000001"),
        ("out_trade_no", "P20261129000001"),
        ("trade_status", "TRADE_SUCCESS"),
        ("total_amount", "460.00"),
        ("receipt_amount", "460.00"),
        ("seller_id", "2088000000000001"),
        ("gmt_payment", "2026-11-29 12:05:00"),
    ]
    .iter()
    .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
    .collect();
    for (key, value) in changes {
        params.retain(|(candidate, _)| candidate != key);
        params.push(((*key).to_owned(), (*value).to_owned()));
    }
    let content = alipay::notify_sign_content(
        params
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str())),
    );
    let sign = signer.sign(content.as_bytes()).expect("sign");
    params.push(("sign".to_owned(), sign));
    RawNotify {
        headers: vec![(
            "content-type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        )],
        body: serde_urlencoded::to_string(&params)
            .expect("form")
            .into_bytes(),
    }
}

#[test]
fn a_genuine_alipay_notify_is_accepted() {
    let channel = alipay_channel();
    let verified = channel
        .verify_notify(&alipay_notify(&channel_key(), &[]))
        .expect("genuine");
    assert_eq!(verified.out_trade_no, "P20261129000001");
    assert_eq!(verified.amount_fen, 46000);
    assert_eq!(verified.notify_id, "ac05099524730693a8b330c5ecf72da9786");
    assert!(
        matches!(&verified.state, NotifiedState::Paid(payment) if payment.channel_trade_no == "2026112922001400000000000001")
    );
    assert_eq!(verified.check_against(Some(46000)), Ok(()));
    assert_eq!(channel.answer(true).body, "success");
    assert_eq!(channel.answer(false).body, "failure");
}

#[test]
fn forged_alipay_notifies_are_rejected() {
    let channel = alipay_channel();
    assert_eq!(
        channel.verify_notify(&alipay_notify(&merchant_key(), &[])),
        Err(NotifyRejection::BadSignature),
        "signed by the wrong key"
    );
    let mut tampered = alipay_notify(&channel_key(), &[]);
    tampered.body = String::from_utf8(tampered.body)
        .expect("utf-8")
        .replace("460.00", "0.01")
        .into_bytes();
    assert_eq!(
        channel.verify_notify(&tampered),
        Err(NotifyRejection::BadSignature),
        "amount changed after signing"
    );
    assert_eq!(
        channel.verify_notify(&alipay_notify(
            &channel_key(),
            &[("app_id", "2021000000000999")]
        )),
        Err(NotifyRejection::WrongMerchant)
    );
    assert_eq!(
        channel.verify_notify(&alipay_notify(
            &channel_key(),
            &[("seller_id", "2088000000000999")]
        )),
        Err(NotifyRejection::WrongMerchant)
    );
    let wrong_amount = channel
        .verify_notify(&alipay_notify(&channel_key(), &[("total_amount", "0.01")]))
        .expect("signed");
    assert_eq!(
        wrong_amount.check_against(Some(46000)),
        Err(NotifyRejection::AmountMismatch)
    );
    let genuine = channel
        .verify_notify(&alipay_notify(&channel_key(), &[]))
        .expect("signed");
    assert_eq!(
        genuine.check_against(None),
        Err(NotifyRejection::UnknownTrade)
    );
    for garbage in [&b""[..], b"%%%", b"sign=abc"] {
        let raw = RawNotify {
            headers: vec![],
            body: garbage.to_vec(),
        };
        assert!(channel.verify_notify(&raw).is_err(), "{garbage:?}");
    }
}

const API_V3_KEY: &str = "0123456789abcdefghijklmnopqrstuv";

fn wechat_channel(mchid: &str, api_v3_key: &str) -> WechatChannel {
    WechatChannel::new(WechatConfig {
        base_url: "http://127.0.0.1:1".to_owned(),
        mchid: mchid.to_owned(),
        appid: "wxd678efh567hg6787".to_owned(),
        merchant_serial: "MERCHANT-SERIAL".to_owned(),
        merchant_key: merchant_key(),
        platform_public_key: PublicKey::from_pem(&fixture("channel-public.pem"))
            .expect("platform key"),
        api_v3_key: api_v3_key.to_owned(),
        notify_url: "http://127.0.0.1:8080/v1/channels/wechat/notify".to_owned(),
    })
    .expect("adapter")
}

fn wechat_notify(body: &str, timestamp: &str, nonce: &str, signature: &str) -> RawNotify {
    RawNotify {
        headers: vec![
            ("Wechatpay-Timestamp".to_owned(), timestamp.to_owned()),
            ("Wechatpay-Nonce".to_owned(), nonce.to_owned()),
            ("Wechatpay-Signature".to_owned(), signature.to_owned()),
            ("Wechatpay-Serial".to_owned(), "PLATFORM-SERIAL".to_owned()),
        ],
        body: body.as_bytes().to_vec(),
    }
}

/// A notification for `amount` fen signed by the channel.
fn signed_wechat_notify(mchid: &str, amount: i64) -> RawNotify {
    let transaction = serde_json::json!({
        "mchid": mchid, "appid": "wxd678efh567hg6787", "out_trade_no": "P20261129000002",
        "transaction_id": "4200000000202611290000000002", "trade_state": "SUCCESS",
        "success_time": "2026-11-29T12:05:00+08:00", "amount": {"total": amount, "payer_total": amount, "currency": "CNY"},
    });
    let ciphertext = aes_gcm_encrypt(
        API_V3_KEY.as_bytes(),
        b"abcdefghijkl",
        b"transaction",
        transaction.to_string().as_bytes(),
    )
    .expect("encrypt");
    let body = serde_json::json!({
        "id": "EV-2", "create_time": "2026-11-29T12:05:01+08:00", "event_type": "TRANSACTION.SUCCESS",
        "resource_type": "encrypt-resource", "summary": "支付成功",
        "resource": {"algorithm": "AEAD_AES_256_GCM", "ciphertext": ciphertext, "associated_data": "transaction", "nonce": "abcdefghijkl"},
    })
    .to_string();
    let signature = channel_key()
        .sign(wechat::notify_message("1764417901", "N2", &body).as_bytes())
        .expect("sign");
    wechat_notify(&body, "1764417901", "N2", &signature)
}

#[test]
fn a_genuine_wechat_notification_is_accepted() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let raw = wechat_notify(
        &fixture("wechat-notify.body"),
        "1764417901",
        "NONCEXYZ123",
        &fixture("wechat-notify.sign"),
    );
    let verified = channel.verify_notify(&raw).expect("genuine");
    assert_eq!(
        (
            verified.notify_id.as_str(),
            verified.out_trade_no.as_str(),
            verified.amount_fen
        ),
        ("EV-2026112912050001", "P20261129000001", 46000)
    );
    assert!(matches!(verified.state, NotifiedState::Paid(_)));
    assert_eq!(channel.answer(true).status, 204);
    assert_eq!(channel.answer(false).status, 500);
}

#[test]
fn forged_wechat_notifications_are_rejected() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let body = fixture("wechat-notify.body");
    let signature = fixture("wechat-notify.sign");
    let probe = format!("{}{signature}", wechat::SIGNTEST_PREFIX);
    assert_eq!(
        channel.verify_notify(&wechat_notify(&body, "1764417901", "NONCEXYZ123", &probe)),
        Err(NotifyRejection::BadSignature),
        "probe"
    );
    assert_eq!(
        channel.verify_notify(&wechat_notify(
            &body,
            "1764417902",
            "NONCEXYZ123",
            &signature
        )),
        Err(NotifyRejection::BadSignature),
        "timestamp changed"
    );
    let forged = merchant_key()
        .sign(wechat::notify_message("1764417901", "NONCEXYZ123", &body).as_bytes())
        .expect("sign");
    assert_eq!(
        channel.verify_notify(&wechat_notify(&body, "1764417901", "NONCEXYZ123", &forged)),
        Err(NotifyRejection::BadSignature),
        "wrong key"
    );
    let wrong_key = wechat_channel("1230000109", "vutsrqponmlkjihgfedcba9876543210");
    assert_eq!(
        wrong_key.verify_notify(&wechat_notify(
            &body,
            "1764417901",
            "NONCEXYZ123",
            &signature
        )),
        Err(NotifyRejection::Undecryptable)
    );
    assert_eq!(
        channel.verify_notify(&signed_wechat_notify("1230000999", 46000)),
        Err(NotifyRejection::WrongMerchant)
    );
    let cheap = channel
        .verify_notify(&signed_wechat_notify("1230000109", 1))
        .expect("signed");
    assert_eq!(
        cheap.check_against(Some(46000)),
        Err(NotifyRejection::AmountMismatch)
    );
    let mut missing = wechat_notify(&body, "1764417901", "NONCEXYZ123", &signature);
    missing
        .headers
        .retain(|(name, _)| name != "Wechatpay-Signature");
    assert!(matches!(
        channel.verify_notify(&missing),
        Err(NotifyRejection::Malformed(_))
    ));
}

#[test]
fn an_api_v3_key_of_the_wrong_length_is_refused() {
    assert!(
        WechatChannel::new(WechatConfig {
            base_url: String::new(),
            mchid: String::new(),
            appid: String::new(),
            merchant_serial: String::new(),
            merchant_key: merchant_key(),
            platform_public_key: merchant_key().public_key(),
            api_v3_key: "short".to_owned(),
            notify_url: String::new(),
        })
        .is_err()
    );
}

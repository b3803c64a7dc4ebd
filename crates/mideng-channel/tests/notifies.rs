//! Notify verification in the adapters: genuine notifies are accepted; forged ones (bad
//! signature, probe, wrong merchant, wrong amount, someone else's trade) are rejected. The
//! channel's side is played with the fixture keys.

use mideng_channel::adapter::alipay::{AlipayApi, AlipayChannel, AlipayConfig};
use mideng_channel::adapter::wechat::{PlatformKeySource, WechatChannel, WechatConfig};
use mideng_channel::adapter::{
    Channel, NotifiedState, NotifyRejection, NotifyVerdict, RawNotify, Refund, RefundState,
};
use mideng_channel::keys::{PrivateKey, PublicKey, aes_gcm_encrypt};
use mideng_channel::{alipay, wechat};

/// Our clock for Alipay notifies (they carry no signed time to check).
const NOW_MS: i64 = 1_764_417_901_000;
/// Our clock for WeChat notifies: the moment the fixtures were signed.
const SIGNED_AT_MS: i64 = 1_764_417_901_000;

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
        api: AlipayApi::Gateway,
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
        .verify_notify(&alipay_notify(&channel_key(), &[]), NOW_MS)
        .expect("genuine");
    assert_eq!(verified.out_trade_no, "P20261129000001");
    assert_eq!(verified.amount_fen, 46000);
    assert_eq!(verified.notify_id, "ac05099524730693a8b330c5ecf72da9786");
    assert!(
        matches!(&verified.state, NotifiedState::Paid(payment) if payment.channel_trade_no == "2026112922001400000000000001")
    );
    assert_eq!(verified.check_against(Some(46000)), Ok(()));
    assert_eq!(channel.answer(NotifyVerdict::Accepted).body, "success");
    assert_eq!(channel.answer(NotifyVerdict::Refused).body, "failure");
    assert_eq!(channel.answer(NotifyVerdict::RetryLater).body, "failure");
}

/// Notifies built by the official Alipay SDKs (Node `alipay-sdk`, `python-alipay-sdk`) under
/// their notify sign-content rule, with an empty `passback_params` and a non-ASCII `subject`:
/// the committed ones (`tests/fixtures/sdk-notifies`, written by `scripts/interop-alipay`), or
/// the ones a fresh run of that script wrote into `MIDENG_ALIPAY_SDK_NOTIFIES`.
fn sdk_built_alipay_notifies() -> Vec<(String, RawNotify)> {
    let directory = std::env::var_os("MIDENG_ALIPAY_SDK_NOTIFIES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sdk-notifies")
        });
    ["alipay-node.form", "alipay-python.form"]
        .iter()
        .map(|name| {
            let path = directory.join(name);
            let body =
                std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            let raw = RawNotify {
                headers: vec![(
                    "content-type".to_owned(),
                    "application/x-www-form-urlencoded".to_owned(),
                )],
                body,
            };
            ((*name).to_owned(), raw)
        })
        .collect()
}

#[test]
fn notifies_built_by_the_official_sdks_with_empty_and_non_ascii_fields_are_accepted() {
    let channel = alipay_channel();
    for (name, notify) in sdk_built_alipay_notifies() {
        let text = String::from_utf8(notify.body.clone()).expect("utf-8");
        assert!(
            text.contains("&passback_params=&"),
            "{name} carries an empty field"
        );
        assert!(
            text.contains("subject=%E8%AE%A2"),
            "{name} carries a non-ASCII field"
        );
        let verified = channel
            .verify_notify(&notify, NOW_MS)
            .unwrap_or_else(|rejection| panic!("{name} is refused: {rejection}"));
        assert_eq!(verified.amount_fen, 46000, "{name}");
        assert!(matches!(verified.state, NotifiedState::Paid(_)), "{name}");

        // Tampered after signing: another amount, the empty field dropped, the subject changed.
        for (from, to) in [
            ("total_amount=460.00", "total_amount=461.00"),
            ("&passback_params=&", "&"),
            ("subject=%E8%AE%A2", "subject=%E8%AE%A3"),
        ] {
            let tampered = RawNotify {
                headers: notify.headers.clone(),
                body: text.replacen(from, to, 1).into_bytes(),
            };
            assert_eq!(
                channel.verify_notify(&tampered, NOW_MS),
                Err(NotifyRejection::BadSignature),
                "{name} with {from} changed to {to}"
            );
        }
    }
}

#[test]
fn forged_alipay_notifies_are_rejected() {
    let channel = alipay_channel();
    assert_eq!(
        channel.verify_notify(&alipay_notify(&merchant_key(), &[]), NOW_MS),
        Err(NotifyRejection::BadSignature),
        "signed by the wrong key"
    );
    let mut tampered = alipay_notify(&channel_key(), &[]);
    tampered.body = String::from_utf8(tampered.body)
        .expect("utf-8")
        .replace("460.00", "0.01")
        .into_bytes();
    assert_eq!(
        channel.verify_notify(&tampered, NOW_MS),
        Err(NotifyRejection::BadSignature),
        "amount changed after signing"
    );
    assert_eq!(
        channel.verify_notify(
            &alipay_notify(&channel_key(), &[("app_id", "2021000000000999")]),
            NOW_MS
        ),
        Err(NotifyRejection::WrongMerchant)
    );
    assert_eq!(
        channel.verify_notify(
            &alipay_notify(&channel_key(), &[("seller_id", "2088000000000999")]),
            NOW_MS
        ),
        Err(NotifyRejection::WrongMerchant)
    );
    let wrong_amount = channel
        .verify_notify(
            &alipay_notify(&channel_key(), &[("total_amount", "0.01")]),
            NOW_MS,
        )
        .expect("signed");
    assert_eq!(
        wrong_amount.check_against(Some(46000)),
        Err(NotifyRejection::AmountMismatch)
    );
    let genuine = channel
        .verify_notify(&alipay_notify(&channel_key(), &[]), NOW_MS)
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
        assert!(channel.verify_notify(&raw, NOW_MS).is_err(), "{garbage:?}");
    }
}

const API_V3_KEY: &str = "0123456789abcdefghijklmnopqrstuv";
const PLATFORM_SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";

fn wechat_channel(mchid: &str, api_v3_key: &str) -> WechatChannel {
    WechatChannel::new(WechatConfig {
        base_url: "http://127.0.0.1:1".to_owned(),
        mchid: mchid.to_owned(),
        appid: "wxd678efh567hg6787".to_owned(),
        merchant_serial: "MERCHANT-SERIAL".to_owned(),
        merchant_key: merchant_key(),
        platform_keys: PlatformKeySource::PublicKey {
            key: PublicKey::from_pem(&fixture("channel-public.pem")).expect("platform key"),
            serial: PLATFORM_SERIAL.to_owned(),
        },
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
            ("Wechatpay-Serial".to_owned(), PLATFORM_SERIAL.to_owned()),
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
    let verified = channel.verify_notify(&raw, SIGNED_AT_MS).expect("genuine");
    assert_eq!(
        (
            verified.notify_id.as_str(),
            verified.out_trade_no.as_str(),
            verified.amount_fen
        ),
        ("EV-2026112912050001", "P20261129000001", 46000)
    );
    assert!(matches!(verified.state, NotifiedState::Paid(_)));
    assert_eq!(channel.answer(NotifyVerdict::Accepted).status, 204);
    assert_eq!(
        channel.answer(NotifyVerdict::Refused).status,
        400,
        "a bad notify is the sender's fault, not ours"
    );
    assert_eq!(channel.answer(NotifyVerdict::RetryLater).status, 503);
}

#[test]
fn forged_wechat_notifications_are_rejected() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let body = fixture("wechat-notify.body");
    let signature = fixture("wechat-notify.sign");
    let probe = format!("{}{signature}", wechat::SIGNTEST_PREFIX);
    assert_eq!(
        channel.verify_notify(
            &wechat_notify(&body, "1764417901", "NONCEXYZ123", &probe),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::BadSignature),
        "probe"
    );
    assert_eq!(
        channel.verify_notify(
            &wechat_notify(&body, "1764417902", "NONCEXYZ123", &signature),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::BadSignature),
        "timestamp changed"
    );
    let forged = merchant_key()
        .sign(wechat::notify_message("1764417901", "NONCEXYZ123", &body).as_bytes())
        .expect("sign");
    assert_eq!(
        channel.verify_notify(
            &wechat_notify(&body, "1764417901", "NONCEXYZ123", &forged),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::BadSignature),
        "wrong key"
    );
    let wrong_key = wechat_channel("1230000109", "vutsrqponmlkjihgfedcba9876543210");
    assert_eq!(
        wrong_key.verify_notify(
            &wechat_notify(&body, "1764417901", "NONCEXYZ123", &signature),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::Undecryptable)
    );
    assert_eq!(
        channel.verify_notify(&signed_wechat_notify("1230000999", 46000), SIGNED_AT_MS),
        Err(NotifyRejection::WrongMerchant)
    );
    let cheap = channel
        .verify_notify(&signed_wechat_notify("1230000109", 1), SIGNED_AT_MS)
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
        channel.verify_notify(&missing, SIGNED_AT_MS),
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
            platform_keys: PlatformKeySource::PublicKey {
                key: merchant_key().public_key(),
                serial: String::new()
            },
            api_v3_key: "short".to_owned(),
            notify_url: String::new(),
        })
        .is_err()
    );
}

/// The genuine form of `alipay_notify`, with `prefix` put before its first parameter — the
/// parameter-pollution attack: the signature still covers the genuine values.
fn polluted(prefix: &str) -> RawNotify {
    let mut raw = alipay_notify(&channel_key(), &[]);
    let mut body = prefix.as_bytes().to_vec();
    body.append(&mut raw.body);
    raw.body = body;
    raw
}

#[test]
fn a_genuine_alipay_notify_cannot_be_retargeted_by_repeating_its_names() {
    let channel = alipay_channel();
    for prefix in [
        // Another tenant's order, its amount, a fresh notify id: the attack that once paid it.
        "out_trade_no=P20261129999999&total_amount=8888.00&notify_id=fresh0001&trade_no=2026112922001400000000009999&",
        "trade_status=TRADE_CLOSED&",
        "app_id=2021000000000001&",
        "sign_type=RSA2&",
    ] {
        assert_eq!(
            channel.verify_notify(&polluted(prefix), NOW_MS),
            Err(NotifyRejection::Malformed("a parameter appears twice")),
            "{prefix}"
        );
    }
    // Appended after the signature, or with the name spelled through percent-encoding: the
    // same name, the same refusal.
    let mut appended = alipay_notify(&channel_key(), &[]);
    appended
        .body
        .extend_from_slice(b"&out_trade_no=P20261129999999");
    assert!(channel.verify_notify(&appended, NOW_MS).is_err());
    assert!(
        channel
            .verify_notify(&polluted("%6Fut_trade_no=P20261129999999&"), NOW_MS)
            .is_err()
    );
    let mut second_sign = alipay_notify(&channel_key(), &[]);
    second_sign.body.extend_from_slice(b"&sign=AAAA");
    assert!(channel.verify_notify(&second_sign, NOW_MS).is_err());
}

#[test]
fn an_alipay_notify_with_an_empty_field_verifies_as_the_channel_signs_it() {
    // Alipay keeps empty values in a notify's sign content (`passback_params=`).
    let channel = alipay_channel();
    let verified = channel
        .verify_notify(
            &alipay_notify(&channel_key(), &[("passback_params", "")]),
            NOW_MS,
        )
        .expect("an empty field is signed as `name=`");
    assert_eq!(verified.amount_fen, 46000);
}

#[test]
fn every_field_of_a_verified_alipay_notify_is_the_signed_one() {
    // Whatever the form, verified ⇒ what is read equals what was signed.
    let channel = alipay_channel();
    let raw = alipay_notify(
        &channel_key(),
        &[("out_trade_no", "P-READ-ME"), ("total_amount", "0.01")],
    );
    let verified = channel.verify_notify(&raw, NOW_MS).expect("genuine");
    let signed: Vec<(String, String)> = serde_urlencoded::from_bytes(&raw.body).expect("form");
    let signed = |name: &str| {
        signed
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    assert_eq!(
        signed("out_trade_no").as_deref(),
        Some(verified.out_trade_no.as_str())
    );
    assert_eq!(
        signed("notify_id").as_deref(),
        Some(verified.notify_id.as_str())
    );
    assert_eq!(verified.amount_fen, 1);
}

/// The fixture notification with its headers changed by `change`.
fn fixture_wechat_notify(change: impl FnOnce(&mut RawNotify)) -> RawNotify {
    let mut raw = wechat_notify(
        &fixture("wechat-notify.body"),
        "1764417901",
        "NONCEXYZ123",
        &fixture("wechat-notify.sign"),
    );
    change(&mut raw);
    raw
}

#[test]
fn a_wechat_notification_replayed_a_day_later_is_refused() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let genuine = fixture_wechat_notify(|_| {});
    for now_ms in [
        SIGNED_AT_MS + 86_400_000,
        SIGNED_AT_MS + 301_000,
        SIGNED_AT_MS - 301_000,
    ] {
        assert_eq!(
            channel.verify_notify(&genuine, now_ms),
            Err(NotifyRejection::StaleTimestamp),
            "{now_ms}"
        );
    }
    for now_ms in [SIGNED_AT_MS + 299_000, SIGNED_AT_MS - 299_000] {
        assert!(channel.verify_notify(&genuine, now_ms).is_ok(), "{now_ms}");
    }
    assert_eq!(
        NotifyRejection::StaleTimestamp.label(),
        "stale_timestamp",
        "counted under its own label"
    );
}

#[test]
fn a_wechat_notification_under_an_unknown_serial_or_with_repeated_headers_is_refused() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let other_serial = fixture_wechat_notify(|raw| {
        for (name, value) in &mut raw.headers {
            if name == "Wechatpay-Serial" {
                *value = "PUB_KEY_ID_0000000000000000000000000000000001".to_owned();
            }
        }
    });
    assert_eq!(
        channel.verify_notify(&other_serial, SIGNED_AT_MS),
        Err(NotifyRejection::UnknownSerial)
    );
    let no_serial = fixture_wechat_notify(|raw| {
        raw.headers.retain(|(name, _)| name != "Wechatpay-Serial");
    });
    assert!(matches!(
        channel.verify_notify(&no_serial, SIGNED_AT_MS),
        Err(NotifyRejection::Malformed(_))
    ));
    for header in [
        "Wechatpay-Timestamp",
        "Wechatpay-Signature",
        "wechatpay-serial",
    ] {
        let doubled = fixture_wechat_notify(|raw| {
            raw.headers
                .push((header.to_owned(), "1764417901".to_owned()));
        });
        assert_eq!(
            channel.verify_notify(&doubled, SIGNED_AT_MS),
            Err(NotifyRejection::Malformed(
                "a header appears more than once"
            )),
            "{header}"
        );
    }
    let other_scheme = fixture_wechat_notify(|raw| {
        raw.headers
            .push(("Wechatpay-Signature-Type".to_owned(), "SM2".to_owned()));
    });
    assert!(matches!(
        channel.verify_notify(&other_scheme, SIGNED_AT_MS),
        Err(NotifyRejection::Malformed(_))
    ));
}

/// A notification signed by the channel whose body and resource are given as text, so that
/// they can carry a repeated key.
fn signed_wechat_text(transaction: &str, body_of: impl Fn(&str) -> String) -> RawNotify {
    let ciphertext = aes_gcm_encrypt(
        API_V3_KEY.as_bytes(),
        b"abcdefghijkl",
        b"transaction",
        transaction.as_bytes(),
    )
    .expect("encrypt");
    let body = body_of(&ciphertext);
    let signature = channel_key()
        .sign(wechat::notify_message("1764417901", "N3", &body).as_bytes())
        .expect("sign");
    wechat_notify(&body, "1764417901", "N3", &signature)
}

#[test]
fn a_signed_wechat_notification_with_a_repeated_key_is_refused() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let transaction = |extra: &str| {
        format!(
            r#"{{"mchid":"1230000109","appid":"wxd678efh567hg6787","out_trade_no":"P1",{extra}"transaction_id":"4200","trade_state":"SUCCESS","amount":{{"total":1,"currency":"CNY"}}}}"#
        )
    };
    let body = |id: &'static str| {
        move |ciphertext: &str| {
            format!(
                r#"{{"id":"EV-3",{id}"create_time":"2026-11-29T12:05:01+08:00","event_type":"TRANSACTION.SUCCESS","resource_type":"encrypt-resource","resource":{{"algorithm":"AEAD_AES_256_GCM","ciphertext":"{ciphertext}","associated_data":"transaction","nonce":"abcdefghijkl"}}}}"#
            )
        }
    };
    assert!(
        channel
            .verify_notify(
                &signed_wechat_text(&transaction(""), body("")),
                SIGNED_AT_MS
            )
            .is_ok(),
        "the same texts without a repeated key are accepted"
    );
    assert!(matches!(
        channel.verify_notify(
            &signed_wechat_text(&transaction(r#""out_trade_no":"P-OTHER","#), body("")),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::Malformed(_))
    ));
    assert!(matches!(
        channel.verify_notify(
            &signed_wechat_text(&transaction(""), body(r#""id":"EV-OTHER","#)),
            SIGNED_AT_MS
        ),
        Err(NotifyRejection::Malformed(_))
    ));
}

/// A refund notification signed by the channel: `event` over a refund in `status`, encrypted
/// under `original_type`, with `edit` applied to the plaintext first.
fn signed_wechat_refund(
    event: &str,
    status: &str,
    original_type: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> RawNotify {
    let mut refund = serde_json::json!({
        "mchid": "1230000109", "out_trade_no": "P20261129000003",
        "transaction_id": "4200000000202611290000000003", "out_refund_no": "R1",
        "refund_id": "50300000000000000000000001", "refund_status": status,
        "success_time": "2026-11-29T12:10:00+08:00", "user_received_account": "支付用户零钱",
        "amount": {"total": 46000, "refund": 20000, "payer_total": 46000, "payer_refund": 20000},
    });
    edit(&mut refund);
    let ciphertext = aes_gcm_encrypt(
        API_V3_KEY.as_bytes(),
        b"abcdefghijkl",
        original_type.as_bytes(),
        refund.to_string().as_bytes(),
    )
    .expect("encrypt");
    let body = serde_json::json!({
        "id": "EV-R1", "create_time": "2026-11-29T12:10:01+08:00", "event_type": event,
        "resource_type": "encrypt-resource", "summary": "退款成功",
        "resource": {
            "algorithm": "AEAD_AES_256_GCM", "ciphertext": ciphertext,
            "associated_data": original_type, "original_type": original_type,
            "nonce": "abcdefghijkl",
        },
    })
    .to_string();
    let signature = channel_key()
        .sign(wechat::notify_message("1764417901", "N4", &body).as_bytes())
        .expect("sign");
    wechat_notify(&body, "1764417901", "N4", &signature)
}

#[test]
fn wechat_refund_notifications_name_the_refund_and_its_end() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let verified = channel
        .verify_notify(
            &signed_wechat_refund("REFUND.SUCCESS", "SUCCESS", "refund", |_| {}),
            SIGNED_AT_MS,
        )
        .expect("genuine");
    assert_eq!(
        (verified.notify_id.as_str(), verified.out_trade_no.as_str()),
        ("EV-R1", "P20261129000003")
    );
    assert_eq!(
        verified.check_against(Some(46000)),
        Ok(()),
        "the notify carries the trade's amount, not the refund's"
    );
    assert_eq!(
        verified.state,
        NotifiedState::Refund {
            out_refund_no: "R1".to_owned(),
            refund_fen: 20000,
            state: RefundState::Succeeded(Refund {
                channel_refund_no: "50300000000000000000000001".to_owned(),
                refund_fen: 20000,
                refunded_at_ms: wechat::parse_rfc3339("2026-11-29T12:10:00+08:00"),
            }),
        }
    );
    for (event, status, state) in [
        ("REFUND.ABNORMAL", "ABNORMAL", RefundState::Abnormal),
        ("REFUND.CLOSED", "CLOSED", RefundState::Closed),
    ] {
        let verified = channel
            .verify_notify(
                &signed_wechat_refund(event, status, "refund", |refund| {
                    refund["success_time"] = serde_json::Value::Null;
                }),
                SIGNED_AT_MS,
            )
            .expect(event);
        assert!(
            matches!(&verified.state, NotifiedState::Refund { state: decoded, .. } if *decoded == state),
            "{event}: {:?}",
            verified.state
        );
    }
}

#[test]
fn signed_refund_notifications_that_contradict_themselves_or_name_another_merchant_are_refused() {
    let channel = wechat_channel("1230000109", API_V3_KEY);
    let refused = |notify: RawNotify| channel.verify_notify(&notify, SIGNED_AT_MS);
    assert_eq!(
        refused(signed_wechat_refund(
            "REFUND.SUCCESS",
            "SUCCESS",
            "refund",
            |refund| refund["mchid"] = "1230000999".into()
        )),
        Err(NotifyRejection::WrongMerchant)
    );
    for notify in [
        // The event and the refund's status disagree.
        signed_wechat_refund("REFUND.SUCCESS", "CLOSED", "refund", |_| {}),
        // A refund event over a transaction resource.
        signed_wechat_refund("REFUND.SUCCESS", "SUCCESS", "transaction", |_| {}),
        // More refunded than the trade's amount; amounts that are not integers.
        signed_wechat_refund("REFUND.SUCCESS", "SUCCESS", "refund", |refund| {
            refund["amount"]["refund"] = 46001.into();
        }),
        signed_wechat_refund("REFUND.SUCCESS", "SUCCESS", "refund", |refund| {
            refund["amount"]["refund"] = 200.5.into();
        }),
        signed_wechat_refund("REFUND.SUCCESS", "SUCCESS", "refund", |refund| {
            refund["success_time"] = "yesterday".into();
        }),
    ] {
        assert!(
            matches!(refused(notify), Err(NotifyRejection::Malformed(_))),
            "refused as malformed"
        );
    }
}

#[test]
fn an_alipay_trade_notify_carrying_a_refund_is_only_a_hint() {
    let channel = alipay_channel();
    for (status, refund_fee) in [("TRADE_SUCCESS", "100.00"), ("TRADE_CLOSED", "460.00")] {
        let verified = channel
            .verify_notify(
                &alipay_notify(
                    &channel_key(),
                    &[
                        ("trade_status", status),
                        ("refund_fee", refund_fee),
                        ("gmt_refund", "2026-11-29 12:10:00.123"),
                        ("out_biz_no", "R1"),
                    ],
                ),
                NOW_MS,
            )
            .expect("genuine");
        assert_eq!(
            verified.state,
            NotifiedState::Other(status.to_owned()),
            "the refund answers and queries are the truth"
        );
        assert_eq!(verified.check_against(Some(46000)), Ok(()));
    }
}

//! WeChat Pay notifies built by the official Python SDK's rule (`wechatpayv3`, see
//! `interop/wechat/build_notify.py`): UTF-8 JSON with non-ASCII text and an empty field,
//! signed over the raw bytes. The adapter must accept them as they are and refuse them after
//! any change.
//!
//! By default the notify kept in `tests/fixtures/wechatpayv3-notify/` is read; the interop
//! run (`scripts/interop-wechat`) builds a fresh one with the SDK installed and points
//! `MIDENG_INTEROP_WECHAT_NOTIFY_DIR` at it.

use std::path::{Path, PathBuf};

use mideng_channel::adapter::wechat::{PlatformKeySource, WechatChannel, WechatConfig};
use mideng_channel::adapter::{Channel, NotifiedState, NotifyRejection, RawNotify};
use mideng_channel::keys::{PrivateKey, PublicKey};

const PLATFORM_SERIAL: &str = "PUB_KEY_ID_0112340000000000000000000000000001";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The SDK-built notify: its headers in order, and its raw body.
fn sdk_notify() -> RawNotify {
    let directory = std::env::var_os("MIDENG_INTEROP_WECHAT_NOTIFY_DIR")
        .map_or_else(|| fixtures().join("wechatpayv3-notify"), PathBuf::from);
    eprintln!("the SDK-built notify in {}", directory.display());
    let headers: Vec<(String, String)> =
        serde_json::from_str(&read(&directory.join("headers.json"))).expect("headers.json");
    RawNotify {
        // As the service hands them over: names lower-case.
        headers: headers
            .into_iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value))
            .collect(),
        body: read(&directory.join("body.json")).into_bytes(),
    }
}

fn channel() -> WechatChannel {
    WechatChannel::new(WechatConfig {
        base_url: "http://127.0.0.1:1".to_owned(),
        mchid: "1230000109".to_owned(),
        appid: "wxd678efh567hg6787".to_owned(),
        merchant_serial: "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
        merchant_key: PrivateKey::from_pem(&read(&fixtures().join("merchant-private.pem")))
            .expect("merchant key"),
        platform_keys: PlatformKeySource::PublicKey {
            key: PublicKey::from_pem(&read(&fixtures().join("channel-public.pem")))
                .expect("platform key"),
            serial: PLATFORM_SERIAL.to_owned(),
        },
        api_v3_key: "0123456789abcdefghijklmnopqrstuv".to_owned(),
        notify_url: "http://127.0.0.1:8080/v1/channels/wechat/notify".to_owned(),
    })
    .expect("adapter")
}

/// Our clock: the moment the notify was signed, so that its age never matters here.
fn signed_at_ms(notify: &RawNotify) -> i64 {
    notify
        .headers
        .iter()
        .find(|(name, _)| name == "wechatpay-timestamp")
        .map(|(_, value)| value.parse::<i64>().expect("seconds"))
        .expect("a timestamp")
        * 1000
}

#[test]
fn a_notify_built_by_the_sdk_with_non_ascii_and_empty_fields_is_accepted() {
    let notify = sdk_notify();
    assert!(
        std::str::from_utf8(&notify.body)
            .expect("UTF-8")
            .contains("支付成功"),
        "the body carries non-ASCII text as UTF-8, not as \\u escapes"
    );
    let verified = channel()
        .verify_notify(&notify, signed_at_ms(&notify))
        .expect("the adapter accepts what the SDK built");
    assert_eq!(verified.notify_id, "EV-2026120112050007");
    assert_eq!(verified.out_trade_no, "P20261201000007");
    assert_eq!(verified.amount_fen, 4600);
    assert!(
        matches!(&verified.state, NotifiedState::Paid(payment) if payment.channel_trade_no == "4200000000202612010000000007")
    );
}

#[test]
fn a_notify_built_by_the_sdk_is_refused_after_any_change() {
    let genuine = sdk_notify();
    let now_ms = signed_at_ms(&genuine);
    let channel = channel();
    let body = String::from_utf8(genuine.body.clone()).expect("UTF-8");

    let mut other_text = genuine.clone();
    other_text.body = body.replacen("支付成功", "支付失败", 1).into_bytes();
    assert_ne!(other_text.body, genuine.body);
    assert_eq!(
        channel.verify_notify(&other_text, now_ms),
        Err(NotifyRejection::BadSignature),
        "one non-ASCII character changed"
    );

    let mut escaped = genuine.clone();
    escaped.body = body
        .replacen("支付成功", "\\u652f\\u4ed8\\u6210\\u529f", 1)
        .into_bytes();
    assert_eq!(
        channel.verify_notify(&escaped, now_ms),
        Err(NotifyRejection::BadSignature),
        "the same text as JSON escapes is other bytes: the signature covers bytes"
    );

    for (name, change) in [
        ("wechatpay-nonce", "another-nonce"),
        ("wechatpay-timestamp", "shifted"),
    ] {
        let mut changed = genuine.clone();
        for (header, value) in &mut changed.headers {
            if header == name {
                *value = if change == "shifted" {
                    (now_ms / 1000 + 1).to_string()
                } else {
                    change.to_owned()
                };
            }
        }
        assert_eq!(
            channel.verify_notify(&changed, now_ms),
            Err(NotifyRejection::BadSignature),
            "{name} changed"
        );
    }

    let mut other_serial = genuine.clone();
    for (header, value) in &mut other_serial.headers {
        if header == "wechatpay-serial" {
            *value = "PUB_KEY_ID_0112340000000000000000000000000002".to_owned();
        }
    }
    assert_eq!(
        channel.verify_notify(&other_serial, now_ms),
        Err(NotifyRejection::UnknownSerial)
    );
    assert!(
        channel.verify_notify(&genuine, now_ms).is_ok(),
        "the genuine one still passes"
    );
}

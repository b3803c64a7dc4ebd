//! WeChat Pay notify verification under pollution: a genuine notification, encrypted and
//! signed once with the (fixture) platform key, with arbitrary headers added and arbitrary
//! bytes around its body. Property: whenever the adapter verifies the result, what it reads is
//! the genuine transaction. Arbitrary bodies and headers alone must never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mideng_channel::adapter::wechat::{PlatformKeySource, WechatChannel, WechatConfig};
use mideng_channel::adapter::{Channel, RawNotify};
use mideng_channel::keys::{PrivateKey, aes_gcm_encrypt};
use mideng_channel::wechat;

const CHANNEL_KEY: &str = include_str!("../../crates/mideng-channel/tests/fixtures/channel-private.pem");
const MERCHANT_KEY: &str = include_str!("../../crates/mideng-channel/tests/fixtures/merchant-private.pem");
const API_V3_KEY: &str = "0123456789abcdefghijklmnopqrstuv";
const SERIAL: &str = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1";
const SIGNED_AT_SECS: i64 = 1_764_417_901;

struct Fixture {
    channel: WechatChannel,
    headers: Vec<(String, String)>,
    body: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let channel_key = PrivateKey::from_pem(CHANNEL_KEY).expect("fixture key");
        let channel = WechatChannel::new(WechatConfig {
            base_url: "http://127.0.0.1:1".to_owned(),
            mchid: "1230000109".to_owned(),
            appid: "wxd678efh567hg6787".to_owned(),
            merchant_serial: "MERCHANT".to_owned(),
            merchant_key: PrivateKey::from_pem(MERCHANT_KEY).expect("fixture key"),
            platform_keys: PlatformKeySource::PublicKey {
                key: channel_key.public_key(),
                serial: SERIAL.to_owned(),
            },
            api_v3_key: API_V3_KEY.to_owned(),
            notify_url: "http://127.0.0.1:1/notify".to_owned(),
        })
        .expect("adapter");
        let transaction = r#"{"mchid":"1230000109","appid":"wxd678efh567hg6787","out_trade_no":"P-GENUINE-2","transaction_id":"4200","trade_state":"SUCCESS","amount":{"total":1,"currency":"CNY"}}"#;
        let ciphertext = aes_gcm_encrypt(
            API_V3_KEY.as_bytes(),
            b"abcdefghijkl",
            b"transaction",
            transaction.as_bytes(),
        )
        .expect("encrypt");
        let body = format!(
            r#"{{"id":"EV-GENUINE","create_time":"2026-11-29T12:05:01+08:00","event_type":"TRANSACTION.SUCCESS","resource_type":"encrypt-resource","resource":{{"algorithm":"AEAD_AES_256_GCM","ciphertext":"{ciphertext}","associated_data":"transaction","nonce":"abcdefghijkl"}}}}"#
        );
        let timestamp = SIGNED_AT_SECS.to_string();
        let signature = channel_key
            .sign(wechat::notify_message(&timestamp, "NONCE", &body).as_bytes())
            .expect("sign");
        let headers = vec![
            (wechat::HEADER_TIMESTAMP.to_owned(), timestamp),
            (wechat::HEADER_NONCE.to_owned(), "NONCE".to_owned()),
            (wechat::HEADER_SIGNATURE.to_owned(), signature),
            (wechat::HEADER_SERIAL.to_owned(), SERIAL.to_owned()),
        ];
        Fixture { channel, headers, body }
    })
}

const HEADER_NAMES: [&str; 5] = [
    wechat::HEADER_TIMESTAMP,
    wechat::HEADER_NONCE,
    wechat::HEADER_SIGNATURE,
    wechat::HEADER_SERIAL,
    wechat::HEADER_SIGNATURE_TYPE,
];

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    let now_ms = SIGNED_AT_SECS * 1000;
    let _ = fixture.channel.verify_notify(
        &RawNotify { headers: fixture.headers.clone(), body: data.to_vec() },
        now_ms,
    );
    // First byte: which header to add (or none) and where to cut the rest into a prefix and
    // a suffix of the genuine body; the header's value is the prefix as text.
    let Some((&control, rest)) = data.split_first() else { return };
    let cut = usize::from(control >> 3).min(rest.len());
    let (prefix, suffix) = rest.split_at(cut);
    let mut headers = fixture.headers.clone();
    if let Some(name) = HEADER_NAMES.get(usize::from(control & 0x07)) {
        headers.push(((*name).to_owned(), String::from_utf8_lossy(prefix).into_owned()));
    }
    let mut body = prefix.to_vec();
    body.extend_from_slice(fixture.body.as_bytes());
    body.extend_from_slice(suffix);
    if let Ok(verified) = fixture.channel.verify_notify(&RawNotify { headers, body }, now_ms) {
        assert_eq!(verified.out_trade_no, "P-GENUINE-2");
        assert_eq!(verified.notify_id, "EV-GENUINE");
        assert_eq!(verified.amount_fen, 1);
    }
});

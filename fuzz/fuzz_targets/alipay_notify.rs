//! Alipay notify verification under pollution: a genuine notify, signed once by the channel's
//! (fixture) key, with arbitrary bytes put before and after it. Property: whenever the adapter
//! verifies the result, every field it reads is the genuine one — the signature can never
//! vouch for a value nobody signed. Arbitrary bodies alone must never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mideng_channel::adapter::alipay::{AlipayApi, AlipayChannel, AlipayConfig};
use mideng_channel::adapter::{Channel, NotifiedState, RawNotify};
use mideng_channel::alipay;
use mideng_channel::keys::PrivateKey;

const CHANNEL_KEY: &str = include_str!("../../crates/mideng-channel/tests/fixtures/channel-private.pem");
const MERCHANT_KEY: &str = include_str!("../../crates/mideng-channel/tests/fixtures/merchant-private.pem");
const NOW_MS: i64 = 1_764_417_901_000;

const GENUINE: [(&str, &str); 10] = [
    ("app_id", "2021000000000001"),
    ("notify_id", "genuine-notify-0001"),
    ("notify_time", "2026-11-29 12:05:01"),
    ("notify_type", "trade_status_sync"),
    ("out_trade_no", "P-GENUINE-1"),
    ("passback_params", ""),
    ("total_amount", "0.01"),
    ("trade_no", "2026112922001400000000000001"),
    ("trade_status", "TRADE_SUCCESS"),
    ("sign_type", "RSA2"),
];

struct Fixture {
    channel: AlipayChannel,
    body: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let channel_key = PrivateKey::from_pem(CHANNEL_KEY).expect("fixture key");
        let merchant_key = PrivateKey::from_pem(MERCHANT_KEY).expect("fixture key");
        let channel = AlipayChannel::new(AlipayConfig {
            gateway_url: "http://127.0.0.1:1/gateway.do".to_owned(),
            api: AlipayApi::Gateway,
            app_id: "2021000000000001".to_owned(),
            seller_id: None,
            merchant_key,
            gateway_public_key: channel_key.public_key(),
            notify_url: "http://127.0.0.1:1/notify".to_owned(),
        })
        .expect("adapter");
        let signature = channel_key
            .sign(alipay::notify_sign_content(GENUINE).as_bytes())
            .expect("sign");
        let mut fields = GENUINE.to_vec();
        fields.push(("sign", &signature));
        let body = serde_urlencoded::to_string(&fields).expect("form");
        Fixture { channel, body }
    })
}

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    // Arbitrary bodies: refused or verified, never a panic.
    let _ = fixture.channel.verify_notify(
        &RawNotify { headers: Vec::new(), body: data.to_vec() },
        NOW_MS,
    );
    // The genuine notify between two arbitrary pieces: the first byte says where to cut.
    let Some((&cut, rest)) = data.split_first() else { return };
    let cut = usize::from(cut).min(rest.len());
    let (prefix, suffix) = rest.split_at(cut);
    let mut body = prefix.to_vec();
    body.extend_from_slice(fixture.body.as_bytes());
    body.extend_from_slice(suffix);
    if let Ok(verified) = fixture
        .channel
        .verify_notify(&RawNotify { headers: Vec::new(), body }, NOW_MS)
    {
        assert_eq!(verified.out_trade_no, "P-GENUINE-1");
        assert_eq!(verified.notify_id, "genuine-notify-0001");
        assert_eq!(verified.amount_fen, 1);
        match verified.state {
            NotifiedState::Paid(payment) => {
                assert_eq!(payment.channel_trade_no, "2026112922001400000000000001")
            }
            other => panic!("verified a state nobody signed: {other:?}"),
        }
    }
});

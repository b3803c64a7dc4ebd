//! Notifies as the channels send them, built by the attacker: the genuine ones of its own
//! charged payments (signed with the channel's key, which the storm holds), and the forgeries
//! made from them. Pure: every function takes the facts and keys it needs and returns bytes.

use anyhow::Context;
use mideng_channel::keys::{PrivateKey, aes_gcm_encrypt};
use mideng_channel::{alipay, money, wechat};
use mideng_sim::{MerchantKeys, SimConfig};
use serde_json::json;

/// The keys the attacker holds: the channel's (to build genuine notifies of its own
/// payments, as the channel would send them again) and the merchant's (a wrong key that a
/// careless verifier might accept).
#[derive(Clone)]
pub struct AttackerKeys {
    pub(super) alipay_app_id: String,
    pub(super) alipay_channel: PrivateKey,
    pub(super) alipay_merchant: PrivateKey,
    pub(super) wechat_mchid: String,
    pub(super) wechat_appid: String,
    pub(super) wechat_platform: PrivateKey,
    pub(super) wechat_merchant: PrivateKey,
    pub(super) wechat_serial: String,
    pub(super) wechat_api_v3_key: String,
}

impl std::fmt::Debug for AttackerKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AttackerKeys")
            .field("alipay_app_id", &self.alipay_app_id)
            .field("wechat_mchid", &self.wechat_mchid)
            .finish_non_exhaustive()
    }
}

impl AttackerKeys {
    /// From the simulator's identity.
    pub fn of(config: &SimConfig, merchant: &MerchantKeys) -> Self {
        Self {
            alipay_app_id: config.alipay_app_id.clone(),
            alipay_channel: config.alipay_gateway_key.clone(),
            alipay_merchant: merchant.alipay_private.clone(),
            wechat_mchid: config.wechat_mchid.clone(),
            wechat_appid: config.wechat_appid.clone(),
            wechat_platform: config.wechat_platform_key.clone(),
            wechat_merchant: merchant.wechat_private.clone(),
            wechat_serial: config.wechat_platform_serial.clone(),
            wechat_api_v3_key: config.wechat_api_v3_key.clone(),
        }
    }
}

/// A trade's facts, as a notify reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TradeFacts {
    /// `out_trade_no`.
    pub out_trade_no: String,
    /// The channel's trade number (Alipay `trade_no`, WeChat `transaction_id`).
    pub trade_no: String,
    /// Fen.
    pub amount_fen: i64,
    /// The notify's id (Alipay `notify_id`, WeChat notification `id`).
    pub notify_id: String,
    /// When the buyer paid, Unix ms.
    pub paid_at_ms: i64,
}

/// Alipay's success notify for `trade`, with the channel's fields, signed with `key`; the form
/// body.
pub fn alipay_success(
    keys: &AttackerKeys,
    key: &PrivateKey,
    trade: &TradeFacts,
    sent_at_ms: i64,
) -> anyhow::Result<String> {
    let amount = money::fen_to_yuan(trade.amount_fen).context("amount out of range")?;
    let paid = alipay::format_timestamp(trade.paid_at_ms);
    let fields: [(&str, String); 14] = [
        ("notify_type", "trade_status_sync".to_owned()),
        ("notify_id", trade.notify_id.clone()),
        ("notify_time", alipay::format_timestamp(sent_at_ms)),
        ("app_id", keys.alipay_app_id.clone()),
        ("charset", "utf-8".to_owned()),
        ("version", "1.0".to_owned()),
        ("trade_no", trade.trade_no.clone()),
        ("out_trade_no", trade.out_trade_no.clone()),
        ("trade_status", alipay::TRADE_SUCCESS.to_owned()),
        ("total_amount", amount.clone()),
        ("receipt_amount", amount.clone()),
        ("buyer_pay_amount", amount),
        ("gmt_create", paid.clone()),
        ("gmt_payment", paid),
    ];
    let content =
        alipay::notify_sign_content(fields.iter().map(|(name, value)| (*name, value.as_str())));
    let signature = key
        .sign(content.as_bytes())
        .map_err(|error| anyhow::anyhow!("signing a notify: {error}"))?;
    let mut form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    form.push(("sign", &signature));
    form.push(("sign_type", "RSA2"));
    Ok(serde_urlencoded::to_string(&form)?)
}

/// WeChat Pay's success notification for `trade`: the transaction encrypted with the API v3
/// key under `nonce` (12 characters), the headers signed with `key` at `signed_at_secs` under
/// `serial`; the headers and the body.
pub fn wechat_success(
    keys: &AttackerKeys,
    key: &PrivateKey,
    trade: &TradeFacts,
    signed_at_secs: i64,
    serial: &str,
    nonce: &str,
) -> anyhow::Result<(Vec<(String, String)>, String)> {
    let transaction = json!({
        "mchid": keys.wechat_mchid,
        "appid": keys.wechat_appid,
        "out_trade_no": trade.out_trade_no,
        "transaction_id": trade.trade_no,
        "trade_type": "NATIVE",
        "trade_state": wechat::STATE_SUCCESS,
        "trade_state_desc": "支付成功",
        "bank_type": "OTHERS",
        "attach": "",
        "success_time": wechat::format_rfc3339(trade.paid_at_ms),
        "amount": {
            "total": trade.amount_fen,
            "payer_total": trade.amount_fen,
            "currency": "CNY",
            "payer_currency": "CNY",
        },
    });
    let ciphertext = aes_gcm_encrypt(
        keys.wechat_api_v3_key.as_bytes(),
        nonce.as_bytes(),
        wechat::TRANSACTION_ASSOCIATED_DATA.as_bytes(),
        transaction.to_string().as_bytes(),
    )
    .map_err(|error| anyhow::anyhow!("encrypting a notification: {error}"))?;
    let notification = wechat::Notification {
        id: trade.notify_id.clone(),
        create_time: wechat::format_rfc3339(signed_at_secs.saturating_mul(1000)),
        event_type: wechat::EVENT_TRANSACTION_SUCCESS.to_owned(),
        resource_type: wechat::RESOURCE_TYPE_ENCRYPTED.to_owned(),
        summary: "支付成功".to_owned(),
        resource: wechat::Resource {
            algorithm: wechat::RESOURCE_ALGORITHM.to_owned(),
            ciphertext,
            associated_data: wechat::TRANSACTION_ASSOCIATED_DATA.to_owned(),
            nonce: nonce.to_owned(),
            original_type: Some(wechat::TRANSACTION_ASSOCIATED_DATA.to_owned()),
        },
    };
    let body = serde_json::to_string(&notification)?;
    let timestamp = signed_at_secs.to_string();
    // The header's nonce only makes the signed message unique; the resource's will do.
    let header_nonce = nonce.to_owned();
    let signature = key
        .sign(wechat::notify_message(&timestamp, &header_nonce, &body).as_bytes())
        .map_err(|error| anyhow::anyhow!("signing a notification: {error}"))?;
    let headers = vec![
        (wechat::HEADER_TIMESTAMP.to_owned(), timestamp),
        (wechat::HEADER_NONCE.to_owned(), header_nonce),
        (wechat::HEADER_SIGNATURE.to_owned(), signature),
        (wechat::HEADER_SERIAL.to_owned(), serial.to_owned()),
        (
            wechat::HEADER_SIGNATURE_TYPE.to_owned(),
            wechat::AUTHORIZATION_SCHEME.to_owned(),
        ),
    ];
    Ok((headers, body))
}

/// `fields` (already form-encoded, `name=value&…`) added before the genuine form, or after it.
pub fn polluted(genuine: &str, fields: &str, append: bool) -> String {
    if append {
        format!("{genuine}&{fields}")
    } else {
        format!("{fields}&{genuine}")
    }
}

/// The fields that retarget a genuine Alipay notify at `victim`: its number, its amount, a
/// fresh notify id and trade number, and with `closed` a `TRADE_CLOSED` status.
pub fn retarget_fields(
    victim_no: &str,
    victim_amount_fen: i64,
    fresh: &str,
    closed: bool,
) -> anyhow::Result<String> {
    let amount = money::fen_to_yuan(victim_amount_fen).context("amount out of range")?;
    let mut fields = vec![
        ("out_trade_no", victim_no.to_owned()),
        ("total_amount", amount),
        ("notify_id", fresh.to_owned()),
    ];
    if closed {
        fields.insert(0, ("trade_status", alipay::TRADE_CLOSED.to_owned()));
    } else {
        fields.push(("trade_no", format!("2099{fresh}")));
    }
    Ok(serde_urlencoded::to_string(&fields)?)
}

#[cfg(test)]
mod tests {
    use mideng_channel::adapter::{Channel, NotifiedState, RawNotify};

    use super::super::{STALE_SECS, UNKNOWN_SERIAL};
    use super::*;

    fn fixture(name: &str) -> PrivateKey {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../mideng-channel/tests/fixtures")
            .join(name);
        let pem = std::fs::read_to_string(&path).expect("fixture key");
        PrivateKey::from_pem(&pem).expect("fixture key")
    }

    fn identity() -> (SimConfig, MerchantKeys) {
        SimConfig::with_keys(
            fixture("merchant-private.pem"),
            fixture("channel-private.pem"),
        )
    }

    fn trade(number: &str) -> TradeFacts {
        TradeFacts {
            out_trade_no: number.to_owned(),
            trade_no: "2026120122001400000000000001".to_owned(),
            amount_fen: 1,
            notify_id: "genuine0123456789".to_owned(),
            paid_at_ms: mideng::clock::now_ms(),
        }
    }

    fn raw(body: &str, headers: Vec<(String, String)>) -> RawNotify {
        RawNotify {
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    /// The attacker's genuine notifies are what the channel sends (the adapters take them),
    /// and each attack built on them fails at the adapter for the reason the report expects:
    /// otherwise the storm's refusals would prove nothing.
    #[test]
    fn genuine_notifies_verify_and_every_forgery_fails_for_its_reason() {
        let (config, merchant) = identity();
        let keys = AttackerKeys::of(&config, &merchant);
        // The merchant's adapters, as the service builds them (no request is made).
        let (alipay, wechat) = mideng_sim::merchant_channels(
            &config,
            &merchant,
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
        )
        .expect("adapters");
        let now_ms = mideng::clock::now_ms();
        let own = trade("OWN1");

        let genuine = alipay_success(&keys, &keys.alipay_channel, &own, now_ms).expect("form");
        let verified = alipay
            .verify_notify(&raw(&genuine, Vec::new()), now_ms)
            .expect("the channel's own notify verifies");
        assert_eq!(verified.out_trade_no, "OWN1");
        assert!(matches!(verified.state, NotifiedState::Paid(_)));

        for closed in [false, true] {
            let fields = retarget_fields("VICTIM1", 888_800, "fresh1", closed).expect("fields");
            for append in [false, true] {
                let attack = polluted(&genuine, &fields, append);
                let refused = alipay
                    .verify_notify(&raw(&attack, Vec::new()), now_ms)
                    .expect_err("a repeated name is refused");
                assert_eq!(refused.label(), "malformed", "{attack}");
            }
        }

        let forged =
            alipay_success(&keys, &keys.alipay_merchant, &trade("VICTIM1"), now_ms).expect("form");
        let refused = alipay
            .verify_notify(&raw(&forged, Vec::new()), now_ms)
            .expect_err("the merchant's key is not the channel's");
        assert_eq!(refused.label(), "bad_signature");

        let now = now_ms.div_euclid(1000);
        let (headers, body) = wechat_success(
            &keys,
            &keys.wechat_platform,
            &trade("OWN2"),
            now,
            &keys.wechat_serial,
            "abcdefghijkl",
        )
        .expect("notification");
        let verified = wechat
            .verify_notify(&raw(&body, headers), now_ms)
            .expect("the platform's own notification verifies");
        assert_eq!(verified.notify_id, "genuine0123456789");
        for (key, signed_at, serial, label) in [
            (
                &keys.wechat_platform,
                now - STALE_SECS,
                keys.wechat_serial.as_str(),
                "stale_timestamp",
            ),
            (&keys.wechat_platform, now, UNKNOWN_SERIAL, "unknown_serial"),
            (
                &keys.wechat_merchant,
                now,
                keys.wechat_serial.as_str(),
                "bad_signature",
            ),
        ] {
            let (headers, body) = wechat_success(
                &keys,
                key,
                &trade("VICTIM2"),
                signed_at,
                serial,
                "abcdefghijkl",
            )
            .expect("notification");
            let refused = wechat
                .verify_notify(&raw(&body, headers), now_ms)
                .expect_err("refused");
            assert_eq!(refused.label(), label);
        }
    }
}

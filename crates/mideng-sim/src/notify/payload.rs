//! What each channel's notify says about a trade event, fixed at the moment of the event.
//!
//! - Alipay: form parameters (`trade_status_sync`) for TRADE_SUCCESS, TRADE_FINISHED and
//!   TRADE_CLOSED (an unpaid close, or a full refund with `refund_fee`), with the fields the
//!   real channel sends: `seller_id`, `auth_app_id`, the buyer's masked `buyer_logon_id`, the
//!   amounts (`invoice_amount`, `point_amount`) and `fund_bill_list` as a JSON string.
//!   `notify_time` and `sign` are added at each delivery.
//! - WeChat Pay: TRANSACTION.SUCCESS only, the transaction AES-256-GCM encrypted with the API v3
//!   key under a fresh 12-character nonce and associated data `transaction`. The body stays the
//!   same on every delivery; the headers are signed anew each time.

use mideng_channel::keys::{aes_gcm_encrypt, random_nonce};
use mideng_channel::{ChannelKind, alipay, money, wechat};

use super::queue::{NewNotify, Payload};
use crate::config::SimConfig;
use crate::trades::{Trade, TradeEventKind};

/// The buyer's id the simulated channels report.
const ALIPAY_BUYER_ID: &str = "2088000000000001";
/// The buyer's account as Alipay shows it to merchants: masked in the middle.
const ALIPAY_BUYER_LOGON_ID: &str = "138****0001";
/// Where the simulated buyer's money comes from (`fund_bill_list`'s `fundChannel`).
const ALIPAY_FUND_CHANNEL: &str = "ALIPAYACCOUNT";
/// The payer's openid the simulated channel reports, in notifies and in query answers alike.
pub(crate) const WECHAT_PAYER_OPENID: &str = "oSimulatedPayer000000000000";

/// The notify for `kind` on `trade`, if the channel sends one and the trade has a notify URL.
pub(crate) fn notify_for_event(
    config: &SimConfig,
    trade: &Trade,
    kind: TradeEventKind,
    now_ms: i64,
) -> Option<NewNotify> {
    let url = trade.notify_url.clone()?;
    let built = match trade.channel {
        ChannelKind::Alipay => alipay_notify(config, trade, kind),
        ChannelKind::Wechat => wechat_notify(config, trade, kind, now_ms),
    };
    match built {
        Ok(Some((notify_id, event, payload))) => Some(NewNotify {
            channel: trade.channel,
            out_trade_no: trade.out_trade_no.clone(),
            notify_id,
            event,
            url,
            payload,
        }),
        Ok(None) => None,
        Err(reason) => {
            // Amounts and keys were validated when the trade and the simulator were created, so
            // this is a bug; the notify is lost and the log says why.
            tracing::error!(out_trade_no = %trade.out_trade_no, reason, "notify could not be built");
            None
        }
    }
}

type Built = Option<(String, &'static str, Payload)>;

fn alipay_notify(
    config: &SimConfig,
    trade: &Trade,
    kind: TradeEventKind,
) -> Result<Built, &'static str> {
    let trade_no = trade
        .channel_trade_id
        .clone()
        .ok_or("an Alipay trade without trade_no")?;
    let amount = money::fen_to_yuan(trade.terms.amount_fen).map_err(|_| "amount out of range")?;
    let status = match kind {
        TradeEventKind::Paid => alipay::TRADE_SUCCESS,
        TradeEventKind::Finished => alipay::TRADE_FINISHED,
        TradeEventKind::Closed | TradeEventKind::Refunded => alipay::TRADE_CLOSED,
    };
    let notify_id = random_nonce(34).to_lowercase();
    let timestamp = |at_ms: Option<i64>| at_ms.map(alipay::format_timestamp);
    let mut params: Vec<(&str, Option<String>)> = vec![
        ("notify_type", Some("trade_status_sync".to_owned())),
        ("notify_id", Some(notify_id.clone())),
        ("app_id", Some(config.alipay_app_id.clone())),
        ("auth_app_id", Some(config.alipay_app_id.clone())),
        ("seller_id", Some(config.alipay_seller_id.clone())),
        ("charset", Some("utf-8".to_owned())),
        ("version", Some("1.0".to_owned())),
        ("sign_type", Some("RSA2".to_owned())),
        ("trade_no", Some(trade_no)),
        ("out_trade_no", Some(trade.out_trade_no.clone())),
        ("trade_status", Some(status.to_owned())),
        ("total_amount", Some(amount.clone())),
        ("subject", Some(trade.terms.subject.clone())),
        ("gmt_create", timestamp(trade.scanned_at_ms)),
    ];
    if kind != TradeEventKind::Closed {
        // The whole amount came from the buyer's balance: nothing in points, all invoiceable.
        // The notify spells the fund channel's key `fundChannel`, unlike the query answer.
        let fund_bill_list = serde_json::json!([
            { "amount": amount, "fundChannel": ALIPAY_FUND_CHANNEL }
        ])
        .to_string();
        params.extend([
            ("buyer_id", Some(ALIPAY_BUYER_ID.to_owned())),
            ("buyer_logon_id", Some(ALIPAY_BUYER_LOGON_ID.to_owned())),
            ("receipt_amount", Some(amount.clone())),
            ("buyer_pay_amount", Some(amount.clone())),
            ("invoice_amount", Some(amount.clone())),
            ("point_amount", Some("0.00".to_owned())),
            ("fund_bill_list", Some(fund_bill_list)),
            ("gmt_payment", timestamp(trade.paid_at_ms)),
        ]);
    }
    match kind {
        TradeEventKind::Paid => {}
        TradeEventKind::Closed => params.push(("gmt_close", timestamp(trade.closed_at_ms))),
        TradeEventKind::Finished => params.push(("gmt_close", timestamp(trade.finished_at_ms))),
        TradeEventKind::Refunded => params.extend([
            ("refund_fee", Some(amount)),
            ("gmt_refund", timestamp(trade.refunded_at_ms)),
            ("gmt_close", timestamp(trade.refunded_at_ms)),
            ("out_biz_no", trade.refund_number.clone()),
        ]),
    }
    let params = params
        .into_iter()
        .filter_map(|(key, value)| value.map(|value| (key.to_owned(), value)))
        .collect();
    Ok(Some((notify_id, status, Payload::AlipayForm(params))))
}

fn wechat_notify(
    config: &SimConfig,
    trade: &Trade,
    kind: TradeEventKind,
    now_ms: i64,
) -> Result<Built, &'static str> {
    // WeChat Pay notifies successful payments only.
    if kind != TradeEventKind::Paid {
        return Ok(None);
    }
    let transaction = serde_json::json!({
        "mchid": config.wechat_mchid,
        "appid": config.wechat_appid,
        "out_trade_no": trade.out_trade_no,
        "transaction_id": trade.channel_trade_id,
        "trade_type": "NATIVE",
        "trade_state": wechat::STATE_SUCCESS,
        "trade_state_desc": "支付成功",
        "bank_type": "OTHERS",
        "attach": "",
        "success_time": trade.paid_at_ms.map(wechat::format_rfc3339),
        "payer": { "openid": WECHAT_PAYER_OPENID },
        "amount": {
            "total": trade.terms.amount_fen,
            "payer_total": trade.terms.amount_fen,
            "currency": "CNY",
            "payer_currency": "CNY",
        },
    });
    let nonce = random_nonce(12);
    let ciphertext = aes_gcm_encrypt(
        config.wechat_api_v3_key.as_bytes(),
        nonce.as_bytes(),
        wechat::TRANSACTION_ASSOCIATED_DATA.as_bytes(),
        transaction.to_string().as_bytes(),
    )
    .map_err(|_| "encryption failed")?;
    let notify_id = format!("EV-{}", random_nonce(24));
    let notification = wechat::Notification {
        id: notify_id.clone(),
        create_time: wechat::format_rfc3339(now_ms),
        event_type: wechat::EVENT_TRANSACTION_SUCCESS.to_owned(),
        resource_type: wechat::RESOURCE_TYPE_ENCRYPTED.to_owned(),
        summary: "支付成功".to_owned(),
        resource: wechat::Resource {
            algorithm: wechat::RESOURCE_ALGORITHM.to_owned(),
            ciphertext,
            associated_data: wechat::TRANSACTION_ASSOCIATED_DATA.to_owned(),
            nonce,
            original_type: Some(wechat::TRANSACTION_ASSOCIATED_DATA.to_owned()),
        },
    };
    let body = serde_json::to_string(&notification).map_err(|_| "serialisation failed")?;
    Ok(Some((
        notify_id,
        wechat::EVENT_TRANSACTION_SUCCESS,
        Payload::WechatJson(body),
    )))
}

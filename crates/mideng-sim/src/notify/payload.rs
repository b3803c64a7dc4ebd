//! What each channel's notify says about a trade event, fixed at the moment of the event.
//!
//! - Alipay: form parameters (`trade_status_sync`) for TRADE_SUCCESS, TRADE_FINISHED and
//!   TRADE_CLOSED (an unpaid close), with the fields the real channel sends: `seller_id`,
//!   `auth_app_id`, the buyer's masked `buyer_logon_id`, the amounts (`invoice_amount`,
//!   `point_amount`) and `fund_bill_list` as a JSON string. A successful refund is the trade's
//!   notify again — TRADE_SUCCESS after a partial refund, TRADE_CLOSED after the last — with the
//!   refund fields: `refund_fee` (the trade's refunded total), `gmt_refund` and `out_biz_no`
//!   (the refund's `out_request_no`). `notify_time` and `sign` are added at each delivery.
//! - WeChat Pay: TRANSACTION.SUCCESS for a payment, the transaction AES-256-GCM encrypted with
//!   the API v3 key under a fresh 12-character nonce and associated data `transaction`; and
//!   REFUND.SUCCESS, REFUND.ABNORMAL or REFUND.CLOSED when a refund ends, the refund encrypted
//!   the same way under associated data (and `original_type`) `refund`, sent to the refund
//!   request's `notify_url`. The body stays the same on every delivery; the headers are signed
//!   anew each time.

use mideng_channel::keys::{aes_gcm_encrypt, random_nonce};
use mideng_channel::{ChannelKind, alipay, money, wechat};
use serde_json::Value;

use super::queue::{NewNotify, Payload};
use crate::config::SimConfig;
use crate::trades::{RefundStatus, Trade, TradeEventKind, TradeRefund, TradeStatus};

/// The buyer's id the simulated channels report.
pub(crate) const ALIPAY_BUYER_ID: &str = "2088000000000001";
/// The buyer's account as Alipay shows it to merchants: masked in the middle.
pub(crate) const ALIPAY_BUYER_LOGON_ID: &str = "138****0001";
/// Where the simulated buyer's money comes from (`fund_bill_list`'s `fundChannel`).
const ALIPAY_FUND_CHANNEL: &str = "ALIPAYACCOUNT";
/// The payer's openid the simulated channel reports, in notifies and in query answers alike.
pub(crate) const WECHAT_PAYER_OPENID: &str = "oSimulatedPayer000000000000";

/// Where a refund's money went back to: the buyer's WeChat balance, as WeChat Pay names it.
pub(crate) const WECHAT_REFUND_ACCOUNT: &str = "支付用户零钱";

/// The notify for `kind` on `trade`, if the channel sends one and there is a notify URL (a
/// refund's own, else the trade's).
pub(crate) fn notify_for_event(
    config: &SimConfig,
    trade: &Trade,
    kind: &TradeEventKind,
    now_ms: i64,
) -> Option<NewNotify> {
    let refund = match kind {
        TradeEventKind::Refund { out_refund_no } => Some(trade.find_refund(out_refund_no)?),
        TradeEventKind::Paid | TradeEventKind::Closed | TradeEventKind::Finished => None,
    };
    let url = refund
        .and_then(|refund| refund.notify_url.clone())
        .or_else(|| trade.notify_url.clone())?;
    let built = match (trade.channel, refund) {
        (ChannelKind::Alipay, None) => alipay_notify(config, trade, kind, None),
        (ChannelKind::Alipay, Some(refund)) if refund.status == RefundStatus::Success => {
            alipay_notify(config, trade, kind, Some(refund))
        }
        // Alipay tells of money that moved, never of a refund that did not.
        (ChannelKind::Alipay, Some(_)) => Ok(None),
        (ChannelKind::Wechat, None) => wechat_notify(config, trade, kind, now_ms),
        (ChannelKind::Wechat, Some(refund)) => wechat_refund_notify(config, trade, refund, now_ms),
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

/// An Alipay trade notify; `refund` is the successful refund a refund event tells of.
fn alipay_notify(
    config: &SimConfig,
    trade: &Trade,
    kind: &TradeEventKind,
    refund: Option<&TradeRefund>,
) -> Result<Built, &'static str> {
    let trade_no = trade
        .channel_trade_id
        .clone()
        .ok_or("an Alipay trade without trade_no")?;
    let amount = money::fen_to_yuan(trade.terms.amount_fen).map_err(|_| "amount out of range")?;
    let status = match kind {
        TradeEventKind::Paid => alipay::TRADE_SUCCESS,
        TradeEventKind::Finished => alipay::TRADE_FINISHED,
        TradeEventKind::Closed => alipay::TRADE_CLOSED,
        // A refund keeps the trade's status: TRADE_CLOSED once the whole amount went back.
        TradeEventKind::Refund { .. } => match trade.status {
            TradeStatus::Refunded => alipay::TRADE_CLOSED,
            TradeStatus::Finished => alipay::TRADE_FINISHED,
            TradeStatus::Pending | TradeStatus::Paid | TradeStatus::Closed => alipay::TRADE_SUCCESS,
        },
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
    if *kind != TradeEventKind::Closed {
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
    match (kind, refund) {
        (TradeEventKind::Paid, _) => {}
        (TradeEventKind::Closed, _) => {
            params.push(("gmt_close", timestamp(trade.closed_at_ms)));
        }
        (TradeEventKind::Finished, _) => {
            params.push(("gmt_close", timestamp(trade.finished_at_ms)));
        }
        (TradeEventKind::Refund { .. }, None) => return Err("a refund event without its refund"),
        (TradeEventKind::Refund { .. }, Some(refund)) => {
            let refunded =
                money::fen_to_yuan(trade.refunded_fen()).map_err(|_| "refund out of range")?;
            params.extend([
                ("refund_fee", Some(refunded)),
                ("gmt_refund", timestamp(refund.ended_at_ms)),
                ("out_biz_no", Some(refund.out_refund_no.clone())),
            ]);
            if trade.status == TradeStatus::Refunded {
                params.push(("gmt_close", timestamp(trade.refunded_at_ms)));
            }
        }
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
    kind: &TradeEventKind,
    now_ms: i64,
) -> Result<Built, &'static str> {
    // Of a trade's own events, WeChat Pay notifies successful payments only.
    if *kind != TradeEventKind::Paid {
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
    wechat_notification(
        config,
        wechat::EVENT_TRANSACTION_SUCCESS,
        "支付成功",
        wechat::TRANSACTION_ASSOCIATED_DATA,
        &transaction,
        now_ms,
    )
}

/// The notify of a WeChat Pay refund that ended; none while it processes (the channel does not
/// notify PROCESSING).
fn wechat_refund_notify(
    config: &SimConfig,
    trade: &Trade,
    refund: &TradeRefund,
    now_ms: i64,
) -> Result<Built, &'static str> {
    let (event, status, summary) = match refund.status {
        RefundStatus::Processing => return Ok(None),
        RefundStatus::Success => (
            wechat::EVENT_REFUND_SUCCESS,
            wechat::REFUND_STATUS_SUCCESS,
            "退款成功",
        ),
        RefundStatus::Abnormal => (
            wechat::EVENT_REFUND_ABNORMAL,
            wechat::REFUND_STATUS_ABNORMAL,
            "退款异常",
        ),
        RefundStatus::Closed => (
            wechat::EVENT_REFUND_CLOSED,
            wechat::REFUND_STATUS_CLOSED,
            "退款关闭",
        ),
    };
    let succeeded = refund.status == RefundStatus::Success;
    let notice = wechat::RefundNotice {
        mchid: config.wechat_mchid.clone(),
        out_trade_no: trade.out_trade_no.clone(),
        transaction_id: trade.channel_trade_id.clone(),
        out_refund_no: refund.out_refund_no.clone(),
        refund_id: refund.refund_id.clone(),
        refund_status: status.to_owned(),
        success_time: refund
            .ended_at_ms
            .filter(|_| succeeded)
            .map(wechat::format_rfc3339),
        user_received_account: Some(WECHAT_REFUND_ACCOUNT.to_owned()),
        amount: wechat::RefundAmount {
            total: trade.terms.amount_fen,
            refund: refund.amount_fen,
            payer_total: Some(trade.terms.amount_fen),
            payer_refund: Some(refund.amount_fen),
            currency: None,
        },
    };
    let plaintext = serde_json::to_value(&notice).map_err(|_| "serialisation failed")?;
    wechat_notification(
        config,
        event,
        summary,
        wechat::REFUND_ASSOCIATED_DATA,
        &plaintext,
        now_ms,
    )
}

/// A WeChat Pay notification of `event`: `plaintext` encrypted under a fresh nonce with
/// `original_type` as its associated data, and a fresh notification id.
fn wechat_notification(
    config: &SimConfig,
    event: &'static str,
    summary: &str,
    original_type: &str,
    plaintext: &Value,
    now_ms: i64,
) -> Result<Built, &'static str> {
    // A fresh nonce for every resource: GCM under one key must never reuse one.
    let nonce = random_nonce(12);
    let ciphertext = aes_gcm_encrypt(
        config.wechat_api_v3_key.as_bytes(),
        nonce.as_bytes(),
        original_type.as_bytes(),
        plaintext.to_string().as_bytes(),
    )
    .map_err(|_| "encryption failed")?;
    let notify_id = format!("EV-{}", random_nonce(24));
    let notification = wechat::Notification {
        id: notify_id.clone(),
        create_time: wechat::format_rfc3339(now_ms),
        event_type: event.to_owned(),
        resource_type: wechat::RESOURCE_TYPE_ENCRYPTED.to_owned(),
        summary: summary.to_owned(),
        resource: wechat::Resource {
            algorithm: wechat::RESOURCE_ALGORITHM.to_owned(),
            ciphertext,
            associated_data: original_type.to_owned(),
            nonce,
            original_type: Some(original_type.to_owned()),
        },
    };
    let body = serde_json::to_string(&notification).map_err(|_| "serialisation failed")?;
    Ok(Some((notify_id, event, Payload::WechatJson(body))))
}

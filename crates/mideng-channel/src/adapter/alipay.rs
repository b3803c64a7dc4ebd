//! The Alipay adapter: `alipay.trade.precreate`, `query` and `close` through the gateway, and
//! verification of form notifies.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{
    Channel, ChannelError, ChannelKind, CreateTrade, CreatedTrade, NotifiedState, NotifyAnswer,
    NotifyRejection, NotifyVerdict, Payment, RawNotify, TradeState, VerifiedNotify, http_client,
    read_body, transport_error,
};
use crate::alipay::{self as protocol, response_node};
use crate::keys::{PrivateKey, PublicKey};
use crate::money::{fen_to_yuan, yuan_to_fen};
use crate::strict::{Form, StrictError};

/// What the adapter needs to talk to one Alipay app.
#[derive(Clone, Debug)]
pub struct AlipayConfig {
    /// The gateway, e.g. `https://openapi.alipay.com/gateway.do` (or the simulator's).
    pub gateway_url: String,
    /// The merchant's app id.
    pub app_id: String,
    /// The seller (partner) id, checked against notifies that carry one.
    pub seller_id: Option<String>,
    /// The merchant's private key (signs requests).
    pub merchant_key: PrivateKey,
    /// Alipay's public key (verifies responses and notifies).
    pub gateway_public_key: PublicKey,
    /// Where Alipay sends notifies.
    pub notify_url: String,
}

/// The Alipay channel.
#[derive(Clone, Debug)]
pub struct AlipayChannel {
    config: AlipayConfig,
    client: reqwest::Client,
}

fn text(node: &Value, field: &str) -> String {
    node.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl AlipayChannel {
    /// An adapter for `config`.
    pub fn new(config: AlipayConfig) -> Result<Self, ChannelError> {
        Ok(Self {
            config,
            client: http_client()?,
        })
    }

    /// Calls `method` with `biz_content`; the verified response node on code 10000.
    async fn call(&self, method: &str, biz_content: &Value) -> Result<Value, ChannelError> {
        let biz_content = biz_content.to_string();
        let timestamp = protocol::format_timestamp(mideng_now_ms());
        let mut params: Vec<(&str, &str)> = vec![
            ("app_id", &self.config.app_id),
            ("method", method),
            ("format", "JSON"),
            ("charset", "utf-8"),
            ("sign_type", "RSA2"),
            ("timestamp", &timestamp),
            ("version", "1.0"),
            ("notify_url", &self.config.notify_url),
            ("biz_content", &biz_content),
        ];
        let signature = self
            .config
            .merchant_key
            .sign(protocol::request_sign_content(params.iter().copied()).as_bytes())
            .map_err(|error| ChannelError::Invalid(format!("signing: {error}")))?;
        params.push(("sign", &signature));
        let response = self
            .client
            .post(&self.config.gateway_url)
            .form(&params)
            .send()
            .await
            .map_err(|error| transport_error(&error))?;
        if response.status().is_server_error() {
            return Err(ChannelError::OutcomeUnknown(format!(
                "gateway answered {}",
                response.status()
            )));
        }
        let body = read_body(response).await?;
        let (node_text, sign) = response_node(&body, method)
            .map_err(|error| ChannelError::OutcomeUnknown(error.to_string()))?;
        let node: Value = serde_json::from_str(node_text)
            .map_err(|_| ChannelError::OutcomeUnknown("response node is not JSON".to_owned()))?;
        let code = text(&node, "code");
        match sign {
            Some(sign)
                if self
                    .config
                    .gateway_public_key
                    .verify(node_text.as_bytes(), &sign) => {}
            // The gateway leaves some refusals (a bad request signature) unsigned; a refusal
            // changes nothing, so it may be believed. A success must be signed.
            None if code != protocol::CODE_SUCCESS
                && code != protocol::CODE_UNKNOWN
                && !code.is_empty() => {}
            _ => {
                return Err(ChannelError::OutcomeUnknown(
                    "response signature does not verify".to_owned(),
                ));
            }
        }
        let sub_code = text(&node, "sub_code");
        match code.as_str() {
            protocol::CODE_SUCCESS => Ok(node),
            protocol::CODE_UNKNOWN => {
                Err(ChannelError::OutcomeUnknown(format!("{code} {sub_code}")))
            }
            _ if sub_code == protocol::SUB_SYSTEM_ERROR => {
                Err(ChannelError::OutcomeUnknown(format!("{code} {sub_code}")))
            }
            _ => Err(ChannelError::Rejected {
                code,
                sub_code,
                message: text(&node, "sub_msg"),
            }),
        }
    }
}

fn mideng_now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn is_sub_code(error: &ChannelError, wanted: &str) -> bool {
    matches!(error, ChannelError::Rejected { sub_code, .. } if sub_code == wanted)
}

fn trade_state(node: &Value) -> Result<TradeState, ChannelError> {
    let status = text(node, "trade_status");
    Ok(match status.as_str() {
        protocol::TRADE_WAIT_BUYER_PAY => TradeState::Pending,
        protocol::TRADE_SUCCESS | protocol::TRADE_FINISHED => TradeState::Paid(Payment {
            channel_trade_no: text(node, "trade_no"),
            amount_fen: yuan_to_fen(&text(node, "total_amount"))
                .map_err(|error| ChannelError::OutcomeUnknown(format!("query amount: {error}")))?,
            paid_at_ms: protocol::parse_timestamp(&text(node, "send_pay_date")),
        }),
        protocol::TRADE_CLOSED => TradeState::Closed,
        other => {
            return Err(ChannelError::OutcomeUnknown(format!(
                "unknown trade_status {other:?}"
            )));
        }
    })
}

#[async_trait]
impl Channel for AlipayChannel {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Alipay
    }

    async fn create_trade(&self, trade: &CreateTrade) -> Result<CreatedTrade, ChannelError> {
        let amount = fen_to_yuan(trade.amount_fen)
            .map_err(|error| ChannelError::Invalid(error.to_string()))?;
        let node = self
            .call(
                "alipay.trade.precreate",
                &json!({
                    "out_trade_no": trade.out_trade_no,
                    "total_amount": amount,
                    "subject": trade.subject,
                    "time_expire": protocol::format_timestamp(trade.expires_at_ms),
                }),
            )
            .await?;
        Ok(CreatedTrade {
            pay_url: text(&node, "qr_code"),
        })
    }

    async fn query_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError> {
        match self
            .call(
                "alipay.trade.query",
                &json!({ "out_trade_no": out_trade_no }),
            )
            .await
        {
            // A signed answer about another trade is not an answer about this one.
            Ok(node) if text(&node, "out_trade_no") != out_trade_no => Err(
                ChannelError::OutcomeUnknown("query answer names another trade".to_owned()),
            ),
            Ok(node) => trade_state(&node),
            Err(error) if is_sub_code(&error, protocol::SUB_TRADE_NOT_EXIST) => {
                Ok(TradeState::NotFound)
            }
            Err(error) => Err(error),
        }
    }

    async fn close_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError> {
        match self
            .call(
                "alipay.trade.close",
                &json!({ "out_trade_no": out_trade_no }),
            )
            .await
        {
            Ok(_) => Ok(TradeState::Closed),
            Err(error) if is_sub_code(&error, protocol::SUB_TRADE_NOT_EXIST) => {
                Ok(TradeState::NotFound)
            }
            // Paid or already closed: the query says which.
            Err(error) if is_sub_code(&error, protocol::SUB_TRADE_STATUS_ERROR) => {
                self.query_trade(out_trade_no).await
            }
            Err(error) => Err(error),
        }
    }

    fn verify_notify(
        &self,
        notify: &RawNotify,
        _now_ms: i64,
    ) -> Result<VerifiedNotify, NotifyRejection> {
        // One parse, unique names: the signature is verified over this form and every field
        // below is read from it. (Alipay notifies carry no signed timestamp to check freshness
        // against; a replay carries its own notify_id and is caught by deduplication.)
        let form = Form::parse(&notify.body).map_err(|error| match error {
            StrictError::Repeated(_) => NotifyRejection::Malformed("a parameter appears twice"),
            _ => NotifyRejection::Malformed("not a form"),
        })?;
        let signature = form
            .non_empty("sign")
            .ok_or(NotifyRejection::Malformed("no sign"))?;
        if form.get("sign_type").is_some_and(|kind| kind != "RSA2") {
            return Err(NotifyRejection::Malformed("sign_type is not RSA2"));
        }
        let content = protocol::notify_sign_content(form.iter());
        if !self
            .config
            .gateway_public_key
            .verify(content.as_bytes(), signature)
        {
            return Err(NotifyRejection::BadSignature);
        }
        if form.get("app_id") != Some(self.config.app_id.as_str()) {
            return Err(NotifyRejection::WrongMerchant);
        }
        if let (Some(ours), Some(theirs)) = (&self.config.seller_id, form.get("seller_id"))
            && ours != theirs
        {
            return Err(NotifyRejection::WrongMerchant);
        }
        let required =
            |name: &'static str| form.non_empty(name).ok_or(NotifyRejection::Malformed(name));
        let amount_fen = yuan_to_fen(required("total_amount")?)
            .map_err(|_| NotifyRejection::Malformed("total_amount"))?;
        let state = match required("trade_status")? {
            protocol::TRADE_SUCCESS | protocol::TRADE_FINISHED => NotifiedState::Paid(Payment {
                channel_trade_no: required("trade_no")?.to_owned(),
                amount_fen,
                paid_at_ms: form.get("gmt_payment").and_then(protocol::parse_timestamp),
            }),
            protocol::TRADE_CLOSED => NotifiedState::Closed,
            other => NotifiedState::Other(other.to_owned()),
        };
        Ok(VerifiedNotify {
            notify_id: required("notify_id")?.to_owned(),
            out_trade_no: required("out_trade_no")?.to_owned(),
            amount_fen,
            state,
        })
    }

    fn answer(&self, verdict: NotifyVerdict) -> NotifyAnswer {
        // Alipay reads only the body: exactly `success` stops the resends; anything else is
        // sent again on its schedule, whatever the reason.
        NotifyAnswer {
            status: 200,
            content_type: "text/plain",
            body: match verdict {
                NotifyVerdict::Accepted => protocol::NOTIFY_ACK,
                NotifyVerdict::Refused | NotifyVerdict::RetryLater => protocol::NOTIFY_NACK,
            }
            .to_owned(),
        }
    }
}

//! The Alipay adapter: `alipay.trade.precreate`, `query`, `close`, `refund` and
//! `fastpay.refund.query` through `gateway.do` or, with [`AlipayApi::V3`], through OpenAPI v3
//! (`POST /v3/alipay/trade/…`, answers verified over their `alipay-*` signature headers); and
//! verification of form notifies, which are the same for both.
//!
//! A refund is identified by its `out_request_no` (the merchant's `out_refund_no`). Alipay
//! refunds synchronously: `fund_change` `Y` says money moved in that very call. `N` says it did
//! not — a repeat of a refund made before, or one not done yet — and the refund query then says
//! which. A trade notify that carries refund fields (`refund_fee`, `gmt_refund`, `out_biz_no`)
//! is decoded as [`NotifiedState::Other`]: the answers and queries are the truth.
//!
//! The daily bill (`alipay.data.dataservice.bill.downloadurl.query`) goes through `gateway.do`
//! whichever API the trades use; its zip is fetched only from the gateway's origin or Alipay's
//! own `https` hosts.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{
    Channel, ChannelError, ChannelKind, CreateTrade, CreatedTrade, NotifiedState, NotifyAnswer,
    NotifyRejection, NotifyVerdict, Payment, RawNotify, Refund, RefundState, RefundTrade,
    SendTraced as _, TradeState, VerifiedNotify, bills, check_refund, check_refund_numbers,
    http_client, read_body, transport_error,
};
use crate::alipay::{self as protocol, response_node, v3};
use crate::bill::{self, Bill, BillDate};
use crate::keys::{PrivateKey, PublicKey, random_nonce};
use crate::money::{fen_to_yuan, yuan_to_fen};
use crate::strict::{self, Form, StrictError};

/// Which of Alipay's APIs the adapter speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlipayApi {
    /// The open platform's `gateway.do`: form parameters, RSA2 over the sorted parameters,
    /// answers signed inside the body.
    #[default]
    Gateway,
    /// OpenAPI v3: JSON bodies at `/v3/alipay/trade/…` beside `gateway.do` (at the origin of
    /// [`AlipayConfig::gateway_url`]), the `authorization` header, answers signed in headers.
    V3,
}

/// What the adapter needs to talk to one Alipay app.
#[derive(Clone, Debug)]
pub struct AlipayConfig {
    /// The gateway, e.g. `https://openapi.alipay.com/gateway.do` (or the simulator's). With
    /// [`AlipayApi::V3`] the calls go to `/v3/alipay/trade/…` on the same host, in place of
    /// `/gateway.do`.
    pub gateway_url: String,
    /// `gateway.do` or OpenAPI v3.
    pub api: AlipayApi,
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
    /// Where the OpenAPI v3 paths start: `gateway_url` without `/gateway.do`.
    v3_base_url: String,
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
        let trimmed = config.gateway_url.trim_end_matches('/');
        let v3_base_url = trimmed
            .strip_suffix(protocol::GATEWAY_PATH)
            .unwrap_or(trimmed)
            .to_owned();
        Ok(Self {
            config,
            v3_base_url,
            client: http_client()?,
        })
    }

    /// Calls `method` with its business fields, over the configured API; the verified answer
    /// (the response node of `gateway.do`, with `code`; the v3 body, without) on success.
    async fn call(&self, method: &str, biz_content: &Value) -> Result<Value, ChannelError> {
        match self.config.api {
            AlipayApi::Gateway => self.call_gateway(method, biz_content).await,
            AlipayApi::V3 => self.call_v3(method, biz_content).await,
        }
    }

    /// Calls `method` over OpenAPI v3. A 2xx answer must verify over its signature headers,
    /// or the outcome is unknown; a 4xx is a refusal (believed unsigned, as a refusal changes
    /// nothing, but not under a signature that fails); a 5xx is unknown.
    async fn call_v3(&self, method: &str, fields: &Value) -> Result<Value, ChannelError> {
        let path = match method {
            "alipay.trade.precreate" => v3::PATH_PRECREATE,
            "alipay.trade.query" => v3::PATH_QUERY,
            "alipay.trade.close" => v3::PATH_CLOSE,
            "alipay.trade.refund" => v3::PATH_REFUND,
            "alipay.trade.fastpay.refund.query" => v3::PATH_REFUND_QUERY,
            other => return Err(ChannelError::Invalid(format!("no v3 path for {other}"))),
        };
        let mut fields = fields.clone();
        if path == v3::PATH_PRECREATE
            && let Value::Object(map) = &mut fields
        {
            // A body field in v3, where gateway.do takes it as a common parameter.
            map.insert(
                "notify_url".to_owned(),
                Value::String(self.config.notify_url.clone()),
            );
        }
        let body = fields.to_string();
        let auth_string = format!(
            "app_id={},nonce={},timestamp={}",
            self.config.app_id,
            random_nonce(32),
            mideng_now_ms()
        );
        let signature = self
            .config
            .merchant_key
            .sign(v3::request_message(&auth_string, "POST", path, &body, None).as_bytes())
            .map_err(|error| ChannelError::Invalid(format!("signing: {error}")))?;
        let response = self
            .client
            .post(format!("{}{path}", self.v3_base_url))
            .header(
                reqwest::header::AUTHORIZATION,
                v3::authorization(&auth_string, &signature),
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body)
            .send_traced(method)
            .await
            .map_err(|error| transport_error(&error))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(ChannelError::OutcomeUnknown(format!(
                "gateway answered {status}"
            )));
        }
        let signed = SignatureHeaders::read(response.headers());
        let body = read_body(response).await?;
        let verified = match &signed {
            SignatureHeaders::Present {
                timestamp,
                nonce,
                signature,
            } => self.config.gateway_public_key.verify(
                v3::response_message(timestamp, nonce, &body).as_bytes(),
                signature,
            ),
            SignatureHeaders::Absent | SignatureHeaders::Ambiguous => false,
        };
        if status.is_success() {
            if !verified {
                return Err(ChannelError::OutcomeUnknown(
                    "answer signature does not verify".to_owned(),
                ));
            }
            let node: serde_json::Map<String, Value> = strict::json(&body).map_err(|_| {
                ChannelError::OutcomeUnknown(
                    "answer is not a JSON object with unique keys".to_owned(),
                )
            })?;
            return Ok(Value::Object(node));
        }
        if !status.is_client_error() || !(verified || signed == SignatureHeaders::Absent) {
            return Err(ChannelError::OutcomeUnknown(format!(
                "gateway answered {status}, unverified"
            )));
        }
        let refusal: Value = strict::json(&body).unwrap_or(Value::Null);
        Err(ChannelError::Rejected {
            code: status.as_str().to_owned(),
            sub_code: text(&refusal, "code"),
            message: text(&refusal, "message"),
        })
    }

    /// Calls `method` with `biz_content` through `gateway.do`; the verified response node on
    /// code 10000.
    async fn call_gateway(&self, method: &str, biz_content: &Value) -> Result<Value, ChannelError> {
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
            .send_traced(method)
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

/// The signature headers of a v3 answer.
#[derive(Debug, PartialEq, Eq)]
enum SignatureHeaders {
    /// Each of them once.
    Present {
        timestamp: String,
        nonce: String,
        signature: String,
    },
    /// None of them.
    Absent,
    /// Some but not all, one twice, or one that is not text: never verified.
    Ambiguous,
}

impl SignatureHeaders {
    fn read(headers: &reqwest::header::HeaderMap) -> Self {
        let one = |name: &str| -> Result<Option<String>, ()> {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (None, _) => Ok(None),
                (Some(value), None) => value
                    .to_str()
                    .map(|text| Some(text.to_owned()))
                    .map_err(|_| ()),
                (Some(_), Some(_)) => Err(()),
            }
        };
        match (
            one(v3::HEADER_TIMESTAMP),
            one(v3::HEADER_NONCE),
            one(v3::HEADER_SIGNATURE),
        ) {
            (Ok(Some(timestamp)), Ok(Some(nonce)), Ok(Some(signature))) => Self::Present {
                timestamp,
                nonce,
                signature,
            },
            (Ok(None), Ok(None), Ok(None)) => Self::Absent,
            _ => Self::Ambiguous,
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

/// A field of an answer that is absent, null, or a string; anything else makes the answer
/// unreadable, and so its outcome unknown.
fn optional_text<'a>(node: &'a Value, field: &str) -> Result<Option<&'a str>, ChannelError> {
    match node.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(ChannelError::OutcomeUnknown(format!(
            "answer field {field} is not a string"
        ))),
    }
}

/// An answer's time field (`gmt_refund_pay`): absent or empty is `None`, and a value that does
/// not parse makes the answer unreadable.
fn optional_timestamp(node: &Value, field: &str) -> Result<Option<i64>, ChannelError> {
    match optional_text(node, field)? {
        None | Some("") => Ok(None),
        Some(text) => protocol::parse_timestamp(text).map(Some).ok_or_else(|| {
            ChannelError::OutcomeUnknown(format!("answer field {field} is not a timestamp"))
        }),
    }
}

/// An answer's amount field in yuan, required.
fn required_fen(node: &Value, field: &str) -> Result<i64, ChannelError> {
    let text = optional_text(node, field)?.unwrap_or_default();
    yuan_to_fen(text)
        .map_err(|error| ChannelError::OutcomeUnknown(format!("answer field {field}: {error}")))
}

/// An answer must be about the trade asked about: a signed answer about another trade is not
/// an answer about this one.
fn check_names_trade(node: &Value, out_trade_no: &str) -> Result<(), ChannelError> {
    if optional_text(node, "out_trade_no")? == Some(out_trade_no) {
        Ok(())
    } else {
        Err(ChannelError::OutcomeUnknown(
            "answer names another trade".to_owned(),
        ))
    }
}

/// The state an `alipay.trade.fastpay.refund.query` answer reports for `out_request_no`.
fn refund_query_state(node: &Value, out_request_no: &str) -> Result<RefundState, ChannelError> {
    // The channel names the refund only when it has one; a name that is not ours is an answer
    // about another refund.
    if let Some(named) = optional_text(node, "out_request_no")?
        && !named.is_empty()
        && named != out_request_no
    {
        return Err(ChannelError::OutcomeUnknown(
            "answer names another refund".to_owned(),
        ));
    }
    match optional_text(node, "refund_status")? {
        // No refund_status: the channel has no refund under this number (never received, or
        // failed without moving money).
        None | Some("") => Ok(RefundState::NotFound),
        Some(protocol::REFUND_SUCCESS) => Ok(RefundState::Succeeded(Refund {
            channel_refund_no: optional_text(node, "trade_no")?
                .unwrap_or_default()
                .to_owned(),
            refund_fen: required_fen(node, "refund_amount")?,
            refunded_at_ms: optional_timestamp(node, "gmt_refund_pay")?,
        })),
        Some(protocol::REFUND_PROCESSING) => Ok(RefundState::Processing),
        Some(other) => Err(ChannelError::OutcomeUnknown(format!(
            "unknown refund_status {other:?}"
        ))),
    }
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

    async fn refund(&self, refund: &RefundTrade) -> Result<RefundState, ChannelError> {
        check_refund(refund)?;
        let amount = fen_to_yuan(refund.refund_fen)
            .map_err(|error| ChannelError::Invalid(error.to_string()))?;
        let mut biz_content = json!({
            "out_trade_no": refund.out_trade_no,
            "refund_amount": amount,
            "out_request_no": refund.out_refund_no,
        });
        if !refund.reason.is_empty()
            && let Value::Object(fields) = &mut biz_content
        {
            fields.insert(
                "refund_reason".to_owned(),
                Value::String(refund.reason.clone()),
            );
        }
        let node = self.call("alipay.trade.refund", &biz_content).await?;
        check_names_trade(&node, &refund.out_trade_no)?;
        match optional_text(&node, "fund_change")? {
            Some(protocol::FUND_CHANGE_YES) => {
                // `refund_fee` is the trade's refunded total, this refund included: an answer
                // whose total is below this refund contradicts itself.
                let refunded_total_fen = required_fen(&node, "refund_fee")?;
                if refunded_total_fen < refund.refund_fen {
                    return Err(ChannelError::OutcomeUnknown(
                        "refund answer's total is below the refund".to_owned(),
                    ));
                }
                Ok(RefundState::Succeeded(Refund {
                    channel_refund_no: optional_text(&node, "trade_no")?
                        .unwrap_or_default()
                        .to_owned(),
                    refund_fen: refund.refund_fen,
                    refunded_at_ms: optional_timestamp(&node, "gmt_refund_pay")?,
                }))
            }
            // No money moved in this call: a repeat of a refund made before, or one not made
            // yet. The query says which. The channel accepted the request, so a query that does
            // not show the refund yet means "not yet", never "no such refund": the merchant
            // must keep asking under this number.
            Some(protocol::FUND_CHANGE_NO) => {
                match self
                    .query_refund(&refund.out_trade_no, &refund.out_refund_no)
                    .await?
                {
                    RefundState::NotFound => Ok(RefundState::Processing),
                    state => Ok(state),
                }
            }
            other => Err(ChannelError::OutcomeUnknown(format!(
                "refund answer's fund_change is {other:?}"
            ))),
        }
    }

    async fn query_refund(
        &self,
        out_trade_no: &str,
        out_refund_no: &str,
    ) -> Result<RefundState, ChannelError> {
        check_refund_numbers(out_trade_no, out_refund_no)?;
        let node = match self
            .call(
                "alipay.trade.fastpay.refund.query",
                &json!({
                    "out_trade_no": out_trade_no,
                    "out_request_no": out_refund_no,
                    "query_options": [protocol::QUERY_OPTION_GMT_REFUND_PAY],
                }),
            )
            .await
        {
            Ok(node) => node,
            // No such trade (never scanned): no refund of it either.
            Err(error) if is_sub_code(&error, protocol::SUB_TRADE_NOT_EXIST) => {
                return Ok(RefundState::NotFound);
            }
            Err(error) => return Err(error),
        };
        let state = refund_query_state(&node, out_refund_no)?;
        // A refund found must be found for this trade; an answer without a refund may leave the
        // trade unnamed, but never name another one.
        match optional_text(&node, "out_trade_no")? {
            Some(named) if named != out_trade_no => Err(ChannelError::OutcomeUnknown(
                "answer names another trade".to_owned(),
            )),
            None if state != RefundState::NotFound => Err(ChannelError::OutcomeUnknown(
                "answer names no trade".to_owned(),
            )),
            _ => Ok(state),
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
        // A refund's notify keeps the trade's status (TRADE_SUCCESS after a partial refund,
        // TRADE_CLOSED after a full one) and adds the refund fields: it says nothing new about
        // the payment, and is only a hint to query the refund.
        let carries_refund = ["refund_fee", "gmt_refund", "out_biz_no"]
            .iter()
            .any(|name| form.non_empty(name).is_some());
        let state = match required("trade_status")? {
            status if carries_refund => NotifiedState::Other(status.to_owned()),
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

    async fn bill(&self, date: BillDate) -> Result<Option<Bill>, ChannelError> {
        // Through gateway.do whichever API the trades use: the bill's method is the same there.
        let asked = json!({
            "bill_type": bill::ALIPAY_BILL_TYPE_TRADE,
            "bill_date": date.to_string(),
        });
        let node = match self.call_gateway(bill::ALIPAY_BILL_METHOD, &asked).await {
            Ok(node) => node,
            Err(error) if is_sub_code(&error, bill::ALIPAY_SUB_BILL_NOT_EXIST) => return Ok(None),
            Err(error) => return Err(error),
        };
        let url = reqwest::Url::parse(&text(&node, "bill_download_url")).map_err(|_| {
            ChannelError::OutcomeUnknown("bill_download_url is not a URL".to_owned())
        })?;
        if !bills::alipay_download_allowed(&url, &self.config.gateway_url) {
            return Err(ChannelError::Invalid(format!(
                "bill download URL outside Alipay: {}",
                url.origin().ascii_serialization()
            )));
        }
        let response = bills::download_client()?
            .get(url)
            .send_traced("alipay.bill.download")
            .await
            .map_err(|error| transport_error(&error))?;
        let bytes = bills::read_download(response).await?;
        bill::read_alipay(&bytes, date)
            .map(Some)
            .map_err(|error| bills::unreadable(&error))
    }
}

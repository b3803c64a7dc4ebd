//! The simulated Alipay open-platform gateway: `GET` or `POST /gateway.do` with
//! `alipay.trade.precreate`, `alipay.trade.query`, `alipay.trade.close`, `alipay.trade.refund`,
//! `alipay.trade.fastpay.refund.query` and the bill's download URL
//! (`alipay.data.dataservice.bill.downloadurl.query`, in `alipay_bill`).
//!
//! Refunds are synchronous: a new `out_request_no` within what is left to refund moves the
//! money in the call (`fund_change` `Y`, a ledger entry, the trade's notify with the refund
//! fields); the same number and amount again answers `fund_change` `N` and moves nothing;
//! another amount under a known number is `ACQ.DISCORDANT_REPEAT_REQUEST`, more than is left
//! `ACQ.REFUND_AMT_NOT_EQUAL_TOTAL`, an unpaid or closed trade `ACQ.TRADE_STATUS_ERROR`, a
//! finished one `ACQ.TRADE_HAS_FINISHED`. The refund query answers `refund_status`
//! `REFUND_SUCCESS` for a refund made, and a success without `refund_status` for a number the
//! trade has no refund under.
//!
//! A call is checked the way the gateway does, in order: form encoding, `method`, the common
//! parameters (40001 when missing, 40002 when illegal), the RSA2 signature over
//! [`alipay::request_sign_content`] with the merchant's key (40002 `isv.invalid-signature`),
//! then `biz_content`. Only then may an armed fault take the call. Every answer, errors
//! included, is `{"<method>_response": node, "sign": …}` (or `error_response` when the method is
//! missing or unknown), signed by the gateway key over the node's exact text.
//!
//! Parameters are read from the query string and the form body alike, under GET or POST, as the
//! real gateway does: the official Node SDK puts the common parameters in the query string and
//! `biz_content` in the body, python-alipay-sdk sends everything as a GET query string, and the
//! protocol document puts everything in a POST body. A name given twice, in one of them or
//! across both, is refused.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::strict::{self, Form, StrictError};
use mideng_channel::{ChannelKind, alipay, money};
use serde_json::{Map, Value, json};

use super::alipay_bill;
use super::{
    BodyUnreadable, is_valid_notify_url, is_valid_out_refund_no, is_valid_out_trade_no, read_body,
};
use crate::faults::{FaultCode, GatewayMethod};
use crate::limits::{REFUND_REASON_CHARS_MAX, SUBJECT_CHARS_MAX};
use crate::notify::payload::{ALIPAY_BUYER_ID, ALIPAY_BUYER_LOGON_ID};
use crate::shared::Shared;
use crate::simulator::Simulator;
use crate::trades::{
    Applied, CloseCause, CreateRefusal, CreateTerms, Expiry, NewTrade, RefundRefusal,
    RefundRequest, RefundStatus, RefundTaken, Refusal, Settlement, Trade, TradeStatus,
};

/// The response key of answers given before a method is known.
const ERROR_NODE: &str = "error";
/// The default `timeout_express`: 15 days.
const TIMEOUT_DEFAULT_MS: i64 = 15 * 24 * 60 * 60 * 1000;
/// `timeout_express` bounds: 1 minute to 15 days.
const TIMEOUT_MIN_MS: i64 = 60 * 1000;
const TIMEOUT_MAX_MS: i64 = TIMEOUT_DEFAULT_MS;
/// The sub-code of an invalid business parameter.
const SUB_INVALID_BUSINESS_PARAMETER: &str = "ACQ.INVALID_PARAMETER";

/// `GET` or `POST /gateway.do`.
pub(crate) async fn gateway(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let shared = &simulator.shared;
    let host = super::host(&headers);
    let answer = match read_body(body).await {
        Ok(bytes) => handle(shared, host, uri.query().unwrap_or_default(), &bytes),
        Err(BodyUnreadable) => Answer::failure(
            ERROR_NODE,
            Failure::illegal(
                "isv.invalid-parameter",
                "request body unreadable or larger than 64 KiB",
            ),
        ),
    };
    answer.into_response(shared)
}

/// A failed call: code, sub-code and a human sub-message. Shared with OpenAPI v3
/// (`alipay_v3`), which answers the same failures in its own form.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub(super) code: &'static str,
    pub(super) sub_code: &'static str,
    pub(super) sub_msg: String,
}

impl Failure {
    pub(super) fn missing(sub_code: &'static str, what: &str) -> Self {
        Self {
            code: alipay::CODE_MISSING_PARAMETER,
            sub_code,
            sub_msg: format!("missing required parameter {what}"),
        }
    }

    pub(super) fn illegal(sub_code: &'static str, sub_msg: impl Into<String>) -> Self {
        Self {
            code: alipay::CODE_ILLEGAL_PARAMETER,
            sub_code,
            sub_msg: sub_msg.into(),
        }
    }

    pub(super) fn business(sub_code: &'static str, sub_msg: impl Into<String>) -> Self {
        Self {
            code: alipay::CODE_BUSINESS_FAILED,
            sub_code,
            sub_msg: sub_msg.into(),
        }
    }

    pub(super) fn invalid_business_parameter(sub_msg: impl Into<String>) -> Self {
        Self::business(SUB_INVALID_BUSINESS_PARAMETER, sub_msg)
    }

    fn fault(code: FaultCode) -> Self {
        match code {
            FaultCode::AlipaySystemError => {
                Self::business(alipay::SUB_SYSTEM_ERROR, "系统错误 (simulated failure)")
            }
            FaultCode::AlipayRefused => Self::business(
                alipay::SUB_CONTEXT_INCONSISTENT,
                "交易信息被篡改 (simulated refusal)",
            ),
            FaultCode::AlipayUnknown | FaultCode::WechatSystemError => Self {
                code: alipay::CODE_UNKNOWN,
                sub_code: alipay::SUB_UNKNOWN_ERROR,
                sub_msg: "服务暂不可用 (simulated failure)".to_owned(),
            },
        }
    }

    fn node(&self) -> Value {
        json!({
            "code": self.code,
            "msg": message(self.code),
            "sub_code": self.sub_code,
            "sub_msg": self.sub_msg,
        })
    }
}

/// The gateway's `msg` for a code.
fn message(code: &str) -> &'static str {
    match code {
        alipay::CODE_SUCCESS => "Success",
        alipay::CODE_UNKNOWN => "Service Currently Unavailable",
        alipay::CODE_MISSING_PARAMETER => "Missing Required Arguments",
        alipay::CODE_ILLEGAL_PARAMETER => "Invalid Arguments",
        alipay::CODE_BUSINESS_FAILED => "Business Failed",
        alipay::CODE_NO_PERMISSION => "Insufficient Permissions",
        _ => "Unknown",
    }
}

/// An answer: which response node, and its content.
struct Answer {
    method: &'static str,
    node: Value,
}

impl Answer {
    fn failure(method: &'static str, failure: Failure) -> Self {
        Self {
            method,
            node: failure.node(),
        }
    }

    /// The signed response. Alipay answers HTTP 200 for every gateway-level outcome.
    fn into_response(self, shared: &Shared) -> Response {
        let node = self.node.to_string();
        match shared.config.alipay_gateway_key.sign(node.as_bytes()) {
            Ok(sign) => (
                [(header::CONTENT_TYPE, "application/json;charset=utf-8")],
                alipay::response_body(self.method, &node, &sign),
            )
                .into_response(),
            Err(_) => {
                tracing::error!("the Alipay gateway key failed to sign a response");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

/// Checks and runs one call.
fn handle(shared: &Shared, host: Option<&str>, query_string: &str, body: &[u8]) -> Answer {
    let params = match parse_params(query_string, body) {
        Ok(params) => params,
        Err(failure) => return Answer::failure(ERROR_NODE, failure),
    };
    let Some(method_name) = non_empty(&params, "method") else {
        return Answer::failure(ERROR_NODE, Failure::missing("isv.missing-method", "method"));
    };
    if method_name == alipay_bill::METHOD {
        let result = authenticate(shared, &params)
            .and_then(|()| biz_content(&params))
            .and_then(|biz| alipay_bill::download_url(shared, host, &biz));
        return match result {
            Ok(node) => Answer {
                method: alipay_bill::METHOD,
                node,
            },
            Err(failure) => Answer::failure(alipay_bill::METHOD, failure),
        };
    }
    let method = match GatewayMethod::from_name(method_name) {
        Some(method) if method.is_alipay() => method,
        _ => {
            return Answer::failure(
                ERROR_NODE,
                Failure::illegal("isv.invalid-method", "unknown method"),
            );
        }
    };
    let result = authenticate(shared, &params)
        .and_then(|()| biz_content(&params))
        .and_then(|biz| match method {
            GatewayMethod::AlipayPrecreate => {
                let notify_url = non_empty(&params, "notify_url").map(str::to_owned);
                precreate(shared, notify_url, &biz)
            }
            GatewayMethod::AlipayQuery => query(shared, &biz),
            GatewayMethod::AlipayClose => close(shared, &biz),
            GatewayMethod::AlipayRefund => refund(shared, &biz),
            GatewayMethod::AlipayRefundQuery => refund_query(shared, &biz),
            // `from_name` picked an Alipay method above: a WeChat one cannot reach here.
            GatewayMethod::WechatNative
            | GatewayMethod::WechatQuery
            | GatewayMethod::WechatClose
            | GatewayMethod::WechatRefund
            | GatewayMethod::WechatRefundQuery => {
                Err(Failure::illegal("isv.invalid-method", "unknown method"))
            }
        });
    match result {
        Ok(node) => Answer {
            method: method.name(),
            node,
        },
        Err(failure) => Answer::failure(method.name(), failure),
    }
}

/// The parameters of the query string and the form body, parsed once; a parameter given twice
/// (in one of them or across both) is illegal, as is a body over the form limit.
fn parse_params(query: &str, body: &[u8]) -> Result<Form, Failure> {
    Form::parse_sources(&[query.as_bytes(), body]).map_err(|error| match error {
        StrictError::Repeated(_) => {
            Failure::illegal("isv.invalid-parameter", "a parameter appears twice")
        }
        _ => Failure::illegal("isv.invalid-parameter", "malformed form encoding"),
    })
}

/// A parameter, if present and not empty (the gateway treats empty values as absent).
fn non_empty<'a>(params: &'a Form, key: &str) -> Option<&'a str> {
    params.non_empty(key)
}

/// The common parameters and the signature.
fn authenticate(shared: &Shared, params: &Form) -> Result<(), Failure> {
    let config = &shared.config;
    let required = |key: &str, sub_code: &'static str| {
        non_empty(params, key).ok_or_else(|| Failure::missing(sub_code, key))
    };
    let app_id = required("app_id", "isv.missing-app-id")?;
    let sign_type = required("sign_type", "isv.missing-signature-type")?;
    let sign = required("sign", "isv.missing-signature")?;
    let timestamp = required("timestamp", "isv.missing-timestamp")?;
    let version = required("version", "isv.missing-version")?;
    if app_id != config.alipay_app_id {
        return Err(Failure::illegal("isv.invalid-app-id", "unknown app_id"));
    }
    if sign_type != "RSA2" {
        return Err(Failure::illegal(
            "isv.invalid-signature-type",
            "only RSA2 is supported",
        ));
    }
    if non_empty(params, "format").is_some_and(|format| !format.eq_ignore_ascii_case("JSON")) {
        return Err(Failure::illegal(
            "isv.invalid-format",
            "format must be JSON",
        ));
    }
    if non_empty(params, "charset").is_some_and(|charset| !charset.eq_ignore_ascii_case("utf-8")) {
        return Err(Failure::illegal(
            "isv.invalid-charset",
            "charset must be utf-8",
        ));
    }
    if alipay::parse_timestamp(timestamp).is_none() {
        return Err(Failure::illegal(
            "isv.invalid-timestamp",
            "timestamp must be yyyy-MM-dd HH:mm:ss",
        ));
    }
    if version != "1.0" {
        return Err(Failure::illegal(
            "isv.invalid-version",
            "version must be 1.0",
        ));
    }
    let content = alipay::request_sign_content(params.iter());
    if !config
        .alipay_merchant_public_key
        .verify(content.as_bytes(), sign)
    {
        return Err(Failure::illegal(
            alipay::SUB_INVALID_SIGNATURE,
            "验签出错：the signature does not verify with the merchant's public key",
        ));
    }
    Ok(())
}

/// `biz_content` as a JSON object.
fn biz_content(params: &Form) -> Result<Map<String, Value>, Failure> {
    let text = non_empty(params, "biz_content")
        .ok_or_else(|| Failure::missing("isv.missing-parameter", "biz_content"))?;
    strict::json(text).map_err(|_| {
        Failure::illegal(
            "isv.invalid-parameter",
            "biz_content is not a JSON object with unique keys",
        )
    })
}

/// A business field as text: a JSON string, or an integer written as a number. Empty strings
/// and nulls are absent.
pub(super) fn text_field(biz: &Map<String, Value>, name: &str) -> Result<Option<String>, Failure> {
    match biz.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
            Ok(Some(number.to_string()))
        }
        Some(_) => Err(Failure::invalid_business_parameter(format!(
            "{name} has the wrong type"
        ))),
    }
}

pub(super) fn required_field(biz: &Map<String, Value>, name: &str) -> Result<String, Failure> {
    text_field(biz, name)?.ok_or_else(|| Failure::missing("isv.missing-parameter", name))
}

/// `alipay.trade.precreate`, its business fields in `biz` (the notify URL is a common
/// parameter of `gateway.do`, a body field of v3). The answer node, with `code` and `msg`.
pub(super) fn precreate(
    shared: &Shared,
    notify_url: Option<String>,
    biz: &Map<String, Value>,
) -> Result<Value, Failure> {
    let out_trade_no = required_field(biz, "out_trade_no")?;
    if !is_valid_out_trade_no(&out_trade_no) {
        return Err(Failure::invalid_business_parameter(
            "out_trade_no must be 1 to 64 letters, digits or _-|*",
        ));
    }
    let total_amount = required_field(biz, "total_amount")?;
    let amount_fen = money::yuan_to_fen(&total_amount).map_err(|_| {
        Failure::invalid_business_parameter("total_amount must be 0.01 to 100000000.00 yuan")
    })?;
    let subject = required_field(biz, "subject")?;
    if subject.chars().count() > SUBJECT_CHARS_MAX {
        return Err(Failure::invalid_business_parameter("subject is too long"));
    }
    if notify_url
        .as_deref()
        .is_some_and(|url| !is_valid_notify_url(url))
    {
        return Err(Failure::illegal(
            "isv.invalid-parameter",
            "notify_url must be an http or https URL of at most 256 bytes",
        ));
    }
    let time_expire = text_field(biz, "time_expire")?;
    let timeout_express = text_field(biz, "timeout_express")?;
    // The absolute time_expire wins over the relative timeout_express, as at the channel.
    let expiry = match (&time_expire, &timeout_express) {
        (Some(text), _) => Expiry::At(alipay::parse_timestamp(text).ok_or_else(|| {
            Failure::invalid_business_parameter("time_expire must be yyyy-MM-dd HH:mm:ss")
        })?),
        (None, Some(text)) => Expiry::AfterStart(parse_timeout_express(text).ok_or_else(|| {
            Failure::invalid_business_parameter("timeout_express must be 1m to 15d")
        })?),
        (None, None) => Expiry::AfterStart(TIMEOUT_DEFAULT_MS),
    };
    let new = NewTrade {
        channel: ChannelKind::Alipay,
        out_trade_no: out_trade_no.clone(),
        terms: CreateTerms {
            amount_fen,
            subject,
            expiry_text: format!(
                "{}|{}",
                time_expire.unwrap_or_default(),
                timeout_express.unwrap_or_default()
            ),
        },
        notify_url,
        expiry,
    };
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let fault = world.faults.take(GatewayMethod::AlipayPrecreate);
    if let Some(fault) = fault {
        if fault.apply_anyway {
            // The outcome the merchant will have to discover: whatever happened, happened.
            let _ = world.trades.create_trade(new, now_ms);
        }
        return Err(Failure::fault(fault.code));
    }
    let qr_code = match world.trades.create_trade(new, now_ms) {
        Ok(_) => world
            .trades
            .find_trade(&out_trade_no)
            .map(|trade| trade.pay_code.clone())
            .unwrap_or_default(),
        Err(CreateRefusal::AlreadyPaid) => {
            return Err(Failure::business(
                alipay::SUB_TRADE_HAS_SUCCESS,
                "交易已被支付",
            ));
        }
        Err(CreateRefusal::AlreadyClosed) => {
            return Err(Failure::business(
                alipay::SUB_TRADE_HAS_CLOSE,
                "交易已经关闭",
            ));
        }
        Err(CreateRefusal::OtherTerms) => {
            return Err(Failure::business(
                alipay::SUB_CONTEXT_INCONSISTENT,
                "交易信息被篡改: out_trade_no was used with other parameters",
            ));
        }
        Err(CreateRefusal::Full) => {
            return Err(Failure {
                code: alipay::CODE_UNKNOWN,
                sub_code: alipay::SUB_UNKNOWN_ERROR,
                sub_msg: "the simulator holds its maximum number of trades".to_owned(),
            });
        }
    };
    Ok(json!({
        "code": alipay::CODE_SUCCESS,
        "msg": "Success",
        "out_trade_no": out_trade_no,
        "qr_code": qr_code,
    }))
}

/// `timeout_express`: a whole number of minutes (`m`), hours (`h`) or days (`d`), 1m to 15d.
fn parse_timeout_express(text: &str) -> Option<i64> {
    let unit_ms: i64 = match text.chars().last()? {
        'm' => 60 * 1000,
        'h' => 60 * 60 * 1000,
        'd' => 24 * 60 * 60 * 1000,
        _ => return None,
    };
    let count = &text[..text.len() - 1];
    if count.is_empty() || count.len() > 6 || !count.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let total_ms = count.parse::<i64>().ok()?.checked_mul(unit_ms)?;
    (TIMEOUT_MIN_MS..=TIMEOUT_MAX_MS)
        .contains(&total_ms)
        .then_some(total_ms)
}

/// The trade named by `trade_no` (preferred) or `out_trade_no`, if the channel shows it.
fn find_alipay_trade<'a>(
    trades: &'a crate::trades::TradeBook,
    trade_no: Option<&str>,
    out_trade_no: Option<&str>,
) -> Option<&'a Trade> {
    let trade = match trade_no {
        Some(trade_no) => trades.find_trade_by_channel_trade_id(trade_no),
        None => trades.find_trade(out_trade_no?),
    }?;
    (trade.channel == ChannelKind::Alipay && trade.exists_at_channel()).then_some(trade)
}

/// `trade_no` and `out_trade_no` from a query or close; at least one is required.
fn trade_identifiers(
    biz: &Map<String, Value>,
) -> Result<(Option<String>, Option<String>), Failure> {
    let trade_no = text_field(biz, "trade_no")?;
    let out_trade_no = text_field(biz, "out_trade_no")?;
    if trade_no.is_none() && out_trade_no.is_none() {
        return Err(Failure::missing(
            "isv.missing-parameter",
            "out_trade_no or trade_no",
        ));
    }
    Ok((trade_no, out_trade_no))
}

fn trade_not_exist() -> Failure {
    Failure::business(alipay::SUB_TRADE_NOT_EXIST, "交易不存在")
}

/// `alipay.trade.query`.
pub(super) fn query(shared: &Shared, biz: &Map<String, Value>) -> Result<Value, Failure> {
    let (trade_no, out_trade_no) = trade_identifiers(biz)?;
    let mut world = shared.settled_world();
    if let Some(fault) = world.faults.take(GatewayMethod::AlipayQuery) {
        return Err(Failure::fault(fault.code));
    }
    let trade = find_alipay_trade(&world.trades, trade_no.as_deref(), out_trade_no.as_deref())
        .ok_or_else(trade_not_exist)?;
    let amount = yuan(trade.terms.amount_fen);
    let paid = trade.status.was_paid();
    let mut node = json!({
        "code": alipay::CODE_SUCCESS,
        "msg": "Success",
        "trade_no": trade.channel_trade_id,
        "out_trade_no": trade.out_trade_no,
        "trade_status": trade_status(trade.status),
        "total_amount": amount,
        "buyer_pay_amount": if paid { amount.clone() } else { "0.00".to_owned() },
    });
    if paid && let Value::Object(fields) = &mut node {
        fields.insert("receipt_amount".to_owned(), Value::String(amount));
        if let Some(paid_at_ms) = trade.paid_at_ms {
            fields.insert(
                "send_pay_date".to_owned(),
                Value::String(alipay::format_timestamp(paid_at_ms)),
            );
        }
        fields.insert(
            "buyer_user_id".to_owned(),
            Value::String("2088000000000001".to_owned()),
        );
    }
    Ok(node)
}

/// `alipay.trade.close`.
pub(super) fn close(shared: &Shared, biz: &Map<String, Value>) -> Result<Value, Failure> {
    let (trade_no, out_trade_no) = trade_identifiers(biz)?;
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let fault = world.faults.take(GatewayMethod::AlipayClose);
    if let Some(fault) = fault
        && !fault.apply_anyway
    {
        return Err(Failure::fault(fault.code));
    }
    let Some(trade) =
        find_alipay_trade(&world.trades, trade_no.as_deref(), out_trade_no.as_deref())
    else {
        return Err(fault.map_or_else(trade_not_exist, |fault| Failure::fault(fault.code)));
    };
    let (trade_no, out_trade_no) = (trade.channel_trade_id.clone(), trade.out_trade_no.clone());
    let result = world
        .trades
        .close_trade(&out_trade_no, CloseCause::Merchant, now_ms);
    if let Ok((_, event)) = &result {
        world.publish(&shared.config, event.clone(), now_ms);
    }
    if let Some(fault) = fault {
        return Err(Failure::fault(fault.code));
    }
    match result {
        Ok((Applied::Changed, _)) => Ok(json!({
            "code": alipay::CODE_SUCCESS,
            "msg": "Success",
            "trade_no": trade_no,
            "out_trade_no": out_trade_no,
        })),
        Ok((Applied::AlreadyDone, _)) | Err(Refusal::Closed | Refusal::Paid) => Err(
            Failure::business(alipay::SUB_TRADE_STATUS_ERROR, "交易状态不合法"),
        ),
        Err(
            Refusal::NotFound
            | Refusal::NotPaid
            | Refusal::Expired
            | Refusal::NotSupported
            | Refusal::NothingToRefund,
        ) => Err(trade_not_exist()),
    }
}

/// `alipay.trade.refund`: a refund of `refund_amount` under `out_request_no` (the trade's own
/// number when none is given, as at the channel), made at once.
pub(super) fn refund(shared: &Shared, biz: &Map<String, Value>) -> Result<Value, Failure> {
    let (trade_no, out_trade_no) = trade_identifiers(biz)?;
    let refund_amount = required_field(biz, "refund_amount")?;
    let amount_fen = money::yuan_to_fen(&refund_amount).map_err(|_| {
        Failure::invalid_business_parameter("refund_amount must be 0.01 to 100000000.00 yuan")
    })?;
    let out_request_no = text_field(biz, "out_request_no")?;
    if out_request_no
        .as_deref()
        .is_some_and(|number| !is_valid_out_refund_no(number))
    {
        return Err(Failure::invalid_business_parameter(
            "out_request_no must be 1 to 64 letters, digits or _-|*@",
        ));
    }
    let reason = text_field(biz, "refund_reason")?.unwrap_or_default();
    if reason.chars().count() > REFUND_REASON_CHARS_MAX {
        return Err(Failure::invalid_business_parameter(
            "refund_reason is too long",
        ));
    }
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let fault = world.faults.take(GatewayMethod::AlipayRefund);
    if let Some(fault) = fault
        && !fault.apply_anyway
    {
        return Err(Failure::fault(fault.code));
    }
    let Some(trade) =
        find_alipay_trade(&world.trades, trade_no.as_deref(), out_trade_no.as_deref())
    else {
        return Err(fault.map_or_else(trade_not_exist, |fault| Failure::fault(fault.code)));
    };
    let out_trade_no = trade.out_trade_no.clone();
    let out_request_no = out_request_no.unwrap_or_else(|| out_trade_no.clone());
    let request = RefundRequest {
        out_trade_no: out_trade_no.clone(),
        out_refund_no: out_request_no.clone(),
        amount_fen,
        reason,
        notify_url: None,
        settlement: Settlement::Immediate,
    };
    let result = world.trades.request_refund(request, now_ms);
    if let Ok((_, event)) = &result {
        world.publish(&shared.config, event.clone(), now_ms);
    }
    if let Some(fault) = fault {
        // Applied, and the answer lost: the merchant must ask again.
        return Err(Failure::fault(fault.code));
    }
    let taken = result.map_err(refund_failure)?.0;
    let trade = world
        .trades
        .find_trade(&out_trade_no)
        .ok_or_else(trade_not_exist)?;
    let refund = trade
        .find_refund(&out_request_no)
        .ok_or_else(trade_not_exist)?;
    Ok(json!({
        "code": alipay::CODE_SUCCESS,
        "msg": "Success",
        "trade_no": trade.channel_trade_id,
        "out_trade_no": trade.out_trade_no,
        "buyer_logon_id": ALIPAY_BUYER_LOGON_ID,
        "buyer_user_id": ALIPAY_BUYER_ID,
        "fund_change": match taken {
            RefundTaken::New => alipay::FUND_CHANGE_YES,
            RefundTaken::Repeated => alipay::FUND_CHANGE_NO,
        },
        // The trade's refunded total, this refund included.
        "refund_fee": yuan(trade.refunded_fen()),
        "gmt_refund_pay": refund.ended_at_ms.map(alipay::format_timestamp),
    }))
}

/// A refused refund, as Alipay words it.
fn refund_failure(refusal: RefundRefusal) -> Failure {
    match refusal {
        RefundRefusal::TradeNotFound => trade_not_exist(),
        RefundRefusal::NotPaid | RefundRefusal::FullyRefunded => {
            Failure::business(alipay::SUB_TRADE_STATUS_ERROR, "交易状态不合法")
        }
        RefundRefusal::Finished => Failure::business(
            alipay::SUB_TRADE_HAS_FINISHED,
            "交易已完结: the trade is finished and can no longer be refunded",
        ),
        RefundRefusal::NumberUsed => Failure::business(
            alipay::SUB_DISCORDANT_REPEAT_REQUEST,
            "请求信息不一致: out_request_no was used with another refund_amount",
        ),
        RefundRefusal::ExceedsRefundable => Failure::business(
            alipay::SUB_REFUND_AMT_NOT_EQUAL_TOTAL,
            "退款金额超限: more than is left to refund",
        ),
        RefundRefusal::TooManyRefunds => Failure::invalid_business_parameter(
            "the trade has the most refunds the simulator keeps",
        ),
    }
}

/// `alipay.trade.fastpay.refund.query`: the refund `out_request_no` (the trade's own number
/// when none is given) of the trade. `gmt_refund_pay` is answered only when `query_options`
/// asks for it, as at the channel.
pub(super) fn refund_query(shared: &Shared, biz: &Map<String, Value>) -> Result<Value, Failure> {
    let (trade_no, out_trade_no) = trade_identifiers(biz)?;
    let out_request_no = text_field(biz, "out_request_no")?;
    let with_refund_time = match biz.get("query_options") {
        None | Some(Value::Null) => false,
        Some(Value::Array(options)) if options.iter().all(Value::is_string) => options
            .iter()
            .any(|option| option.as_str() == Some(alipay::QUERY_OPTION_GMT_REFUND_PAY)),
        Some(_) => {
            return Err(Failure::invalid_business_parameter(
                "query_options must be an array of strings",
            ));
        }
    };
    let mut world = shared.settled_world();
    if let Some(fault) = world.faults.take(GatewayMethod::AlipayRefundQuery) {
        return Err(Failure::fault(fault.code));
    }
    let trade = find_alipay_trade(&world.trades, trade_no.as_deref(), out_trade_no.as_deref())
        .ok_or_else(trade_not_exist)?;
    let out_request_no = out_request_no.unwrap_or_else(|| trade.out_trade_no.clone());
    let mut node = json!({
        "code": alipay::CODE_SUCCESS,
        "msg": "Success",
        "trade_no": trade.channel_trade_id,
        "out_trade_no": trade.out_trade_no,
    });
    // Alipay refunds succeed in the call, so every refund it holds is a success; a number it
    // holds none under is answered without `refund_status`.
    if let Some(refund) = trade
        .find_refund(&out_request_no)
        .filter(|refund| refund.status == RefundStatus::Success)
        && let Value::Object(fields) = &mut node
    {
        fields.insert("out_request_no".to_owned(), json!(refund.out_refund_no));
        fields.insert(
            "total_amount".to_owned(),
            json!(yuan(trade.terms.amount_fen)),
        );
        fields.insert("refund_amount".to_owned(), json!(yuan(refund.amount_fen)));
        fields.insert("refund_status".to_owned(), json!(alipay::REFUND_SUCCESS));
        if with_refund_time {
            fields.insert(
                "gmt_refund_pay".to_owned(),
                json!(refund.ended_at_ms.map(alipay::format_timestamp)),
            );
        }
    }
    Ok(node)
}

/// Alipay's `trade_status` for a trade status.
pub(crate) fn trade_status(status: TradeStatus) -> &'static str {
    match status {
        TradeStatus::Pending => alipay::TRADE_WAIT_BUYER_PAY,
        TradeStatus::Paid => alipay::TRADE_SUCCESS,
        TradeStatus::Finished => alipay::TRADE_FINISHED,
        TradeStatus::Closed | TradeStatus::Refunded => alipay::TRADE_CLOSED,
    }
}

/// Fen as a yuan string. Amounts were validated when the trade was created, so the fallback
/// is never used.
fn yuan(fen: i64) -> String {
    money::fen_to_yuan(fen).unwrap_or_else(|_| "0.00".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_express_takes_minutes_hours_and_days_within_bounds() {
        assert_eq!(parse_timeout_express("15m"), Some(900_000));
        assert_eq!(parse_timeout_express("2h"), Some(7_200_000));
        assert_eq!(parse_timeout_express("15d"), Some(TIMEOUT_MAX_MS));
        for bad in ["", "m", "0m", "16d", "1.5h", "-1m", "1x", "1c", "９m"] {
            assert_eq!(parse_timeout_express(bad), None, "{bad:?}");
        }
    }
}

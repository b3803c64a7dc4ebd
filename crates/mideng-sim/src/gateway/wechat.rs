//! The simulated WeChat Pay API v3: native create, query by out-trade-no or transaction id,
//! close by out-trade-no, refunds and the refund query, the platform certificates (certificate
//! mode), the bills (`wechat_bill`); any other `/v3` request is WeChat's own signed 404
//! `NOT_FOUND`.
//!
//! A refund (`POST /v3/refund/domestic/refunds`) is accepted `PROCESSING` and ends
//! [`REFUND_PROCESSING_MS`] of channel time later — `SUCCESS`, or `ABNORMAL` / `CLOSED` when
//! `/sim/refund-outcome` armed it — with a `REFUND.*` notify to the request's `notify_url`.
//! The same `out_refund_no` and amount again answers that refund as it is now; another amount,
//! or a number of another order, is 400 `INVALID_REQUEST`, as is more than is left to refund
//! (`申请退款金额超过订单可退金额`), a refund of an unpaid or closed order, or an
//! `amount.total` that is not the order's. An unknown order or refund is 404
//! `RESOURCE_NOT_EXISTS`.
//!
//! Every request must carry an `Authorization` header signed by the merchant's key over
//! [`wechat::request_message`], for this merchant id and certificate serial, with a timestamp
//! within [`wechat::TIMESTAMP_SKEW_SECS_MAX`] of the channel clock; anything else is 401
//! `SIGN_ERROR`. Every response, errors included, is signed by the platform key in the
//! `Wechatpay-*` headers over [`wechat::notify_message`] of its body, names its scheme in
//! `Wechatpay-Signature-Type` (the official SDKs refuse an answer without it) and carries a
//! `Request-ID`.
//!
//! The timestamp window is also accepted against the host's wall clock: the merchant signs with
//! its own clock and cannot know that the simulator's runs fast or was advanced, and a fast
//! clock would otherwise refuse every request seconds after start. A timestamp far from both
//! is refused.

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::keys::{aes_gcm_encrypt, random_nonce};
use mideng_channel::platform_keys::CERTIFICATE_ASSOCIATED_DATA;
use mideng_channel::strict::{self, Form};
use mideng_channel::{ChannelKind, money, wechat};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    BodyUnreadable, is_valid_notify_url, is_valid_out_refund_no, is_valid_out_trade_no, read_body,
};
use crate::clock::wall_clock_ms;
use crate::faults::GatewayMethod;
use crate::notify::payload::{WECHAT_PAYER_OPENID, WECHAT_REFUND_ACCOUNT};
use crate::shared::Shared;
use crate::simulator::Simulator;
use crate::trades::{
    CloseCause, CreateRefusal, CreateTerms, Expiry, NewTrade, RefundRefusal, RefundRequest,
    RefundStatus, RefundTaken, Refusal, Settlement, Trade, TradeBook, TradeRefund, TradeStatus,
};

mod refund;

pub(crate) use refund::{create_refund, query_refund, refund_status};

/// How long a native order stays payable without `time_expire`: its `code_url` is valid 2 h.
const ORDER_VALIDITY_DEFAULT_MS: i64 = 2 * 60 * 60 * 1000;
/// Longest `transaction_id` accepted in a path (the channel's are 28 digits).
const TRANSACTION_ID_CHARS_MAX: usize = 32;
/// Longest description, in characters.
const DESCRIPTION_CHARS_MAX: usize = 127;
/// How long a refund stays PROCESSING, in channel milliseconds. A real refund to the buyer's
/// balance takes seconds to minutes; five channel seconds let a test see PROCESSING first, and
/// a fast clock or an advance ends it without waiting (it is a channel timer, like expiries).
pub(crate) const REFUND_PROCESSING_MS: i64 = 5_000;
/// Longest refund reason, in characters.
const REFUND_REASON_CHARS_MAX: usize = 80;

/// A reply before signing.
pub(super) struct Reply {
    status: StatusCode,
    body: Option<Value>,
}

impl Reply {
    pub(super) fn ok(body: Value) -> Self {
        Self {
            status: StatusCode::OK,
            body: Some(body),
        }
    }

    fn no_content() -> Self {
        Self {
            status: StatusCode::NO_CONTENT,
            body: None,
        }
    }

    pub(super) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Some(json!({ "code": code, "message": message.into() })),
        }
    }

    fn sign_error(message: &str) -> Self {
        Self::error(StatusCode::UNAUTHORIZED, wechat::CODE_SIGN_ERROR, message)
    }

    pub(super) fn param_error(message: impl Into<String>) -> Self {
        Self::error(StatusCode::BAD_REQUEST, wechat::CODE_PARAM_ERROR, message)
    }

    fn system_error() -> Self {
        Self::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            wechat::CODE_SYSTEM_ERROR,
            "系统错误 (simulated failure)",
        )
    }

    /// The response with the platform's signature headers.
    pub(super) fn into_response(self, shared: &Shared) -> Response {
        let body = self.body.map(|body| body.to_string()).unwrap_or_default();
        // Signed at the wall clock's moment, as the notifies are: SDKs refuse an answer more
        // than five minutes from their own clock, and the simulated clock may run fast.
        let timestamp = wall_clock_ms().div_euclid(1000).to_string();
        let nonce = random_nonce(32);
        let Ok((signature, serial)) = shared
            .sign_as_wechat_platform(wechat::notify_message(&timestamp, &nonce, &body).as_bytes())
        else {
            tracing::error!("the WeChat Pay platform key failed to sign a response");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        let signed = [
            (wechat::HEADER_TIMESTAMP, timestamp),
            (wechat::HEADER_NONCE, nonce),
            (wechat::HEADER_SIGNATURE, signature),
            (wechat::HEADER_SERIAL, serial),
            (
                wechat::HEADER_SIGNATURE_TYPE,
                wechat::AUTHORIZATION_SCHEME.to_owned(),
            ),
            (wechat::HEADER_REQUEST_ID, random_nonce(32)),
        ];
        for (name, value) in signed {
            // Every value is ASCII (digits, base64, validated serials), so this always succeeds.
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        }
        if self.status != StatusCode::NO_CONTENT {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        response
    }
}

/// Checks the `Authorization` header of a request with this method, URI and body.
pub(super) fn authenticate(
    shared: &Shared,
    method: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: &str,
) -> Result<(), Reply> {
    let config = &shared.config;
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let header = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        // Two Authorization headers: which one was verified would depend on the reader.
        _ => None,
    }
    .ok_or_else(|| Reply::sign_error("Http头Authorization值格式错误: missing or repeated"))?;
    let authorization = wechat::Authorization::parse(header)
        .map_err(|_| Reply::sign_error("Http头Authorization值格式错误"))?;
    if authorization.mchid != config.wechat_mchid {
        return Err(Reply::sign_error("mchid does not match"));
    }
    if authorization.serial != config.wechat_merchant_serial {
        return Err(Reply::sign_error("unknown merchant certificate serial"));
    }
    let signed_at_ms = authorization.timestamp.saturating_mul(1000);
    let skew_max_ms = wechat::TIMESTAMP_SKEW_SECS_MAX.saturating_mul(1000);
    let near = |now_ms: i64| signed_at_ms.abs_diff(now_ms) <= skew_max_ms.unsigned_abs();
    if !near(shared.clock.now_ms()) && !near(wall_clock_ms()) {
        return Err(Reply::sign_error("timestamp is more than 5 minutes off"));
    }
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |path_and_query| path_and_query.as_str());
    let message = wechat::request_message(
        method,
        path_and_query,
        authorization.timestamp,
        &authorization.nonce,
        body,
    );
    if !config
        .wechat_merchant_public_key
        .verify(message.as_bytes(), &authorization.signature)
    {
        return Err(Reply::sign_error("签名错误: the signature does not verify"));
    }
    Ok(())
}

/// Reads a body as UTF-8 text.
async fn read_text(body: Body) -> Result<String, Reply> {
    let bytes = read_body(body)
        .await
        .map_err(|BodyUnreadable| Reply::param_error("body unreadable or larger than 64 KiB"))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| Reply::param_error("body is not UTF-8"))
}

/// The out-trade-no of the path, checked.
fn path_out_trade_no(path: Result<Path<String>, PathRejection>) -> Result<String, Reply> {
    match path {
        Ok(Path(out_trade_no)) if is_valid_out_trade_no(&out_trade_no) => Ok(out_trade_no),
        _ => Err(Reply::param_error(
            "out_trade_no must be 1 to 64 letters, digits or _-|*",
        )),
    }
}

#[derive(Deserialize)]
struct NativeRequest {
    appid: String,
    mchid: String,
    description: String,
    out_trade_no: String,
    time_expire: Option<String>,
    notify_url: String,
    amount: NativeAmount,
}

#[derive(Deserialize)]
struct NativeAmount {
    total: i64,
    currency: Option<String>,
}

/// `POST /v3/pay/transactions/native`.
pub(crate) async fn create_native(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let shared = &simulator.shared;
    let reply = match read_text(body).await {
        Ok(body) => native(shared, &uri, &headers, &body).unwrap_or_else(|reply| reply),
        Err(reply) => reply,
    };
    reply.into_response(shared)
}

fn native(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: &str) -> Result<Reply, Reply> {
    let config = &shared.config;
    authenticate(shared, "POST", uri, headers, body)?;
    let request: NativeRequest = strict::json(body)
        .map_err(|error| Reply::param_error(format!("invalid request body: {error}")))?;
    if request.mchid != config.wechat_mchid {
        return Err(Reply::param_error("mchid does not match the Authorization"));
    }
    if request.appid != config.wechat_appid {
        return Err(Reply::error(
            StatusCode::BAD_REQUEST,
            wechat::CODE_APPID_MCHID_NOT_MATCH,
            "appid和mch_id不匹配",
        ));
    }
    if request.description.is_empty() || request.description.chars().count() > DESCRIPTION_CHARS_MAX
    {
        return Err(Reply::param_error(
            "description must be 1 to 127 characters",
        ));
    }
    if !is_valid_out_trade_no(&request.out_trade_no) {
        return Err(Reply::param_error(
            "out_trade_no must be 1 to 64 letters, digits or _-|*",
        ));
    }
    if !is_valid_notify_url(&request.notify_url) {
        return Err(Reply::param_error(
            "notify_url must be an http or https URL of at most 256 bytes",
        ));
    }
    if !(money::AMOUNT_FEN_MIN..=money::AMOUNT_FEN_MAX).contains(&request.amount.total) {
        return Err(Reply::param_error("amount.total out of range"));
    }
    if request
        .amount
        .currency
        .as_deref()
        .is_some_and(|currency| currency != "CNY")
    {
        return Err(Reply::param_error("amount.currency must be CNY"));
    }
    let expiry = match &request.time_expire {
        Some(text) => Expiry::At(
            wechat::parse_rfc3339(text)
                .ok_or_else(|| Reply::param_error("time_expire must be RFC 3339"))?,
        ),
        None => Expiry::AfterStart(ORDER_VALIDITY_DEFAULT_MS),
    };
    let out_trade_no = request.out_trade_no.clone();
    let new = NewTrade {
        channel: ChannelKind::Wechat,
        out_trade_no: request.out_trade_no,
        terms: CreateTerms {
            amount_fen: request.amount.total,
            subject: request.description,
            expiry_text: request.time_expire.unwrap_or_default(),
        },
        notify_url: Some(request.notify_url),
        expiry,
    };
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    if let Some(fault) = world.faults.take(GatewayMethod::WechatNative) {
        if fault.apply_anyway {
            let _ = world.trades.create_trade(new, now_ms);
        }
        return Err(Reply::system_error());
    }
    match world.trades.create_trade(new, now_ms) {
        Ok(_) => Ok(Reply::ok(json!({
            "code_url": world
                .trades
                .find_trade(&out_trade_no)
                .map(|trade| trade.pay_code.clone()),
        }))),
        Err(CreateRefusal::AlreadyPaid) => Err(Reply::error(
            StatusCode::FORBIDDEN,
            wechat::CODE_ORDERPAID,
            "订单已支付",
        )),
        Err(CreateRefusal::AlreadyClosed) => Err(Reply::error(
            StatusCode::BAD_REQUEST,
            wechat::CODE_ORDER_CLOSED,
            "订单已关闭",
        )),
        Err(CreateRefusal::OtherTerms) => Err(Reply::error(
            StatusCode::FORBIDDEN,
            wechat::CODE_OUT_TRADE_NO_USED,
            "商户订单号重复",
        )),
        Err(CreateRefusal::Full) => Err(Reply::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            wechat::CODE_SYSTEM_ERROR,
            "the simulator holds its maximum number of trades",
        )),
    }
}

/// The `mchid` query parameter, which must be ours.
fn check_query_mchid(shared: &Shared, uri: &Uri) -> Result<(), Reply> {
    let query = Form::parse(uri.query().unwrap_or_default().as_bytes())
        .map_err(|_| Reply::param_error("malformed query string (or a parameter given twice)"))?;
    let mchid = query
        .non_empty("mchid")
        .ok_or_else(|| Reply::param_error("mchid is required"))?;
    if mchid != shared.config.wechat_mchid {
        return Err(Reply::param_error("mchid does not match the Authorization"));
    }
    Ok(())
}

fn order_not_exist() -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        wechat::CODE_ORDER_NOT_EXIST,
        "订单不存在",
    )
}

/// `GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=…`.
pub(crate) async fn query(
    State(simulator): State<Simulator>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    let reply = query_trade(shared, path, &uri, &headers).unwrap_or_else(|reply| reply);
    reply.into_response(shared)
}

fn query_trade(
    shared: &Shared,
    path: Result<Path<String>, PathRejection>,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Reply, Reply> {
    authenticate(shared, "GET", uri, headers, "")?;
    let out_trade_no = path_out_trade_no(path)?;
    check_query_mchid(shared, uri)?;
    answer_query(shared, |trades| {
        trades
            .find_trade(&out_trade_no)
            .filter(|trade| trade.channel == ChannelKind::Wechat)
    })
}

/// The query answer for the trade `find` picks, once the fault armed for queries (if any) has
/// failed this call instead.
fn answer_query(
    shared: &Shared,
    find: impl FnOnce(&TradeBook) -> Option<&Trade>,
) -> Result<Reply, Reply> {
    let mut world = shared.settled_world();
    if world.faults.take(GatewayMethod::WechatQuery).is_some() {
        return Err(Reply::system_error());
    }
    let trade = find(&world.trades).ok_or_else(order_not_exist)?;
    Ok(Reply::ok(transaction(shared, trade)))
}

/// `GET /v3/pay/transactions/id/{transaction_id}?mchid=…`: the same answer as the query by
/// out-trade-no. A `transaction_id` exists for the merchant only once the buyer paid (the
/// notify and the query disclose it then), so an unpaid trade is not found by it.
pub(crate) async fn query_by_transaction_id(
    State(simulator): State<Simulator>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    let reply =
        query_trade_by_transaction_id(shared, path, &uri, &headers).unwrap_or_else(|reply| reply);
    reply.into_response(shared)
}

fn query_trade_by_transaction_id(
    shared: &Shared,
    path: Result<Path<String>, PathRejection>,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Reply, Reply> {
    authenticate(shared, "GET", uri, headers, "")?;
    let transaction_id = match path {
        Ok(Path(id))
            if (1..=TRANSACTION_ID_CHARS_MAX).contains(&id.len())
                && id.bytes().all(|byte| byte.is_ascii_alphanumeric()) =>
        {
            id
        }
        _ => {
            return Err(Reply::param_error(
                "transaction_id must be 1 to 32 letters or digits",
            ));
        }
    };
    check_query_mchid(shared, uri)?;
    answer_query(shared, |trades| {
        trades
            .find_trade_by_channel_trade_id(&transaction_id)
            .filter(|trade| trade.channel == ChannelKind::Wechat && trade.status.was_paid())
    })
}

/// `GET /v3/certificates`: in certificate mode, the platform certificates, AES-256-GCM
/// encrypted with the API v3 key under associated data `certificate`, as WeChat Pay serves
/// it; in public-key mode there is none to serve, and the answer is [`unknown_route`]'s.
pub(crate) async fn certificates(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let shared = &simulator.shared;
    let reply = list_certificates(shared, &uri, &headers).unwrap_or_else(|reply| reply);
    reply.into_response(shared)
}

fn list_certificates(shared: &Shared, uri: &Uri, headers: &HeaderMap) -> Result<Reply, Reply> {
    let certificates = shared.wechat_platform_certificates();
    if certificates.is_empty() {
        return Err(not_found());
    }
    authenticate(shared, "GET", uri, headers, "")?;
    let mut data = Vec::with_capacity(certificates.len());
    for certificate in certificates {
        // A fresh nonce for every envelope: GCM under one key must never reuse one.
        let nonce = random_nonce(12);
        let ciphertext = aes_gcm_encrypt(
            shared.config.wechat_api_v3_key.as_bytes(),
            nonce.as_bytes(),
            CERTIFICATE_ASSOCIATED_DATA.as_bytes(),
            certificate.pem.as_bytes(),
        )
        .map_err(|_| Reply::system_error())?;
        data.push(json!({
            "serial_no": certificate.serial,
            "effective_time": wechat::format_rfc3339(certificate.not_before_ms),
            "expire_time": wechat::format_rfc3339(certificate.not_after_ms),
            "encrypt_certificate": {
                "algorithm": wechat::RESOURCE_ALGORITHM,
                "nonce": nonce,
                "associated_data": CERTIFICATE_ASSOCIATED_DATA,
                "ciphertext": ciphertext,
            },
        }));
    }
    Ok(Reply::ok(json!({ "data": data })))
}

fn not_found() -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        wechat::CODE_NOT_FOUND,
        "请求的资源不存在 (no such API in the simulator)",
    )
}

/// Any `/v3` request no route takes (an unknown path, or a known one with another method):
/// WeChat Pay's own error body, signed like every answer, so that an SDK reports the channel's
/// `code` rather than failing on an unsigned or foreign answer.
pub(crate) fn unknown_route(simulator: &Simulator) -> Response {
    not_found().into_response(&simulator.shared)
}

/// A known `/v3` path called with a method it does not take: [`unknown_route`].
pub(crate) async fn method_not_routed(State(simulator): State<Simulator>) -> Response {
    unknown_route(&simulator)
}

/// A trade as the query answers it.
fn transaction(shared: &Shared, trade: &Trade) -> Value {
    let paid = trade.status.was_paid();
    let mut amount = json!({
        "total": trade.terms.amount_fen,
        "currency": "CNY",
        "payer_currency": "CNY",
    });
    let mut transaction = json!({
        "appid": shared.config.wechat_appid,
        "mchid": shared.config.wechat_mchid,
        "out_trade_no": trade.out_trade_no,
        "trade_type": "NATIVE",
        "trade_state": trade_state(trade.status),
        "trade_state_desc": trade_state_description(trade.status),
        "attach": "",
    });
    if paid {
        if let Value::Object(fields) = &mut amount {
            fields.insert("payer_total".to_owned(), json!(trade.terms.amount_fen));
        }
        if let Value::Object(fields) = &mut transaction {
            fields.insert("transaction_id".to_owned(), json!(trade.channel_trade_id));
            fields.insert("bank_type".to_owned(), json!("OTHERS"));
            fields.insert(
                "success_time".to_owned(),
                json!(trade.paid_at_ms.map(wechat::format_rfc3339)),
            );
            fields.insert("payer".to_owned(), json!({ "openid": WECHAT_PAYER_OPENID }));
        }
    }
    if let Value::Object(fields) = &mut transaction {
        fields.insert("amount".to_owned(), amount);
    }
    transaction
}

#[derive(Deserialize)]
struct CloseRequest {
    mchid: String,
}

/// `POST /v3/pay/transactions/out-trade-no/{out_trade_no}/close`.
pub(crate) async fn close(
    State(simulator): State<Simulator>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let shared = &simulator.shared;
    let reply = match read_text(body).await {
        Ok(body) => close_trade(shared, path, &uri, &headers, &body).unwrap_or_else(|reply| reply),
        Err(reply) => reply,
    };
    reply.into_response(shared)
}

fn close_trade(
    shared: &Shared,
    path: Result<Path<String>, PathRejection>,
    uri: &Uri,
    headers: &HeaderMap,
    body: &str,
) -> Result<Reply, Reply> {
    authenticate(shared, "POST", uri, headers, body)?;
    let out_trade_no = path_out_trade_no(path)?;
    let request: CloseRequest = strict::json(body)
        .map_err(|error| Reply::param_error(format!("invalid request body: {error}")))?;
    if request.mchid != shared.config.wechat_mchid {
        return Err(Reply::param_error("mchid does not match the Authorization"));
    }
    let mut world = shared.settled_world();
    let now_ms = world.now_ms();
    let fault = world.faults.take(GatewayMethod::WechatClose);
    if fault.is_some_and(|fault| !fault.apply_anyway) {
        return Err(Reply::system_error());
    }
    let is_wechat_trade = world
        .trades
        .find_trade(&out_trade_no)
        .is_some_and(|trade| trade.channel == ChannelKind::Wechat);
    // Closing an unknown order answers 204 as well (community reports): the merchant confirms
    // every close with a query.
    let result = if is_wechat_trade {
        world
            .trades
            .close_trade(&out_trade_no, CloseCause::Merchant, now_ms)
            .map(|(_, event)| event)
    } else {
        Ok(None)
    };
    if let Ok(event) = &result {
        world.publish(&shared.config, event.clone(), now_ms);
    }
    if fault.is_some() {
        return Err(Reply::system_error());
    }
    match result {
        Ok(_) => Ok(Reply::no_content()),
        Err(Refusal::Paid | Refusal::Closed) => Err(Reply::error(
            StatusCode::BAD_REQUEST,
            wechat::CODE_ORDERPAID,
            "订单已支付",
        )),
        Err(
            Refusal::NotFound
            | Refusal::NotPaid
            | Refusal::Expired
            | Refusal::NotSupported
            | Refusal::NothingToRefund,
        ) => Ok(Reply::no_content()),
    }
}

/// WeChat Pay's `trade_state` for a trade status.
pub(crate) fn trade_state(status: TradeStatus) -> &'static str {
    match status {
        TradeStatus::Pending => wechat::STATE_NOTPAY,
        TradeStatus::Paid | TradeStatus::Finished => wechat::STATE_SUCCESS,
        TradeStatus::Closed => wechat::STATE_CLOSED,
        TradeStatus::Refunded => wechat::STATE_REFUND,
    }
}

fn trade_state_description(status: TradeStatus) -> &'static str {
    match status {
        TradeStatus::Pending => "订单未支付",
        TradeStatus::Paid | TradeStatus::Finished => "支付成功",
        TradeStatus::Closed => "订单已关闭",
        TradeStatus::Refunded => "订单发生过退款",
    }
}

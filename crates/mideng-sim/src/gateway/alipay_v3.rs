//! The simulated Alipay OpenAPI v3: `POST /v3/alipay/trade/precreate`, `/query`, `/close`,
//! `/refund` and `/fastpay/refund/query` with JSON bodies, as the official Node SDK's `curl()`
//! sends them.
//!
//! A call is checked in order: one `authorization` header (and at most one
//! `alipay-app-auth-token`), its fields each named once, the app id, a timestamp within
//! [`v3::TIMESTAMP_SKEW_MS_MAX`] of the channel clock or of the wall clock (either way: the
//! simulated clock may run fast, the merchant's runs at real time), the signature over
//! [`v3::request_message`]; any failure there is 401. Then the body: a JSON object with no
//! repeated key at any depth (`mideng_channel::strict`), else 400 `invalid-parameter`. The
//! trade itself runs through the same business rules as `gateway.do` (`super::alipay`), armed
//! faults included, so the two protocols see one world.
//!
//! Answers, errors included, are signed in `alipay-timestamp` (the wall clock, Unix
//! milliseconds, for the same reason as WeChat answers), `alipay-nonce` and `alipay-signature`
//! over [`v3::response_message`]. A success is 200 with the business fields at the top level;
//! a failure is `{"code", "message"}` with 400 (a parameter or business refusal, its code the
//! sub-code of `gateway.do`: `ACQ.TRADE_NOT_EXIST`, …), 401 (authentication) or 500 (a system
//! error, an unknown outcome).
//!
//! Not simulated: nonce replay detection (a replayed request within the window is served
//! again, which for these calls changes nothing: a refund replayed under its `out_request_no`
//! is the same refund), certificate mode (`app_cert_sn` is signed but not checked) and request
//! encryption.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::alipay::{self, v3};
use mideng_channel::keys::random_nonce;
use mideng_channel::strict;
use serde_json::{Map, Value, json};

use super::alipay::Failure;
use super::{BodyUnreadable, read_body};
use crate::clock::wall_clock_ms;
use crate::shared::Shared;
use crate::simulator::Simulator;

/// The calls.
#[derive(Clone, Copy, Debug)]
enum Call {
    Precreate,
    Query,
    Close,
    Refund,
    RefundQuery,
}

/// `POST /v3/alipay/trade/precreate`.
pub(crate) async fn precreate(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&simulator, Call::Precreate, &uri, &headers, body).await
}

/// `POST /v3/alipay/trade/query`.
pub(crate) async fn query(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&simulator, Call::Query, &uri, &headers, body).await
}

/// `POST /v3/alipay/trade/close`.
pub(crate) async fn close(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&simulator, Call::Close, &uri, &headers, body).await
}

/// `POST /v3/alipay/trade/refund`.
pub(crate) async fn refund(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&simulator, Call::Refund, &uri, &headers, body).await
}

/// `POST /v3/alipay/trade/fastpay/refund/query`.
pub(crate) async fn refund_query(
    State(simulator): State<Simulator>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    serve(&simulator, Call::RefundQuery, &uri, &headers, body).await
}

async fn serve(
    simulator: &Simulator,
    call: Call,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let shared = &simulator.shared;
    let reply = match read_body(body).await {
        Ok(bytes) => match std::str::from_utf8(&bytes) {
            Ok(text) => handle(shared, call, uri, headers, text),
            Err(_) => Reply::error(
                StatusCode::BAD_REQUEST,
                "invalid-parameter",
                "the body is not UTF-8",
            ),
        },
        Err(BodyUnreadable) => Reply::error(
            StatusCode::BAD_REQUEST,
            "invalid-parameter",
            "request body unreadable or larger than 64 KiB",
        ),
    };
    reply.into_response(shared)
}

/// An answer before signing.
struct Reply {
    status: StatusCode,
    body: Value,
}

impl Reply {
    fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "code": code, "message": message.into() }),
        }
    }

    fn unauthorized(code: &str, message: &str) -> Self {
        Self::error(StatusCode::UNAUTHORIZED, code, message)
    }

    /// A failure of the shared business rules, in v3's form.
    fn failure(failure: &Failure) -> Self {
        let status = if failure.code == alipay::CODE_UNKNOWN
            || failure.sub_code == alipay::SUB_SYSTEM_ERROR
        {
            // The call may have been applied: the merchant must treat it as unknown.
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::BAD_REQUEST
        };
        // v3 names errors without the `isv.` family prefix of `gateway.do`.
        let code = failure
            .sub_code
            .strip_prefix("isv.")
            .unwrap_or(failure.sub_code);
        Self::error(status, code, failure.sub_msg.clone())
    }

    /// A success: the business node without `gateway.do`'s `code` and `msg`.
    fn success(mut node: Value) -> Self {
        if let Value::Object(fields) = &mut node {
            fields.remove("code");
            fields.remove("msg");
        }
        Self {
            status: StatusCode::OK,
            body: node,
        }
    }

    /// The response with Alipay's signature headers.
    fn into_response(self, shared: &Shared) -> Response {
        let body = self.body.to_string();
        let timestamp = wall_clock_ms().to_string();
        let nonce = random_nonce(32);
        let message = v3::response_message(&timestamp, &nonce, &body);
        let Ok(signature) = shared.config.alipay_gateway_key.sign(message.as_bytes()) else {
            tracing::error!("the Alipay gateway key failed to sign a v3 answer");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        let signed = [
            (v3::HEADER_TIMESTAMP, timestamp),
            (v3::HEADER_NONCE, nonce),
            (v3::HEADER_SIGNATURE, signature),
            (v3::HEADER_TRACE_ID, random_nonce(32)),
        ];
        for (name, value) in signed {
            // Every value is ASCII (digits, base64, nonce characters), so this always succeeds.
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        response
    }
}

fn handle(shared: &Shared, call: Call, uri: &Uri, headers: &HeaderMap, body: &str) -> Reply {
    if let Err(reply) = authenticate(shared, uri, headers, body) {
        return reply;
    }
    let fields: Map<String, Value> = match strict::json(body) {
        Ok(fields) => fields,
        Err(_) => {
            return Reply::error(
                StatusCode::BAD_REQUEST,
                "invalid-parameter",
                "the body is not a JSON object with unique keys",
            );
        }
    };
    let result = match call {
        Call::Precreate => notify_url(&fields)
            .and_then(|notify_url| super::alipay::precreate(shared, notify_url, &fields)),
        Call::Query => super::alipay::query(shared, &fields),
        Call::Close => super::alipay::close(shared, &fields),
        Call::Refund => super::alipay::refund(shared, &fields),
        Call::RefundQuery => super::alipay::refund_query(shared, &fields),
    };
    match result {
        Ok(node) => Reply::success(node),
        Err(failure) => Reply::failure(&failure),
    }
}

/// `notify_url`, a body field in v3: a string when present.
fn notify_url(fields: &Map<String, Value>) -> Result<Option<String>, Failure> {
    match fields.get("notify_url") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(url)) if url.is_empty() => Ok(None),
        Some(Value::String(url)) => Ok(Some(url.clone())),
        Some(_) => Err(Failure::illegal(
            "isv.invalid-parameter",
            "notify_url must be a string",
        )),
    }
}

/// The one value of header `name`: `Ok(None)` when absent; an error when repeated or not
/// visible ASCII.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Reply> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => value.to_str().map(Some).map_err(|_| {
            Reply::unauthorized("invalid-authorization", "a header is not visible ASCII")
        }),
        // Two values: which one was verified would depend on the reader.
        (Some(_), Some(_)) => Err(Reply::unauthorized(
            "invalid-authorization",
            "a signed header is repeated",
        )),
    }
}

/// Checks the `authorization` header of a request with this URI and body.
fn authenticate(shared: &Shared, uri: &Uri, headers: &HeaderMap, body: &str) -> Result<(), Reply> {
    let config = &shared.config;
    let header = single_header(headers, header::AUTHORIZATION.as_str())?.ok_or_else(|| {
        Reply::unauthorized(
            "invalid-authorization",
            "the authorization header is missing",
        )
    })?;
    let app_auth_token = single_header(headers, v3::HEADER_APP_AUTH_TOKEN)?;
    let authorization = v3::Authorization::parse(header).map_err(|error| {
        Reply::unauthorized(
            "invalid-authorization",
            &format!("authorization: {}", error.0),
        )
    })?;
    if authorization.app_id != config.alipay_app_id {
        return Err(Reply::unauthorized("invalid-app-id", "unknown app_id"));
    }
    if !authorization.is_fresh(shared.clock.now_ms()) && !authorization.is_fresh(wall_clock_ms()) {
        return Err(Reply::unauthorized(
            "invalid-timestamp",
            "timestamp is more than 5 minutes from the gateway's clock",
        ));
    }
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path(), |path_and_query| path_and_query.as_str());
    let message = v3::request_message(
        &authorization.auth_string,
        "POST",
        path_and_query,
        body,
        app_auth_token,
    );
    if !config
        .alipay_merchant_public_key
        .verify(message.as_bytes(), &authorization.signature)
    {
        return Err(Reply::unauthorized(
            "invalid-signature",
            "验签出错：the signature does not verify with the merchant's public key",
        ));
    }
    Ok(())
}

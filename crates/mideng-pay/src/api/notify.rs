//! Channel callbacks over HTTP: the raw notify goes to [`crate::flows::notify`] (verify, then
//! apply once per notify id) and its answer back in the channel's own format.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng_channel::ChannelKind;
use mideng_channel::adapter::{NotifyAnswer, RawNotify};

use crate::flows::notify;
use crate::state::AppState;

fn answer(reply: NotifyAnswer) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, reply.body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    response
}

async fn handle(state: &AppState, kind: ChannelKind, headers: &HeaderMap, body: Bytes) -> Response {
    let raw = RawNotify {
        headers: headers
            .iter()
            .filter_map(|(name, value)| {
                value
                    .to_str()
                    .ok()
                    .map(|value| (name.as_str().to_owned(), value.to_owned()))
            })
            .collect(),
        body: body.to_vec(),
    };
    match notify::receive(&state.ports, kind, &raw).await {
        Some(reply) => answer(reply),
        None => (StatusCode::NOT_FOUND, "channel not configured").into_response(),
    }
}

/// WeChat Pay's failure answer (the channel reads only the status; the body is for people).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Documents the body that `WechatChannel::answer` writes.
pub(super) struct WechatNotifyFailure {
    /// Always `FAIL`.
    #[schema(pattern = "^FAIL$")]
    code: String,
    /// What went wrong, briefly.
    message: String,
}

/// Alipay's asynchronous notification (form body, RSA2). Answers `success` or `failure`.
#[utoipa::path(
    post, path = "/v1/channels/alipay/notify", tag = "channels", operation_id = "alipay_notify",
    request_body(content = String, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "`success`, or `failure` to be sent again", body = String),
        (status = 404, description = "not-found: Alipay is not configured on this service", body = super::ProblemBody),
        (status = 503, description = "clock-unsynchronised: this instance's clock disagrees with the database's (Alipay sends again)", body = super::ProblemBody),
    )
)]
pub(super) async fn alipay(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&state, ChannelKind::Alipay, &headers, body).await
}

/// WeChat Pay's notification (API v3: signature headers, AES-256-GCM resource). Answers 204; 400
/// `{"code": "FAIL"}` for a notify that is refused; 503 `{"code": "FAIL"}` when we could not
/// process it now (the database or the order's lock unavailable: it is sent again).
#[utoipa::path(
    post, path = "/v1/channels/wechat/notify", tag = "channels", operation_id = "wechat_notify",
    request_body(content = String, content_type = "application/json"),
    responses(
        (status = 204, description = "Accepted"),
        (status = 400, description = "The notify is refused (signature, serial, timestamp, merchant, not ours, malformed)", body = WechatNotifyFailure, content_type = "application/json"),
        (status = 404, description = "not-found: WeChat Pay is not configured on this service", body = super::ProblemBody),
        (status = 503, description = "Not processed now, send it again: `{code: FAIL}` when the database or the order's lock is unavailable; the problem clock-unsynchronised when this instance's clock disagrees with the database's", content(
            (WechatNotifyFailure = "application/json"),
            (super::ProblemBody = "application/problem+json"),
        )),
    )
)]
pub(super) async fn wechat(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&state, ChannelKind::Wechat, &headers, body).await
}

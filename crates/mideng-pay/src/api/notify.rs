//! Channel callbacks. A notify is accepted only after its signature, merchant identity, our
//! payment number and the amount all check out; then it is deduplicated by the channel's
//! notify id and applied through the one success flow, in one transaction. Anything that cannot
//! be processed now is answered with the channel's failure answer, so that it is sent again.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::clock;
use mideng_channel::adapter::{Channel, NotifiedState, NotifyAnswer, NotifyVerdict, RawNotify};

use super::{AppState, decision, operation};
use crate::db::payments::SuccessOutcome;
use crate::store::{NotifyApplied, NotifyEffect, NotifyEvent, NotifyOutcome};

fn answer(reply: NotifyAnswer) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, reply.body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    response
}

async fn handle(
    state: &AppState,
    channel: Option<&Arc<dyn Channel>>,
    operation: &'static str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let Some(channel) = channel else {
        return (StatusCode::NOT_FOUND, "channel not configured").into_response();
    };
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
    let verified = match channel.verify_notify(&raw, clock::now_ms()) {
        Ok(verified) => verified,
        Err(rejection) => {
            tracing::warn!(%rejection, "notify refused");
            decision("signature", operation, "-", "-", rejection.label());
            return answer(channel.answer(NotifyVerdict::Refused));
        }
    };
    let event = match &verified.state {
        NotifiedState::Paid(payment) => NotifyEvent::Paid {
            channel_trade_no: payment.channel_trade_no.clone(),
            paid_at_ms: payment.paid_at_ms.unwrap_or_else(clock::now_ms),
        },
        NotifiedState::Closed => NotifyEvent::Closed,
        NotifiedState::Other(_) => NotifyEvent::Other,
    };
    let effect = NotifyEffect {
        operation,
        channel: channel.kind().as_str(),
        notify_id: verified.notify_id.clone(),
        payment_no: verified.out_trade_no.clone(),
        amount_fen: verified.amount_fen,
        event,
        dedup: state.payments.layer_on(super::BrokenLayer::NotifyDedup),
    };
    let subject = verified.out_trade_no.as_str();
    let NotifyApplied { outcome, tenant } = match state.store.apply_notify(&effect).await {
        Ok(applied) => applied,
        Err(error) => {
            tracing::warn!(%error, payment_no = subject, "notify not applied now; the channel will resend");
            return answer(channel.answer(NotifyVerdict::RetryLater));
        }
    };
    let (layer, label, verdict) = match &outcome {
        NotifyOutcome::Duplicate => ("dedup", "duplicate", NotifyVerdict::Accepted),
        NotifyOutcome::Applied(Some(SuccessOutcome::Paid { order_moved: true })) => {
            ("cas", "paid", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Applied(Some(SuccessOutcome::Paid { order_moved: false })) => {
            tracing::warn!(
                payment_no = subject,
                "paid, but the order no longer waited for payment (canceled): refund case"
            );
            ("cas", "paid_order_not_created", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Applied(Some(SuccessOutcome::AlreadyPaid)) => {
            ("cas", "already_paid", NotifyVerdict::Accepted)
        }
        NotifyOutcome::Applied(Some(_)) => ("cas", "refused", NotifyVerdict::RetryLater),
        NotifyOutcome::Applied(None) => ("cas", "acknowledged", NotifyVerdict::Accepted),
        NotifyOutcome::Rejected(why) => {
            tracing::warn!(
                payment_no = subject,
                why = *why,
                "notify does not match our payment"
            );
            ("signature", *why, NotifyVerdict::Refused)
        }
        NotifyOutcome::LateSuccess(status) => {
            tracing::error!(
                payment_no = subject, status = ?status,
                "charged at the channel, but the order is paid by another payment (or the attempt failed): refund by hand; not acknowledged"
            );
            ("cas", "double_charge", NotifyVerdict::RetryLater)
        }
        NotifyOutcome::Busy => ("dedup", "busy", NotifyVerdict::RetryLater),
    };
    decision(
        layer,
        operation,
        tenant.as_deref().unwrap_or("-"),
        subject,
        label,
    );
    answer(channel.answer(verdict))
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
    responses((status = 200, description = "`success`, or `failure` to be sent again", body = String))
)]
pub(super) async fn alipay(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(
        &state,
        state.alipay.as_ref(),
        operation::NOTIFY_ALIPAY,
        &headers,
        body,
    )
    .await
}

/// WeChat Pay's notification (API v3: signature headers, AES-256-GCM resource). Answers 204; 400
/// `{"code": "FAIL"}` for a notify that is refused; 500 `{"code": "FAIL"}` when we could not
/// process it now (it is sent again).
#[utoipa::path(
    post, path = "/v1/channels/wechat/notify", tag = "channels", operation_id = "wechat_notify",
    request_body(content = String, content_type = "application/json"),
    responses(
        (status = 204, description = "Accepted"),
        (status = 400, description = "The notify is refused (signature, serial, timestamp, merchant, not ours, malformed)", body = WechatNotifyFailure, content_type = "application/json"),
        (status = 500, description = "Not processed now: send it again", body = WechatNotifyFailure, content_type = "application/json"),
    )
)]
pub(super) async fn wechat(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(
        &state,
        state.wechat.as_ref(),
        operation::NOTIFY_WECHAT,
        &headers,
        body,
    )
    .await
}

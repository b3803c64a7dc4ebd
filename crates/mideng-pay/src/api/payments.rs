//! Payment attempts over HTTP: parse, run the flow ([`crate::flows::payment`]), render. The
//! flow stacks the seeds' layers below the route's token and `Idempotency-Key`: the per-order
//! lock, the order's row lock and the one-pending-payment constraint, and the channel's own
//! idempotency by `out_trade_no`.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};
use mideng::state::StateMachine;
use mideng_channel::ChannelKind;

use super::error::Code;
use super::models::{CreatePayment, PaymentView};
use super::{ApiError, ApiJson, AppState};
use crate::domain::ids::{OrderId, PaymentNo};
use crate::domain::payment::Payment;
use crate::flows::payment::{self, Closed, Created};

fn payment_answer(status: StatusCode, payment: &Payment, replayed: bool) -> Response {
    let mut response = (status, axum::Json(PaymentView::of(payment))).into_response();
    if replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

fn paid(code: Code, payment: &Payment) -> ApiError {
    ApiError::new(code, "the order is paid").with_existing(PaymentView::of(payment))
}

fn channel_rejected(detail: &str) -> ApiError {
    ApiError::new(Code::ChannelRejected, detail)
}

fn channel_unavailable(detail: &str) -> ApiError {
    ApiError::new(Code::ChannelUnavailable, detail).retry_after(2)
}

fn not_configured(channel: &str) -> ApiError {
    ApiError::new(
        Code::ChannelNotConfigured,
        format!("{channel} is not configured on this service"),
    )
}

/// The payment exists here but the channel gave no definite answer about its trade: 202 with
/// the PENDING payment (no `pay_url` yet). Not a 5xx: the attempt is real and its token is
/// spent; the next request for the order (a fresh token) creates the trade at the channel
/// again under the same payment number, and reconciliation settles it either way.
fn not_yet_at_channel(payment: &Payment) -> Response {
    let mut response = payment_answer(StatusCode::ACCEPTED, payment, false);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    response
}

/// Creates a payment attempt for an order, or answers the order's pending one.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/payments", tag = "payments", operation_id = "create_payment",
    params(
        ("order_id" = String, Path, description = "Order id"),
        ("Idempotency-Token" = Option<String>, Header, description = "One-time token from POST /v1/tokens (required unless disabled)"),
        ("Idempotency-Key" = Option<String>, Header, description = "Client key: a retry replays the first answer"),
    ),
    request_body = CreatePayment,
    responses(
        (status = 201, description = "New pending payment", body = PaymentView),
        (status = 202, description = "Pending payment whose trade the channel has not confirmed yet (no pay_url): ask again with a new token", body = PaymentView),
        (status = 200, description = "The order's pending payment, or a replay (Idempotent-Replayed: true)", body = PaymentView),
        (status = 409, description = "order-already-paid, payment-closed, in-progress, duplicate-submission, order-not-payable", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn create(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(order_id): Path<String>,
    ApiJson(body): ApiJson<CreatePayment>,
) -> Result<Response, ApiError> {
    let order_id = OrderId::parse(&order_id).map_err(|_| ApiError::not_found("order"))?;
    let channel = ChannelKind::parse(&body.channel)
        .map_err(|_| ApiError::new(Code::InvalidRequest, "channel must be alipay or wechat"))?;
    match payment::create(&state.ports, &tenant, &order_id, channel).await? {
        Created::New(payment) => Ok(payment_answer(StatusCode::CREATED, &payment, false)),
        Created::Existing(payment) => Ok(payment_answer(StatusCode::OK, &payment, true)),
        Created::NotYetAtChannel(payment) => Ok(not_yet_at_channel(&payment)),
        Created::NoOrder => Err(ApiError::not_found("order")),
        Created::ChannelNotConfigured(channel) => Err(not_configured(&channel)),
        Created::OrderPaid(payment) => Err(paid(Code::OrderAlreadyPaid, &payment)),
        Created::NotPayable(status) => Err(ApiError::new(
            Code::OrderNotPayable,
            format!("the order is {}", status.as_str()),
        )),
        Created::ClosedAtChannel => Err(ApiError::new(
            Code::PaymentClosed,
            "the channel closed this attempt; create another one",
        )),
        Created::ChannelRejected => Err(channel_rejected(
            "the channel refused the payment; create another attempt",
        )),
    }
}

/// A payment attempt.
#[utoipa::path(
    get, path = "/v1/payments/{payment_no}", tag = "payments", operation_id = "show_payment",
    params(("payment_no" = String, Path, description = "Payment number")),
    responses((status = 200, body = PaymentView), (status = 404, body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn show(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(payment_no): Path<String>,
) -> Result<axum::Json<PaymentView>, ApiError> {
    let payment_no = PaymentNo::parse(&payment_no).map_err(|_| ApiError::not_found("payment"))?;
    let payment = payment::close::own_payment(&state.ports, &tenant, &payment_no)
        .await?
        .ok_or_else(|| ApiError::not_found("payment"))?;
    Ok(axum::Json(PaymentView::of(&payment)))
}

/// Closes a pending payment: at the channel first, then locally. Closing a closed payment
/// answers 200 again.
#[utoipa::path(
    post, path = "/v1/payments/{payment_no}/close", tag = "payments", operation_id = "close_payment",
    params(("payment_no" = String, Path, description = "Payment number")),
    responses(
        (status = 200, description = "Closed (now or before)", body = PaymentView),
        (status = 202, description = "Not closable yet: the channel has no trade (code not scanned) and it stays payable until its expiry; the payment stays PENDING", body = PaymentView),
        (status = 409, description = "already-paid: the buyer paid first", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn close(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(payment_no): Path<String>,
) -> Result<Response, ApiError> {
    let payment_no = PaymentNo::parse(&payment_no).map_err(|_| ApiError::not_found("payment"))?;
    match payment::close(&state.ports, &tenant, &payment_no).await? {
        Closed::Closed(payment) | Closed::AlreadyClosed(payment) => {
            Ok(payment_answer(StatusCode::OK, &payment, false))
        }
        Closed::Deferred(payment) => Ok(payment_answer(StatusCode::ACCEPTED, &payment, false)),
        Closed::Paid(payment) => Err(paid(Code::AlreadyPaid, &payment)),
        Closed::FailedAtCreation => Err(ApiError::new(
            Code::PaymentNotPending,
            "the payment failed at creation; there is nothing to close",
        )),
        Closed::NotPending => Err(ApiError::new(
            Code::PaymentNotPending,
            "the payment is not pending",
        )),
        Closed::NotFound => Err(ApiError::not_found("payment")),
        Closed::ChannelNotConfigured => Err(not_configured("its channel")),
        Closed::Busy => Err(ApiError::new(
            Code::Shared(mideng::http::Problem::InProgress {
                retry_after: std::time::Duration::from_secs(1),
            }),
            "the order is busy; retry",
        )
        .retry_after(1)),
        Closed::ChannelPending => Err(channel_unavailable(
            "the channel has not confirmed the close; retry",
        )),
        Closed::ChannelUnknown => Err(channel_unavailable(
            "the channel did not answer; retry (the payment number stays the same)",
        )),
        Closed::ChannelRejected => Err(channel_rejected("the channel refused to close the trade")),
    }
}

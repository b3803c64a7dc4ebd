//! Payment attempts and their refunds over HTTP: parse, run the flow ([`crate::flows::payment`],
//! [`crate::flows::refund`]), render. The
//! flow stacks the seeds' layers below the route's token and `Idempotency-Key`: the per-order
//! lock, the order's row lock and the one-pending-payment constraint, and the channel's own
//! idempotency by `out_trade_no`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::http::{IDEMPOTENT_REPLAYED, IdempotencyContext, Tenant, not_final};
use mideng::state::StateMachine;
use mideng_channel::ChannelKind;

use super::error::Code;
use super::models::{CreatePayment, CreateRefund, PaymentView, RefundView};
use super::page::{PageQuery, PageView};
use super::{ApiError, ApiJson};
use crate::domain::ids::{OrderId, PaymentNo};
use crate::domain::keys::Principal;
use crate::domain::payment::Payment;
use crate::domain::refund::{Refund, checked_reason};
use crate::flows::payment::{self, Closed, Created};
use crate::flows::refund::{self, Requested};
use crate::limits::{PAGE_ATTEMPT_WINDOW, PAGE_ATTEMPTS_PER_WINDOW};
use crate::state::AppState;

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
/// the PENDING payment (no `pay_url` yet) and `Retry-After: 2`. Not a 5xx: the attempt is real.
/// Not final either: the layer does not store it, so the client's retry with the same key and
/// the same token (bound to that key) runs again, asks the channel for the same payment number
/// and gets the outcome (a retry without a key needs a fresh token). Reconciliation settles
/// the attempt if nobody asks again.
/// Another writer holds the order (its lock, or our lease was taken over): 409 `in-progress`
/// with `Retry-After: 1`, not stored under the key (an answer that asks to retry never is).
fn busy() -> ApiError {
    ApiError::new(
        Code::Shared(mideng::http::Problem::InProgress {
            retry_after: std::time::Duration::from_secs(1),
        }),
        "another request is working on this order; retry",
    )
    .retry_after(1)
}

fn not_yet_at_channel(payment: &Payment) -> Response {
    let mut response = payment_answer(StatusCode::ACCEPTED, payment, false);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    not_final(response)
}

/// How long a page must wait before it may open a new attempt for an order with `payments`:
/// `None` when it may now (the order has a pending attempt, which is answered rather than a
/// new one made, or fewer than [`PAGE_ATTEMPTS_PER_WINDOW`] attempts in the window), else the
/// milliseconds until the oldest attempt in the window leaves it.
fn page_attempt_wait(payments: &[Payment], now_ms: i64) -> Option<i64> {
    use crate::domain::payment::PaymentStatus;
    if payments
        .iter()
        .any(|payment| payment.status == PaymentStatus::Pending)
    {
        return None;
    }
    let window_ms = mideng::clock::duration_ms(PAGE_ATTEMPT_WINDOW);
    let since_ms = now_ms.saturating_sub(window_ms);
    let mut recent: Vec<i64> = payments
        .iter()
        .map(|payment| payment.created_at_ms)
        .filter(|created_at_ms| *created_at_ms > since_ms)
        .collect();
    if recent.len() < PAGE_ATTEMPTS_PER_WINDOW {
        return None;
    }
    recent.sort_unstable();
    // The attempt whose leaving the window brings the count under the cap.
    let freeing = recent[recent.len() - PAGE_ATTEMPTS_PER_WINDOW];
    Some(
        freeing
            .saturating_add(window_ms)
            .saturating_sub(now_ms)
            .max(1),
    )
}

/// Creates a payment attempt for an order, or answers the order's pending one.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/payments", tag = "payments", operation_id = "create_payment",
    params(
        ("order_id" = String, Path, description = "Order id"),
        ("Idempotency-Token" = Option<String>, Header, description = "One-time token from POST /v1/tokens (required unless disabled)"),
        ("Idempotency-Key" = Option<String>, Header, description = "Client key: a retry replays the first answer"),
        ("Mideng-Client-Secret" = Option<String>, Header, description = "With a publishable key: the order's client secret (required)"),
    ),
    request_body = CreatePayment,
    responses(
        (status = 201, description = "New pending payment", body = PaymentView),
        (status = 202, description = "Pending payment whose trade the channel has not confirmed yet (no pay_url), not stored under the key: ask again after Retry-After with the same Idempotency-Key and token (without a key, a new token)", body = PaymentView),
        (status = 200, description = "The order's pending payment, or a replay (Idempotent-Replayed: true)", body = PaymentView),
        (status = 409, description = "order-already-paid, payment-closed, duplicate-submission, order-not-payable; in-progress (Retry-After, not stored under the key): the key is in use, or another request holds the order and it has no payment yet", body = super::ProblemBody),
        (status = 401, description = "unauthorized; client-secret-invalid (a publishable key without this order's valid client secret)", body = super::ProblemBody),
        (status = 404, description = "No such order, or (for a page) not the order its client secret opens", body = super::ProblemBody),
        (status = 429, description = "rate-limited (the order's page sent more payment requests than a page may in a minute) or too-many-attempts (the order had as many new attempts from its page as it may in an hour); Retry-After", body = super::ProblemBody),
    ),
    security(("api_key" = []), ("publishable_key" = []))
)]
pub(super) async fn create(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(order_id): Path<String>,
    ApiJson(body): ApiJson<CreatePayment>,
) -> Result<Response, ApiError> {
    let order_id = OrderId::parse(&order_id).map_err(|_| ApiError::not_found("order"))?;
    let channel = ChannelKind::parse(&body.channel)
        .map_err(|_| ApiError::new(Code::InvalidRequest, "channel must be alipay or wechat"))?;
    // A page pays only the order its client secret opens, and makes a bounded number of trades
    // for it (one more read, for pages alone).
    if let Principal::Page { .. } = principal {
        let (_, payments) =
            super::orders::visible_order(&state, &tenant, &principal, &order_id).await?;
        let now_ms = state.ports.clock.now_ms();
        if let Some(wait_ms) = page_attempt_wait(&payments, now_ms) {
            crate::flows::decision(
                "rate",
                crate::flows::operation::PAYMENT_CREATE,
                &tenant,
                order_id.as_str(),
                "page_attempts_limited",
            );
            metrics::counter!(crate::metrics::PAGE_REQUESTS_LIMITED, "kind" => "attempt")
                .increment(1);
            return Err(ApiError::new(
                Code::TooManyAttempts,
                format!(
                    "this order had {PAGE_ATTEMPTS_PER_WINDOW} new payment attempts from its page \
                     within the hour; the merchant's server can still make one"
                ),
            )
            .retry_after(u64::try_from(wait_ms.saturating_add(999) / 1000).unwrap_or(u64::MAX)));
        }
    }
    match payment::create(&state.ports, &tenant, &order_id, channel).await? {
        Created::New(payment) => Ok(payment_answer(StatusCode::CREATED, &payment, false)),
        Created::Existing(payment) => Ok(payment_answer(StatusCode::OK, &payment, true)),
        Created::NotYetAtChannel(payment) => Ok(not_yet_at_channel(&payment)),
        Created::NoOrder => Err(ApiError::not_found("order")),
        Created::ChannelNotConfigured(channel) => Err(not_configured(channel.as_str())),
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
        Created::Busy => Err(busy()),
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
    let shown = payment::show(&state.ports, &tenant, &payment_no)
        .await?
        .ok_or_else(|| ApiError::not_found("payment"))?;
    Ok(axum::Json(PaymentView {
        refundable: Some(shown.refundable_fen),
        refunds: Some(shown.refunds.iter().map(RefundView::of).collect()),
        ..PaymentView::of(&shown.payment)
    }))
}

/// Closes a pending payment: at the channel first, then locally. Closing a closed payment
/// answers 200 again.
#[utoipa::path(
    post, path = "/v1/payments/{payment_no}/close", tag = "payments", operation_id = "close_payment",
    params(("payment_no" = String, Path, description = "Payment number")),
    responses(
        (status = 200, description = "Closed (now or before)", body = PaymentView),
        (status = 202, description = "Not closable yet: the channel has no trade (code not scanned) and it stays payable until its expiry; the payment stays PENDING", body = PaymentView),
        (status = 409, description = "already-paid: the buyer paid first; in-progress (Retry-After): another request holds the order and the payment is still pending", body = super::ProblemBody),
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
        Closed::Busy => Err(busy()),
        Closed::ChannelPending => Err(channel_unavailable(
            "the channel has not confirmed the close; retry",
        )),
        Closed::ChannelUnknown => Err(channel_unavailable(
            "the channel did not answer; retry (the payment number stays the same)",
        )),
        Closed::ChannelRejected => Err(channel_rejected("the channel refused to close the trade")),
    }
}

fn refund_answer(status: StatusCode, refund: &Refund) -> Response {
    (status, axum::Json(RefundView::of(refund))).into_response()
}

/// Refunds a paid payment, in full or in part, under a required `Idempotency-Key`: the key is
/// the refund's business key (one refund per key, for as long as the refund exists), and the
/// refund's number is the channel's own key for it, so a retry never refunds twice. The
/// payment's refunds that are not CLOSED never add up to more than its amount.
#[utoipa::path(
    post, path = "/v1/payments/{payment_no}/refunds", tag = "refunds", operation_id = "create_refund",
    params(
        ("payment_no" = String, Path, description = "Payment number"),
        ("Idempotency-Key" = String, Header, description = "Client key (required): a retry replays the first answer and never refunds twice"),
    ),
    request_body = CreateRefund,
    responses(
        (status = 201, description = "The refund, as the channel's answer left it: SUCCESS, PROCESSING (the channel has not finished, or did not answer: follow GET /v1/refunds/{refund_no}), CLOSED (the channel refused it; nothing moved) or ABNORMAL", body = RefundView),
        (status = 200, description = "The refund this key made before (after a crash, or a replay with Idempotent-Replayed: true)", body = RefundView),
        (status = 409, description = "payment-not-refundable (not PAID, or paid after its order was canceled: its refund case gives the whole charge back), refund-exceeds-payment, in-progress", body = super::ProblemBody),
        (status = 422, description = "invalid-amount; invalid-request (a reason over 80 characters, or with a control character, a line separator or a bidirectional control); idempotency-key-reused: the key was used with another payment, amount or reason (its record is kept for the funds retention); refund-key-reused: the same, found by the refund's unique key after that record was purged (the body names the refund the key made)", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn refund(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    context: Option<axum::Extension<IdempotencyContext>>,
    Path(payment_no): Path<String>,
    ApiJson(body): ApiJson<CreateRefund>,
) -> Result<Response, ApiError> {
    let payment_no = PaymentNo::parse(&payment_no).map_err(|_| ApiError::not_found("payment"))?;
    let amount = body.amount.parse()?;
    let reason = checked_reason(&body.reason).ok_or_else(|| {
        ApiError::new(
            Code::InvalidRequest,
            "reason must be at most 80 characters, without control characters, line separators or bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069)",
        )
    })?;
    // The route's layer requires the key; without one the request never gets here.
    let Some(key) = context.and_then(|axum::Extension(context)| context.key) else {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "send an Idempotency-Key: it names the refund",
        ));
    };
    let asked = refund::RefundRequest {
        tenant: &tenant,
        payment_no: payment_no.as_str(),
        request_key: key.as_str(),
        amount_fen: amount.fen(),
        reason,
    };
    match refund::request(&state.ports, asked).await? {
        Requested::New(refund) => Ok(refund_answer(StatusCode::CREATED, &refund)),
        Requested::Existing(refund) => Ok(refund_answer(StatusCode::OK, &refund)),
        Requested::KeyReused(refund) => Err(ApiError::new(
            Code::RefundKeyReused,
            "this Idempotency-Key made another refund; use a new key for a new refund",
        )
        .with_existing(RefundView::of(&refund))),
        Requested::NoPayment => Err(ApiError::not_found("payment")),
        Requested::NotPaid(status) => Err(ApiError::new(
            Code::PaymentNotRefundable,
            format!(
                "the payment is {}; only a PAID payment is refunded",
                status.as_str()
            ),
        )),
        Requested::Exceeds { refundable_fen } => Err(ApiError::new(
            Code::RefundExceedsPayment,
            format!("at most {refundable_fen} fen is left to refund"),
        )),
        Requested::InCase => Err(ApiError::new(
            Code::PaymentNotRefundable,
            "the payment was made after its order was canceled: its refund case gives the whole charge back (GET /v1/reconciliation/cases)",
        )),
    }
}

/// A refund.
#[utoipa::path(
    get, path = "/v1/refunds/{refund_no}", tag = "refunds", operation_id = "show_refund",
    params(("refund_no" = String, Path, description = "Refund number")),
    responses((status = 200, body = RefundView), (status = 404, body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn show_refund(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(refund_no): Path<String>,
) -> Result<axum::Json<RefundView>, ApiError> {
    let refund_no = PaymentNo::parse(&refund_no).map_err(|_| ApiError::not_found("refund"))?;
    let refund = refund::own_refund(&state.ports, &tenant, refund_no.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("refund"))?;
    Ok(axum::Json(RefundView::of(&refund)))
}

/// The tenant's payment attempts in the order they were created (oldest first), a page at a
/// time; each as `GET /v1/payments/{payment_no}` shows it, without its refunds.
#[utoipa::path(
    get, path = "/v1/payments", tag = "payments", operation_id = "list_payments",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Payments per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last payment (payment_no) of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<PaymentView>),
        (status = 400, description = "invalid-query: the limit, or a cursor that is no payment of yours", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<PaymentView>>, ApiError> {
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| payment::page(ports, &tenant, after.as_deref(), limit).await)
        .await?;
    Ok(axum::Json(page.map(|payment| PaymentView::of(&payment))))
}

/// The tenant's refunds in the order they were created (oldest first), a page at a time.
#[utoipa::path(
    get, path = "/v1/refunds", tag = "refunds", operation_id = "list_refunds",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Refunds per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last refund (refund_no) of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<RefundView>),
        (status = 400, description = "invalid-query: the limit, or a cursor that is no refund of yours", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list_refunds(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<RefundView>>, ApiError> {
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| refund::page(ports, &tenant, after.as_deref(), limit).await)
        .await?;
    Ok(axum::Json(page.map(|refund| RefundView::of(&refund))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::money::{Amount, Currency};
    use crate::domain::payment::PaymentStatus;

    fn attempt(status: PaymentStatus, created_at_ms: i64) -> Payment {
        Payment {
            payment_no: format!("P{created_at_ms}"),
            tenant_id: "t1".to_owned(),
            order_id: "o-1".to_owned(),
            channel: ChannelKind::Alipay,
            amount: Amount::new(100).expect("an amount"),
            currency: Currency::Cny,
            status,
            pay_url: None,
            expires_at_ms: created_at_ms + 900_000,
            channel_trade_no: None,
            paid_at_ms: None,
            created_at_ms,
        }
    }

    #[test]
    fn a_page_waits_for_the_oldest_attempt_of_a_full_window_to_leave_it() {
        let hour_ms = mideng::clock::duration_ms(PAGE_ATTEMPT_WINDOW);
        let now_ms = 10 * hour_ms;
        let failed =
            |minutes_ago: i64| attempt(PaymentStatus::Failed, now_ms - minutes_ago * 60_000);
        let four: Vec<Payment> = (1..=4).map(failed).collect();
        assert_eq!(page_attempt_wait(&four, now_ms), None, "under the cap");
        let five: Vec<Payment> = (1..=5).map(failed).collect();
        // The oldest of the five was made 5 minutes ago: it leaves the window in 55 minutes.
        assert_eq!(page_attempt_wait(&five, now_ms), Some(hour_ms - 5 * 60_000));
        let mut old_ones: Vec<Payment> = (61..=70).map(failed).collect();
        old_ones.extend((1..=4).map(failed));
        assert_eq!(
            page_attempt_wait(&old_ones, now_ms),
            None,
            "older ones left the window"
        );
        let mut pending = five.clone();
        pending.push(attempt(PaymentStatus::Pending, now_ms));
        assert_eq!(
            page_attempt_wait(&pending, now_ms),
            None,
            "a pending attempt is answered, never a new one made"
        );
    }
}

//! Payment attempts. Creation stacks every layer of the seeds: the one-time token and the
//! `Idempotency-Key` (the route's layer), the per-order lock (Redis in production), the order's
//! row lock and the one-pending-payment constraint in the database, and the channel's own
//! idempotency by `out_trade_no`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};
use mideng::lock::LockGuard;
use mideng::{Name, clock};
use mideng_channel::adapter::{Channel, ChannelError, CreateTrade, TradeState};

use super::models::{CreatePayment, PaymentView};
use super::{ApiError, ApiJson, AppState, decision, operation};
use crate::db::payments::{PaymentRow, SuccessOutcome};
use crate::domain::ids::{OrderId, PaymentNo};
use crate::domain::payment::{ChannelName, PaymentStatus};
use crate::store::{LocalClose, OpenPayment};

/// Clocks differ: a trade the channel does not know is treated as still payable until this long
/// after its expiry.
const EXPIRY_GRACE_MS: i64 = 60_000;

/// How long the order lock is held at most (a channel call is bounded well below it).
const ORDER_LOCK_TTL: Duration = Duration::from_secs(30);

/// The name of an order's lock in the lock store (Redis keys carry it under the store's
/// prefix).
pub fn order_lock_name(tenant: &str, order_id: &str) -> Option<Name> {
    Name::parse(&format!("order:{tenant}:{order_id}")).ok()
}

/// Takes the order's lock, waiting briefly. `Ok(None)` when the wait ran out; when the lock
/// store itself fails, the request goes on without it (the database still decides) and the
/// degradation is logged and counted.
async fn lock_order(
    state: &AppState,
    operation: &'static str,
    tenant: &str,
    order_id: &str,
) -> Result<Option<Option<LockGuard>>, ApiError> {
    let Some(name) = order_lock_name(tenant, order_id) else {
        return Ok(Some(None));
    };
    if !state.payments.layer_on(super::BrokenLayer::OrderLock) {
        decision("lock", operation, tenant, order_id, "off");
        return Ok(Some(None));
    }
    match state
        .locks
        .acquire(&name, ORDER_LOCK_TTL, state.payments.lock_wait)
        .await
    {
        Ok(Some(guard)) => {
            decision("lock", operation, tenant, order_id, "acquired");
            Ok(Some(Some(guard)))
        }
        Ok(None) => {
            decision("lock", operation, tenant, order_id, "busy");
            Ok(None)
        }
        Err(error) => {
            tracing::warn!(%error, "lock store unavailable; going on under the database's guard");
            decision("lock", operation, tenant, order_id, "degraded");
            Ok(Some(None))
        }
    }
}

async fn unlock(state: &AppState, guard: Option<LockGuard>) {
    if let Some(guard) = guard
        && let Err(error) = state.locks.release(&guard).await
    {
        tracing::warn!(%error, "releasing an order lock failed; it expires by itself");
    }
}

fn payment_answer(status: StatusCode, payment: &PaymentRow, replayed: bool) -> Response {
    let mut response = (status, axum::Json(PaymentView::of(payment))).into_response();
    if replayed {
        response.headers_mut().insert(
            IDEMPOTENT_REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    response
}

fn already_paid(code: &'static str, payment: &PaymentRow) -> ApiError {
    ApiError::conflict(code, "the order is paid").with_existing(PaymentView::of(payment))
}

fn channel_unavailable(error: &ChannelError) -> ApiError {
    tracing::warn!(%error, "channel call without a definite answer");
    ApiError::unavailable(
        "channel-unavailable",
        "the channel did not answer; retry (the payment number stays the same)",
        2,
    )
}

/// Creates the trade at the channel for a pending payment that has no pay URL yet, and
/// records the URL; `None` when the channel gave no definite answer. The channel is idempotent
/// by `out_trade_no`, so creating again later (the next request for the order) is safe.
async fn create_at_channel(
    state: &AppState,
    payment: &PaymentRow,
) -> Result<Option<PaymentRow>, ApiError> {
    if payment.pay_url.is_some() {
        return Ok(Some(payment.clone()));
    }
    let name = ChannelName::parse(&payment.channel)
        .map_err(|_| ApiError::unprocessable("channel-unavailable", "unknown channel"))?;
    let channel = state
        .channel(name)
        .ok_or_else(|| ApiError::unprocessable("channel-unavailable", "channel not configured"))?;
    let trade = CreateTrade {
        out_trade_no: payment.payment_no.clone(),
        amount_fen: payment.amount_fen,
        subject: format!("order {}", payment.order_id),
        expires_at_ms: payment.expires_at_ms,
    };
    match channel.create_trade(&trade).await {
        Ok(created) => {
            state
                .store
                .set_pay_url(&payment.payment_no, &created.pay_url)
                .await?;
            Ok(Some(PaymentRow {
                pay_url: Some(created.pay_url),
                ..payment.clone()
            }))
        }
        Err(error @ ChannelError::OutcomeUnknown(_)) => {
            tracing::warn!(%error, payment_no = %payment.payment_no, "trade creation without a definite answer");
            Ok(None)
        }
        Err(error @ ChannelError::Rejected { .. }) => {
            // A refusal may mean "this trade exists and is paid (or closed)": the trade was
            // created by an earlier call whose answer was lost, and the buyer paid (or the
            // merchant closed) since. Ask before failing the attempt.
            tracing::warn!(%error, payment_no = %payment.payment_no, "channel refused the trade; asking what it knows");
            settle_refused(state, channel.as_ref(), payment).await
        }
        Err(error) => {
            // Not sendable: the attempt failed and frees the order for another.
            tracing::warn!(%error, payment_no = %payment.payment_no, "the trade could not be sent");
            state.store.fail_payment(&payment.payment_no).await?;
            Err(channel_rejected())
        }
    }
}

fn channel_rejected() -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "channel-rejected",
        "the channel refused the payment; create another attempt",
    )
}

/// After the channel refused to create a trade: a paid trade runs the one success flow (409
/// `order-already-paid`), a closed one closes the attempt here (409 `payment-closed`), an
/// unknown answer leaves it pending (`None`: 202), and only a trade the channel does not have
/// fails the attempt (502).
async fn settle_refused(
    state: &AppState,
    channel: &dyn Channel,
    payment: &PaymentRow,
) -> Result<Option<PaymentRow>, ApiError> {
    match channel.query_trade(&payment.payment_no).await {
        Ok(TradeState::Paid(paid)) => {
            state
                .store
                .apply_success(&payment.payment_no, &paid)
                .await?;
            let current = state
                .store
                .payment(&payment.payment_no)
                .await?
                .unwrap_or_else(|| payment.clone());
            Err(already_paid("order-already-paid", &current))
        }
        Ok(TradeState::Refunded) => Err(already_paid("order-already-paid", payment)),
        Ok(TradeState::Closed) => {
            state.store.close_payment(&payment.payment_no).await?;
            Err(ApiError::conflict(
                "payment-closed",
                "the channel closed this attempt; create another one",
            ))
        }
        Ok(TradeState::Pending) | Err(ChannelError::OutcomeUnknown(_)) => Ok(None),
        Ok(TradeState::NotFound) | Err(_) => {
            state.store.fail_payment(&payment.payment_no).await?;
            Err(channel_rejected())
        }
    }
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
        (status = 409, description = "order-already-paid, in-progress, duplicate-submission, order-not-payable", body = super::ProblemBody),
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
    let channel = ChannelName::parse(&body.channel).map_err(|_| {
        ApiError::unprocessable("invalid-request", "channel must be alipay or wechat")
    })?;
    if state.channel(channel).is_none() {
        return Err(ApiError::unprocessable(
            "channel-unavailable",
            format!("{} is not configured", channel.as_str()),
        ));
    }
    let op = operation::PAYMENT_CREATE;
    let Some(guard) = lock_order(&state, op, &tenant, order_id.as_str()).await? else {
        // Someone else held the order's lock for the whole wait: re-check the order rather
        // than fail.
        return recheck(&state, &tenant, &order_id, channel).await;
    };
    let result = open(&state, &tenant, &order_id, channel).await;
    unlock(&state, guard).await;
    result
}

async fn open(
    state: &AppState,
    tenant: &str,
    order_id: &OrderId,
    channel: ChannelName,
) -> Result<Response, ApiError> {
    let op = operation::PAYMENT_CREATE;
    let now_ms = clock::now_ms();
    let expire_ms = i64::try_from(state.payments.expire_after.as_millis()).unwrap_or(i64::MAX);
    let candidate = PaymentRow {
        payment_no: PaymentNo::generate(now_ms).as_str().to_owned(),
        tenant_id: tenant.to_owned(),
        order_id: order_id.as_str().to_owned(),
        channel: channel.as_str().to_owned(),
        amount_fen: 0,
        currency: String::new(),
        status: PaymentStatus::Pending,
        pay_url: None,
        expires_at_ms: now_ms.saturating_add(expire_ms),
        channel_trade_no: None,
        paid_at_ms: None,
        created_at_ms: now_ms,
    };
    match state.store.open_payment(&candidate).await? {
        OpenPayment::NoOrder => Err(ApiError::not_found("order")),
        OpenPayment::OrderPaid(paid) => {
            decision("constraint", op, tenant, order_id.as_str(), "order_paid");
            Err(already_paid("order-already-paid", &paid))
        }
        OpenPayment::NotPayable(status) => {
            use mideng::state::StateMachine;
            Err(ApiError::conflict(
                "order-not-payable",
                format!("the order is {}", status.as_str()),
            ))
        }
        OpenPayment::Created(payment) => {
            decision("constraint", op, tenant, order_id.as_str(), "inserted");
            Ok(match create_at_channel(state, &payment).await? {
                Some(payment) => payment_answer(StatusCode::CREATED, &payment, false),
                None => not_yet_at_channel(&payment),
            })
        }
        OpenPayment::ExistingPending(payment) => {
            decision(
                "constraint",
                op,
                tenant,
                order_id.as_str(),
                "existing_pending",
            );
            Ok(match create_at_channel(state, &payment).await? {
                Some(payment) => payment_answer(StatusCode::OK, &payment, true),
                None => not_yet_at_channel(&payment),
            })
        }
    }
}

/// The payment exists here but the channel gave no definite answer about its trade: 202 with
/// the PENDING payment (no `pay_url` yet). Not a 5xx: the attempt is real and its token is
/// spent; the next request for the order (a fresh token) creates the trade at the channel
/// again under the same payment number, and reconciliation settles it either way.
fn not_yet_at_channel(payment: &PaymentRow) -> Response {
    let mut response = payment_answer(StatusCode::ACCEPTED, payment, false);
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("2"),
    );
    response
}

/// After the lock wait ran out: answer what the order has now, and when it has neither a paid
/// nor a pending payment (the holder is slow or died holding the lock), go on without the lock:
/// the order's row lock and the one-pending constraint still decide.
async fn recheck(
    state: &AppState,
    tenant: &str,
    order_id: &OrderId,
    channel: ChannelName,
) -> Result<Response, ApiError> {
    let (_, payments) = state
        .store
        .order(tenant, order_id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    if let Some(paid) = payments.iter().find(|p| p.status == PaymentStatus::Paid) {
        return Err(already_paid("order-already-paid", paid));
    }
    if let Some(pending) = payments.iter().find(|p| p.status == PaymentStatus::Pending)
        && pending.pay_url.is_some()
    {
        return Ok(payment_answer(StatusCode::OK, pending, true));
    }
    decision(
        "lock",
        operation::PAYMENT_CREATE,
        tenant,
        order_id.as_str(),
        "busy_proceeded",
    );
    open(state, tenant, order_id, channel).await
}

async fn own_payment(
    state: &AppState,
    tenant: &str,
    payment_no: &str,
) -> Result<PaymentRow, ApiError> {
    let payment_no = PaymentNo::parse(payment_no).map_err(|_| ApiError::not_found("payment"))?;
    match state.store.payment(payment_no.as_str()).await? {
        Some(payment) if payment.tenant_id == tenant => Ok(payment),
        _ => Err(ApiError::not_found("payment")),
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
    let payment = own_payment(&state, &tenant, &payment_no).await?;
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
    let op = operation::PAYMENT_CLOSE;
    let payment = own_payment(&state, &tenant, &payment_no).await?;
    match payment.status {
        PaymentStatus::Closed => return Ok(payment_answer(StatusCode::OK, &payment, false)),
        PaymentStatus::Paid => return Err(already_paid("already-paid", &payment)),
        PaymentStatus::Failed => {
            return Err(ApiError::conflict(
                "payment-not-pending",
                "the payment failed at creation; there is nothing to close",
            ));
        }
        PaymentStatus::Pending => {}
    }
    let name = ChannelName::parse(&payment.channel)
        .map_err(|_| ApiError::unprocessable("channel-unavailable", "unknown channel"))?;
    let channel = state
        .channel(name)
        .ok_or_else(|| ApiError::unprocessable("channel-unavailable", "channel not configured"))?
        .clone();
    let Some(guard) = lock_order(&state, op, &tenant, &payment.order_id).await? else {
        return Err(ApiError::conflict("in-progress", "the order is busy; retry").retry_after(1));
    };
    let result = async {
        match channel.close_trade(&payment.payment_no).await {
            // Alipay has no trade until the buyer scans the code, and the code stays payable
            // until its expiry: closing locally now could end with a charge for a closed
            // payment. The attempt stays PENDING; after the expiry it can no longer be paid and
            // is closed (by a close then, or by reconciliation).
            Ok(TradeState::NotFound)
                if clock::now_ms() <= payment.expires_at_ms + EXPIRY_GRACE_MS =>
            {
                decision("cas", op, &tenant, &payment.payment_no, "close_deferred");
                Ok(payment_answer(StatusCode::ACCEPTED, &payment, false))
            }
            Ok(TradeState::Closed | TradeState::NotFound) => {
                match state.store.close_payment(&payment.payment_no).await? {
                    LocalClose::Closed(closed) => {
                        decision("cas", op, &tenant, &payment.payment_no, "closed");
                        Ok(payment_answer(StatusCode::OK, &closed, false))
                    }
                    LocalClose::AlreadyClosed(closed) => {
                        decision("cas", op, &tenant, &payment.payment_no, "already_closed");
                        Ok(payment_answer(StatusCode::OK, &closed, false))
                    }
                    LocalClose::Paid(paid) => {
                        decision("cas", op, &tenant, &payment.payment_no, "paid_first");
                        Err(already_paid("already-paid", &paid))
                    }
                    LocalClose::Failed(_) | LocalClose::Unknown => Err(ApiError::conflict(
                        "payment-not-pending",
                        "the payment is not pending",
                    )),
                }
            }
            // The buyer paid before the close: the one success flow, then tell the caller.
            Ok(TradeState::Paid(paid)) => {
                let outcome = state
                    .store
                    .apply_success(&payment.payment_no, &paid)
                    .await?;
                let label = match outcome {
                    SuccessOutcome::Paid { .. } => "paid_by_close",
                    SuccessOutcome::AlreadyPaid => "already_paid",
                    _ => "mismatch",
                };
                decision("cas", op, &tenant, &payment.payment_no, label);
                let current = own_payment(&state, &tenant, &payment.payment_no).await?;
                Err(already_paid("already-paid", &current))
            }
            Ok(TradeState::Refunded) => {
                let current = own_payment(&state, &tenant, &payment.payment_no).await?;
                Err(already_paid("already-paid", &current))
            }
            Ok(TradeState::Pending) => Err(ApiError::unavailable(
                "channel-unavailable",
                "the channel has not confirmed the close; retry",
                2,
            )),
            Err(error @ ChannelError::OutcomeUnknown(_)) => Err(channel_unavailable(&error)),
            Err(error) => {
                tracing::warn!(%error, "channel refused the close");
                Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "channel-rejected",
                    "the channel refused to close the trade",
                ))
            }
        }
    }
    .await;
    unlock(&state, guard).await;
    result
}

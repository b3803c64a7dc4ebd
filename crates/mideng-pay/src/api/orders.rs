//! Orders over HTTP: parse, run the flow ([`crate::flows::order`]), render. Creation is
//! idempotent by the order id (the business key); transitions are compare-and-set on the status.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mideng::Fingerprint;
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};
use mideng::state::StateMachine;

use super::error::Code;
use super::fields::identifier;
use super::models::{CreateOrder, OrderView, TransitionBody};
use super::page::{PageQuery, PageView};
use super::{ApiError, ApiJson};
use crate::domain::ids::{OrderId, Sku, UserId};
use crate::domain::keys::{ClientSecret, Principal};
use crate::domain::money::Currency;
use crate::domain::order::{Entitlement, Order, OrderStatus};
use crate::domain::payment::Payment;
use crate::flows::order::{self, OrderCreated, Transitioned};
use crate::limits::CLIENT_SECRET_TTL;
use crate::state::AppState;

/// The order `order_id` of the tenant with its attempts, if `principal` sees it: the server
/// sees every order, a page only the one its client secret opens. Any other is 404, as if it
/// did not exist.
pub(super) async fn visible_order(
    state: &AppState,
    tenant: &str,
    principal: &Principal,
    order_id: &OrderId,
) -> Result<(Order, Vec<Payment>), ApiError> {
    if !super::checkout::sees(principal, order_id.as_str()) {
        return Err(ApiError::not_found("order"));
    }
    crate::flows::order::show(&state.ports, tenant, order_id)
        .await?
        .ok_or_else(|| ApiError::not_found("order"))
}

/// Checks a create-order body; the row to insert, with a fresh client secret good for
/// [`CLIENT_SECRET_TTL`] from `now_ms` (kept only if this request creates the order).
fn validated(tenant: &str, body: &CreateOrder, now_ms: i64) -> Result<Order, ApiError> {
    let order_id = identifier(OrderId::parse(&body.order_id))?;
    let user_id = identifier(UserId::parse(&body.user_id))?;
    let amount = body.amount.parse()?;
    let currency = Currency::parse(&body.currency)
        .map_err(|error| ApiError::new(Code::UnsupportedCurrency, error.to_string()))?;
    let entitlement = body
        .entitlement
        .as_ref()
        .map(|entitlement| {
            let sku = identifier(Sku::parse(&entitlement.sku))?;
            Entitlement::new(sku, entitlement.quantity)
                .map_err(|error| ApiError::new(Code::InvalidRequest, error.to_string()))
        })
        .transpose()?;
    let canonical = serde_json::to_value(body).unwrap_or_default();
    Ok(Order {
        tenant_id: tenant.to_owned(),
        order_id: order_id.as_str().to_owned(),
        user_id: user_id.as_str().to_owned(),
        amount_fen: amount.fen(),
        currency: currency.as_str().to_owned(),
        status: OrderStatus::Created,
        entitlement_sku: entitlement
            .as_ref()
            .map(|entitlement| entitlement.sku.as_str().to_owned()),
        entitlement_quantity: entitlement.map(|entitlement| i64::from(entitlement.quantity)),
        fingerprint: Fingerprint::of_json("order", &canonical).to_hex(),
        version: 0,
        client_secret: Some(ClientSecret::generate()),
        client_secret_expires_at_ms: Some(
            now_ms.saturating_add(mideng::clock::duration_ms(CLIENT_SECRET_TTL)),
        ),
    })
}

/// Creates an order, priced by the merchant's server (the secret key only); the same order
/// again answers 200 with the order as it is now. The answer carries the order's client
/// secret, which the server hands its checkout page.
#[utoipa::path(
    post, path = "/v1/orders", tag = "orders", operation_id = "create_order",
    request_body = CreateOrder,
    responses(
        (status = 201, description = "Created, with its client_secret", body = OrderView),
        (status = 200, description = "The same order again (Idempotent-Replayed: true)", body = OrderView),
        (status = 422, description = "Same order id, different content; or invalid", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn create(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    ApiJson(body): ApiJson<CreateOrder>,
) -> Result<Response, ApiError> {
    let order = validated(&tenant, &body, state.ports.clock.now_ms())?;
    match order::create(&state.ports, &order).await? {
        OrderCreated::Created => {
            Ok((StatusCode::CREATED, axum::Json(OrderView::of(&order, &[]))).into_response())
        }
        OrderCreated::Replayed(current, payments) => Ok((
            StatusCode::OK,
            [(IDEMPOTENT_REPLAYED, "true")],
            axum::Json(OrderView::of(&current, &payments)),
        )
            .into_response()),
        OrderCreated::IdReused => Err(ApiError::new(
            Code::OrderIdReused,
            "an order with this id and different content exists",
        )),
        OrderCreated::Vanished => Err(ApiError::not_found("order")),
    }
}

/// The order and its payment attempts.
#[utoipa::path(
    get, path = "/v1/orders/{order_id}", tag = "orders", operation_id = "show_order",
    params(
        ("order_id" = String, Path, description = "Order id"),
        ("Mideng-Client-Secret" = Option<String>, Header, description = "With a publishable key: the order's client secret (required)"),
    ),
    responses(
        (status = 200, body = OrderView),
        (status = 401, description = "unauthorized; client-secret-invalid (a publishable key without this order's valid client secret)", body = super::ProblemBody),
        (status = 404, description = "No such order, or (for a page) not the order its client secret opens", body = super::ProblemBody),
        (status = 429, description = "rate-limited: the order's page read more often than a page may (Retry-After)", body = super::ProblemBody),
    ),
    security(("api_key" = []), ("publishable_key" = []))
)]
pub(super) async fn show(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    axum::Extension(principal): axum::Extension<Principal>,
    Path(order_id): Path<String>,
) -> Result<axum::Json<OrderView>, ApiError> {
    let order_id = OrderId::parse(&order_id).map_err(|_| ApiError::not_found("order"))?;
    let (order, payments) = visible_order(&state, &tenant, &principal, &order_id).await?;
    Ok(axum::Json(match principal {
        Principal::Server => OrderView::of(&order, &payments),
        Principal::Page { .. } => OrderView::for_page(&order, &payments),
    }))
}

/// Moves the order along its state machine. PAID is reached only through a payment, REFUNDING
/// and REFUNDED only through a refund (`POST /v1/payments/{payment_no}/refunds`).
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/transitions", tag = "orders", operation_id = "transition_order",
    params(("order_id" = String, Path, description = "Order id")),
    request_body = TransitionBody,
    responses(
        (status = 200, description = "Moved, or already there", body = OrderView),
        (status = 409, description = "illegal-transition: not allowed from the current status (or lost a race), or a status only a payment (PAID) or a refund (REFUNDING, REFUNDED) reaches", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn transition(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(order_id): Path<String>,
    ApiJson(body): ApiJson<TransitionBody>,
) -> Result<axum::Json<OrderView>, ApiError> {
    let order_id = OrderId::parse(&order_id).map_err(|_| ApiError::not_found("order"))?;
    let to = OrderStatus::parse(&body.to)
        .ok_or_else(|| ApiError::new(Code::InvalidRequest, "unknown order status"))?;
    match order::transition(&state.ports, &tenant, order_id.as_str(), to).await? {
        Transitioned::Done(order, payments) => Ok(axum::Json(OrderView::of(&order, &payments))),
        Transitioned::NoOrder => Err(ApiError::not_found("order")),
        Transitioned::OnlyByPayment => Err(ApiError::new(
            Code::IllegalTransition,
            "an order becomes PAID only through a payment",
        )),
        Transitioned::OnlyByRefund => Err(ApiError::new(
            Code::IllegalTransition,
            format!(
                "an order becomes {} only through a refund: POST /v1/payments/{{payment_no}}/refunds",
                to.as_str()
            ),
        )),
        Transitioned::Refused { current } => Err(ApiError::new(
            Code::IllegalTransition,
            format!(
                "the order is {} and cannot become {}",
                current.as_str(),
                to.as_str()
            ),
        )),
    }
}

/// The tenant's orders in the order they were created (oldest first), each with its payments,
/// a page at a time. The secret key only: a page reads only its own order, by id.
#[utoipa::path(
    get, path = "/v1/orders", tag = "orders", operation_id = "list_orders",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Orders per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last order (order_id) of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<OrderView>),
        (status = 400, description = "invalid-query: the limit, or a cursor that is no order of yours", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<OrderView>>, ApiError> {
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| order::page(ports, &tenant, after.as_deref(), limit).await)
        .await?;
    Ok(axum::Json(
        page.map(|(order, payments)| OrderView::of(&order, &payments)),
    ))
}

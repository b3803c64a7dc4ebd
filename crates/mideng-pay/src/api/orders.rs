//! Orders: creation idempotent by the order id (the business key), reads, and transitions as
//! compare-and-set on the status.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mideng::Fingerprint;
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};
use mideng::state::StateMachine;

use super::fields::identifier;
use super::models::{CreateOrder, OrderView, TransitionBody};
use super::{ApiError, ApiJson, AppState, decision, operation};
use crate::db::payments::{OrderInsert, OrderRow};
use crate::domain::ids::{OrderId, Sku, UserId};
use crate::domain::money::Currency;
use crate::domain::order::{Entitlement, OrderStatus};
use crate::store::OrderTransition;

/// Checks a create-order body; the row to insert.
fn validated(tenant: &str, body: &CreateOrder) -> Result<OrderRow, ApiError> {
    let order_id = identifier(OrderId::parse(&body.order_id))?;
    let user_id = identifier(UserId::parse(&body.user_id))?;
    let amount = body.amount.parse()?;
    let currency = Currency::parse(&body.currency)
        .map_err(|error| ApiError::unprocessable("unsupported-currency", error.to_string()))?;
    let entitlement = body
        .entitlement
        .as_ref()
        .map(|entitlement| {
            let sku = identifier(Sku::parse(&entitlement.sku))?;
            Entitlement::new(sku, entitlement.quantity)
                .map_err(|error| ApiError::unprocessable("invalid-request", error.to_string()))
        })
        .transpose()?;
    let canonical = serde_json::to_value(body).unwrap_or_default();
    Ok(OrderRow {
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
    })
}

/// Creates an order; the same order again answers 200 with the order as it is now.
#[utoipa::path(
    post, path = "/v1/orders", tag = "orders", operation_id = "create_order",
    request_body = CreateOrder,
    responses(
        (status = 201, description = "Created", body = OrderView),
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
    let order = validated(&tenant, &body)?;
    match state.store.create_order(&order).await? {
        OrderInsert::Created => {
            decision(
                "business-key",
                operation::ORDER_CREATE,
                &tenant,
                &order.order_id,
                "created",
            );
            Ok((StatusCode::CREATED, axum::Json(OrderView::of(&order, &[]))).into_response())
        }
        OrderInsert::Existing(existing) if existing.fingerprint == order.fingerprint => {
            decision(
                "business-key",
                operation::ORDER_CREATE,
                &tenant,
                &order.order_id,
                "replay",
            );
            let (current, payments) = state
                .store
                .order(&tenant, &order.order_id)
                .await?
                .ok_or_else(|| ApiError::not_found("order"))?;
            Ok((
                StatusCode::OK,
                [(IDEMPOTENT_REPLAYED, "true")],
                axum::Json(OrderView::of(&current, &payments)),
            )
                .into_response())
        }
        OrderInsert::Existing(_) => {
            decision(
                "business-key",
                operation::ORDER_CREATE,
                &tenant,
                &order.order_id,
                "mismatch",
            );
            Err(ApiError::unprocessable(
                "order-id-reused",
                "an order with this id and different content exists",
            ))
        }
    }
}

/// The order and its payment attempts.
#[utoipa::path(
    get, path = "/v1/orders/{order_id}", tag = "orders", operation_id = "show_order",
    params(("order_id" = String, Path, description = "Order id")),
    responses(
        (status = 200, body = OrderView),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn show(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(order_id): Path<String>,
) -> Result<axum::Json<OrderView>, ApiError> {
    let order_id = OrderId::parse(&order_id).map_err(|_| ApiError::not_found("order"))?;
    let (order, payments) = state
        .store
        .order(&tenant, order_id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    Ok(axum::Json(OrderView::of(&order, &payments)))
}

/// Moves the order along its state machine. PAID is reached only through a payment.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/transitions", tag = "orders", operation_id = "transition_order",
    params(("order_id" = String, Path, description = "Order id")),
    request_body = TransitionBody,
    responses(
        (status = 200, description = "Moved, or already there", body = OrderView),
        (status = 409, description = "Illegal from the current status, or lost a race", body = super::ProblemBody),
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
        .ok_or_else(|| ApiError::unprocessable("invalid-request", "unknown order status"))?;
    if to == OrderStatus::Paid {
        return Err(ApiError::conflict(
            "illegal-transition",
            "an order becomes PAID only through a payment",
        ));
    }
    let outcome = state
        .store
        .transition_order(&tenant, order_id.as_str(), to)
        .await?;
    let label = match outcome {
        OrderTransition::NoOrder => return Err(ApiError::not_found("order")),
        OrderTransition::Applied { .. } => "applied",
        OrderTransition::AlreadyThere => "already_there",
        OrderTransition::Refused { .. } => "refused",
    };
    decision(
        "cas",
        operation::ORDER_TRANSITION,
        &tenant,
        order_id.as_str(),
        label,
    );
    if let OrderTransition::Refused { current } = outcome {
        return Err(ApiError::conflict(
            "illegal-transition",
            format!(
                "the order is {} and cannot become {}",
                current.as_str(),
                to.as_str()
            ),
        ));
    }
    let (order, payments) = state
        .store
        .order(&tenant, order_id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    Ok(axum::Json(OrderView::of(&order, &payments)))
}

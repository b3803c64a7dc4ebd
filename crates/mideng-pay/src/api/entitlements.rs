//! Entitlements: what the consumer of `payment.succeeded` granted, one grant per paid payment
//! that carries an entitlement.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use mideng::http::Tenant;

use super::ApiError;
use super::error::Code;
use super::models::{EntitlementsQuery, EntitlementsView, GrantView};
use super::orders::visible_order;
use crate::domain::ids::{OrderId, UserId};
use crate::domain::keys::Principal;
use crate::state::AppState;

/// The user's grants, newest first (at most 100); with `order_id`, that order's only.
#[utoipa::path(
    get, path = "/v1/entitlements", tag = "entitlements", operation_id = "list_entitlements",
    params(
        ("user_id" = String, Query, description = "The holder"),
        ("order_id" = Option<String>, Query, description = "Only this order's grants (required with a publishable key: the order its client secret opens)"),
        ("Mideng-Client-Secret" = Option<String>, Header, description = "With a publishable key: the order's client secret (required)"),
    ),
    responses(
        (status = 200, body = EntitlementsView),
        (status = 400, description = "invalid-query", body = super::ProblemBody),
        (status = 401, description = "unauthorized; client-secret-invalid (a publishable key without a valid client secret)", body = super::ProblemBody),
        (status = 403, description = "key-not-allowed: a publishable key without order_id", body = super::ProblemBody),
        (status = 404, description = "not-found: the order is not one this key sees", body = super::ProblemBody),
        (status = 429, description = "rate-limited: the order's page read more often than a page may (Retry-After)", body = super::ProblemBody),
    ),
    security(("api_key" = []), ("publishable_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    axum::Extension(principal): axum::Extension<Principal>,
    query: Result<Query<EntitlementsQuery>, QueryRejection>,
) -> Result<axum::Json<EntitlementsView>, ApiError> {
    let Query(query) = query?;
    let user_id = UserId::parse(&query.user_id)
        .map_err(|error| ApiError::new(Code::InvalidQuery, error.to_string()))?;
    let order_id = query
        .order_id
        .as_deref()
        .map(|order_id| {
            OrderId::parse(order_id)
                .map_err(|error| ApiError::new(Code::InvalidQuery, error.to_string()))
        })
        .transpose()?;
    match (&order_id, &principal) {
        (None, Principal::Page { .. }) => {
            return Err(ApiError::new(
                Code::KeyNotAllowed,
                "a publishable key reads the grant of one order: send order_id",
            ));
        }
        // The order must be one this key sees, and the user's.
        (Some(order_id), _) => {
            let (order, _) = visible_order(&state, &tenant, &principal, order_id).await?;
            if order.user_id != user_id.as_str() {
                return Err(ApiError::not_found("order"));
            }
        }
        (None, Principal::Server) => {}
    }
    let grants = crate::flows::grant::grants(&state.ports, &tenant, &user_id).await?;
    Ok(axum::Json(EntitlementsView {
        grants: grants
            .iter()
            .filter(|grant| {
                order_id
                    .as_ref()
                    .is_none_or(|order_id| grant.order_id == order_id.as_str())
            })
            .map(GrantView::of)
            .collect(),
    }))
}

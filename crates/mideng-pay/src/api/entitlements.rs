//! Entitlements: what the consumer of `payment.succeeded` granted, one grant per paid payment
//! that carries an entitlement.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use mideng::http::Tenant;

use super::error::Code;
use super::models::{EntitlementsQuery, EntitlementsView, GrantView};
use super::{ApiError, AppState};
use crate::domain::ids::UserId;

/// The user's grants, newest first (at most 100).
#[utoipa::path(
    get, path = "/v1/entitlements", tag = "entitlements", operation_id = "list_entitlements",
    params(("user_id" = String, Query, description = "The holder")),
    responses((status = 200, body = EntitlementsView), (status = 400, description = "invalid-query", body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<EntitlementsQuery>, QueryRejection>,
) -> Result<axum::Json<EntitlementsView>, ApiError> {
    let Query(query) = query?;
    let user_id = UserId::parse(&query.user_id)
        .map_err(|error| ApiError::new(Code::InvalidQuery, error.to_string()))?;
    let grants = state
        .ports
        .store
        .grants
        .grants(&tenant, user_id.as_str())
        .await?;
    Ok(axum::Json(EntitlementsView {
        grants: grants.iter().map(GrantView::of).collect(),
    }))
}

//! The tenant's events over HTTP: `GET /v1/events` a page at a time, in the order they
//! happened, and `GET /v1/events/{event_id}` ([`crate::flows::events`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use mideng::http::Tenant;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiError;
use super::error::Code;
use super::models::rfc3339;
use super::page::{PageQuery, PageView, plausible_id};
use crate::flows::events::{self, LoggedEvent};
use crate::state::AppState;

/// One event: what a webhook message about it carries, and when it was recorded.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct EventView {
    /// Its id: the `webhook-id` of every message about it.
    pub event_id: String,
    /// `payment.succeeded`, `payment.closed` or `refund.succeeded`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When it was recorded.
    pub created_at: String,
    /// The event (a message's `data`).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

fn view(event: &LoggedEvent) -> Result<EventView, ApiError> {
    let data = serde_json::from_str(&event.data).map_err(|_| {
        tracing::error!(event_id = %event.event_id, "a logged event is not JSON");
        ApiError::new(Code::Internal, "the event could not be read")
    })?;
    Ok(EventView {
        event_id: event.event_id.clone(),
        event_type: event.event_type.clone(),
        created_at: rfc3339(event.created_at_ms),
        data,
    })
}

/// The tenant's events in the order they happened (oldest first), kept for the webhook
/// retention (30 days by default). To catch up on what an endpoint missed, pass the last event
/// it processed as `starting_after` and follow `has_more`.
#[utoipa::path(
    get, path = "/v1/events", tag = "events", operation_id = "list_events",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Events per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last event of the previous page (or the last one processed)"),
    ),
    responses(
        (status = 200, body = PageView<EventView>),
        (status = 400, description = "invalid-query: limit or starting_after out of range, or starting_after names no event of yours (within the retention)", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<EventView>>, ApiError> {
    let Query(query) = query?;
    let ports = &state.ports;
    let page = query
        .checked()?
        .read(async |after, limit| events::page(ports, &tenant, after.as_deref(), limit).await)
        .await?;
    Ok(axum::Json(PageView {
        data: page.data.iter().map(view).collect::<Result<_, _>>()?,
        has_more: page.has_more,
    }))
}

/// One of the tenant's events.
#[utoipa::path(
    get, path = "/v1/events/{event_id}", tag = "events", operation_id = "show_event",
    params(("event_id" = String, Path, pattern = "^[!-~]{1,64}$", description = "The event (a message's webhook-id)")),
    responses((status = 200, body = EventView), (status = 404, body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn show(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(event_id): Path<String>,
) -> Result<axum::Json<EventView>, ApiError> {
    if !plausible_id(&event_id) {
        return Err(ApiError::not_found("event"));
    }
    let event = events::one(&state.ports, &tenant, &event_id)
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    Ok(axum::Json(view(&event)?))
}

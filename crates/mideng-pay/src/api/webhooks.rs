//! Merchant webhooks over HTTP: endpoints, deliveries with their attempts, redelivery by hand
//! ([`crate::flows::webhook`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};

use super::error::Code;
use super::models::{
    AttemptView, CreateEndpoint, DeliveriesQuery, DeliveryView, EndpointView, rfc3339,
};
use super::{ApiError, ApiJson};
use crate::domain::ids::PaymentNo;
use crate::domain::webhook::EndpointError;
use crate::flows::webhook::{
    self, Attempt, Delivery, DeliveryStatus, Endpoint, EndpointStatus, Redelivery, Registered,
};
use crate::state::AppState;

fn endpoint_view(endpoint: &Endpoint) -> EndpointView {
    EndpointView {
        endpoint_id: endpoint.endpoint_id.clone(),
        url: endpoint.url.clone(),
        events: endpoint.events.clone(),
        secret: endpoint.secret.clone(),
        status: match endpoint.status {
            EndpointStatus::Enabled => "ENABLED",
            EndpointStatus::Disabled => "DISABLED",
        }
        .to_owned(),
        created_at: rfc3339(endpoint.created_at_ms),
    }
}

fn delivery_view(delivery: &Delivery, attempts: &[Attempt]) -> DeliveryView {
    DeliveryView {
        delivery_id: delivery.delivery_id.clone(),
        webhook_id: delivery.event_id.clone(),
        endpoint_id: delivery.endpoint_id.clone(),
        event_type: delivery.event_type.clone(),
        status: delivery.status.as_str().to_owned(),
        next_attempt_at: (delivery.status == DeliveryStatus::Pending)
            .then(|| rfc3339(delivery.next_attempt_at_ms)),
        attempts: attempts
            .iter()
            .map(|attempt| AttemptView {
                attempt: attempt.attempt,
                at: rfc3339(attempt.at_ms),
                status_code: attempt.status_code,
                error: attempt.error.clone(),
                duration_ms: attempt.duration_ms,
            })
            .collect(),
    }
}

/// Registers a webhook endpoint; registering its URL again answers the endpoint as it is.
#[utoipa::path(
    post, path = "/v1/webhook-endpoints", tag = "webhooks", operation_id = "create_webhook_endpoint",
    request_body = CreateEndpoint,
    responses(
        (status = 201, description = "New endpoint, with its signing secret", body = EndpointView),
        (status = 200, description = "The tenant's endpoint with this URL, unchanged (Idempotent-Replayed: true)", body = EndpointView),
        (status = 409, description = "too-many-endpoints (20 per tenant)", body = super::ProblemBody),
        (status = 422, description = "invalid-request: the URL (absolute http(s)) or the events; private-target: the URL names an address that is not globally routable (loopback, private, link-local, any special-purpose range, an IPv6 form carrying such an IPv4) or a local name (localhost, *.local, *.internal…), unless allowed", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn create_endpoint(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    ApiJson(body): ApiJson<CreateEndpoint>,
) -> Result<Response, ApiError> {
    let registered = webhook::register(&state.ports, &tenant, &body.url, &body.events)
        .await?
        .map_err(|error| {
            let code = match error {
                EndpointError::Url | EndpointError::Events => Code::InvalidRequest,
                EndpointError::PrivateTarget => Code::PrivateTarget,
            };
            ApiError::new(code, error.to_string())
        })?;
    match registered {
        Registered::New(endpoint) => {
            Ok((StatusCode::CREATED, axum::Json(endpoint_view(&endpoint))).into_response())
        }
        Registered::Existing(endpoint) => {
            let mut response =
                (StatusCode::OK, axum::Json(endpoint_view(&endpoint))).into_response();
            response
                .headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            Ok(response)
        }
        Registered::TooMany => Err(ApiError::new(
            Code::TooManyEndpoints,
            "a tenant has at most 20 webhook endpoints",
        )),
    }
}

/// The tenant's webhook endpoints.
#[utoipa::path(
    get, path = "/v1/webhook-endpoints", tag = "webhooks", operation_id = "list_webhook_endpoints",
    responses((status = 200, body = Vec<EndpointView>)),
    security(("api_key" = []))
)]
pub(super) async fn list_endpoints(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
) -> Result<axum::Json<Vec<EndpointView>>, ApiError> {
    let endpoints = webhook::endpoints(&state.ports, &tenant).await?;
    Ok(axum::Json(endpoints.iter().map(endpoint_view).collect()))
}

/// Deliveries of an event (its `webhook-id`), or the latest 100, each with every attempt and
/// the endpoint's answer.
#[utoipa::path(
    get, path = "/v1/webhook-deliveries", tag = "webhooks", operation_id = "list_webhook_deliveries",
    params(("event_id" = Option<String>, Query, description = "The event's id (the messages' webhook-id)")),
    responses((status = 200, body = Vec<DeliveryView>), (status = 400, description = "invalid-query", body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn list_deliveries(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<DeliveriesQuery>, QueryRejection>,
) -> Result<axum::Json<Vec<DeliveryView>>, ApiError> {
    let Query(query) = query?;
    if query.event_id.as_deref().is_some_and(|id| {
        id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_graphic())
    }) {
        return Err(ApiError::new(
            Code::InvalidQuery,
            "event_id must be 1 to 64 visible ASCII characters",
        ));
    }
    let deliveries = webhook::deliveries(&state.ports, &tenant, query.event_id.as_deref()).await?;
    Ok(axum::Json(
        deliveries
            .iter()
            .map(|(delivery, attempts)| delivery_view(delivery, attempts))
            .collect(),
    ))
}

/// Sends a delivery again by hand, under the same `webhook-id`, with a fresh schedule; enables
/// its endpoint if it was disabled.
///
/// A delivery has at most 100 attempts in all: the schedule that reaches them ends there, and a
/// redelivery after is refused.
#[utoipa::path(
    post, path = "/v1/webhook-deliveries/{delivery_id}/redeliver", tag = "webhooks", operation_id = "redeliver_webhook",
    params(("delivery_id" = String, Path, description = "The delivery")),
    responses(
        (status = 202, description = "Due now; the dispatcher sends it", body = DeliveryView),
        (status = 409, description = "attempts-exhausted: the delivery has as many attempts as a delivery may have (100); it stays listed with its history", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn redeliver(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(delivery_id): Path<String>,
) -> Result<Response, ApiError> {
    let delivery_id =
        PaymentNo::parse(&delivery_id).map_err(|_| ApiError::not_found("delivery"))?;
    let (delivery, attempts) = match webhook::redeliver(&state.ports, &tenant, delivery_id.as_str())
        .await?
    {
        Redelivery::Due(delivery, attempts) => (delivery, attempts),
        Redelivery::NoDelivery => return Err(ApiError::not_found("delivery")),
        Redelivery::AttemptsExhausted { attempts } => {
            return Err(ApiError::new(
                Code::AttemptsExhausted,
                format!(
                    "the delivery has {attempts} attempts, as many as a delivery may have; its history stays listed"
                ),
            ));
        }
    };
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(delivery_view(&delivery, &attempts)),
    )
        .into_response())
}

//! Merchant webhooks over HTTP: endpoints (registered, read, changed, disabled, deleted, their
//! secret rotated), deliveries with their attempts, redelivery by hand
//! ([`crate::flows::webhook`]).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mideng::http::{IDEMPOTENT_REPLAYED, Tenant};

use super::error::Code;
use super::models::{
    AttemptView, CreateEndpoint, DeliveriesQuery, DeliveryView, EndpointView, RotateSecret,
    UpdateEndpoint, rfc3339,
};
use super::page::{PageQuery, PageView, plausible_id};
use super::{ApiError, ApiJson};
use crate::domain::ids::PaymentNo;
use crate::domain::webhook::{
    EndpointError, PREVIOUS_SECRET_VALID_DEFAULT, PREVIOUS_SECRET_VALID_MAX,
};
use crate::flows::webhook::{
    self, Attempt, Changed, Delivery, DeliveryStatus, Endpoint, EndpointStatus, Redelivery,
    Registered,
};
use crate::state::AppState;

fn endpoint_view(endpoint: &Endpoint, now_ms: i64) -> EndpointView {
    EndpointView {
        endpoint_id: endpoint.endpoint_id.clone(),
        url: endpoint.url.clone(),
        events: endpoint.events.clone(),
        secret: endpoint.secret.clone(),
        status: endpoint.status.as_str().to_owned(),
        created_at: rfc3339(endpoint.created_at_ms),
        previous_secret_expires_at: endpoint
            .previous_secret
            .as_ref()
            .filter(|(_, until_ms)| *until_ms > now_ms)
            .map(|(_, until_ms)| rfc3339(*until_ms)),
    }
}

fn refused(error: EndpointError) -> ApiError {
    let code = match error {
        EndpointError::Url | EndpointError::Events => Code::InvalidRequest,
        EndpointError::PrivateTarget => Code::PrivateTarget,
    };
    ApiError::new(code, error.to_string())
}

/// An endpoint id of the path: one the service could have made, else no such endpoint.
fn endpoint_id(text: &str) -> Result<PaymentNo, ApiError> {
    PaymentNo::parse(text).map_err(|_| ApiError::not_found("webhook endpoint"))
}

fn attempt_view(attempt: &Attempt) -> AttemptView {
    AttemptView {
        attempt: attempt.attempt,
        at: rfc3339(attempt.at_ms),
        status_code: attempt.status_code,
        error: attempt.error.clone(),
        duration_ms: attempt.duration_ms,
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
        attempts: attempts.iter().map(attempt_view).collect(),
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
        .map_err(refused)?;
    let now_ms = state.ports.clock.now_ms();
    match registered {
        Registered::New(endpoint) => Ok((
            StatusCode::CREATED,
            axum::Json(endpoint_view(&endpoint, now_ms)),
        )
            .into_response()),
        Registered::Existing(endpoint) => {
            let mut response =
                (StatusCode::OK, axum::Json(endpoint_view(&endpoint, now_ms))).into_response();
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
    let now_ms = state.ports.clock.now_ms();
    Ok(axum::Json(
        endpoints
            .iter()
            .map(|endpoint| endpoint_view(endpoint, now_ms))
            .collect(),
    ))
}

/// One of the tenant's webhook endpoints.
#[utoipa::path(
    get, path = "/v1/webhook-endpoints/{endpoint_id}", tag = "webhooks", operation_id = "show_webhook_endpoint",
    params(("endpoint_id" = String, Path, description = "The endpoint")),
    responses((status = 200, body = EndpointView), (status = 404, body = super::ProblemBody)),
    security(("api_key" = []))
)]
pub(super) async fn show_endpoint(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<axum::Json<EndpointView>, ApiError> {
    let id = endpoint_id(&id)?;
    let endpoint = webhook::endpoint(&state.ports, &tenant, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    Ok(axum::Json(endpoint_view(
        &endpoint,
        state.ports.clock.now_ms(),
    )))
}

/// Changes a webhook endpoint: its URL, its event types, or its status. Fields not given stay
/// as they are; the same change sent twice leaves the endpoint as the first one did.
///
/// Disabling an endpoint stops its attempts; events keep writing their deliveries, which wait.
/// Enabling it again sends them, oldest first, each when due.
#[utoipa::path(
    patch, path = "/v1/webhook-endpoints/{endpoint_id}", tag = "webhooks", operation_id = "update_webhook_endpoint",
    params(("endpoint_id" = String, Path, description = "The endpoint")),
    request_body = UpdateEndpoint,
    responses(
        (status = 200, description = "The endpoint as it is now", body = EndpointView),
        (status = 404, body = super::ProblemBody),
        (status = 409, description = "endpoint-url-taken: another of the tenant's endpoints has this URL", body = super::ProblemBody),
        (status = 422, description = "invalid-request: the URL, the events or the status; private-target: as at registration", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn update_endpoint(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateEndpoint>,
) -> Result<axum::Json<EndpointView>, ApiError> {
    let id = endpoint_id(&id)?;
    let status = body
        .status
        .as_deref()
        .map(|status| {
            EndpointStatus::parse(status).ok_or_else(|| {
                ApiError::new(Code::InvalidRequest, "status must be ENABLED or DISABLED")
            })
        })
        .transpose()?;
    let changed = webhook::change(
        &state.ports,
        &tenant,
        id.as_str(),
        body.url.as_deref(),
        body.events.as_deref(),
        status,
    )
    .await?
    .map_err(refused)?;
    match changed {
        Changed::Done(endpoint) => Ok(axum::Json(endpoint_view(
            &endpoint,
            state.ports.clock.now_ms(),
        ))),
        Changed::NoEndpoint => Err(ApiError::not_found("webhook endpoint")),
        Changed::UrlTaken => Err(ApiError::new(
            Code::EndpointUrlTaken,
            "another of the tenant's webhook endpoints has this URL",
        )),
    }
}

/// Deletes a webhook endpoint, with its deliveries and their attempts. Nothing more is sent
/// to it; an attempt already under way ends unrecorded.
#[utoipa::path(
    delete, path = "/v1/webhook-endpoints/{endpoint_id}", tag = "webhooks", operation_id = "delete_webhook_endpoint",
    params(("endpoint_id" = String, Path, description = "The endpoint")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "not-found: no such endpoint (a second delete of the same one answers this)", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn delete_endpoint(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = endpoint_id(&id)?;
    if webhook::delete(&state.ports, &tenant, id.as_str()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("webhook endpoint"))
    }
}

/// Rotates an endpoint's signing secret. The answer carries the new secret; the current one
/// keeps signing beside it for `previous_secret_valid_secs` (a day unless asked otherwise), so
/// every message meanwhile carries two `v1,` signatures and a receiver holding either secret
/// verifies it. A previous secret of an earlier rotation stops signing at once.
///
/// Takes an `Idempotency-Key`: a retry of a rotation whose answer was lost answers the same
/// new secret instead of making a third.
#[utoipa::path(
    post, path = "/v1/webhook-endpoints/{endpoint_id}/rotate-secret", tag = "webhooks", operation_id = "rotate_webhook_secret",
    params(
        ("endpoint_id" = String, Path, description = "The endpoint"),
        ("Idempotency-Key" = String, Header, description = "Required: the rotation's key"),
    ),
    request_body = RotateSecret,
    responses(
        (status = 200, description = "The endpoint with its new secret", body = EndpointView),
        (status = 404, body = super::ProblemBody),
        (status = 422, description = "invalid-request: previous_secret_valid_secs above 604800", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn rotate_secret(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RotateSecret>,
) -> Result<axum::Json<EndpointView>, ApiError> {
    let id = endpoint_id(&id)?;
    let valid = match body.previous_secret_valid_secs {
        None => PREVIOUS_SECRET_VALID_DEFAULT,
        Some(secs) if secs <= PREVIOUS_SECRET_VALID_MAX.as_secs() => {
            std::time::Duration::from_secs(secs)
        }
        Some(_) => {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "previous_secret_valid_secs must be 0 ..= 604800 (a week)",
            ));
        }
    };
    let endpoint = webhook::rotate(&state.ports, &tenant, id.as_str(), valid)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    Ok(axum::Json(endpoint_view(
        &endpoint,
        state.ports.clock.now_ms(),
    )))
}

/// The tenant's deliveries (of one event, or all of them) in the order they were written,
/// each with every attempt (at most 100) and the endpoint's answer; paged by `starting_after`.
#[utoipa::path(
    get, path = "/v1/webhook-deliveries", tag = "webhooks", operation_id = "list_webhook_deliveries",
    params(
        ("event_id" = Option<String>, Query, description = "The event's id (the messages' webhook-id)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Deliveries per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[!-~]{1,64}$", description = "The last delivery of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<DeliveryView>),
        (status = 400, description = "invalid-query: the event id, the limit or the cursor (no delivery of yours)", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list_deliveries(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    query: Result<Query<DeliveriesQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<DeliveryView>>, ApiError> {
    let Query(query) = query?;
    if query
        .event_id
        .as_deref()
        .is_some_and(|id| !plausible_id(id))
    {
        return Err(ApiError::new(
            Code::InvalidQuery,
            "event_id must be 1 to 64 visible ASCII characters",
        ));
    }
    let page = PageQuery {
        limit: query.limit,
        starting_after: query.starting_after,
    }
    .checked()?;
    let ports = &state.ports;
    let event_id = query.event_id.as_deref();
    let page = page
        .read(async |after, limit| {
            webhook::deliveries(ports, &tenant, event_id, after.as_deref(), limit).await
        })
        .await?;
    Ok(axum::Json(page.map(|(delivery, attempts)| {
        delivery_view(&delivery, &attempts)
    })))
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

/// One delivery's attempts a page at a time, oldest first (a delivery has at most 100; the
/// list of deliveries shows them too). `starting_after` is an attempt's number.
#[utoipa::path(
    get, path = "/v1/webhook-deliveries/{delivery_id}/attempts", tag = "webhooks", operation_id = "list_webhook_attempts",
    params(
        ("delivery_id" = String, Path, description = "The delivery"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Attempts per page: 1 to 100, default 100"),
        ("starting_after" = Option<String>, Query, pattern = "^[0-9]{1,9}$", description = "The last attempt's number of the previous page"),
    ),
    responses(
        (status = 200, body = PageView<AttemptView>),
        (status = 400, description = "invalid-query: the limit, or starting_after not an attempt number", body = super::ProblemBody),
        (status = 404, body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn list_attempts(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(delivery_id): Path<String>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<axum::Json<PageView<AttemptView>>, ApiError> {
    let delivery_id =
        PaymentNo::parse(&delivery_id).map_err(|_| ApiError::not_found("delivery"))?;
    let Query(query) = query?;
    let page = query.checked()?;
    let after = match page.after.as_deref() {
        None => 0,
        Some(number) => number
            .parse::<u32>()
            .ok()
            .filter(|number| *number < 1_000_000_000)
            .map(i64::from)
            .ok_or_else(|| {
                ApiError::new(
                    Code::InvalidQuery,
                    "starting_after must be an attempt number",
                )
            })?,
    };
    let attempts = webhook::attempts(
        &state.ports,
        &tenant,
        delivery_id.as_str(),
        after,
        page.read_limit(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("delivery"))?;
    Ok(axum::Json(
        page.answer(attempts).map(|attempt| attempt_view(&attempt)),
    ))
}

//! Tokens, record inspection and the operational endpoints.

use crate::limits::TOKEN_TTL;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mideng::http::Problem;
use mideng::http::Tenant;
use mideng::token::{IssueError, TokenCap};
use mideng::{IdempotencyKey, Scope};
use utoipa::OpenApi;

use super::contract::Contract;
use super::error::Code;
use super::models::{HealthView, RecordQuery, RecordView, TokenView, rfc3339};
use super::{ApiError, operation};
use crate::domain::keys::{Principal, scope_tenant};
use crate::state::AppState;

/// The OpenAPI document of the v1 API, generated from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "mideng payment service",
        description = "Exactly-once payments: orders, payment attempts, refunds, channel callbacks, wallets, merchant webhooks.",
        contact(name = "mideng", url = "https://github.com/mideng/mideng"),
    ),
    paths(
        issue_token, inspect_key, healthz, readyz,
        super::orders::create, super::orders::show, super::orders::transition,
        super::orders::list,
        super::payments::create, super::payments::show, super::payments::close,
        super::payments::refund, super::payments::show_refund,
        super::payments::list, super::payments::list_refunds,
        super::notify::alipay, super::notify::wechat,
        super::wallets::credit, super::wallets::deduct, super::wallets::show,
        super::wallets::reverse, super::wallets::entries,
        super::entitlements::list,
        super::webhooks::create_endpoint, super::webhooks::list_endpoints,
        super::webhooks::show_endpoint, super::webhooks::update_endpoint,
        super::webhooks::delete_endpoint, super::webhooks::rotate_secret,
        super::webhooks::list_deliveries, super::webhooks::redeliver,
        super::webhooks::list_attempts,
        super::reconciliation::list, super::reconciliation::list_refund_cases,
        super::events::list, super::events::show,
    ),
    modifiers(&Contract)
)]
pub struct ApiDoc;

/// Issues a one-time submit token for creating a payment.
///
/// The merchant's server holds at most 1 000 unspent tokens at once (and the service 100 000 in
/// all); a page, with the publishable key and an order's client secret, takes tokens for that
/// order alone, at most 5 unspent per order (and 100 000 for all pages, apart from the
/// server's). Past a cap, 429 `too-many-tokens` with `Retry-After` until the earliest of them
/// expires (sooner once one is spent).
#[utoipa::path(
    post, path = "/v1/tokens", tag = "tokens", operation_id = "issue_token",
    params(
        ("Mideng-Client-Secret" = Option<String>, Header, description = "With a publishable key: the client secret of the order the token is for (required)"),
    ),
    responses(
        (status = 201, body = TokenView),
        (status = 401, description = "unauthorized; client-secret-invalid (a publishable key without a valid client secret)", body = super::ProblemBody),
        (status = 429, description = "too-many-tokens: as many unspent tokens as the tenant's server, the order's page (or the service) may hold, Retry-After says when one frees up; rate-limited: the order's page took tokens faster than a page may", body = super::ProblemBody,
            headers(("Retry-After" = u64, description = "Seconds until the earliest unspent token expires, or until the page may ask again"))),
        (status = 503, body = super::ProblemBody),
    ),
    security(("api_key" = []), ("publishable_key" = []))
)]
pub(super) async fn issue_token(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    axum::Extension(principal): axum::Extension<Principal>,
) -> Result<Response, ApiError> {
    // The scope the payment route's token guard checks for the same principal.
    let scope = Scope::new(
        &scope_tenant(&tenant, &principal),
        operation::PAYMENT_CREATE,
    )
    .map_err(|error| ApiError::new(Code::Shared(Problem::TenantInvalid), error.to_string()))?;
    let issued = state
        .tokens
        .issue_token(&scope, TOKEN_TTL)
        .await
        .map_err(|error| match error {
            IssueError::Full { cap, retry_after } => {
                tracing::info!(%tenant, cap = cap.label(), "token refused: limit reached");
                metrics::counter!(crate::metrics::TOKENS_REFUSED, "cap" => cap.label())
                    .increment(1);
                let whose = match (cap, &principal) {
                    (TokenCap::Scope, Principal::Server) => "this tenant holds",
                    (TokenCap::Scope, Principal::Page { .. }) => "this order's page holds",
                    (TokenCap::Total, Principal::Server) => "the service holds",
                    (TokenCap::Total, Principal::Page { .. }) => "the service's pages hold",
                };
                ApiError::new(
                    Code::TooManyTokens,
                    format!(
                        "{whose} as many unspent tokens as it may; spend one, or retry when one expires"
                    ),
                )
                .retry_after(retry_after.as_millis().div_ceil(1000).try_into().unwrap_or(u64::MAX))
            }
            other => {
                tracing::warn!(error = %other, "token store unavailable");
                ApiError::new(
                    Code::Shared(Problem::TokenStoreUnavailable),
                    "cannot issue tokens now",
                )
                .retry_after(1)
            }
        })?;
    Ok((
        StatusCode::CREATED,
        axum::Json(TokenView {
            token: issued.token.as_str().to_owned(),
            expires_at: rfc3339(issued.expires_at_ms),
        }),
    )
        .into_response())
}

/// An idempotency record of the caller's tenant.
#[utoipa::path(
    get, path = "/v1/idempotency-keys/{key}", tag = "idempotency", operation_id = "inspect_idempotency_key",
    params(
        ("key" = String, Path, description = "The Idempotency-Key", min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$"),
        ("operation" = String, Query, description = "payment.create, wallet.credit, wallet.deduct", min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_.:-]{1,64}$"),
    ),
    responses(
        (status = 200, body = RecordView),
        (status = 400, description = "idempotency-key-malformed, invalid-query", body = super::ProblemBody),
        (status = 404, description = "not-found", body = super::ProblemBody),
    ),
    security(("api_key" = []))
)]
pub(super) async fn inspect_key(
    State(state): State<AppState>,
    axum::Extension(Tenant(tenant)): axum::Extension<Tenant>,
    Path(key): Path<String>,
    query: Result<Query<RecordQuery>, QueryRejection>,
) -> Result<axum::Json<RecordView>, ApiError> {
    let Query(query) = query?;
    let key = IdempotencyKey::parse(&key)
        .map_err(|error| ApiError::new(Code::Shared(Problem::KeyMalformed), error.to_string()))?;
    let scope = Scope::new(&tenant, &query.operation)
        .map_err(|error| ApiError::new(Code::InvalidQuery, error.to_string()))?;
    let record = state
        .records
        .find_record(&scope, &key)
        .await?
        .ok_or_else(|| ApiError::not_found("idempotency record"))?;
    Ok(axum::Json(RecordView {
        operation: query.operation,
        state: record.state.as_str().to_owned(),
        fingerprint: record.fingerprint.to_hex(),
        fence: record.fence,
        response_status: record.response.as_ref().map(|response| response.status),
        created_at: rfc3339(record.created_at_ms),
        expires_at: rfc3339(record.expires_at_ms),
    }))
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "ops", operation_id = "healthz", responses((status = 200, body = HealthView)))]
pub(super) async fn healthz() -> axum::Json<HealthView> {
    axum::Json(HealthView {
        status: "ok".to_owned(),
    })
}

/// Readiness: the database answers, and this instance's clock agrees with the database's.
#[utoipa::path(
    get, path = "/readyz", tag = "ops", operation_id = "readyz",
    responses((status = 200, body = HealthView), (status = 503, body = HealthView))
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    if state.ports.clock_guard.refuses() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(HealthView {
                status: "clock unsynchronised".to_owned(),
            }),
        )
            .into_response();
    }
    match state.ports.ready().await {
        Ok(()) => (
            StatusCode::OK,
            axum::Json(HealthView {
                status: "ok".to_owned(),
            }),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(HealthView {
                    status: "database unavailable".to_owned(),
                }),
            )
                .into_response()
        }
    }
}

/// Prometheus text exposition.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let text = state
        .metrics
        .as_ref()
        .map(metrics_exporter_prometheus::PrometheusHandle::render)
        .unwrap_or_default();
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// The OpenAPI document of the v1 API as JSON: [`ApiDoc`], with the field names of its links
/// as the specification spells them (`operationId`, `operationRef`, `requestBody`; the
/// generator writes them in snake case).
pub fn openapi_json() -> Result<String, serde_json::Error> {
    fn respell_links(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Object(links)) = map.get_mut("links") {
                    for link in links.values_mut() {
                        if let serde_json::Value::Object(link) = link {
                            for (snake, camel) in [
                                ("operation_id", "operationId"),
                                ("operation_ref", "operationRef"),
                                ("request_body", "requestBody"),
                            ] {
                                if let Some(field) = link.remove(snake) {
                                    link.insert(camel.to_owned(), field);
                                }
                            }
                        }
                    }
                }
                map.values_mut().for_each(respell_links);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(respell_links),
            _ => {}
        }
    }
    let mut document = serde_json::to_value(ApiDoc::openapi())?;
    respell_links(&mut document);
    serde_json::to_string_pretty(&document)
}

/// The OpenAPI document.
pub(super) async fn openapi() -> Response {
    match openapi_json() {
        Ok(json) => {
            let mut response = json.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(_) => {
            ApiError::new(Code::Internal, "the document could not be rendered").into_response()
        }
    }
}

/// Unknown paths.
pub(super) async fn not_found() -> ApiError {
    ApiError::not_found("resource")
}

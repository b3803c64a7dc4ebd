//! The v1 HTTP API (`docs/api.md`, `docs/openapi.json`), on axum.
//!
//! ```text
//! /v1/*  ─► auth (Bearer key → Tenant, KeyKind) ─► the route's key kinds (a publishable key
//!          on a secret-only route: 403; on a checkout route, with an order's client secret
//!          only: Principal::Page, rated per order) ─► per route: Idempotency-Key /
//!          Idempotency-Token layer, scoped by principal ─► handler: parse ─► flow ─► render
//! /v1/channels/*/notify ─► handler ─► flow: signature + merchant ─► dedup by notify id + row lock + CAS
//! ```
//!
//! Handlers only parse and render; what happens in between is a [`crate::flows`] function,
//! the same one the workers call.

mod boundary;
pub mod checkout;
mod contract;
mod entitlements;
pub mod error;
pub mod events;
mod fields;
pub mod models;
mod notify;
mod observe;
mod ops;
mod orders;
pub mod page;
mod payments;
pub mod reconciliation;
pub mod tenants;
mod wallets;
mod webhooks;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use mideng::http::{
    IdempotencyLayer, KeyRequirement, RouteConfig, Tenant, TenantSource, TokenGuard,
};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

pub use error::{ApiError, Code, ProblemBody};
pub use ops::{ApiDoc, openapi_json};

use crate::domain::keys::{KeyKind, Principal, scope_tenant};
use crate::flows::{BrokenLayer, operation};
use crate::limits::{API_KEY_BYTES_MAX, BODY_BYTES_MAX, HANDLER_TIMEOUT, ROUTE_LEASE};
use crate::state::AppState;

/// SHA-256 of an API key, hex: what the tenants table stores.
pub fn api_key_hash(api_key: &str) -> String {
    hex::encode(Sha256::digest(api_key.as_bytes()))
}

/// A fresh secret API key: 32 random bytes, hex, with a recognisable prefix.
pub fn generate_api_key() -> String {
    crate::domain::keys::generate_key(KeyKind::Secret)
}

/// JSON body whose rejections are problem documents.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::Json::<T>::from_request(request, state)
            .await
            .map(|axum::Json(value)| ApiJson(value))
            .map_err(ApiError::from)
    }
}

/// The key of the one `Authorization: Bearer <key>` header; `None` when there is none, when
/// there are two (ambiguous: which one would be checked is nobody's guess, so neither is), or
/// when the key is empty or longer than [`API_KEY_BYTES_MAX`]. The API and the console read
/// their keys through this alone.
pub(crate) fn bearer_key(headers: &axum::http::HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    value
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|key| !key.is_empty() && key.len() <= API_KEY_BYTES_MAX)
}

/// Answers 503 `clock-unsynchronised` while this instance's clock disagrees with the
/// database's ([`crate::flows::clock_guard`]): the client (or the channel) retries, on another
/// instance, and nothing here acts on a clock that is off.
async fn clock_checked(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let guard = &state.ports.clock_guard;
    if guard.refuses() {
        crate::flows::decision("clock", "api", "-", "-", "clock_unsynchronised");
        return ApiError::new(
            Code::ClockUnsynchronised,
            format!(
                "this instance's clock is {:+} ms off the database's; retry",
                guard.skew_ms()
            ),
        )
        .retry_after(crate::flows::clock_guard::CHECK_INTERVAL.as_secs())
        .into_response();
    }
    next.run(request).await
}

/// Resolves the tenant and the key's kind from `Authorization: Bearer <key>`; 401 otherwise.
/// Both go into the request's extensions: [`Tenant`] for the toolkit's layer and the handlers,
/// [`KeyKind`] for [`secret_key_only`] and the handlers that narrow what a publishable key sees.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(hash) = bearer_key(request.headers()).map(api_key_hash) else {
        return unauthorized().into_response();
    };
    let now_ms = state.ports.clock.now_ms();
    let resolved = match state.tenants.get(&hash, now_ms) {
        Some(resolved) => resolved,
        None => match state.ports.tenant_by_key(&hash).await {
            Ok(Some((tenant, kind))) => {
                state.tenants.put(&hash, &tenant, kind, now_ms);
                (tenant, kind)
            }
            Ok(None) => return unauthorized().into_response(),
            Err(error) => return ApiError::from(error).into_response(),
        },
    };
    let (tenant, kind) = resolved;
    request.extensions_mut().insert(Tenant(tenant));
    request.extensions_mut().insert(kind);
    next.run(request).await
}

/// The routes that only a secret key opens: a publishable key (which a page shows every
/// visitor) is refused 403 `key-not-allowed` before anything else runs, so it consumes no
/// token and begins no idempotency record.
async fn secret_key_only(request: Request, next: Next) -> Response {
    match request.extensions().get::<KeyKind>() {
        Some(KeyKind::Secret) => next.run(request).await,
        Some(KeyKind::Publishable) => {
            let tenant = request
                .extensions()
                .get::<Tenant>()
                .map_or("", |Tenant(tenant)| tenant.as_str());
            crate::flows::decision("keys", "api", tenant, "publishable", "key_not_allowed");
            ApiError::new(
                Code::KeyNotAllowed,
                "a publishable key opens the checkout's routes only; send the secret key",
            )
            .into_response()
        }
        // `authenticate` runs first and always says; a route mounted without it is a bug.
        None => unauthorized().into_response(),
    }
}

pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(Code::Unauthorized, "send Authorization: Bearer <API key>")
}

/// The tenant part of the idempotency scope of a request: its tenant for the merchant's server,
/// a scope of its own for a page ([`crate::domain::keys::scope_tenant`]), so that no key a
/// page sends replays, or is replayed as, one of the server's or another page's.
fn principal_scope(parts: &axum::http::request::Parts) -> Option<String> {
    let Tenant(tenant) = parts.extensions.get::<Tenant>()?;
    let principal = parts
        .extensions
        .get::<Principal>()
        .unwrap_or(&Principal::Server);
    Some(scope_tenant(tenant, principal))
}

fn route_config(
    state: &AppState,
    operation: &str,
    key: KeyRequirement,
) -> Result<mideng::http::RouteConfigBuilder, mideng::InvalidInput> {
    Ok(RouteConfig::builder(state.records.clone(), operation)
        .key(key)
        .tenant(TenantSource::Custom(std::sync::Arc::new(principal_scope)))
        .lease(ROUTE_LEASE)
        .retention(state.ports.settings.funds_retention)
        .handler_timeout(HANDLER_TIMEOUT)
        .body_limit(BODY_BYTES_MAX)
        .wait_for_in_flight(state.ports.settings.duplicate_wait))
}

/// `route` under the idempotency layer of `config`, or bare when the machinery is off
/// ([`crate::flows::PaymentSettings::idempotency`]).
fn guarded(route: MethodRouter<AppState>, config: Option<RouteConfig>) -> MethodRouter<AppState> {
    match config {
        Some(config) => route.route_layer(IdempotencyLayer::new(config)),
        None => route,
    }
}

/// The whole API, with `pages` (the routes of the pages beside it, built by `web`)
/// under the same boundary: one fallback, one body limit, one request id for everything the
/// public listener serves.
pub fn router(state: AppState, pages: Router<AppState>) -> Result<Router, mideng::InvalidInput> {
    let on = state.ports.settings.idempotency;
    if !on {
        tracing::warn!("the idempotency machinery is off on the money routes (measurement only)");
    }
    let mut payment_guard = TokenGuard::new(state.tokens.clone());
    if !state.ports.settings.token_required {
        payment_guard = payment_guard.optional();
    }
    let create_payment = on
        .then(|| {
            let config = route_config(&state, operation::PAYMENT_CREATE, KeyRequirement::Optional)?;
            if state.ports.settings.layer_on(BrokenLayer::Tokens) {
                config.token_guard(payment_guard).build()
            } else {
                config.build()
            }
        })
        .transpose()?;
    let credit = on
        .then(|| {
            route_config(&state, operation::WALLET_CREDIT, KeyRequirement::Required)?
                .handler_begins()
                .build()
        })
        .transpose()?;
    let deduct = on
        .then(|| {
            route_config(&state, operation::WALLET_DEDUCT, KeyRequirement::Required)?
                .handler_begins()
                .build()
        })
        .transpose()?;

    // Refunds always run under their key, whatever the measurement switch: the key is the
    // refund's business key.
    let refund =
        route_config(&state, operation::REFUND_CREATE, KeyRequirement::Required)?.build()?;
    // A secret's rotation too: a retry answers the secret the first one made.
    let rotate = route_config(
        &state,
        crate::flows::webhook::ROTATE,
        KeyRequirement::Required,
    )?
    .build()?;

    // What a checkout page does, for a publishable key with an order's client secret too: a
    // token, a payment of that order, that order's state and its grant. The principal (the
    // server, or the page of one order) is known before the idempotency layer runs.
    let checkout = Router::new()
        .route("/v1/tokens", post(ops::issue_token))
        .route("/v1/orders/{order_id}", get(orders::show))
        .route(
            "/v1/orders/{order_id}/payments",
            guarded(post(payments::create), create_payment),
        )
        .route("/v1/entitlements", get(entitlements::list))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            checkout::principal,
        ));

    // Everything else prices, moves money, reads across orders or configures the tenant:
    // secret only. The server prices: orders are made here, never by a page.
    let secret = Router::new()
        .route("/v1/orders", post(orders::create).get(orders::list))
        .route(
            "/v1/orders/{order_id}/transitions",
            post(orders::transition),
        )
        .route("/v1/payments", get(payments::list))
        .route("/v1/refunds", get(payments::list_refunds))
        .route("/v1/payments/{payment_no}", get(payments::show))
        .route("/v1/payments/{payment_no}/close", post(payments::close))
        .route(
            "/v1/payments/{payment_no}/refunds",
            post(payments::refund).route_layer(IdempotencyLayer::new(refund)),
        )
        .route("/v1/refunds/{refund_no}", get(payments::show_refund))
        .route(
            "/v1/wallets/{user_id}/credit",
            guarded(post(wallets::credit), credit),
        )
        .route(
            "/v1/wallets/{user_id}/deduct",
            guarded(post(wallets::deduct), deduct),
        )
        .route(
            "/v1/wallets/{user_id}/deductions/{deduction_no}/reverse",
            post(wallets::reverse),
        )
        .route("/v1/wallets/{user_id}", get(wallets::show))
        .route("/v1/wallets/{user_id}/entries", get(wallets::entries))
        .route(
            "/v1/webhook-endpoints",
            post(webhooks::create_endpoint).get(webhooks::list_endpoints),
        )
        .route(
            "/v1/webhook-endpoints/{endpoint_id}",
            get(webhooks::show_endpoint)
                .patch(webhooks::update_endpoint)
                .delete(webhooks::delete_endpoint),
        )
        .route(
            "/v1/webhook-endpoints/{endpoint_id}/rotate-secret",
            post(webhooks::rotate_secret).route_layer(IdempotencyLayer::new(rotate)),
        )
        .route("/v1/webhook-deliveries", get(webhooks::list_deliveries))
        .route(
            "/v1/webhook-deliveries/{delivery_id}/attempts",
            get(webhooks::list_attempts),
        )
        .route(
            "/v1/webhook-deliveries/{delivery_id}/redeliver",
            post(webhooks::redeliver),
        )
        .route("/v1/events", get(events::list))
        .route("/v1/events/{event_id}", get(events::show))
        .route("/v1/idempotency-keys/{key}", get(ops::inspect_key))
        .route("/v1/reconciliation/cases", get(reconciliation::list))
        .route("/v1/refund-cases", get(reconciliation::list_refund_cases))
        .route_layer(middleware::from_fn(secret_key_only));

    // The last route layer runs first: the key is resolved before its kind is judged.
    let authenticated = checkout
        .merge(secret)
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));

    // Everything that acts on this instance's clock waits while it disagrees with the
    // database's: the API and the channels' notifies (which the channels resend).
    let clocked = Router::new()
        .merge(authenticated)
        .route("/v1/channels/alipay/notify", post(notify::alipay))
        .route("/v1/channels/wechat/notify", post(notify::wechat))
        .route_layer(middleware::from_fn_with_state(state.clone(), clock_checked));

    Ok(Router::new()
        .merge(clocked)
        .merge(pages)
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/openapi.json", get(ops::openapi))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn(boundary::contract))
        .layer(middleware::from_fn(observe::request_duration))
        // Every answer, refusals at the boundary included, names its request.
        .layer(middleware::from_fn(mideng::http::request_id))
        // Outermost: the request's trace, around everything else (when traces are exported).
        .layer(middleware::from_fn(observe::traced))
        .with_state(state))
}

/// `/metrics` alone, for its own listener: the counters name every tenant's volumes, so they
/// are not served beside the public API.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(ops::metrics))
        .fallback(ops::not_found)
        .layer(middleware::from_fn(boundary::contract))
        .layer(middleware::from_fn(observe::request_duration))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bearer_key_is_read_and_two_headers_are_refused() {
        let headers = |values: &[&str]| {
            let mut headers = axum::http::HeaderMap::new();
            for value in values {
                headers.append(header::AUTHORIZATION, value.parse().expect("value"));
            }
            headers
        };
        assert_eq!(bearer_key(&headers(&["Bearer  key-1 "])), Some("key-1"));
        for refused in [
            &[][..],
            &["Bearer key-1", "Bearer key-1"][..],
            &["Bearer key-1", "Bearer key-2"][..],
            &["Basic a2V5"][..],
            &["Bearer "][..],
        ] {
            assert_eq!(bearer_key(&headers(refused)), None, "{refused:?}");
        }
        let long = format!("Bearer {}", "k".repeat(API_KEY_BYTES_MAX + 1));
        assert_eq!(bearer_key(&headers(&[&long])), None);
    }
}

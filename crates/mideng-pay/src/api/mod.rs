//! The v1 HTTP API of `docs/design.md` §5, on axum.
//!
//! ```text
//! /v1/*  ─► auth (Bearer key → Tenant) ─► per route: Idempotency-Key / Idempotency-Token layer
//!                                          ─► handler ─► Redis lock ─► one local transaction
//! /v1/channels/*/notify ─► signature + merchant ─► dedup by notify id + row lock + CAS (one transaction)
//! ```

mod boundary;
mod contract;
mod entitlements;
pub mod error;
mod fields;
pub mod models;
mod notify;
mod ops;
mod orders;
mod payments;
mod wallets;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use mideng::http::{
    IdempotencyLayer, KeyRequirement, RouteConfig, Tenant, TenantSource, TokenGuard,
};
use mideng::lock::LockStore;
use mideng::record::RecordStore;
use mideng::token::TokenStore;
use mideng_channel::adapter::Channel;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

pub use error::{ApiError, ProblemBody};
pub use ops::ApiDoc;
pub use payments::order_lock_name;

use crate::domain::payment::ChannelName;
use crate::store::PayStore;

/// Largest request body the API reads (notifies included).
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Operation names: the scopes of keys, tokens and counters.
pub mod operation {
    /// Creating a payment attempt.
    pub const PAYMENT_CREATE: &str = "payment.create";
    /// Closing a payment attempt.
    pub const PAYMENT_CLOSE: &str = "payment.close";
    /// Crediting a wallet.
    pub const WALLET_CREDIT: &str = "wallet.credit";
    /// Deducting from a wallet.
    pub const WALLET_DEDUCT: &str = "wallet.deduct";
    /// Creating an order.
    pub const ORDER_CREATE: &str = "order.create";
    /// Transitioning an order.
    pub const ORDER_TRANSITION: &str = "order.transition";
    /// An Alipay notify.
    pub const NOTIFY_ALIPAY: &str = "notify.alipay";
    /// A WeChat Pay notify.
    pub const NOTIFY_WECHAT: &str = "notify.wechat";
}

/// How payments behave.
#[derive(Clone, Debug)]
pub struct PaymentSettings {
    /// Whether creating a payment needs a one-time `Idempotency-Token` (default true).
    pub token_required: bool,
    /// How long a payment attempt accepts payment at the channel (default 15 minutes).
    pub expire_after: Duration,
    /// How long a request waits for the order's lock before re-checking the order (default
    /// 2 s).
    pub lock_wait: Duration,
    /// How long a duplicate request waits for the first one before answering 409 (default 5 s).
    pub duplicate_wait: Duration,
    /// How long the answers of money-moving requests (payment creation, credit, deduct) are
    /// kept for replay (default 30 days).
    pub funds_retention: Duration,
    /// The idempotency machinery on the money routes: keys, tokens and records (default true).
    /// Off only for measuring its cost (`mideng bench`), never in production: payment creation,
    /// credit and deduct then run without an `Idempotency-Key` layer or a token guard, and the
    /// wallet operations complete no record (each is still one transaction, and the ledger's
    /// one-debit-per-order constraint still refuses a second deduct for an order).
    pub idempotency: bool,
    /// One layer turned off, for the storm's proof of what each layer prevents (default
    /// none). A test switch: never in production.
    pub broken: Option<BrokenLayer>,
}

/// A layer the storm may turn off to show what it prevents, or that a deeper one holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokenLayer {
    /// No one-time token guard on payment creation.
    Tokens,
    /// No per-order lock on payment creation and close.
    OrderLock,
    /// No dedup record for channel notifies.
    NotifyDedup,
    /// No dedup claim in the entitlement consumer.
    GrantDedup,
}

impl PaymentSettings {
    /// Whether `layer` is on.
    pub fn layer_on(&self, layer: BrokenLayer) -> bool {
        self.broken != Some(layer)
    }
}

impl Default for PaymentSettings {
    fn default() -> Self {
        Self {
            token_required: true,
            expire_after: Duration::from_secs(15 * 60),
            lock_wait: Duration::from_secs(2),
            duplicate_wait: Duration::from_secs(5),
            funds_retention: Duration::from_secs(30 * 24 * 3600),
            idempotency: true,
            broken: None,
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Orders, payments, wallets.
    pub store: Arc<dyn PayStore>,
    /// Idempotency records (in the service's database).
    pub records: Arc<dyn RecordStore>,
    /// One-time tokens (Redis, or in-process).
    pub tokens: Arc<dyn TokenStore>,
    /// Per-order locks (Redis, or in-process).
    pub locks: Arc<dyn LockStore>,
    /// Alipay, if configured.
    pub alipay: Option<Arc<dyn Channel>>,
    /// WeChat Pay, if configured.
    pub wechat: Option<Arc<dyn Channel>>,
    /// Payment behaviour.
    pub payments: PaymentSettings,
    /// Renders `/metrics` (on the metrics listener, [`metrics_router`]).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AppState")
            .field("alipay", &self.alipay.is_some())
            .field("wechat", &self.wechat.is_some())
            .field("payments", &self.payments)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// The adapter of a channel, if configured.
    pub fn channel(&self, name: ChannelName) -> Option<&Arc<dyn Channel>> {
        match name {
            ChannelName::Alipay => self.alipay.as_ref(),
            ChannelName::Wechat => self.wechat.as_ref(),
        }
    }
}

/// SHA-256 of an API key, hex: what the tenants table stores.
pub fn api_key_hash(api_key: &str) -> String {
    hex::encode(Sha256::digest(api_key.as_bytes()))
}

/// A fresh API key: 32 random bytes, hex, with a recognisable prefix.
pub fn generate_api_key() -> String {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    format!("mdk_{}", hex::encode(bytes))
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

/// Logs and counts one idempotency decision of the service (the HTTP layer logs its own key
/// and token decisions): `layer` is lock, constraint, cas, dedup or business-key.
pub fn decision(
    layer: &'static str,
    operation: &'static str,
    tenant: &str,
    subject: &str,
    outcome: &'static str,
) {
    tracing::info!(
        target: "mideng::decision",
        layer, operation, tenant, subject, outcome, "idempotency decision"
    );
    metrics::counter!(
        "mideng_service_decisions_total",
        "layer" => layer, "operation" => operation, "outcome" => outcome
    )
    .increment(1);
}

/// Resolves the tenant from `Authorization: Bearer <key>`; 401 otherwise.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let key = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|key| !key.is_empty() && key.len() <= 256);
    let Some(key) = key else {
        return unauthorized().into_response();
    };
    match state.store.tenant_by_key(&api_key_hash(key)).await {
        Ok(Some(tenant)) => {
            request.extensions_mut().insert(Tenant(tenant));
            next.run(request).await
        }
        Ok(None) => unauthorized().into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send Authorization: Bearer <API key>",
    )
}

fn route_config(
    state: &AppState,
    operation: &str,
    key: KeyRequirement,
) -> Result<mideng::http::RouteConfigBuilder, mideng::InvalidInput> {
    Ok(RouteConfig::builder(state.records.clone(), operation)
        .key(key)
        .tenant(TenantSource::Extension)
        .lease(Duration::from_secs(60))
        .retention(state.payments.funds_retention)
        .handler_timeout(Duration::from_secs(30))
        .body_limit(BODY_BYTES_MAX)
        .wait_for_in_flight(state.payments.duplicate_wait))
}

/// `route` under the idempotency layer of `config`, or bare when the machinery is off
/// ([`PaymentSettings::idempotency`]).
fn guarded(route: MethodRouter<AppState>, config: Option<RouteConfig>) -> MethodRouter<AppState> {
    match config {
        Some(config) => route.route_layer(IdempotencyLayer::new(config)),
        None => route,
    }
}

/// The whole API.
pub fn router(state: AppState) -> Result<Router, mideng::InvalidInput> {
    let on = state.payments.idempotency;
    if !on {
        tracing::warn!("the idempotency machinery is off on the money routes (measurement only)");
    }
    let mut payment_guard = TokenGuard::new(state.tokens.clone());
    if !state.payments.token_required {
        payment_guard = payment_guard.optional();
    }
    let create_payment = on
        .then(|| {
            let config = route_config(&state, operation::PAYMENT_CREATE, KeyRequirement::Optional)?;
            if state.payments.layer_on(BrokenLayer::Tokens) {
                config.token_guard(payment_guard).build()
            } else {
                config.build()
            }
        })
        .transpose()?;
    let credit = on
        .then(|| {
            route_config(&state, operation::WALLET_CREDIT, KeyRequirement::Required)?
                .handler_decides()
                .build()
        })
        .transpose()?;
    let deduct = on
        .then(|| {
            route_config(&state, operation::WALLET_DEDUCT, KeyRequirement::Required)?
                .handler_decides()
                .build()
        })
        .transpose()?;

    let authenticated = Router::new()
        .route("/v1/tokens", post(ops::issue_token))
        .route("/v1/orders", post(orders::create))
        .route("/v1/orders/{order_id}", get(orders::show))
        .route(
            "/v1/orders/{order_id}/transitions",
            post(orders::transition),
        )
        .route(
            "/v1/orders/{order_id}/payments",
            guarded(post(payments::create), create_payment),
        )
        .route("/v1/payments/{payment_no}", get(payments::show))
        .route("/v1/payments/{payment_no}/close", post(payments::close))
        .route(
            "/v1/wallets/{user_id}/credit",
            guarded(post(wallets::credit), credit),
        )
        .route(
            "/v1/wallets/{user_id}/deduct",
            guarded(post(wallets::deduct), deduct),
        )
        .route("/v1/wallets/{user_id}", get(wallets::show))
        .route("/v1/entitlements", get(entitlements::list))
        .route("/v1/idempotency-keys/{key}", get(ops::inspect_key))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));

    Ok(Router::new()
        .merge(authenticated)
        .route("/v1/channels/alipay/notify", post(notify::alipay))
        .route("/v1/channels/wechat/notify", post(notify::wechat))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/openapi.json", get(ops::openapi))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn(boundary::contract))
        .with_state(state))
}

/// `/metrics` alone, for its own listener: the counters name every tenant's volumes, so they
/// are not served beside the public API.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(ops::metrics))
        .fallback(ops::not_found)
        .layer(middleware::from_fn(boundary::contract))
        .with_state(state)
}

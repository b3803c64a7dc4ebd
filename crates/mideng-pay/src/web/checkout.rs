//! The demo checkout: the page, its QR codes, and "scan and pay" through the simulator.
//!
//! The server prices, the page pays. The page asks for a product of the demo catalog
//! (`POST /demo/checkout {sku, user_id}`); the service, acting as the demo merchant's server,
//! makes the order at the catalog's price with the demo tenant's own authority and answers the
//! order's id and client secret ([`crate::domain::keys`]). The page never sends a price, and
//! from then on pays with the publishable key and that client secret alone.
//!
//! The page does what the seeds ask of a payment page (000 §1, 004 §2), in `checkout.js`:
//!
//! 1. when it opens it asks for a one-time token (`POST /v1/tokens`); a second tab gets a
//!    token of its own;
//! 2. the pay button is disabled the moment it is clicked, and clicks within the debounce
//!    interval are dropped before any request is made;
//! 3. each checkout attempt gets an `Idempotency-Key` (a random UUID) kept for the order in
//!    the tab's `sessionStorage`: a request that fails at the network is retried with the same
//!    key and the same token, and the service answers the stored result; a new key is made
//!    only when the service answered a refusal (a spent token takes a new token too);
//! 4. the answer's `pay_url` is drawn as a QR code by the service (`GET /demo/qr`), and in the
//!    embedded mode "scan and pay" asks the simulator to pay the trade;
//! 5. it polls the order until it is PAID, then shows the entitlement granted for it.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use qrcode::QrCode;
use qrcode::render::svg;
use serde::Deserialize;

use super::{escape_html, harden, html};
use crate::api::{ApiError, Code};
use crate::domain::ids::PaymentNo;
use crate::flows::payment::{self, Payable};
use crate::limits::QR_TEXT_BYTES_MAX;
use crate::state::AppState;
use mideng::state::StateMachine;

/// The page's HTML; `{{…}}` are filled in by [`render`].
const PAGE: &str = include_str!("assets/checkout.html");

/// The page for a tenant, its publishable key, whether "scan and pay" is offered and whether
/// the operator console is served (and so linked).
pub fn render(tenant_id: &str, publishable_key: &str, simulator: bool, console: bool) -> String {
    let console_link = if console {
        r#"<a class="right" href="/console" target="_blank" rel="noopener">operator console</a>"#
    } else {
        ""
    };
    PAGE.replace("{{tenant}}", &escape_html(tenant_id))
        .replace("{{publishable_key}}", &escape_html(publishable_key))
        .replace("{{console_link}}", console_link)
        .replace("{{simulator}}", if simulator { "on" } else { "off" })
}

/// `GET /`.
pub(super) async fn page(State(state): State<AppState>) -> Response {
    let Some(checkout) = &state.pages.settings.checkout else {
        return ApiError::not_found("resource").into_response();
    };
    html(render(
        &checkout.tenant_id,
        &checkout.publishable_key,
        checkout.simulator_url.is_some(),
        state.pages.settings.console.is_some(),
    ))
}

/// `GET /demo/qr?text=…`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QrQuery {
    text: String,
}

/// `GET /demo/qr?text=…`: `text` as a QR code, SVG.
pub(super) async fn qr(query: Result<Query<QrQuery>, QueryRejection>) -> Response {
    let Query(query) = match query {
        Ok(query) => query,
        Err(rejection) => return ApiError::from(rejection).into_response(),
    };
    match qr_svg(&query.text) {
        Ok(svg) => {
            let mut response = (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("image/svg+xml"),
                )],
                svg,
            )
                .into_response();
            harden(&mut response);
            response
        }
        Err(detail) => ApiError::new(Code::InvalidQuery, detail).into_response(),
    }
}

/// `text` as an SVG QR code (medium error correction), or why not.
pub fn qr_svg(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > QR_TEXT_BYTES_MAX {
        return Err(format!("text must be 1 to {QR_TEXT_BYTES_MAX} bytes"));
    }
    let code = QrCode::new(text.as_bytes()).map_err(|error| error.to_string())?;
    Ok(code
        .render::<svg::Color<'_>>()
        .min_dimensions(220, 220)
        .quiet_zone(true)
        .build())
}

/// The demo merchant's catalog: what the page may ask for, at the price the server sets.
/// `(sku, name, price in fen)`.
pub const CATALOG: &[(&str, &str, i64)] = &[
    ("membership-annual", "Annual membership", 1_999),
    ("membership-month", "One month of membership", 299),
];

/// The demo checkout's orders per minute, in this instance.
pub(super) struct DemoRate(governor::DefaultDirectRateLimiter);

impl std::fmt::Debug for DemoRate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("DemoRate")
    }
}

impl Default for DemoRate {
    fn default() -> Self {
        let per_minute = std::num::NonZeroU32::new(crate::limits::DEMO_CHECKOUTS_PER_MINUTE)
            .unwrap_or(std::num::NonZeroU32::MIN);
        Self(governor::RateLimiter::direct(governor::Quota::per_minute(
            per_minute,
        )))
    }
}

/// `POST /demo/checkout`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartCheckout {
    /// A product of [`CATALOG`].
    sku: String,
    /// The buyer (the page's own visitor id; a real merchant's server knows its user).
    user_id: String,
}

/// `POST /demo/checkout {sku, user_id}`: the demo merchant's server makes an order for one
/// product of its catalog, at the catalog's price, and answers what the page needs to pay it:
/// `{order_id, user_id, sku, name, amount, currency, client_secret, client_secret_expires_at}`.
/// Open to anyone who loads the page, so bounded per instance (429 `rate-limited`).
pub(super) async fn start(
    State(state): State<AppState>,
    body: Result<axum::Json<StartCheckout>, axum::extract::rejection::JsonRejection>,
) -> Response {
    match start_checkout(&state, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

/// The demo checkout's settings; 404 when it is not served.
fn demo(state: &AppState) -> Result<&super::CheckoutSettings, ApiError> {
    state
        .pages
        .settings
        .checkout
        .as_ref()
        .ok_or_else(|| ApiError::not_found("resource"))
}

async fn start_checkout(
    state: &AppState,
    body: Result<axum::Json<StartCheckout>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    use crate::domain::ids::{OrderId, UserId};
    use crate::domain::keys::ClientSecret;
    use crate::domain::order::{Order, OrderStatus};
    use crate::flows::order::{self, OrderCreated};

    let checkout = demo(state)?;
    let axum::Json(body) = body?;
    let Some((sku, name, amount_fen)) = CATALOG.iter().find(|(sku, _, _)| *sku == body.sku) else {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "sku is none of the demo catalog's: membership-annual, membership-month",
        ));
    };
    let user_id = UserId::parse(&body.user_id)
        .map_err(|error| ApiError::new(Code::InvalidRequest, error.to_string()))?;
    if let Err(refused) = state.pages.demo_orders.0.check() {
        use governor::clock::{Clock, DefaultClock};
        let wait = refused.wait_time_from(DefaultClock::default().now());
        metrics::counter!(crate::metrics::PAGE_REQUESTS_LIMITED, "kind" => "demo").increment(1);
        return Err(ApiError::new(
            Code::RateLimited,
            "the demo checkout makes a bounded number of orders a minute; retry",
        )
        .retry_after(
            wait.as_millis()
                .div_ceil(1000)
                .try_into()
                .unwrap_or(u64::MAX),
        ));
    }
    let now_ms = state.ports.clock.now_ms();
    let mut random = [0_u8; 8];
    getrandom::fill(&mut random).map_err(|_| ApiError::new(Code::Internal, "no randomness"))?;
    let order_id = format!("demo-{}", hex::encode(random));
    let order_id =
        OrderId::parse(&order_id).map_err(|_| ApiError::new(Code::Internal, "order id"))?;
    let made = Order {
        tenant_id: checkout.tenant_id.clone(),
        order_id: order_id.as_str().to_owned(),
        user_id: user_id.as_str().to_owned(),
        amount_fen: *amount_fen,
        currency: "CNY".to_owned(),
        status: OrderStatus::Created,
        entitlement_sku: Some((*sku).to_owned()),
        entitlement_quantity: Some(1),
        fingerprint: mideng::Fingerprint::of_json(
            "order",
            &serde_json::json!({"sku": sku, "user_id": user_id.as_str()}),
        )
        .to_hex(),
        version: 0,
        client_secret: Some(ClientSecret::generate()),
        client_secret_expires_at_ms: Some(
            now_ms.saturating_add(mideng::clock::duration_ms(crate::limits::CLIENT_SECRET_TTL)),
        ),
    };
    match order::create(&state.ports, &made).await? {
        OrderCreated::Created => {}
        // A fresh random id met an order: as unlikely as a guessed secret; ask again.
        OrderCreated::Replayed(..) | OrderCreated::IdReused | OrderCreated::Vanished => {
            return Err(ApiError::new(
                Code::Shared(mideng::http::Problem::InProgress {
                    retry_after: std::time::Duration::from_secs(1),
                }),
                "retry",
            )
            .retry_after(1));
        }
    }
    tracing::info!(
        target: "mideng::demo",
        order_id = %made.order_id,
        sku,
        amount = amount_fen,
        "the demo merchant's server priced an order"
    );
    let secret = made
        .client_secret
        .as_ref()
        .map(|secret| secret.expose().to_owned());
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::json!({
            "order_id": made.order_id,
            "user_id": made.user_id,
            "sku": sku,
            "name": name,
            "amount": amount_fen,
            "currency": made.currency,
            "client_secret": secret,
            "client_secret_expires_at": made.client_secret_expires_at_ms.map(crate::domain::rfc3339),
        })),
    )
        .into_response())
}

/// `POST /demo/payments/{payment_no}/pay`: the buyer scans the code and pays, in the simulator.
/// Only a PENDING payment of the order whose client secret the page sends (as on every API call
/// it makes); the simulator then notifies the service as a channel would.
pub(super) async fn pay(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Response {
    match pay_in_simulator(&state, &headers, path).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn pay_in_simulator(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let checkout = demo(state)?;
    // The page's own publishable key and its order's client secret, as on every API call it
    // makes.
    if !super::console::authorized(
        headers,
        &crate::api::api_key_hash(&checkout.publishable_key),
    ) {
        return Err(ApiError::new(
            Code::Unauthorized,
            "send Authorization: Bearer <the demo tenant's publishable key>",
        ));
    }
    let order_id = crate::api::checkout::page_order(state, &checkout.tenant_id, headers)
        .await?
        .order_id;
    let Path(payment_no) = path?;
    let (Some(simulator), Some(http)) = (&checkout.simulator_url, &state.pages.http) else {
        return Err(ApiError::not_found("simulator"));
    };
    if payment_no.is_empty()
        || payment_no.len() > 64
        || !payment_no
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
    {
        return Err(ApiError::new(
            Code::InvalidPath,
            "payment_no must be 1 to 64 letters, digits, _ or -",
        ));
    }
    let payment_no = PaymentNo::parse(&payment_no).map_err(|_| ApiError::not_found("payment"))?;
    let payment =
        match payment::payable(&state.ports, &checkout.tenant_id, &order_id, &payment_no).await? {
            Payable::Pending(payment) => payment,
            Payable::NotFound => return Err(ApiError::not_found("payment")),
            Payable::Settled(status) => {
                return Err(ApiError::new(
                    Code::PaymentNotPending,
                    format!("the payment is {}", status.as_str()),
                ));
            }
        };
    let url = format!(
        "{}/sim/trades/{}/pay",
        simulator.trim_end_matches('/'),
        payment.payment_no
    );
    let answer = http
        .post(url)
        .send()
        .await
        .map_err(|_| ApiError::new(Code::ChannelUnavailable, "the simulator did not answer"))?;
    if !answer.status().is_success() {
        return Err(ApiError::new(
            Code::ChannelRejected,
            format!(
                "the simulator refused to pay ({})",
                answer.status().as_u16()
            ),
        ));
    }
    tracing::info!(
        target: "mideng::demo",
        payment_no = %payment.payment_no,
        "the demo buyer paid in the simulator"
    );
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({ "payment_no": payment.payment_no, "paid": true })),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_its_tenant_escaped_and_says_whether_the_simulator_pays() {
        let page = render("demo\"><script>", "mdk_abc", true, true);
        assert!(page.contains("demo&quot;&gt;&lt;script&gt;"));
        assert!(!page.contains("demo\"><script>"));
        assert!(page.contains("mdk_abc"));
        assert!(page.contains(r#"content="on""#));
        assert!(!page.contains("{{"), "every placeholder filled");
        assert!(page.contains(r#"href="/console""#));
        let without_console = render("demo", "mdk_abc", true, false);
        assert!(
            !without_console.contains("/console"),
            "no link to a console that is not served"
        );
    }

    #[test]
    fn qr_codes_are_svg_and_bounded() {
        let svg = qr_svg("http://127.0.0.1:8081/pay/P1").expect("svg");
        assert!(svg.starts_with("<?xml") || svg.starts_with("<svg"));
        assert!(svg.contains("<path") || svg.contains("<rect"));
        assert!(qr_svg("").is_err());
        assert!(qr_svg(&"x".repeat(QR_TEXT_BYTES_MAX + 1)).is_err());
    }
}

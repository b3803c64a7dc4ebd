//! The pages people look at, served beside the API by the same listener:
//!
//! - [`checkout`] — the demo checkout at `/`: the seeds' first layer, in a browser. The
//!   service, as the demo merchant's server, prices the order from its catalog
//!   (`POST /demo/checkout`) and hands the page the order's client secret; the page
//!   takes a one-time token when it opens, greys its button out at the click (and debounces
//!   it), sends one `Idempotency-Key` per checkout attempt and reuses it when it retries after
//!   a network failure, shows the channel's `pay_url` as a QR code, can ask the simulator to
//!   pay, and follows the order until it is PAID and its entitlement granted.
//! - [`console`] — the operator console at `/console`: what each layer caught (live and over
//!   time), payments and refunds by state, the outbox backlog, webhook deliveries, the last
//!   reconciliation rounds and the latest decisions with their reasons, from the [`journal`];
//!   the open reconciliation cases of the daily bills, each resolved by an operator with a
//!   recorded reason (`cases`); the events a consumer parked, each replayed or discarded with
//!   a recorded reason ([`parked`]).
//!
//! Every asset is compiled into the binary; the pages fetch nothing from anywhere but this
//! service, and a Content-Security-Policy says so to the browser. Both pages are off unless
//! configured ([`PageSettings`]); `mideng serve` turns the checkout on in its embedded mode
//! only (the simulator in process), and the console wherever it has a key for it.

pub mod bill_report;
mod cases;
pub mod checkout;
pub mod console;
pub mod journal;
pub mod parked;

use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::api::ApiError;
use crate::state::AppState;
use journal::Journal;

/// Which pages are served.
#[derive(Clone, Debug, Default)]
pub struct PageSettings {
    /// The demo checkout at `/`; `None`: not served.
    pub checkout: Option<CheckoutSettings>,
    /// The operator console at `/console`; `None`: not served.
    pub console: Option<ConsoleSettings>,
}

/// The demo checkout.
#[derive(Clone)]
pub struct CheckoutSettings {
    /// The tenant the page pays as (the demo tenant).
    pub tenant_id: String,
    /// That tenant's publishable key, which the page shows every visitor: with an order's
    /// client secret it pays that order and nothing else ([`crate::domain::keys`]), so reading
    /// it off the page gives no price, refund, webhook, wallet or list.
    pub publishable_key: String,
    /// The channel simulator's base URL, for "scan and pay"; `None`: no such button.
    pub simulator_url: Option<String>,
}

impl std::fmt::Debug for CheckoutSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CheckoutSettings")
            .field("tenant_id", &self.tenant_id)
            .field("simulator_url", &self.simulator_url)
            .finish_non_exhaustive()
    }
}

/// The operator console.
#[derive(Clone, Debug)]
pub struct ConsoleSettings {
    /// SHA-256 (hex, lowercase) of the key that opens it (sent as `Authorization: Bearer`).
    pub api_key_sha256: String,
    /// The decisions it shows; the caller installs [`Journal::layer`] in its subscriber.
    pub journal: Journal,
}

/// The pages' shared state.
#[derive(Debug)]
pub struct Pages {
    settings: PageSettings,
    overview: console::OverviewCache,
    /// For "scan and pay"; `None` when there is no simulator to ask (or no client could be
    /// made, in which case the button answers 404).
    http: Option<reqwest::Client>,
    /// The demo checkout's orders per minute ([`crate::limits::DEMO_CHECKOUTS_PER_MINUTE`]).
    demo_orders: checkout::DemoRate,
}

impl Pages {
    /// The pages of `settings`.
    pub fn new(settings: PageSettings) -> Self {
        // Only "scan and pay" asks anything of anyone (the simulator, over plain HTTP).
        let http = settings
            .checkout
            .as_ref()
            .and_then(|checkout| checkout.simulator_url.as_ref())
            .and_then(|_| {
                let _already_installed = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
                    .timeout(crate::limits::PAGE_UPSTREAM_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .inspect_err(|error| {
                        tracing::warn!(
                            %error,
                            "no HTTP client for the checkout's \"scan and pay\": it answers 404"
                        );
                    })
                    .ok()
            });
        Self {
            settings,
            overview: console::OverviewCache::default(),
            http,
            demo_orders: checkout::DemoRate::default(),
        }
    }

    /// Whether any page is served.
    pub fn any(&self) -> bool {
        self.settings.checkout.is_some() || self.settings.console.is_some()
    }
}

/// The routes of the configured pages (none when none is).
pub(crate) fn routes(pages: &Arc<Pages>) -> Router<AppState> {
    let mut router = Router::new();
    if pages.settings.checkout.is_some() {
        router = router
            .route("/", get(checkout::page))
            .route("/demo/qr", get(checkout::qr))
            .route("/demo/checkout", post(checkout::start))
            .route("/demo/payments/{payment_no}/pay", post(checkout::pay));
    }
    if pages.settings.console.is_some() {
        router = router
            .route("/console", get(console::page))
            .route("/console/overview", get(console::overview))
            .route("/console/cases/resolve", post(cases::resolve))
            .route("/console/events/replay", post(parked::replay))
            .route("/console/events/discard", post(parked::discard));
    }
    if pages.any() {
        router = router.route("/assets/{name}", get(asset));
    }
    router
}

/// The embedded assets: name, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    (
        "checkout.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/checkout.js"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    ),
    (
        "charts.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/charts.js"),
    ),
];

/// `GET /assets/{name}`.
async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(known, _, _)| *known == name) {
        Some((_, content_type, body)) => {
            let mut response = (
                [
                    (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
                ],
                *body,
            )
                .into_response();
            harden(&mut response);
            response
        }
        None => ApiError::not_found("asset").into_response(),
    }
}

/// An HTML page, with the headers every page carries.
fn html(body: String) -> Response {
    let mut response = (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            // The checkout carries its publishable key; neither page is worth caching.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response();
    harden(&mut response);
    response
}

/// The browser may load nothing but this service's own scripts, styles and images, may not
/// frame the page, and sends no referrer (the checkout's URL names an order).
fn harden(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// `text` safe inside HTML text and quoted attributes: the five characters HTML gives a meaning
/// to, replaced by references.
pub fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escaping_leaves_no_markup() {
        assert_eq!(
            escape_html(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }
}

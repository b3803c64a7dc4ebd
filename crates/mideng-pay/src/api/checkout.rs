//! Who a checkout request comes from, and how much a page may ask: **the server prices, the
//! page pays** ([`crate::domain::keys`]).
//!
//! On the checkout's routes (a token, the order, its payment, its grant) a secret key is the
//! merchant's server ([`Principal::Server`]). A publishable key is a page, and opens nothing by
//! itself: it must come with one `Mideng-Client-Secret` header naming the client secret of an
//! order of its tenant that has not expired. Anything else (no header, two, a value that is no
//! secret, an unknown or expired one) is 401 `client-secret-invalid`, one answer for all, before
//! anything runs; a route about another order is 404 at once. The request then acts for that
//! page ([`Principal::Page`]): the handlers let it see and pay that order only, the idempotency layer and the token store keep its records and
//! tokens apart ([`crate::domain::keys::scope_tenant`]), and its requests are counted per order
//! in this instance ([`PageRates`]): past a kind's rate, 429 `rate-limited` with `Retry-After`.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::RequestExt as _;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use mideng::http::Tenant;

use super::ApiError;
use super::error::Code;
use crate::domain::keys::{ClientSecret, KeyKind, Principal};
use crate::domain::order::Order;
use crate::limits::{
    PAGE_PAYMENTS_PER_MINUTE, PAGE_RATE_ENTRIES_MAX, PAGE_READS_PER_MINUTE, PAGE_TOKENS_PER_MINUTE,
};
use crate::state::AppState;

/// The header a page sends its order's client secret in.
pub const CLIENT_SECRET_HEADER: &str = "mideng-client-secret";

/// What a page's request is, for its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// `POST /v1/tokens`.
    Token,
    /// `POST /v1/orders/{order_id}/payments`.
    Payment,
    /// A read: the order, its grant.
    Read,
}

impl Ask {
    fn of(method: &Method, route: &str) -> Self {
        match (method, route) {
            (&Method::POST, "/v1/tokens") => Ask::Token,
            (&Method::POST, _) => Ask::Payment,
            _ => Ask::Read,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Ask::Token => "token",
            Ask::Payment => "payment",
            Ask::Read => "read",
        }
    }
}

/// The key of a page's rate: its tenant and its order.
type PageKey = (String, String);

/// Per-order request rates of the pages, in this instance (GCRA: a page may send a kind's
/// whole minute at once, then one per its share of the minute). Per instance, so behind N
/// instances a page may send up to N times as much; the caps that must hold across instances
/// (unspent tokens per order, new attempts per order) are kept in the stores instead.
pub struct PageRates {
    tokens: DefaultKeyedRateLimiter<PageKey>,
    payments: DefaultKeyedRateLimiter<PageKey>,
    reads: DefaultKeyedRateLimiter<PageKey>,
}

impl std::fmt::Debug for PageRates {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PageRates")
            .field("pages", &self.reads.len())
            .finish_non_exhaustive()
    }
}

impl Default for PageRates {
    fn default() -> Self {
        Self::new()
    }
}

fn per_minute(count: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN))
}

impl PageRates {
    /// The rates of [`crate::limits`].
    pub fn new() -> Self {
        Self {
            tokens: RateLimiter::keyed(per_minute(PAGE_TOKENS_PER_MINUTE)),
            payments: RateLimiter::keyed(per_minute(PAGE_PAYMENTS_PER_MINUTE)),
            reads: RateLimiter::keyed(per_minute(PAGE_READS_PER_MINUTE)),
        }
    }

    /// Counts one request of `ask` for the page of `tenant`'s order `order_id`; the wait until
    /// it would be let through when it is over its rate.
    fn check(&self, ask: Ask, tenant: &str, order_id: &str) -> Result<(), Duration> {
        let limiter = match ask {
            Ask::Token => &self.tokens,
            Ask::Payment => &self.payments,
            Ask::Read => &self.reads,
        };
        // Bounded: the pages quiet for a whole minute are forgotten first (a forgotten page
        // starts afresh, which it would have by then anyway); a flood of pages past that waits.
        if limiter.len() >= PAGE_RATE_ENTRIES_MAX {
            limiter.retain_recent();
            limiter.shrink_to_fit();
            if limiter.len() >= PAGE_RATE_ENTRIES_MAX {
                return Err(Duration::from_secs(60));
            }
        }
        let key = (tenant.to_owned(), order_id.to_owned());
        limiter
            .check_key(&key)
            .map_err(|refused| refused.wait_time_from(DefaultClock::default().now()))
    }
}

/// The one client secret of a request; `None` when there is none, two, or one that cannot be
/// a client secret.
fn client_secret(headers: &HeaderMap) -> Option<ClientSecret> {
    let mut values = headers.get_all(CLIENT_SECRET_HEADER).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    ClientSecret::parse(value.to_str().ok()?.trim())
}

fn secret_refused() -> ApiError {
    ApiError::new(
        Code::ClientSecretInvalid,
        "a publishable key pays one order: send Mideng-Client-Secret with the client secret \
         the merchant's server got for it (it expires a day after the order was made)",
    )
}

/// The order whose client secret `headers` carry, of `tenant`, unexpired: the page's order.
/// Used by the middleware and by the pages beside the API (which check the page's key
/// themselves). Every refusal is the same 401, and is logged as a decision.
pub(crate) async fn page_order(
    state: &AppState,
    tenant: &str,
    headers: &HeaderMap,
) -> Result<Order, ApiError> {
    let refused = |subject: &str, label: &'static str| {
        crate::flows::decision("keys", "api", tenant, subject, label);
        secret_refused()
    };
    let secret = client_secret(headers).ok_or_else(|| refused("-", "client_secret_invalid"))?;
    let order = state
        .ports
        .store
        .orders
        .order_by_client_secret(tenant, &secret)
        .await?
        .ok_or_else(|| refused("-", "client_secret_invalid"))?;
    let now_ms = state.ports.clock.now_ms();
    if order
        .client_secret_expires_at_ms
        .is_none_or(|expires_at_ms| now_ms >= expires_at_ms)
    {
        return Err(refused(&order.order_id, "client_secret_expired"));
    }
    Ok(order)
}

/// The middleware of the checkout's routes; see the module documentation.
pub(super) async fn principal(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let (Some(kind), Some(Tenant(tenant))) = (
        request.extensions().get::<KeyKind>().copied(),
        request.extensions().get::<Tenant>().cloned(),
    ) else {
        // `authenticate` runs first and always says; a route mounted without it is a bug.
        return super::unauthorized().into_response();
    };
    if kind == KeyKind::Secret {
        request.extensions_mut().insert(Principal::Server);
        return next.run(request).await;
    }
    let order = match page_order(&state, &tenant, request.headers()).await {
        Ok(order) => order,
        Err(refused) => return refused.into_response(),
    };
    // A route about another order is not found, before anything runs: no token spent, no
    // record begun, nothing counted against the page.
    let other_order = match request.extract_parts::<RawPathParams>().await {
        Ok(params) => params
            .iter()
            .any(|(name, value)| name == "order_id" && value != order.order_id),
        Err(rejection) => return rejection.into_response(),
    };
    if other_order {
        crate::flows::decision("keys", "api", &tenant, &order.order_id, "other_order");
        return ApiError::not_found("order").into_response();
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", MatchedPath::as_str);
    let ask = Ask::of(request.method(), route);
    if let Err(wait) = state.page_rates.check(ask, &tenant, &order.order_id) {
        crate::flows::decision("rate", "api", &tenant, &order.order_id, "page_rate_limited");
        metrics::counter!(crate::metrics::PAGE_REQUESTS_LIMITED, "kind" => ask.label())
            .increment(1);
        return ApiError::new(
            Code::RateLimited,
            format!(
                "this order's page sent more {} requests than a page may in a minute",
                ask.label()
            ),
        )
        .retry_after(
            wait.as_millis()
                .div_ceil(1000)
                .try_into()
                .unwrap_or(u64::MAX),
        )
        .into_response();
    }
    request.extensions_mut().insert(Principal::Page {
        order_id: order.order_id,
    });
    next.run(request).await
}

/// Whether a request acting as `principal` may see the order `order_id`: the server sees every
/// order of its tenant, a page only its own.
pub(super) fn sees(principal: &Principal, order_id: &str) -> bool {
    match principal {
        Principal::Server => true,
        Principal::Page { order_id: own } => own == order_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_over_its_rate_waits_and_other_pages_do_not() {
        let rates = PageRates::new();
        for _ in 0..PAGE_TOKENS_PER_MINUTE {
            assert_eq!(rates.check(Ask::Token, "t1", "o-1"), Ok(()));
        }
        let wait = rates
            .check(Ask::Token, "t1", "o-1")
            .expect_err("over the rate");
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(60));
        assert_eq!(
            rates.check(Ask::Token, "t1", "o-2"),
            Ok(()),
            "another order"
        );
        assert_eq!(
            rates.check(Ask::Token, "t2", "o-1"),
            Ok(()),
            "another tenant"
        );
        assert_eq!(rates.check(Ask::Read, "t1", "o-1"), Ok(()), "another kind");
    }

    #[test]
    fn one_well_formed_client_secret_is_read_and_anything_else_is_not() {
        let secret = ClientSecret::generate();
        let headers = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(CLIENT_SECRET_HEADER, value.parse().expect("value"));
            }
            headers
        };
        assert_eq!(
            client_secret(&headers(&[secret.expose()])),
            Some(secret.clone())
        );
        for refused in [
            &[][..],
            &[secret.expose(), secret.expose()][..],
            &["mdcs_short"][..],
        ] {
            assert_eq!(client_secret(&headers(refused)), None);
        }
    }
}

//! How long every request takes, per route: the histogram
//! `mideng_http_request_duration_seconds{route, method, status_class}`, observed by a middleware
//! around every route of the API (and of the metrics listener).
//!
//! The labels are bounded, because every label value is a series the exporter keeps for the
//! life of the process: `route` is the template the router matched (`/v1/orders/{order_id}`),
//! never the path itself, which carries ids a client chooses; a request no route matched (the
//! 404 fallback) is `unmatched`. `method` is one of the standard methods or `OTHER` (hyper
//! accepts any token as a method), and `status_class` is `1xx` … `5xx` (`other` above 599).
//!
//! A request is timed from the middleware receiving it (after hyper read its head) until the
//! response head is ready: authentication, the idempotency layer, the handler and the problem
//! documents of [`super::boundary`] included; the body is sent after, and the API's bodies are
//! small and already in memory by then.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

/// Name of the per-route latency histogram.
const REQUEST_DURATION_HISTOGRAM: &str = "mideng_http_request_duration_seconds";

/// The `route` of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// The middleware; see the module documentation.
pub(super) async fn request_duration(request: Request, next: Next) -> Response {
    let received = Instant::now();
    // Owned: the request moves into the handler. One small allocation per request.
    let route = request.extensions().get::<MatchedPath>().map_or_else(
        || UNMATCHED.to_owned(),
        |matched| matched.as_str().to_owned(),
    );
    let method = method_label(request.method());
    let response = next.run(request).await;
    metrics::histogram!(
        REQUEST_DURATION_HISTOGRAM,
        "route" => route,
        "method" => method,
        "status_class" => status_class(response.status())
    )
    .record(received.elapsed());
    response
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        // hyper carries any status up to 999; none of the service's is above 599.
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_fixed_sets() {
        assert_eq!(method_label(&Method::GET), "GET");
        let invented = Method::from_bytes(b"BREW").expect("a valid token");
        assert_eq!(method_label(&invented), "OTHER");
        assert_eq!(status_class(StatusCode::CREATED), "2xx");
        assert_eq!(status_class(StatusCode::UNPROCESSABLE_ENTITY), "4xx");
        assert_eq!(status_class(StatusCode::SERVICE_UNAVAILABLE), "5xx");
    }
}

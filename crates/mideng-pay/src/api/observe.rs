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
//! small and already in memory by then. A request whose client hung up before its answer was
//! ready (hyper then drops the handler's future) is counted too, with `status_class`
//! `abandoned` and the time until it was dropped: a slow route that clients give up on shows
//! in the histogram instead of vanishing from it.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::HTTP_REQUEST_DURATION as REQUEST_DURATION_HISTOGRAM;

/// The `route` of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// The request's server span when spans are exported ([`crate::telemetry`]): named after its
/// method and route, a child of the caller's `traceparent` when it sent one, and named on the
/// answer by `traceresponse`. Nothing at all when they are not.
pub(super) async fn traced(request: Request, next: Next) -> Response {
    use tracing::Instrument as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if !crate::telemetry::exporting() {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str);
    let method = method_label(request.method());
    let span = tracing::info_span!(
        "http.server",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method,
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = crate::telemetry::parent_of(request.headers()) {
        let _ = span.set_parent(parent);
    }
    let mut response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    if let Some(value) = crate::telemetry::traceresponse(&span) {
        response
            .headers_mut()
            .insert(crate::telemetry::TRACERESPONSE, value);
    }
    response
}

/// The middleware; see the module documentation.
pub(super) async fn request_duration(request: Request, next: Next) -> Response {
    let received = Instant::now();
    // Owned: the request moves into the handler. One small allocation per request.
    let route = request.extensions().get::<MatchedPath>().map_or_else(
        || UNMATCHED.to_owned(),
        |matched| matched.as_str().to_owned(),
    );
    let mut timing = Timing {
        route: Some(route),
        method: method_label(request.method()),
        received,
    };
    let response = next.run(request).await;
    timing.record(status_class(response.status()));
    response
}

/// One request's observation, recorded once: with its status class when the answer is ready,
/// or as `abandoned` when the request's future is dropped first.
struct Timing {
    /// Taken when recorded.
    route: Option<String>,
    method: &'static str,
    received: Instant,
}

impl Timing {
    fn record(&mut self, status_class: &'static str) {
        if let Some(route) = self.route.take() {
            metrics::histogram!(
                REQUEST_DURATION_HISTOGRAM,
                "route" => route,
                "method" => self.method,
                "status_class" => status_class
            )
            .record(self.received.elapsed());
        }
    }
}

impl Drop for Timing {
    fn drop(&mut self) {
        self.record(ABANDONED);
    }
}

/// The `status_class` of a request whose client hung up before its answer was ready.
const ABANDONED: &str = "abandoned";

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

    /// A request answered is counted once with its status class; one dropped before its
    /// answer (the client hung up) is counted as abandoned.
    #[test]
    fn a_request_is_counted_once_answered_or_abandoned() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let timing = |route: &str| Timing {
                route: Some(route.to_owned()),
                method: "POST",
                received: Instant::now(),
            };
            let mut answered = timing("/v1/orders");
            answered.record(status_class(StatusCode::CREATED));
            drop(answered);
            drop(timing("/v1/wallets/{user_id}/deduct"));
        });
        let scrape = handle.render();
        let count = |route: &str, class: &str| {
            let series = format!(
                "{REQUEST_DURATION_HISTOGRAM}_count{{route=\"{route}\",method=\"POST\",status_class=\"{class}\"}} 1"
            );
            scrape.lines().any(|line| line == series)
        };
        assert!(count("/v1/orders", "2xx"), "{scrape}");
        assert!(!count("/v1/orders", ABANDONED), "{scrape}");
        assert!(count("/v1/wallets/{user_id}/deduct", ABANDONED), "{scrape}");
    }

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

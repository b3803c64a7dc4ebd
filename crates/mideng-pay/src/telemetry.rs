//! Traces over OTLP, off unless `[telemetry] otlp_endpoint` is set.
//!
//! The service's `tracing` spans (each request's server span, its channel calls, each webhook
//! attempt, and the idempotency decisions logged inside them as span events) are bridged to
//! OpenTelemetry and exported in batches over OTLP/HTTP (protobuf) to `<endpoint>/v1/traces`.
//! A request that carries one W3C `traceparent` header joins that trace; two such headers are
//! ambiguous and start a new trace instead. Whether a trace is recorded is the operator's
//! choice (`sample_percent`, by trace id), never the caller's: a `traceparent` whose sampled
//! flag is off joins the trace all the same, and its request is recorded like any other, so
//! no caller keeps its requests out of the operator's traces. Every answer carries `traceresponse`
//! (`00-<trace id>-<span id>-<flags>`, W3C Trace Context Level 2) naming the trace it belongs
//! to; the channel calls and the webhook deliveries send `traceparent`, so a channel's or a
//! merchant's own tracing continues the trace.
//!
//! With telemetry off nothing is created per request: no span, no header.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Whether spans are exported (a pipeline was built): when not, the API creates no span of
/// its own and sends no trace header.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// How long one export may take before it is abandoned (the spans of that batch are lost, the
/// service goes on).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The W3C header a request's trace comes in.
pub const TRACEPARENT: &str = "traceparent";

/// The header an answer names its trace in.
pub const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");

/// `[telemetry]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP endpoint of a collector (`http://collector:4318`); spans are posted to
    /// `<endpoint>/v1/traces`. None (the default): no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans (default `mideng`).
    pub service_name: String,
    /// The share of traces recorded, by trace id, 0 to 100 (default 100: every request). The
    /// caller's sampled flag plays no part.
    pub sample_percent: u8,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "mideng".to_owned(),
            sample_percent: 100,
        }
    }
}

impl TelemetryConfig {
    /// Checks the endpoint (an absolute http(s) URL of at most 2048 bytes, without credentials,
    /// query or fragment) and the name (1 to 64 visible ASCII characters).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.otlp_endpoint {
            let usable = endpoint.len() <= 2048
                && url::Url::parse(endpoint).is_ok_and(|url| {
                    matches!(url.scheme(), "http" | "https")
                        && url.has_host()
                        && url.username().is_empty()
                        && url.password().is_none()
                        && url.query().is_none()
                        && url.fragment().is_none()
                });
            if !usable {
                return Err("telemetry.otlp_endpoint must be an http(s) URL of at most 2048 bytes, without credentials, query or fragment".to_owned());
            }
        }
        if self.sample_percent > 100 {
            return Err("telemetry.sample_percent must be 0 to 100".to_owned());
        }
        let name = &self.service_name;
        if name.is_empty() || name.len() > 64 || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(
                "telemetry.service_name must be 1 to 64 visible ASCII characters".to_owned(),
            );
        }
        Ok(())
    }

    /// Where spans are posted: `<endpoint>/v1/traces`.
    fn traces_url(&self) -> Option<String> {
        self.otlp_endpoint
            .as_deref()
            .map(|endpoint| format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }
}

/// The running pipeline: flushes what it holds when dropped (at shutdown).
pub struct Pipeline {
    provider: SdkTracerProvider,
}

impl Pipeline {
    /// Exports every finished span now (a test, or a shutdown that must not lose the last
    /// batch); errors are logged by the SDK and ignored here.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Pipeline")
    }
}

/// The layer that exports the service's spans (those of the `mideng*` crates, with their
/// events), and its pipeline; `None` when no endpoint is configured.
pub fn layer<S>(
    config: &TelemetryConfig,
) -> Result<Option<(impl Layer<S> + use<S>, Pipeline)>, String>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    config.validate()?;
    let Some(url) = config.traces_url() else {
        return Ok(None);
    };
    // reqwest's rustls is built without a default crypto provider: ring, as everywhere else
    // (installing it twice is harmless).
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    let exporter = {
        use opentelemetry_otlp::WithExportConfig as _;
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| format!("telemetry: {error}"))?
    };
    // The operator's sampler at every span, never parent-based: a remote parent's flag would
    // let a caller switch the recording of its requests off.
    let sampler = opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(
        f64::from(config.sample_percent) / 100.0,
    );
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler)
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("mideng");
    EXPORTING.store(true, Ordering::Relaxed);
    mideng_channel::adapter::propagate_with(outbound_headers);
    let ours =
        tracing_subscriber::filter::filter_fn(|metadata| metadata.target().starts_with("mideng"));
    Ok(Some((
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(ours),
        Pipeline { provider },
    )))
}

/// Whether spans are exported.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The remote parent of a request's span: the trace of its one `traceparent` header, or none
/// (a new trace) when there is none, two, or one that does not parse.
pub fn parent_of(headers: &HeaderMap) -> Option<opentelemetry::Context> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let (Some(_), None) = (values.next(), values.next()) else {
        return None;
    };
    let context = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    context.span().span_context().is_valid().then_some(context)
}

/// The `traceparent` (and `tracestate`) of the current span, for a request the service sends;
/// empty when spans are not exported.
pub fn outbound_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    if exporting() {
        let context = tracing::Span::current().context();
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(&mut headers));
        // No state to pass on: no empty `tracestate:` header either.
        if headers
            .get("tracestate")
            .is_some_and(|value| value.is_empty())
        {
            headers.remove("tracestate");
        }
    }
    headers
}

/// The `traceresponse` of `span`: `00-<trace id>-<span id>-<flags>`; `None` when it is not
/// exported.
pub fn traceresponse(span: &tracing::Span) -> Option<HeaderValue> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        HeaderValue::from_str(&format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        ))
        .expect("hex digits and dashes are a header value")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_well_formed_traceparent_is_a_parent_and_anything_else_is_not() {
        let with = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(TRACEPARENT, value.parse().expect("value"));
            }
            headers
        };
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = parent_of(&with(&[good])).expect("a parent");
        assert_eq!(
            parent.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        for refused in [
            &[][..],
            &[good, good][..],
            &["00-00000000000000000000000000000000-00f067aa0ba902b7-01"][..],
            &["not a traceparent"][..],
            &["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"][..],
        ] {
            assert!(parent_of(&with(refused)).is_none(), "{refused:?}");
        }
    }

    #[test]
    fn an_endpoint_is_an_http_url_without_secrets() {
        let config = |endpoint: &str| TelemetryConfig {
            otlp_endpoint: Some(endpoint.to_owned()),
            ..TelemetryConfig::default()
        };
        assert!(config("http://collector.internal:4318").validate().is_ok());
        assert_eq!(
            config("http://collector.internal:4318/")
                .traces_url()
                .as_deref(),
            Some("http://collector.internal:4318/v1/traces")
        );
        for refused in [
            "collector:4318",
            "ftp://collector/",
            "http://user:pw@collector:4318",
            "http://collector:4318/?token=1",
        ] {
            assert!(config(refused).validate().is_err(), "{refused}");
        }
        assert!(TelemetryConfig::default().validate().is_ok());
        assert!(TelemetryConfig::default().traces_url().is_none());
    }
}

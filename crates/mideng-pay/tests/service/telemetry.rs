//! Traces end to end: the service exports its spans over OTLP/HTTP to a collector this test
//! runs on loopback (decoding what it receives with the OTLP protobuf messages); a payment
//! created under a caller's `traceparent` is one trace — the caller's span, the request's
//! server span, the channel call — whose id the answer names in `traceresponse`, and the
//! merchant's webhook arrives with a `traceparent` of a span the collector received too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use mideng_pay::telemetry::{TelemetryConfig, layer};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::harness::{Backend, Service, unique};

/// A span as the collector received it: trace id, span id, parent span id (hex), name, kind.
#[derive(Clone, Debug)]
struct Received {
    trace_id: String,
    span_id: String,
    parent_id: String,
    name: String,
    kind: i32,
}

/// OTLP's span kinds.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

type Spans = Arc<Mutex<Vec<Received>>>;

async fn collector(spans: Spans) -> String {
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let spans = spans.clone();
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return StatusCode::BAD_REQUEST;
                };
                let mut kept = spans.lock().expect("lock");
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            kept.push(Received {
                                trace_id: hex::encode(&span.trace_id),
                                span_id: hex::encode(&span.span_id),
                                parent_id: hex::encode(&span.parent_span_id),
                                name: span.name,
                                kind: span.kind,
                            });
                        }
                    }
                }
                StatusCode::OK
            }
        }),
    );
    crate::harness::serve_on_loopback(app).await
}

/// The spans of `trace_id` once `done` holds for them, flushing the pipeline while waiting.
async fn trace_until(
    spans: &Spans,
    pipeline: &mideng_pay::telemetry::Pipeline,
    trace_id: &str,
    done: impl Fn(&[Received]) -> bool,
) -> Vec<Received> {
    let started = Instant::now();
    loop {
        pipeline.flush();
        let trace: Vec<_> = spans
            .lock()
            .expect("lock")
            .iter()
            .filter(|span| span.trace_id == trace_id)
            .cloned()
            .collect();
        if done(&trace) {
            return trace;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the trace never got there: {trace:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_one_payment_is_one_trace_from_the_caller_to_the_channel_and_the_webhook() {
    let spans = Spans::default();
    let endpoint = collector(spans.clone()).await;
    let (trace_layer, pipeline) = layer(&TelemetryConfig {
        otlp_endpoint: Some(endpoint),
        ..TelemetryConfig::default()
    })
    .expect("valid")
    .expect("configured");
    tracing_subscriber::registry()
        .with(trace_layer)
        .try_init()
        .expect("the only subscriber of this test's process");

    let service = Service::start(Backend::Sqlite).await;
    let hooks: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
    let kept = hooks.clone();
    let receiver = crate::harness::serve_on_loopback(axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                kept.lock().expect("lock").push(headers);
                StatusCode::NO_CONTENT
            }
        }),
    ))
    .await;
    let registered = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{receiver}/hook"), "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());

    // The caller's trace and span.
    let (trace_id, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traceparent = format!("00-{trace_id}-{caller_span}-01");
    let order_id = unique("o");
    service.create_order(&order_id, "u-trace", 500).await;
    let token = service.token().await;
    let created = service
        .post(
            &format!("/v1/orders/{order_id}/payments"),
            json!({"channel": "alipay"}),
            &[("Idempotency-Token", &token), ("traceparent", &traceparent)],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let answered = created.header("traceresponse").expect("traceresponse");
    assert!(
        answered.starts_with(&format!("00-{trace_id}-")),
        "{answered}"
    );

    // The request's server span, a child of the caller's; the channel call under it.
    let trace = trace_until(&spans, &pipeline, trace_id, |trace| {
        trace.iter().any(|span| span.kind == SERVER) && trace.iter().any(|span| span.kind == CLIENT)
    })
    .await;
    let server = trace
        .iter()
        .find(|span| span.kind == SERVER)
        .expect("a server span");
    assert_eq!(
        server.name, "POST /v1/orders/{order_id}/payments",
        "{trace:#?}"
    );
    assert_eq!(server.parent_id, caller_span, "{trace:#?}");
    assert!(answered.contains(&server.span_id), "{answered} {server:?}");
    let channel = trace
        .iter()
        .find(|span| span.kind == CLIENT)
        .expect("a client span");
    assert_eq!(channel.name, "alipay.trade.precreate", "{trace:#?}");
    let mut ancestor = channel.parent_id.clone();
    let mut hops = 0;
    while ancestor != server.span_id {
        ancestor = trace
            .iter()
            .find(|span| span.span_id == ancestor)
            .unwrap_or_else(|| panic!("{ancestor} is not in the trace: {trace:#?}"))
            .parent_id
            .clone();
        hops += 1;
        assert!(hops < 16, "{trace:#?}");
    }

    // A request without a traceparent starts a trace of its own, named on its answer too.
    let own = service.get(&format!("/v1/orders/{order_id}")).await;
    let own_trace = own.header("traceresponse").expect("traceresponse");
    assert!(!own_trace.contains(trace_id), "{own_trace}");

    // A caller whose traceparent says "not sampled" is recorded all the same: the operator
    // decides what is recorded, not the caller.
    let unsampled_trace = "0af7651916cd43dd8448eb211c80319c";
    let unsampled = service
        .send(
            reqwest::Method::GET,
            &format!("/v1/orders/{order_id}"),
            None,
            &[(
                "traceparent",
                &format!("00-{unsampled_trace}-b7ad6b7169203331-00"),
            )],
        )
        .await;
    assert_eq!(unsampled.status, 200);
    let recorded = trace_until(&spans, &pipeline, unsampled_trace, |trace| {
        trace.iter().any(|span| span.kind == SERVER)
    })
    .await;
    assert_eq!(
        recorded
            .iter()
            .find(|span| span.kind == SERVER)
            .map(|span| span.parent_id.as_str()),
        Some("b7ad6b7169203331"),
        "{recorded:#?}"
    );

    // Paid: the merchant's webhook carries the traceparent of the delivery's span, which the
    // collector receives.
    let number = created.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    service.pay_at_channel(&number).await;
    let started = Instant::now();
    let sent = loop {
        if let Some(headers) = hooks.lock().expect("lock").first().cloned() {
            break headers;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no webhook");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let webhook_parent = sent["traceparent"].to_str().expect("ascii").to_owned();
    let parts: Vec<_> = webhook_parent.split('-').collect();
    assert_eq!(parts.len(), 4, "{webhook_parent}");
    let delivery = trace_until(&spans, &pipeline, parts[1], |trace| {
        trace.iter().any(|span| span.span_id == parts[2])
    })
    .await;
    let span = delivery
        .iter()
        .find(|span| span.span_id == parts[2])
        .expect("the delivery's span");
    assert_eq!((span.name.as_str(), span.kind), ("POST webhook", CLIENT));
}

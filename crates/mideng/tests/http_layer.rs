//! The HTTP layer through a real axum router, on every store.
//!
//! The handler counts its executions, so "exactly one effect" is asserted directly; responses
//! are compared byte for byte.

#![cfg(feature = "axum")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderName, Request, Response, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use mideng::RecordStore;
use mideng::http::{
    IDEMPOTENT_REPLAYED, IdempotencyContext, IdempotencyLayer, ORIGINAL_REQUEST_ID, REQUEST_ID,
    RouteConfig, RouteConfigBuilder, TenantSource, TokenGuard, not_final,
};
use support::{Stores, race, unique};
use tower::ServiceExt;

const TENANT: HeaderName = HeaderName::from_static("x-tenant");

#[derive(Clone, Default)]
struct Effects {
    executions: Arc<AtomicUsize>,
}

impl Effects {
    fn count(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }
}

/// Creates a payment: one execution is one effect. Slow enough that duplicates overlap.
async fn create_payment(
    State(effects): State<Effects>,
    Path(order): Path<String>,
    context: IdempotencyContext,
    body: String,
) -> Response<Body> {
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let answer = serde_json::json!({
        "payment_no": format!("P{number}"), "order_id": order, "request": body,
        "fence": context.fence, "taken_over": context.taken_over,
    });
    Response::builder()
        .status(StatusCode::CREATED)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::LOCATION, format!("/v1/payments/P{number}"))
        // Not in the replay list: must not come back on a replay.
        .header("x-execution", number.to_string())
        .body(Body::from(answer.to_string()))
        .expect("valid response")
}

/// Fails with 500 on its first execution, succeeds afterwards.
async fn flaky(State(effects): State<Effects>) -> (StatusCode, String) {
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    if number == 1 {
        (StatusCode::INTERNAL_SERVER_ERROR, "channel down".to_owned())
    } else {
        (StatusCode::OK, format!("done on execution {number}"))
    }
}

/// Hangs on its first execution (until dropped), answers at once afterwards.
async fn hang_once(State(effects): State<Effects>, context: IdempotencyContext) -> String {
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    if number == 1 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    format!("execution {number}, taken over: {}", context.taken_over)
}

/// Takes 300 ms, then answers with its execution number.
async fn slow(State(effects): State<Effects>) -> String {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    format!("execution {number}")
}

fn config(records: Arc<dyn RecordStore>, operation: &str) -> RouteConfigBuilder {
    RouteConfig::builder(records, operation).tenant(TenantSource::Header(TENANT))
}

fn app(
    records: Arc<dyn RecordStore>,
    effects: Effects,
    tune: impl Fn(RouteConfigBuilder) -> RouteConfigBuilder,
) -> Router {
    let layer = |operation: &str| {
        IdempotencyLayer::new(
            tune(config(records.clone(), operation))
                .build()
                .expect("valid config"),
        )
    };
    Router::new()
        .route(
            "/v1/orders/{order}/payments",
            post(create_payment).route_layer(layer("payments.create")),
        )
        .route("/flaky", post(flaky).route_layer(layer("flaky")))
        .route("/hang", post(hang_once).route_layer(layer("hang")))
        .route("/slow", post(slow).route_layer(layer("slow")))
        .layer(axum::middleware::from_fn(mideng::http::request_id))
        .with_state(effects)
}

fn request(path: &str, tenant: &str, key: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(TENANT, tenant)
        .header("idempotency-key", key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .expect("valid request")
}

struct Answer {
    status: StatusCode,
    replayed: bool,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body")
        .to_vec();
    Answer {
        status,
        replayed: headers
            .get(IDEMPOTENT_REPLAYED)
            .is_some_and(|v| v == "true"),
        headers,
        body,
    }
}

fn problem_code(answer: &Answer) -> String {
    assert_eq!(
        answer.headers[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let problem: serde_json::Value = serde_json::from_slice(&answer.body).expect("problem json");
    problem["code"].as_str().expect("code").to_owned()
}

pub(crate) async fn fifty_concurrent_identical_requests_execute_once(stores: Stores) {
    let effects = Effects::default();
    let app = app(stores.records, effects.clone(), |config| config);
    let (tenant, key) = (unique("t"), unique("k"));
    let body = r#"{"channel":"alipay","amount":100}"#;
    let answers = race(50, |_| {
        let (app, request) = (
            app.clone(),
            request("/v1/orders/o1/payments", &tenant, &key, body),
        );
        async move { send(&app, request).await }
    })
    .await;
    assert_eq!(
        effects.count(),
        1,
        "exactly one handler execution for 50 identical requests"
    );
    let originals: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == StatusCode::CREATED && !a.replayed)
        .collect();
    assert_eq!(originals.len(), 1, "one original answer");
    let original = originals[0];
    for answer in &answers {
        match answer.status {
            StatusCode::CREATED if answer.replayed => {
                assert_eq!(answer.body, original.body, "replay is byte-identical")
            }
            StatusCode::CREATED => {}
            StatusCode::CONFLICT => {
                assert_eq!(problem_code(answer), "in-progress");
                assert!(answer.headers.contains_key(header::RETRY_AFTER));
            }
            other => panic!("unexpected status {other}"),
        }
    }
    // Every answer names its own request; only replays name the one that had the effect.
    let ids: std::collections::HashSet<&str> = answers
        .iter()
        .map(|answer| answer.headers[REQUEST_ID].to_str().expect("ascii"))
        .collect();
    assert_eq!(ids.len(), answers.len(), "one request id per request");
    assert!(!original.headers.contains_key(ORIGINAL_REQUEST_ID));
    for answer in answers.iter().filter(|answer| answer.replayed) {
        assert_eq!(
            answer.headers[ORIGINAL_REQUEST_ID],
            original.headers[REQUEST_ID]
        );
    }
    // A client's own Request-Id is not the one the service files its request under.
    let mut asked = request("/v1/orders/o1/payments", &tenant, &key, body);
    asked.headers_mut().insert(
        REQUEST_ID,
        "req_chosen_by_the_client".parse().expect("value"),
    );
    let later = send(&app, asked).await;
    assert!(later.replayed);
    assert_ne!(later.headers[REQUEST_ID], "req_chosen_by_the_client");
    assert_eq!(later.headers.get_all(REQUEST_ID).iter().count(), 1);
    assert_eq!(
        later.headers[ORIGINAL_REQUEST_ID],
        original.headers[REQUEST_ID]
    );
    assert_eq!(
        (later.status, &later.body),
        (StatusCode::CREATED, &original.body)
    );
    assert_eq!(
        later.headers[header::LOCATION],
        original.headers[header::LOCATION],
        "chosen headers replayed"
    );
    assert!(
        !later.headers.contains_key("x-execution"),
        "other headers are not stored"
    );
    assert_eq!(effects.count(), 1);
}

pub(crate) async fn a_different_body_under_the_same_key_is_refused(stores: Stores) {
    let effects = Effects::default();
    let app = app(stores.records, effects.clone(), |config| config);
    let (tenant, key) = (unique("t"), unique("k"));
    let first = send(
        &app,
        request("/v1/orders/o1/payments", &tenant, &key, r#"{"amount":100}"#),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED);
    // Same JSON, other key order and spacing: the same request.
    let same = send(
        &app,
        request(
            "/v1/orders/o1/payments",
            &tenant,
            &key,
            r#"{ "amount" : 100 }"#,
        ),
    )
    .await;
    assert!(same.replayed);
    let other_body = send(
        &app,
        request("/v1/orders/o1/payments", &tenant, &key, r#"{"amount":999}"#),
    )
    .await;
    assert_eq!(other_body.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_code(&other_body), "idempotency-key-reused");
    let other_order = send(
        &app,
        request("/v1/orders/o2/payments", &tenant, &key, r#"{"amount":100}"#),
    )
    .await;
    assert_eq!(
        other_order.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "another order under the same key is not a replay"
    );
    assert_eq!(effects.count(), 1);
}

pub(crate) async fn a_server_error_leaves_the_key_retryable(stores: Stores) {
    let effects = Effects::default();
    let app = app(stores.records, effects.clone(), |config| config);
    let (tenant, key) = (unique("t"), unique("k"));
    let failed = send(&app, request("/flaky", &tenant, &key, "{}")).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!failed.replayed);
    let retried = send(&app, request("/flaky", &tenant, &key, "{}")).await;
    assert_eq!(
        (retried.status, retried.replayed),
        (StatusCode::OK, false),
        "the retry runs the handler again"
    );
    let replayed = send(&app, request("/flaky", &tenant, &key, "{}")).await;
    assert!(replayed.replayed);
    assert_eq!(replayed.body, retried.body);
    assert_eq!(effects.count(), 2, "the 500 was not stored; the 200 was");
}

pub(crate) async fn a_dropped_request_runs_until_its_timeout_frees_the_key(stores: Stores) {
    let effects = Effects::default();
    let lease = |config: RouteConfigBuilder| {
        config
            .lease(Duration::from_millis(600))
            .handler_timeout(Duration::from_millis(500))
    };
    let app = app(stores.records, effects.clone(), lease);
    let (tenant, key) = (unique("t"), unique("k"));
    let in_flight = {
        let (app, request) = (app.clone(), request("/hang", &tenant, &key, "{}"));
        tokio::spawn(async move { send(&app, request).await })
    };
    while effects.count() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The client goes away mid-handler: the handler runs on (it is detached from the
    // connection) until the route's timeout frees the key; meanwhile the record is in progress.
    in_flight.abort();
    let busy = send(&app, request("/hang", &tenant, &key, "{}")).await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(problem_code(&busy), "in-progress");

    tokio::time::sleep(Duration::from_millis(700)).await;
    let taken_over = send(&app, request("/hang", &tenant, &key, "{}")).await;
    assert_eq!(taken_over.status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&taken_over.body),
        "execution 2, taken over: true"
    );
    let replay = send(&app, request("/hang", &tenant, &key, "{}")).await;
    assert!(replay.replayed);
    assert_eq!(effects.count(), 2);
}

pub(crate) async fn a_client_that_disconnects_gets_the_answer_on_retry(stores: Stores) {
    let effects = Effects::default();
    let app = app(stores.records, effects.clone(), |config| config);
    let (tenant, key) = (unique("t"), unique("k"));
    let first = {
        let (app, request) = (app.clone(), request("/slow", &tenant, &key, "{}"));
        tokio::spawn(async move { send(&app, request).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The client gives up mid-request; the work goes on without it.
    first.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(effects.count(), 1, "the handler ran to the end");
    let retry = send(&app, request("/slow", &tenant, &key, "{}")).await;
    assert!(
        retry.replayed,
        "the retry gets the stored answer, not a 409 until the lease ends"
    );
    assert_eq!(String::from_utf8_lossy(&retry.body), "execution 1");
    assert_eq!(effects.count(), 1);
}

pub(crate) async fn tenants_cannot_read_each_others_replays(stores: Stores) {
    let effects = Effects::default();
    let app = app(stores.records, effects.clone(), |config| config);
    let key = unique("shared-key");
    let body = r#"{"amount":100}"#;
    let first = send(
        &app,
        request("/v1/orders/o1/payments", "tenant-a", &key, body),
    )
    .await;
    let second = send(
        &app,
        request("/v1/orders/o1/payments", "tenant-b", &key, body),
    )
    .await;
    assert_eq!(
        (first.status, second.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert!(
        !second.replayed,
        "tenant b's request runs; it never sees tenant a's answer"
    );
    assert_ne!(first.body, second.body);
    let again = send(
        &app,
        request("/v1/orders/o1/payments", "tenant-a", &key, body),
    )
    .await;
    assert_eq!(again.body, first.body);
    assert_eq!(effects.count(), 2);
}

pub(crate) async fn a_handler_that_lost_its_lease_cannot_overwrite_the_new_owner(stores: Stores) {
    let effects = Effects::default();
    let records = stores.records.clone();
    let app = app(stores.records, effects.clone(), |config| config);
    let (tenant, key) = (unique("t"), unique("k"));
    let body = r#"{"amount":1}"#;
    let first = {
        let (app, request) = (
            app.clone(),
            request("/v1/orders/o1/payments", &tenant, &key, body),
        );
        tokio::spawn(async move { send(&app, request).await })
    };
    while effects.count() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // While the first handler runs, its key is freed behind its back (as when its lease runs
    // out during a pause) and a second request takes it over and completes.
    let scope = mideng::Scope::new(&tenant, "payments.create").expect("scope");
    let key_parsed = mideng::IdempotencyKey::parse(&key).expect("key");
    let record = records
        .find_record(&scope, &key_parsed)
        .await
        .expect("find")
        .expect("record");
    let stolen = mideng::Lease {
        scope: scope.clone(),
        key: key_parsed.clone(),
        fence: record.fence,
        owner: record.owner.clone(),
        lease_until_ms: record.lease_until_ms,
        retention_ms: 60_000,
        taken_over: false,
    };
    records.abandon(&stolen).await.expect("free the key");
    let second = send(&app, request("/v1/orders/o1/payments", &tenant, &key, body)).await;
    assert_eq!(
        (second.status, second.replayed),
        (StatusCode::CREATED, false)
    );

    let first = first.await.expect("first request finished");
    assert_eq!(
        first.status,
        StatusCode::CREATED,
        "the late handler still answers its own client"
    );
    let replay = send(&app, request("/v1/orders/o1/payments", &tenant, &key, body)).await;
    assert!(replay.replayed);
    assert_eq!(
        replay.body, second.body,
        "the record holds the new owner's answer, not the late one's"
    );
    assert_ne!(replay.body, first.body);
}

/// Fails with 500 on its first execution, answers a 202 that is not final on its second (the
/// outcome is not known yet), and 201 from its third on.
async fn not_yet(State(effects): State<Effects>) -> Response<Body> {
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    match number {
        1 => (StatusCode::INTERNAL_SERVER_ERROR, "channel down").into_response(),
        2 => not_final((
            StatusCode::ACCEPTED,
            [(header::RETRY_AFTER, "2")],
            "not confirmed yet",
        )),
        _ => (StatusCode::CREATED, format!("done on execution {number}")).into_response(),
    }
}

fn with_token(request: Request<Body>, token: &str) -> Request<Body> {
    let (mut parts, body) = request.into_parts();
    parts.headers.insert(
        "idempotency-token",
        token.parse().expect("a token is a header value"),
    );
    Request::from_parts(parts, body)
}

pub(crate) async fn a_retry_keeps_its_key_and_token_until_the_answer_is_final(stores: Stores) {
    let effects = Effects::default();
    let route = config(stores.records.clone(), "pending")
        .token_guard(TokenGuard::new(stores.tokens.clone()))
        .build()
        .expect("valid config");
    let app = Router::new()
        .route(
            "/pending",
            post(not_yet).route_layer(IdempotencyLayer::new(route)),
        )
        .with_state(effects.clone());
    let (tenant, key) = (unique("t"), unique("k"));
    let scope = mideng::Scope::new(&tenant, "pending").expect("scope");
    let token = stores
        .tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue")
        .token;
    let submit = |key: &str| with_token(request("/pending", &tenant, key, "{}"), token.as_str());

    // The first attempt fails after spending the token: the same key and token run again.
    let failed = send(&app, submit(&key)).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    // "Come back later" is not stored: the retry after Retry-After runs again too.
    let later = send(&app, submit(&key)).await;
    assert_eq!(
        (later.status, later.replayed),
        (StatusCode::ACCEPTED, false)
    );
    assert_eq!(later.headers[header::RETRY_AFTER], "2");
    let done = send(&app, submit(&key)).await;
    assert_eq!((done.status, done.replayed), (StatusCode::CREATED, false));
    assert_eq!(String::from_utf8_lossy(&done.body), "done on execution 3");
    // The final answer is stored and replayed; the handler ran three times in all.
    let replay = send(&app, submit(&key)).await;
    assert_eq!(
        (replay.status, replay.replayed),
        (StatusCode::CREATED, true)
    );
    assert_eq!(replay.body, done.body);
    // Another key with the spent token is another submission: refused.
    let other = send(&app, submit(&unique("k"))).await;
    assert_eq!(other.status, StatusCode::CONFLICT);
    assert_eq!(problem_code(&other), "duplicate-submission");
    assert_eq!(effects.count(), 3);
}

macro_rules! layer_suite {
    ($name:ident, $make:path) => {
        mod $name {
            use super::*;
            layer_suite!(@cases $make;
                fifty_concurrent_identical_requests_execute_once,
                a_different_body_under_the_same_key_is_refused,
                a_server_error_leaves_the_key_retryable,
                a_dropped_request_runs_until_its_timeout_frees_the_key,
                a_client_that_disconnects_gets_the_answer_on_retry,
                tenants_cannot_read_each_others_replays,
                a_handler_that_lost_its_lease_cannot_overwrite_the_new_owner,
                a_retry_keeps_its_key_and_token_until_the_answer_is_final,
            );
        }
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                super::$case($make().await).await;
            }
        )*
    };
}

#[cfg(feature = "memory")]
layer_suite!(memory, support::memory);
#[cfg(feature = "sqlite")]
layer_suite!(sqlite, support::sqlite);
#[cfg(feature = "postgres")]
layer_suite!(postgres, support::postgres);
#[cfg(feature = "mysql")]
layer_suite!(mysql, support::mysql);
#[cfg(feature = "redis")]
layer_suite!(redis, support::redis);
#[cfg(feature = "redis")]
layer_suite!(redis_cluster, support::redis_cluster);

/// Counts its executions and names the one that answered.
async fn record_event(State(effects): State<Effects>) -> String {
    let number = effects.executions.fetch_add(1, Ordering::SeqCst) + 1;
    format!("recorded by execution {number}")
}

/// A route whose caller has no key header (a relay of queue messages): the key is the body's
/// `event_id`, and the fingerprint only its `event_id` and `amount`, so a retry that changed the
/// relay's own `sent_at` is the same request. Which fields count is checked when the route is
/// built. Store-independent: on the memory store.
#[cfg(feature = "memory")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_and_the_fingerprint_can_come_from_named_body_fields() {
    use mideng::http::FingerprintParts;
    let records: Arc<dyn RecordStore> = Arc::new(mideng::store::memory::MemoryStore::new());
    let fields = FingerprintParts {
        body_fields: vec!["/event_id".to_owned(), "/amount".to_owned()],
        ..FingerprintParts::default()
    };
    let route = config(records.clone(), "events.record")
        .key_from_body("/event_id")
        .fingerprint(fields.clone())
        .build()
        .expect("valid config");
    let effects = Effects::default();
    let app = Router::new()
        .route(
            "/events",
            post(record_event).route_layer(IdempotencyLayer::new(route)),
        )
        .with_state(effects.clone());
    let tenant = unique("t");
    let event = |body: serde_json::Value, key: Option<&str>| {
        let mut request = Request::post("/events")
            .header(TENANT, tenant.as_str())
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request
            .body(Body::from(body.to_string()))
            .expect("valid request")
    };
    let id = unique("evt");
    let first = send(
        &app,
        event(
            serde_json::json!({"event_id": id, "amount": 5, "sent_at": 1}),
            None,
        ),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(!first.replayed);
    // The relay's retry, its own timestamp changed: the same request, replayed.
    let retry = send(
        &app,
        event(
            serde_json::json!({"sent_at": 2, "amount": 5, "event_id": id}),
            None,
        ),
    )
    .await;
    assert!(retry.replayed);
    assert_eq!(retry.body, first.body);
    assert_eq!(effects.count(), 1);
    // Another amount under the same event id: a reused key.
    let changed = send(
        &app,
        event(serde_json::json!({"event_id": id, "amount": 6}), None),
    )
    .await;
    assert_eq!(changed.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem_code(&changed), "idempotency-key-reused");
    // No event id: no key on a route that requires one; an event id that is no key: malformed.
    let keyless = send(&app, event(serde_json::json!({"amount": 5}), None)).await;
    assert_eq!(problem_code(&keyless), "idempotency-key-missing");
    let object = send(
        &app,
        event(
            serde_json::json!({"event_id": {"id": 1}, "amount": 5}),
            None,
        ),
    )
    .await;
    assert_eq!(problem_code(&object), "idempotency-key-malformed");
    // A member named twice in one object, at any depth (an escape spells the same name): which
    // one counts depends on the parser, so the layer and the handler could read two requests.
    // Refused before anything runs. The same name in two objects is no repetition.
    let raw = |body: String| {
        Request::post("/events")
            .header(TENANT, tenant.as_str())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .expect("valid request")
    };
    for body in [
        format!(
            r#"{{"event_id":"{id}","amount":5,"event_id":"{}"}}"#,
            unique("evt")
        ),
        format!(r#"{{"event_id":"{id}","amount":5,"meta":[{{"a":1,"\u0061":2}}]}}"#),
    ] {
        let ambiguous = send(&app, raw(body)).await;
        assert_eq!(ambiguous.status, StatusCode::BAD_REQUEST);
        assert_eq!(problem_code(&ambiguous), "body-ambiguous");
    }
    assert_eq!(effects.count(), 1);
    let nested = send(
        &app,
        raw(format!(
            r#"{{"event_id":"{id}","amount":5,"meta":{{"amount":7}}}}"#
        )),
    )
    .await;
    assert!(nested.replayed, "the first event, replayed");
    // A header, when there is one, is the key.
    let headed = send(
        &app,
        event(
            serde_json::json!({"event_id": id, "amount": 5}),
            Some(&unique("k")),
        ),
    )
    .await;
    assert!(!headed.replayed);
    assert_eq!(effects.count(), 2);
    // A pointer that is not one is refused when the route is built.
    assert!(
        config(records.clone(), "events.record")
            .key_from_body("event_id")
            .build()
            .is_err()
    );
    let broken = FingerprintParts {
        body_fields: vec!["/a~2b".to_owned()],
        ..FingerprintParts::default()
    };
    assert!(
        config(records, "events.record")
            .fingerprint(broken)
            .build()
            .is_err()
    );
}

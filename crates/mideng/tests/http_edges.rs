//! The layer's answers to bad input, failing handlers and the one-time token guard, and the
//! decisions it reports to metrics. These do not depend on the store, so they run on memory and
//! SQLite; the store-dependent behaviour is in `http_layer.rs` on every backend.

#![cfg(all(feature = "axum", feature = "memory", feature = "sqlite"))]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderName, Request, StatusCode, header};
use axum::routing::post;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use mideng::http::{
    IDEMPOTENT_REPLAYED, IdempotencyLayer, KeyRequirement, RouteConfig, RouteConfigBuilder, Tenant,
    TenantSource, TokenGuard, TokenUnavailable,
};
use mideng::store::memory::MemoryStore;
use mideng::token::{Consumption, IssueError, IssuedToken, Token, TokenStore};
use mideng::{Scope, StoreError};
use support::{race, unique};
use tower::ServiceExt;

#[derive(Clone, Default)]
struct Effects(Arc<AtomicUsize>);

impl Effects {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

async fn effect(State(effects): State<Effects>, body: String) -> (StatusCode, String) {
    let number = effects.0.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(30)).await;
    match body.as_str() {
        "panic" if number == 1 => panic!("handler bug on first execution"),
        "slow" if number == 1 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            (StatusCode::OK, "unreachable".to_owned())
        }
        "refuse" => (StatusCode::TOO_MANY_REQUESTS, "slow down".to_owned()),
        _ => (StatusCode::OK, format!("effect {number}")),
    }
}

fn app(config: RouteConfigBuilder, effects: Effects) -> Router {
    Router::new()
        .route(
            "/effect",
            post(effect).route_layer(IdempotencyLayer::new(config.build().expect("valid config"))),
        )
        .with_state(effects)
}

fn base(store: &MemoryStore) -> RouteConfigBuilder {
    RouteConfig::builder(Arc::new(store.clone()), "effects.apply")
        .tenant(TenantSource::Fixed("t1".to_owned()))
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (status, headers) = (response.status(), response.headers().clone());
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn post_with(headers: &[(&str, &str)], body: impl Into<Body>) -> Request<Body> {
    let mut builder = Request::post("/effect");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body.into()).expect("valid request")
}

fn code_of(body: &str) -> String {
    let problem: serde_json::Value = serde_json::from_str(body).expect("problem+json");
    problem["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn bad_keys_and_bodies_are_client_errors_and_run_nothing() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let limited = app(base(&store).body_limit(64), effects.clone());

    let (status, headers, body) = send(&limited, post_with(&[], "{}")).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::BAD_REQUEST, "idempotency-key-missing")
    );
    assert_eq!(headers[header::CONTENT_TYPE], "application/problem+json");

    for bad in ["", "has space", &"k".repeat(256)] {
        let (status, _, body) = send(&limited, post_with(&[("idempotency-key", bad)], "{}")).await;
        assert_eq!(
            (status, code_of(&body).as_str()),
            (StatusCode::BAD_REQUEST, "idempotency-key-malformed"),
            "{bad:?}"
        );
    }
    let (status, _, body) = send(
        &limited,
        post_with(&[("idempotency-key", "k1")], "x".repeat(65)),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large")
    );
    // The same key still works with a body within the limit: nothing was recorded.
    let (status, _, _) = send(&limited, post_with(&[("idempotency-key", "k1")], "{}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(effects.count(), 1);

    let extension_app = app(
        RouteConfig::builder(Arc::new(store.clone()), "effects.apply"),
        effects.clone(),
    );
    let (status, _, body) = send(
        &extension_app,
        post_with(&[("idempotency-key", "k2")], "{}"),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::UNAUTHORIZED, "tenant-missing")
    );
    let mut authenticated = post_with(&[("idempotency-key", "k2")], "{}");
    authenticated
        .extensions_mut()
        .insert(Tenant("t1".to_owned()));
    assert_eq!(send(&extension_app, authenticated).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_key_sent_twice_or_under_both_names_is_refused_and_runs_nothing() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let app = app(base(&store), effects.clone());
    let refused: [&[(&str, &str)]; 7] = [
        &[("idempotency-key", "k-1"), ("idempotency-key", "k-2")],
        &[("idempotency-key", "k-1"), ("idempotency-key", "k-1")],
        &[("x-idempotent-key", "k-1"), ("x-idempotent-key", "k-2")],
        &[("idempotency-key", "k-1"), ("x-idempotent-key", "k-2")],
        &[("idempotency-key", "k-1"), ("x-idempotent-key", "k-1")],
        &[("idempotency-key", "\"unbalanced")],
        &[("idempotency-key", "\"k-1\"trailing")],
    ];
    for headers in refused {
        let (status, _, body) = send(&app, post_with(headers, "{}")).await;
        assert_eq!(
            (status, code_of(&body).as_str()),
            (StatusCode::BAD_REQUEST, "idempotency-key-malformed"),
            "{headers:?}"
        );
    }
    assert_eq!(effects.count(), 0, "no refused request ran the handler");

    // An escaped quote is part of the key: `"a\"b"` names the key `a"b`, which a plain
    // `a"b` names too, so the second is a replay of the first.
    let (status, _, first) = send(&app, post_with(&[("idempotency-key", r#""a\"b""#)], "{}")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, headers, again) = send(&app, post_with(&[("idempotency-key", "a\"b")], "{}")).await;
    assert_eq!(headers[&IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again, first);
    assert_eq!(effects.count(), 1);
}

#[tokio::test]
async fn a_token_sent_twice_is_refused_and_consumes_nothing() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let tokens: Arc<dyn TokenStore> = Arc::new(store.clone());
    let app = app(
        base(&store).token_guard(TokenGuard::new(tokens.clone())),
        effects.clone(),
    );
    let scope = Scope::new("t1", "effects.apply").expect("scope");
    let first = tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    let second = tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    let (status, _, body) = send(
        &app,
        post_with(
            &[
                ("idempotency-key", "t-1"),
                ("idempotency-token", first.token.as_str()),
                ("idempotency-token", second.token.as_str()),
            ],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::BAD_REQUEST, "idempotency-token-malformed")
    );
    assert_eq!(effects.count(), 0);
    // Neither token was spent: each still works on its own.
    assert_eq!(
        tokens
            .consume_token(&scope, &first.token)
            .await
            .expect("consume"),
        Consumption::Consumed
    );
    assert_eq!(
        tokens
            .consume_token(&scope, &second.token)
            .await
            .expect("consume"),
        Consumption::Consumed
    );
}

/// The layer behind a real HTTP/1 server on port 0, for what only a socket shows.
async fn serve(app: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

#[tokio::test]
async fn a_body_announced_over_the_limit_is_refused_before_it_arrives() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (store, effects) = (MemoryStore::new(), Effects::default());
    let address = serve(app(base(&store), effects.clone())).await;
    let mut socket = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    // 20 MiB announced, one byte sent: the answer must not wait for the rest.
    socket
        .write_all(
            b"POST /effect HTTP/1.1\r\nHost: test\r\nIdempotency-Key: big-1\r\n\
              Content-Length: 20971520\r\n\r\nx",
        )
        .await
        .expect("send");
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let count = socket.read(&mut buffer).await.expect("read");
            answer.extend_from_slice(&buffer[..count]);
            if count == 0
                || answer.windows(4).any(|window| window == b"\r\n\r\n") && answer.ends_with(b"}")
            {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer while the body was still owed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(text.contains("\"code\":\"payload-too-large\""), "{text}");
    assert_eq!(effects.count(), 0);
}

#[tokio::test]
async fn an_optional_key_passes_keyless_requests_through() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let app = app(base(&store).key(KeyRequirement::Optional), effects.clone());
    assert_eq!(send(&app, post_with(&[], "{}")).await.0, StatusCode::OK);
    assert_eq!(send(&app, post_with(&[], "{}")).await.0, StatusCode::OK);
    assert_eq!(
        effects.count(),
        2,
        "without a key there is nothing to deduplicate on"
    );
    let (_, _, first) = send(&app, post_with(&[("x-idempotent-key", "k")], "{}")).await;
    let (_, headers, again) = send(&app, post_with(&[("idempotency-key", "\"k\"")], "{}")).await;
    assert_eq!(headers[&IDEMPOTENT_REPLAYED], "true");
    assert_eq!(again, first, "both header spellings name one key");
}

#[tokio::test]
async fn a_panic_or_a_timeout_frees_the_key_and_transient_refusals_are_not_stored() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let config = base(&store)
        .lease(Duration::from_secs(2))
        .handler_timeout(Duration::from_millis(300));
    let app = app(config, effects.clone());

    let (status, _, body) = send(&app, post_with(&[("idempotency-key", "p")], "panic")).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, "internal-error")
    );
    let (status, _, body) = send(&app, post_with(&[("idempotency-key", "p")], "panic")).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "effect 2"),
        "the key was freed after the panic"
    );

    let timing_out = self::app(
        base(&store)
            .lease(Duration::from_secs(2))
            .handler_timeout(Duration::from_millis(300)),
        Effects::default(),
    );
    let (status, headers, body) =
        send(&timing_out, post_with(&[("idempotency-key", "s")], "slow")).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "handler-timeout")
    );
    assert!(headers.contains_key(header::RETRY_AFTER));
    let (status, _, body) = send(&timing_out, post_with(&[("idempotency-key", "s")], "slow")).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "effect 2"),
        "the key was freed after the timeout"
    );

    let (status, _, _) = send(&app, post_with(&[("idempotency-key", "r")], "refuse")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, headers, _) = send(&app, post_with(&[("idempotency-key", "r")], "refuse")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !headers.contains_key(&IDEMPOTENT_REPLAYED),
        "a 429 is not an outcome to replay"
    );
}

#[tokio::test]
async fn a_route_may_let_duplicates_wait_for_the_first_answer() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let app = app(
        base(&store).wait_for_in_flight(Duration::from_secs(5)),
        effects.clone(),
    );
    let answers = race(20, |_| {
        let app = app.clone();
        async move { send(&app, post_with(&[("idempotency-key", "w")], "{}")).await }
    })
    .await;
    assert_eq!(effects.count(), 1);
    assert!(
        answers
            .iter()
            .all(|(status, _, body)| *status == StatusCode::OK && body == "effect 1"),
        "no 409s"
    );
    assert_eq!(
        answers
            .iter()
            .filter(|(_, headers, _)| headers.contains_key(&IDEMPOTENT_REPLAYED))
            .count(),
        19
    );
}

#[tokio::test]
async fn the_token_guard_stops_double_submits_but_lets_a_keyed_retry_replay() {
    let (store, effects) = (MemoryStore::new(), Effects::default());
    let tokens: Arc<dyn TokenStore> = Arc::new(store.clone());
    let app = app(
        base(&store).token_guard(TokenGuard::new(tokens.clone())),
        effects.clone(),
    );
    let scope = Scope::new("t1", "effects.apply").expect("scope");
    let issued = tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    let token = issued.token.as_str();

    let (status, _, body) = send(&app, post_with(&[("idempotency-key", "a")], "{}")).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::BAD_REQUEST, "idempotency-token-missing")
    );
    let (status, _, _) = send(
        &app,
        post_with(
            &[("idempotency-key", "a"), ("idempotency-token", token)],
            "{}",
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The client's retry (same key, same token) replays instead of failing as a duplicate.
    let (status, headers, _) = send(
        &app,
        post_with(
            &[("idempotency-key", "a"), ("idempotency-token", token)],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        (status, headers.contains_key(&IDEMPOTENT_REPLAYED)),
        (StatusCode::OK, true)
    );
    // A double click with a fresh key but the spent token is a duplicate submission.
    let (status, _, body) = send(
        &app,
        post_with(
            &[("idempotency-key", "b"), ("idempotency-token", token)],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::CONFLICT, "duplicate-submission")
    );
    let (status, _, body) = send(
        &app,
        post_with(
            &[
                ("idempotency-key", "c"),
                ("idempotency-token", "never-issued"),
            ],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::BAD_REQUEST, "idempotency-token-unknown")
    );
    assert_eq!(effects.count(), 1);
    // A refused token freed the key: the same key with a good token proceeds.
    let fresh = tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    let (status, _, _) = send(
        &app,
        post_with(
            &[
                ("idempotency-key", "b"),
                ("idempotency-token", fresh.token.as_str()),
            ],
            "{}",
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// A token store whose server is down: every call fails as unavailable.
struct DownTokenStore;

#[async_trait]
impl TokenStore for DownTokenStore {
    async fn issue_token(&self, _: &Scope, _: Duration) -> Result<IssuedToken, IssueError> {
        Err(StoreError::Unavailable("connection refused".to_owned()).into())
    }
    async fn consume_token_for(
        &self,
        _: &Scope,
        _: &Token,
        _: Option<&mideng::IdempotencyKey>,
    ) -> Result<Consumption, StoreError> {
        Err(StoreError::Unavailable("connection refused".to_owned()))
    }
    async fn purge_expired_tokens(&self, _: i64, _: u32) -> Result<u64, StoreError> {
        Err(StoreError::Unavailable("connection refused".to_owned()))
    }
}

fn counter(
    snapshot: &[(
        metrics_util::CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        DebugValue,
    )],
    decision: &str,
) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == mideng::http::observe::DECISIONS_COUNTER
                && key
                    .key()
                    .labels()
                    .any(|label| label.key() == "decision" && label.value() == decision)
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(count) => *count,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn token_store_outages_degrade_or_fail_closed_and_every_decision_is_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test process");

    let (store, effects) = (MemoryStore::new(), Effects::default());
    let down: Arc<dyn TokenStore> = Arc::new(DownTokenStore);
    let degrading = app(
        base(&store).token_guard(TokenGuard::new(down.clone())),
        effects.clone(),
    );
    let (status, _, _) = send(
        &degrading,
        post_with(
            &[("idempotency-key", "d"), ("idempotency-token", "tok")],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "degrade (the default): the key still guards the request"
    );

    let closed = app(
        base(&store)
            .token_guard(TokenGuard::new(down).when_unavailable(TokenUnavailable::FailClosed)),
        effects.clone(),
    );
    let (status, headers, body) = send(
        &closed,
        post_with(
            &[
                ("idempotency-key", unique("f").as_str()),
                ("idempotency-token", "tok"),
            ],
            "{}",
        ),
    )
    .await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "token-store-unavailable")
    );
    assert!(headers.contains_key(header::RETRY_AFTER));

    let (_, _, _) = send(
        &degrading,
        post_with(
            &[("idempotency-key", "d"), ("idempotency-token", "tok")],
            "{}",
        ),
    )
    .await;
    let (_, _, _) = send(
        &degrading,
        post_with(&[("idempotency-key", "d")], "{\"other\":1}"),
    )
    .await;

    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(counter(&snapshot, "token_degraded"), 1);
    assert_eq!(counter(&snapshot, "token_unavailable"), 1);
    assert_eq!(counter(&snapshot, "proceed"), 2);
    assert_eq!(counter(&snapshot, "stored"), 1);
    assert_eq!(
        counter(&snapshot, "abandoned"),
        0,
        "a token refusal counts as such, not as a failed handler"
    );
    assert_eq!(counter(&snapshot, "replay"), 1);
    assert_eq!(counter(&snapshot, "mismatch"), 1);
}

#[test]
fn configurations_that_could_run_a_handler_twice_are_refused() {
    let store = Arc::new(MemoryStore::new());
    let config = |lease: u64, timeout: u64| {
        RouteConfig::builder(store.clone(), "x")
            .lease(Duration::from_millis(lease))
            .handler_timeout(Duration::from_millis(timeout))
            .build()
    };
    assert!(config(1000, 900).is_ok());
    assert!(
        config(1000, 1000).is_err(),
        "a handler timeout must be shorter than the lease"
    );
    assert!(config(1000, 5000).is_err());
    assert!(
        RouteConfig::builder(store.clone(), "bad operation")
            .build()
            .is_err()
    );
    assert!(
        RouteConfig::builder(store.clone(), "x")
            .body_limit(0)
            .build()
            .is_err()
    );
    assert!(
        RouteConfig::builder(store.clone(), "x")
            .wait_for_in_flight(Duration::from_secs(600))
            .build()
            .is_err()
    );
}

#[tokio::test]
async fn the_layer_works_on_a_sql_store_too() {
    let store = support::sqlite_store().await;
    let effects = Effects::default();
    let config = RouteConfig::builder(Arc::new(store), "effects.apply")
        .tenant(TenantSource::Header(HeaderName::from_static("x-tenant")));
    let app = app(config, effects.clone());
    let first = send(
        &app,
        post_with(&[("idempotency-key", "k"), ("x-tenant", "t")], "{}"),
    )
    .await;
    let again = send(
        &app,
        post_with(&[("idempotency-key", "k"), ("x-tenant", "t")], "{}"),
    )
    .await;
    assert_eq!(first.2, again.2);
    assert_eq!(effects.count(), 1);
}

#[path = "http_edges/handler_decides.rs"]
mod handler_decides;

#[path = "http_edges/handler_begins.rs"]
mod handler_begins;

/// A record store whose `complete` fails as unavailable the next `failures` times.
struct FailingCompletes {
    inner: MemoryStore,
    failures: AtomicUsize,
}

#[async_trait]
impl mideng::RecordStore for FailingCompletes {
    async fn begin(
        &self,
        scope: &Scope,
        key: &mideng::IdempotencyKey,
        fingerprint: &mideng::Fingerprint,
        policy: &mideng::RecordPolicy,
    ) -> Result<mideng::Decision, StoreError> {
        self.inner.begin(scope, key, fingerprint, policy).await
    }
    async fn complete(
        &self,
        lease: &mideng::Lease,
        response: &mideng::StoredResponse,
    ) -> Result<(), StoreError> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Unavailable("connection reset".to_owned()));
        }
        self.inner.complete(lease, response).await
    }
    async fn abandon(&self, lease: &mideng::Lease) -> Result<(), StoreError> {
        self.inner.abandon(lease).await
    }
    async fn find_record(
        &self,
        scope: &Scope,
        key: &mideng::IdempotencyKey,
    ) -> Result<Option<mideng::Record>, StoreError> {
        self.inner.find_record(scope, key).await
    }
    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_expired(now_ms, limit).await
    }
}

#[tokio::test]
async fn an_answer_that_cannot_be_stored_is_withheld_and_the_retry_answers_for_good() {
    let store = Arc::new(FailingCompletes {
        inner: MemoryStore::new(),
        failures: AtomicUsize::new(2),
    });
    let effects = Effects::default();
    let config = || {
        RouteConfig::builder(store.clone(), "effects.apply")
            .tenant(TenantSource::Fixed("t1".to_owned()))
    };
    let app = app(config(), effects.clone());

    // A blip: storing fails twice, then succeeds; the answer is sent and replays.
    let (status, _, body) = send(&app, post_with(&[("idempotency-key", "blip")], "{}")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "effect 1"));
    let (_, headers, replay) = send(&app, post_with(&[("idempotency-key", "blip")], "{}")).await;
    assert_eq!(replay, "effect 1");
    assert_eq!(headers[IDEMPOTENT_REPLAYED], "true");

    // An outage through every retry: the effect happened, the answer is withheld (503), the
    // key is freed; the retry runs again and its answer is the one every replay gets.
    store.failures.store(100, Ordering::SeqCst);
    let (status, headers, body) =
        send(&app, post_with(&[("idempotency-key", "outage")], "{}")).await;
    assert_eq!(
        (status, code_of(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "response-not-stored")
    );
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(effects.count(), 2, "the work ran");
    store.failures.store(0, Ordering::SeqCst);
    let (status, _, retry) = send(&app, post_with(&[("idempotency-key", "outage")], "{}")).await;
    assert_eq!((status, retry.as_str()), (StatusCode::OK, "effect 3"));
    let (_, _, replay) = send(&app, post_with(&[("idempotency-key", "outage")], "{}")).await;
    assert_eq!(
        replay, retry,
        "byte for byte, and never the withheld answer"
    );
}

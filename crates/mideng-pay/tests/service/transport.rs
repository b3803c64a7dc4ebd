//! The HTTP edge of the real `Application` on port 0, through raw TCP clients: slow and idle
//! clients are cut off, excess connections wait, and every error answer is a problem document
//! (or, where hyper answers before the service runs, a bare status line and a closed socket).
//! The store does not matter here, so these run on SQLite only.

use std::net::SocketAddr;
use std::time::Duration;

use mideng_pay::api::api_key_hash;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::transport::TransportSettings;
use mideng_pay::workers::EventSettings;
use mideng_pay::{Application, Settings, TenantSeed};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::harness::{Backend, unique};

const API_KEY: &str = "transport-test-key-0123456789";

/// Every read in these tests ends by this, so that a connection left open fails the test
/// instead of hanging it.
const READ_LIMIT: Duration = Duration::from_secs(5);

struct Running {
    api: SocketAddr,
    metrics: SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn start(transport: TransportSettings) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let settings = Settings {
        database_url: Backend::Sqlite.database_url().into(),
        database_connections_max: 4,
        redis_url: None,
        redis_cluster: Vec::new(),
        redis_prefix: None,
        alipay: None,
        wechat: None,
        payments: PaymentSettings::default(),
        tenants: vec![TenantSeed {
            tenant_id: unique("tenant"),
            api_key_sha256: api_key_hash(API_KEY),
            publishable_key_sha256: None,
            webhooks: Vec::new(),
        }],
        reconcile: None,
        purge: None,
        bills: None,
        events: EventSettings::default(),
        transport,
        pages: mideng_pay::web::PageSettings::default(),
        clock: std::sync::Arc::new(mideng_pay::flows::SystemClock),
    };
    let application = Application::build(settings, listener)
        .await
        .expect("the service starts")
        .with_metrics_listener(metrics_listener);
    let api = application.address();
    let metrics = application.metrics_address().expect("metrics listener");
    let (stop, mut stopped) = watch::channel(false);
    tokio::spawn(application.run_until(async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }));
    Running {
        api,
        metrics,
        _stop: stop,
    }
}

/// What a raw client read before the server closed the connection, or `None` if the
/// connection was still open after [`READ_LIMIT`].
async fn read_until_closed(socket: &mut TcpStream) -> Option<String> {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 8192];
    let reading = async {
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(count) => received.extend_from_slice(&buffer[..count]),
            }
        }
    };
    tokio::time::timeout(READ_LIMIT, reading).await.ok()?;
    Some(String::from_utf8_lossy(&received).into_owned())
}

async fn connect_and_send(address: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut socket = TcpStream::connect(address).await.expect("connect");
    socket.write_all(bytes).await.expect("send");
    socket
}

/// The `code` of the problem document in a raw HTTP answer.
fn code_in(answer: &str) -> String {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let problem: Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("a problem document in {answer:?}"));
    problem["code"].as_str().unwrap_or_default().to_owned()
}

fn quick(transport: TransportSettings) -> TransportSettings {
    TransportSettings {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(500),
        ..transport
    }
}

pub(crate) async fn headers_never_finished_are_cut_off() {
    let running = start(quick(TransportSettings::default())).await;
    let mut socket =
        connect_and_send(running.api, b"GET /healthz HTTP/1.1\r\nHost: test\r\n").await;
    let answer = read_until_closed(&mut socket).await;
    assert!(
        answer.is_some(),
        "a client that never finishes its headers is disconnected"
    );
}

pub(crate) async fn an_idle_kept_alive_connection_is_closed() {
    let running = start(quick(TransportSettings::default())).await;
    let mut socket =
        connect_and_send(running.api, b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n").await;
    let answer = read_until_closed(&mut socket)
        .await
        .expect("an idle kept-alive connection is closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

pub(crate) async fn a_body_that_never_arrives_in_full_is_refused_with_408() {
    let running = start(quick(TransportSettings::default())).await;
    let request = format!(
        "POST /v1/orders HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    let mut socket = connect_and_send(running.api, request.as_bytes()).await;
    let answer = read_until_closed(&mut socket)
        .await
        .expect("a body that stops arriving ends the connection");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(code_in(&answer), "request-body-timeout");
}

pub(crate) async fn connections_over_the_cap_wait_for_a_free_one() {
    let running = start(TransportSettings {
        connections_max: 1,
        ..TransportSettings::default()
    })
    .await;
    // The first client takes the only place and holds it with unfinished headers.
    let holder = connect_and_send(running.api, b"GET /healthz HTTP/1.1\r\n").await;
    let mut waiting = connect_and_send(
        running.api,
        b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    )
    .await;
    let mut buffer = [0_u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), waiting.read(&mut buffer)).await;
    assert!(
        early.is_err(),
        "the second connection is not served while the first holds the only place"
    );
    drop(holder);
    let answer = read_until_closed(&mut waiting)
        .await
        .expect("served once the place is free");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

pub(crate) async fn every_refusal_at_the_edge_is_a_problem_document() {
    let running = start(TransportSettings::default()).await;
    let client = crate::harness::http_client();
    let base = format!("http://{}", running.api);
    let cases = [
        (reqwest::Method::GET, "/v1/orders/%FF", 400, "invalid-path"),
        (reqwest::Method::GET, "/no/such/route", 404, "not-found"),
        (
            reqwest::Method::DELETE,
            "/healthz",
            405,
            "method-not-allowed",
        ),
        (reqwest::Method::GET, "/metrics", 404, "not-found"),
    ];
    for (method, path, status, code) in cases {
        let answer = client
            .request(method.clone(), format!("{base}{path}"))
            .bearer_auth(API_KEY)
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), status, "{method} {path}");
        assert_eq!(
            answer.headers()["content-type"],
            "application/problem+json",
            "{method} {path}"
        );
        if status == 405 {
            assert!(answer.headers().contains_key("allow"));
        }
        let problem: Value = answer.json().await.expect("problem");
        assert_eq!(problem["code"], code, "{method} {path}");
    }

    // A notify route (no idempotency layer) refuses an announced oversized body at once, and
    // a chunked one once it passes the limit.
    let mut socket = connect_and_send(
        running.api,
        b"POST /v1/channels/alipay/notify HTTP/1.1\r\nHost: test\r\n\
          Content-Length: 20971520\r\n\r\nx",
    )
    .await;
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    let read = tokio::time::timeout(READ_LIMIT, async {
        while !received.ends_with(b"}") {
            let count = socket.read(&mut buffer).await.expect("read");
            if count == 0 {
                break;
            }
            received.extend_from_slice(&buffer[..count]);
        }
    })
    .await;
    assert!(read.is_ok(), "answered before the body arrived");
    let answer = String::from_utf8_lossy(&received);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(code_in(&answer), "payload-too-large");
    let chunk = "x".repeat(70_000);
    let chunked = format!(
        "POST /v1/channels/wechat/notify HTTP/1.1\r\nHost: test\r\n\
         Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let mut socket = connect_and_send(running.api, chunked.as_bytes()).await;
    let answer = read_until_closed(&mut socket).await.expect("answered");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(code_in(&answer), "payload-too-large");

    // A refusal before the body is read (here: no key) closes the connection and says so,
    // so that a client reusing it does not have its next request cut off.
    let body = "x".repeat(30_000);
    let unread = format!(
        "POST /v1/wallets/u-1/credit HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut socket = connect_and_send(running.api, unread.as_bytes()).await;
    let answer = read_until_closed(&mut socket).await.expect("closed");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("\r\nconnection: close\r\n"),
        "{answer}"
    );

    // What hyper answers itself, before the service runs: a head over the bound and a request
    // line that is not HTTP get a bare status line, and the connection is closed.
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: test\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let mut socket = connect_and_send(running.api, huge.as_bytes()).await;
    let answer = read_until_closed(&mut socket).await.expect("closed");
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let mut socket = connect_and_send(running.api, b"NOT HTTP AT ALL\r\n\r\n").await;
    let answer = read_until_closed(&mut socket).await.expect("closed");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

pub(crate) async fn metrics_are_served_on_their_own_listener() {
    let running = start(TransportSettings::default()).await;
    let client = crate::harness::http_client();
    // A refusal the layer counts, so that there is something to export.
    let refused = client
        .post(format!("http://{}/v1/wallets/u-1/deduct", running.api))
        .bearer_auth(API_KEY)
        .json(&serde_json::json!({"order_id": "o-1", "amount": 1}))
        .send()
        .await
        .expect("answer");
    assert_eq!(refused.status().as_u16(), 400);
    let scraped = client
        .get(format!("http://{}/metrics", running.metrics))
        .send()
        .await
        .expect("answer");
    assert_eq!(scraped.status().as_u16(), 200);
    assert!(
        scraped.headers()["content-type"]
            .to_str()
            .expect("text")
            .starts_with("text/plain"),
    );
    let text = scraped.text().await.expect("text");
    assert!(
        text.contains("mideng_idempotency_decisions_total"),
        "{text}"
    );
}

//! A tenant's webhook URL must never reach into our network: private and local targets are
//! refused at registration, and one already stored (written before the rule, or by hand) is
//! never connected to and fails like a closed port. The internal service is a loopback
//! listener the test runs, which counts every connection it is sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use mideng_pay::workers::webhooks::WebhookSettings;

use crate::harness::{Backend, Service, fast_webhooks};
use crate::webhooks::{deliveries_until, paid_order, until};

/// A loopback listener that counts the TCP connections it accepts and answers each request
/// 204: the internal service a tenant's URL must never reach.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // The request is small: one read takes it, bounded so that no task lingers.
                let mut request = [0_u8; 8192];
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), stream.read(&mut request)).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (port, accepted)
}

/// A loopback port where nothing listens.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("address").port()
}

/// The spellings of loopback that a check of the URL's text let through: IPv4-mapped forms,
/// `0` (0.0.0.0, which Linux connects to this host), a shortened IPv4 and the fully qualified
/// `localhost.`.
fn loopback_spellings(port: u16) -> Vec<String> {
    [
        "[::ffff:127.0.0.1]",
        "[::ffff:0.0.0.0]",
        "0",
        "127.1",
        "localhost.",
    ]
    .iter()
    .map(|host| format!("http://{host}:{port}/"))
    .collect()
}

/// A name that the dispatcher's pinned hosts resolve to loopback, as a hostile DNS answer or
/// an /etc/hosts entry would.
const PINNED_NAME: &str = "merchant-hooks.example";

/// Registration refuses every spelling of loopback with `private-target`, nothing connected to.
pub(crate) async fn private_targets_are_refused_at_registration(backend: Backend) {
    let (port, accepted) = counting_listener().await;
    let service = Service::start_guarded(backend, fast_webhooks()).await;
    for url in loopback_spellings(port) {
        let refused = service
            .post(
                "/v1/webhook-endpoints",
                json!({"url": url, "events": ["payment.succeeded"]}),
                &[],
            )
            .await;
        assert_eq!(refused.status, 422, "{url}: {}", refused.json());
        assert_eq!(refused.code(), "private-target", "{url}");
    }
    let malformed = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": "ftp://merchant.example/h", "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(malformed.code(), "invalid-request");
    // Nor can an endpoint be moved there. (A name is not resolved at registration; the
    // endpoint is deleted before any event could make a delivery to it.)
    let public = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": "https://merchant.example/h", "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(public.status, 201, "{}", public.json());
    let path = format!(
        "/v1/webhook-endpoints/{}",
        public.json()["endpoint_id"].as_str().expect("id")
    );
    for url in loopback_spellings(port) {
        let refused = service
            .send(
                reqwest::Method::PATCH,
                &path,
                Some(serde_json::to_vec(&json!({"url": url})).expect("json")),
                &[],
            )
            .await;
        assert_eq!(refused.status, 422, "{url}: {}", refused.json());
        assert_eq!(refused.code(), "private-target", "{url}");
    }
    assert_eq!(
        service.get(&path).await.json()["url"],
        "https://merchant.example/h"
    );
    let deleted = service
        .send(reqwest::Method::DELETE, &path, None, &[])
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

/// Endpoints stored without the registration check (as rows written before it) in every
/// spelling of loopback, and a name the dispatcher's pinned hosts resolve to loopback (which
/// registration cannot know of), get deliveries that never reach the listener; each attempt
/// records what an endpoint on a closed loopback port records, "connection refused" and no
/// status, so the history tells a tenant nothing of what listens where.
pub(crate) async fn stored_private_targets_are_never_connected_to_and_fail_like_a_closed_port(
    backend: Backend,
) {
    let (port, accepted) = counting_listener().await;
    let pinned = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let guarded = Service::start_guarded(
        backend,
        WebhookSettings {
            hosts: vec![(PINNED_NAME.to_owned(), pinned)],
            ..fast_webhooks()
        },
    )
    .await;
    let events = ["payment.succeeded".to_owned()];
    let mut urls = loopback_spellings(port);
    for url in &urls {
        let endpoint_id = mideng_pay::domain::ids::new_number('E', mideng::clock::now_ms());
        guarded
            .state
            .ports
            .store
            .webhooks
            .register(&mideng_pay::store::webhooks::NewEndpoint {
                tenant_id: &guarded.tenant,
                url,
                events: &events,
                secret: &mideng_pay::domain::webhook::generate_secret(),
                endpoint_id: &endpoint_id,
            })
            .await
            .expect("stored");
    }
    // A name passes registration (it is not resolved there); the dispatcher judges its answer.
    let named = format!("http://{PINNED_NAME}:{port}/");
    let registered = guarded
        .post(
            "/v1/webhook-endpoints",
            json!({"url": named, "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());
    urls.push(named);

    paid_order(&guarded).await;
    let deliveries = deliveries_until(&guarded, |deliveries| {
        deliveries.len() == urls.len()
            && deliveries.iter().all(|delivery| {
                delivery["attempts"]
                    .as_array()
                    .is_some_and(|attempts| !attempts.is_empty())
            })
    })
    .await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "no attempt reached the listener: {deliveries:#?}"
    );
    let refused: Vec<(Value, Value)> = deliveries
        .iter()
        .flat_map(|delivery| delivery["attempts"].as_array().cloned().unwrap_or_default())
        .map(|attempt| (attempt["error"].clone(), attempt["status_code"].clone()))
        .collect();

    // The same service with private targets allowed: a closed loopback port for comparison,
    // and one of the spellings above to show the listener counts what reaches it.
    let open = Service::start(backend).await;
    let closed = format!("http://127.0.0.1:{}/", closed_port().await);
    for url in [closed.clone(), format!("http://127.1:{port}/")] {
        let registered = open
            .post(
                "/v1/webhook-endpoints",
                json!({"url": url, "events": ["payment.succeeded"]}),
                &[],
            )
            .await;
        assert_eq!(registered.status, 201, "{url}: {}", registered.json());
    }
    let closed_id = open
        .get("/v1/webhook-endpoints")
        .await
        .json()
        .as_array()
        .expect("list")
        .iter()
        .find(|endpoint| endpoint["url"] == closed.as_str())
        .expect("the closed port's endpoint")["endpoint_id"]
        .clone();
    paid_order(&open).await;
    let compared = deliveries_until(&open, |deliveries| {
        deliveries.iter().any(|delivery| {
            delivery["endpoint_id"] == closed_id
                && delivery["attempts"]
                    .as_array()
                    .is_some_and(|attempts| !attempts.is_empty())
        })
    })
    .await;
    until("the allowed spelling reaches the listener", || {
        accepted.load(Ordering::SeqCst) > 0
    })
    .await;
    let closed_attempt = compared
        .iter()
        .find(|delivery| delivery["endpoint_id"] == closed_id)
        .and_then(|delivery| delivery["attempts"][0].as_object().cloned())
        .expect("an attempt on the closed port");
    let expected = (
        closed_attempt["error"].clone(),
        closed_attempt["status_code"].clone(),
    );
    assert_eq!(expected, (json!("connection refused"), Value::Null));
    for attempt in &refused {
        assert_eq!(attempt, &expected, "{deliveries:#?}");
    }
}

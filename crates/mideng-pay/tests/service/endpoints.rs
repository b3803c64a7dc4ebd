//! A webhook endpoint's life after registration, end to end: its secret rotated under one
//! `Idempotency-Key` by many clients at once (one new secret), messages signed by both secrets
//! during the overlap and by the new one alone after it (each checked with the Standard
//! Webhooks reference library), disabled (deliveries wait) and enabled again (they go out),
//! moved to another URL, and deleted with its deliveries.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Answer, Backend, Service, race, unique};

/// Every message the receiver got: its path, `webhook-id`, headers and body.
type Inbox = Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>;

async fn receiver(inbox: Inbox) -> String {
    async fn take(path: &'static str, inbox: Inbox, headers: HeaderMap, body: Bytes) -> StatusCode {
        inbox
            .lock()
            .expect("lock")
            .push((path.to_owned(), headers, body));
        StatusCode::NO_CONTENT
    }
    let (first, second) = (inbox.clone(), inbox);
    let app = axum::Router::new()
        .route(
            "/first",
            post(move |headers, body| take("/first", first.clone(), headers, body)),
        )
        .route(
            "/second",
            post(move |headers, body| take("/second", second.clone(), headers, body)),
        );
    crate::harness::serve_on_loopback(app).await
}

/// Whether the reference library verifies `message` under `secret`.
fn verifies(secret: &str, (_, headers, body): &(String, HeaderMap, Bytes)) -> bool {
    standardwebhooks::Webhook::new(secret)
        .is_ok_and(|webhook| webhook.verify(body, headers).is_ok())
}

/// Pays an order of `amount` and waits for the receiver's message about its payment.
async fn paid_and_received(
    service: &Service,
    inbox: &Inbox,
    amount: i64,
) -> (String, (String, HeaderMap, Bytes)) {
    let (_, number) = service.paid_payment("u-endpoint", "alipay", amount).await;
    let message = message_about(inbox, &number, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no message about {number}"));
    (number, message)
}

async fn message_about(
    inbox: &Inbox,
    payment_no: &str,
    within: Duration,
) -> Option<(String, HeaderMap, Bytes)> {
    let started = Instant::now();
    loop {
        let found = inbox
            .lock()
            .expect("lock")
            .iter()
            .find(|(_, _, body)| {
                serde_json::from_slice::<Value>(body)
                    .is_ok_and(|body| body["data"]["payment_no"] == payment_no)
            })
            .cloned();
        if found.is_some() || started.elapsed() > within {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn send(service: &Service, method: reqwest::Method, path: &str, body: Value) -> Answer {
    service
        .send(
            method,
            path,
            Some(serde_json::to_vec(&body).expect("json")),
            &[],
        )
        .await
}

pub(crate) async fn an_endpoint_is_rotated_disabled_moved_and_deleted(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let inbox = Inbox::default();
    let base = receiver(inbox.clone()).await;
    let registered = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{base}/first"), "events": ["payment.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json());
    let endpoint = registered.json();
    let id = endpoint["endpoint_id"].as_str().expect("id").to_owned();
    let path = format!("/v1/webhook-endpoints/{id}");
    let first_secret = endpoint["secret"].as_str().expect("secret").to_owned();

    // A rotation needs its key; sixteen clients sending one key make one new secret.
    let keyless = service
        .post(&format!("{path}/rotate-secret"), json!({}), &[])
        .await;
    assert_eq!(keyless.status, 400, "{}", keyless.json());
    let key = unique("rotate");
    let answers = race(16, |_| {
        let (service, path, key) = (service.clone(), path.clone(), key.clone());
        async move {
            service
                .post(
                    &format!("{path}/rotate-secret"),
                    json!({}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let secrets: std::collections::BTreeSet<_> = answers
        .iter()
        .filter(|answer| answer.status == 200)
        .map(|answer| answer.json()["secret"].as_str().expect("secret").to_owned())
        .collect();
    assert!(
        answers
            .iter()
            .all(|answer| answer.status == 200 || answer.code() == "in-progress"),
        "{answers:?}"
    );
    assert_eq!(secrets.len(), 1, "one rotation: {secrets:?}");
    let second_secret = secrets.into_iter().next().expect("a secret");
    assert_ne!(second_secret, first_secret);
    let shown = service.get(&path).await.json();
    assert_eq!(shown["secret"], second_secret.as_str(), "{shown}");
    assert!(shown["previous_secret_expires_at"].is_string(), "{shown}");

    // During the overlap a message carries both signatures: either secret verifies it.
    let (_, message) = paid_and_received(&service, &inbox, 300).await;
    let signature = message.1["webhook-signature"].to_str().expect("ascii");
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    assert!(verifies(&first_secret, &message));
    assert!(verifies(&second_secret, &message));

    // A rotation without overlap: the new secret alone signs.
    let rotated = service
        .post(
            &format!("{path}/rotate-secret"),
            json!({"previous_secret_valid_secs": 0}),
            &[("Idempotency-Key", &unique("rotate"))],
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.json());
    let third_secret = rotated.json()["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert!(rotated.json().get("previous_secret_expires_at").is_none());
    let (_, message) = paid_and_received(&service, &inbox, 400).await;
    assert!(verifies(&third_secret, &message));
    assert!(!verifies(&second_secret, &message));
    assert!(!verifies(&first_secret, &message));
    let too_long = service
        .post(
            &format!("{path}/rotate-secret"),
            json!({"previous_secret_valid_secs": 604_801}),
            &[("Idempotency-Key", &unique("rotate"))],
        )
        .await;
    assert_eq!(too_long.status, 422, "{}", too_long.json());

    // Disabled: the next event's delivery waits, unattempted; enabled, it goes out.
    let disabled = send(
        &service,
        reqwest::Method::PATCH,
        &path,
        json!({"status": "DISABLED"}),
    )
    .await;
    assert_eq!(disabled.status, 200, "{}", disabled.json());
    assert_eq!(disabled.json()["status"], "DISABLED");
    let (_, waiting) = service.paid_payment("u-endpoint", "alipay", 500).await;
    assert!(
        message_about(&inbox, &waiting, Duration::from_secs(2))
            .await
            .is_none(),
        "a disabled endpoint was sent a message"
    );
    let deliveries = service.get("/v1/webhook-deliveries").await.json();
    let pending = deliveries["data"]
        .as_array()
        .expect("list")
        .iter()
        .find(|delivery| delivery["endpoint_id"] == id.as_str() && delivery["status"] == "PENDING")
        .cloned()
        .unwrap_or_else(|| panic!("no waiting delivery: {deliveries:#}"));
    assert_eq!(pending["attempts"], json!([]), "{pending:#}");
    let enabled = send(
        &service,
        reqwest::Method::PATCH,
        &path,
        json!({"status": "ENABLED", "url": format!("{base}/second")}),
    )
    .await;
    assert_eq!(enabled.status, 200, "{}", enabled.json());
    let (moved_to, _, _) = message_about(&inbox, &waiting, Duration::from_secs(30))
        .await
        .expect("the waiting delivery went out once enabled");
    assert_eq!(moved_to, "/second", "sent to the endpoint's new URL");

    // Refused changes change nothing (a private target is refused as at registration:
    // `webhook_targets`; this service lets tenants name loopback, for its receiver).
    let other = service
        .post(
            "/v1/webhook-endpoints",
            json!({"url": format!("{base}/first"), "events": ["refund.succeeded"]}),
            &[],
        )
        .await;
    assert_eq!(other.status, 201, "{}", other.json());
    for (change, status, code) in [
        (
            json!({"url": format!("{base}/first")}),
            409,
            "endpoint-url-taken",
        ),
        (
            json!({"events": ["payment.created"]}),
            422,
            "invalid-request",
        ),
        (json!({"status": "PAUSED"}), 422, "invalid-request"),
        (json!({"secret": "whsec_AAAA"}), 422, "invalid-request"),
    ] {
        let refused = send(&service, reqwest::Method::PATCH, &path, change.clone()).await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (status, code),
            "{change}"
        );
    }
    let unchanged = service.get(&path).await.json();
    assert_eq!(unchanged["url"], format!("{base}/second"), "{unchanged}");
    assert_eq!(unchanged["status"], "ENABLED");
    assert_eq!(unchanged["secret"], third_secret.as_str());

    // Deleted: gone with its deliveries; a second delete finds nothing.
    let deleted = service
        .send(reqwest::Method::DELETE, &path, None, &[])
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(service.get(&path).await.status, 404);
    let again = service
        .send(reqwest::Method::DELETE, &path, None, &[])
        .await;
    assert_eq!(again.status, 404);
    let deliveries = service.get("/v1/webhook-deliveries").await.json();
    assert!(
        deliveries["data"]
            .as_array()
            .expect("list")
            .iter()
            .all(|delivery| delivery["endpoint_id"] != id.as_str()),
        "{deliveries:#}"
    );
    let listed = service.get("/v1/webhook-endpoints").await.json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");
    // Another tenant's endpoint id is no endpoint of this tenant.
    let stranger = Service::beside(&service, false).await;
    let other_id = other.json()["endpoint_id"].as_str().expect("id").to_owned();
    assert_eq!(
        stranger
            .get(&format!("/v1/webhook-endpoints/{other_id}"))
            .await
            .status,
        404
    );
    assert_eq!(
        stranger
            .send(
                reqwest::Method::DELETE,
                &format!("/v1/webhook-endpoints/{other_id}"),
                None,
                &[]
            )
            .await
            .status,
        404
    );
}

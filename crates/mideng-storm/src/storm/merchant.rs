//! The merchant: a webhook receiver in the storm's process, registered for every tenant at the
//! start of a run. It verifies every message's signature with the endpoint's secret, fails
//! some on a schedule (a 500, or an answer slower than the dispatcher waits) so that the
//! service retries them, and writes down what each `webhook-id` said: its copies, and the change
//! it is about (its tenant, type and payment or refund). It judges nothing: the audit checks
//! that every event reached it, and that no change reached it under two ids — a receiver that
//! deduplicates by `webhook-id`, as the specification asks, would apply such a change twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use mideng_pay::domain::webhook::{EVENT_TYPES, secret_key, signature};
use serde_json::{Value, json};

use super::clients::Shared;
use crate::audit::{ReceivedWebhook, WebhookFacts};

/// Every this-many-th message is answered 500.
const FAIL_EVERY: u64 = 7;
/// Every this-many-th message is answered after the dispatcher's timeout.
const SLOW_EVERY: u64 = 11;
/// Copies of one message that may be failed at most. The schedule gives up on an endpoint
/// that fails eight in a row and disables it (no later event gets a delivery); with failures
/// on every 7th and 11th call alone, one message of a few hundred thousand fails eight times by
/// chance, which a million-request storm met.
const FAILED_COPIES_MAX: u32 = 3;
/// How long a slow answer takes: past the storm deployment's one-second attempt timeout.
const SLOW_ANSWER: Duration = Duration::from_millis(1_500);

#[derive(Default)]
struct Received {
    /// Each tenant's signing key.
    keys: Mutex<HashMap<String, Vec<u8>>>,
    /// Per `webhook-id`: what it was received as.
    seen: Mutex<BTreeMap<String, ReceivedWebhook>>,
    calls: AtomicU64,
    bad_signatures: AtomicU64,
}

/// The merchant's receiver, listening on loopback for the whole run.
pub(super) struct Merchant {
    base: String,
    received: Arc<Received>,
}

impl Merchant {
    /// Listens on a loopback port.
    pub(super) async fn start() -> anyhow::Result<Self> {
        let received = Arc::new(Received::default());
        let app = axum::Router::new()
            .route("/hooks/{tenant}", axum::routing::post(receive))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base, received })
    }

    /// Where it listens: the deployment allows it as a webhook target.
    pub(super) fn address(&self) -> anyhow::Result<std::net::SocketAddr> {
        let address = self.base.trim_start_matches("http://").parse()?;
        Ok(address)
    }

    /// Registers an endpoint for every event type on every tenant, and keeps its secret.
    pub(super) async fn register(&self, shared: &Shared) -> anyhow::Result<()> {
        for (index, tenant) in shared.tenants.iter().enumerate() {
            let answer = shared
                .send(
                    shared.setup_instance(),
                    index,
                    reqwest::Method::POST,
                    "/v1/webhook-endpoints",
                    Some(&json!({
                        "url": format!("{}/hooks/{}", self.base, tenant.id),
                        "events": EVENT_TYPES,
                    })),
                    &[],
                    Duration::from_secs(10),
                )
                .await
                .context("registering the merchant's endpoint")?;
            anyhow::ensure!(
                matches!(answer.status, 200 | 201),
                "registering the merchant's endpoint: {}",
                answer.status
            );
            let body: Value = answer.json();
            let key = body["secret"]
                .as_str()
                .and_then(secret_key)
                .context("the endpoint's secret")?;
            self.received
                .keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tenant.id.clone(), key);
        }
        Ok(())
    }

    /// What it received so far.
    pub(super) fn facts(&self) -> WebhookFacts {
        WebhookFacts {
            received: self
                .received
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            bad_signatures: self.received.bad_signatures.load(Ordering::Relaxed),
            merchant_base: format!("{}/hooks/", self.base),
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

async fn receive(
    State(received): State<Arc<Received>>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let key = received
        .keys
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&tenant)
        .cloned();
    let (Some(key), Some(id), Some(timestamp), Some(signatures)) = (
        key,
        header(&headers, "webhook-id"),
        header(&headers, "webhook-timestamp").and_then(|text| text.parse::<i64>().ok()),
        header(&headers, "webhook-signature"),
    ) else {
        received.bad_signatures.fetch_add(1, Ordering::Relaxed);
        return StatusCode::BAD_REQUEST;
    };
    let expected = signature(&key, id, timestamp, &body);
    if !signatures.split(' ').any(|candidate| candidate == expected) {
        received.bad_signatures.fetch_add(1, Ordering::Relaxed);
        return StatusCode::UNAUTHORIZED;
    }
    let call = received.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let change = change_of(&tenant, &body);
    let copies = {
        let mut seen = received.seen.lock().unwrap_or_else(|e| e.into_inner());
        let entry = seen.entry(id.to_owned()).or_default();
        entry.copies += 1;
        // The first copy's change stands; a later copy about another change is named too.
        if entry.change.is_empty() {
            entry.change = change;
        } else if entry.change != change {
            entry.changes_differ = true;
        }
        entry.copies
    };
    // A flaky receiver, not a dead one: a message's later copies are answered at once.
    let may_fail = copies <= FAILED_COPIES_MAX;
    if may_fail && call % FAIL_EVERY == 0 {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    if may_fail && call % SLOW_EVERY == 0 {
        tokio::time::sleep(SLOW_ANSWER).await;
    }
    StatusCode::NO_CONTENT
}

/// The change a message is about: its tenant, its type, and the refund or payment it names
/// (`?` where the body does not say).
fn change_of(tenant: &str, body: &[u8]) -> String {
    let message: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let kind = message["type"].as_str().unwrap_or("?");
    let subject = message["data"]["refund_no"]
        .as_str()
        .or_else(|| message["data"]["payment_no"].as_str())
        .unwrap_or("?");
    format!("{tenant} {kind} {subject}")
}

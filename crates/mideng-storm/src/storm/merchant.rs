//! The merchant: a webhook receiver in the storm's process, registered for every tenant at the
//! start of a run. It verifies every message's signature with the endpoint's secret, fails
//! some on a schedule (a 500, or an answer slower than the dispatcher waits) so that the
//! service retries them, and applies each `webhook-id` once — the deduplication the
//! specification asks of receivers. The audit then checks that every event reached it and was
//! applied once.

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
use crate::audit::WebhookFacts;

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
    /// Per `webhook-id`: copies with a valid signature, and times applied.
    seen: Mutex<BTreeMap<String, (u32, u32)>>,
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
    let copies = {
        let mut seen = received.seen.lock().unwrap_or_else(|e| e.into_inner());
        let entry = seen.entry(id.to_owned()).or_default();
        entry.0 += 1;
        entry.0
    };
    // A flaky receiver, not a dead one: a message's later copies are answered at once.
    let may_fail = copies <= FAILED_COPIES_MAX;
    if may_fail && call % FAIL_EVERY == 0 {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    if may_fail && call % SLOW_EVERY == 0 {
        tokio::time::sleep(SLOW_ANSWER).await;
    }
    // Applied once per webhook-id, whatever the copies: the receiver's own dedup. A slow
    // answer is applied too, though the dispatcher gave up on it and will send it again.
    let mut seen = received.seen.lock().unwrap_or_else(|e| e.into_inner());
    let entry = seen.entry(id.to_owned()).or_default();
    if entry.1 == 0 {
        entry.1 = 1;
    }
    StatusCode::NO_CONTENT
}

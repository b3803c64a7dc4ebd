//! The attacker at the doors that are not notifies: what the service fetches on a tenant's word
//! and what a key read off a checkout page opens. Runs beside the notify attacker, for a
//! deployment the storm started (it needs the tenants' publishable keys and listeners of its
//! own that the deployment was told of).
//!
//! **Probes** (one per round, in turn):
//! - *private target*: a tenant registers a webhook endpoint at an address that routes to this
//!   machine's loopback, in one of its many spellings (`127.0.0.1`, `[::ffff:127.0.0.1]`,
//!   `[::ffff:0.0.0.0]`, `0`, `127.1`, `2130706433`, `0x7f.1`, `localhost`, `localhost.`),
//!   pointed at the **canary**, a listener of the storm that no delivery may ever reach. Each
//!   must be refused 422 `private-target`; and the canary must accept no connection in the whole
//!   run, which it would if any registration slipped through;
//! - *page key*: the tenant's publishable key, the one a checkout page shows every visitor,
//!   on a route only the secret key opens (a victim's payment read, closed or refunded; an
//!   endpoint registered; deliveries listed; the hot wallet credited or read). Each must be
//!   403 `key-not-allowed`;
//! - the page's own moves (**the server prices, the page pays**; see [`pages`]): *price from the
//!   page* (an order of 1 fen granting 1000 made with the publishable key), *order-id
//!   squatting* (the publishable key creating an order under an id the merchant uses, has
//!   used or is about to use), *replay across key kinds* (a page reusing an `Idempotency-Key`
//!   of the merchant's server, and the other way) and *token exhaustion* (a page's burst of
//!   tokens for its order, then the merchant's server's own token);
//! - *stalled endpoint* (once, at the start): the first tenant registers an endpoint at the
//!   **stall**, a listener that accepts every connection and never answers for as long as the
//!   workload runs. The dispatcher must keep at most its per-endpoint limit of attempts open
//!   there (per instance) while every other endpoint's deliveries go on; the audit's webhook
//!   invariants check the latter. When the workload ends the endpoint recovers (it answers
//!   204), so that quiescence does not wait on the attacker's backlog.
//!
//! Only loopback is ever connected to: the canary and the stall listen on 127.0.0.1, and every
//! spelling above routes there. Any address elsewhere is judged by the service's pure rule in
//! its own tests, never tried here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::AttackCounts;
use crate::storm::{Shared, WorkloadEnd};

mod pages;

/// How long one probe may wait for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read from a stalled connection at a time (the request is counted, never parsed).
const STALL_READ_BYTES: usize = 4096;
/// How often a held connection looks whether the stall has been released.
const STALL_POLL: Duration = Duration::from_millis(100);
/// What the stall answers once released: a bare acknowledgement.
const RECOVERED: &[u8] =
    b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// What the boundary attacker tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BoundaryKind {
    /// A webhook endpoint at an address routing to loopback.
    PrivateTarget,
    /// The publishable key on a secret-only route.
    PageKey,
    /// The publishable key making an order: a price set by the page.
    PriceFromPage,
    /// The publishable key making an order under an id the merchant's server uses.
    OrderIdSquatting,
    /// A page's `Idempotency-Key` that the merchant's server used, and the other way.
    ReplayAcrossKeys,
    /// A page's burst of tokens for its order.
    TokenExhaustion,
}

impl BoundaryKind {
    /// Every kind, in the order the rounds take them.
    pub const EVERY: [BoundaryKind; 6] = [
        BoundaryKind::PrivateTarget,
        BoundaryKind::PageKey,
        BoundaryKind::PriceFromPage,
        BoundaryKind::OrderIdSquatting,
        BoundaryKind::ReplayAcrossKeys,
        BoundaryKind::TokenExhaustion,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            BoundaryKind::PrivateTarget => "private target",
            BoundaryKind::PageKey => "page key",
            BoundaryKind::PriceFromPage => "price from the page",
            BoundaryKind::OrderIdSquatting => "order-id squatting",
            BoundaryKind::ReplayAcrossKeys => "replay across key kinds",
            BoundaryKind::TokenExhaustion => "token exhaustion",
        }
    }

    /// The answer that refuses its one request, for the kinds judged on one answer: status and
    /// problem code.
    fn refusal(self) -> (u16, &'static str) {
        match self {
            BoundaryKind::PrivateTarget => (422, "private-target"),
            BoundaryKind::PageKey
            | BoundaryKind::PriceFromPage
            | BoundaryKind::OrderIdSquatting => (403, "key-not-allowed"),
            // The page's key on the merchant's order.
            BoundaryKind::ReplayAcrossKeys => (404, "not-found"),
            BoundaryKind::TokenExhaustion => (429, "too-many-tokens"),
        }
    }

    /// What holds it, for the report.
    fn stopped_by(self) -> &'static str {
        match self {
            BoundaryKind::ReplayAcrossKeys => "a page's own key scope",
            BoundaryKind::TokenExhaustion => "too-many-tokens, rate-limited",
            kind => kind.refusal().1,
        }
    }
}

/// What one probe came to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Held: refused with its expected answer (a page paying its own order under a key of the
    /// merchant's: answered for that order only).
    Held,
    /// Neither: no answer, a 5xx, or an answer that tells nothing either way (a fault's).
    Unanswered,
    /// Crossed: the status the probe's own request was answered with when that crossed it
    /// (`None`: a check after it found the breach), and how.
    Crossed { status: Option<u16>, how: String },
}

impl Outcome {
    /// One answer against the one refusal expected: a 5xx is no breach (the storm's own
    /// accounting judges it); anything else is.
    fn of_refusal((status, code): (u16, &str), answer: Option<&(u16, String)>) -> Self {
        match answer {
            None => Outcome::Unanswered,
            Some((got, got_code)) if *got == status && got_code == code => Outcome::Held,
            Some((got, _)) if *got >= 500 => Outcome::Unanswered,
            Some((got, got_code)) => Outcome::Crossed {
                status: Some(*got),
                how: format!("was answered {got} {got_code}, not {status} {code}"),
            },
        }
    }
}

/// What the canary and the stall saw, shared between their accept loops and the log.
#[derive(Debug, Default)]
pub(super) struct Listened {
    canary_connections: AtomicU64,
    stall_requests: AtomicU64,
    stall_open: AtomicU64,
    stall_open_max: AtomicU64,
    /// The workload ended: the stall answers.
    stall_released: AtomicBool,
}

/// The storm's listeners for the boundary probes, started before the deployment so that the
/// stall's address can be among the deployment's allowed webhook targets (the canary's never
/// is).
#[derive(Clone, Debug)]
pub struct BoundaryTargets {
    canary: SocketAddr,
    stall: SocketAddr,
    listened: Arc<Listened>,
}

impl BoundaryTargets {
    /// Binds the canary and the stall on loopback and serves them until the process ends.
    pub async fn start() -> anyhow::Result<Self> {
        let listened = Arc::new(Listened::default());
        let canary = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let stall = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let targets = Self {
            canary: canary.local_addr()?,
            stall: stall.local_addr()?,
            listened: listened.clone(),
        };
        let counted = listened.clone();
        tokio::spawn(async move {
            while let Ok((connection, _)) = canary.accept().await {
                counted.canary_connections.fetch_add(1, Ordering::Relaxed);
                drop(connection);
            }
        });
        tokio::spawn(async move {
            while let Ok((connection, _)) = stall.accept().await {
                tokio::spawn(hold(connection, listened.clone()));
            }
        });
        Ok(targets)
    }

    /// Where the stalled endpoint listens: the deployment must allow it as a webhook target.
    pub fn stall_address(&self) -> SocketAddr {
        self.stall
    }
}

/// A connection to the stall: counted when its request arrives, held open (read, never
/// answered) until the dispatcher gives up on it, or answered 204 once the stall is released.
async fn hold(mut connection: tokio::net::TcpStream, listened: Arc<Listened>) {
    let mut buffer = vec![0_u8; STALL_READ_BYTES];
    let mut counted = false;
    loop {
        if counted && listened.stall_released.load(Ordering::Relaxed) {
            // The request has arrived (a dispatcher's POST is one write of a few KiB).
            let _ = connection.write_all(RECOVERED).await;
            break;
        }
        match tokio::time::timeout(STALL_POLL, connection.read(&mut buffer)).await {
            Err(_) => {}
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(_)) if !counted => {
                counted = true;
                listened.stall_requests.fetch_add(1, Ordering::Relaxed);
                let open = listened.stall_open.fetch_add(1, Ordering::Relaxed) + 1;
                listened.stall_open_max.fetch_max(open, Ordering::Relaxed);
            }
            Ok(Ok(_)) => {}
        }
    }
    if counted {
        listened.stall_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the boundary attacker did and what its listeners saw, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BoundaryReport {
    /// By kind: sent, refused with the expected code, acknowledged (2xx), unanswered.
    pub kinds: BTreeMap<String, AttackCounts>,
    /// Connections the canary accepted (must be 0).
    pub canary_connections: u64,
    /// Requests the stalled endpoint received.
    pub stall_requests: u64,
    /// The most of them open at once.
    pub stall_open_max: u64,
    /// The most the dispatchers may hold open there: their per-endpoint limit times the
    /// instances.
    pub stall_open_allowed: u64,
}

/// What the boundary attacker has done so far; lives in the storm's log.
#[derive(Clone, Debug, Default)]
pub(crate) struct BoundaryLog {
    kinds: BTreeMap<BoundaryKind, AttackCounts>,
    /// Probes answered otherwise than refused (described).
    breaches: Vec<String>,
    listened: Option<Arc<Listened>>,
    stall_open_allowed: u64,
}

impl BoundaryLog {
    /// Records one probe of a kind judged on one answer, and its answer (`None`: no answer).
    fn record(&mut self, kind: BoundaryKind, what: &str, answer: Option<(u16, String)>) {
        self.note(
            kind,
            what,
            Outcome::of_refusal(kind.refusal(), answer.as_ref()),
        );
    }

    /// Records one probe and what it came to: held counts as refused, a breach as acknowledged
    /// when the probe's own request was answered 2xx.
    fn note(&mut self, kind: BoundaryKind, what: &str, outcome: Outcome) {
        let counts = self.kinds.entry(kind).or_insert_with(|| AttackCounts {
            stopped_by: kind.stopped_by(),
            ..AttackCounts::default()
        });
        counts.sent += 1;
        match outcome {
            Outcome::Held => counts.refused += 1,
            Outcome::Unanswered => counts.unanswered += 1,
            Outcome::Crossed { status, how } => {
                if status.is_some_and(|status| (200..300).contains(&status)) {
                    counts.acknowledged += 1;
                }
                self.breaches
                    .push(format!("{} ({what}) {how}", kind.name()));
            }
        }
    }

    /// Every boundary the run saw crossed: probes not refused, connections to the canary,
    /// more attempts open at the stall than the dispatchers may hold.
    pub(crate) fn breaches(&self) -> Vec<String> {
        let mut breaches = self.breaches.clone();
        if let Some(listened) = &self.listened {
            let canary = listened.canary_connections.load(Ordering::Relaxed);
            if canary > 0 {
                breaches.push(format!(
                    "the canary, which no tenant may reach, accepted {canary} connection(s)"
                ));
            }
            let open_max = listened.stall_open_max.load(Ordering::Relaxed);
            if open_max > self.stall_open_allowed {
                breaches.push(format!(
                    "the stalled endpoint had {open_max} attempts open at once, more than the {} \
                     the dispatchers may hold",
                    self.stall_open_allowed
                ));
            }
        }
        breaches
    }

    /// The report's figures.
    pub(crate) fn report(&self) -> BoundaryReport {
        let load = |counter: fn(&Listened) -> &AtomicU64| {
            self.listened
                .as_ref()
                .map_or(0, |listened| counter(listened).load(Ordering::Relaxed))
        };
        BoundaryReport {
            kinds: self
                .kinds
                .iter()
                .map(|(kind, counts)| (kind.name().to_owned(), counts.clone()))
                .collect(),
            canary_connections: load(|listened| &listened.canary_connections),
            stall_requests: load(|listened| &listened.stall_requests),
            stall_open_max: load(|listened| &listened.stall_open_max),
            stall_open_allowed: self.stall_open_allowed,
        }
    }
}

/// The spellings of a loopback address that the probes register, each at `port`.
fn loopback_spellings(port: u16) -> [String; 9] {
    [
        format!("http://127.0.0.1:{port}/hooks"),
        format!("http://[::ffff:127.0.0.1]:{port}/hooks"),
        format!("http://[::ffff:0.0.0.0]:{port}/hooks"),
        format!("http://0:{port}/hooks"),
        format!("http://127.1:{port}/hooks"),
        format!("http://2130706433:{port}/hooks"),
        format!("http://0x7f.1:{port}/hooks"),
        format!("http://localhost:{port}/hooks"),
        format!("http://localhost.:{port}/hooks"),
    ]
}

/// Runs the boundary probes until the workload's `end`: the stalled endpoint once, then one probe per
/// round. `stall_open_allowed` is what the dispatchers may hold open at the stall.
pub(crate) async fn probe_until(
    shared: &Arc<Shared>,
    targets: &BoundaryTargets,
    rng: &mut fastrand::Rng,
    end: &WorkloadEnd,
    stall_open_allowed: u64,
) {
    {
        let mut log = shared.log();
        log.boundary.listened = Some(targets.listened.clone());
        log.boundary.stall_open_allowed = stall_open_allowed;
    }
    register_stalled_endpoint(shared, targets).await;
    let spellings = loopback_spellings(targets.canary.port());
    let mut round: usize = rng.usize(..BoundaryKind::EVERY.len());
    let mut pages = pages::Pages::default();
    while !end.passed() {
        let kind = BoundaryKind::EVERY[round % BoundaryKind::EVERY.len()];
        let tenant = rng.usize(..shared.tenants.len());
        match kind {
            BoundaryKind::PrivateTarget => {
                let url = &spellings[rng.usize(..spellings.len())];
                let body = json!({"url": url, "events": ["payment.succeeded"]});
                let answer = send(
                    shared,
                    rng,
                    tenant,
                    None,
                    (reqwest::Method::POST, "/v1/webhook-endpoints"),
                    Some(&body),
                )
                .await;
                shared.log().boundary.record(kind, url, answer);
            }
            BoundaryKind::PageKey => {
                if let Some(key) = shared.tenants[tenant].publishable_key.clone() {
                    let (method, path, body) = secret_route(shared, rng);
                    let answer = send(
                        shared,
                        rng,
                        tenant,
                        Some(&key),
                        (method.clone(), &path),
                        body.as_ref(),
                    )
                    .await;
                    let what = format!("{method} {path}");
                    shared.log().boundary.record(kind, &what, answer);
                }
            }
            page_kind => {
                if shared.tenants[tenant].publishable_key.is_some() {
                    pages.probe(shared, rng, page_kind, tenant).await;
                }
            }
        }
        round += 1;
        // One client among many, not a flood.
        tokio::time::sleep(Duration::from_millis(rng.u64(100..400))).await;
    }
    targets
        .listened
        .stall_released
        .store(true, Ordering::Relaxed);
}

/// The first tenant's endpoint at the stall, for every event type, registered with its secret
/// key (the stall is among the deployment's allowed targets). Not registered: logged, and the
/// run goes on without it.
async fn register_stalled_endpoint(shared: &Shared, targets: &BoundaryTargets) {
    let body = json!({
        "url": format!("http://{}/stalled", targets.stall),
        "events": mideng_pay::domain::webhook::EVENT_TYPES,
    });
    let answer = shared
        .send_as(
            0,
            &shared.tenants[0].api_key,
            reqwest::Method::POST,
            "/v1/webhook-endpoints",
            Some(&body),
            &[],
            PROBE_TIMEOUT,
        )
        .await;
    if !answer
        .as_ref()
        .is_some_and(|answer| matches!(answer.status, 200 | 201))
    {
        tracing::warn!(
            status = answer.map(|answer| answer.status),
            "the stalled endpoint was not registered"
        );
    }
}

/// A route that only a secret key opens, with what it needs: a victim's payment, the hot
/// wallet, the tenant's webhooks.
fn secret_route(
    shared: &Shared,
    rng: &mut fastrand::Rng,
) -> (reqwest::Method, String, Option<Value>) {
    let victim = {
        let log = shared.log();
        if log.victims.is_empty() {
            None
        } else {
            Some(
                log.victims[rng.usize(..log.victims.len())]
                    .payment_no
                    .clone(),
            )
        }
    };
    let hot = shared.hot();
    match (rng.u8(..7), victim) {
        (0, Some(payment)) => (
            reqwest::Method::GET,
            format!("/v1/payments/{payment}"),
            None,
        ),
        (1, Some(payment)) => (
            reqwest::Method::POST,
            format!("/v1/payments/{payment}/close"),
            Some(json!({})),
        ),
        (2, Some(payment)) => (
            reqwest::Method::POST,
            format!("/v1/payments/{payment}/refunds"),
            Some(json!({"amount": 1})),
        ),
        (3, _) => (
            reqwest::Method::POST,
            format!("/v1/wallets/{hot}/credit"),
            Some(json!({"amount": 1, "reference": format!("{}-page-key", shared.run)})),
        ),
        (4, _) => (reqwest::Method::GET, format!("/v1/wallets/{hot}"), None),
        (5, _) => (
            reqwest::Method::GET,
            "/v1/webhook-deliveries".to_owned(),
            None,
        ),
        _ => (
            reqwest::Method::POST,
            "/v1/webhook-endpoints".to_owned(),
            Some(
                json!({"url": "https://merchant.example/page-key", "events": ["payment.succeeded"]}),
            ),
        ),
    }
}

/// One probe to a random instance, with the tenant's secret key or `key`; the status and the
/// problem code, `None` when no answer came.
async fn send(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    key: Option<&str>,
    (method, path): (reqwest::Method, &str),
    body: Option<&Value>,
) -> Option<(u16, String)> {
    let key = key.unwrap_or(&shared.tenants[tenant].api_key);
    let instance = rng.usize(..shared.bases.len());
    // Keyed routes want a key; each probe its own, so none replays another's answer.
    let idempotency_key = format!("{}-probe-{}", shared.run, rng.u64(..));
    let headers = [("Idempotency-Key", idempotency_key.as_str())];
    let answer = shared
        .send_as(instance, key, method, path, body, &headers, PROBE_TIMEOUT)
        .await?;
    let code = answer.code();
    Some((answer.status, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_counts_as_refused_only_with_its_own_code() {
        let mut log = BoundaryLog::default();
        let private = BoundaryKind::PrivateTarget;
        log.record(
            private,
            "http://0:1/",
            Some((422, "private-target".to_owned())),
        );
        log.record(private, "http://0:1/", None);
        log.record(
            private,
            "http://0:1/",
            Some((503, "database-unavailable".to_owned())),
        );
        assert!(log.breaches().is_empty(), "{:?}", log.breaches());
        log.record(private, "http://127.1:1/", Some((201, String::new())));
        log.record(
            BoundaryKind::PageKey,
            "GET /v1/wallets/hot",
            Some((404, "not-found".to_owned())),
        );
        let report = log.report();
        assert_eq!(report.kinds["private target"].sent, 4);
        assert_eq!(report.kinds["private target"].refused, 1);
        assert_eq!(report.kinds["private target"].acknowledged, 1);
        assert_eq!(report.kinds["private target"].unanswered, 2);
        assert_eq!(log.breaches().len(), 2, "{:?}", log.breaches());
    }

    /// The page's moves: held counts as refused (a page's own payment under the merchant's key
    /// too), a breach is listed, and acknowledged only when the probe's own request was taken.
    #[test]
    fn a_page_probe_counts_what_it_came_to() {
        let mut log = BoundaryLog::default();
        let replay = BoundaryKind::ReplayAcrossKeys;
        log.note(replay, "own order", Outcome::Held);
        log.note(replay, "own order", Outcome::Unanswered);
        assert!(log.breaches().is_empty());
        log.note(
            replay,
            "own order",
            Outcome::Crossed {
                status: Some(201),
                how: "was answered 201 with the merchant's payment P1".to_owned(),
            },
        );
        log.note(
            BoundaryKind::TokenExhaustion,
            "burst",
            Outcome::Crossed {
                status: None,
                how: "then answered the merchant's server's own token request 429".to_owned(),
            },
        );
        log.record(
            BoundaryKind::PriceFromPage,
            "POST /v1/orders",
            Some((403, "key-not-allowed".to_owned())),
        );
        let report = log.report();
        let counts = &report.kinds["replay across key kinds"];
        assert_eq!(
            (
                counts.sent,
                counts.refused,
                counts.unanswered,
                counts.acknowledged
            ),
            (3, 1, 1, 1)
        );
        assert_eq!(report.kinds["token exhaustion"].acknowledged, 0);
        assert_eq!(report.kinds["price from the page"].refused, 1);
        assert_eq!(
            log.breaches(),
            [
                "replay across key kinds (own order) was answered 201 with the merchant's \
                 payment P1",
                "token exhaustion (burst) then answered the merchant's server's own token \
                 request 429",
            ]
        );
        assert_eq!(BoundaryKind::EVERY.len(), 6);
    }

    #[test]
    fn a_connection_to_the_canary_and_too_many_at_the_stall_are_breaches() {
        let listened = Arc::new(Listened::default());
        let mut log = BoundaryLog {
            listened: Some(listened.clone()),
            stall_open_allowed: 2,
            ..BoundaryLog::default()
        };
        listened.stall_open_max.store(2, Ordering::Relaxed);
        assert!(log.breaches().is_empty());
        listened.stall_open_max.store(3, Ordering::Relaxed);
        listened.canary_connections.store(1, Ordering::Relaxed);
        assert_eq!(log.breaches().len(), 2, "{:?}", log.breaches());
        log.stall_open_allowed = 3;
        assert_eq!(log.breaches().len(), 1);
    }
}

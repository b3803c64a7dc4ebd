//! The storm's clients: what they share (the HTTP client, the instances, the tenants, the log of
//! what they sent and were told) and the scripts they run, each producing its sources of
//! duplicates: double clicks, retries after a timeout, manual replays, a second request key
//! for one business key, keyless checkouts from two tabs, and the simulator's notify policies.
//! The refund and reversal scripts are in `refunds`; they send through [`keyed_at`] too.
//!
//! A keyed request is sent until it has a final answer; the first final answer for a key is
//! kept, and every later one must repeat it byte for byte.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::attacker::{self, AttackLog, BoundaryLog, Victim};
use super::checkout::{create_order, keyless_double_click};
use super::faults::FaultClock;
use super::latency::{LatencyHistogram, operation_of};
use super::rare;
use super::refunds::{REFUND_CANDIDATES_MAX, RefundCandidate};
use crate::audit::{AnsweredRefund, ClientFacts};
use crate::deploy::TenantAccess;

/// An answer the client can use, or not.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    replayed: bool,
    /// Its `Retry-After`, if any.
    pub(crate) retry_after: Option<String>,
    body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub(crate) fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// A final answer for its key: not a 5xx, not "come back later" (202, not stored under the
    /// key), not "in progress", not a used token.
    fn is_final(&self) -> bool {
        self.status < 500
            && self.status != 202
            && !(self.status == 409
                && matches!(self.code().as_str(), "in-progress" | "duplicate-submission"))
    }
}

/// What the clients saw and sent.
#[derive(Default)]
pub(crate) struct Log {
    originals: HashMap<String, (u16, Vec<u8>)>,
    pub(super) client: ClientFacts,
    pub(super) duplicates: BTreeMap<String, u64>,
    pub(super) payments: HashSet<String>,
    pub(super) unresolved: Vec<Pending>,
    /// Payments the workload left waiting for good: the attacker's victims.
    pub(crate) victims: Vec<Victim>,
    /// What the attacker sent.
    pub(crate) attacks: AttackLog,
    /// What the boundary attacker tried, and what its listeners saw.
    pub(crate) boundary: BoundaryLog,
    /// Payments the buyer paid, waiting for the refund script (at most
    /// [`REFUND_CANDIDATES_MAX`]).
    pub(super) refund_candidates: VecDeque<RefundCandidate>,
    /// Where each request label's operation is in `client.history`.
    pub(super) history_index: HashMap<String, usize>,
    /// The orders the merchant's server made last (tenant index, order id), at most
    /// [`RECENT_ORDERS_MAX`]: ids a page may try to squat.
    pub(crate) recent_orders: VecDeque<(usize, String)>,
}

/// The recent orders remembered for the boundary attacker.
pub(crate) const RECENT_ORDERS_MAX: usize = 1_000;

/// A keyed request that had no final answer when its client gave up; quiescence finishes it.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) label: String,
    pub(crate) tenant: usize,
    pub(crate) path: String,
    pub(crate) body: Value,
    pub(crate) key: String,
    pub(crate) token_needed: bool,
    pub(crate) kind: PendingKind,
}

#[derive(Clone, Debug)]
pub(crate) enum PendingKind {
    Payment,
    Credit {
        user: String,
        amount: i64,
    },
    Deduct {
        user: String,
        order: String,
        amount: i64,
    },
    /// A refund; its request key is the refund's business key.
    Refund {
        payment_no: String,
        amount: i64,
    },
    /// A deduction put back. It carries no `Idempotency-Key`: one reversal per deduction is
    /// the service's own rule.
    Reversal {
        user: String,
        deduction_no: String,
    },
}

impl PendingKind {
    /// Whether the request carries its key as `Idempotency-Key`.
    fn sends_key(&self) -> bool {
        !matches!(self, PendingKind::Reversal { .. })
    }
}

pub(crate) struct Shared {
    /// Prefix of every id the storm makes (orders, users, keys), unique per run.
    pub(crate) run: String,
    /// When the clients began: the history's times count from it.
    pub(super) started: Instant,
    pub(super) http: reqwest::Client,
    pub(crate) bases: Vec<String>,
    pub(super) sim_base: String,
    pub(crate) tenants: Vec<TenantAccess>,
    pub(super) faults: FaultClock,
    pub(super) log: Mutex<Log>,
    pub(super) requests: AtomicU64,
    /// The workload's scripts begun: each takes the next number for its ids (`<run>-o-<n>`).
    pub(crate) scripts: AtomicU64,
    pub(super) excused: AtomicU64,
    /// The history's next process: one per attempt ([`crate::audit::jepsen::ClientOp`]).
    pub(super) processes: AtomicU64,
    /// Whether an instance's clock is off by more than the service's bound
    /// (`--clock-skew-secs` past `payments.clock_skew_max_secs`): its `503
    /// clock-unsynchronised` answers are then right, and counted in `clock_refused`.
    pub(super) clock_refusals_expected: bool,
    /// `503 clock-unsynchronised` answers of the skewed instance.
    pub(super) clock_refused: AtomicU64,
    /// WeChat Pay notifies answered "come back" (503 `FAIL`, the order's lock or the database
    /// busy): the protocol's own way to ask for a resend, as Alipay's `fail` is.
    pub(super) notifies_sent_back: AtomicU64,
    /// Refusals of a trade's creation the storm armed at the channel and no client was answered
    /// yet ([`super::rare`]): each excuses one `502 channel-rejected` of a payment's creation.
    pub(super) refusals_armed: AtomicU64,
    /// Whether quiescence runs the bill reconciliation (a deployment the storm started): only
    /// then may every notify of a charge be lost, since only the bill finds it.
    pub(super) bills_reconciled: bool,
    /// Latencies of answered requests, by operation; a lock of its own, apart from the log's,
    /// since every answer takes it.
    pub(super) latencies: Mutex<BTreeMap<String, LatencyHistogram>>,
    /// Each killed process instance's metrics, read just before its SIGKILL
    /// ([`super::sampler::read_before_kill`]).
    pub(super) killed_metrics: Mutex<Vec<String>>,
}

impl Shared {
    /// The tenants' hot wallet owner.
    pub(crate) fn hot(&self) -> String {
        format!("{}-hot", self.run)
    }

    /// The tenants' lean wallet owner: a hot wallet kept near zero, where credits and deducts
    /// race and deducts are refused for insufficient funds.
    pub(crate) fn lean(&self) -> String {
        format!("{}-lean", self.run)
    }

    pub(crate) fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count(&self, source: &str) {
        *self.log().duplicates.entry(source.to_owned()).or_default() += 1;
    }

    /// Counts an answered request's latency under its operation.
    fn time(&self, method: &str, path: &str, elapsed: Duration) {
        let operation = operation_of(method, path);
        self.latencies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(operation)
            .or_default()
            .record(elapsed);
    }

    /// One request to instance `instance`; `None` when no answer came (connection refused,
    /// reset, timed out).
    #[allow(clippy::too_many_arguments)] // the parts of one HTTP request, each used once
    pub(super) async fn send(
        &self,
        instance: usize,
        tenant: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> Option<Answer> {
        let key = &self.tenants[tenant % self.tenants.len()].api_key;
        self.send_as(instance, key, method, path, body, headers, timeout)
            .await
    }

    /// [`Shared::send`] with `key` as the bearer key (a publishable key, say).
    #[allow(clippy::too_many_arguments)] // the parts of one HTTP request, each used once
    pub(crate) async fn send_as(
        &self,
        instance: usize,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> Option<Answer> {
        let base = &self.bases[instance % self.bases.len()];
        let method_name = method.as_str().to_owned();
        let mut request = self
            .http
            .request(method, format!("{base}{path}"))
            .bearer_auth(key)
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|value| value == "true");
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let body = response.bytes().await.ok()?.to_vec();
        self.time(&method_name, path, started.elapsed());
        self.account_for(status, started, path, &body);
        Some(Answer {
            status,
            replayed,
            retry_after,
            body,
        })
    }

    /// The instance the run's setup talks to (the merchant's registration, the seed credits):
    /// the last one, whose clock the storm never skews.
    pub(crate) fn setup_instance(&self) -> usize {
        self.bases.len().saturating_sub(1)
    }

    /// A 5xx other than 500 is excused inside a fault window whose kind produces its code (and
    /// counted); any other, and a 500 anywhere, is a violation.
    fn account_for(&self, status: u16, started: Instant, path: &str, body: &[u8]) {
        if status < 500 {
            return;
        }
        if status == 502
            && path.ends_with("/payments")
            && serde_json::from_slice::<Value>(body)
                .is_ok_and(|problem| problem["code"] == "channel-rejected")
            && self
                .refusals_armed
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
        {
            // The channel refused the creation, as the storm asked it to: the right answer.
            return;
        }
        if status == 503
            && self.clock_refusals_expected
            && serde_json::from_slice::<Value>(body)
                .is_ok_and(|problem| problem["code"] == "clock-unsynchronised")
        {
            // The skewed instance refuses, as its clock guard must; the client retries elsewhere.
            self.clock_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if status == 503
            && path == "/v1/channels/wechat/notify"
            && serde_json::from_slice::<Value>(body).is_ok_and(|answer| answer["code"] == "FAIL")
        {
            // WeChat Pay's "send it again": what Alipay's notifies get as a 200 `fail`. The
            // resend (or reconciliation) settles it, and the audit judges the money.
            self.notifies_sent_back.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A 500 is the service's own failure, which no fault excuses: a fault makes a
        // dependency unavailable (503, 502, 504), never the service wrong; and only with the
        // code of the dependency it took away.
        let code = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|problem| problem["code"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if self
            .faults
            .excused(started, Instant::now(), status, &code)
            .is_some()
        {
            self.excused.fetch_add(1, Ordering::Relaxed);
        } else {
            let detail = String::from_utf8_lossy(body)
                .chars()
                .take(200)
                .collect::<String>();
            self.log()
                .client
                .unexcused_errors
                .push(format!("{status} on {path}: {detail}"));
        }
    }

    /// A channel notify (no API key: the channel's signature is its credential) to instance
    /// `instance`; the status and body, `None` when no answer came.
    pub(crate) async fn post_notify(
        &self,
        instance: usize,
        channel: &str,
        content_type: &str,
        headers: &[(String, String)],
        body: String,
    ) -> Option<(u16, Vec<u8>)> {
        let base = &self.bases[instance % self.bases.len()];
        let path = format!("/v1/channels/{channel}/notify");
        let mut request = self
            .http
            .post(format!("{base}{path}"))
            .header("content-type", content_type)
            .timeout(Duration::from_secs(20))
            .body(body);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let body = response.bytes().await.ok()?.to_vec();
        self.time("POST", &path, started.elapsed());
        self.account_for(status, started, &path, &body);
        Some((status, body))
    }

    pub(crate) async fn sim(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Option<Value> {
        let response = self
            .http
            .request(method, format!("{}{path}", self.sim_base))
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    /// Records a final answer for `label` (operation + key) and checks it against the first.
    fn settle(&self, label: &str, answer: &Answer) {
        // A refused token frees the key: the layer stores nothing, and the same key may run
        // later under a fresh token (an instance that restarted lost its in-process tokens).
        if answer.code().starts_with("idempotency-token-") {
            return;
        }
        let mut log = self.log();
        match log.originals.get(label) {
            None => {
                log.originals
                    .insert(label.to_owned(), (answer.status, answer.body.clone()));
            }
            Some((status, body)) => {
                if *status != answer.status || *body != answer.body {
                    let mismatch = format!(
                        "{label}: first {status} {}, then {} {}",
                        String::from_utf8_lossy(body),
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    );
                    log.client.replay_mismatches.push(mismatch);
                } else if answer.replayed {
                    *log.duplicates
                        .entry("replayed byte for byte".to_owned())
                        .or_default() += 1;
                }
            }
        }
    }
}

/// Sends a keyed request until it has a final answer (or gives up, leaving it to quiescence),
/// the way a client retries: same key, another instance, after a pause.
pub(crate) async fn keyed(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    pending: Pending,
    token: Option<String>,
    first_timeout: Duration,
    attempts: usize,
) -> (Option<Answer>, Option<String>) {
    let instance = rng.usize(..shared.bases.len());
    keyed_at(
        shared,
        rng,
        pending,
        token,
        first_timeout,
        attempts,
        instance,
    )
    .await
}

/// [`keyed`], first to instance `instance` (modulo their number): two copies started at
/// neighbouring instances reach two instances when there are several.
pub(super) async fn keyed_at(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    pending: Pending,
    mut token: Option<String>,
    first_timeout: Duration,
    attempts: usize,
    mut instance: usize,
) -> (Option<Answer>, Option<String>) {
    for attempt in 0..attempts {
        if pending.token_needed && token.is_none() {
            token = issue_token(shared, pending.tenant, instance).await;
            if token.is_none() {
                // No token now (its store is down): never send the request without one.
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        }
        let mut headers = Vec::new();
        if pending.kind.sends_key() {
            headers.push(("Idempotency-Key", pending.key.as_str()));
        }
        if let Some(token) = &token {
            headers.push(("Idempotency-Token", token.as_str()));
        }
        let timeout = if attempt == 0 {
            first_timeout
        } else {
            Duration::from_secs(20)
        };
        let invoked_ns = shared.elapsed_ns();
        let answer = shared
            .send(
                instance,
                pending.tenant,
                reqwest::Method::POST,
                &pending.path,
                Some(&pending.body),
                &headers,
                timeout,
            )
            .await;
        shared.attempted(&pending, invoked_ns, answer.as_ref());
        match answer {
            Some(answer) if answer.is_final() => {
                // Every final answer counts, not only the one the caller keeps: with a layer
                // off, two copies of a double click may both have taken effect.
                shared.settle(&pending.label, &answer);
                record(shared, &pending, &answer);
                return (Some(answer), token);
            }
            Some(answer) if answer.code() == "duplicate-submission" => {
                // The token was used by an attempt whose answer was lost: a fresh one.
                token = None;
            }
            Some(answer) if answer.status == 202 => {
                // The channel has not confirmed the trade: the answer is not stored, and the
                // same key with the same token (bound to that key) asks again. When the
                // attempts run out this answer is what the client keeps (the payment stays
                // PENDING, for reconciliation).
                if attempt + 1 == attempts {
                    record(shared, &pending, &answer);
                    return (Some(answer), token);
                }
                shared.count("asked again after 202, same key and token");
                tokio::time::sleep(Duration::from_millis(rng.u64(500..2_000))).await;
                continue;
            }
            _ => {}
        }
        if attempt + 1 < attempts {
            shared.count("retry after timeout or failure");
            instance = (instance + 1) % shared.bases.len();
            tokio::time::sleep(Duration::from_millis(rng.u64(50..300))).await;
        }
    }
    shared.log().unresolved.push(pending);
    (None, token)
}

pub(super) async fn issue_token(shared: &Shared, tenant: usize, instance: usize) -> Option<String> {
    for attempt in 0..10 {
        let answer = shared
            .send(
                instance + attempt,
                tenant,
                reqwest::Method::POST,
                "/v1/tokens",
                Some(&json!({})),
                &[],
                Duration::from_secs(10),
            )
            .await;
        if let Some(answer) = answer
            && answer.status == 201
        {
            return answer.json()["token"].as_str().map(str::to_owned);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// A keyed request sent the way this iteration's client behaves: once, twice at once (double
/// click, to two instances), or with a first attempt that gives up after a few milliseconds.
pub(super) async fn keyed_with_duplicates(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    pending: Pending,
) -> (Option<Answer>, Option<String>) {
    let token = if pending.token_needed {
        issue_token(shared, pending.tenant, rng.usize(..shared.bases.len())).await
    } else {
        None
    };
    match rng.u8(..10) {
        0..3 => {
            shared.count("double click");
            if shared.bases.len() > 1 {
                shared.count("same request to two instances");
            }
            let mut other = fastrand::Rng::with_seed(rng.u64(..));
            let ((first, token), (second, _)) = tokio::join!(
                keyed(
                    shared,
                    rng,
                    pending.clone(),
                    token.clone(),
                    Duration::from_secs(20),
                    8
                ),
                keyed(
                    shared,
                    &mut other,
                    pending,
                    token,
                    Duration::from_secs(20),
                    8
                )
            );
            (first.or(second), token)
        }
        3..5 => {
            shared.count("retry after a client timeout");
            let timeout = Duration::from_millis(rng.u64(1..30));
            keyed(shared, rng, pending, token, timeout, 8).await
        }
        _ => keyed(shared, rng, pending, token, Duration::from_secs(20), 8).await,
    }
}

pub(super) async fn credit(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    user: &str,
    key: &str,
    amount: i64,
) {
    let pending = Pending {
        label: format!("credit/{tenant}/{key}"),
        tenant,
        path: format!("/v1/wallets/{user}/credit"),
        body: json!({"amount": amount, "reference": key}),
        key: key.to_owned(),
        token_needed: false,
        kind: PendingKind::Credit {
            user: user.to_owned(),
            amount,
        },
    };
    keyed_with_duplicates(shared, rng, pending).await;
}

/// Writes what a final answer means into the client facts.
fn record(shared: &Shared, pending: &Pending, answer: &Answer) {
    let tenant = shared.tenants[pending.tenant % shared.tenants.len()]
        .id
        .clone();
    let mut log = shared.log();
    match &pending.kind {
        PendingKind::Credit { user, amount } if answer.status == 200 => {
            log.client
                .credits
                .insert((tenant, user.clone(), pending.key.clone()), *amount);
        }
        PendingKind::Deduct {
            user,
            order,
            amount,
        } if answer.status == 200 => {
            log.client.deducts.insert(
                (tenant, user.clone(), pending.key.clone()),
                (order.clone(), *amount),
            );
        }
        PendingKind::Payment => {
            if let Some(number) = answer.json()["payment_no"].as_str() {
                log.payments.insert(number.to_owned());
            }
        }
        PendingKind::Refund { payment_no, amount } if matches!(answer.status, 200 | 201) => {
            let view = answer.json();
            let answered = log
                .client
                .refunds
                .entry((tenant, pending.key.clone()))
                .or_insert_with(|| AnsweredRefund {
                    payment_no: payment_no.clone(),
                    ..AnsweredRefund::default()
                });
            // The amount asked and the amount answered: two of them name a wrong answer.
            answered.amounts.insert(*amount);
            answered.amounts.extend(
                view["amount"]
                    .as_i64()
                    .filter(|answered| answered != amount),
            );
            answered.refund_nos.insert(
                view["refund_no"]
                    .as_str()
                    .unwrap_or("(an answer without a refund number)")
                    .to_owned(),
            );
        }
        PendingKind::Reversal { user, deduction_no } if answer.status == 200 => {
            let view = answer.json();
            let answered = log
                .client
                .reversals
                .entry((tenant, user.clone(), deduction_no.clone()))
                .or_default();
            answered.reversal_nos.insert(
                view["reversal_no"]
                    .as_str()
                    .unwrap_or("(an answer without a reversal number)")
                    .to_owned(),
            );
            answered
                .amounts
                .insert(view["amount"].as_i64().unwrap_or(0));
        }
        _ => {}
    }
}

const NOTIFY_MODES: [&str; 8] = [
    "normal",
    "normal",
    "duplicate",
    "concurrent",
    "delay",
    "reorder",
    "drop",
    "normal",
];

pub(super) async fn order_script(shared: &Shared, rng: &mut fastrand::Rng, tenant: usize, n: u64) {
    let order_id = format!("{}-o-{n}", shared.run);
    let user = format!("{}-u{}", shared.run, rng.u16(..200));
    let amount = rng.i64(1..100_000);
    let mut body =
        json!({"order_id": order_id, "user_id": user, "amount": amount, "currency": "CNY"});
    if rng.u8(..10) < 7 {
        body["entitlement"] = json!({"sku": "vip-month", "quantity": 1});
    }
    // Creating the order: a double click half the time; retried until answered.
    let instance = rng.usize(..shared.bases.len());
    let mut created = false;
    for attempt in 0..20 {
        let sends = if attempt == 0 && rng.bool() {
            shared.count("double click");
            2
        } else {
            1
        };
        let answers = create_order(shared, instance + attempt, tenant, &body, sends).await;
        if answers
            .iter()
            .flatten()
            .any(|answer| matches!(answer.status, 200 | 201))
        {
            created = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !created {
        return;
    }
    // Some orders meet a channel that refuses their first attempt and makes the trade anyway
    // (an Alipay refusal, [`rare`]); the buyer then pays both attempts.
    let refused = rng.u8(..100) < rare::REFUSED_PERCENT && rare::arm_refusal(shared).await;
    let channel = if refused || rng.bool() {
        "alipay"
    } else {
        "wechat"
    };
    if rng.u8(..10) < 2 {
        keyless_double_click(shared, rng, tenant, &order_id, channel).await;
    }
    let pending = Pending {
        label: format!("payment/{tenant}/pay-{order_id}"),
        tenant,
        path: format!("/v1/orders/{order_id}/payments"),
        body: json!({"channel": channel}),
        key: format!("pay-{order_id}"),
        token_needed: true,
        kind: PendingKind::Payment,
    };
    let (Some(answer), token) = keyed_with_duplicates(shared, rng, pending.clone()).await else {
        return;
    };
    let Some(number) = answer.json()["payment_no"].as_str().map(str::to_owned) else {
        return;
    };
    if refused {
        rare::pay_failed_attempts(shared, rng, tenant, &order_id).await;
    }
    let mode = NOTIFY_MODES[rng.usize(..NOTIFY_MODES.len())];
    if mode != "normal" {
        shared.count(&format!("notify {mode}"));
    }
    let mut policy = json!({"mode": mode, "out_trade_no": number});
    if matches!(mode, "delay" | "reorder") {
        policy["delay_seconds"] = json!(rng.u64(1..4));
    }
    shared
        .sim(reqwest::Method::PUT, "/sim/notify-policy", policy)
        .await;
    // The second attempt of a refused order is paid too.
    let roll = if refused { 50 } else { rng.u8(..100) };
    if roll < 75 {
        let pay_path = format!("/sim/trades/{number}/pay");
        let close_path = format!("/v1/payments/{number}/close");
        let empty = json!({});
        if (10..15).contains(&roll) {
            // The merchant cancels the order while its payment is open, and the buyer pays
            // anyway: the success arrives for a canceled order, which stays CANCELED with the
            // charge as a refund case, refunded by reconciliation.
            shared.count("paid after the order was canceled");
            let cancel = json!({"to": "CANCELED"});
            shared
                .send(
                    rng.usize(..shared.bases.len()),
                    tenant,
                    reqwest::Method::POST,
                    &format!("/v1/orders/{order_id}/transitions"),
                    Some(&cancel),
                    &[],
                    Duration::from_secs(20),
                )
                .await;
        }
        let pay = shared.sim(reqwest::Method::POST, &pay_path, json!({}));
        if roll < 10 {
            // The buyer pays while the merchant closes: never both.
            shared.count("close racing the payment");
            let close = shared.send(
                rng.usize(..shared.bases.len()),
                tenant,
                reqwest::Method::POST,
                &close_path,
                Some(&empty),
                &[],
                Duration::from_secs(20),
            );
            let (_, closed) = tokio::join!(pay, close);
            if closed
                .is_some_and(|closed| closed.status == 200 && closed.json()["status"] == "CLOSED")
            {
                // The buyer pays the closed attempt's code afterwards: the channel refuses.
                rare::pay_closed_code(shared, &number).await;
            }
        } else {
            pay.await;
            if rng.u8(..10) < 4 {
                // Refunded later, once the service has it PAID (the refund script looks).
                let mut log = shared.log();
                if log.refund_candidates.len() < REFUND_CANDIDATES_MAX {
                    log.refund_candidates.push_back(RefundCandidate {
                        tenant,
                        payment_no: number.clone(),
                        amount_fen: amount,
                        looks: 0,
                    });
                }
            }
        }
    } else {
        // The buyer never pays and nobody closes it: nothing legitimate changes this payment
        // before its expiry, so it is a victim for the attacker (the audit checks it stays
        // as it is). Only a trade the channel confirmed (a pay URL) qualifies.
        let view = answer.json();
        if view["status"] == "PENDING" && view["pay_url"].is_string() {
            let mut log = shared.log();
            if log.victims.len() < attacker::VICTIMS_MAX {
                log.victims.push(Victim {
                    tenant,
                    payment_no: number.clone(),
                    channel: channel.to_owned(),
                    amount_fen: amount,
                });
            }
        }
    }
    if rng.u8(..10) < 3 {
        // The same request again, token included, long after its answer.
        shared.count("manual replay");
        keyed(shared, rng, pending, token, Duration::from_secs(20), 8).await;
    }
}

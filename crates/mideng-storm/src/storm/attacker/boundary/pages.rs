//! The boundary attacker as a checkout page: **the server prices, the page pays**. A page holds
//! the tenant's publishable key and, once the merchant's server has made it an order, that
//! order's client secret; with them it may take tokens for that order, pay it and read it,
//! nothing else. These probes are what such a page (or anyone who read one) tries beyond that:
//!
//! - *price from the page*: `POST /v1/orders` with the publishable key, with and without the
//!   client secret of a page of the attacker's own: 1 fen for 1000 × `vip-month`, for one of the
//!   workload's buyers. Must be 403 `key-not-allowed`, and the order must not exist afterwards
//!   (the secret key reads it: 404);
//! - *order-id squatting*: the same under an id of the merchant's server's — one it made, or one
//!   the workload is about to make (its next script numbers) — and under a fresh id that the
//!   merchant's server then makes itself. Each must be 403 `key-not-allowed`, and the merchant's
//!   own creation after the page's 201 (not 200 with the page's order, not 422
//!   `order-id-reused`);
//! - *replay across key kinds*: the merchant's server makes the attacker's page an order, as a
//!   real checkout's server does, and pays another order of its own under `pay-<order>`; the
//!   page takes a token and pays its own order under that same `Idempotency-Key`. It must get
//!   its own payment of its own order: never the merchant's `payment_no`, never an answer for
//!   another order, never a refusal of a key it never used (held, counted as refused). The
//!   other way: the page sends `pay-<order>` for a fresh order of the merchant's (404
//!   `not-found`: not its order), then the merchant's server sends the same request under the
//!   same key and must get its payment (201), not the page's 404;
//! - *token exhaustion*: the page of a fresh order sends [`BURST`] token requests at once; at
//!   most [`PAGE_TOKENS_PER_ORDER_MAX`] may be 201 and every other must be 429
//!   `too-many-tokens` or `rate-limited` with `Retry-After`; then the merchant's server's own
//!   token must be 201 at once (it pays that order with it, so that it holds no token it does
//!   not spend).
//!
//! Every order here is made by the merchant's server through the workload's own path
//! ([`create_order`]), so the audit knows it as the merchant's; no page ever makes one. Only the
//! service's API on loopback is asked, each request within [`PROBE_TIMEOUT`] (the merchant's
//! retries within the workload's bounds).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mideng_pay::limits::PAGE_TOKENS_PER_ORDER_MAX;
use reqwest::Method;
use serde_json::{Value, json};

use super::{BoundaryKind, Outcome, PROBE_TIMEOUT};
use crate::storm::{Answer, Pending, PendingKind, Shared, create_order, keyed};

/// Token requests a page sends at once in the exhaustion probe: past the per-order cap, not a
/// flood.
const BURST: usize = 12;
/// Times the merchant's server sends a request of its own before giving up on the round.
const MERCHANT_TRIES: usize = 3;
/// The header a page sends its order's client secret in.
const CLIENT_SECRET: &str = "Mideng-Client-Secret";
/// What refuses a publishable key making an order.
const KEY_NOT_ALLOWED: (u16, &str) = (403, "key-not-allowed");

/// One answer as the judges read it.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    status: u16,
    /// Its JSON body (`Null` when there is none).
    body: Value,
    /// Whether it said when to come back (`Retry-After`).
    retry_after: bool,
}

impl Seen {
    fn of(answer: Answer) -> Self {
        Self {
            status: answer.status,
            body: answer.json(),
            retry_after: answer.retry_after.is_some(),
        }
    }

    /// Its problem code (empty when it is no problem).
    fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or_default()
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// An answer that says nothing of what the request would have done: a 5xx, a rate, a key
    /// in progress, a token lost with a restarted instance.
    fn tells_nothing(&self) -> bool {
        self.status >= 500
            || self.status == 429
            || self.status == 409 && matches!(self.code(), "in-progress" | "duplicate-submission")
            || self.code().starts_with("idempotency-token-")
    }

    fn describe(&self) -> String {
        format!("{} {}", self.status, self.code())
    }
}

/// `answer` against the one refusal `expected`.
fn against(expected: (u16, &str), answer: Option<&Seen>) -> Outcome {
    Outcome::of_refusal(
        expected,
        answer
            .map(|answer| (answer.status, answer.code().to_owned()))
            .as_ref(),
    )
}

/// A create-order body.
fn order_body(order_id: &str, user: &str, amount: i64, entitlement: Option<(&str, u32)>) -> Value {
    let mut body =
        json!({"order_id": order_id, "user_id": user, "amount": amount, "currency": "CNY"});
    if let Some((sku, quantity)) = entitlement {
        body["entitlement"] = json!({"sku": sku, "quantity": quantity});
    }
    body
}

/// The order a page would price: 1 fen for 1000 × `vip-month`, for one of the workload's buyers.
fn priced_by_page(shared: &Shared, rng: &mut fastrand::Rng, order_id: &str) -> Value {
    let victim = format!("{}-u{}", shared.run, rng.u16(..200));
    order_body(order_id, &victim, 1, Some(("vip-month", 1000)))
}

/// Whether an order's view says what `body` priced.
fn priced_as(view: &Value, body: &Value) -> bool {
    ["user_id", "amount", "entitlement"]
        .iter()
        .all(|field| view[field] == body[field])
}

/// What the attacker's page probes remember between rounds.
#[derive(Debug, Default)]
pub(super) struct Pages {
    /// Orders made for the probes so far: each takes the next number for its id.
    made: u64,
    /// Per tenant, the client secret of the attacker's latest page.
    secrets: HashMap<usize, String>,
}

impl Pages {
    /// Sends one round of `kind` through `tenant` (which has a publishable key) and records
    /// what each of its probes came to.
    pub(super) async fn probe(
        &mut self,
        shared: &Arc<Shared>,
        rng: &mut fastrand::Rng,
        kind: BoundaryKind,
        tenant: usize,
    ) {
        let judged = match kind {
            BoundaryKind::PriceFromPage => self.price_from_page(shared, rng, tenant).await,
            BoundaryKind::OrderIdSquatting => self.squat(shared, rng, tenant).await,
            BoundaryKind::ReplayAcrossKeys => self.replay(shared, rng, tenant).await,
            BoundaryKind::TokenExhaustion => self.exhaust(shared, rng, tenant).await,
            BoundaryKind::PrivateTarget | BoundaryKind::PageKey => Vec::new(),
        };
        let mut log = shared.log();
        for (what, outcome) in judged {
            log.boundary.note(kind, &what, outcome);
        }
    }

    /// A fresh order id of the probes', under the run's prefix (the audit reads it).
    fn next_id(&mut self, shared: &Shared, what: &str) -> String {
        self.made += 1;
        format!("{}-bnd-{what}-{}", shared.run, self.made)
    }

    /// A page of the attacker's own: the merchant's server makes it a small order, as a real
    /// checkout's server does, and hands it the order's client secret. `None` when no answer
    /// gave one.
    async fn own_page(
        &mut self,
        shared: &Shared,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Option<(String, String)> {
        let order_id = self.next_id(shared, "page");
        let body = order_body(
            &order_id,
            &format!("{}-atk-u", shared.run),
            rng.i64(1..100),
            None,
        );
        let secret = client_secret(&merchant_order(shared, rng, tenant, &body).await)?;
        self.secrets.insert(tenant, secret.clone());
        Some((order_id, secret))
    }

    async fn price_from_page(
        &mut self,
        shared: &Shared,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Vec<(String, Outcome)> {
        let secret = if rng.bool() {
            match self.secrets.get(&tenant).cloned() {
                Some(secret) => Some(secret),
                None => self
                    .own_page(shared, rng, tenant)
                    .await
                    .map(|(_, secret)| secret),
            }
        } else {
            None
        };
        let order_id = self.next_id(shared, "price");
        let body = priced_by_page(shared, rng, &order_id);
        let answer = as_page(
            shared,
            rng,
            tenant,
            secret.as_deref(),
            (Method::POST, "/v1/orders"),
            Some(&body),
            &[],
        )
        .await;
        let lookup = as_server(
            shared,
            rng,
            tenant,
            (Method::GET, &format!("/v1/orders/{order_id}")),
            None,
        )
        .await;
        let what = format!(
            "POST /v1/orders {} a client secret: 1 fen for 1000 × vip-month",
            if secret.is_some() { "with" } else { "without" }
        );
        vec![(what, judge_price(answer.as_ref(), lookup.as_ref()))]
    }

    async fn squat(
        &mut self,
        shared: &Shared,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Vec<(String, Outcome)> {
        let secret = if rng.bool() {
            self.secrets.get(&tenant).cloned()
        } else {
            None
        };
        // An id of the merchant's server: one it made lately, or one the workload is about to
        // make (a script's number to come; most scripts make an order).
        let made = {
            let log = shared.log();
            let ours: Vec<&String> = log
                .recent_orders
                .iter()
                .filter(|(whose, _)| *whose == tenant)
                .map(|(_, order_id)| order_id)
                .collect();
            (!ours.is_empty()).then(|| ours[rng.usize(..ours.len())].clone())
        };
        let (taken, whose) = match made {
            Some(order_id) if rng.bool() => (order_id, "one the merchant's server made"),
            _ => (
                format!(
                    "{}-o-{}",
                    shared.run,
                    shared.scripts.load(Ordering::Relaxed) + rng.u64(1..16)
                ),
                "one the workload is about to make",
            ),
        };
        let body = priced_by_page(shared, rng, &taken);
        let answer = as_page(
            shared,
            rng,
            tenant,
            secret.as_deref(),
            (Method::POST, "/v1/orders"),
            Some(&body),
            &[],
        )
        .await;
        let mut judged = vec![(
            format!("POST /v1/orders under {taken}, {whose}"),
            against(KEY_NOT_ALLOWED, answer.as_ref()),
        )];

        // A fresh id the page tries first; the merchant's server makes it after.
        let fresh = self.next_id(shared, "squat");
        let squatted = priced_by_page(shared, rng, &fresh);
        let answer = as_page(
            shared,
            rng,
            tenant,
            secret.as_deref(),
            (Method::POST, "/v1/orders"),
            Some(&squatted),
            &[],
        )
        .await;
        let body = order_body(
            &fresh,
            &format!("{}-atk-u", shared.run),
            rng.i64(1..100),
            Some(("vip-month", 1)),
        );
        let made = merchant_order(shared, rng, tenant, &body).await;
        judged.push((
            format!("POST /v1/orders under {fresh}, then the merchant's server makes it"),
            judge_squat(answer.as_ref(), &made, &body),
        ));
        judged
    }

    async fn replay(
        &mut self,
        shared: &Shared,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Vec<(String, Outcome)> {
        let mut judged = Vec::new();
        let channel = if rng.bool() { "alipay" } else { "wechat" };
        let Some((own, secret)) = self.own_page(shared, rng, tenant).await else {
            return judged;
        };
        // The merchant's server pays an order of its own under a key the page then reuses.
        let Some(theirs) = self.merchant_order_made(shared, rng, tenant).await else {
            return judged;
        };
        let key = format!("pay-{theirs}");
        let their_number = merchant_pays(shared, rng, tenant, &theirs, &key, None, channel)
            .await
            .filter(Seen::ok)
            .and_then(|answer| answer.body["payment_no"].as_str().map(str::to_owned));
        if let Some(their_number) = their_number
            && let Some(token) = page_token(shared, rng, tenant, &secret).await
        {
            let answer = as_page(
                shared,
                rng,
                tenant,
                Some(&secret),
                (Method::POST, &format!("/v1/orders/{own}/payments")),
                Some(&json!({"channel": channel})),
                &[("Idempotency-Key", &key), ("Idempotency-Token", &token)],
            )
            .await;
            if let Some(number) = answer
                .as_ref()
                .filter(|answer| answer.ok())
                .and_then(|answer| answer.body["payment_no"].as_str())
            {
                // A payment a client was answered with: the audit holds it to be stored.
                shared.log().payments.insert(number.to_owned());
            }
            judged.push((
                format!("the page pays its own order {own} under the merchant's key {key}"),
                judge_page_reuse(answer.as_ref(), &own, &their_number),
            ));
        }

        // The other way: the page's key first, on the merchant's order; then the merchant's.
        let Some(theirs) = self.merchant_order_made(shared, rng, tenant).await else {
            return judged;
        };
        let Some(token) = page_token(shared, rng, tenant, &secret).await else {
            return judged;
        };
        let key = format!("pay-{theirs}");
        let page = as_page(
            shared,
            rng,
            tenant,
            Some(&secret),
            (Method::POST, &format!("/v1/orders/{theirs}/payments")),
            Some(&json!({"channel": channel})),
            &[("Idempotency-Key", &key), ("Idempotency-Token", &token)],
        )
        .await;
        let merchant = merchant_pays(shared, rng, tenant, &theirs, &key, None, channel).await;
        judged.push((
            format!("the page sends {key} for the merchant's order {theirs}, then the merchant's server does"),
            judge_merchant_reuse(page.as_ref(), merchant.as_ref(), &theirs),
        ));
        judged
    }

    /// A fresh order of the merchant's own (no page is handed its secret); its id, `None` when
    /// no answer made it.
    async fn merchant_order_made(
        &mut self,
        shared: &Shared,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Option<String> {
        let order_id = self.next_id(shared, "shop");
        let body = order_body(
            &order_id,
            &format!("{}-atk-u", shared.run),
            rng.i64(1..100),
            None,
        );
        client_secret(&merchant_order(shared, rng, tenant, &body).await)?;
        Some(order_id)
    }

    async fn exhaust(
        &mut self,
        shared: &Arc<Shared>,
        rng: &mut fastrand::Rng,
        tenant: usize,
    ) -> Vec<(String, Outcome)> {
        let Some(key) = shared.tenants[tenant].publishable_key.clone() else {
            return Vec::new();
        };
        let Some((own, secret)) = self.own_page(shared, rng, tenant).await else {
            return Vec::new();
        };
        let first = rng.usize(..shared.bases.len());
        let mut burst = tokio::task::JoinSet::new();
        for index in 0..BURST {
            let (shared, key, secret) = (shared.clone(), key.clone(), secret.clone());
            burst.spawn(async move {
                shared
                    .send_as(
                        first + index,
                        &key,
                        Method::POST,
                        "/v1/tokens",
                        Some(&json!({})),
                        &[(CLIENT_SECRET, secret.as_str())],
                        PROBE_TIMEOUT,
                    )
                    .await
                    .map(Seen::of)
            });
        }
        let answers = burst.join_all().await;
        let server = as_server(
            shared,
            rng,
            tenant,
            (Method::POST, "/v1/tokens"),
            Some(&json!({})),
        )
        .await;
        // The merchant's server spends its token: it pays the page's order with it.
        if let Some(token) = server
            .as_ref()
            .filter(|answer| answer.status == 201)
            .and_then(|answer| answer.body["token"].as_str())
        {
            let key = format!("pay-{own}");
            let token = Some(token.to_owned());
            merchant_pays(shared, rng, tenant, &own, &key, token, "alipay").await;
        }
        vec![(
            format!(
                "{BURST} token requests at once from the page of {own}, then the merchant's \
                 server's own"
            ),
            judge_burst(&answers, server.as_ref()),
        )]
    }
}

/// A request of the page's: the tenant's publishable key, with `secret` as its order's client
/// secret when given, to a random instance.
async fn as_page(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    secret: Option<&str>,
    (method, path): (Method, &str),
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Option<Seen> {
    let key = shared.tenants[tenant].publishable_key.as_deref()?;
    let mut all = headers.to_vec();
    if let Some(secret) = secret {
        all.push((CLIENT_SECRET, secret));
    }
    let instance = rng.usize(..shared.bases.len());
    shared
        .send_as(instance, key, method, path, body, &all, PROBE_TIMEOUT)
        .await
        .map(Seen::of)
}

/// A request of the merchant's server (the tenant's secret key) to a random instance.
async fn as_server(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    (method, path): (Method, &str),
    body: Option<&Value>,
) -> Option<Seen> {
    let instance = rng.usize(..shared.bases.len());
    shared
        .send(instance, tenant, method, path, body, &[], PROBE_TIMEOUT)
        .await
        .map(Seen::of)
}

/// The merchant's server makes an order as the workload does ([`create_order`]: written down
/// as the merchant's), sent again after no answer or a 5xx: every answer until the first
/// definite one (`None`: no answer).
async fn merchant_order(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    body: &Value,
) -> Vec<Option<Seen>> {
    let instance = rng.usize(..shared.bases.len());
    let mut answers = Vec::new();
    for attempt in 0..MERCHANT_TRIES {
        let answer = create_order(shared, instance + attempt, tenant, body, 1)
            .await
            .into_iter()
            .next()
            .flatten()
            .map(Seen::of);
        let definite = answer.as_ref().is_some_and(|answer| answer.status < 500);
        answers.push(answer);
        if definite {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    answers
}

/// The client secret the merchant's creation was answered with (200 or 201).
fn client_secret(answers: &[Option<Seen>]) -> Option<String> {
    let last = answers.last()?.as_ref()?;
    if !matches!(last.status, 200 | 201) {
        return None;
    }
    last.body["client_secret"].as_str().map(str::to_owned)
}

/// A page's token for its order; `None` when none was issued.
async fn page_token(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    secret: &str,
) -> Option<String> {
    let answer = as_page(
        shared,
        rng,
        tenant,
        Some(secret),
        (Method::POST, "/v1/tokens"),
        Some(&json!({})),
        &[],
    )
    .await?;
    if answer.status != 201 {
        return None;
    }
    answer.body["token"].as_str().map(str::to_owned)
}

/// The merchant's server pays its order `order_id` under `key` as the workload does
/// ([`keyed`]: with `token`, or one of its own; sent again under the key until a final answer;
/// the answer held to its replays and the payment to the audit): the final answer, `None`
/// when none came (quiescence finishes it).
#[allow(clippy::too_many_arguments)] // one request's parts, each used once
async fn merchant_pays(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    order_id: &str,
    key: &str,
    token: Option<String>,
    channel: &str,
) -> Option<Seen> {
    let pending = Pending {
        label: format!("payment/{tenant}/{key}"),
        tenant,
        path: format!("/v1/orders/{order_id}/payments"),
        body: json!({"channel": channel}),
        key: key.to_owned(),
        token_needed: true,
        kind: PendingKind::Payment,
    };
    let (answer, _) = keyed(shared, rng, pending, token, PROBE_TIMEOUT, MERCHANT_TRIES).await;
    answer.map(Seen::of)
}

/// *Price from the page*: the page's creation must be refused 403 `key-not-allowed`, and the
/// merchant's server must not find the order (`lookup`, its read of the id) afterwards.
fn judge_price(answer: Option<&Seen>, lookup: Option<&Seen>) -> Outcome {
    if lookup.is_some_and(|lookup| lookup.status == 200) {
        return Outcome::Crossed {
            status: answer.map(|answer| answer.status),
            how: format!(
                "{}, and the order exists: the merchant's server reads it",
                answer.map_or_else(
                    || "had no answer".to_owned(),
                    |answer| format!("was answered {}", answer.describe())
                )
            ),
        };
    }
    against(KEY_NOT_ALLOWED, answer)
}

/// *Order-id squatting* on a fresh id: the page's creation refused 403 `key-not-allowed`, and
/// the merchant's own creation of `body` after it (`made`, its answers) 201 — or 200 with its
/// own order after an attempt of its own went unanswered (that attempt made it).
fn judge_squat(page: Option<&Seen>, made: &[Option<Seen>], body: &Value) -> Outcome {
    let squat = against(KEY_NOT_ALLOWED, page);
    if let Outcome::Crossed { .. } = squat {
        return squat;
    }
    let lost_before = made
        .iter()
        .rev()
        .skip(1)
        .any(|answer| answer.as_ref().is_none_or(|answer| answer.status >= 500));
    let merchant = match made.last() {
        None | Some(None) => Outcome::Unanswered,
        Some(Some(answer)) if answer.status == 201 => Outcome::Held,
        Some(Some(answer))
            if answer.status == 200 && lost_before && priced_as(&answer.body, body) =>
        {
            Outcome::Held
        }
        Some(Some(answer)) if answer.status >= 500 => Outcome::Unanswered,
        Some(Some(answer)) => Outcome::Crossed {
            status: None,
            how: format!(
                "then the merchant's server's own creation of it was answered {}, not 201{}",
                answer.describe(),
                if answer.status == 200 {
                    format!(
                        " (an order of {} fen for {})",
                        answer.body["amount"], answer.body["user_id"]
                    )
                } else {
                    String::new()
                }
            ),
        },
    };
    match (squat, merchant) {
        (_, crossed @ Outcome::Crossed { .. }) => crossed,
        (Outcome::Held, _) => Outcome::Held,
        _ => Outcome::Unanswered,
    }
}

/// *Replay across key kinds*, the page's way: the page paying its own order `own` under the key
/// of the merchant's payment `theirs` must be answered with a payment of `own` that is not
/// `theirs`.
fn judge_page_reuse(answer: Option<&Seen>, own: &str, theirs: &str) -> Outcome {
    let Some(answer) = answer else {
        return Outcome::Unanswered;
    };
    if answer.ok() {
        let number = answer.body["payment_no"].as_str();
        let order = answer.body["order_id"].as_str();
        return if number == Some(theirs) {
            Outcome::Crossed {
                status: Some(answer.status),
                how: format!(
                    "was answered {} with the merchant's payment {theirs}",
                    answer.status
                ),
            }
        } else if order != Some(own) {
            Outcome::Crossed {
                status: Some(answer.status),
                how: format!(
                    "was answered {} for order {}, not the page's own",
                    answer.status,
                    order.unwrap_or("(none)")
                ),
            }
        } else {
            Outcome::Held
        };
    }
    if answer.tells_nothing() {
        return Outcome::Unanswered;
    }
    Outcome::Crossed {
        status: Some(answer.status),
        how: format!(
            "was answered {}, not the page's own payment",
            answer.describe()
        ),
    }
}

/// *Replay across key kinds*, the merchant's way: the page's request under the key for the
/// merchant's order `order` must be 404 `not-found` (not its order), and the merchant's own
/// request under the same key after it must be its payment of `order`, not the page's 404.
fn judge_merchant_reuse(page: Option<&Seen>, merchant: Option<&Seen>, order: &str) -> Outcome {
    let page_outcome = match page {
        None => Outcome::Unanswered,
        Some(page) if page.status == 404 && page.code() == "not-found" => Outcome::Held,
        Some(page) if page.tells_nothing() => Outcome::Unanswered,
        Some(page) => {
            return Outcome::Crossed {
                status: Some(page.status),
                how: format!(
                    "the page's request for the merchant's order was answered {}, not 404 not-found",
                    page.describe()
                ),
            };
        }
    };
    let merchant_outcome = match merchant {
        None => Outcome::Unanswered,
        Some(merchant) if merchant.ok() && merchant.body["order_id"] == order => Outcome::Held,
        Some(merchant) if merchant.status >= 500 => Outcome::Unanswered,
        Some(merchant) => Outcome::Crossed {
            status: None,
            how: format!(
                "then the merchant's server's own request under the key was answered {}, not \
                 its payment of {order}",
                merchant.describe()
            ),
        },
    };
    match (page_outcome, merchant_outcome) {
        (_, crossed @ Outcome::Crossed { .. }) => crossed,
        (Outcome::Held, Outcome::Held) => Outcome::Held,
        _ => Outcome::Unanswered,
    }
}

/// *Token exhaustion*: of the page's burst at most [`PAGE_TOKENS_PER_ORDER_MAX`] issued, every
/// other 429 `too-many-tokens` or `rate-limited` with `Retry-After`; then the merchant's
/// server's own token (`server`) 201.
fn judge_burst(burst: &[Option<Seen>], server: Option<&Seen>) -> Outcome {
    let cap = usize::try_from(PAGE_TOKENS_PER_ORDER_MAX).unwrap_or(usize::MAX);
    let issued = burst
        .iter()
        .flatten()
        .filter(|answer| answer.status == 201)
        .count();
    if issued > cap {
        return Outcome::Crossed {
            status: Some(201),
            how: format!(
                "issued {issued} of {} tokens to one order's page, more than its {cap}",
                burst.len()
            ),
        };
    }
    let mut unanswered = false;
    for answer in burst {
        match answer {
            None => unanswered = true,
            Some(answer) if answer.status == 201 => {}
            Some(answer) if answer.status >= 500 => unanswered = true,
            Some(answer)
                if answer.status == 429
                    && matches!(answer.code(), "too-many-tokens" | "rate-limited")
                    && answer.retry_after => {}
            Some(answer) => {
                return Outcome::Crossed {
                    status: Some(answer.status),
                    how: format!(
                        "answered a token request of the burst {}{}, not 201 or 429 \
                         too-many-tokens / rate-limited with Retry-After",
                        answer.describe(),
                        if answer.retry_after {
                            ""
                        } else {
                            " without Retry-After"
                        }
                    ),
                };
            }
        }
    }
    match server {
        None => Outcome::Unanswered,
        Some(server) if server.status == 201 && !unanswered => Outcome::Held,
        Some(server) if server.status == 201 || server.status >= 500 => Outcome::Unanswered,
        Some(server) => Outcome::Crossed {
            status: None,
            how: format!(
                "then answered the merchant's server's own token request {}, not 201",
                server.describe()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(status: u16, body: Value) -> Seen {
        Seen {
            status,
            body,
            retry_after: status == 429,
        }
    }

    fn problem(status: u16, code: &str) -> Seen {
        seen(status, json!({"code": code}))
    }

    fn crossed(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Crossed { .. })
    }

    #[test]
    fn a_price_from_the_page_holds_only_refused_and_absent() {
        let refused = problem(403, "key-not-allowed");
        let absent = problem(404, "not-found");
        let exists = seen(200, json!({"order_id": "o"}));
        assert_eq!(judge_price(Some(&refused), Some(&absent)), Outcome::Held);
        assert_eq!(judge_price(Some(&refused), None), Outcome::Held);
        assert_eq!(judge_price(None, Some(&absent)), Outcome::Unanswered);
        assert!(crossed(&judge_price(Some(&refused), Some(&exists))));
        assert!(crossed(&judge_price(None, Some(&exists))));
        let made = seen(201, json!({"order_id": "o"}));
        assert_eq!(
            judge_price(Some(&made), Some(&exists)),
            Outcome::Crossed {
                status: Some(201),
                how: "was answered 201 , and the order exists: the merchant's server reads it"
                    .to_owned()
            }
        );
        assert!(crossed(&judge_price(
            Some(&problem(401, "client-secret-invalid")),
            Some(&absent)
        )));
    }

    #[test]
    fn a_squatted_id_holds_when_the_merchant_still_makes_its_order() {
        let body = order_body("o", "u", 50, Some(("vip-month", 1)));
        let refused = problem(403, "key-not-allowed");
        let created = seen(201, body.clone());
        assert_eq!(
            judge_squat(Some(&refused), &[Some(created.clone())], &body),
            Outcome::Held
        );
        // Its own order, its first answer lost: the merchant's attempt made it.
        let again = seen(200, body.clone());
        assert_eq!(
            judge_squat(Some(&refused), &[None, Some(again.clone())], &body),
            Outcome::Held
        );
        // 200 at once: the order was there before the merchant's server made it.
        assert!(crossed(&judge_squat(Some(&refused), &[Some(again)], &body)));
        // The page's order under the id, then the merchant's own refused as a reuse.
        let page_order = seen(200, order_body("o", "victim", 1, Some(("vip-month", 1000))));
        assert!(crossed(&judge_squat(
            Some(&refused),
            &[None, Some(page_order)],
            &body
        )));
        assert!(crossed(&judge_squat(
            Some(&refused),
            &[Some(problem(422, "order-id-reused"))],
            &body
        )));
        assert!(crossed(&judge_squat(
            Some(&seen(201, json!({}))),
            &[Some(created.clone())],
            &body
        )));
        assert_eq!(
            judge_squat(None, &[Some(created)], &body),
            Outcome::Unanswered
        );
        assert_eq!(judge_squat(Some(&refused), &[None], &body), Outcome::Held);
    }

    #[test]
    fn a_page_reusing_the_merchants_key_gets_its_own_payment_only() {
        let own = seen(201, json!({"payment_no": "P-PAGE", "order_id": "page"}));
        assert_eq!(
            judge_page_reuse(Some(&own), "page", "P-SHOP"),
            Outcome::Held
        );
        let replayed = seen(201, json!({"payment_no": "P-SHOP", "order_id": "shop"}));
        assert_eq!(
            judge_page_reuse(Some(&replayed), "page", "P-SHOP"),
            Outcome::Crossed {
                status: Some(201),
                how: "was answered 201 with the merchant's payment P-SHOP".to_owned()
            }
        );
        let elsewhere = seen(200, json!({"payment_no": "P-X", "order_id": "shop"}));
        assert!(crossed(&judge_page_reuse(
            Some(&elsewhere),
            "page",
            "P-SHOP"
        )));
        // A key the page never used, refused as reused: the scopes are one.
        assert!(crossed(&judge_page_reuse(
            Some(&problem(422, "idempotency-key-reused")),
            "page",
            "P-SHOP"
        )));
        for nothing in [
            problem(503, "database-unavailable"),
            problem(429, "rate-limited"),
            problem(409, "in-progress"),
            problem(409, "idempotency-token-invalid"),
        ] {
            assert_eq!(
                judge_page_reuse(Some(&nothing), "page", "P-SHOP"),
                Outcome::Unanswered
            );
        }
        assert_eq!(
            judge_page_reuse(None, "page", "P-SHOP"),
            Outcome::Unanswered
        );
    }

    #[test]
    fn the_merchant_reusing_a_pages_key_gets_its_payment_not_the_pages_404() {
        let not_found = problem(404, "not-found");
        let paid = seen(201, json!({"payment_no": "P1", "order_id": "shop"}));
        assert_eq!(
            judge_merchant_reuse(Some(&not_found), Some(&paid), "shop"),
            Outcome::Held
        );
        assert!(crossed(&judge_merchant_reuse(
            Some(&not_found),
            Some(&not_found),
            "shop"
        )));
        // The page paid the merchant's order.
        assert!(crossed(&judge_merchant_reuse(
            Some(&paid),
            Some(&paid),
            "shop"
        )));
        assert_eq!(
            judge_merchant_reuse(Some(&not_found), None, "shop"),
            Outcome::Unanswered
        );
        assert_eq!(
            judge_merchant_reuse(None, Some(&paid), "shop"),
            Outcome::Unanswered
        );
    }

    #[test]
    fn a_burst_holds_with_at_most_the_cap_issued_and_the_rest_told_to_wait() {
        let token = seen(201, json!({"token": "t"}));
        let full = problem(429, "too-many-tokens");
        let rated = problem(429, "rate-limited");
        let mut burst: Vec<Option<Seen>> = vec![Some(token.clone()); 5];
        burst.extend(vec![Some(full.clone()); 5]);
        burst.extend(vec![Some(rated); 2]);
        assert_eq!(judge_burst(&burst, Some(&token)), Outcome::Held);
        // The merchant's server refused its own token: the pages ate its places.
        assert!(crossed(&judge_burst(&burst, Some(&full))));
        assert_eq!(judge_burst(&burst, None), Outcome::Unanswered);
        // A sixth token.
        let mut six = burst.clone();
        six[5] = Some(token.clone());
        assert_eq!(
            judge_burst(&six, Some(&token)),
            Outcome::Crossed {
                status: Some(201),
                how: "issued 6 of 12 tokens to one order's page, more than its 5".to_owned()
            }
        );
        // A refusal without Retry-After, or of another kind.
        let mut bare = burst.clone();
        bare[6] = Some(Seen {
            retry_after: false,
            ..full
        });
        assert!(crossed(&judge_burst(&bare, Some(&token))));
        let mut other = burst.clone();
        other[7] = Some(problem(401, "client-secret-invalid"));
        assert!(crossed(&judge_burst(&other, Some(&token))));
        // A fault's: neither.
        let mut lost = burst;
        lost[8] = None;
        assert_eq!(judge_burst(&lost, Some(&token)), Outcome::Unanswered);
    }
}

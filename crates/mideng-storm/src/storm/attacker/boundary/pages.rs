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

use reqwest::Method;
use serde_json::{Value, json};

use super::{BoundaryKind, Outcome, PROBE_TIMEOUT};
use judge::{
    Seen, against, judge_burst, judge_merchant_reuse, judge_page_reuse, judge_price, judge_squat,
};

mod judge;
use crate::storm::{Pending, PendingKind, Shared, create_order, keyed};

/// Token requests a page sends at once in the exhaustion probe: past the per-order cap, not a
/// flood.
const BURST: usize = 12;
/// Times the merchant's server sends a request of its own before giving up on the round.
const MERCHANT_TRIES: usize = 3;
/// The header a page sends its order's client secret in.
const CLIENT_SECRET: &str = "Mideng-Client-Secret";
/// What refuses a publishable key making an order.
const KEY_NOT_ALLOWED: (u16, &str) = (403, "key-not-allowed");

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

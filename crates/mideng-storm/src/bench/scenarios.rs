//! The scenarios: what each client sends and what answer it expects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mideng_channel::{alipay, money};
use mideng_sim::SimConfig;
use serde_json::{Value, json};

use super::load::{Load, Outcome, Tally, drive};
use super::report::Machinery;

/// Amount of every order, fen.
const ORDER_AMOUNT_FEN: i64 = 100;
/// What a benched wallet is credited with, fen: far more than any run deducts (1 fen each).
const WALLET_FUNDS_FEN: i64 = 1_000_000_000;
/// How much of an unexpected answer goes into the report.
const ANSWER_EXCERPT_CHARS: usize = 200;

/// An answer of the service.
#[derive(Debug)]
pub(super) struct Reply {
    status: u16,
    replayed: bool,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// `Failed` with the status and the start of the body.
    fn unexpected(&self) -> Outcome {
        let text: String = String::from_utf8_lossy(&self.body)
            .chars()
            .take(ANSWER_EXCERPT_CHARS)
            .collect();
        Outcome::Failed(format!("{}: {text}", self.status))
    }

    /// `status`, marked as a replay exactly when `replayed`.
    fn expect(&self, status: u16, replayed: bool) -> Outcome {
        match (self.status == status, self.replayed, replayed) {
            (true, true, true) => Outcome::Replayed,
            (true, false, false) => Outcome::Done,
            (true, false, true) => {
                Outcome::Failed(format!("{status} without Idempotent-Replayed: true"))
            }
            (true, true, false) => {
                Outcome::Failed(format!("{status} marked as a replay on a first request"))
            }
            (false, _, _) => self.unexpected(),
        }
    }
}

/// One deployment as the clients see it.
#[derive(Clone, Debug)]
pub(super) struct Api {
    client: reqwest::Client,
    base: Arc<str>,
    api_key: Arc<str>,
    /// Whether the deployment runs the machinery (clients send keys only then).
    pub(super) machinery: Machinery,
}

impl Api {
    pub(super) fn new(
        client: reqwest::Client,
        base: &str,
        api_key: &str,
        machinery: Machinery,
    ) -> Self {
        Self {
            client,
            base: Arc::from(base),
            api_key: Arc::from(api_key),
            machinery,
        }
    }

    /// `key` when the machinery is on (with it off there is no layer to read it).
    fn key(&self, key: String) -> Option<String> {
        (self.machinery == Machinery::On).then_some(key)
    }

    async fn post(&self, path: &str, body: &Value, key: Option<&str>) -> Result<Reply, String> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&*self.api_key)
            .json(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        read(request.send().await).await
    }

    async fn notify(&self, form: String) -> Result<Reply, String> {
        let request = self
            .client
            .post(format!("{}/v1/channels/alipay/notify", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form);
        read(request.send().await).await
    }
}

async fn read(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Reply, String> {
    let response = sent.map_err(|error| format!("no answer: {error}"))?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|value| value.as_bytes() == b"true");
    let body = response
        .bytes()
        .await
        .map_err(|error| format!("{status}, body unreadable: {error}"))?;
    Ok(Reply {
        status,
        replayed,
        body: body.to_vec(),
    })
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn taken<T>(shared: Arc<Mutex<Vec<T>>>) -> Vec<T> {
    std::mem::take(&mut *locked(&shared))
}

/// Creates orders for up to `budget` (preparation, not measured): the inputs of payment
/// creation.
pub(super) async fn prepare_orders(
    api: &Api,
    concurrency: usize,
    budget: Duration,
) -> (Vec<String>, Tally) {
    let orders = Arc::new(Mutex::new(Vec::new()));
    let (shared, api) = (orders.clone(), api.clone());
    let tally = drive(concurrency, budget, move |client, iteration| {
        let (api, orders) = (api.clone(), shared.clone());
        async move {
            let order_id = format!("o-{client}-{iteration}");
            let body = json!({
                "order_id": order_id,
                "user_id": format!("u-{client}"),
                "amount": ORDER_AMOUNT_FEN,
                "currency": "CNY",
            });
            Some(match api.post("/v1/orders", &body, None).await {
                Ok(reply) if reply.status == 201 => {
                    locked(&orders).push(order_id);
                    Outcome::Done
                }
                Ok(reply) => reply.unexpected(),
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await;
    (taken(orders), tally)
}

/// A payment created by the first-time scenario.
#[derive(Clone, Debug)]
pub(super) struct Created {
    order_id: String,
    key: Option<String>,
    payment_no: String,
    amount_fen: i64,
}

/// Creates a payment (Alipay) for each prepared order, each once, under a key of its own when
/// the machinery is on. Expects 201.
pub(super) async fn create_payments(
    api: &Api,
    orders: Vec<String>,
    concurrency: usize,
    duration: Duration,
) -> (Tally, Vec<Created>) {
    let orders = Arc::new(orders);
    let next = Arc::new(AtomicUsize::new(0));
    let created = Arc::new(Mutex::new(Vec::new()));
    let (shared, api) = (created.clone(), api.clone());
    let tally = drive(concurrency, duration, move |_, _| {
        let (api, orders, next, created) =
            (api.clone(), orders.clone(), next.clone(), shared.clone());
        async move {
            let order_id = orders.get(next.fetch_add(1, Ordering::Relaxed))?.clone();
            let key = api.key(format!("pay-{order_id}"));
            let path = format!("/v1/orders/{order_id}/payments");
            let reply = match api
                .post(&path, &json!({"channel": "alipay"}), key.as_deref())
                .await
            {
                Ok(reply) => reply,
                Err(error) => return Some(Outcome::Failed(error)),
            };
            let outcome = reply.expect(201, false);
            if matches!(outcome, Outcome::Done) {
                let view = reply.json().unwrap_or_default();
                let (Some(payment_no), Some(amount_fen)) =
                    (view["payment_no"].as_str(), view["amount"].as_i64())
                else {
                    return Some(Outcome::Failed(format!("not a payment: {view}")));
                };
                locked(&created).push(Created {
                    order_id,
                    key,
                    payment_no: payment_no.to_owned(),
                    amount_fen,
                });
            }
            Some(outcome)
        }
    })
    .await;
    (tally, taken(created))
}

/// Sends the creations again, round and round. Machinery on: the same key replays the first
/// answer (201, `Idempotent-Replayed: true`). Off: the service answers the order's pending
/// payment (200, also marked `Idempotent-Replayed: true`).
pub(super) async fn create_payments_again(
    api: &Api,
    created: Arc<Vec<Created>>,
    concurrency: usize,
    duration: Duration,
) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let api = api.clone();
    drive(concurrency, duration, move |_, _| {
        let (api, created, next) = (api.clone(), created.clone(), next.clone());
        async move {
            let index = next
                .fetch_add(1, Ordering::Relaxed)
                .checked_rem(created.len())?;
            let payment = created.get(index)?;
            let path = format!("/v1/orders/{}/payments", payment.order_id);
            let body = json!({"channel": "alipay"});
            Some(match api.post(&path, &body, payment.key.as_deref()).await {
                Ok(reply) if api.machinery == Machinery::On => reply.expect(201, true),
                Ok(reply) => reply.expect(200, true),
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await
}

/// Signs, as the channel would after the buyer paid, an Alipay `TRADE_SUCCESS` notify for each
/// created payment, for up to `budget` (preparation, not measured; RSA signing is slow).
pub(super) fn sign_notifies(
    config: &SimConfig,
    created: &[Created],
    budget: Duration,
) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + budget;
    let mut forms = Vec::new();
    for payment in created {
        if Instant::now() >= deadline {
            break;
        }
        forms.push(notify_form(config, payment)?);
    }
    Ok(forms)
}

fn notify_form(config: &SimConfig, payment: &Created) -> anyhow::Result<String> {
    let now = alipay::format_timestamp(mideng::clock::now_ms());
    let amount = money::fen_to_yuan(payment.amount_fen)?;
    let fields: [(&str, String); 12] = [
        ("notify_type", "trade_status_sync".to_owned()),
        ("notify_id", format!("bench-{}", payment.payment_no)),
        ("notify_time", now.clone()),
        ("app_id", config.alipay_app_id.clone()),
        ("charset", "utf-8".to_owned()),
        ("version", "1.0".to_owned()),
        ("trade_no", format!("B{}", payment.payment_no)),
        ("out_trade_no", payment.payment_no.clone()),
        ("trade_status", alipay::TRADE_SUCCESS.to_owned()),
        ("total_amount", amount.clone()),
        ("receipt_amount", amount),
        ("gmt_payment", now),
    ];
    let content =
        alipay::notify_sign_content(fields.iter().map(|(name, value)| (*name, value.as_str())));
    let signature = config
        .alipay_gateway_key
        .sign(content.as_bytes())
        .map_err(|error| anyhow::anyhow!("signing a notify: {error}"))?;
    let mut form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    form.push(("sign", &signature));
    form.push(("sign_type", "RSA2"));
    Ok(serde_urlencoded::to_string(&form)?)
}

/// Posts the signed notifies: once each (`again` false: the payment is settled) or round and
/// round (`again` true: each is a channel's retry of a notify already processed). Expects
/// `success` either way.
pub(super) async fn callbacks(
    api: &Api,
    forms: Arc<Vec<String>>,
    again: bool,
    concurrency: usize,
    duration: Duration,
) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let api = api.clone();
    drive(concurrency, duration, move |_, _| {
        let (api, forms, next) = (api.clone(), forms.clone(), next.clone());
        async move {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let index = if again {
                index.checked_rem(forms.len())?
            } else {
                index
            };
            let form = forms.get(index)?.clone();
            Some(match api.notify(form).await {
                Ok(reply) if reply.status == 200 && reply.body == alipay::NOTIFY_ACK.as_bytes() => {
                    Outcome::Done
                }
                Ok(reply) => reply.unexpected(),
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await
}

/// Which wallets the deducts hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wallets {
    /// Client `n` deducts from wallet `w-n`.
    Distinct,
    /// Every client deducts from wallet `hot`.
    Hot,
}

impl Wallets {
    fn user(self, client: usize) -> String {
        match self {
            Wallets::Distinct => format!("w-{client}"),
            Wallets::Hot => "hot".to_owned(),
        }
    }

    /// Prefix of the order ids (and so of the keys) of its deducts.
    fn prefix(self) -> &'static str {
        match self {
            Wallets::Distinct => "d",
            Wallets::Hot => "h",
        }
    }
}

/// Credits the wallets the deducts use (preparation).
pub(super) async fn fund(api: &Api, wallets: Wallets, concurrency: usize) -> anyhow::Result<()> {
    let users: Vec<String> = match wallets {
        Wallets::Distinct => (0..concurrency)
            .map(|client| wallets.user(client))
            .collect(),
        Wallets::Hot => vec![wallets.user(0)],
    };
    for user in users {
        let reference = format!("fund-{user}");
        let body = json!({"amount": WALLET_FUNDS_FEN, "reference": reference});
        let key = api.key(reference.clone());
        let reply = api
            .post(&format!("/v1/wallets/{user}/credit"), &body, key.as_deref())
            .await
            .map_err(|error| anyhow::anyhow!(error))?;
        anyhow::ensure!(
            reply.status == 200,
            "crediting {user}: {}",
            String::from_utf8_lossy(&reply.body)
        );
    }
    Ok(())
}

/// A deduct sent by the first-time scenario.
#[derive(Clone, Debug)]
pub(super) struct Deducted {
    user: String,
    order_id: String,
    key: Option<String>,
}

/// Deducts 1 fen for a new order on every request, under a key of its own when the machinery
/// is on. Expects 200.
pub(super) async fn deduct(
    api: &Api,
    wallets: Wallets,
    load: Load,
    duration: Duration,
) -> (Tally, Vec<Deducted>) {
    let deducted = Arc::new(Mutex::new(Vec::new()));
    let (shared, api) = (deducted.clone(), api.clone());
    let tally = load
        .drive(duration, move |client, iteration| {
            let (api, deducted) = (api.clone(), shared.clone());
            async move {
                let user = wallets.user(client);
                let order_id = format!("{}-{client}-{iteration}", wallets.prefix());
                let key = api.key(format!("deduct-{order_id}"));
                let body = json!({"order_id": order_id, "amount": 1});
                let path = format!("/v1/wallets/{user}/deduct");
                Some(match api.post(&path, &body, key.as_deref()).await {
                    Ok(reply) => {
                        let outcome = reply.expect(200, false);
                        if matches!(outcome, Outcome::Done) {
                            locked(&deducted).push(Deducted {
                                user,
                                order_id,
                                key,
                            });
                        }
                        outcome
                    }
                    Err(error) => Outcome::Failed(error),
                })
            }
        })
        .await;
    (tally, taken(deducted))
}

/// Sends the deducts again, round and round. Machinery on: the key replays the first answer
/// (200, `Idempotent-Replayed: true`). Off: the ledger's one-debit-per-order constraint refuses
/// (409 `already-deducted`).
pub(super) async fn deduct_again(
    api: &Api,
    deducted: Arc<Vec<Deducted>>,
    load: Load,
    duration: Duration,
) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let api = api.clone();
    load.drive(duration, move |_, _| {
        let (api, deducted, next) = (api.clone(), deducted.clone(), next.clone());
        async move {
            let index = next
                .fetch_add(1, Ordering::Relaxed)
                .checked_rem(deducted.len())?;
            let debit = deducted.get(index)?;
            let body = json!({"order_id": debit.order_id, "amount": 1});
            let path = format!("/v1/wallets/{}/deduct", debit.user);
            Some(match api.post(&path, &body, debit.key.as_deref()).await {
                Ok(reply) if api.machinery == Machinery::On => reply.expect(200, true),
                Ok(reply)
                    if reply.status == 409
                        && reply
                            .json()
                            .is_some_and(|problem| problem["code"] == "already-deducted") =>
                {
                    Outcome::Refused
                }
                Ok(reply) => reply.unexpected(),
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await
}

//! The money lifecycle's rare paths, enumerated: every arrival order of two attempts' outcomes
//! for one order, on the real service, with the money invariants checked after each step.
//!
//! The steps are what the world can do to an order whose first attempt A is open: A is closed
//! here while its code stays payable at the channel (a local expiry), the buyer opens a
//! second attempt B (only after A is closed), the buyer pays A at the channel (a late success
//! once A is closed), the buyer pays B, a reconciliation round runs, and the merchant refunds
//! part of whatever paid the order. Every order of these six steps that keeps "A closed before
//! B opened before B paid" is run: 120 sequences, each on its own order, sixteen at a time.
//!
//! After every step, for the order: at most one PAID payment; the order is PAID (or on to a
//! refund) exactly when one payment is; every attempt the channel charged is either that
//! payment or a refund case; every notify was acknowledged (none answered "failure" for ever);
//! nothing answered 5xx. At the end, after reconciliation has refunded the cases: what the
//! channel kept for the order equals what the PAID payment kept here, to the fen.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::workers::reconcile::{ReconcileSettings, reconcile_once};
use serde_json::{Value, json};

use crate::harness::{Backend, Service, WAIT_LIMIT, unique};

const AMOUNT: i64 = 150;
/// The merchant's partial refund of the paying attempt.
const MERCHANT_REFUND: i64 = 40;
/// The attempts' expiry: past the channels' whole retry schedules (a day), so that moving the
/// simulator's clock on to a resend never expires an attempt.
const ATTEMPTS_OUTLIVE_THE_CHANNELS_RETRIES: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    CloseA,
    OpenB,
    PayA,
    PayB,
    Reconcile,
    Refund,
}

const STEPS: [Step; 6] = [
    Step::CloseA,
    Step::OpenB,
    Step::PayA,
    Step::PayB,
    Step::Reconcile,
    Step::Refund,
];

/// Every permutation of the steps with A closed before B is opened, and B opened before B is
/// paid.
fn sequences() -> Vec<Vec<Step>> {
    fn extend(prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        if prefix.len() == STEPS.len() {
            out.push(prefix.clone());
            return;
        }
        for step in STEPS {
            if prefix.contains(&step) {
                continue;
            }
            let ready = match step {
                Step::OpenB => prefix.contains(&Step::CloseA),
                Step::PayB => prefix.contains(&Step::OpenB),
                _ => true,
            };
            if ready {
                prefix.push(step);
                extend(prefix, out);
                prefix.pop();
            }
        }
    }
    let mut out = Vec::new();
    extend(&mut Vec::new(), &mut out);
    out
}

fn reconcile_now(service: &Service) -> ReconcileSettings {
    ReconcileSettings {
        min_age: Duration::ZERO,
        tenant: Some(service.tenant.clone()),
        ..ReconcileSettings::default()
    }
}

/// The attempts of one sequence.
struct Attempts {
    order_id: String,
    channels: [&'static str; 2],
    a: String,
    b: Option<String>,
}

impl Attempts {
    fn numbers(&self) -> Vec<&str> {
        std::iter::once(self.a.as_str())
            .chain(self.b.as_deref())
            .collect()
    }
}

/// Runs one sequence, the invariants checked after each step; the steps and the attempts.
async fn run(service: &Service, index: usize, steps: &[Step]) -> (Vec<Step>, Attempts) {
    let channels = if index.is_multiple_of(2) {
        ["alipay", "wechat"]
    } else {
        ["wechat", "alipay"]
    };
    let order_id = unique("lc");
    service.create_order(&order_id, "u-lc", AMOUNT).await;
    let created = service.create_payment(&order_id, channels[0]).await;
    assert_eq!(created.status, 201, "{}", created.json());
    let mut attempts = Attempts {
        order_id,
        channels,
        a: created.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned(),
        b: None,
    };
    let mut done = Vec::new();
    for step in steps {
        take(service, &mut attempts, *step).await;
        done.push(*step);
        check(service, &attempts, &done).await;
    }
    (done, attempts)
}

/// The end of the day, once every sequence has run: reconciliation rounds, one at a time as
/// the scheduled worker runs them, refund every case; then, for every order, the channel's
/// ledger equals ours. (One round at a time: sixteen sequences each looping rounds over the
/// whole tenant made the rounds themselves the load that slowed every wait on a busy machine.)
async fn end_of_day(service: &Service, mut unsettled: Vec<(Vec<Step>, Attempts)>) {
    let started = Instant::now();
    loop {
        reconcile_once(&service.state.ports, &reconcile_now(service))
            .await
            .expect("round");
        let mut still = Vec::new();
        for (steps, attempts) in unsettled {
            if !settled_ledger(service, &attempts).await {
                still.push((steps, attempts));
            }
        }
        unsettled = still;
        let Some((steps, attempts)) = unsettled.first() else {
            return;
        };
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "{steps:?}: the channel's money for {} never matched ours ({} orders unsettled)",
            attempts.order_id,
            unsettled.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn take(service: &Service, attempts: &mut Attempts, step: Step) {
    match step {
        Step::CloseA => {
            // Closed here only (an expiry seen here first): the code stays payable there.
            service
                .state
                .ports
                .store
                .payments
                .close_payment(&attempts.a, None)
                .await
                .expect("closed");
        }
        Step::OpenB => {
            let created = service
                .create_payment(&attempts.order_id, attempts.channels[1])
                .await;
            match created.status {
                201 => {
                    attempts.b = Some(
                        created.json()["payment_no"]
                            .as_str()
                            .expect("number")
                            .to_owned(),
                    );
                }
                // The order was paid meanwhile (A's late success came first).
                409 => {}
                other => panic!("opening B: {other} {}", created.json()),
            }
        }
        Step::PayA => pay(service, &attempts.a.clone()).await,
        Step::PayB => {
            if let Some(b) = attempts.b.clone() {
                pay(service, &b).await;
            }
        }
        Step::Reconcile => {
            reconcile_once(&service.state.ports, &reconcile_now(service))
                .await
                .expect("round");
        }
        Step::Refund => {
            let order = service.order(&attempts.order_id).await;
            let paid = payments(&order)
                .into_iter()
                .find(|payment| payment["status"] == "PAID");
            let target = paid
                .as_ref()
                .and_then(|payment| payment["payment_no"].as_str())
                .unwrap_or(&attempts.a)
                .to_owned();
            let answer = service
                .post(
                    &format!("/v1/payments/{target}/refunds"),
                    json!({"amount": MERCHANT_REFUND, "reason": "退货"}),
                    &[("Idempotency-Key", &unique("rk"))],
                )
                .await;
            if paid.is_some() {
                assert!(
                    matches!(answer.status, 201 | 202),
                    "refunding the paid attempt: {} {}",
                    answer.status,
                    answer.json()
                );
            } else {
                assert!(
                    (400..500).contains(&answer.status),
                    "refunding an unpaid attempt: {} {}",
                    answer.status,
                    answer.json()
                );
            }
        }
    }
}

/// The buyer pays at the channel (refused there when the trade was closed); waits until the
/// channel's notifies for it are settled.
async fn pay(service: &Service, number: &str) {
    service.pay_at_channel(number).await;
    service.settled_trade(number).await;
}

fn payments(order: &Value) -> Vec<Value> {
    order["payments"].as_array().cloned().unwrap_or_default()
}

/// Whether the channel charged this trade.
fn charged(trade: &Value) -> bool {
    matches!(
        trade["status"].as_str(),
        Some("PAID" | "FINISHED" | "REFUNDED")
    )
}

async fn has_case(service: &Service, number: &str) -> bool {
    let open = service
        .state
        .ports
        .store
        .refund_cases
        .open_cases(10_000)
        .await
        .expect("cases");
    if open.iter().any(|case| case.payment_no == number) {
        return true;
    }
    // A case that was refunded (or is being refunded) shows as the attempt's refund.
    let view = service.get(&format!("/v1/payments/{number}")).await.json();
    view["refunds"]
        .as_array()
        .is_some_and(|refunds| !refunds.is_empty())
}

async fn check(service: &Service, attempts: &Attempts, done: &[Step]) {
    let order = service.order(&attempts.order_id).await;
    let payments = payments(&order);
    let paid: Vec<&str> = payments
        .iter()
        .filter(|payment| payment["status"] == "PAID")
        .filter_map(|payment| payment["payment_no"].as_str())
        .collect();
    assert!(paid.len() <= 1, "{done:?}: two PAID payments: {order}");
    let status = order["status"].as_str().unwrap_or_default();
    if paid.is_empty() {
        assert_eq!(status, "CREATED", "{done:?}: {order}");
    } else {
        assert!(
            matches!(status, "PAID" | "REFUNDING" | "REFUNDED"),
            "{done:?}: paid, yet the order is {status}: {order}"
        );
    }
    for number in attempts.numbers() {
        // Notifies in flight (a refund's, say) are waited for, then must have been taken.
        let trade = service.settled_trade(number).await;
        if let Some(notifies) = trade["notifies"].as_array() {
            for notify in notifies {
                assert_eq!(
                    notify["state"], "acknowledged",
                    "{done:?}: a notify of {number} was not taken: {trade}"
                );
            }
        }
        if charged(&trade) && !paid.contains(&number) {
            assert!(
                has_case(service, number).await,
                "{done:?}: {number} was charged and is neither the paid attempt nor a case: {order}"
            );
        }
    }
}

/// Whether, for the order, what the channel kept equals what the PAID payment kept here, every
/// case refunded.
async fn settled_ledger(service: &Service, attempts: &Attempts) -> bool {
    let mut kept_there = 0_i64;
    for number in attempts.numbers() {
        let trade = service.sim_trade(number).await;
        if charged(&trade) {
            kept_there += trade["amount_fen"].as_i64().unwrap_or_default()
                - trade["refunded_fen"].as_i64().unwrap_or_default();
        }
    }
    let order = service.order(&attempts.order_id).await;
    let mut kept_here = 0_i64;
    for payment in payments(&order) {
        if payment["status"] != "PAID" {
            continue;
        }
        let number = payment["payment_no"].as_str().unwrap_or_default();
        let view = service.get(&format!("/v1/payments/{number}")).await.json();
        let refunded: i64 = view["refunds"]
            .as_array()
            .map(|refunds| {
                refunds
                    .iter()
                    .filter(|refund| refund["status"] == "SUCCESS")
                    .filter_map(|refund| refund["amount"].as_i64())
                    .sum()
            })
            .unwrap_or_default();
        kept_here += view["amount"].as_i64().unwrap_or_default() - refunded;
    }
    kept_there == kept_here
}

pub(crate) async fn every_arrival_order_of_two_attempts_keeps_one_charge(backend: Backend) {
    // The sequences share one simulator, whose clock [`Service::settled_trade`] moves on to a
    // notify's resend when a loaded machine answered a delivery too late (minutes, up to the
    // channels' day of retries). On a 15-minute expiry that moved every other sequence's open
    // attempt past its expiry at the channel, and the next reconciliation round closed it and
    // canceled its order: an outcome of the machine's speed. No step here is about expiry, so
    // the attempts outlive any such move.
    let service = Service::start_with(
        backend,
        PaymentSettings {
            expire_after: ATTEMPTS_OUTLIVE_THE_CHANNELS_RETRIES,
            ..PaymentSettings::default()
        },
    )
    .await;
    let sequences = sequences();
    assert_eq!(sequences.len(), 120);
    let ended: Vec<(Vec<Step>, Attempts)> =
        futures_util::stream::iter(sequences.iter().enumerate())
            .map(|(index, steps)| run(&service, index, steps))
            .buffer_unordered(16)
            .collect()
            .await;
    end_of_day(&service, ended).await;
}

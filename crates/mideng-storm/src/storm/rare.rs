//! The rare paths of the money lifecycle, taken on purpose, each counted as a source:
//!
//! - **a channel that refuses a trade's creation and makes it all the same**: the storm arms
//!   Alipay's definite refusal of the next precreate, applied anyway. The service asks the
//!   channel, finds no trade (Alipay has none before the scan) and fails the attempt; the
//!   client's retry under the same key opens a second attempt, and the buyer pays both codes —
//!   half the time with every notify of the first lost, so that only the channel's bill tells
//!   of that charge. The first charge must end as a refund case, given back;
//! - **a buyer who pays the code of an attempt the merchant closed**: the channel refuses it;
//! - **events no consumer can process**: `payment.succeeded` events whose grant the database
//!   refuses (a quantity of 0), written into the service's outbox as a faulty producer would.
//!   The consumer fails each a few times and parks it; the audit holds that every parked event
//!   is one of these, and each of these is parked.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use mideng::store::sql::{Dialect, PoolSettings, SqlConn, SqlRow, SqlStore, store_error};
use mideng_pay::domain::events::{GrantedItem, PAYMENT_SUCCEEDED, PaymentSucceeded};
use serde_json::json;

use super::WorkloadEnd;
use super::clients::Shared;

/// Orders out of a hundred whose first attempt the channel refuses and makes anyway.
pub(super) const REFUSED_PERCENT: u8 = 8;

/// The refusal the simulator answers while making the trade: a definite business failure.
const REFUSAL_CODE: &str = "ACQ.CONTEXT_INCONSISTENT";

/// Events no consumer can process, written at most per run.
pub(super) const POISON_EVENTS_MAX: u64 = 20;

/// Seconds of workload per event no consumer can process (and one at the start).
const POISON_EVERY_SECS: u64 = 30;

/// How long before the end of the workload the last one is written.
const POISON_PARKED_WITHIN: Duration = Duration::from_secs(20);

/// Arms the channel's refusal of the next Alipay trade creation, made anyway; whether it was
/// armed. Another client's creation may take it: that client's order then holds a FAILED
/// attempt nobody pays, and its retry opens another.
pub(super) async fn arm_refusal(shared: &Shared) -> bool {
    let armed = shared
        .sim(
            reqwest::Method::POST,
            "/sim/fail-next",
            json!({
                "method": "alipay.trade.precreate",
                "code": REFUSAL_CODE,
                "apply_anyway": true,
            }),
        )
        .await
        .is_some_and(|answer| answer["apply_anyway"] == true);
    if armed {
        shared.refusals_armed.fetch_add(1, Ordering::Relaxed);
        shared.count("channel refuses a creation and makes the trade");
    }
    armed
}

/// The buyer pays the code of every FAILED attempt of `order_id` (the channel made the trade
/// it refused), half the time with every notify of it lost when the run ends with the bills
/// (against a running service nothing but the notify would tell of it before the audit).
pub(super) async fn pay_failed_attempts(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    order_id: &str,
) {
    let Some(answer) = shared
        .send(
            rng.usize(..shared.bases.len()),
            tenant,
            reqwest::Method::GET,
            &format!("/v1/orders/{order_id}"),
            None,
            &[],
            Duration::from_secs(20),
        )
        .await
    else {
        return;
    };
    let view = answer.json();
    let failed: Vec<String> = view["payments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|payment| payment["status"] == "FAILED")
        .filter_map(|payment| payment["payment_no"].as_str().map(str::to_owned))
        .collect();
    for number in failed {
        shared.log().payments.insert(number.clone());
        if shared.bills_reconciled && rng.bool() {
            shared.count("every notify lost for a charged FAILED attempt");
            shared
                .sim(
                    reqwest::Method::PUT,
                    "/sim/notify-policy",
                    json!({"mode": "drop", "out_trade_no": number}),
                )
                .await;
        }
        let paid = shared
            .sim(
                reqwest::Method::POST,
                &format!("/sim/trades/{number}/pay"),
                json!({}),
            )
            .await;
        if paid.is_some_and(|paid| paid["outcome"].is_string()) {
            shared.count("buyer pays a FAILED attempt's code and the second attempt");
        }
    }
}

/// The buyer pays the code of `payment_no`, which the merchant closed: the channel must refuse.
pub(super) async fn pay_closed_code(shared: &Shared, payment_no: &str) {
    shared.count("buyer pays a closed attempt's code");
    shared
        .sim(
            reqwest::Method::POST,
            &format!("/sim/trades/{payment_no}/pay"),
            json!({}),
        )
        .await;
}

/// Runs `$run(&store)` on a store of `$url`'s dialect (one connection).
macro_rules! on_store {
    ($url:expr, $run:ident($($arg:expr),*)) => {{
        let pool = PoolSettings {
            connections_max: 1,
            ..PoolSettings::default()
        };
        let url: &str = $url;
        if url.starts_with("sqlite") {
            $run($($arg,)* &SqliteStore::connect(url, pool).await?).await
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            $run($($arg,)* &MySqlStore::connect(&url, pool).await?).await
        } else {
            $run($($arg,)* &PostgresStore::connect(url, pool).await?).await
        }
    }};
}

/// Writes an event no consumer can process into the service's outbox every
/// [`POISON_EVERY_SECS`] of the workload (at most [`POISON_EVENTS_MAX`]), until its `end`;
/// the message ids written go into the log.
pub(super) async fn write_poison_events(
    shared: &Shared,
    database_url: &str,
    end: &WorkloadEnd,
) -> anyhow::Result<()> {
    on_store!(database_url, poison_until(shared, end))
}

async fn poison_until<D: Dialect>(
    shared: &Shared,
    end: &WorkloadEnd,
    store: &SqlStore<D>,
) -> anyhow::Result<()> {
    let tenant = shared
        .tenants
        .first()
        .map(|tenant| tenant.id.clone())
        .unwrap_or_default();
    for n in 0..POISON_EVENTS_MAX {
        // Late in the run no more: each must be parked before the audit, after five failures
        // (within 15 s on a `mideng serve` process's default pauses).
        if n > 0 && Instant::now() + POISON_PARKED_WITHIN >= end.at() {
            break;
        }
        let number = format!("{}-poison-{n}", shared.run);
        let event = PaymentSucceeded {
            tenant_id: tenant.clone(),
            payment_no: number.clone(),
            order_id: number.clone(),
            user_id: format!("{}-u0", shared.run),
            amount: 100,
            currency: "CNY".to_owned(),
            channel: "alipay".to_owned(),
            channel_trade_no: number.clone(),
            paid_at_ms: 0,
            order_paid: true,
            // The grants table holds positive quantities only: the grant fails every time.
            entitlement: Some(GrantedItem {
                sku: "vip-month".to_owned(),
                quantity: 0,
            }),
        };
        let payload = serde_json::to_vec(&event)?;
        // A database fault of the schedule may refuse the write: this one is skipped.
        match enqueue(store, &number, &payload).await {
            Ok(id) => {
                shared.count("an event no consumer can process");
                shared.log().client.poisoned.insert(id);
            }
            Err(error) => {
                tracing::warn!(%error, "an event no consumer can process was not written")
            }
        }
        tokio::time::sleep(Duration::from_secs(POISON_EVERY_SECS).min(end.left())).await;
    }
    Ok(())
}

async fn enqueue<D: Dialect>(
    store: &SqlStore<D>,
    number: &str,
    payload: &[u8],
) -> anyhow::Result<String> {
    let mut connection = store
        .pool()
        .acquire()
        .await
        .map_err(store_error::<D>)
        .context("a connection for the outbox")?;
    let id =
        mideng::outbox::sql::enqueue_in::<D>(&mut connection, PAYMENT_SUCCEEDED, number, payload)
            .await?;
    Ok(id)
}

/// Waits, at most `within`, until every event no consumer can process that the storm wrote is
/// parked: a consumer slowed by the faults (a process killed, a broker failed over) may still be
/// counting their failures when the workload ends. The audit judges what is parked then.
pub(super) async fn wait_until_parked(
    shared: &Shared,
    database_url: &str,
    within: Duration,
) -> anyhow::Result<()> {
    on_store!(database_url, parked_within(shared, within))
}

async fn parked_within<D: Dialect>(
    shared: &Shared,
    within: Duration,
    store: &SqlStore<D>,
) -> anyhow::Result<()> {
    let written: Vec<String> = shared.log().client.poisoned.iter().cloned().collect();
    let until = Instant::now() + within;
    loop {
        let mut connection = store.pool().acquire().await.map_err(store_error::<D>)?;
        let parked: std::collections::HashSet<String> = connection
            .rows(
                "SELECT message_id FROM pay_event_failures WHERE status = 'PARKED'",
                &[],
            )
            .await
            .map_err(store_error::<D>)?
            .iter()
            .filter_map(|row| row.text(0).ok())
            .collect();
        drop(connection);
        if written.iter().all(|id| parked.contains(id)) || Instant::now() >= until {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

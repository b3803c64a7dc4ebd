//! The facts the audit and the report are made of, collected after quiescence: the database's
//! snapshot of this run, the channel's side of each payment (its ledger's charges and refunds,
//! its trade and the trade's refund book), what the clients were told, and the service's own
//! decision counters for the layer table.

use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use serde_json::Value;

use super::clients::Shared;
use crate::audit::{
    self, AuditFigures, ChannelFacts, ChannelRefundFact, ClientFacts, TradeFact, Violation,
    WebhookFacts,
};

/// Reads the database and the channel and checks every invariant, over this run's own ids.
pub(super) async fn audit_now(
    shared: &Shared,
    database_url: &str,
    webhooks: Option<WebhookFacts>,
) -> anyhow::Result<(Vec<Violation>, AuditFigures)> {
    let pool = PoolSettings {
        connections_max: 2,
        ..PoolSettings::default()
    };
    let snapshot = if database_url.starts_with("sqlite") {
        audit::snapshot(&SqliteStore::connect(database_url, pool).await?).await?
    } else if database_url.starts_with("mysql") || database_url.starts_with("mariadb") {
        let url = database_url.replacen("mariadb://", "mysql://", 1);
        audit::snapshot(&MySqlStore::connect(&url, pool).await?).await?
    } else {
        audit::snapshot(&PostgresStore::connect(database_url, pool).await?).await?
    };
    let tenants: HashSet<String> = shared
        .tenants
        .iter()
        .map(|tenant| tenant.id.clone())
        .collect();
    let snapshot = snapshot.of_run(&tenants, &shared.run);
    let channel = channel_facts(shared, &snapshot).await?;
    let client = {
        let log = shared.log();
        ClientFacts {
            attacked: log.attacks.victims().clone(),
            accepted_attacks: log
                .attacks
                .accepted
                .iter()
                .cloned()
                .chain(log.boundary.breaches())
                .collect(),
            payments: log.payments.iter().cloned().collect(),
            // Every order of the run is the merchant's (`create_order`): checked even when it
            // made none.
            priced: Some(log.client.priced.clone().unwrap_or_default()),
            parked_checked: webhooks.is_some(),
            webhooks,
            ..log.client.clone()
        }
    };
    Ok(audit::check(&snapshot, &channel, &client))
}

/// The channel's side of every payment the database knows.
async fn channel_facts(
    shared: &Shared,
    snapshot: &audit::Snapshot,
) -> anyhow::Result<ChannelFacts> {
    let ledger = shared
        .sim(reqwest::Method::GET, "/sim/ledger", Value::Null)
        .await
        .context("the simulator's ledger")?;
    // This run's trades: those its clients were told of and those its orders hold (a simulator
    // the storm did not start may have others).
    let mut ours: HashSet<String> = shared.log().payments.clone();
    ours.extend(
        snapshot
            .payments
            .iter()
            .map(|payment| payment.payment_no.clone()),
    );
    let mut facts = ChannelFacts::default();
    for entry in ledger["entries"].as_array().into_iter().flatten() {
        let (Some(number), Some(amount)) =
            (entry["out_trade_no"].as_str(), entry["amount_fen"].as_i64())
        else {
            continue;
        };
        if !ours.contains(number) {
            continue;
        }
        let movements = match entry["kind"].as_str() {
            Some("charge") => &mut facts.charges,
            Some("refund") => &mut facts.refunded,
            _ => continue,
        };
        movements.entry(number.to_owned()).or_default().push(amount);
    }
    for payment in &snapshot.payments {
        let trade = shared
            .sim(
                reqwest::Method::GET,
                &format!("/sim/trades/{}", payment.payment_no),
                Value::Null,
            )
            .await
            .unwrap_or(Value::Null);
        if let Some(status) = trade["status"].as_str() {
            let refunds = trade["refunds"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|refund| ChannelRefundFact {
                    out_refund_no: refund["out_refund_no"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    amount: refund["amount_fen"].as_i64().unwrap_or(0),
                    status: refund["status"].as_str().unwrap_or_default().to_owned(),
                })
                .collect();
            facts.trades.insert(
                payment.payment_no.clone(),
                TradeFact {
                    status: status.to_owned(),
                    exists: trade["exists_at_channel"].as_bool().unwrap_or(true),
                    refunded_fen: trade["refunded_fen"].as_i64().unwrap_or(0),
                    refunds,
                },
            );
        }
    }
    Ok(facts)
}

/// Outcomes that are a first arrival let through, not a duplicate caught.
const FIRST_ARRIVALS: [&str; 22] = [
    "off",
    "proceed",
    "no_key",
    "stored",
    "token_consumed",
    "acquired",
    "inserted",
    "created",
    "credited",
    "debited",
    "granted",
    "nothing_to_grant",
    "paid",
    "closed",
    "acknowledged",
    // A refund's amount reserved on its payment, and its first move (by the channel's answer,
    // its notify or reconciliation); a deduction's first reversal.
    "reserved",
    "refund_success",
    "refund_closed",
    "refund_abnormal",
    "refund_processing",
    "refund_settled",
    "reversed",
];

/// The service's decision counters, by layer: what each layer caught in this process.
pub(super) fn layers(metrics: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut layers: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        // Counters render as whole numbers.
        let Ok(count) = value.parse::<u64>() else {
            continue;
        };
        let label = |name: &str| {
            let marker = format!("{name}=\"");
            series
                .split_once(&marker)
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(value, _)| value.to_owned())
        };
        let (layer, outcome) = if series.starts_with("mideng_service_decisions_total{") {
            let (Some(layer), Some(operation), Some(outcome)) =
                (label("layer"), label("operation"), label("outcome"))
            else {
                continue;
            };
            (layer, format!("{operation}:{outcome}"))
        } else if series.starts_with("mideng_idempotency_decisions_total{") {
            let (Some(operation), Some(decision)) = (label("operation"), label("decision")) else {
                continue;
            };
            let layer = if decision.starts_with("token_") {
                "token"
            } else {
                "key"
            };
            (layer.to_owned(), format!("{operation}:{decision}"))
        } else {
            continue;
        };
        // Only what a layer stopped or settled, not the first arrivals that it let through.
        let first_arrival = FIRST_ARRIVALS
            .iter()
            .any(|first| outcome.rsplit(':').next() == Some(*first));
        let found_by_reconciliation =
            layer == "reconciliation" && !outcome.ends_with("left_pending");
        if first_arrival && !found_by_reconciliation || outcome.ends_with("left_pending") {
            continue;
        }
        if count > 0 {
            *layers.entry(layer).or_default().entry(outcome).or_default() += count;
        }
    }
    layers
}

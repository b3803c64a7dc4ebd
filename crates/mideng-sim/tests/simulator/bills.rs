//! The daily bills through the service's adapters: every charge and refund of the ledger is on
//! its day's bill, read back to the fen; a bill not yet published is "not yet"; a download is
//! served only to the merchant that asked and matches its announced hash.

use std::collections::BTreeMap;

use mideng_channel::adapter::{Channel, RefundTrade};
use mideng_channel::bill::{BillDate, BillEntryKind, wechat_hash};
use serde_json::Value;

use crate::adapters::{alipay, trade, wechat};
use crate::harness::{Merchant, TestSim, config, merchant_key, wall_clock_ms};

fn refund(out_trade_no: &str, out_refund_no: &str, refund_fen: i64) -> RefundTrade {
    RefundTrade {
        out_trade_no: out_trade_no.to_owned(),
        out_refund_no: out_refund_no.to_owned(),
        refund_fen,
        total_fen: 46000,
        reason: String::new(),
    }
}

/// What the ledger says moved on `channel`, by Beijing day: (kind, out_trade_no, refund
/// number, fen), sorted.
type Moves = BTreeMap<BillDate, Vec<(BillEntryKind, String, Option<String>, i64)>>;

async fn ledger_moves(sim: &TestSim, channel: &str) -> Moves {
    let (_, ledger) = sim.control(reqwest::Method::GET, "/sim/ledger", None).await;
    let mut moves = Moves::new();
    for entry in ledger["entries"].as_array().expect("entries") {
        if entry["channel"] != channel {
            continue;
        }
        let kind = if entry["kind"] == "charge" {
            BillEntryKind::Charge
        } else {
            BillEntryKind::Refund
        };
        let date = BillDate::containing(entry["at_ms"].as_i64().expect("time")).expect("date");
        moves.entry(date).or_default().push((
            kind,
            entry["out_trade_no"].as_str().expect("number").to_owned(),
            entry["out_refund_no"].as_str().map(str::to_owned),
            entry["amount_fen"].as_i64().expect("amount"),
        ));
    }
    for day in moves.values_mut() {
        day.sort();
    }
    moves
}

async fn bill_moves(channel: &dyn Channel, dates: impl Iterator<Item = BillDate>) -> Moves {
    let mut moves = Moves::new();
    for date in dates {
        let bill = channel
            .bill(date)
            .await
            .expect("bill")
            .expect("published as the day runs");
        assert_eq!(bill.date, date);
        let mut day: Vec<_> = bill
            .entries
            .iter()
            .map(|entry| {
                assert!(!entry.channel_trade_no.is_empty());
                (
                    entry.kind,
                    entry.out_trade_no.clone(),
                    entry.out_refund_no.clone(),
                    entry.amount_fen,
                )
            })
            .collect();
        day.sort();
        moves.insert(date, day);
    }
    moves
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_movement_of_the_ledger_is_on_its_days_bill() {
    let sim = TestSim::start(1).await;
    let alipay_merchant = Merchant::alipay_acknowledging().await;
    let wechat_merchant = Merchant::wechat_acknowledging().await;
    let channels: [(&str, Box<dyn Channel>, &str); 2] = [
        ("alipay", alipay(&sim, &alipay_merchant), "BA"),
        ("wechat", wechat(&sim, &wechat_merchant), "BW"),
    ];
    for (_, channel, prefix) in &channels {
        for index in 1..=3 {
            let number = format!("{prefix}{index}");
            channel.create_trade(&trade(&number)).await.expect("create");
            if index < 3 {
                sim.pay(&number).await;
            }
        }
        // Two partial refunds of the first trade, one of them asked twice: one movement each.
        let first = format!("{prefix}1");
        for (number, fen) in [("R1", 100), ("R1", 100), ("R2", 250)] {
            channel
                .refund(&refund(&first, &format!("{prefix}-{number}"), fen))
                .await
                .expect("refund");
        }
    }
    // WeChat Pay refunds end after their processing time on the channel clock.
    sim.advance(10).await;
    for (name, channel, _) in &channels {
        let ledger = ledger_moves(&sim, name).await;
        let on_bills = bill_moves(channel.as_ref(), ledger.keys().copied()).await;
        assert_eq!(on_bills, ledger, "{name}");
        let all: Vec<_> = ledger.values().flatten().collect();
        assert_eq!(
            all.iter()
                .filter(|(kind, ..)| *kind == BillEntryKind::Charge)
                .count(),
            2,
            "{name}: the unpaid trade moved nothing"
        );
        assert_eq!(
            all.iter()
                .filter(|(kind, ..)| *kind == BillEntryKind::Refund)
                .map(|(.., fen)| fen)
                .sum::<i64>(),
            350,
            "{name}"
        );
    }
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bill_is_published_the_next_morning_and_downloaded_only_as_announced() {
    let mut faithful = config(1);
    faithful.bills_as_the_day_runs = false;
    let sim = TestSim::start_with(faithful).await;
    let merchant = Merchant::wechat_acknowledging().await;
    let today = BillDate::containing(sim.simulator.now_ms()).expect("today");
    for channel in [alipay(&sim, &merchant), wechat(&sim, &merchant)] {
        assert_eq!(
            channel.bill(today).await.expect("an answer"),
            None,
            "today's bill is not out yet"
        );
    }
    sim.stop().await;

    // Published as the day runs: the announced hash is the file's, the download needs the
    // merchant's signature, and the day with no movement has no statement.
    let sim = TestSim::start(1).await;
    let channel = wechat(&sim, &merchant);
    channel.create_trade(&trade("BH1")).await.expect("create");
    sim.pay("BH1").await;
    let today = BillDate::containing(sim.simulator.now_ms()).expect("today");
    let answer = sim
        .wechat(
            reqwest::Method::GET,
            &format!("/v3/bill/tradebill?bill_date={today}&bill_type=ALL"),
            None,
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let url = answer.json["download_url"]
        .as_str()
        .expect("url")
        .to_owned();
    let path = url.trim_start_matches(&sim.base).to_owned();
    let unsigned = reqwest::get(&url).await.expect("answer");
    assert_eq!(unsigned.status(), 401, "a download is signed");
    let file = sim
        .wechat_at(
            reqwest::Method::GET,
            &path,
            None,
            wall_clock_ms() / 1000,
            merchant_key(),
        )
        .await;
    assert_eq!(file.status, 200, "{}", file.body);
    assert!(file.body.contains("BH1"), "{}", file.body);
    assert_eq!(
        Value::String(wechat_hash(file.body.as_bytes())),
        answer.json["hash_value"],
        "the file is the one announced"
    );
    let yesterday = today.previous().expect("yesterday");
    let nothing = sim
        .wechat(
            reqwest::Method::GET,
            &format!("/v3/bill/tradebill?bill_date={yesterday}"),
            None,
        )
        .await;
    assert_eq!(
        (nothing.status, nothing.json["code"].as_str()),
        (400, Some("NO_STATEMENT_EXIST"))
    );
    let refused = sim
        .wechat(
            reqwest::Method::GET,
            &format!("/v3/bill/tradebill?bill_date={today}&bill_date={today}"),
            None,
        )
        .await;
    assert_eq!(refused.status, 400, "a parameter given twice is refused");
    sim.stop().await;
}

//! Reconciliation against the channels' daily bills: every line of a day's bill matched to our
//! payment or refund of its number, every PAID payment and successful refund of that day
//! looked for on the bill, and what disagrees kept as a case (the rules:
//! [`crate::domain::bill`]).
//!
//! A charge we never heard of — a payment CLOSED or FAILED here, every notify lost — is settled
//! by the same success flow as a notify: the payment becomes PAID, or, when the order has
//! another PAID payment or was canceled, its charge becomes a refund case that the automatic
//! refund worker pays back. A charge that is a refund case already (of the line's amount)
//! matches that case. Everything else is kept OPEN for a person, with its evidence.
//!
//! A run is idempotent: cases are named by channel, day, kind and number and recorded once, the
//! success flow is a compare-and-set, and a line that matches on a later run marks its open
//! `REFUND_NOT_SETTLED` case repaired. Every instance may run the daily job; a lock per channel
//! and day keeps them from doing the same work at once (a run waits up to 30 s for another
//! run of the same bill, then reports busy).

use std::collections::HashSet;
use std::time::Duration;

use mideng::Name;
use mideng::StoreError;
use mideng::clock;
use mideng::state::StateMachine;
use mideng_channel::ChannelKind;
use mideng_channel::adapter::{ChannelError, Payment as ChannelPayment, TradeState};
use mideng_channel::bill::{Bill, BillDate, BillEntry, BillEntryKind};
use serde::Serialize;

use crate::domain::bill::{
    BillCase, BillCaseKind, BillCaseStatus, ChargeVerdict, case_id, judge_charge, judge_refund,
};
use crate::domain::payment::{Payment, PaymentStatus};
use crate::flows::order_lock::{lock_order, unlock};
use crate::flows::payment::{OnClose, Settled, close_sibling, settle};
use crate::flows::{Ports, decision};
use crate::store::SuccessOutcome;

/// The decision log's operation name.
const OPERATION: &str = "bill";
/// Page size of the other direction's scans.
const PAGE: u32 = 500;
/// How long one channel's run of one day may hold its lock.
const LOCK_TTL: Duration = Duration::from_secs(600);
/// How long a run waits for another run of the same bill to end.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// On a day still running, how long before the bill was asked for a movement must have been
/// stamped to be expected on it: the channels' stamps are whole seconds (a refund made 0.9 s
/// after the ask is stamped before it), and their clock and ours may differ by a little more.
/// A complete day's bill, asked for after the day, is not affected.
const ASK_MARGIN_MS: i64 = 3_000;

/// What one channel's bill of one day came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BillReport {
    /// `alipay` or `wechat`.
    pub channel: String,
    /// `yyyy-MM-dd`.
    pub date: String,
    /// Whether the channel has published the bill (if not, nothing else was looked at).
    pub published: bool,
    /// Lines on the bill.
    pub lines: u64,
    /// Lines that matched ours to the fen.
    pub matched: u64,
    /// Charges we had not recorded, settled now by the success flow (PAID, or a refund case
    /// that the automatic refunds give back). Each is also a disagreement, with its case
    /// marked repaired.
    pub repaired: u64,
    /// Cases this run recorded (a case found before is not counted again).
    pub cases_found: u64,
    /// Lines and records in disagreement this run, new or known: each is a case.
    pub disagreements: u64,
    /// The bill's charges and refunds, in fen.
    pub charged_fen: i64,
    /// See `charged_fen`.
    pub refunded_fen: i64,
    /// The disagreements this run left open, as `KIND number: evidence`: the first
    /// [`SHOWN_OPEN`] of them (all are cases, on the console).
    pub open: Vec<String>,
}

/// How many open disagreements a report names.
pub const SHOWN_OPEN: usize = 20;

/// Why a run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BillRunError {
    /// The channel is not configured.
    #[error("channel {0} is not configured")]
    NotConfigured(&'static str),
    /// Another instance is reconciling this channel and day.
    #[error("another instance is reconciling this bill")]
    Busy,
    /// The channel did not give a readable bill (ask again later).
    #[error("channel: {0}")]
    Channel(#[from] ChannelError),
    /// The database failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Reconciles `channel`'s bill of `date`.
pub async fn reconcile_bill(
    ports: &Ports,
    channel: ChannelKind,
    date: BillDate,
) -> Result<BillReport, BillRunError> {
    let adapter = ports
        .channels
        .get(channel)
        .ok_or(BillRunError::NotConfigured(channel.as_str()))?;
    let mut report = BillReport {
        channel: channel.as_str().to_owned(),
        date: date.to_string(),
        ..BillReport::default()
    };
    // What the bill can hold: a day still running (a channel that publishes as the day runs)
    // holds what happened before it was asked for, and nothing after.
    let asked_at_ms = ports.clock.now_ms();
    let Some(bill) = adapter.bill(date).await? else {
        return Ok(report);
    };
    report.published = true;
    let name = Name::parse(&format!("bill:{}:{date}", channel.as_str()))
        .map_err(|error| StoreError::Corrupt(error.to_string()))?;
    // Another run of the same bill (another instance, or a person) ends first; past the wait,
    // this one gives up rather than queue behind a stuck holder.
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    let guard = loop {
        match ports.locks.try_acquire(&name, LOCK_TTL).await {
            Ok(Some(guard)) => break Some(guard),
            Ok(None) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(None) => return Err(BillRunError::Busy),
            // Without the lock store the run is still idempotent, only possibly repeated.
            Err(_) => break None,
        }
    };
    let outcome = match_bill(ports, channel, &bill, asked_at_ms, &mut report).await;
    if let Some(guard) = guard {
        let _ = ports.locks.release(&guard).await;
    }
    outcome?;
    tracing::info!(
        channel = channel.as_str(), %date, lines = report.lines, matched = report.matched,
        repaired = report.repaired, cases_found = report.cases_found,
        disagreements = report.disagreements, "bill reconciled"
    );
    Ok(report)
}

async fn match_bill(
    ports: &Ports,
    channel: ChannelKind,
    bill: &Bill,
    asked_at_ms: i64,
    report: &mut BillReport,
) -> Result<(), StoreError> {
    report.lines = u64::try_from(bill.entries.len()).unwrap_or(u64::MAX);
    report.charged_fen = bill.total_fen(BillEntryKind::Charge).unwrap_or(i64::MAX);
    report.refunded_fen = bill.total_fen(BillEntryKind::Refund).unwrap_or(i64::MAX);
    let mut cases = Cases {
        ports,
        channel,
        date: bill.date,
        report,
    };
    for entry in &bill.entries {
        match entry.kind {
            BillEntryKind::Charge => cases.charge(entry).await?,
            BillEntryKind::Refund => cases.refund(entry).await?,
        }
    }
    cases.missing_from_bill(bill, asked_at_ms).await
}

/// One run's case keeping.
struct Cases<'a> {
    ports: &'a Ports,
    channel: ChannelKind,
    date: BillDate,
    report: &'a mut BillReport,
}

/// A case about to be recorded.
struct Found<'a> {
    kind: BillCaseKind,
    reference: &'a str,
    tenant_id: Option<&'a str>,
    ours_fen: Option<i64>,
    billed_fen: Option<i64>,
    status: BillCaseStatus,
    detail: String,
}

impl Cases<'_> {
    /// Records `found` as a case (once: a later run finds it known); whether it is new.
    async fn keep(&mut self, found: Found<'_>) -> Result<bool, StoreError> {
        let now_ms = self.ports.clock.now_ms();
        let case = BillCase {
            case_id: case_id(self.channel, self.date, found.kind, found.reference),
            channel: self.channel.as_str().to_owned(),
            bill_date: self.date.to_string(),
            kind: found.kind,
            reference: found.reference.to_owned(),
            tenant_id: found.tenant_id.map(str::to_owned),
            ours_fen: found.ours_fen,
            billed_fen: found.billed_fen,
            status: found.status,
            detail: found.detail,
            resolution: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        };
        self.report.disagreements += 1;
        if case.status == BillCaseStatus::Open && self.report.open.len() < SHOWN_OPEN {
            self.report.open.push(format!(
                "{} {}: {}",
                case.kind.as_str(),
                case.reference,
                case.detail
            ));
        }
        let new = self.ports.store.bill_cases.record(&case).await?;
        if new {
            self.report.cases_found += 1;
        }
        decision(
            "bill",
            OPERATION,
            found.tenant_id.unwrap_or("-"),
            found.reference,
            found.kind.as_str(),
        );
        Ok(new)
    }

    fn matched(&mut self, tenant_id: &str, reference: &str) {
        self.report.matched += 1;
        decision("bill", OPERATION, tenant_id, reference, "matched");
    }

    async fn charge(&mut self, entry: &BillEntry) -> Result<(), StoreError> {
        let ours = self
            .ports
            .store
            .payments
            .payment(&entry.out_trade_no)
            .await?
            // A number of ours on the other channel is not this line's payment.
            .filter(|payment| payment.channel == self.channel);
        let verdict = judge_charge(entry, ours.as_ref());
        let case = |kind, detail: String| Found {
            kind,
            reference: &entry.out_trade_no,
            tenant_id: ours.as_ref().map(|payment| payment.tenant_id.as_str()),
            ours_fen: ours.as_ref().map(|payment| payment.amount.fen()),
            billed_fen: Some(entry.amount_fen),
            status: BillCaseStatus::Open,
            detail,
        };
        match (verdict, ours.as_ref()) {
            (ChargeVerdict::Matched, Some(payment)) => {
                self.matched(&payment.tenant_id, &payment.payment_no);
                Ok(())
            }
            // A charge not kept here that is already a refund case of that amount is
            // accounted for: the line matches the case (its refund is on a later bill).
            (ChargeVerdict::Repair, Some(payment))
                if payment.status != PaymentStatus::Pending
                    && self
                        .ports
                        .store
                        .refund_cases
                        .case_of(&payment.payment_no)
                        .await?
                        .is_some_and(|case| case.amount_fen == entry.amount_fen) =>
            {
                self.matched(&payment.tenant_id, &payment.payment_no);
                Ok(())
            }
            (ChargeVerdict::Repair, Some(payment)) => self.repair(entry, payment).await,
            (ChargeVerdict::Case(kind), _) => {
                let detail = match kind {
                    BillCaseKind::UnknownCharge => format!(
                        "the channel charged {} fen (trade {}) for a payment number we do not have",
                        entry.amount_fen, entry.channel_trade_no
                    ),
                    _ => format!(
                        "the channel charged {} fen (trade {}), our payment is of {} fen",
                        entry.amount_fen,
                        entry.channel_trade_no,
                        ours.as_ref().map_or(0, |payment| payment.amount.fen())
                    ),
                };
                self.keep(case(kind, detail)).await.map(drop)
            }
            // The rule judges `None` as a case; nothing else is left.
            (ChargeVerdict::Matched | ChargeVerdict::Repair, None) => Ok(()),
        }
    }

    /// A charge we did not record as PAID: the success flow, as for a notify.
    async fn repair(&mut self, entry: &BillEntry, payment: &Payment) -> Result<(), StoreError> {
        let paid = ChannelPayment {
            channel_trade_no: entry.channel_trade_no.clone(),
            amount_fen: entry.amount_fen,
            paid_at_ms: entry.at_ms,
        };
        let was = payment.status;
        // Under the order's lock like every other writer of the order; when it stays busy the
        // success flow goes on under the database's row lock and compare-and-set alone (the
        // channel has settled this charge: nothing is left to wait for, as for a resent notify).
        let locked = lock_order(self.ports, OPERATION, &payment.tenant_id, &payment.order_id).await;
        let settled = settle(
            self.ports,
            payment,
            TradeState::Paid(paid),
            OnClose::CancelOrder,
            locked.fence(),
        )
        .await;
        unlock(self.ports, locked).await;
        let settled = settled?;
        let (status, detail) = match settled {
            Settled::Paid(SuccessOutcome::Paid { open_sibling, .. }) => {
                if let Some(sibling) = open_sibling {
                    close_sibling(self.ports, &payment.tenant_id, &sibling).await;
                }
                (
                    BillCaseStatus::Repaired,
                    format!(
                        "charged {} fen (trade {}) while {} here, every notify lost: the success flow made it PAID",
                        entry.amount_fen,
                        entry.channel_trade_no,
                        was.as_str()
                    ),
                )
            }
            Settled::Paid(SuccessOutcome::Refunding { kind, .. }) => (
                BillCaseStatus::Repaired,
                format!(
                    "charged {} fen (trade {}) while {} here: recorded as a refund case ({})",
                    entry.amount_fen,
                    entry.channel_trade_no,
                    was.as_str(),
                    kind.as_str()
                ),
            ),
            Settled::Paid(SuccessOutcome::AlreadyPaid) => {
                self.matched(&payment.tenant_id, &payment.payment_no);
                return Ok(());
            }
            other => (
                BillCaseStatus::Open,
                format!(
                    "charged {} fen (trade {}) while {} here, and the success flow answered {other:?}",
                    entry.amount_fen,
                    entry.channel_trade_no,
                    was.as_str()
                ),
            ),
        };
        let repaired = status == BillCaseStatus::Repaired;
        let new = self
            .keep(Found {
                kind: BillCaseKind::ChargedNotPaid,
                reference: &payment.payment_no,
                tenant_id: Some(&payment.tenant_id),
                ours_fen: Some(payment.amount.fen()),
                billed_fen: Some(entry.amount_fen),
                status,
                detail,
            })
            .await?;
        // Repaired by this run: a later run finds the refund case known, and it stays a
        // disagreement of the day (the charge is not ours to keep).
        if repaired && new {
            self.report.repaired += 1;
        }
        Ok(())
    }

    async fn refund(&mut self, entry: &BillEntry) -> Result<(), StoreError> {
        let number = entry.out_refund_no.as_deref().unwrap_or_default();
        let ours = self
            .ports
            .store
            .refunds
            .refund(number)
            .await?
            .filter(|refund| refund.channel == self.channel.as_str());
        let Some(kind) = judge_refund(entry, ours.as_ref()) else {
            if let Some(refund) = &ours {
                self.matched(&refund.tenant_id, &refund.refund_no);
                // A refund found unsettled by an earlier run is settled now.
                let earlier = case_id(
                    self.channel,
                    self.date,
                    BillCaseKind::RefundNotSettled,
                    number,
                );
                self.ports
                    .store
                    .bill_cases
                    .settle(
                        &earlier,
                        BillCaseStatus::Repaired,
                        "the refund is SUCCESS here now: matched on a later run",
                    )
                    .await?;
            }
            return Ok(());
        };
        let detail = match &ours {
            None => format!(
                "the channel refunded {} fen of payment {} under a refund number we do not have",
                entry.amount_fen, entry.out_trade_no
            ),
            Some(refund) => format!(
                "the channel refunded {} fen of payment {}; our refund is {} fen of {}, {}",
                entry.amount_fen,
                entry.out_trade_no,
                refund.amount_fen,
                refund.payment_no,
                refund.status.as_str()
            ),
        };
        self.keep(Found {
            kind,
            reference: number,
            tenant_id: ours.as_ref().map(|refund| refund.tenant_id.as_str()),
            ours_fen: ours.as_ref().map(|refund| refund.amount_fen),
            billed_fen: Some(entry.amount_fen),
            status: BillCaseStatus::Open,
            detail,
        })
        .await
        .map(drop)
    }

    /// The other direction: our PAID payments and successful refunds of the day that the bill
    /// does not show — of the day up to when the bill was asked for, for a day still running:
    /// a refund made while this run goes on (an automatic refund of a case the run itself
    /// found, say) is on a later bill, not missing from this one. The channels stamp their
    /// movements to the second (Alipay's `gmt_refund_pay`, WeChat Pay's `success_time`), and
    /// their clock is not ours: what they stamped within [`ASK_MARGIN_MS`] of the ask may have
    /// happened after it, and waits for the complete day's bill too.
    async fn missing_from_bill(&mut self, bill: &Bill, asked_at_ms: i64) -> Result<(), StoreError> {
        let before_the_ask = asked_at_ms.saturating_sub(ASK_MARGIN_MS);
        let (from, to) = (self.date.start_ms(), self.date.end_ms().min(before_the_ask));
        let channel = self.channel.as_str();
        let billed = |kind| -> HashSet<&str> {
            bill.entries
                .iter()
                .filter(|entry| entry.kind == kind)
                .map(|entry| match kind {
                    BillEntryKind::Charge => entry.out_trade_no.as_str(),
                    BillEntryKind::Refund => entry.out_refund_no.as_deref().unwrap_or_default(),
                })
                .collect()
        };
        let charges = billed(BillEntryKind::Charge);
        let refunds = billed(BillEntryKind::Refund);
        let mut after: Option<(i64, String)> = None;
        loop {
            let cursor = after.as_ref().map(|(at, no)| (*at, no.as_str()));
            let page = self
                .ports
                .store
                .payments
                .paid_between(channel, from, to, cursor, PAGE)
                .await?;
            for payment in &page {
                if !charges.contains(payment.payment_no.as_str()) {
                    self.keep(Found {
                        kind: BillCaseKind::PaidNotBilled,
                        reference: &payment.payment_no,
                        tenant_id: Some(&payment.tenant_id),
                        ours_fen: Some(payment.amount.fen()),
                        billed_fen: None,
                        status: BillCaseStatus::Open,
                        detail: format!(
                            "PAID here ({} fen, trade {}), not on the channel's bill",
                            payment.amount.fen(),
                            payment.channel_trade_no.as_deref().unwrap_or("-")
                        ),
                    })
                    .await?;
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => {
                    after = Some((last.paid_at_ms.unwrap_or(from), last.payment_no.clone()));
                }
                _ => break,
            }
        }
        let mut after: Option<(i64, String)> = None;
        loop {
            let cursor = after.as_ref().map(|(at, no)| (*at, no.as_str()));
            let page = self
                .ports
                .store
                .refunds
                .succeeded_between(channel, from, to, cursor, PAGE)
                .await?;
            for refund in &page {
                if !refunds.contains(refund.refund_no.as_str()) {
                    self.keep(Found {
                        kind: BillCaseKind::RefundNotBilled,
                        reference: &refund.refund_no,
                        tenant_id: Some(&refund.tenant_id),
                        ours_fen: Some(refund.amount_fen),
                        billed_fen: None,
                        status: BillCaseStatus::Open,
                        detail: format!(
                            "refund of {} fen of payment {} SUCCESS here, not on the channel's bill",
                            refund.amount_fen, refund.payment_no
                        ),
                    })
                    .await?;
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE as usize => {
                    after = Some((last.refunded_at_ms.unwrap_or(from), last.refund_no.clone()));
                }
                _ => break,
            }
        }
        Ok(())
    }
}

/// When the daily job runs, and for which channels.
#[derive(Clone, Debug)]
pub struct BillSettings {
    /// How long after a day ends (Beijing time) its bills are asked for: after both channels
    /// publish (Alipay from 09:00, WeChat Pay from 10:00).
    pub after_day_end: Duration,
    /// How often the job looks whether a day is due (and retries an unpublished bill).
    pub interval: Duration,
}

impl Default for BillSettings {
    fn default() -> Self {
        Self {
            after_day_end: Duration::from_secs(10 * 3600 + 30 * 60),
            interval: Duration::from_secs(15 * 60),
        }
    }
}

/// The daily job: once yesterday's bills are due, reconciles them on every configured channel,
/// once per day and channel per instance (a channel that has not published, or failed, is
/// tried again next round), until `stop` turns true.
pub async fn run(
    ports: Ports,
    settings: BillSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut done: HashSet<(ChannelKind, BillDate)> = HashSet::new();
    loop {
        let now_ms = ports.clock.now_ms();
        let due = BillDate::containing(now_ms)
            .and_then(BillDate::previous)
            .filter(|day| {
                now_ms
                    >= day
                        .end_ms()
                        .saturating_add(clock::duration_ms(settings.after_day_end))
            });
        if let Some(day) = due {
            done.retain(|(_, date)| *date >= day);
            for channel in [ChannelKind::Alipay, ChannelKind::Wechat] {
                if ports.channels.get(channel).is_none() || done.contains(&(channel, day)) {
                    continue;
                }
                match reconcile_bill(&ports, channel, day).await {
                    Ok(report) if report.published => {
                        done.insert((channel, day));
                    }
                    Ok(_) => {
                        tracing::info!(channel = channel.as_str(), %day, "bill not published yet")
                    }
                    Err(error) => {
                        tracing::warn!(channel = channel.as_str(), %day, %error, "bill reconciliation failed")
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

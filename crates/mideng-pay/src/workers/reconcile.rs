//! Reconciliation with the channels: the last layer, which finds what callbacks missed.
//!
//! Each round walks through every PENDING payment older than a threshold, oldest first, in
//! pages of bounded size (a cursor, so that payments which stay pending — codes nobody scanned
//! yet — never starve the newer ones behind them), and asks the channel:
//!
//! | the channel says | then |
//! |---|---|
//! | paid | the one success flow (row lock, amount check, CAS on payment and order) |
//! | pending, not expired | leave it |
//! | pending, expired | close at the channel, then locally, and cancel the order; a close refused because the buyer just paid runs the success flow instead |
//! | pending, order paid by another attempt | the same close at once (the close that a late success started did not go through) |
//! | paid, order paid by another attempt | a refund case ([`crate::domain::charge`]), the attempt closed |
//! | no such trade (Alipay before the scan), not expired | leave it: the code can still be paid |
//! | no such trade, expired | close locally and cancel the order |
//! | closed | close locally and cancel the order |
//! | no definite answer | leave it and ask again next round, never guess |
//!
//! Then it walks through every refund PROCESSING for longer than the same threshold and asks
//! the channel about it ([`crate::flows::refund::reconcile`]): a final state settles it, and a
//! refund the channel never received is asked again under the same number. Last, with
//! automatic refunds on ([`crate::flows::PaymentSettings::automatic_refunds`]), every open
//! refund case (a charge this service will not keep) gets its one refund.
//!
//! The table is [`crate::flows::payment::settle`](mod@crate::flows::payment::settle), shared with the close route and creation.
//! "Expired" means past the payment's expiry plus the grace for clock skew
//! ([`crate::flows::PaymentSettings::expiry_grace`], one setting). One writer per order at a
//! time across instances: each payment is handled under its order's lock, the one creation,
//! close and notifies take ([`crate::flows::order_lock`]), its writes fenced; and every change
//! is a compare-and-set in the database anyway, so two reconcilers (or a reconciler and a
//! callback) never apply an effect twice.

use std::time::Duration;

use mideng::StoreError;
use mideng_channel::adapter::{Channel, TradeState};

use crate::domain::order::OrderStatus;
use crate::domain::payment::Payment;
use crate::flows::order_lock::{Locked, lock_order, lost_the_lock, unlock};
use crate::flows::payment::{OnClose, Settled, settle};
use crate::flows::{Ports, decision, operation};
use crate::store::{LocalClose, OrderFence, SuccessOutcome};

/// The operation name of reconciliation in logs and counters.
pub const OPERATION: &str = operation::RECONCILE;

/// How reconciliation runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileSettings {
    /// Only payments pending for longer than this are examined (callbacks get their chance).
    pub min_age: Duration,
    /// Payments per page: a round walks through every pending payment, one bounded query per
    /// page.
    pub batch: u32,
    /// Pause between rounds of the scheduled worker.
    pub interval: Duration,
    /// Only this tenant's payments (`None`: every tenant's, the worker's default).
    pub tenant: Option<String>,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        Self {
            min_age: Duration::from_secs(30),
            batch: 100,
            interval: Duration::from_secs(10),
            tenant: None,
        }
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Payments examined.
    pub examined: u32,
    /// Moved to PAID by this round.
    pub paid: u32,
    /// Charged at the channel but not kept here (the one-PAID rule: the order has another
    /// PAID payment): recorded as refund cases by this round.
    pub cases: u32,
    /// Closed by this round (and their orders canceled).
    pub closed: u32,
    /// Left pending (still payable).
    pub left: u32,
    /// No definite answer from the channel: asked again next round.
    pub unknown: u32,
    /// Handled by another reconciler at the same moment.
    pub busy: u32,
    /// PROCESSING refunds examined.
    pub refunds_examined: u32,
    /// Refunds this round settled (SUCCESS, CLOSED or ABNORMAL), or asked again of a channel
    /// that had never received them.
    pub refunds_settled: u32,
    /// Refund cases this round refunded (automatic refunds on).
    pub cases_refunded: u32,
}

/// What happened to one payment.
enum Verdict {
    /// Paid now; the order's other open attempt, to be closed (a late success).
    Paid(Option<String>),
    Case,
    Closed,
    Left,
    Unknown,
    Busy,
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One round: every payment pending for longer than `min_age`, oldest first, in pages of
/// `batch` (each page one bounded query). Paging with a cursor, not "the oldest `batch`", so
/// that payments which legitimately stay pending (unpaid codes not yet expired) never starve
/// the newer ones behind them — those are the ones whose callbacks were just lost.
pub async fn reconcile_once(
    ports: &Ports,
    settings: &ReconcileSettings,
) -> Result<ReconcileReport, StoreError> {
    let now_ms = ports.clock.now_ms();
    let created_before = now_ms.saturating_sub(ms(settings.min_age));
    let batch = settings.batch.max(1);
    let mut report = ReconcileReport::default();
    let mut after: Option<(i64, String)> = None;
    loop {
        let page = ports
            .store
            .payments
            .pending_before(
                settings.tenant.as_deref(),
                created_before,
                after.as_ref().map(|(at, number)| (*at, number.as_str())),
                batch,
            )
            .await?;
        let full = page.len() >= usize::try_from(batch).unwrap_or(usize::MAX);
        after = page
            .last()
            .map(|last| (last.created_at_ms, last.payment_no.clone()));
        for payment in page {
            reconcile_one(ports, &payment, &mut report).await;
        }
        if !full {
            break;
        }
    }
    reconcile_refunds(ports, settings, created_before, &mut report).await?;
    if ports.settings.automatic_refunds {
        refund_cases(ports, settings, &mut report).await?;
    }
    if report.examined > 0 || report.refunds_examined > 0 {
        // One event per round with every figure as a field of its own, on a target of its
        // own: the operator console's journal keeps the last rounds from it.
        tracing::info!(
            target: "mideng::reconcile",
            examined = report.examined,
            paid = report.paid,
            cases = report.cases,
            closed = report.closed,
            left = report.left,
            unknown = report.unknown,
            busy = report.busy,
            refunds_examined = report.refunds_examined,
            refunds_settled = report.refunds_settled,
            cases_refunded = report.cases_refunded,
            "reconciliation round"
        );
    }
    Ok(report)
}

/// Every refund PROCESSING for longer than `min_age` (the channel's answer was lost, or it is
/// slow, or its notify was lost), oldest first, in pages: the channel's state settles it, and a
/// refund the channel never received is asked again under the same number. Every change is a
/// compare-and-set, so a notify or another reconciler racing this one changes nothing twice.
async fn reconcile_refunds(
    ports: &Ports,
    settings: &ReconcileSettings,
    created_before: i64,
    report: &mut ReconcileReport,
) -> Result<(), StoreError> {
    let batch = settings.batch.max(1);
    let mut after: Option<(i64, String)> = None;
    loop {
        let page = ports
            .store
            .refunds
            .processing_before(
                created_before,
                after.as_ref().map(|(at, number)| (*at, number.as_str())),
                batch,
            )
            .await?;
        let full = page.len() >= usize::try_from(batch).unwrap_or(usize::MAX);
        after = page
            .last()
            .map(|last| (last.created_at_ms, last.refund_no.clone()));
        for refund in page {
            if settings
                .tenant
                .as_deref()
                .is_some_and(|tenant| tenant != refund.tenant_id)
            {
                continue;
            }
            report.refunds_examined += 1;
            let number = refund.refund_no.clone();
            match crate::flows::refund::reconcile(ports, refund).await {
                Ok(after) if after.status != crate::domain::refund::RefundStatus::Processing => {
                    report.refunds_settled += 1;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, refund_no = %number, "reconciling a refund failed; next round");
                }
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// Every open refund case (oldest first, one page of `batch` per round) gets its one refund.
async fn refund_cases(
    ports: &Ports,
    settings: &ReconcileSettings,
    report: &mut ReconcileReport,
) -> Result<(), StoreError> {
    let cases = ports
        .store
        .refund_cases
        .open_cases(settings.batch.max(1))
        .await?;
    for case in cases {
        if settings
            .tenant
            .as_deref()
            .is_some_and(|tenant| tenant != case.tenant_id)
        {
            continue;
        }
        match crate::flows::refund::refund_case(ports, &case.payment_no).await {
            Ok(Some(_)) => report.cases_refunded += 1,
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, payment_no = %case.payment_no, "refunding a refund case failed; next round");
            }
        }
    }
    Ok(())
}

async fn reconcile_one(ports: &Ports, payment: &Payment, report: &mut ReconcileReport) {
    report.examined += 1;
    let verdict = match one(ports, payment).await {
        Ok(verdict) => verdict,
        Err(error) => {
            tracing::warn!(%error, payment_no = %payment.payment_no, "reconciling a payment failed; next round");
            Verdict::Unknown
        }
    };
    let label = match verdict {
        Verdict::Paid(_) => {
            report.paid += 1;
            "paid"
        }
        Verdict::Case => {
            report.cases += 1;
            "refund_case"
        }
        Verdict::Closed => {
            report.closed += 1;
            "closed"
        }
        Verdict::Left => {
            report.left += 1;
            "left_pending"
        }
        Verdict::Unknown => {
            report.unknown += 1;
            "unknown"
        }
        Verdict::Busy => {
            report.busy += 1;
            "busy"
        }
    };
    decision(
        "reconciliation",
        OPERATION,
        &payment.tenant_id,
        &payment.payment_no,
        label,
    );
}

/// Reconciles one payment under its order's lock, the lock every writer of the order takes
/// ([`crate::flows::order_lock`]): a lock busy for the whole wait, or taken over while the
/// round worked (its writes refused by the fence), leaves the payment to the next round.
async fn one(ports: &Ports, payment: &Payment) -> Result<Verdict, StoreError> {
    let Some(channel) = ports.channels.get(payment.channel) else {
        tracing::warn!(payment_no = %payment.payment_no, channel = %payment.channel, "channel not configured; cannot reconcile");
        return Ok(Verdict::Unknown);
    };
    let locked = lock_order(ports, OPERATION, &payment.tenant_id, &payment.order_id).await;
    if let Locked::Busy = locked {
        return Ok(Verdict::Busy);
    }
    let verdict = decide(ports, channel.as_ref(), payment, locked.fence()).await;
    unlock(ports, locked).await;
    let verdict = match verdict {
        Err(error) if lost_the_lock(&error) => Ok(Verdict::Busy),
        other => other,
    };
    if let Ok(Verdict::Paid(Some(sibling))) = &verdict {
        crate::flows::payment::close_sibling(ports, &payment.tenant_id, sibling).await;
    }
    verdict
}

async fn decide(
    ports: &Ports,
    channel: &dyn Channel,
    payment: &Payment,
    fence: Option<&OrderFence>,
) -> Result<Verdict, StoreError> {
    let found = match channel.query_trade(&payment.payment_no).await {
        Ok(found) => found,
        Err(error) => {
            tracing::info!(%error, payment_no = %payment.payment_no, "query without a definite answer");
            return Ok(Verdict::Unknown);
        }
    };
    let settled = match settle(ports, payment, found, OnClose::CancelOrder, fence).await? {
        // Still pending past its expiry, or pending for an order that no longer waits for
        // payment (another attempt paid it: a late success, whose close of this one did not
        // go through): close it at the channel first, then settle on what the close found (a
        // close refused because the buyer just paid runs the success flow).
        Settled::Pending { expired } if expired || order_settled(ports, payment).await? => {
            match channel.close_trade(&payment.payment_no).await {
                Ok(TradeState::Closed | TradeState::NotFound) => {
                    settle(
                        ports,
                        payment,
                        TradeState::Closed,
                        OnClose::CancelOrder,
                        fence,
                    )
                    .await?
                }
                Ok(paid @ TradeState::Paid(_)) => {
                    settle(ports, payment, paid, OnClose::CancelOrder, fence).await?
                }
                Ok(_) | Err(_) => return Ok(Verdict::Unknown),
            }
        }
        settled => settled,
    };
    Ok(match settled {
        Settled::Paid(SuccessOutcome::Paid { open_sibling, .. }) => Verdict::Paid(open_sibling),
        // Charged, and the order has another PAID payment: the case is recorded.
        Settled::Paid(SuccessOutcome::Refunding { .. }) => Verdict::Case,
        // A callback got there first: nothing for this round.
        Settled::Paid(SuccessOutcome::AlreadyPaid) => Verdict::Left,
        Settled::Paid(other) => {
            tracing::warn!(payment_no = %payment.payment_no, ?other, "the channel's payment does not fit ours");
            Verdict::Unknown
        }
        Settled::Closed(LocalClose::Closed(_)) => Verdict::Closed,
        Settled::Closed(_) | Settled::NotYetAtChannel | Settled::Pending { .. } => Verdict::Left,
        Settled::Refunded => Verdict::Unknown,
    })
}

/// Whether `payment`'s order no longer waits for payment (paid by another attempt, or
/// canceled): its pending attempt has nothing left to wait for.
async fn order_settled(ports: &Ports, payment: &Payment) -> Result<bool, StoreError> {
    Ok(ports
        .store
        .orders
        .order(&payment.tenant_id, &payment.order_id)
        .await?
        .is_some_and(|(order, _)| order.status != OrderStatus::Created))
}

/// The scheduled worker: a round every `settings.interval` until `stop` turns true.
pub async fn run(
    ports: Ports,
    settings: ReconcileSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if ports.clock_guard.refuses() {
            // Expiries and their grace are judged by this clock: not while it is off.
            tracing::warn!(
                "reconciliation waits: this instance's clock disagrees with the database's"
            );
        } else if let Err(error) = reconcile_once(&ports, &settings).await {
            tracing::warn!(%error, "reconciliation round failed");
        }
        // The daily bills' open cases, for the alert that asks a person to look at them.
        match ports.store.bill_cases.open_count().await {
            Ok(open) => {
                metrics::gauge!(crate::metrics::RECONCILIATION_CASES_OPEN).set(open as f64);
            }
            Err(error) => tracing::warn!(%error, "counting open reconciliation cases failed"),
        }
        // Money owed back whose refund has not succeeded, for the alert that asks a person.
        match ports.store.refund_cases.unsettled_count().await {
            Ok(unsettled) => {
                metrics::gauge!(crate::metrics::REFUND_CASES_UNSETTLED).set(unsettled as f64);
            }
            Err(error) => tracing::warn!(%error, "counting unsettled refund cases failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

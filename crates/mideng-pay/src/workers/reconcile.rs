//! Reconciliation with the channels: the last layer, which finds what callbacks missed.
//!
//! Each round walks through every PENDING payment older than a threshold, oldest first, in
//! pages of bounded size (a cursor, so that payments which stay pending — codes nobody scanned
//! yet — never starve the newer ones behind them), and asks the channel (design.md §5):
//!
//! | the channel says | then |
//! |---|---|
//! | paid | the one success flow (row lock, amount check, CAS on payment and order) |
//! | pending, not expired | leave it |
//! | pending, expired | close at the channel, then locally, and cancel the order; a close refused because the buyer just paid runs the success flow instead |
//! | no such trade (Alipay before the scan), not expired | leave it: the code can still be paid |
//! | no such trade, expired | close locally and cancel the order |
//! | closed | close locally and cancel the order |
//! | no definite answer | leave it and ask again next round, never guess |
//!
//! "Expired" means past the payment's expiry plus a grace for clock skew. One owner per payment
//! at a time across instances: each payment is handled under a short lock in the lock store
//! (Redis in production), and every change is a compare-and-set in the database anyway, so two
//! reconcilers (or a reconciler and a callback) never apply an effect twice.

use std::time::Duration;

use mideng::{Name, StoreError, clock};
use mideng_channel::adapter::{Channel, TradeState};

use crate::api::{AppState, decision};
use crate::db::payments::{PaymentRow, SuccessOutcome};
use crate::domain::payment::ChannelName;
use crate::store::LocalClose;

/// The operation name of reconciliation in logs and counters.
pub const OPERATION: &str = "reconcile";

/// How reconciliation runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileSettings {
    /// Only payments pending for longer than this are examined (callbacks get their chance).
    pub min_age: Duration,
    /// How far past its expiry a trade must be before "no such trade" or "pending" closes it.
    pub expiry_grace: Duration,
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
            expiry_grace: Duration::from_secs(60),
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
    /// Closed by this round (and their orders canceled).
    pub closed: u32,
    /// Left pending (still payable).
    pub left: u32,
    /// No definite answer from the channel: asked again next round.
    pub unknown: u32,
    /// Handled by another reconciler at the same moment.
    pub busy: u32,
}

/// What happened to one payment.
enum Verdict {
    Paid,
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
    state: &AppState,
    settings: &ReconcileSettings,
) -> Result<ReconcileReport, StoreError> {
    let now_ms = clock::now_ms();
    let created_before = now_ms.saturating_sub(ms(settings.min_age));
    let batch = settings.batch.max(1);
    let mut report = ReconcileReport::default();
    let mut after: Option<(i64, String)> = None;
    loop {
        let page = state
            .store
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
            reconcile_one(state, settings, &payment, &mut report).await;
        }
        if !full {
            break;
        }
    }
    if report.examined > 0 {
        tracing::info!(?report, "reconciliation round");
    }
    Ok(report)
}

async fn reconcile_one(
    state: &AppState,
    settings: &ReconcileSettings,
    payment: &PaymentRow,
    report: &mut ReconcileReport,
) {
    report.examined += 1;
    let verdict = match one(state, settings, payment).await {
        Ok(verdict) => verdict,
        Err(error) => {
            tracing::warn!(%error, payment_no = %payment.payment_no, "reconciling a payment failed; next round");
            Verdict::Unknown
        }
    };
    let label = match verdict {
        Verdict::Paid => {
            report.paid += 1;
            "paid"
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

/// Reconciles one payment under its lock.
async fn one(
    state: &AppState,
    settings: &ReconcileSettings,
    payment: &PaymentRow,
) -> Result<Verdict, StoreError> {
    let Some(channel) = ChannelName::parse(&payment.channel)
        .ok()
        .and_then(|name| state.channel(name))
    else {
        tracing::warn!(payment_no = %payment.payment_no, channel = %payment.channel, "channel not configured; cannot reconcile");
        return Ok(Verdict::Unknown);
    };
    let name = Name::parse(&format!("reconcile:{}", payment.payment_no))?;
    let guard = match state
        .locks
        .try_acquire(&name, Duration::from_secs(60))
        .await
    {
        Ok(Some(guard)) => Some(guard),
        Ok(None) => return Ok(Verdict::Busy),
        // Without the lock store the database's compare-and-set still decides.
        Err(_) => None,
    };
    let verdict = decide(state, settings, channel.as_ref(), payment).await;
    if let Some(guard) = guard {
        let _ = state.locks.release(&guard).await;
    }
    verdict
}

async fn decide(
    state: &AppState,
    settings: &ReconcileSettings,
    channel: &dyn Channel,
    payment: &PaymentRow,
) -> Result<Verdict, StoreError> {
    let expired = clock::now_ms()
        > payment
            .expires_at_ms
            .saturating_add(ms(settings.expiry_grace));
    let found = match channel.query_trade(&payment.payment_no).await {
        Ok(found) => found,
        Err(error) => {
            tracing::info!(%error, payment_no = %payment.payment_no, "query without a definite answer");
            return Ok(Verdict::Unknown);
        }
    };
    match found {
        TradeState::Paid(paid) => success(state, payment, &paid).await,
        TradeState::Closed => expire(state, payment).await,
        TradeState::NotFound if expired => expire(state, payment).await,
        TradeState::Pending if expired => match channel.close_trade(&payment.payment_no).await {
            Ok(TradeState::Closed | TradeState::NotFound) => expire(state, payment).await,
            // The buyer paid a moment before the close.
            Ok(TradeState::Paid(paid)) => success(state, payment, &paid).await,
            Ok(_) | Err(_) => Ok(Verdict::Unknown),
        },
        TradeState::NotFound | TradeState::Pending => Ok(Verdict::Left),
        TradeState::Refunded => {
            tracing::warn!(payment_no = %payment.payment_no, "refunded at the channel while pending here");
            Ok(Verdict::Unknown)
        }
    }
}

async fn success(
    state: &AppState,
    payment: &PaymentRow,
    paid: &mideng_channel::adapter::Payment,
) -> Result<Verdict, StoreError> {
    let outcome = state.store.apply_success(&payment.payment_no, paid).await?;
    Ok(match outcome {
        SuccessOutcome::Paid { .. } => Verdict::Paid,
        // A callback got there first, or the amounts differ (logged by the success flow's
        // caller as not ours): nothing for this round.
        SuccessOutcome::AlreadyPaid => Verdict::Left,
        other => {
            tracing::warn!(payment_no = %payment.payment_no, ?other, "the channel's payment does not fit ours");
            Verdict::Unknown
        }
    })
}

async fn expire(state: &AppState, payment: &PaymentRow) -> Result<Verdict, StoreError> {
    let (closed, _canceled) = state.store.expire_payment(&payment.payment_no).await?;
    Ok(match closed {
        LocalClose::Closed(_) => Verdict::Closed,
        _ => Verdict::Left,
    })
}

/// The scheduled worker: a round every `settings.interval` until `stop` turns true.
pub async fn run(
    state: AppState,
    settings: ReconcileSettings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(error) = reconcile_once(&state, &settings).await {
            tracing::warn!(%error, "reconciliation round failed");
        }
        tokio::select! {
            () = tokio::time::sleep(settings.interval) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

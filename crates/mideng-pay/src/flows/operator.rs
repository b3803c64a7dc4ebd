//! What a person settles by hand, and what they read to decide it: the reconciliation cases a
//! daily bill left open (a tenant lists its own; the operator lists all and resolves one), the
//! refund cases whose money has not gone back yet (a tenant lists its own, the console shows
//! all, a gauge counts them), the
//! events parked for a person (a consumer's, and outbox rows the broker refused too often) and
//! the overview of the database's counts by state. The console's pages render these; each
//! settlement records the person's reason.

use mideng::StoreError;
use mideng::outbox::sql::ParkedRow;

use crate::domain::bill::{BillCase, BillCaseStatus};
use crate::flows::Ports;
use crate::flows::grant::{self, Replayed};
pub use crate::store::transactions::refund_cases::UnsettledCase;
pub use crate::store::{FailedEvent, Overview};

/// Reconciliation cases, newest first, at most `limit`: of one tenant, or (for the operator)
/// of all; of one status, or of all.
pub async fn cases(
    ports: &Ports,
    tenant: Option<&str>,
    status: Option<BillCaseStatus>,
    limit: u32,
) -> Result<Vec<BillCase>, StoreError> {
    ports.store.bill_cases.cases(tenant, status, limit).await
}

/// The tenant's refund cases not settled yet (money owed back whose refund has not
/// succeeded), oldest first, after the case of `after`; `None` when `after` is none of the
/// tenant's.
pub async fn unsettled_refund_cases(
    ports: &Ports,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<UnsettledCase>>, StoreError> {
    ports
        .store
        .refund_cases
        .unsettled_cases(tenant, after, limit)
        .await
}

/// What resolving a case came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseResolution {
    /// Resolved now: the case as it is.
    Resolved(Box<BillCase>),
    /// No case has this id.
    NotFound,
    /// The case was settled already (repaired, or resolved by someone else).
    NotOpen,
}

/// Resolves the open case `case_id` by hand, with `reason` recorded on it.
pub async fn resolve_case(
    ports: &Ports,
    case_id: &str,
    reason: &str,
) -> Result<CaseResolution, StoreError> {
    let cases = &ports.store.bill_cases;
    if cases.case(case_id).await?.is_none() {
        return Ok(CaseResolution::NotFound);
    }
    let resolution = format!("resolved by an operator: {reason}");
    if !cases
        .settle(case_id, BillCaseStatus::Resolved, &resolution)
        .await?
    {
        return Ok(CaseResolution::NotOpen);
    }
    tracing::info!(case_id, "reconciliation case resolved by an operator");
    Ok(match cases.case(case_id).await? {
        Some(case) => CaseResolution::Resolved(Box::new(case)),
        None => CaseResolution::NotFound,
    })
}

/// The events parked for a person, oldest first in each kind, at most `limit` of each: the
/// consumers' and the relay's.
pub async fn parked(
    ports: &Ports,
    limit: u32,
) -> Result<(Vec<FailedEvent>, Vec<ParkedRow>), StoreError> {
    let events = ports.store.event_failures.parked(limit).await?;
    let rows = ports.store.events.parked_outbox(limit).await?;
    Ok((events, rows))
}

/// What a person's act on a parked event came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParkedSettled {
    /// A consumer's event, as it is now (replayed or discarded).
    Event(Box<FailedEvent>),
    /// An outbox row, as it was parked; now back in the relay's way, or finished unsent.
    Outbox(Box<ParkedRow>),
    /// No parked event has this id.
    NotFound,
    /// It is not parked (settled already).
    NotParked,
    /// Its replay failed again: it stays parked with the new error.
    FailedAgain,
}

/// Replays (`replaying`) or discards the parked event `message_id`, with `reason` recorded. A
/// consumer's event is replayed through the consumer's own effect; an outbox row goes back to
/// the relay.
pub async fn settle_parked(
    ports: &Ports,
    message_id: &str,
    reason: &str,
    replaying: bool,
    dedup: bool,
) -> Result<ParkedSettled, StoreError> {
    let failures = ports.store.event_failures.as_ref();
    if failures.failed_event(message_id).await?.is_none() {
        return settle_outbox(ports, message_id, reason, replaying).await;
    }
    if replaying {
        match grant::replay(ports, message_id, reason, dedup).await? {
            Replayed::Processed => {}
            Replayed::FailedAgain => return Ok(ParkedSettled::FailedAgain),
            Replayed::NotParked => return Ok(ParkedSettled::NotParked),
        }
    } else if !grant::discard(failures, message_id, reason).await? {
        return Ok(ParkedSettled::NotParked);
    }
    tracing::info!(message_id, replaying, "parked event settled by an operator");
    Ok(match failures.failed_event(message_id).await? {
        Some(event) => ParkedSettled::Event(Box::new(event)),
        None => ParkedSettled::NotFound,
    })
}

async fn settle_outbox(
    ports: &Ports,
    message_id: &str,
    reason: &str,
    replaying: bool,
) -> Result<ParkedSettled, StoreError> {
    let events = &ports.store.events;
    let Some(row) = events
        .parked_outbox(mideng::limits::OUTBOX_BATCH_MAX)
        .await?
        .into_iter()
        .find(|row| row.id == message_id)
    else {
        return Ok(ParkedSettled::NotFound);
    };
    let done = if replaying {
        events.replay_outbox(&row.id, reason).await?
    } else {
        events.discard_outbox(&row.id, reason).await?
    };
    if !done {
        return Ok(ParkedSettled::NotParked);
    }
    tracing::info!(message_id = %row.id, replaying, "parked outbox row settled by an operator");
    Ok(ParkedSettled::Outbox(Box::new(row)))
}

/// The database's counts by state over every tenant, as of `now_ms`.
pub async fn overview(ports: &Ports, now_ms: i64) -> Result<Overview, StoreError> {
    ports.store.overviews.overview(now_ms).await
}

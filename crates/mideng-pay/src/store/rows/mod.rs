//! The lower floor: each aggregate's rows and the statements on them, one file per aggregate
//! (a table and the rows only it owns: a wallet's ledger entries, an endpoint's deliveries and
//! attempts). Every function runs one statement (or one aggregate's few) on the caller's
//! connection, inside the caller's transaction, and no file here imports another's: what
//! several tables do together is [`super::transactions`].
//!
//! A port whose every method touches one aggregate only (tenants, the bill's cases, the event
//! failures, the outbox, the event log, the webhooks) lives here with its statements: it composes nothing.

pub mod bill_cases;
pub mod event_log;
pub mod events;
pub mod grants;
pub mod orders;
pub mod parked;
pub mod payments;
pub mod refund_cases;
pub mod refunds;
pub mod tenants;
pub mod wallets;
pub mod webhooks;

pub(crate) use super::sql::{cursor_page, page_after};
use mideng::StoreError;

/// A stored value this code cannot have written.
pub(crate) fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// A row whose columns do not read as their types.
pub(crate) fn read(error: mideng::sqlx::Error) -> StoreError {
    StoreError::Corrupt(format!("unreadable row: {error}"))
}

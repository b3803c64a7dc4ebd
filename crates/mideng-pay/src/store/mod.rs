//! The service's storage, in two floors under one set of ports, all implemented once for every
//! SQL dialect by [`SqlPay`]:
//!
//! ```text
//! flows ──► ports (traits) ──► transactions/<port>.rs ──► rows/<aggregate>.rs ──► the database
//!                              (several tables, one       (one aggregate's statements,
//!                               local transaction)          no other aggregate imported)
//! ```
//!
//! | port | where | holds |
//! |---|---|---|
//! | [`Tenants`] | [`rows::tenants`] | tenants by the digest of their API key |
//! | [`Orders`] | [`transactions::orders`] | orders: one per order id, moved by compare-and-set |
//! | [`Payments`] | [`transactions::payments`] | payment attempts: one PENDING and at most one PAID per order; the success flow |
//! | [`Refunds`] | [`transactions::refunds`] | refunds: one per request key, never more than the payment's amount together |
//! | [`RefundCases`] | [`transactions::refund_cases`] | charges this service will not keep, each refunded once |
//! | [`BillCases`] | [`rows::bill_cases`] | what the channels' daily bills and our records disagree on, one case per channel, day, kind and number |
//! | [`Notifies`] | [`transactions::notifies`] | channel notifies applied once per notify id, with their effect |
//! | [`Wallets`] | [`transactions::wallets`] | credits and deducts, each with its record and stored answer |
//! | [`Grants`] | [`transactions::grants`] | entitlement grants: one per paid order |
//! | [`Webhooks`] | [`rows::webhooks`] | merchant endpoints, one delivery per endpoint and event, every attempt |
//! | [`Events`] | [`rows::events`] | the outbox and the in-database queue |
//! | [`EventLog`] | [`rows::event_log`] | what happened to each tenant, in order, for the webhook retention |
//! | [`EventFailures`] | [`rows::parked`] | events a consumer failed: counted, then parked for a person |
//! | [`Overviews`] | [`transactions::overview`] | counts by state, for the operator console |
//! | [`Backend`] | [`sql`] | [`SqlPay`], the dialect, readiness, the idempotency records |
//! | — | [`migrate`] | the schema per dialect |
//!
//! Domain types ([`crate::domain`]) cross the boundary, and the rules the transactions apply
//! (the one-PAID rule, notify matching, refund arithmetic, the state machines) are pure
//! functions there; each port method is one local transaction, so no caller ever sees a
//! half-done change. A write that must happen once per request key runs in the toolkit's
//! [`mideng::store::sql::SqlStore::write_once`]: the record, the effect and the stored answer
//! commit together. [`Store`] bundles the ports the flows use.
//!
//! Each module writes its statements the toolkit's way, as [`mideng::store::sql::PerDialect`]
//! constants built by [`mideng::dialect_sql!`] beside the functions that run them, and those
//! functions are generic over the toolkit's [`Dialect`]. An insert that may meet a duplicate
//! is written `insert_ignore … on_conflict_ignore`, so that the duplicate is an answer ("0
//! rows") rather than an error. On MySQL that is `INSERT IGNORE`, which turns any duplicate
//! key (the primary key or the generated-flag unique keys) into "0 rows"; it would also
//! silence a truncation, but every value is validated before it is written.

pub mod migrate;
pub mod rows;
pub mod sql;
pub mod transactions;

use std::sync::Arc;

use mideng::store::sql::{Dialect, SqlStore};

use crate::domain::clock::Clock;

pub use migrate::{migrate_mysql, migrate_postgres, migrate_sqlite};
pub use rows::bill_cases::BillCases;
pub use rows::event_log::{EventLog, LoggedEvent};
pub use rows::events::{Events, OutboxRelay};
pub use rows::orders::{OrderFence, OrderInsert};
pub use rows::parked::{EventFailures, FailedEvent, FailureStatus};
pub use rows::tenants::Tenants;
pub use rows::wallets::ReverseOutcome;
pub use rows::webhooks::{self as webhooks, Webhooks};
pub use sql::{Backend, SqlPay};
pub use transactions::grants::{GrantOutcome, Grants, RevokeOutcome};
pub use transactions::notifies::{
    Notifies, NotifyApplied, NotifyEffect, NotifyEvent, NotifyOutcome,
};
pub use transactions::orders::{OrderTransition, Orders};
pub use transactions::overview::{Overview, Overviews};
pub use transactions::payments::{LocalClose, NewPayment, OpenPayment, Payments, SuccessOutcome};
pub use transactions::refund_cases::{CASE_ASKS_MAX, RefundCase, RefundCases};
pub use transactions::refunds::{NewRefund, OpenRefund, Refunds, SettledRefund};
pub use transactions::wallets::{Answered, Render, WalletRecord, Wallets};

/// Every storage port, on one database.
#[derive(Clone)]
pub struct Store {
    /// The database itself: dialect, readiness, idempotency records.
    pub backend: Arc<dyn Backend>,
    /// Tenants.
    pub tenants: Arc<dyn Tenants>,
    /// Orders.
    pub orders: Arc<dyn Orders>,
    /// Payment attempts.
    pub payments: Arc<dyn Payments>,
    /// Refunds.
    pub refunds: Arc<dyn Refunds>,
    /// Refund cases: charges this service will not keep.
    pub refund_cases: Arc<dyn RefundCases>,
    /// What the channels' bills and our records disagree on.
    pub bill_cases: Arc<dyn BillCases>,
    /// Channel notifies.
    pub notifies: Arc<dyn Notifies>,
    /// Wallets.
    pub wallets: Arc<dyn Wallets>,
    /// Entitlement grants.
    pub grants: Arc<dyn Grants>,
    /// The outbox and the in-database queue.
    pub events: Arc<dyn Events>,
    /// Events a consumer failed, and the parked ones.
    pub event_failures: Arc<dyn EventFailures>,
    /// Each tenant's events, in order.
    pub event_log: Arc<dyn EventLog>,
    /// Merchant webhooks.
    pub webhooks: Arc<dyn Webhooks>,
    /// Counts by state, for the operator console.
    pub overviews: Arc<dyn Overviews>,
}

impl Store {
    /// Every port on one SQL store (migrated by the caller), with the service's one clock.
    pub fn sql<D: Dialect>(store: SqlStore<D>, clock: Arc<dyn Clock>) -> Self {
        let sql = Arc::new(SqlPay::new(store, clock));
        Self {
            backend: sql.clone(),
            tenants: sql.clone(),
            orders: sql.clone(),
            payments: sql.clone(),
            refunds: sql.clone(),
            refund_cases: sql.clone(),
            bill_cases: sql.clone(),
            notifies: sql.clone(),
            wallets: sql.clone(),
            grants: sql.clone(),
            events: sql.clone(),
            event_failures: sql.clone(),
            event_log: sql.clone(),
            webhooks: sql.clone(),
            overviews: sql,
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Store({})", self.backend.dialect())
    }
}

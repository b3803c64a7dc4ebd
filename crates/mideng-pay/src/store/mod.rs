//! The service's storage: one small port per aggregate, each next to its statements, all
//! implemented once for every SQL dialect by [`SqlPay`].
//!
//! | module | port | holds |
//! |---|---|---|
//! | [`tenants`] | [`Tenants`] | tenants by the digest of their API key |
//! | [`orders`] | [`Orders`] | orders: one per order id, moved by compare-and-set |
//! | [`payments`] | [`Payments`] | payment attempts: one PENDING and at most one PAID per order; the success flow |
//! | [`refunds`] | [`Refunds`] | refunds: one per request key, never more than the payment's amount together |
//! | [`bill_cases`] | [`BillCases`] | what the channels' daily bills and our records disagree on, one case per channel, day, kind and number |
//! | [`notifies`] | [`Notifies`] | channel notifies applied once per notify id, with their effect |
//! | [`wallets`] | [`Wallets`] | credits and deducts, each with its record and stored answer |
//! | [`grants`] | [`Grants`] | entitlement grants: one per paid order |
//! | [`webhooks`] | [`Webhooks`] | merchant endpoints, one delivery per endpoint and event, every attempt |
//! | [`events`] | [`Events`] | the outbox and the in-database queue |
//! | [`parked`] | [`EventFailures`] | events a consumer failed: counted, then parked for a person |
//! | [`overview`] | [`Overviews`] | counts by state, for the operator console |
//! | [`sql`] | [`Backend`] | [`SqlPay`], the dialect, readiness, the idempotency records |
//! | [`migrate`] | — | the schema per dialect |
//!
//! Domain types ([`crate::domain`]) cross the boundary; each port method is one local
//! transaction, so no caller ever sees a half-done change. [`Store`] bundles the ports the
//! flows use.
//!
//! Each module writes its statements the toolkit's way, as [`mideng::store::sql::PerDialect`]
//! constants built by [`mideng::dialect_sql!`] beside the functions that run them, and those
//! functions are generic over the toolkit's [`Dialect`]. An insert that may meet a duplicate
//! is written `insert_ignore … on_conflict_ignore`, so that the duplicate is an answer ("0
//! rows") rather than an error. On MySQL that is `INSERT IGNORE`, which turns any duplicate
//! key (the primary key or the generated-flag unique keys) into "0 rows"; it would also
//! silence a truncation, but every value is validated before it is written.

pub mod bill_cases;
pub mod events;
pub mod grants;
pub mod migrate;
pub mod notifies;
pub mod orders;
pub mod overview;
pub mod parked;
pub mod payments;
pub mod refunds;
pub mod sql;
pub mod tenants;
pub mod wallets;
pub mod webhooks;

use std::sync::Arc;

use mideng::store::sql::{Dialect, SqlStore};

use crate::domain::clock::Clock;

pub use bill_cases::BillCases;
pub use events::{Events, OutboxRelay};
pub use grants::{GrantOutcome, Grants};
pub use migrate::{migrate_mysql, migrate_postgres, migrate_sqlite};
pub use notifies::{Notifies, NotifyApplied, NotifyEffect, NotifyEvent, NotifyOutcome};
pub use orders::{OrderFence, OrderInsert, OrderTransition, Orders};
pub use overview::{Overview, Overviews};
pub use parked::{EventFailures, FailedEvent, FailureStatus};
pub use payments::{LocalClose, OpenPayment, Payments, SuccessOutcome};
pub use refunds::{NewRefund, OpenRefund, RefundCases, Refunds, SettledRefund};
pub use sql::{Backend, SqlPay};
pub use tenants::Tenants;
pub use wallets::{Answered, Render, ReverseOutcome, WalletRecord, Wallets};
pub use webhooks::Webhooks;

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

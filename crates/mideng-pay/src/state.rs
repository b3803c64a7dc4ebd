//! What every handler and page shares: the flows' ports, the idempotency records, the token
//! store, the API-key cache, the metrics renderer and the pages. Built by [`crate::app`], read by
//! [`crate::api`] and [`crate::web`], neither of which builds or routes the other.

use std::sync::Arc;

use mideng::record::RecordStore;
use mideng::token::TokenStore;

use crate::flows::Ports;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// What the flows work with: storage, channels, locks, clock, payment settings.
    pub ports: Ports,
    /// Idempotency records (in the service's database).
    pub records: Arc<dyn RecordStore>,
    /// One-time tokens (Redis, or in-process): the server's and the pages' ([`crate::tokens`]).
    pub tokens: Arc<dyn TokenStore>,
    /// API keys resolved lately (a short, bounded cache; see [`crate::api::tenants`]).
    pub tenants: Arc<crate::api::tenants::TenantCache>,
    /// Renders `/metrics` (on the metrics listener, [`crate::api::metrics_router`]).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The demo checkout and the operator console, when configured.
    pub pages: Arc<crate::web::Pages>,
    /// The checkout pages' request rates per order, in this instance.
    pub page_rates: Arc<crate::api::checkout::PageRates>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AppState")
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// What the purge deletes from.
    pub fn retained(&self) -> crate::workers::purge::Retained {
        crate::workers::purge::Retained {
            records: self.records.clone(),
            tokens: self.tokens.clone(),
            locks: self.ports.locks.clone(),
            events: self.ports.store.events.clone(),
            webhooks: self.ports.store.webhooks.clone(),
            event_log: self.ports.store.event_log.clone(),
            clock: self.ports.clock.clone(),
        }
    }
}

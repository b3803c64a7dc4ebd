//! What happened to a tenant, in order: the event log read back a page at a time
//! ([`crate::store::rows::event_log`]), so that a merchant whose webhook endpoint missed
//! messages catches up from the last event it processed.

use mideng::StoreError;

use crate::flows::Ports;
pub use crate::store::LoggedEvent;

/// The tenant's events after `after` (from the first when `None`), at most `limit`; `None` when
/// `after` is no event of the tenant's (or one past the retention).
pub async fn page(
    ports: &Ports,
    tenant: &str,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<LoggedEvent>>, StoreError> {
    ports.store.event_log.logged(tenant, after, limit).await
}

/// One of the tenant's events.
pub async fn one(
    ports: &Ports,
    tenant: &str,
    event_id: &str,
) -> Result<Option<LoggedEvent>, StoreError> {
    ports.store.event_log.logged_event(tenant, event_id).await
}

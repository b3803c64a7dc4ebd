//! The upper floor: the ports whose methods compose several aggregates, each method one local
//! transaction over [`super::rows`] — the only code that writes several tables together.
//!
//! | module | port | one transaction does |
//! |---|---|---|
//! | [`orders`] | [`Orders`] | an order created once; moved along its state machine under its row lock; read with its payments |
//! | [`payments`] | [`Payments`] | an attempt opened under its order's lock; the success flow (payment, order, refund case, event) by the one-PAID rule; a close with its event |
//! | [`refunds`] | [`Refunds`] | a refund reserved on its payment and inserted; settled with the amount given back, the order moved and the event written |
//! | [`refund_cases`] | [`RefundCases`] | a case turned into its one refund |
//! | [`notifies`] | [`Notifies`] | a verified notify matched ([`crate::domain::notify`]), deduplicated and applied with its record |
//! | [`grants`] | [`Grants`] | an event's grant or revocation with its dedup claim |
//! | [`wallets`] | [`Wallets`] | a credit or deduct with its idempotency record and stored answer |
//! | [`overview`] | [`Overviews`] | counts by state across the tables, for the console |

pub mod grants;
pub mod notifies;
pub mod orders;
pub mod overview;
pub mod payments;
pub mod refund_cases;
pub mod refunds;
pub mod wallets;

pub use grants::Grants;
pub use notifies::Notifies;
pub use orders::Orders;
pub use overview::Overviews;
pub use payments::Payments;
pub use refund_cases::RefundCases;
pub use refunds::Refunds;
pub use wallets::Wallets;

use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::store::sql::Dialect;

use super::rows::event_log::{self, LoggedEvent};
use super::rows::webhooks;

/// Publishes `event` of `tenant_id` in the caller's transaction (the change's own): its outbox
/// row (the relay sends it on), its entry in the tenant's event log (under the outbox row's
/// id) and one webhook delivery per endpoint subscribed to `topic`. All or nothing, with the
/// change.
pub(crate) async fn publish_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    topic: &str,
    key: &str,
    event: &impl serde::Serialize,
    now_ms: i64,
) -> Result<(), StoreError> {
    let payload = serde_json::to_string(event)
        .map_err(|error| StoreError::Corrupt(format!("event not serialisable: {error}")))?;
    let event_id =
        mideng::outbox::sql::enqueue_in::<D>(connection, topic, key, payload.as_bytes()).await?;
    let logged = LoggedEvent {
        event_id,
        tenant_id: tenant_id.to_owned(),
        event_type: topic.to_owned(),
        data: payload,
        created_at_ms: now_ms,
    };
    event_log::log_in::<D>(connection, &logged).await?;
    webhooks::fan_out::<D>(
        connection,
        tenant_id,
        topic,
        &logged.event_id,
        logged.data.as_bytes(),
        now_ms,
    )
    .await
}

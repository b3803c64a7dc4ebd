//! Merchant webhooks: registering an endpoint (a checked URL, known event types, a fresh
//! signing secret), reading deliveries with their attempts, redelivering by hand. The
//! deliveries themselves are written with their events ([`crate::store::webhooks`]) and sent
//! by the dispatcher ([`crate::workers::webhooks`]).

use mideng::StoreError;

use crate::domain::ids::new_number;
use crate::domain::webhook::{EndpointError, checked_events, checked_url, generate_secret};
use crate::flows::{Ports, decision};
use crate::store::webhooks::NewEndpoint;
pub use crate::store::webhooks::{
    Attempt, Delivery, DeliveryStatus, Endpoint, EndpointStatus, Redelivery, Registered,
};

/// Operation name of webhook decisions in logs and counters.
pub const OPERATION: &str = "webhook.redeliver";

/// Operation name of the registration's decisions.
pub const REGISTER: &str = "webhook.register";

/// Registers `url` for `events`, or answers the tenant's endpoint with this URL.
pub async fn register(
    ports: &Ports,
    tenant: &str,
    url: &str,
    events: &[String],
) -> Result<Result<Registered, EndpointError>, StoreError> {
    let url = match checked_url(url, &ports.settings.webhook_targets()) {
        Ok(url) => url,
        Err(error) => {
            if error == EndpointError::PrivateTarget {
                // The URL is the tenant's text: not logged, only that it was refused.
                decision("outbound", REGISTER, tenant, "endpoint", "private_target");
            }
            return Ok(Err(error));
        }
    };
    let events = match checked_events(events) {
        Ok(events) => events,
        Err(error) => return Ok(Err(error)),
    };
    let secret = generate_secret();
    let endpoint_id = new_number('E', ports.clock.now_ms());
    ports
        .store
        .webhooks
        .register(&NewEndpoint {
            tenant_id: tenant,
            url: url.as_str(),
            events: &events,
            secret: &secret,
            endpoint_id: &endpoint_id,
        })
        .await
        .map(Ok)
}

/// The tenant's deliveries of an event (or its latest), each with its attempts.
pub async fn deliveries(
    ports: &Ports,
    tenant: &str,
    event_id: Option<&str>,
) -> Result<Vec<(Delivery, Vec<Attempt>)>, StoreError> {
    ports.store.webhooks.deliveries(tenant, event_id).await
}

/// Makes a delivery due now again, under the same `webhook-id`, and enables its endpoint,
/// unless it has as many attempts as a delivery may have.
pub async fn redeliver(
    ports: &Ports,
    tenant: &str,
    delivery_id: &str,
) -> Result<Redelivery, StoreError> {
    let redelivered = ports.store.webhooks.redeliver(tenant, delivery_id).await?;
    let outcome = match &redelivered {
        Redelivery::Due(..) => "redelivery_queued",
        Redelivery::AttemptsExhausted { .. } => "attempts_exhausted",
        Redelivery::NoDelivery => return Ok(redelivered),
    };
    decision("dedup", OPERATION, tenant, delivery_id, outcome);
    Ok(redelivered)
}

/// The tenant's webhook endpoints.
pub async fn endpoints(ports: &Ports, tenant: &str) -> Result<Vec<Endpoint>, StoreError> {
    ports.store.webhooks.endpoints(tenant).await
}

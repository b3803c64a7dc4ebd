//! Merchant webhooks: registering an endpoint (a checked URL, known event types, a fresh
//! signing secret), changing, disabling and deleting it, rotating its secret with an overlap,
//! reading deliveries with their attempts, redelivering by hand. The
//! deliveries themselves are written with their events ([`crate::store::webhooks`]) and sent
//! by the dispatcher ([`crate::workers::webhooks`]).

use std::time::Duration;

use mideng::StoreError;

use crate::domain::ids::new_number;
use crate::domain::webhook::{EndpointError, checked_events, checked_url, generate_secret};
use crate::flows::{Ports, decision};
use crate::store::webhooks::NewEndpoint;
pub use crate::store::webhooks::{
    Attempt, Changed, Delivery, DeliveryStatus, Endpoint, EndpointChange, EndpointStatus,
    Redelivery, Registered,
};

/// Operation name of webhook decisions in logs and counters.
pub const OPERATION: &str = "webhook.redeliver";

/// Operation name of the registration's decisions.
pub const REGISTER: &str = "webhook.register";

/// Operation name of an endpoint's changes (update, disable, delete) in logs.
pub const CHANGE: &str = "webhook.change";

/// Operation name of a secret's rotation: the scope of its `Idempotency-Key`, so that a
/// retried rotation answers the secret the first one made instead of making another (which
/// would leave the tenant with a secret it never saw).
pub const ROTATE: &str = "webhook.rotate_secret";

/// Checks a URL as registration does: `Err` when it is not one the service delivers to.
fn url_checked(ports: &Ports, tenant: &str, url: &str) -> Result<reqwest::Url, EndpointError> {
    checked_url(url, &ports.settings.webhook_targets()).inspect_err(|error| {
        if *error == EndpointError::PrivateTarget {
            // The URL is the tenant's text: not logged, only that it was refused.
            decision("outbound", REGISTER, tenant, "endpoint", "private_target");
        }
    })
}

/// Registers `url` for `events`, or answers the tenant's endpoint with this URL.
pub async fn register(
    ports: &Ports,
    tenant: &str,
    url: &str,
    events: &[String],
) -> Result<Result<Registered, EndpointError>, StoreError> {
    let url = match url_checked(ports, tenant, url) {
        Ok(url) => url,
        Err(error) => return Ok(Err(error)),
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

/// The tenant's deliveries (of an event, or of all) in the order they were written, each with
/// its attempts, after the delivery `after`, at most `limit`; `None` when `after` is none of
/// the tenant's.
pub async fn deliveries(
    ports: &Ports,
    tenant: &str,
    event_id: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<(Delivery, Vec<Attempt>)>>, StoreError> {
    ports
        .store
        .webhooks
        .deliveries(tenant, event_id, after, limit)
        .await
}

/// A page of one of the tenant's deliveries' attempts, numbered after `after`; `None` when the
/// delivery is not the tenant's.
pub async fn attempts(
    ports: &Ports,
    tenant: &str,
    delivery_id: &str,
    after: i64,
    limit: u32,
) -> Result<Option<Vec<Attempt>>, StoreError> {
    ports
        .store
        .webhooks
        .attempts(tenant, delivery_id, after, limit)
        .await
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

/// One of the tenant's endpoints.
pub async fn endpoint(
    ports: &Ports,
    tenant: &str,
    endpoint_id: &str,
) -> Result<Option<Endpoint>, StoreError> {
    ports.store.webhooks.endpoint(tenant, endpoint_id).await
}

/// Changes one of the tenant's endpoints: a new URL (checked as registration checks it), new
/// event types, enabled or disabled. Fields not given stay as they are.
pub async fn change(
    ports: &Ports,
    tenant: &str,
    endpoint_id: &str,
    url: Option<&str>,
    events: Option<&[String]>,
    status: Option<EndpointStatus>,
) -> Result<Result<Changed, EndpointError>, StoreError> {
    let url = match url.map(|url| url_checked(ports, tenant, url)).transpose() {
        Ok(url) => url,
        Err(error) => return Ok(Err(error)),
    };
    let events = match events.map(checked_events).transpose() {
        Ok(events) => events,
        Err(error) => return Ok(Err(error)),
    };
    let changed = ports
        .store
        .webhooks
        .change(
            tenant,
            endpoint_id,
            &EndpointChange {
                url: url.as_ref().map(reqwest::Url::as_str),
                events: events.as_deref(),
                status,
            },
        )
        .await?;
    let outcome = match (&changed, status) {
        (Changed::Done(_), Some(EndpointStatus::Disabled)) => "endpoint_disabled",
        (Changed::Done(_), Some(EndpointStatus::Enabled)) => "endpoint_enabled",
        (Changed::Done(_), None) => "endpoint_changed",
        (Changed::UrlTaken, _) => "url_taken",
        (Changed::NoEndpoint, _) => return Ok(Ok(changed)),
    };
    decision("webhooks", CHANGE, tenant, endpoint_id, outcome);
    Ok(Ok(changed))
}

/// Gives one of the tenant's endpoints a fresh secret. Its current secret keeps signing beside
/// the new one for `previous_valid` (every message carries both signatures meanwhile); zero
/// ends it at once. A previous secret of an earlier rotation stops signing now.
pub async fn rotate(
    ports: &Ports,
    tenant: &str,
    endpoint_id: &str,
    previous_valid: Duration,
) -> Result<Option<Endpoint>, StoreError> {
    let now_ms = ports.clock.now_ms();
    let valid_ms = i64::try_from(previous_valid.as_millis()).unwrap_or(i64::MAX);
    let rotated = ports
        .store
        .webhooks
        .rotate(
            tenant,
            endpoint_id,
            &generate_secret(),
            now_ms.saturating_add(valid_ms),
        )
        .await?;
    if rotated.is_some() {
        decision("webhooks", ROTATE, tenant, endpoint_id, "secret_rotated");
    }
    Ok(rotated)
}

/// Deletes one of the tenant's endpoints, with its deliveries and their attempts; answers
/// whether it had one.
pub async fn delete(ports: &Ports, tenant: &str, endpoint_id: &str) -> Result<bool, StoreError> {
    let deleted = ports.store.webhooks.delete(tenant, endpoint_id).await?;
    if deleted {
        decision("webhooks", CHANGE, tenant, endpoint_id, "endpoint_deleted");
    }
    Ok(deleted)
}

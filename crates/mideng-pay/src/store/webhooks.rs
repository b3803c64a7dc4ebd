//! Merchant webhooks in storage: endpoints, one delivery per endpoint and event, and every
//! attempt with its answer.
//!
//! Invariants held here:
//! - an event's deliveries are written in the event's own transaction (`fan_out`, beside
//!   the outbox row), one per subscribed endpoint (a unique key on endpoint and event): an event
//!   exists if and only if its deliveries do, and no retry of that transaction makes two;
//! - a delivery is attempted by one dispatcher at a time: claiming it moves its due time
//!   forward by compare-and-set, so a second dispatcher's claim finds it moved and skips it; a
//!   dispatcher that dies mid-attempt leaves it due again when the claim runs out;
//! - its `webhook-id` is the event's id, the same on every attempt and every redelivery.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, clock, dialect_sql};

use super::payments::{corrupt, read};
use super::sql::SqlPay;
use crate::domain::webhook::Message;

/// An endpoint's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointStatus {
    /// Deliveries are attempted.
    Enabled,
    /// A delivery exhausted its schedule: nothing is attempted until a redelivery by hand
    /// enables it again. Its deliveries are kept.
    Disabled,
}

impl EndpointStatus {
    fn as_str(self) -> &'static str {
        match self {
            EndpointStatus::Enabled => "ENABLED",
            EndpointStatus::Disabled => "DISABLED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "ENABLED" => Some(EndpointStatus::Enabled),
            "DISABLED" => Some(EndpointStatus::Disabled),
            _ => None,
        }
    }
}

/// A tenant's endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Its id.
    pub endpoint_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// Where messages are posted.
    pub url: String,
    /// Subscribed event types.
    pub events: Vec<String>,
    /// The signing secret (`whsec_…`).
    pub secret: String,
    /// Status.
    pub status: EndpointStatus,
    /// When it was registered (Unix ms).
    pub created_at_ms: i64,
}

/// A delivery's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// An attempt got a 2xx.
    Delivered,
    /// Every attempt of the schedule failed.
    Failed,
}

impl DeliveryStatus {
    /// `PENDING`, `DELIVERED` or `FAILED`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "PENDING",
            DeliveryStatus::Delivered => "DELIVERED",
            DeliveryStatus::Failed => "FAILED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "PENDING" => Some(DeliveryStatus::Pending),
            "DELIVERED" => Some(DeliveryStatus::Delivered),
            "FAILED" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// One event for one endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its id.
    pub delivery_id: String,
    /// Tenant.
    pub tenant_id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The event's id: the message's `webhook-id`.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// The message body, as sent on every attempt.
    pub payload: String,
    /// Status.
    pub status: DeliveryStatus,
    /// Position in the retry schedule (attempts since the last redelivery by hand).
    pub step: i64,
    /// Attempts so far.
    pub attempts: i64,
    /// When the next attempt is due (Unix ms).
    pub next_attempt_at_ms: i64,
    /// When it was created (Unix ms).
    pub created_at_ms: i64,
}

/// One attempt of a delivery and what the endpoint answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// 1, 2, …
    pub attempt: i64,
    /// When (Unix ms).
    pub at_ms: i64,
    /// The HTTP status, when an answer came.
    pub status_code: Option<i64>,
    /// Why no acceptable answer came (a timeout, a refused connection, a non-2xx).
    pub error: Option<String>,
    /// How long it took.
    pub duration_ms: i64,
}

/// A delivery due now, with where and how to send it.
#[derive(Clone, Debug)]
pub struct DueDelivery {
    /// The delivery.
    pub delivery: Delivery,
    /// The endpoint's URL.
    pub url: String,
    /// The endpoint's secret.
    pub secret: String,
}

/// What an attempt came to, for the delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A 2xx.
    Delivered,
    /// Failed; the next attempt is due at this time (Unix ms).
    Retry {
        /// Unix ms.
        next_at_ms: i64,
    },
    /// Failed, and it was the schedule's last attempt: the delivery fails and its endpoint is
    /// disabled.
    Exhausted,
}

/// What an attempt's outcome makes of its delivery, as the delivery is now (`current`), when
/// the attempt was made under the claim that set its next attempt to `claimed_until_ms`: the
/// new status, step and next attempt, or `None` when the attempt only joins the history.
///
/// A claim is a lease: a dispatcher whose attempt, or whose write of it, outlasted the claim may
/// finish after another dispatcher claimed the delivery again and settled it. Its failure must
/// not undo what came after it (a `DELIVERED` made `PENDING` again, a `FAILED` that disables
/// the endpoint, a redelivery by hand overtaken), so a failure counts only under the claim
/// that is still the delivery's. A 2xx is a fact whatever the claim: the receiver has the
/// message, so it settles any delivery not yet `DELIVERED`.
fn settled_by(
    current: &Delivery,
    claimed_until_ms: i64,
    outcome: AttemptOutcome,
    now_ms: i64,
) -> Option<(DeliveryStatus, i64, i64)> {
    let step = current.step.saturating_add(1);
    let still_ours =
        current.status == DeliveryStatus::Pending && current.next_attempt_at_ms == claimed_until_ms;
    match outcome {
        AttemptOutcome::Delivered => (current.status != DeliveryStatus::Delivered).then_some((
            DeliveryStatus::Delivered,
            step,
            now_ms,
        )),
        AttemptOutcome::Retry { next_at_ms } => {
            still_ours.then_some((DeliveryStatus::Pending, step, next_at_ms))
        }
        AttemptOutcome::Exhausted => still_ours.then_some((DeliveryStatus::Failed, step, now_ms)),
    }
}

/// Attempts kept per delivery at most: the schedule's and the redeliveries by hand.
pub const ATTEMPTS_PER_DELIVERY_MAX: i64 = 100;

macro_rules! endpoint_columns {
    () => {
        "endpoint_id, tenant_id, url, events, secret, status, created_at"
    };
}

macro_rules! delivery_columns {
    () => {
        "d.delivery_id, d.tenant_id, d.endpoint_id, d.event_id, d.event_type, d.payload, d.status, d.step, d.attempts, d.next_attempt_at, d.created_at"
    };
}

fn decode_endpoint<R: SqlRow>(row: &R) -> Result<Endpoint, StoreError> {
    Ok(Endpoint {
        endpoint_id: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        url: row.text(2).map_err(read)?,
        events: row
            .text(3)
            .map_err(read)?
            .split(',')
            .filter(|event| !event.is_empty())
            .map(str::to_owned)
            .collect(),
        secret: row.text(4).map_err(read)?,
        status: EndpointStatus::parse(&row.text(5).map_err(read)?)
            .ok_or_else(|| corrupt("unknown endpoint status"))?,
        created_at_ms: row.int(6).map_err(read)?,
    })
}

fn decode_delivery<R: SqlRow>(row: &R) -> Result<Delivery, StoreError> {
    Ok(Delivery {
        delivery_id: row.text(0).map_err(read)?,
        tenant_id: row.text(1).map_err(read)?,
        endpoint_id: row.text(2).map_err(read)?,
        event_id: row.text(3).map_err(read)?,
        event_type: row.text(4).map_err(read)?,
        payload: row.text(5).map_err(read)?,
        status: DeliveryStatus::parse(&row.text(6).map_err(read)?)
            .ok_or_else(|| corrupt("unknown delivery status"))?,
        step: row.int(7).map_err(read)?,
        attempts: row.int(8).map_err(read)?,
        next_attempt_at_ms: row.int(9).map_err(read)?,
        created_at_ms: row.int(10).map_err(read)?,
    })
}

const ENDPOINT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_endpoints (endpoint_id, tenant_id, url, events, secret, status, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", 'ENABLED', " ? ", " ? ")" on_conflict_ignore
);

const ENDPOINT_SELECT_BY_URL: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ? " AND url = " ?
);

const ENDPOINTS_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ?
    " ORDER BY created_at, endpoint_id LIMIT 100"
);

const ENDPOINTS_ENABLED_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ?
    " AND status = 'ENABLED' ORDER BY created_at, endpoint_id LIMIT 100"
);

const DELIVERY_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_deliveries (delivery_id, tenant_id, endpoint_id, event_id, event_type, payload, status, step, attempts, next_attempt_at, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", 'PENDING', 0, 0, " ? ", " ? ", " ? ")" on_conflict_ignore
);

const DELIVERIES_DUE: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() ", e.url, e.secret FROM pay_webhook_deliveries d"
    " JOIN pay_webhook_endpoints e ON e.endpoint_id = d.endpoint_id"
    " WHERE d.status = 'PENDING' AND d.next_attempt_at <= " ? " AND e.status = 'ENABLED'"
    " ORDER BY d.next_attempt_at LIMIT " ?
);

const DELIVERY_CLAIM: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_deliveries SET next_attempt_at = " ? ", updated_at = " ?
    " WHERE delivery_id = " ? " AND status = 'PENDING' AND next_attempt_at = " ?
);

const ATTEMPT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

const DELIVERY_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() " FROM pay_webhook_deliveries d WHERE d.delivery_id = " ?
    for_update
);

const DELIVERY_FINISH: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_deliveries SET status = " ? ", step = " ? ", attempts = " ?
    ", next_attempt_at = " ? ", updated_at = " ? " WHERE delivery_id = " ?
);

const DELIVERY_COUNT_ATTEMPT: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_deliveries SET attempts = " ? ", updated_at = " ? " WHERE delivery_id = " ?
);

const ENDPOINT_SET_STATUS: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_endpoints SET status = " ? ", updated_at = " ? " WHERE endpoint_id = " ?
);

const DELIVERIES_OF_EVENT: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() " FROM pay_webhook_deliveries d WHERE d.tenant_id = " ?
    " AND d.event_id = " ? " ORDER BY d.created_at, d.delivery_id LIMIT 100"
);

const DELIVERIES_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() " FROM pay_webhook_deliveries d WHERE d.tenant_id = " ?
    " ORDER BY d.created_at DESC, d.delivery_id DESC LIMIT 100"
);

const ATTEMPTS_OF_DELIVERY: PerDialect<&str> = dialect_sql!(
    "SELECT attempt, at, status_code, error, duration_ms FROM pay_webhook_attempts WHERE delivery_id = "
    ? " ORDER BY attempt LIMIT 100"
);

/// Writes one delivery of the event `event_id` for each of the tenant's enabled endpoints
/// subscribed to `event_type`, in the caller's transaction (the event's own). `data` is the
/// event's JSON.
pub(super) async fn fan_out<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    event_type: &str,
    event_id: &str,
    data: &[u8],
    now_ms: i64,
) -> Result<(), StoreError> {
    let endpoints = connection
        .rows(
            ENDPOINTS_ENABLED_OF_TENANT.get::<D>(),
            &[Arg::Text(tenant_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(decode_endpoint)
        .collect::<Result<Vec<_>, _>>()?;
    let subscribed: Vec<_> = endpoints
        .iter()
        .filter(|endpoint| endpoint.events.iter().any(|event| event == event_type))
        .collect();
    if subscribed.is_empty() {
        return Ok(());
    }
    let message = Message {
        event_type: event_type.to_owned(),
        timestamp: crate::domain::rfc3339(now_ms),
        data: serde_json::from_slice(data)
            .map_err(|error| StoreError::Corrupt(format!("event not JSON: {error}")))?,
    };
    let payload = serde_json::to_string(&message)
        .map_err(|error| StoreError::Corrupt(format!("message not serialisable: {error}")))?;
    for endpoint in subscribed {
        let delivery_id = crate::domain::ids::new_number('W', now_ms);
        connection
            .run(
                DELIVERY_INSERT.get::<D>(),
                &[
                    Arg::Text(&delivery_id),
                    Arg::Text(tenant_id),
                    Arg::Text(&endpoint.endpoint_id),
                    Arg::Text(event_id),
                    Arg::Text(event_type),
                    Arg::Text(&payload),
                    Arg::Int(now_ms),
                    Arg::Int(now_ms),
                    Arg::Int(now_ms),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(())
}

/// Writes an event to the outbox and its webhook deliveries, in the caller's transaction.
pub(super) async fn publish_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    topic: &str,
    key: &str,
    payload: &[u8],
    now_ms: i64,
) -> Result<(), StoreError> {
    let event_id = mideng::outbox::sql::enqueue_in::<D>(connection, topic, key, payload).await?;
    fan_out::<D>(connection, tenant_id, topic, &event_id, payload, now_ms).await
}

/// A new endpoint.
#[derive(Clone, Copy, Debug)]
pub struct NewEndpoint<'a> {
    /// Tenant.
    pub tenant_id: &'a str,
    /// Its URL, checked.
    pub url: &'a str,
    /// Event types, checked.
    pub events: &'a [String],
    /// Its secret.
    pub secret: &'a str,
    /// Its id, when new.
    pub endpoint_id: &'a str,
}

/// What registering an endpoint did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// A new endpoint.
    New(Endpoint),
    /// The tenant has an endpoint with this URL: that one, unchanged.
    Existing(Endpoint),
    /// The tenant has [`crate::domain::webhook::ENDPOINTS_PER_TENANT_MAX`] endpoints.
    TooMany,
}

/// Webhook endpoints and deliveries.
#[async_trait]
pub trait Webhooks: Send + Sync {
    /// Registers an endpoint, or finds the tenant's endpoint with this URL.
    async fn register(&self, new: &NewEndpoint<'_>) -> Result<Registered, StoreError>;
    /// The tenant's endpoints (at most 100).
    async fn endpoints(&self, tenant_id: &str) -> Result<Vec<Endpoint>, StoreError>;
    /// Deliveries due at `now_ms` on enabled endpoints, oldest due first, at most `limit`.
    async fn due(&self, now_ms: i64, limit: u32) -> Result<Vec<DueDelivery>, StoreError>;
    /// Claims a due delivery until `until_ms`, if no one moved it since it was read.
    async fn claim(&self, delivery: &Delivery, until_ms: i64) -> Result<bool, StoreError>;
    /// Records an attempt and what it came to: `delivery` as it was claimed (its
    /// `next_attempt_at_ms` the claim's `until_ms`). A failure under a claim that lapsed and
    /// was taken again is recorded without changing the delivery.
    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &Attempt,
        outcome: AttemptOutcome,
    ) -> Result<(), StoreError>;
    /// The tenant's deliveries of an event (or its latest 100), each with its attempts.
    async fn deliveries(
        &self,
        tenant_id: &str,
        event_id: Option<&str>,
    ) -> Result<Vec<(Delivery, Vec<Attempt>)>, StoreError>;
    /// Makes a delivery due now with a fresh schedule (same `webhook-id`), and enables its
    /// endpoint; `None` when the tenant has no such delivery or it reached
    /// [`ATTEMPTS_PER_DELIVERY_MAX`].
    async fn redeliver(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> Result<Option<Delivery>, StoreError>;
}

async fn attempts_of<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    delivery_id: &str,
) -> Result<Vec<Attempt>, StoreError> {
    connection
        .rows(ATTEMPTS_OF_DELIVERY.get::<D>(), &[Arg::Text(delivery_id)])
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(|row| {
            Ok(Attempt {
                attempt: row.int(0).map_err(read)?,
                at_ms: row.int(1).map_err(read)?,
                status_code: row.opt_int(2).map_err(read)?,
                error: row.opt_text(3).map_err(read)?,
                duration_ms: row.int(4).map_err(read)?,
            })
        })
        .collect()
}

async fn register_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    new: &NewEndpoint<'_>,
    now_ms: i64,
) -> Result<Registered, StoreError> {
    let find = async |connection: &mut <D::Db as Database>::Connection| {
        connection
            .row(
                ENDPOINT_SELECT_BY_URL.get::<D>(),
                &[Arg::Text(new.tenant_id), Arg::Text(new.url)],
            )
            .await
            .map_err(store_error::<D>)?
            .as_ref()
            .map(decode_endpoint)
            .transpose()
    };
    if let Some(existing) = find(connection).await? {
        return Ok(Registered::Existing(existing));
    }
    let count = connection
        .rows(ENDPOINTS_OF_TENANT.get::<D>(), &[Arg::Text(new.tenant_id)])
        .await
        .map_err(store_error::<D>)?
        .len();
    if count >= crate::domain::webhook::ENDPOINTS_PER_TENANT_MAX {
        return Ok(Registered::TooMany);
    }
    let inserted = connection
        .run(
            ENDPOINT_INSERT.get::<D>(),
            &[
                Arg::Text(new.endpoint_id),
                Arg::Text(new.tenant_id),
                Arg::Text(new.url),
                Arg::Text(&new.events.join(",")),
                Arg::Text(new.secret),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let endpoint = find(connection)
        .await?
        .ok_or_else(|| StoreError::Conflict("endpoint vanished".to_owned()))?;
    Ok(if inserted == 1 {
        Registered::New(endpoint)
    } else {
        Registered::Existing(endpoint)
    })
}

async fn finish_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    delivery: &Delivery,
    attempt: &Attempt,
    outcome: AttemptOutcome,
    now_ms: i64,
) -> Result<(), StoreError> {
    let current = connection
        .row(
            DELIVERY_SELECT_LOCKED.get::<D>(),
            &[Arg::Text(&delivery.delivery_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_delivery)
        .transpose()?
        .ok_or_else(|| corrupt("a delivery vanished"))?;
    let number = current.attempts.saturating_add(1);
    connection
        .run(
            ATTEMPT_INSERT.get::<D>(),
            &[
                Arg::Text(&current.delivery_id),
                Arg::Int(number),
                Arg::Int(attempt.at_ms),
                Arg::OptInt(attempt.status_code),
                Arg::OptText(attempt.error.as_deref()),
                Arg::Int(attempt.duration_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let Some((status, step, next_at_ms)) =
        settled_by(&current, delivery.next_attempt_at_ms, outcome, now_ms)
    else {
        tracing::info!(
            delivery_id = %current.delivery_id, attempt = number, outcome = ?outcome,
            status = current.status.as_str(),
            "an attempt finished after its claim lapsed: recorded, the delivery left as it is"
        );
        connection
            .run(
                DELIVERY_COUNT_ATTEMPT.get::<D>(),
                &[
                    Arg::Int(number),
                    Arg::Int(now_ms),
                    Arg::Text(&current.delivery_id),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
        return Ok(());
    };
    connection
        .run(
            DELIVERY_FINISH.get::<D>(),
            &[
                Arg::Text(status.as_str()),
                Arg::Int(step),
                Arg::Int(number),
                Arg::Int(next_at_ms),
                Arg::Int(now_ms),
                Arg::Text(&current.delivery_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if outcome == AttemptOutcome::Exhausted {
        connection
            .run(
                ENDPOINT_SET_STATUS.get::<D>(),
                &[
                    Arg::Text(EndpointStatus::Disabled.as_str()),
                    Arg::Int(now_ms),
                    Arg::Text(&current.endpoint_id),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(())
}

async fn redeliver_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    delivery_id: &str,
    now_ms: i64,
) -> Result<Option<Delivery>, StoreError> {
    let Some(current) = connection
        .row(DELIVERY_SELECT_LOCKED.get::<D>(), &[Arg::Text(delivery_id)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_delivery)
        .transpose()?
        .filter(|delivery| delivery.tenant_id == tenant_id)
    else {
        return Ok(None);
    };
    if current.attempts >= ATTEMPTS_PER_DELIVERY_MAX {
        return Ok(None);
    }
    connection
        .run(
            DELIVERY_FINISH.get::<D>(),
            &[
                Arg::Text(DeliveryStatus::Pending.as_str()),
                Arg::Int(0),
                Arg::Int(current.attempts),
                Arg::Int(now_ms),
                Arg::Int(now_ms),
                Arg::Text(&current.delivery_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    connection
        .run(
            ENDPOINT_SET_STATUS.get::<D>(),
            &[
                Arg::Text(EndpointStatus::Enabled.as_str()),
                Arg::Int(now_ms),
                Arg::Text(&current.endpoint_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Some(Delivery {
        status: DeliveryStatus::Pending,
        step: 0,
        next_attempt_at_ms: now_ms,
        ..current
    }))
}

#[async_trait]
impl<D: Dialect> Webhooks for SqlPay<D> {
    async fn register(&self, new: &NewEndpoint<'_>) -> Result<Registered, StoreError> {
        let _timer = self.timer("webhooks.register");
        let now_ms = clock::now_ms();
        self.store
            .write(|transaction| Box::pin(register_on::<D>(transaction, new, now_ms)))
            .await
    }

    async fn endpoints(&self, tenant_id: &str) -> Result<Vec<Endpoint>, StoreError> {
        let _timer = self.timer("webhooks.endpoints");
        let mut connection = self.connection().await?;
        connection
            .rows(ENDPOINTS_OF_TENANT.get::<D>(), &[Arg::Text(tenant_id)])
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(decode_endpoint)
            .collect()
    }

    async fn due(&self, now_ms: i64, limit: u32) -> Result<Vec<DueDelivery>, StoreError> {
        let _timer = self.timer("webhooks.due");
        let mut connection = self.connection().await?;
        connection
            .rows(
                DELIVERIES_DUE.get::<D>(),
                &[Arg::Int(now_ms), Arg::Int(i64::from(limit))],
            )
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(|row| {
                Ok(DueDelivery {
                    delivery: decode_delivery(row)?,
                    url: row.text(11).map_err(read)?,
                    secret: row.text(12).map_err(read)?,
                })
            })
            .collect()
    }

    async fn claim(&self, delivery: &Delivery, until_ms: i64) -> Result<bool, StoreError> {
        let _timer = self.timer("webhooks.claim");
        let now_ms = clock::now_ms();
        let mut connection = self.connection().await?;
        let changed = connection
            .run(
                DELIVERY_CLAIM.get::<D>(),
                &[
                    Arg::Int(until_ms),
                    Arg::Int(now_ms),
                    Arg::Text(&delivery.delivery_id),
                    Arg::Int(delivery.next_attempt_at_ms),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
        Ok(changed == 1)
    }

    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &Attempt,
        outcome: AttemptOutcome,
    ) -> Result<(), StoreError> {
        let _timer = self.timer("webhooks.finish");
        let now_ms = clock::now_ms();
        self.store
            .write(|transaction| {
                Box::pin(finish_on::<D>(
                    transaction,
                    delivery,
                    attempt,
                    outcome,
                    now_ms,
                ))
            })
            .await
    }

    async fn deliveries(
        &self,
        tenant_id: &str,
        event_id: Option<&str>,
    ) -> Result<Vec<(Delivery, Vec<Attempt>)>, StoreError> {
        let _timer = self.timer("webhooks.deliveries");
        let mut connection = self.connection().await?;
        let rows = match event_id {
            Some(event_id) => {
                connection
                    .rows(
                        DELIVERIES_OF_EVENT.get::<D>(),
                        &[Arg::Text(tenant_id), Arg::Text(event_id)],
                    )
                    .await
            }
            None => {
                connection
                    .rows(DELIVERIES_OF_TENANT.get::<D>(), &[Arg::Text(tenant_id)])
                    .await
            }
        }
        .map_err(store_error::<D>)?;
        let deliveries = rows
            .iter()
            .map(decode_delivery)
            .collect::<Result<Vec<_>, _>>()?;
        let mut shown = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let attempts = attempts_of::<D>(&mut connection, &delivery.delivery_id).await?;
            shown.push((delivery, attempts));
        }
        Ok(shown)
    }

    async fn redeliver(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> Result<Option<Delivery>, StoreError> {
        let _timer = self.timer("webhooks.redeliver");
        let now_ms = clock::now_ms();
        self.store
            .write(|transaction| {
                Box::pin(redeliver_on::<D>(
                    transaction,
                    tenant_id,
                    delivery_id,
                    now_ms,
                ))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(status: DeliveryStatus, step: i64, next_attempt_at_ms: i64) -> Delivery {
        Delivery {
            delivery_id: "W1".to_owned(),
            tenant_id: "t".to_owned(),
            endpoint_id: "E1".to_owned(),
            event_id: "evt_1".to_owned(),
            event_type: "payment.succeeded".to_owned(),
            payload: "{}".to_owned(),
            status,
            step,
            attempts: step,
            next_attempt_at_ms,
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_lapsed_claims_failure_does_not_undo_what_came_after_it() {
        use AttemptOutcome::{Delivered, Exhausted, Retry};
        use DeliveryStatus::{Failed, Pending};
        let retry = Retry { next_at_ms: 900 };
        // Still under its claim: every outcome counts.
        let ours = delivery(Pending, 3, 500);
        assert_eq!(settled_by(&ours, 500, retry, 700), Some((Pending, 4, 900)));
        assert_eq!(
            settled_by(&ours, 500, Exhausted, 700),
            Some((Failed, 4, 700))
        );
        assert_eq!(
            settled_by(&ours, 500, Delivered, 700),
            Some((DeliveryStatus::Delivered, 4, 700))
        );
        // Claimed again by another dispatcher (a later mark): only a 2xx counts.
        let taken = delivery(Pending, 3, 650);
        assert_eq!(settled_by(&taken, 500, retry, 700), None);
        assert_eq!(settled_by(&taken, 500, Exhausted, 700), None);
        assert!(settled_by(&taken, 500, Delivered, 700).is_some());
        // Delivered meanwhile (seen in a storm: a 204 made PENDING again, then FAILED, by
        // attempts that outlasted their claims): it stays delivered.
        for outcome in [retry, Exhausted, Delivered] {
            let delivered = delivery(DeliveryStatus::Delivered, 4, 500);
            assert_eq!(
                settled_by(&delivered, 500, outcome, 700),
                None,
                "{outcome:?}"
            );
        }
        // Failed meanwhile: a failure leaves it failed; a 2xx proves it arrived.
        let failed = delivery(Failed, 8, 500);
        assert_eq!(settled_by(&failed, 500, retry, 700), None);
        assert_eq!(settled_by(&failed, 500, Exhausted, 700), None);
        assert_eq!(
            settled_by(&failed, 500, Delivered, 700),
            Some((DeliveryStatus::Delivered, 9, 700))
        );
        // Redelivered by hand after the claim (step 0, due at once): the old failure is history.
        let redelivered = delivery(Pending, 0, 680);
        assert_eq!(settled_by(&redelivered, 500, retry, 700), None);
    }
}

//! The deliveries' statements per dialect and the port's implementation on the SQL store (the
//! endpoints' statements are [`super::endpoint_sql`]).

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::endpoint_sql::{
    ENDPOINT_SELECT, ENDPOINT_SET_STATUS, ENDPOINTS_OF_TENANT, change_on, decode_endpoint,
    delete_on, previous_secret, register_on, rotate_on,
};
use super::*;
use crate::store::rows::{corrupt, page_after, read};
use crate::store::sql::SqlPay;

macro_rules! delivery_columns {
    () => {
        "d.delivery_id, d.tenant_id, d.endpoint_id, d.event_id, d.event_type, d.payload, d.status, d.step, d.attempts, d.next_attempt_at, d.created_at"
    };
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

const DELIVERY_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_deliveries (delivery_id, tenant_id, endpoint_id, event_id, event_type, payload, status, step, attempts, next_attempt_at, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", 'PENDING', 0, 0, " ? ", " ? ", " ? ")" on_conflict_ignore
);

// Each endpoint's due deliveries are numbered oldest first (`ROW_NUMBER`: SQLite ≥ 3.25,
// PostgreSQL, MariaDB ≥ 10.2, MySQL ≥ 8), and only the first few of each are kept. The inner
// query's `d` is the deliveries table; the outer one's is the ranked rows, whose columns carry
// the same names, so that `delivery_columns!` reads both. The left-out endpoints and tenants
// come as one JSON array of strings each (any id, no separator to escape), opened per dialect.
const DELIVERIES_DUE: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() ", d.url, d.secret, d.previous_secret, d.previous_secret_until FROM ("
    "SELECT " delivery_columns!() ", e.url, e.secret, e.previous_secret, e.previous_secret_until, ROW_NUMBER() OVER"
    " (PARTITION BY d.endpoint_id ORDER BY d.next_attempt_at, d.delivery_id) AS endpoint_rank"
    " FROM pay_webhook_deliveries d JOIN pay_webhook_endpoints e ON e.endpoint_id = d.endpoint_id"
    " WHERE d.status = 'PENDING' AND d.next_attempt_at <= " ? " AND e.status = 'ENABLED'"
    { postgres: " AND d.endpoint_id NOT IN (SELECT jsonb_array_elements_text(CAST(",
      sqlite: " AND d.endpoint_id NOT IN (SELECT value FROM json_each(",
      mysql: " AND JSON_CONTAINS(" }
    ?
    { postgres: " AS jsonb)))", sqlite: "))", mysql: ", JSON_QUOTE(d.endpoint_id)) = 0" }
    { postgres: " AND d.tenant_id NOT IN (SELECT jsonb_array_elements_text(CAST(",
      sqlite: " AND d.tenant_id NOT IN (SELECT value FROM json_each(",
      mysql: " AND JSON_CONTAINS(" }
    ?
    { postgres: " AS jsonb)))", sqlite: "))", mysql: ", JSON_QUOTE(d.tenant_id)) = 0" }
    ") d WHERE d.endpoint_rank <= " ? " ORDER BY d.next_attempt_at, d.delivery_id LIMIT " ?
);

const DELIVERY_CLAIM: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_deliveries SET next_attempt_at = " ? ", updated_at = " ?
    " WHERE delivery_id = " ? " AND status = 'PENDING' AND next_attempt_at = " ?
);

const ATTEMPT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

const DELIVERIES_UNTOUCHED: PerDialect<&str> = dialect_sql!(
    "SELECT delivery_id FROM pay_webhook_deliveries WHERE updated_at <= " ?
    " ORDER BY updated_at, delivery_id LIMIT " ? skip_locked
);

const ATTEMPTS_DELETE: PerDialect<&str> =
    dialect_sql!("DELETE FROM pay_webhook_attempts WHERE delivery_id = "?);

const DELIVERY_DELETE: PerDialect<&str> = dialect_sql!(
    "DELETE FROM pay_webhook_deliveries WHERE delivery_id = " ? " AND updated_at <= " ?
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

const DELIVERIES_OF_EVENT: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() " FROM pay_webhook_deliveries d WHERE d.tenant_id = " ?
    " AND d.event_id = " ?
    " AND (d.created_at > " ? " OR (d.created_at = " ? " AND d.delivery_id > " ? "))"
    " ORDER BY d.created_at, d.delivery_id LIMIT " ?
);

const DELIVERIES_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " delivery_columns!() " FROM pay_webhook_deliveries d WHERE d.tenant_id = " ?
    " AND (d.created_at > " ? " OR (d.created_at = " ? " AND d.delivery_id > " ? "))"
    " ORDER BY d.created_at, d.delivery_id LIMIT " ?
);

const DELIVERY_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, delivery_id FROM pay_webhook_deliveries WHERE tenant_id = " ?
    " AND delivery_id = " ?
);

const DELIVERY_CURSOR_OF_EVENT: PerDialect<&str> = dialect_sql!(
    "SELECT created_at, delivery_id FROM pay_webhook_deliveries WHERE tenant_id = " ?
    " AND event_id = " ? " AND delivery_id = " ?
);

const DELIVERY_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT delivery_id FROM pay_webhook_deliveries WHERE tenant_id = " ? " AND delivery_id = " ?
);

const ATTEMPTS_PAGE: PerDialect<&str> = dialect_sql!(
    "SELECT attempt, at, status_code, error, duration_ms FROM pay_webhook_attempts"
    " WHERE delivery_id = " ? " AND attempt > " ? " ORDER BY attempt LIMIT " ?
);

const ATTEMPTS_OF_DELIVERY: PerDialect<&str> = dialect_sql!(
    "SELECT attempt, at, status_code, error, duration_ms FROM pay_webhook_attempts WHERE delivery_id = "
    ? " ORDER BY attempt LIMIT 100"
);

/// Writes one delivery of the event `event_id` for each of the tenant's endpoints subscribed
/// to `event_type`, in the caller's transaction (the event's own). `data` is the event's JSON.
///
/// A disabled endpoint gets its deliveries too: they wait, PENDING, while it is disabled (the
/// dispatcher reads none of them) and go out oldest first once a redelivery by hand enables it
/// again, each under its own `webhook-id`. A merchant whose endpoint was down for a day misses
/// nothing that happened meanwhile; what waits longer than the webhook retention is purged.
pub(crate) async fn fan_out<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    event_type: &str,
    event_id: &str,
    data: &[u8],
    now_ms: i64,
) -> Result<(), StoreError> {
    let endpoints = connection
        .rows(ENDPOINTS_OF_TENANT.get::<D>(), &[Arg::Text(tenant_id)])
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

/// Deletes up to `limit` deliveries untouched since `untouched_since_ms`, each with its
/// attempts, in one transaction; the rows are locked as they are read (others' locked rows
/// skipped), so a delivery claimed or redelivered meanwhile is not deleted.
async fn purge_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    untouched_since_ms: i64,
    limit: i64,
) -> Result<u64, StoreError> {
    let ids = connection
        .rows(
            DELIVERIES_UNTOUCHED.get::<D>(),
            &[Arg::Int(untouched_since_ms), Arg::Int(limit)],
        )
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(|row| row.text(0).map_err(read))
        .collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0;
    for delivery_id in &ids {
        connection
            .run(ATTEMPTS_DELETE.get::<D>(), &[Arg::Text(delivery_id)])
            .await
            .map_err(store_error::<D>)?;
        deleted += connection
            .run(
                DELIVERY_DELETE.get::<D>(),
                &[Arg::Text(delivery_id), Arg::Int(untouched_since_ms)],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(deleted)
}

fn decode_attempt<R: SqlRow>(row: &R) -> Result<Attempt, StoreError> {
    Ok(Attempt {
        attempt: row.int(0).map_err(read)?,
        at_ms: row.int(1).map_err(read)?,
        status_code: row.opt_int(2).map_err(read)?,
        error: row.opt_text(3).map_err(read)?,
        duration_ms: row.int(4).map_err(read)?,
    })
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
        .map(decode_attempt)
        .collect()
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
        .transpose()?;
    let Some(current) = current else {
        // Deleted with its endpoint (or purged) while the attempt was out: nothing to record.
        tracing::info!(
            delivery_id = %delivery.delivery_id,
            "an attempt finished after its delivery was deleted: dropped"
        );
        return Ok(());
    };
    let number = current.attempts.saturating_add(1);
    let outcome = within_the_bound(outcome, number);
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
) -> Result<Redelivery, StoreError> {
    let Some(current) = connection
        .row(DELIVERY_SELECT_LOCKED.get::<D>(), &[Arg::Text(delivery_id)])
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_delivery)
        .transpose()?
        .filter(|delivery| delivery.tenant_id == tenant_id)
    else {
        return Ok(Redelivery::NoDelivery);
    };
    if current.attempts >= ATTEMPTS_PER_DELIVERY_MAX {
        return Ok(Redelivery::AttemptsExhausted {
            attempts: current.attempts,
        });
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
    let attempts = attempts_of::<D>(connection, &current.delivery_id).await?;
    Ok(Redelivery::Due(
        Box::new(Delivery {
            status: DeliveryStatus::Pending,
            step: 0,
            next_attempt_at_ms: now_ms,
            ..current
        }),
        attempts,
    ))
}

#[async_trait]
impl<D: Dialect> Webhooks for SqlPay<D> {
    async fn register(&self, new: &NewEndpoint<'_>) -> Result<Registered, StoreError> {
        let _timer = self.timer("webhooks.register");
        let now_ms = self.now_ms();
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

    async fn endpoint(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
    ) -> Result<Option<Endpoint>, StoreError> {
        let _timer = self.timer("webhooks.endpoint");
        let mut connection = self.connection().await?;
        connection
            .row(
                ENDPOINT_SELECT.get::<D>(),
                &[Arg::Text(tenant_id), Arg::Text(endpoint_id)],
            )
            .await
            .map_err(store_error::<D>)?
            .as_ref()
            .map(decode_endpoint)
            .transpose()
    }

    async fn change(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        change: &EndpointChange<'_>,
    ) -> Result<Changed, StoreError> {
        let _timer = self.timer("webhooks.change");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(change_on::<D>(
                    transaction,
                    tenant_id,
                    endpoint_id,
                    change,
                    now_ms,
                ))
            })
            .await
    }

    async fn rotate(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        secret: &str,
        previous_until_ms: i64,
    ) -> Result<Option<Endpoint>, StoreError> {
        let _timer = self.timer("webhooks.rotate");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(rotate_on::<D>(
                    transaction,
                    tenant_id,
                    endpoint_id,
                    secret,
                    previous_until_ms,
                    now_ms,
                ))
            })
            .await
    }

    async fn delete(&self, tenant_id: &str, endpoint_id: &str) -> Result<bool, StoreError> {
        let _timer = self.timer("webhooks.delete");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(delete_on::<D>(transaction, tenant_id, endpoint_id, now_ms))
            })
            .await
    }

    async fn due(&self, query: &DueQuery<'_>) -> Result<Vec<DueDelivery>, StoreError> {
        let _timer = self.timer("webhooks.due");
        let skip_endpoints = serde_json::to_string(query.skip_endpoints)
            .expect("a list of strings always serialises to JSON");
        let skip_tenants = serde_json::to_string(query.skip_tenants)
            .expect("a list of strings always serialises to JSON");
        let mut connection = self.connection().await?;
        connection
            .rows(
                DELIVERIES_DUE.get::<D>(),
                &[
                    Arg::Int(query.now_ms),
                    Arg::Text(&skip_endpoints),
                    Arg::Text(&skip_tenants),
                    Arg::Int(i64::from(query.per_endpoint)),
                    Arg::Int(i64::from(query.limit)),
                ],
            )
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(|row| {
                Ok(DueDelivery {
                    delivery: decode_delivery(row)?,
                    url: row.text(11).map_err(read)?,
                    secret: row.text(12).map_err(read)?,
                    previous_secret: previous_secret(row, 13)?,
                })
            })
            .collect()
    }

    async fn claim(&self, delivery: &Delivery, until_ms: i64) -> Result<bool, StoreError> {
        let _timer = self.timer("webhooks.claim");
        let now_ms = self.now_ms();
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
        let now_ms = self.now_ms();
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

    async fn purge_deliveries(
        &self,
        untouched_since_ms: i64,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let _timer = self.timer("webhooks.purge");
        let limit = i64::from(limit.clamp(1, mideng::limits::PURGE_BATCH_ROWS_MAX));
        self.store
            .write(|transaction| Box::pin(purge_on::<D>(transaction, untouched_since_ms, limit)))
            .await
    }

    async fn deliveries(
        &self,
        tenant_id: &str,
        event_id: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<(Delivery, Vec<Attempt>)>>, StoreError> {
        let _timer = self.timer("webhooks.deliveries");
        let mut connection = self.connection().await?;
        let (cursor, page, scope) = match event_id {
            Some(event_id) => (
                DELIVERY_CURSOR_OF_EVENT.get::<D>(),
                DELIVERIES_OF_EVENT.get::<D>(),
                vec![Arg::Text(tenant_id), Arg::Text(event_id)],
            ),
            None => (
                DELIVERY_CURSOR.get::<D>(),
                DELIVERIES_OF_TENANT.get::<D>(),
                vec![Arg::Text(tenant_id)],
            ),
        };
        let Some(deliveries) = page_after::<D, _>(
            &mut connection,
            cursor,
            page,
            &scope,
            after,
            i64::from(limit),
            decode_delivery,
        )
        .await?
        else {
            return Ok(None);
        };
        let mut shown = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let attempts = attempts_of::<D>(&mut connection, &delivery.delivery_id).await?;
            shown.push((delivery, attempts));
        }
        Ok(Some(shown))
    }

    async fn attempts(
        &self,
        tenant_id: &str,
        delivery_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Option<Vec<Attempt>>, StoreError> {
        let _timer = self.timer("webhooks.attempts");
        let mut connection = self.connection().await?;
        let ours = connection
            .row(
                DELIVERY_OF_TENANT.get::<D>(),
                &[Arg::Text(tenant_id), Arg::Text(delivery_id)],
            )
            .await
            .map_err(store_error::<D>)?
            .is_some();
        if !ours {
            return Ok(None);
        }
        connection
            .rows(
                ATTEMPTS_PAGE.get::<D>(),
                &[
                    Arg::Text(delivery_id),
                    Arg::Int(after),
                    Arg::Int(i64::from(limit)),
                ],
            )
            .await
            .map_err(store_error::<D>)?
            .iter()
            .map(decode_attempt)
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    async fn redeliver(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> Result<Redelivery, StoreError> {
        let _timer = self.timer("webhooks.redeliver");
        let now_ms = self.now_ms();
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

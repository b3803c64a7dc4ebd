//! The endpoints' statements per dialect and their transactions: registering, changing,
//! rotating the secret, deleting with the deliveries. The deliveries' are in [`super::sql`].

use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::*;
use crate::store::rows::{corrupt, read};

macro_rules! endpoint_columns {
    () => {
        "endpoint_id, tenant_id, url, events, secret, status, created_at, previous_secret, previous_secret_until"
    };
}

pub(super) fn decode_endpoint<R: SqlRow>(row: &R) -> Result<Endpoint, StoreError> {
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
        previous_secret: previous_secret(row, 7)?,
    })
}

/// The previous secret and until when it signs, in the columns `at` and `at + 1`; `None`
/// unless both are set.
pub(super) fn previous_secret<R: SqlRow>(
    row: &R,
    at: usize,
) -> Result<Option<(String, i64)>, StoreError> {
    Ok(
        match (
            row.opt_text(at).map_err(read)?,
            row.opt_int(at + 1).map_err(read)?,
        ) {
            (Some(secret), Some(until_ms)) => Some((secret, until_ms)),
            _ => None,
        },
    )
}

const ENDPOINT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_webhook_endpoints (endpoint_id, tenant_id, url, events, secret, status, created_at, updated_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", 'ENABLED', " ? ", " ? ")" on_conflict_ignore
);

const ENDPOINT_SELECT_BY_URL: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ? " AND url = " ?
);

const ENDPOINT_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ?
    " AND endpoint_id = " ? for_update
);

pub(super) const ENDPOINT_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ?
    " AND endpoint_id = " ?
);

const ENDPOINT_UPDATE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_endpoints SET url = " ? ", events = " ? ", status = " ? ", updated_at = " ?
    " WHERE endpoint_id = " ?
);

const ENDPOINT_ROTATE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_endpoints SET secret = " ? ", previous_secret = " ?
    ", previous_secret_until = " ? ", updated_at = " ? " WHERE endpoint_id = " ?
);

// Deleting an endpoint: its deliveries are locked first (an attempt finishing meanwhile
// commits its row before this goes on, and is deleted with the rest), then their attempts,
// the deliveries and the endpoint go.
const ENDPOINT_DELIVERIES_LOCK: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_deliveries SET updated_at = " ? " WHERE endpoint_id = " ?
);

const ENDPOINT_ATTEMPTS_DELETE: PerDialect<&str> = dialect_sql!(
    "DELETE FROM pay_webhook_attempts WHERE delivery_id IN"
    " (SELECT delivery_id FROM pay_webhook_deliveries WHERE endpoint_id = " ? ")"
);

const ENDPOINT_DELIVERIES_DELETE: PerDialect<&str> =
    dialect_sql!("DELETE FROM pay_webhook_deliveries WHERE endpoint_id = "?);

const ENDPOINT_DELETE: PerDialect<&str> =
    dialect_sql!("DELETE FROM pay_webhook_endpoints WHERE endpoint_id = "?);

pub(super) const ENDPOINTS_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " endpoint_columns!() " FROM pay_webhook_endpoints WHERE tenant_id = " ?
    " ORDER BY created_at, endpoint_id LIMIT 100"
);

pub(super) const ENDPOINT_SET_STATUS: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_webhook_endpoints SET status = " ? ", updated_at = " ? " WHERE endpoint_id = " ?
);

pub(super) async fn register_on<D: Dialect>(
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

pub(super) async fn locked_endpoint<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    endpoint_id: &str,
) -> Result<Option<Endpoint>, StoreError> {
    connection
        .row(
            ENDPOINT_SELECT_LOCKED.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(endpoint_id)],
        )
        .await
        .map_err(store_error::<D>)?
        .as_ref()
        .map(decode_endpoint)
        .transpose()
}

pub(super) async fn change_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    endpoint_id: &str,
    change: &EndpointChange<'_>,
    now_ms: i64,
) -> Result<Changed, StoreError> {
    let Some(current) = locked_endpoint::<D>(connection, tenant_id, endpoint_id).await? else {
        return Ok(Changed::NoEndpoint);
    };
    if let Some(url) = change.url.filter(|url| *url != current.url) {
        let taken = connection
            .row(
                ENDPOINT_SELECT_BY_URL.get::<D>(),
                &[Arg::Text(tenant_id), Arg::Text(url)],
            )
            .await
            .map_err(store_error::<D>)?
            .is_some();
        if taken {
            return Ok(Changed::UrlTaken);
        }
    }
    let changed = Endpoint {
        url: change.url.map_or(current.url.clone(), str::to_owned),
        events: change
            .events
            .map_or(current.events.clone(), <[String]>::to_vec),
        status: change.status.unwrap_or(current.status),
        ..current
    };
    connection
        .run(
            ENDPOINT_UPDATE.get::<D>(),
            &[
                Arg::Text(&changed.url),
                Arg::Text(&changed.events.join(",")),
                Arg::Text(changed.status.as_str()),
                Arg::Int(now_ms),
                Arg::Text(endpoint_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Changed::Done(changed))
}

pub(super) async fn rotate_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    endpoint_id: &str,
    secret: &str,
    previous_until_ms: i64,
    now_ms: i64,
) -> Result<Option<Endpoint>, StoreError> {
    let Some(current) = locked_endpoint::<D>(connection, tenant_id, endpoint_id).await? else {
        return Ok(None);
    };
    let previous_secret =
        (previous_until_ms > now_ms).then(|| (current.secret.clone(), previous_until_ms));
    connection
        .run(
            ENDPOINT_ROTATE.get::<D>(),
            &[
                Arg::Text(secret),
                Arg::OptText(previous_secret.as_ref().map(|(secret, _)| secret.as_str())),
                Arg::OptInt(previous_secret.as_ref().map(|(_, until_ms)| *until_ms)),
                Arg::Int(now_ms),
                Arg::Text(endpoint_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Some(Endpoint {
        secret: secret.to_owned(),
        previous_secret,
        ..current
    }))
}

pub(super) async fn delete_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    endpoint_id: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    if locked_endpoint::<D>(connection, tenant_id, endpoint_id)
        .await?
        .is_none()
    {
        return Ok(false);
    }
    connection
        .run(
            ENDPOINT_DELIVERIES_LOCK.get::<D>(),
            &[Arg::Int(now_ms), Arg::Text(endpoint_id)],
        )
        .await
        .map_err(store_error::<D>)?;
    for statement in [
        &ENDPOINT_ATTEMPTS_DELETE,
        &ENDPOINT_DELIVERIES_DELETE,
        &ENDPOINT_DELETE,
    ] {
        connection
            .run(statement.get::<D>(), &[Arg::Text(endpoint_id)])
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(true)
}

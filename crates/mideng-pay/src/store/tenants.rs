//! Tenants: who may call the API. A tenant is found by the SHA-256 of its API key; the key
//! itself is never stored.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, clock, dialect_sql};

use super::sql::SqlPay;

/// Creates a tenant; an existing tenant id inserts nothing, and the caller re-keys it instead.
const TENANT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_tenants (tenant_id, api_key_hash, created_at) VALUES (" ? ", " ? ", " ? ")"
    on_conflict_ignore
);

/// Gives a tenant another API key (its digest).
const TENANT_SET_KEY: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_tenants SET api_key_hash = " ? " WHERE tenant_id = " ?
);

/// Creates the tenant with this key hash, or gives an existing tenant of that id this key
/// (for the demo tenant, whose key may change between starts).
pub async fn upsert_tenant<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    api_key_hash: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let inserted = connection
        .run(
            TENANT_INSERT.get::<D>(),
            &[
                Arg::Text(tenant_id),
                Arg::Text(api_key_hash),
                Arg::Int(now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted == 0 {
        connection
            .run(
                TENANT_SET_KEY.get::<D>(),
                &[Arg::Text(api_key_hash), Arg::Text(tenant_id)],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(())
}

/// The tenant owning an API key, by the key's digest.
const TENANT_SELECT_BY_KEY: PerDialect<&str> =
    dialect_sql!("SELECT tenant_id FROM pay_tenants WHERE api_key_hash = "?);

/// The tenant whose API key hashes to `api_key_hash`.
pub async fn tenant_by_key<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    api_key_hash: &str,
) -> Result<Option<String>, StoreError> {
    let row = connection
        .row(TENANT_SELECT_BY_KEY.get::<D>(), &[Arg::Text(api_key_hash)])
        .await
        .map_err(store_error::<D>)?;
    row.map(|row| {
        row.text(0)
            .map_err(|error| StoreError::Corrupt(format!("unreadable tenant: {error}")))
    })
    .transpose()
}

/// Tenants and their API keys (stored as SHA-256 digests).
#[async_trait]
pub trait Tenants: Send + Sync {
    /// Creates or re-keys a tenant.
    async fn upsert_tenant(&self, tenant_id: &str, api_key_hash: &str) -> Result<(), StoreError>;
    /// The tenant owning the key with this hash.
    async fn tenant_by_key(&self, api_key_hash: &str) -> Result<Option<String>, StoreError>;
}

#[async_trait]
impl<D: Dialect> Tenants for SqlPay<D> {
    async fn upsert_tenant(&self, tenant_id: &str, api_key_hash: &str) -> Result<(), StoreError> {
        let _timer = self.timer("tenants.upsert_tenant");
        let now_ms = clock::now_ms();
        self.store
            .write(|transaction| {
                Box::pin(upsert_tenant::<D>(
                    transaction,
                    tenant_id,
                    api_key_hash,
                    now_ms,
                ))
            })
            .await
    }

    async fn tenant_by_key(&self, api_key_hash: &str) -> Result<Option<String>, StoreError> {
        let _timer = self.timer("tenants.tenant_by_key");
        let mut connection = self.connection().await?;
        tenant_by_key::<D>(&mut connection, api_key_hash).await
    }
}

//! Tenants: who may call the API. A tenant is found by the SHA-256 of its API key; the key
//! itself is never stored.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, SqlConn, SqlRow, store_error};
use mideng::{StoreError, clock};

use super::sql::SqlPay;
use super::statements::PayDialect;

/// Creates the tenant with this key hash, or gives an existing tenant of that id this key
/// (for the demo tenant, whose key may change between starts).
pub async fn upsert_tenant<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    api_key_hash: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let statements = D::pay_statements();
    let inserted = connection
        .run(
            statements.tenant_insert,
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
                statements.tenant_set_key,
                &[Arg::Text(api_key_hash), Arg::Text(tenant_id)],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(())
}

/// The tenant whose API key hashes to `api_key_hash`.
pub async fn tenant_by_key<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    api_key_hash: &str,
) -> Result<Option<String>, StoreError> {
    let row = connection
        .row(
            D::pay_statements().tenant_select_by_key,
            &[Arg::Text(api_key_hash)],
        )
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
impl<D: PayDialect> Tenants for SqlPay<D> {
    async fn upsert_tenant(&self, tenant_id: &str, api_key_hash: &str) -> Result<(), StoreError> {
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
        let mut connection = self.connection().await?;
        tenant_by_key::<D>(&mut connection, api_key_hash).await
    }
}

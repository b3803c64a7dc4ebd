//! Tenants: who may call the API. A tenant is found by the SHA-256 of one of its two API keys
//! (a secret key, and optionally a publishable one: [`crate::domain::keys`]); the keys
//! themselves are never stored, and the column a digest sits in is what says its kind.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::read;
use crate::domain::keys::KeyKind;
use crate::store::sql::SqlPay;

/// Creates a tenant; an existing tenant id inserts nothing, and the caller re-keys it after.
const TENANT_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_tenants (tenant_id, api_key_hash, created_at) VALUES (" ? ", " ? ", " ? ")"
    on_conflict_ignore
);

/// Gives a tenant other API keys (their digests; no publishable key: NULL).
const TENANT_SET_KEY: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_tenants SET api_key_hash = " ? ", publishable_key_hash = " ? " WHERE tenant_id = " ?
);

/// Creates the tenant with these key hashes, or gives an existing tenant of that id these keys
/// (for the demo tenant, whose keys may change between starts). `publishable_key_hash` `None`:
/// the tenant has no publishable key (any it had stops working).
pub async fn upsert_tenant<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    api_key_hash: &str,
    publishable_key_hash: Option<&str>,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
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
    // The insert wrote the secret key only; the update writes both, new tenant or not.
    connection
        .run(
            TENANT_SET_KEY.get::<D>(),
            &[
                Arg::Text(api_key_hash),
                Arg::OptText(publishable_key_hash),
                Arg::Text(tenant_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// The tenant owning an API key, by the key's digest, and the key's kind: a digest is looked
/// up among the secret keys and among the publishable ones (each column unique).
const TENANT_SELECT_BY_KEY: PerDialect<&str> = dialect_sql!(
    "SELECT tenant_id, api_key_hash FROM pay_tenants WHERE api_key_hash = " ? " OR publishable_key_hash = " ?
);

/// The tenant whose secret or publishable key hashes to `api_key_hash`, with the key's kind.
/// A digest found as both (two tenants' keys colliding under SHA-256, or an operator who gave
/// one tenant the same key twice) opens nothing: which kind it is would be a guess.
pub async fn tenant_by_key<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    api_key_hash: &str,
) -> Result<Option<(String, KeyKind)>, StoreError> {
    let rows = connection
        .rows(
            TENANT_SELECT_BY_KEY.get::<D>(),
            &[Arg::Text(api_key_hash), Arg::Text(api_key_hash)],
        )
        .await
        .map_err(store_error::<D>)?;
    let mut found = None;
    for row in &rows {
        let tenant = row.text(0).map_err(read)?;
        let kind = if row.text(1).map_err(read)? == api_key_hash {
            KeyKind::Secret
        } else {
            KeyKind::Publishable
        };
        if found.is_some() {
            tracing::error!("an API key digest is stored twice; the key opens nothing");
            return Ok(None);
        }
        found = Some((tenant, kind));
    }
    Ok(found)
}

/// Tenants and their API keys (stored as SHA-256 digests).
#[async_trait]
pub trait Tenants: Send + Sync {
    /// Creates or re-keys a tenant (its secret key and, optionally, its publishable key).
    async fn upsert_tenant(
        &self,
        tenant_id: &str,
        api_key_hash: &str,
        publishable_key_hash: Option<&str>,
    ) -> Result<(), StoreError>;
    /// The tenant owning the key with this hash, and the key's kind.
    async fn tenant_by_key(
        &self,
        api_key_hash: &str,
    ) -> Result<Option<(String, KeyKind)>, StoreError>;
}

#[async_trait]
impl<D: Dialect> Tenants for SqlPay<D> {
    async fn upsert_tenant(
        &self,
        tenant_id: &str,
        api_key_hash: &str,
        publishable_key_hash: Option<&str>,
    ) -> Result<(), StoreError> {
        let _timer = self.timer("tenants.upsert_tenant");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(upsert_tenant::<D>(
                    transaction,
                    tenant_id,
                    api_key_hash,
                    publishable_key_hash,
                    now_ms,
                ))
            })
            .await
    }

    async fn tenant_by_key(
        &self,
        api_key_hash: &str,
    ) -> Result<Option<(String, KeyKind)>, StoreError> {
        let _timer = self.timer("tenants.tenant_by_key");
        let mut connection = self.connection().await?;
        tenant_by_key::<D>(&mut connection, api_key_hash).await
    }
}

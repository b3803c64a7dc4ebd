//! [`SqlPay`]: every storage port of the service on one SQL dialect, over the toolkit's SQL
//! store (its pool, its dialect, its idempotency records in the same database). Each port
//! method is one local transaction, retried whole on a transient conflict (a deadlock victim,
//! a serialisation failure, a busy SQLite file), so nothing above it sees a half-done change.

use std::sync::Arc;

use async_trait::async_trait;
use mideng::StoreError;
use mideng::record::RecordStore;
use mideng::sqlx::Pool;
use mideng::store::sql::{SqlStore, store_error};

use super::statements::PayDialect;

/// [`PayStore`] on one SQL dialect.
pub struct SqlPay<D: PayDialect> {
    pub(super) store: SqlStore<D>,
}

impl<D: PayDialect> std::fmt::Debug for SqlPay<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlPay<{}>", D::NAME)
    }
}

impl<D: PayDialect> SqlPay<D> {
    /// The service's storage on the toolkit store's pool (migrated by the caller).
    pub fn new(store: SqlStore<D>) -> Self {
        Self { store }
    }

    pub(crate) fn pool(&self) -> &Pool<D::Db> {
        self.store.pool()
    }
}

/// Runs `$work` (an expression using `$connection`) in its own write transaction, retrying
/// transient conflicts (deadlock victims, serialization failures, a busy SQLite file) whole,
/// with the toolkit's back-off.
macro_rules! transaction {
    ($self:ident, |$connection:ident| $work:expr) => {{
        let mut attempt = 0_u32;
        loop {
            let outcome = async {
                let mut transaction = $self.store.begin_write().await?;
                let $connection = &mut *transaction;
                let value = $crate::store::sql::typed($work.await)?;
                transaction
                    .commit()
                    .await
                    .map_err(mideng::store::sql::store_error::<D>)?;
                Ok::<_, mideng::StoreError>(value)
            }
            .await;
            match outcome {
                Err(mideng::StoreError::Conflict(_))
                    if attempt < mideng::limits::CONFLICT_RETRIES_MAX =>
                {
                    attempt += 1;
                    mideng::store::sql::back_off(attempt).await;
                }
                other => break other,
            }
        }
    }};
}

/// Runs `$work` on a pooled connection outside any explicit transaction.
macro_rules! connection {
    ($self:ident, |$connection:ident| $work:expr) => {{
        let mut pooled = $self
            .pool()
            .acquire()
            .await
            .map_err(mideng::store::sql::store_error::<D>)?;
        let $connection = &mut *pooled;
        $crate::store::sql::typed($work.await)
    }};
}

/// Pins the error type of the macros' work to [`StoreError`].
pub(crate) fn typed<T>(result: Result<T, StoreError>) -> Result<T, StoreError> {
    result
}

/// The database itself: its dialect, its idempotency records, readiness.
#[async_trait]
pub trait Backend: Send + Sync {
    /// `postgres`, `mysql` or `sqlite`.
    fn dialect(&self) -> &'static str;
    /// The idempotency records, in the same database (so that wallet operations complete
    /// their record in their own transaction).
    fn records(&self) -> Arc<dyn RecordStore>;
    /// One round trip (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
}

#[async_trait]
impl<D: PayDialect> Backend for SqlPay<D> {
    fn dialect(&self) -> &'static str {
        D::NAME
    }

    fn records(&self) -> Arc<dyn RecordStore> {
        Arc::new(self.store.clone())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        connection!(self, |connection| async {
            mideng::store::sql::SqlConn::row(connection, "SELECT 1", &[])
                .await
                .map_err(store_error::<D>)
                .map(|_| ())
        })
    }
}

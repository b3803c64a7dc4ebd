//! What the operator console shows of the database: how many payments, refunds and webhook
//! deliveries are in each state, and the outbox backlog, over every tenant.
//!
//! Each figure is one `GROUP BY` on a status column that has an index of its own; the console
//! caches the answer for a few seconds, so any number of open consoles costs one round of these
//! statements per interval.

use std::collections::BTreeMap;

use async_trait::async_trait;
use mideng::outbox::sql as outbox_sql;
use mideng::store::sql::{Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use crate::store::sql::SqlPay;

/// Payments per status.
const PAYMENTS_BY_STATUS: PerDialect<&str> =
    dialect_sql!("SELECT status, COUNT(*) FROM pay_payments GROUP BY status");

/// Refunds per status.
const REFUNDS_BY_STATUS: PerDialect<&str> =
    dialect_sql!("SELECT status, COUNT(*) FROM pay_refunds GROUP BY status");

/// Webhook deliveries per status.
const DELIVERIES_BY_STATUS: PerDialect<&str> =
    dialect_sql!("SELECT status, COUNT(*) FROM pay_webhook_deliveries GROUP BY status");

/// Counts by state, over every tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Overview {
    /// Payment attempts per status (`PENDING`, `PAID`, `CLOSED`, …).
    pub payments: BTreeMap<String, u64>,
    /// Refunds per status (`PROCESSING`, `SUCCESS`, `CLOSED`, `ABNORMAL`).
    pub refunds: BTreeMap<String, u64>,
    /// Webhook deliveries per status (`PENDING`, `DELIVERED`, `FAILED`).
    pub webhook_deliveries: BTreeMap<String, u64>,
    /// Outbox events not yet handed to the broker.
    pub outbox_unsent: u64,
    /// Age of the oldest unsent event, in milliseconds; `None` when nothing waits.
    pub outbox_oldest_age_ms: Option<i64>,
}

/// The console's view of the database.
#[async_trait]
pub trait Overviews: Send + Sync {
    /// Counts by state at `now_ms`.
    async fn overview(&self, now_ms: i64) -> Result<Overview, StoreError>;
}

#[async_trait]
impl<D: Dialect> Overviews for SqlPay<D> {
    async fn overview(&self, now_ms: i64) -> Result<Overview, StoreError> {
        let _timer = self.timer("overviews.overview");
        let mut connection = self.connection().await?;
        let mut by_status = Vec::with_capacity(3);
        for statement in [PAYMENTS_BY_STATUS, REFUNDS_BY_STATUS, DELIVERIES_BY_STATUS] {
            let rows = connection
                .rows(statement.get::<D>(), &[])
                .await
                .map_err(store_error::<D>)?;
            by_status.push(counts(&rows).map_err(store_error::<D>)?);
        }
        let [payments, refunds, webhook_deliveries]: [BTreeMap<String, u64>; 3] = by_status
            .try_into()
            .map_err(|_| StoreError::Corrupt("three statements, three answers".to_owned()))?;
        drop(connection);
        let backlog = outbox_sql::backlog(&self.store).await?;
        Ok(Overview {
            payments,
            refunds,
            webhook_deliveries,
            outbox_unsent: backlog.unsent,
            outbox_oldest_age_ms: backlog
                .oldest_created_at_ms
                .map(|oldest| now_ms.saturating_sub(oldest).max(0)),
        })
    }
}

/// `status, COUNT(*)` rows as a map.
fn counts<R: SqlRow>(rows: &[R]) -> Result<BTreeMap<String, u64>, mideng::sqlx::Error> {
    rows.iter()
        .map(|row| Ok((row.text(0)?, u64::try_from(row.int(1)?).unwrap_or(0))))
        .collect()
}

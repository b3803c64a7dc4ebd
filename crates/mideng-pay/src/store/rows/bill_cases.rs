//! Bill cases in storage: one row per channel, day, kind and number
//! ([`crate::domain::bill::case_id`]), inserted once however often the same bill is run, moved
//! OPEN → REPAIRED (the service settled it) or OPEN → RESOLVED (a person did, with a reason)
//! by compare-and-set.

use async_trait::async_trait;
use mideng::sqlx::Database;
use mideng::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, store_error};
use mideng::{StoreError, dialect_sql};

use super::{corrupt, read};
use crate::domain::bill::{BillCase, BillCaseKind, BillCaseStatus};
use crate::store::sql::SqlPay;

macro_rules! case_columns {
    () => {
        "case_id, channel, bill_date, kind, reference, tenant_id, ours, billed, status, detail, resolution, created_at, updated_at"
    };
}

const CASE_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_bill_cases (" case_columns!() ") VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")"
    on_conflict_ignore
);

const CASE_SELECT: PerDialect<&str> =
    dialect_sql!("SELECT " case_columns!() " FROM pay_bill_cases WHERE case_id = " ?);

const CASES_OF_TENANT: PerDialect<&str> = dialect_sql!(
    "SELECT " case_columns!() " FROM pay_bill_cases WHERE tenant_id = " ?
    " ORDER BY created_at DESC, case_id LIMIT " ?
);

const CASES_ALL: PerDialect<&str> = dialect_sql!(
    "SELECT " case_columns!() " FROM pay_bill_cases ORDER BY created_at DESC, case_id LIMIT " ?
);

const CASES_BY_STATUS: PerDialect<&str> = dialect_sql!(
    "SELECT " case_columns!() " FROM pay_bill_cases WHERE status = " ?
    " ORDER BY created_at DESC, case_id LIMIT " ?
);

const CASES_OPEN_COUNT: PerDialect<&str> =
    dialect_sql!("SELECT COUNT(*) FROM pay_bill_cases WHERE status = 'OPEN'");

const CASE_SETTLE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_bill_cases SET status = " ? ", resolution = " ? ", updated_at = " ?
    " WHERE case_id = " ? " AND status = 'OPEN'"
);

fn decode_case<R: SqlRow>(row: &R) -> Result<BillCase, StoreError> {
    Ok(BillCase {
        case_id: row.text(0).map_err(read)?,
        channel: row.text(1).map_err(read)?,
        bill_date: row.text(2).map_err(read)?,
        kind: BillCaseKind::parse(&row.text(3).map_err(read)?)
            .ok_or_else(|| corrupt("unknown bill case kind"))?,
        reference: row.text(4).map_err(read)?,
        tenant_id: row.opt_text(5).map_err(read)?,
        ours_fen: row.opt_int(6).map_err(read)?,
        billed_fen: row.opt_int(7).map_err(read)?,
        status: BillCaseStatus::parse(&row.text(8).map_err(read)?)
            .ok_or_else(|| corrupt("unknown bill case status"))?,
        detail: row.text(9).map_err(read)?,
        resolution: row.opt_text(10).map_err(read)?,
        created_at_ms: row.int(11).map_err(read)?,
        updated_at_ms: row.int(12).map_err(read)?,
    })
}

async fn record_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    case: &BillCase,
) -> Result<bool, StoreError> {
    let inserted = connection
        .run(
            CASE_INSERT.get::<D>(),
            &[
                Arg::Text(&case.case_id),
                Arg::Text(&case.channel),
                Arg::Text(&case.bill_date),
                Arg::Text(case.kind.as_str()),
                Arg::Text(&case.reference),
                Arg::OptText(case.tenant_id.as_deref()),
                Arg::OptInt(case.ours_fen),
                Arg::OptInt(case.billed_fen),
                Arg::Text(case.status.as_str()),
                Arg::Text(&case.detail),
                Arg::OptText(case.resolution.as_deref()),
                Arg::Int(case.created_at_ms),
                Arg::Int(case.updated_at_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(inserted > 0)
}

/// What disagrees between the channels' bills and our records.
#[async_trait]
pub trait BillCases: Send + Sync {
    /// Records `case` unless a case of that id exists; true when this call recorded it.
    async fn record(&self, case: &BillCase) -> Result<bool, StoreError>;
    /// One case.
    async fn case(&self, case_id: &str) -> Result<Option<BillCase>, StoreError>;
    /// Cases, newest first, at most `limit`: of one tenant, or (for the operator) of all or of
    /// one status.
    async fn cases(
        &self,
        tenant_id: Option<&str>,
        status: Option<BillCaseStatus>,
        limit: u32,
    ) -> Result<Vec<BillCase>, StoreError>;
    /// How many cases are open, over every tenant (one count on the status index).
    async fn open_count(&self) -> Result<u64, StoreError>;
    /// OPEN → `to` (REPAIRED or RESOLVED) with `resolution`; false when the case is not open.
    async fn settle(
        &self,
        case_id: &str,
        to: BillCaseStatus,
        resolution: &str,
    ) -> Result<bool, StoreError>;
}

#[async_trait]
impl<D: Dialect> BillCases for SqlPay<D> {
    async fn record(&self, case: &BillCase) -> Result<bool, StoreError> {
        let _timer = self.timer("bill_cases.record");
        self.store
            .write(|transaction| Box::pin(record_on::<D>(transaction, case)))
            .await
    }

    async fn open_count(&self) -> Result<u64, StoreError> {
        let _timer = self.timer("bill_cases.open_count");
        let mut connection = self.connection().await?;
        let count = connection
            .row(CASES_OPEN_COUNT.get::<D>(), &[])
            .await
            .map_err(store_error::<D>)?
            .map_or(Ok(0), |row| row.int(0).map_err(read))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn case(&self, case_id: &str) -> Result<Option<BillCase>, StoreError> {
        let _timer = self.timer("bill_cases.case");
        let mut connection = self.connection().await?;
        connection
            .row(CASE_SELECT.get::<D>(), &[Arg::Text(case_id)])
            .await
            .map_err(store_error::<D>)?
            .as_ref()
            .map(decode_case)
            .transpose()
    }

    async fn cases(
        &self,
        tenant_id: Option<&str>,
        status: Option<BillCaseStatus>,
        limit: u32,
    ) -> Result<Vec<BillCase>, StoreError> {
        let _timer = self.timer("bill_cases.cases");
        let limit = Arg::Int(i64::from(limit));
        let mut connection = self.connection().await?;
        let rows = match (tenant_id, status) {
            (Some(tenant_id), _) => {
                connection
                    .rows(CASES_OF_TENANT.get::<D>(), &[Arg::Text(tenant_id), limit])
                    .await
            }
            (None, Some(status)) => {
                connection
                    .rows(
                        CASES_BY_STATUS.get::<D>(),
                        &[Arg::Text(status.as_str()), limit],
                    )
                    .await
            }
            (None, None) => connection.rows(CASES_ALL.get::<D>(), &[limit]).await,
        }
        .map_err(store_error::<D>)?;
        let cases: Vec<BillCase> = rows.iter().map(decode_case).collect::<Result<_, _>>()?;
        Ok(match (tenant_id, status) {
            (Some(_), Some(status)) => cases
                .into_iter()
                .filter(|case| case.status == status)
                .collect(),
            _ => cases,
        })
    }

    async fn settle(
        &self,
        case_id: &str,
        to: BillCaseStatus,
        resolution: &str,
    ) -> Result<bool, StoreError> {
        let _timer = self.timer("bill_cases.settle");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let changed = transaction
                        .run(
                            CASE_SETTLE.get::<D>(),
                            &[
                                Arg::Text(to.as_str()),
                                Arg::Text(resolution),
                                Arg::Int(now_ms),
                                Arg::Text(case_id),
                            ],
                        )
                        .await
                        .map_err(store_error::<D>)?;
                    Ok(changed > 0)
                })
            })
            .await
    }
}

//! The refund cases port: money the channel took that this service will not keep, recorded
//! in the transaction that learns of it ([`crate::domain::charge`]) and refunded once, under
//! at most [`CASE_ASKS_MAX`] request keys.

use async_trait::async_trait;
use mideng::StoreError;
use mideng::sqlx::Database;
use mideng::store::sql::Dialect;

use super::refunds::{OpenRefund, Opening, reserve_and_insert};
pub use crate::domain::charge::CaseKind;
use crate::domain::refund::RefundStatus;
use crate::store::rows::payments::{self, Reserve};
pub use crate::store::rows::refund_cases::{RefundCase, UnsettledCase};
use crate::store::rows::{refund_cases, refunds};
use crate::store::sql::SqlPay;

/// Refunds asked for one case at most: a refund the channel closes (nothing moved) reopens the
/// case and the next ask takes the next key; after this many the case stays OPEN for a person.
pub const CASE_ASKS_MAX: u32 = 3;

/// The request key of a case's `ask`-th refund (0-based): `auto-<payment_no>`, then
/// `auto-<payment_no>-2`, … — each ask one refund, held by the refunds' unique tenant + key.
pub fn case_request_key(payment_no: &str, ask: u32) -> String {
    if ask == 0 {
        format!("auto-{payment_no}")
    } else {
        format!("auto-{payment_no}-{}", ask + 1)
    }
}

/// Turns an open case into its one refund: the payment's row lock, the case, the amount
/// reserved, a PROCESSING refund under [`case_request_key`], the case marked asked — or the
/// refund that key made before.
async fn open_case_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    refund_no: &str,
    now_ms: i64,
) -> Result<OpenRefund, StoreError> {
    let Some(payment) = payments::find_payment::<D>(connection, payment_no, true).await? else {
        return Ok(OpenRefund::NoPayment);
    };
    // The first key whose refund the channel did not close: a refund still under way (or
    // given back) is the case's; a key not used yet is the next ask.
    let mut key = None;
    for ask in 0..CASE_ASKS_MAX {
        let candidate = case_request_key(payment_no, ask);
        match refunds::find_by_key::<D>(connection, &payment.tenant_id, &candidate).await? {
            None => {
                key = Some(candidate);
                break;
            }
            Some(refund) if refund.status != RefundStatus::Closed => {
                return Ok(OpenRefund::Existing(Box::new(refund)));
            }
            Some(_) => {}
        }
    }
    let Some(key) = key else {
        return Ok(OpenRefund::AsksUsedUp);
    };
    let Some(case) = refund_cases::find_case::<D>(connection, payment_no, true).await? else {
        return Ok(OpenRefund::NoPayment);
    };
    let opened = reserve_and_insert::<D>(
        connection,
        Reserve::Charged,
        &payment,
        &Opening {
            refund_no,
            request_key: &key,
            amount_fen: case.amount_fen,
            reason: "automatic refund",
        },
        now_ms,
    )
    .await?;
    if matches!(opened, OpenRefund::Created(_)) {
        refund_cases::mark_asked::<D>(connection, payment_no, refund_no, now_ms).await?;
    }
    Ok(opened)
}

/// Refund cases: recorded where they are found, each refunded once.
#[async_trait]
pub trait RefundCases: Send + Sync {
    /// Open cases, oldest first, at most `limit`.
    async fn open_cases(&self, limit: u32) -> Result<Vec<RefundCase>, StoreError>;
    /// The tenant's cases not settled yet (their refund has not succeeded), oldest first,
    /// after the case of `after`; `None` when `after` is none of the tenant's.
    async fn unsettled_cases(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<UnsettledCase>>, StoreError>;
    /// Every tenant's cases not settled yet, oldest first, at most `limit` (for the console).
    async fn unsettled_oldest(&self, limit: u32) -> Result<Vec<UnsettledCase>, StoreError>;
    /// Every tenant's cases not settled yet, counted (for the operator's gauge).
    async fn unsettled_count(&self) -> Result<u64, StoreError>;
    /// The case of `payment_no`, open or refunded, if it has one.
    async fn case_of(&self, payment_no: &str) -> Result<Option<RefundCase>, StoreError>;
    /// Turns an open case into its one refund (or finds it).
    async fn open_case_refund(
        &self,
        payment_no: &str,
        refund_no: &str,
    ) -> Result<OpenRefund, StoreError>;
}

#[async_trait]
impl<D: Dialect> RefundCases for SqlPay<D> {
    async fn open_cases(&self, limit: u32) -> Result<Vec<RefundCase>, StoreError> {
        let _timer = self.timer("refund_cases.open_cases");
        let mut connection = self.connection().await?;
        refund_cases::open_cases::<D>(&mut connection, i64::from(limit)).await
    }

    async fn unsettled_cases(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<UnsettledCase>>, StoreError> {
        let _timer = self.timer("refund_cases.unsettled_cases");
        let mut connection = self.connection().await?;
        refund_cases::unsettled_page::<D>(&mut connection, tenant_id, after, i64::from(limit)).await
    }

    async fn unsettled_oldest(&self, limit: u32) -> Result<Vec<UnsettledCase>, StoreError> {
        let _timer = self.timer("refund_cases.unsettled_oldest");
        let mut connection = self.connection().await?;
        refund_cases::unsettled_oldest::<D>(&mut connection, i64::from(limit)).await
    }

    async fn unsettled_count(&self) -> Result<u64, StoreError> {
        let _timer = self.timer("refund_cases.unsettled_count");
        let mut connection = self.connection().await?;
        refund_cases::unsettled_count::<D>(&mut connection).await
    }

    async fn case_of(&self, payment_no: &str) -> Result<Option<RefundCase>, StoreError> {
        let _timer = self.timer("refund_cases.case_of");
        let mut connection = self.connection().await?;
        refund_cases::find_case::<D>(&mut connection, payment_no, false).await
    }

    async fn open_case_refund(
        &self,
        payment_no: &str,
        refund_no: &str,
    ) -> Result<OpenRefund, StoreError> {
        let _timer = self.timer("refund_cases.open_case_refund");
        let now_ms = self.now_ms();
        self.store
            .write(|transaction| {
                Box::pin(open_case_on::<D>(
                    transaction,
                    payment_no,
                    refund_no,
                    now_ms,
                ))
            })
            .await
    }
}

//! The wallets port: a credit or a deduct in one transaction with the request's idempotency
//! record and stored answer ([`mideng::store::sql::SqlStore::write_once`]), so that a
//! first-time request commits once — record, money and answer together — and a retried
//! request replays instead of moving money again. The money itself, and how racing deducts
//! wait for each other, is [`crate::store::rows::wallets`].

use async_trait::async_trait;
use mideng::StoreError;
use mideng::record::{AnswerTemplate, StoredResponse};
use mideng::store::sql::{Claim, Dialect, FirstClaim, Once, SqlDialect};

use crate::domain::money::Amount;
use crate::domain::wallet::{
    CreditOutcome, DeductOutcome, WalletEntry, WalletStatement, WalletStrategy,
};
use crate::store::rows::wallets::{
    Deduct, ReverseOutcome, credit, deduct, deduct_recorded_postgres, entries_page, reverse,
    statement,
};
use crate::store::sql::SqlPay;

mod group_commit;

pub(crate) use group_commit::GroupCommit;
use group_commit::{Grouped, Settled};

/// The balance rendered into a deduct's answer to find where the answer carries the balance
/// after the debit ([`AnswerTemplate`]): no balance is negative, so it stands for none.
const BALANCE_HOLE: i64 = i64::MIN;

/// Renders an outcome as the answer stored with the request's idempotency record: a pure
/// function supplied by the caller (the API renders its own answers; storage knows nothing of
/// HTTP), called inside the transaction so that the answer commits with the effect or not at
/// all. It must not do I/O: the transaction may be retried, and it is called again then.
pub type Render<'a, T> = &'a (dyn Fn(&T) -> StoredResponse + Send + Sync);

/// Whose wallet operation it is, and the idempotency record its transaction begins and
/// completes.
#[derive(Clone, Copy, Debug)]
pub enum WalletRecord<'a> {
    /// The request's record, claimed in the operation's transaction (its scope names the
    /// tenant) and completed there with the answer.
    Claim(Claim<'a>),
    /// No record: the idempotency machinery is off
    /// ([`crate::flows::PaymentSettings::idempotency`], measurement only).
    Unrecorded {
        /// The tenant.
        tenant_id: &'a str,
    },
}

impl WalletRecord<'_> {
    /// The tenant.
    pub fn tenant(&self) -> &str {
        match self {
            WalletRecord::Claim(claim) => claim.scope.tenant(),
            WalletRecord::Unrecorded { tenant_id } => tenant_id,
        }
    }
}

/// What a wallet operation's transaction came to: it ran, with its outcome and the answer
/// stored with it, or the request's record decided before (a replay, a request in flight,
/// another request under the key) and nothing moved.
pub type Answered<T> = Once<T>;

/// Wallets: credits and deducts, each in one transaction with its idempotency record.
#[async_trait]
pub trait Wallets: Send + Sync {
    /// Begins the record (if any), credits the wallet (at most once per reference) and
    /// completes the record with `render(outcome)`, in one transaction, whatever the outcome.
    async fn credit(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        amount: Amount,
        reference: &str,
        entry_no: &str,
        render: Render<'_, CreditOutcome>,
    ) -> Result<Answered<CreditOutcome>, StoreError>;
    /// Begins the record (if any), deducts from the wallet by `strategy` (at most once per
    /// order) and completes the record with `render(outcome)`, in one transaction, whatever
    /// the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn deduct(
        &self,
        record: WalletRecord<'_>,
        strategy: WalletStrategy,
        user_id: &str,
        order_id: &str,
        amount: Amount,
        entry_no: &str,
        render: Render<'_, DeductOutcome>,
    ) -> Result<Answered<DeductOutcome>, StoreError>;
    /// The wallet's balance and latest entries.
    async fn wallet(&self, tenant_id: &str, user_id: &str) -> Result<WalletStatement, StoreError>;
    /// A page of the wallet's ledger, oldest first ([`entries_page`]).
    async fn entries(
        &self,
        tenant_id: &str,
        user_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<WalletEntry>>, StoreError>;
    /// Puts a deduction back once, in one transaction ([`reverse`]).
    async fn reverse(
        &self,
        tenant_id: &str,
        user_id: &str,
        deduction_no: &str,
        entry_no: &str,
    ) -> Result<ReverseOutcome, StoreError>;
}

impl<'a> WalletRecord<'a> {
    /// The claim the transaction makes, if any.
    fn claim(&self) -> Option<&Claim<'a>> {
        match self {
            WalletRecord::Claim(claim) => Some(claim),
            WalletRecord::Unrecorded { .. } => None,
        }
    }
}

#[async_trait]
impl<D: Dialect> Wallets for SqlPay<D> {
    async fn credit(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        amount: Amount,
        reference: &str,
        entry_no: &str,
        render: Render<'_, CreditOutcome>,
    ) -> Result<Answered<CreditOutcome>, StoreError> {
        let _timer = self.timer("wallets.credit");
        let tenant_id = record.tenant();
        self.store
            .write_once(record.claim(), |transaction| {
                Box::pin(async move {
                    let now_ms = self.now_ms();
                    let outcome = credit::<D>(
                        transaction,
                        tenant_id,
                        user_id,
                        amount,
                        reference,
                        entry_no,
                        now_ms,
                    )
                    .await?;
                    let response = render(&outcome);
                    Ok((outcome, response))
                })
            })
            .await
    }

    async fn deduct(
        &self,
        record: WalletRecord<'_>,
        strategy: WalletStrategy,
        user_id: &str,
        order_id: &str,
        amount: Amount,
        entry_no: &str,
        render: Render<'_, DeductOutcome>,
    ) -> Result<Answered<DeductOutcome>, StoreError> {
        let _timer = self.timer("wallets.deduct");
        let tenant_id = record.tenant();
        let deduct_at = |now_ms| Deduct {
            tenant_id,
            user_id,
            order_id,
            amount,
            entry_no,
            now_ms,
        };
        if let (
            SqlDialect::Postgres,
            WalletStrategy::ConditionalUpdate | WalletStrategy::GroupCommit,
            WalletRecord::Claim(claim),
        ) = (D::KIND, strategy, record)
        {
            // One statement outside a transaction (alone, or with the group of deducts that
            // arrived together): the debit, the ledger entry and the record with its answer, or
            // nothing. Whatever it did not settle (a key taken before, a balance that does not
            // cover the amount, a duplicate that came first) goes the usual way below, where
            // the record is begun first and judges it.
            let first = FirstClaim::new(claim.scope, claim.key, claim.fingerprint, &claim.policy);
            let request = deduct_at(first.now_ms());
            let hole = BALANCE_HOLE.to_string();
            let answer = render(&request.debited_to(BALANCE_HOLE));
            if let Some(template) = AnswerTemplate::new(&answer, hole.as_bytes()) {
                let debited = if strategy == WalletStrategy::GroupCommit {
                    let grouped = Grouped {
                        claim: first,
                        template: template.clone(),
                        tenant_id: tenant_id.to_owned(),
                        user_id: user_id.to_owned(),
                        order_id: order_id.to_owned(),
                        amount,
                        entry_no: entry_no.to_owned(),
                    };
                    let group_commit = self
                        .group_commit
                        .get_or_init(|| GroupCommit::start(self.store.clone(), self.clock.clone()));
                    match group_commit.settle(grouped).await {
                        Settled::Debited(after) => Some(after),
                        Settled::OwnWay => None,
                        Settled::Unknown(message) => {
                            return Err(StoreError::OutcomeUnknown(message));
                        }
                    }
                } else {
                    let mut connection = self.connection().await?;
                    match deduct_recorded_postgres::<D>(
                        &mut connection,
                        &first,
                        &template,
                        &request,
                    )
                    .await
                    {
                        Ok(debited) => debited,
                        // A deadlock or a lock timeout undid the statement: nothing was
                        // written, and the usual way below retries such conflicts.
                        Err(StoreError::Conflict(_)) => None,
                        Err(error) => return Err(error),
                    }
                };
                if let Some(after) = debited {
                    let response = template.fill(&after.fen().to_string());
                    return Ok(Once::Ran(request.debited(after), response));
                }
            }
        }
        self.store
            .write_once(record.claim(), |transaction| {
                Box::pin(async move {
                    let request = deduct_at(self.now_ms());
                    let outcome = deduct::<D>(transaction, strategy, &request).await?;
                    let response = render(&outcome);
                    Ok((outcome, response))
                })
            })
            .await
    }

    async fn reverse(
        &self,
        tenant_id: &str,
        user_id: &str,
        deduction_no: &str,
        entry_no: &str,
    ) -> Result<ReverseOutcome, StoreError> {
        let _timer = self.timer("wallets.reverse");
        self.store
            .write(|transaction| {
                Box::pin(reverse::<D>(
                    transaction,
                    tenant_id,
                    user_id,
                    deduction_no,
                    entry_no,
                    self.now_ms(),
                ))
            })
            .await
    }

    async fn wallet(&self, tenant_id: &str, user_id: &str) -> Result<WalletStatement, StoreError> {
        let _timer = self.timer("wallets.wallet");
        let mut connection = self.connection().await?;
        let (balance_fen, entries) = statement::<D>(&mut connection, tenant_id, user_id).await?;
        Ok(WalletStatement {
            balance_fen,
            entries,
        })
    }

    async fn entries(
        &self,
        tenant_id: &str,
        user_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Option<Vec<WalletEntry>>, StoreError> {
        let _timer = self.timer("wallets.entries");
        let mut connection = self.connection().await?;
        entries_page::<D>(&mut connection, tenant_id, user_id, after, i64::from(limit)).await
    }
}

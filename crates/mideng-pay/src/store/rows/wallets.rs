//! Wallets in storage: credits and deducts that can never overdraw, whatever the concurrency.
//!
//! Both run in the caller's write transaction, which also begins and completes the request's
//! idempotency record ([`WalletRecord::Claim`]): a first-time request commits once, with its
//! record, its effect and its stored answer, and a retried request replays instead of moving
//! money again. Each operation has a business key besides the request's `Idempotency-Key`: a
//! deduct for an order that was debited already (under another key) finds that debit instead,
//! and a credit whose reference was credited already finds that credit; the unique
//! debit-per-order and credit-per-reference indexes decide. New balances are computed with
//! checked arithmetic ([`crate::domain::money::Balance`]) or by the database under a
//! `balance >= x` condition, and the database's CHECK refuses a negative balance should
//! anything get past that.
//!
//! How racing deducts of one wallet wait for each other is the [`WalletStrategy`]:
//!
//! | strategy | statements of a first-time deduct | a race |
//! |---|---|---|
//! | `row-lock` | lock the wallet (`FOR UPDATE`), find a debit for the order, insert the entry, set the balance | waits on the row lock |
//! | `optimistic` | read balance and version, find a debit, set the balance where the version is unchanged, insert the entry | the loser's transaction is retried whole (bounded) |
//! | `conditional-update` | `balance = balance - x WHERE balance >= x` (returning the balance), insert the entry; on PostgreSQL, with the record's claim, one statement (`DEDUCT_CLAIMED_POSTGRES`) | waits on the row lock the update takes; a debit for the order found by the entry's unique index puts the amount back in the same transaction |
//!
//! Every balance change bumps the wallet's `version`, whatever the strategy, so that instances
//! configured differently (during a change of strategy) still see each other's writes.
//! Credits always lock the row: they never race for a balance condition. A deduction is put
//! back at most once ([`reverse`]): its reversal is a credit whose reference names the
//! deduction, so the one-credit-per-reference unique index holds it.

use async_trait::async_trait;
use mideng::key::{Fingerprint, IdempotencyKey, Scope};
use mideng::record::{Decision, RecordPolicy, StoredResponse};
use mideng::sqlx::Database;
use mideng::store::sql::{
    Arg, Dialect, FirstClaim, PerDialect, SqlConn, SqlDialect, SqlRow, SqlStore, store_error,
};
use mideng::{StoreError, dialect_sql};

use super::sql::SqlPay;
use crate::domain::money::{Amount, Balance};
use crate::domain::wallet::{
    Credit, CreditOutcome, Debit, DeductOutcome, LedgerEntry, WalletEntry, WalletStatement,
    WalletStrategy,
};

fn read(error: mideng::sqlx::Error) -> StoreError {
    StoreError::Corrupt(format!("unreadable row: {error}"))
}

/// The wallet's balance, locked until the transaction ends.
const WALLET_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT balance FROM pay_wallets WHERE tenant_id = " ? " AND user_id = " ? for_update
);

/// Creates an empty wallet; a wallet created meanwhile by a racing transaction inserts nothing.
const WALLET_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_wallets (tenant_id, user_id, balance, currency, updated_at) VALUES ("
    ? ", " ? ", 0, 'CNY', " ? ")" on_conflict_ignore
);

/// Locks the wallet (creating it empty if needed) and returns its balance.
async fn lock_wallet<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    now_ms: i64,
) -> Result<Balance, StoreError> {
    let key = [Arg::Text(tenant_id), Arg::Text(user_id)];
    // Lock first and create only when missing: on MySQL an insert that finds the row takes a
    // shared lock, and many transactions upgrading it to the exclusive one deadlock each other.
    let mut row = connection
        .row(WALLET_SELECT_LOCKED.get::<D>(), &key)
        .await
        .map_err(store_error::<D>)?;
    if row.is_none() {
        connection
            .run(
                WALLET_INSERT.get::<D>(),
                &[Arg::Text(tenant_id), Arg::Text(user_id), Arg::Int(now_ms)],
            )
            .await
            .map_err(store_error::<D>)?;
        row = connection
            .row(WALLET_SELECT_LOCKED.get::<D>(), &key)
            .await
            .map_err(store_error::<D>)?;
    }
    let row = row.ok_or_else(|| StoreError::Conflict("wallet vanished".to_owned()))?;
    let stored = row.int(0).map_err(read)?;
    Balance::from_stored(stored)
        .ok_or_else(|| StoreError::Corrupt(format!("balance {stored} out of bounds")))
}

/// Sets the balance of a wallet locked by this transaction.
const WALLET_SET_BALANCE: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_wallets SET balance = " ? ", version = version + 1, updated_at = " ? " WHERE tenant_id = " ?
    " AND user_id = " ?
);

async fn set_balance<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    balance: Balance,
    now_ms: i64,
) -> Result<(), StoreError> {
    connection
        .run(
            WALLET_SET_BALANCE.get::<D>(),
            &[
                Arg::Int(balance.fen()),
                Arg::Int(now_ms),
                Arg::Text(tenant_id),
                Arg::Text(user_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(())
}

/// One ledger entry to write.
struct Entry<'a> {
    entry_no: &'a str,
    tenant_id: &'a str,
    user_id: &'a str,
    kind: &'static str,
    amount: Amount,
    reference: &'a str,
    order_id: Option<&'a str>,
    balance_after: Balance,
    now_ms: i64,
}

/// Inserts a ledger entry; a taken debit-per-order or credit-per-reference key (or entry
/// number) inserts nothing, and the caller tells the cases apart.
const ENTRY_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, created_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
);

/// Inserts an entry; false when the debit-per-order or credit-per-reference key (or the entry
/// number) exists already.
async fn insert_entry<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    entry: &Entry<'_>,
) -> Result<bool, StoreError> {
    let inserted = connection
        .run(
            ENTRY_INSERT.get::<D>(),
            &[
                Arg::Text(entry.entry_no),
                Arg::Text(entry.tenant_id),
                Arg::Text(entry.user_id),
                Arg::Text(entry.kind),
                Arg::Int(entry.amount.fen()),
                Arg::Text(entry.reference),
                Arg::OptText(entry.order_id),
                Arg::Int(entry.balance_after.fen()),
                Arg::Int(entry.now_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(inserted == 1)
}

/// The columns of a found ledger entry, in the order `find_entry` reads them.
macro_rules! ledger_entry_columns {
    () => {
        "entry_no, amount, balance_after, created_at"
    };
}

/// The user's credit for a reference (unique per user and reference).
const ENTRY_SELECT_CREDIT: PerDialect<&str> = dialect_sql!(
    "SELECT " ledger_entry_columns!() " FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ? " AND reference = " ? " AND kind = 'CREDIT'"
);

/// The credit recorded for the user's reference, if any.
pub async fn find_credit<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    reference: &str,
) -> Result<Option<Credit>, StoreError> {
    let statement = ENTRY_SELECT_CREDIT.get::<D>();
    find_entry::<D>(connection, statement, tenant_id, user_id, reference).await
}

/// The entry `statement` finds by the user and the entry's business key (a credit's reference,
/// a debit's order).
async fn find_entry<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    statement: &'static str,
    tenant_id: &str,
    user_id: &str,
    business_key: &str,
) -> Result<Option<LedgerEntry>, StoreError> {
    let row = connection
        .row(
            statement,
            &[
                Arg::Text(tenant_id),
                Arg::Text(user_id),
                Arg::Text(business_key),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    row.map(|row| {
        Ok(LedgerEntry {
            entry_no: row.text(0).map_err(read)?,
            amount_fen: row.int(1).map_err(read)?,
            balance_after_fen: row.int(2).map_err(read)?,
            created_at_ms: row.int(3).map_err(read)?,
        })
    })
    .transpose()
}

/// Credits `amount` to the user's wallet under `reference`: at most one credit per user and
/// reference, never above the balance's bound.
pub async fn credit<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    amount: Amount,
    reference: &str,
    entry_no: &str,
    now_ms: i64,
) -> Result<CreditOutcome, StoreError> {
    let balance = lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await?;
    // Under the wallet lock no other credit of this user runs, so an existing credit for the
    // reference is final and a missing one cannot appear before ours.
    if let Some(existing) = find_credit::<D>(connection, tenant_id, user_id, reference).await? {
        return Ok(CreditOutcome::AlreadyCredited(existing));
    }
    let Ok(after) = balance.credit(amount) else {
        return Ok(CreditOutcome::TooLarge);
    };
    let entry = Entry {
        entry_no,
        tenant_id,
        user_id,
        kind: "CREDIT",
        amount,
        reference,
        order_id: None,
        balance_after: after,
        now_ms,
    };
    if !insert_entry::<D>(connection, &entry).await? {
        // The entry number, or the credit key under the wallet lock: retried whole.
        return Err(StoreError::Conflict(
            "entry number or credit key taken".to_owned(),
        ));
    }
    set_balance::<D>(connection, tenant_id, user_id, after, now_ms).await?;
    Ok(CreditOutcome::Credited(LedgerEntry {
        entry_no: entry_no.to_owned(),
        amount_fen: amount.fen(),
        balance_after_fen: after.fen(),
        created_at_ms: now_ms,
    }))
}

/// The user's debit for an order (unique per user and order).
const ENTRY_SELECT_DEBIT: PerDialect<&str> = dialect_sql!(
    "SELECT " ledger_entry_columns!() " FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ? " AND order_id = " ? " AND kind = 'DEBIT'"
);

/// The debit recorded for the user's order, if any.
pub async fn find_debit<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    order_id: &str,
) -> Result<Option<Debit>, StoreError> {
    let statement = ENTRY_SELECT_DEBIT.get::<D>();
    find_entry::<D>(connection, statement, tenant_id, user_id, order_id).await
}

/// The user's debit by its entry number, with its order.
const ENTRY_SELECT_DEBIT_BY_NO: PerDialect<&str> = dialect_sql!(
    "SELECT amount, order_id FROM pay_wallet_entries WHERE tenant_id = " ? " AND user_id = " ?
    " AND entry_no = " ? " AND kind = 'DEBIT'"
);

/// The reference of a deduction's reversal: a credit's business key, so the
/// one-credit-per-reference unique index allows one reversal per deduction.
pub fn reversal_reference(deduction_no: &str) -> String {
    format!("{REVERSAL_REFERENCE_PREFIX}{deduction_no}")
}

/// The prefix of reversal references; a client's own credit reference may not start with it.
pub const REVERSAL_REFERENCE_PREFIX: &str = "reversal-";

/// What putting a deduction back came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReverseOutcome {
    /// This call put it back: the reversal's entry (a credit).
    Reversed(LedgerEntry),
    /// It was put back before: that reversal.
    AlreadyReversed(LedgerEntry),
    /// The user has no deduction with this number.
    NoDeduction,
    /// Putting it back would take the balance over its bound.
    TooLarge,
}

/// Puts the deduction `deduction_no` back into the user's wallet once: a credit entry whose
/// reference is [`reversal_reference`] and whose order is the deduction's, under the wallet's
/// row lock; the one-credit-per-reference unique index holds "one reversal per deduction"
/// against any race the lock misses.
pub async fn reverse<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    deduction_no: &str,
    entry_no: &str,
    now_ms: i64,
) -> Result<ReverseOutcome, StoreError> {
    let balance = lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await?;
    let Some(row) = connection
        .row(
            ENTRY_SELECT_DEBIT_BY_NO.get::<D>(),
            &[
                Arg::Text(tenant_id),
                Arg::Text(user_id),
                Arg::Text(deduction_no),
            ],
        )
        .await
        .map_err(store_error::<D>)?
    else {
        return Ok(ReverseOutcome::NoDeduction);
    };
    let stored = row.int(0).map_err(read)?;
    let order_id = row.opt_text(1).map_err(read)?;
    let amount = Amount::new(stored)
        .map_err(|_| StoreError::Corrupt(format!("debit amount {stored} out of bounds")))?;
    let reference = reversal_reference(deduction_no);
    if let Some(existing) = find_credit::<D>(connection, tenant_id, user_id, &reference).await? {
        return Ok(ReverseOutcome::AlreadyReversed(existing));
    }
    let Ok(after) = balance.credit(amount) else {
        return Ok(ReverseOutcome::TooLarge);
    };
    let entry = Entry {
        entry_no,
        tenant_id,
        user_id,
        kind: "CREDIT",
        amount,
        reference: &reference,
        order_id: order_id.as_deref(),
        balance_after: after,
        now_ms,
    };
    if !insert_entry::<D>(connection, &entry).await? {
        return Err(StoreError::Conflict(
            "entry number or reversal key taken".to_owned(),
        ));
    }
    set_balance::<D>(connection, tenant_id, user_id, after, now_ms).await?;
    Ok(ReverseOutcome::Reversed(LedgerEntry {
        entry_no: entry_no.to_owned(),
        amount_fen: amount.fen(),
        balance_after_fen: after.fen(),
        created_at_ms: now_ms,
    }))
}

/// The wallet's balance (zero for a wallet never credited), locking the wallet until the
/// transaction ends.
pub async fn balance<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    now_ms: i64,
) -> Result<Balance, StoreError> {
    lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await
}

/// The wallet's balance, without a lock.
const WALLET_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT balance FROM pay_wallets WHERE tenant_id = " ? " AND user_id = " ?
);

/// The wallet's latest entries, newest first, bounded.
const ENTRIES_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT entry_no, kind, amount, reference, order_id, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ? " ORDER BY created_at DESC, entry_no DESC LIMIT 100"
);

/// The wallet's balance (zero if it never existed) and its latest entries (at most 100,
/// newest first), without locking.
pub async fn statement<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
) -> Result<(i64, Vec<WalletEntry>), StoreError> {
    let args = [Arg::Text(tenant_id), Arg::Text(user_id)];
    let balance = match connection
        .row(WALLET_SELECT.get::<D>(), &args)
        .await
        .map_err(store_error::<D>)?
    {
        Some(row) => row.int(0).map_err(read)?,
        None => 0,
    };
    let entries = connection
        .rows(ENTRIES_SELECT.get::<D>(), &args)
        .await
        .map_err(store_error::<D>)?
        .iter()
        .map(|row| {
            Ok(WalletEntry {
                entry_no: row.text(0).map_err(read)?,
                kind: row.text(1).map_err(read)?,
                amount_fen: row.int(2).map_err(read)?,
                reference: row.text(3).map_err(read)?,
                order_id: row.opt_text(4).map_err(read)?,
                balance_after_fen: row.int(5).map_err(read)?,
                created_at_ms: row.int(6).map_err(read)?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((balance, entries))
}

/// Renders an outcome as the answer stored with the request's idempotency record: a pure
/// function supplied by the caller (the API renders its own answers; storage knows nothing of
/// HTTP), called inside the transaction so that the answer commits with the effect or not at
/// all. It must not do I/O: the transaction may be retried, and it is called again then.
pub type Render<'a, T> = &'a (dyn Fn(&T) -> StoredResponse + Send + Sync);

/// Whose wallet operation it is, and the idempotency record its transaction begins and
/// completes.
#[derive(Clone, Copy, Debug)]
pub enum WalletRecord<'a> {
    /// The request's record, begun in the operation's transaction (its scope names the
    /// tenant) and completed there with the answer.
    Claim {
        /// Tenant + operation.
        scope: &'a Scope,
        /// The request's key.
        key: &'a IdempotencyKey,
        /// The request's fingerprint.
        fingerprint: &'a Fingerprint,
        /// The route's lease and retention.
        policy: RecordPolicy,
    },
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
            WalletRecord::Claim { scope, .. } => scope.tenant(),
            WalletRecord::Unrecorded { tenant_id } => tenant_id,
        }
    }
}

/// What a wallet operation's transaction came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered<T> {
    /// It ran: its outcome, and the answer stored with it.
    Ran(T, StoredResponse),
    /// The record was begun before: what its `begin` decided (a replay, a request in flight,
    /// another request under the key). Nothing moved.
    Duplicate(Decision),
}

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
    /// Puts a deduction back once, in one transaction ([`reverse`]).
    async fn reverse(
        &self,
        tenant_id: &str,
        user_id: &str,
        deduction_no: &str,
        entry_no: &str,
    ) -> Result<ReverseOutcome, StoreError>;
}

/// Begins the request's record in the operation's transaction: the lease to complete (none
/// without a record), or the decision on a duplicate.
async fn claimed<D: Dialect>(
    store: &SqlStore<D>,
    transaction: &mut <D::Db as Database>::Connection,
    record: WalletRecord<'_>,
) -> Result<Result<Option<mideng::Lease>, Decision>, StoreError> {
    let WalletRecord::Claim {
        scope,
        key,
        fingerprint,
        policy,
    } = record
    else {
        return Ok(Ok(None));
    };
    match store
        .begin_in(transaction, scope, key, fingerprint, &policy)
        .await?
    {
        Decision::Proceed(lease) => Ok(Ok(Some(lease))),
        other => Ok(Err(other)),
    }
}

/// Renders `outcome` and completes the request's record with that answer (if there is a
/// record), in the transaction of the effect: both commit together or not at all.
async fn answered<D: Dialect, T>(
    store: &SqlStore<D>,
    transaction: &mut <D::Db as Database>::Connection,
    lease: Option<&mideng::Lease>,
    render: Render<'_, T>,
    outcome: T,
) -> Result<Answered<T>, StoreError> {
    let response = render(&outcome);
    if let Some(lease) = lease {
        store.complete_in(transaction, lease, &response).await?;
    }
    Ok(Answered::Ran(outcome, response))
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
        let store = &self.store;
        let tenant_id = record.tenant();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let lease = match claimed(store, transaction, record).await? {
                        Ok(lease) => lease,
                        Err(decision) => return Ok(Answered::Duplicate(decision)),
                    };
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
                    answered(store, transaction, lease.as_ref(), render, outcome).await
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
        let store = &self.store;
        let tenant_id = record.tenant();
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    if let (
                        SqlDialect::Postgres,
                        WalletStrategy::ConditionalUpdate,
                        WalletRecord::Claim {
                            scope,
                            key,
                            fingerprint,
                            policy,
                        },
                    ) = (D::KIND, strategy, record)
                    {
                        // One round trip for the claim and the money; a key taken before goes
                        // the usual way below.
                        let claim = FirstClaim::new(scope, key, fingerprint, &policy);
                        let request = Deduct {
                            tenant_id,
                            user_id,
                            order_id,
                            amount,
                            entry_no,
                            now_ms: claim.now_ms(),
                        };
                        if let Some(outcome) =
                            deduct_claimed_postgres::<D>(transaction, &claim, &request).await?
                        {
                            let lease = Some(claim.lease());
                            return answered(store, transaction, lease, render, outcome).await;
                        }
                    }
                    let lease = match claimed(store, transaction, record).await? {
                        Ok(lease) => lease,
                        Err(decision) => return Ok(Answered::Duplicate(decision)),
                    };
                    let request = Deduct {
                        tenant_id,
                        user_id,
                        order_id,
                        amount,
                        entry_no,
                        now_ms: self.now_ms(),
                    };
                    let outcome = deduct::<D>(transaction, strategy, &request).await?;
                    answered(store, transaction, lease.as_ref(), render, outcome).await
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
}

// After the statements' macros, which the strategies' statements use.
mod deduct;

use deduct::deduct_claimed_postgres;
pub use deduct::{Deduct, deduct};

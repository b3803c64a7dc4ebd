//! The `pay_wallets` rows and their ledger (`pay_wallet_entries`): credits and deducts that can
//! never overdraw, whatever the concurrency.
//!
//! Both run in the caller's write transaction, which the wallets port
//! ([`crate::store::transactions::wallets`]) opens with the request's idempotency record, so
//! that a first-time request commits once, with its record, its effect and its stored answer.
//! Each operation has a business key besides the request's `Idempotency-Key`: a
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

use mideng::record::AnswerTemplate;
use mideng::sqlx::Database;
use mideng::store::sql::{
    Arg, Dialect, FirstClaim, PerDialect, RecordedRow, SqlConn, SqlDialect, SqlRow,
    autocommit_error, is_unique_violation, store_error,
};
use mideng::{StoreError, dialect_sql};

use super::page_after;
use crate::domain::money::{Amount, Balance};
use crate::domain::wallet::{
    Credit, CreditOutcome, Debit, DeductOutcome, LedgerEntry, WalletEntry, WalletStrategy,
    reversal_reference,
};

fn read(error: mideng::sqlx::Error) -> StoreError {
    StoreError::Corrupt(format!("unreadable row: {error}"))
}

/// The wallet's balance and version, locked until the transaction ends.
const WALLET_SELECT_LOCKED: PerDialect<&str> = dialect_sql!(
    "SELECT balance, version FROM pay_wallets WHERE tenant_id = " ? " AND user_id = " ? for_update
);

/// Creates an empty wallet; a wallet created meanwhile by a racing transaction inserts nothing.
const WALLET_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_wallets (tenant_id, user_id, balance, currency, updated_at) VALUES ("
    ? ", " ? ", 0, 'CNY', " ? ")" on_conflict_ignore
);

/// A wallet as read: its balance and its version (bumped by every change of the balance).
#[derive(Clone, Copy, Debug)]
struct Held {
    balance: Balance,
    version: i64,
}

impl Held {
    /// The version the wallet has once this transaction changes its balance.
    fn next_version(self) -> Result<i64, StoreError> {
        next_version(self.version)
    }
}

/// The version after `version`'s change.
fn next_version(version: i64) -> Result<i64, StoreError> {
    version
        .checked_add(1)
        .ok_or_else(|| StoreError::Corrupt(format!("wallet version {version} out of bounds")))
}

/// Locks the wallet (creating it empty if needed) and returns its balance and version.
async fn lock_wallet<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    now_ms: i64,
) -> Result<Held, StoreError> {
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
    Ok(Held {
        balance: Balance::from_stored(stored)
            .ok_or_else(|| StoreError::Corrupt(format!("balance {stored} out of bounds")))?,
        version: row.int(1).map_err(read)?,
    })
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
    /// The wallet's version after this entry's change: the ledger's order.
    wallet_version: i64,
    now_ms: i64,
}

/// Inserts a ledger entry; a taken debit-per-order or credit-per-reference key (or entry
/// number) inserts nothing, and the caller tells the cases apart.
const ENTRY_INSERT: PerDialect<&str> = dialect_sql!(
    insert_ignore " pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, wallet_version, created_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")" on_conflict_ignore
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
                Arg::Int(entry.wallet_version),
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
    let held = lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await?;
    // Under the wallet lock no other credit of this user runs, so an existing credit for the
    // reference is final and a missing one cannot appear before ours.
    if let Some(existing) = find_credit::<D>(connection, tenant_id, user_id, reference).await? {
        return Ok(CreditOutcome::AlreadyCredited(existing));
    }
    let Ok(after) = held.balance.credit(amount) else {
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
        wallet_version: held.next_version()?,
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
    let held = lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await?;
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
    let Ok(after) = held.balance.credit(amount) else {
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
        wallet_version: held.next_version()?,
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
    Ok(lock_wallet::<D>(connection, tenant_id, user_id, now_ms)
        .await?
        .balance)
}

/// The wallet's balance, without a lock.
const WALLET_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT balance FROM pay_wallets WHERE tenant_id = " ? " AND user_id = " ?
);

/// The wallet's latest entries, newest first (by the wallet's version after each: entries
/// older than that column, all 0, by time), bounded.
const ENTRIES_SELECT: PerDialect<&str> = dialect_sql!(
    "SELECT entry_no, kind, amount, reference, order_id, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ? " ORDER BY wallet_version DESC, created_at DESC, entry_no DESC LIMIT 100"
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
        .map(decode_entry)
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((balance, entries))
}

/// Where a page of the ledger starts: the entry's place in its wallet's order.
const ENTRY_CURSOR: PerDialect<&str> = dialect_sql!(
    "SELECT wallet_version, entry_no FROM pay_wallet_entries WHERE tenant_id = " ? " AND user_id = "
    ? " AND entry_no = " ?
);

/// A page of the ledger in the wallet's order, after a cursor (wallet version, number).
const ENTRIES_PAGE: PerDialect<&str> = dialect_sql!(
    "SELECT entry_no, kind, amount, reference, order_id, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ?
    " AND (wallet_version > " ? " OR (wallet_version = " ? " AND entry_no > " ? "))"
    " ORDER BY wallet_version, entry_no LIMIT " ?
);

/// The wallet's ledger in its order (oldest first: by the wallet's version after each entry,
/// then by number), after the entry `after` (from the first when `None`), at most `limit`;
/// `None` when `after` is no entry of this wallet. Entries written before the version column
/// (all version 0) come first, by number (which starts with their time, to the second).
pub async fn entries_page<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    tenant_id: &str,
    user_id: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Option<Vec<WalletEntry>>, StoreError> {
    page_after::<D, _>(
        connection,
        ENTRY_CURSOR.get::<D>(),
        ENTRIES_PAGE.get::<D>(),
        &[Arg::Text(tenant_id), Arg::Text(user_id)],
        after,
        limit,
        decode_entry,
    )
    .await
}

fn decode_entry<R: SqlRow>(row: &R) -> Result<WalletEntry, StoreError> {
    Ok(WalletEntry {
        entry_no: row.text(0).map_err(read)?,
        kind: row.text(1).map_err(read)?,
        amount_fen: row.int(2).map_err(read)?,
        reference: row.text(3).map_err(read)?,
        order_id: row.opt_text(4).map_err(read)?,
        balance_after_fen: row.int(5).map_err(read)?,
        created_at_ms: row.int(6).map_err(read)?,
    })
}

// After the statements' macros, which the strategies' statements use.
mod deduct;
mod group;

pub use deduct::{Deduct, deduct, deduct_recorded_postgres};
pub use group::{GroupOutcome, GroupedDeduct, deduct_group_postgres};

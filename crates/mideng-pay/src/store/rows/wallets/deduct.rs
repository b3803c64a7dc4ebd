//! A deduct in storage, by each [`WalletStrategy`] (the table is in the parent module's
//! documentation): the row lock, the optimistic version check, the conditional update, and on
//! PostgreSQL the conditional update and the record's write as one statement.

use super::*;

/// A deduct to make: whose wallet, for which order, how much, under which entry number.
#[derive(Clone, Copy, Debug)]
pub struct Deduct<'a> {
    /// The tenant.
    pub tenant_id: &'a str,
    /// The wallet's owner.
    pub user_id: &'a str,
    /// The order paid for (one debit per user and order).
    pub order_id: &'a str,
    /// How much.
    pub amount: Amount,
    /// The new entry's number.
    pub entry_no: &'a str,
    /// Now (Unix ms).
    pub now_ms: i64,
}

impl Deduct<'_> {
    fn entry(&self, balance_after: Balance, wallet_version: i64) -> Entry<'_> {
        Entry {
            entry_no: self.entry_no,
            tenant_id: self.tenant_id,
            user_id: self.user_id,
            kind: "DEBIT",
            amount: self.amount,
            reference: self.order_id,
            order_id: Some(self.order_id),
            balance_after,
            wallet_version,
            now_ms: self.now_ms,
        }
    }

    /// The outcome of this deduct when it debited the wallet down to `balance_after`.
    pub fn debited(&self, balance_after: Balance) -> DeductOutcome {
        self.debited_to(balance_after.fen())
    }

    /// The same, the balance after as a number of fen (any number: also the placeholder that
    /// marks where an answer carries the balance).
    pub fn debited_to(&self, balance_after_fen: i64) -> DeductOutcome {
        DeductOutcome::Debited(LedgerEntry {
            entry_no: self.entry_no.to_owned(),
            amount_fen: self.amount.fen(),
            balance_after_fen,
            created_at_ms: self.now_ms,
        })
    }
}

/// Deducts from the user's wallet for the order, by `strategy`: at most one debit per user and
/// order, never below zero. Under any strategy a lost race comes back as
/// [`StoreError::Conflict`], for the caller's transaction to be retried whole.
pub async fn deduct<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    strategy: WalletStrategy,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    match strategy {
        WalletStrategy::RowLock => deduct_locked::<D>(connection, deduct).await,
        WalletStrategy::Optimistic => deduct_optimistic::<D>(connection, deduct).await,
        // A group's request that went its own way is a conditional update.
        WalletStrategy::ConditionalUpdate | WalletStrategy::GroupCommit => {
            deduct_conditional::<D>(connection, deduct).await
        }
    }
}

/// `row-lock`: the wallet locked first; under the lock nothing else of this wallet moves.
async fn deduct_locked<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    let Deduct {
        tenant_id,
        user_id,
        order_id,
        amount,
        now_ms,
        ..
    } = *deduct;
    let held = lock_wallet::<D>(connection, tenant_id, user_id, now_ms).await?;
    // Under the wallet lock no other deduct of this user runs, so an existing debit for the
    // order is final and a missing one cannot appear before ours.
    if let Some(existing) = find_debit::<D>(connection, tenant_id, user_id, order_id).await? {
        return Ok(DeductOutcome::AlreadyDeducted(existing));
    }
    let after = match held.balance.debit(amount) {
        Ok(after) => after,
        Err(_) => {
            return Ok(DeductOutcome::InsufficientFunds {
                balance_fen: held.balance.fen(),
            });
        }
    };
    let entry = deduct.entry(after, held.next_version()?);
    if !insert_entry::<D>(connection, &entry).await? {
        return Err(StoreError::Conflict(
            "debit key taken under the wallet lock".to_owned(),
        ));
    }
    set_balance::<D>(connection, tenant_id, user_id, after, now_ms).await?;
    Ok(deduct.debited(after))
}

/// The wallet's balance and version, without a lock.
const WALLET_SELECT_VERSIONED: PerDialect<&str> = dialect_sql!(
    "SELECT balance, version FROM pay_wallets WHERE tenant_id = " ? " AND user_id = " ?
);

/// Sets the balance if the version is still the one read (compare-and-set).
const WALLET_SET_BALANCE_IF_VERSION: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_wallets SET balance = " ? ", version = version + 1, updated_at = " ?
    " WHERE tenant_id = " ? " AND user_id = " ? " AND version = " ?
);

/// `optimistic`: read without a lock, write only if nothing moved since the read.
async fn deduct_optimistic<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    let Deduct {
        tenant_id,
        user_id,
        order_id,
        amount,
        now_ms,
        ..
    } = *deduct;
    if let Some(existing) = find_debit::<D>(connection, tenant_id, user_id, order_id).await? {
        return Ok(DeductOutcome::AlreadyDeducted(existing));
    }
    let row = connection
        .row(
            WALLET_SELECT_VERSIONED.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(user_id)],
        )
        .await
        .map_err(store_error::<D>)?;
    let Some(row) = row else {
        // No wallet: nothing to deduct from.
        return Ok(DeductOutcome::InsufficientFunds { balance_fen: 0 });
    };
    let stored = row.int(0).map_err(read)?;
    let version = row.int(1).map_err(read)?;
    let balance = Balance::from_stored(stored)
        .ok_or_else(|| StoreError::Corrupt(format!("balance {stored} out of bounds")))?;
    let Ok(after) = balance.debit(amount) else {
        return Ok(DeductOutcome::InsufficientFunds {
            balance_fen: balance.fen(),
        });
    };
    let changed = connection
        .run(
            WALLET_SET_BALANCE_IF_VERSION.get::<D>(),
            &[
                Arg::Int(after.fen()),
                Arg::Int(now_ms),
                Arg::Text(tenant_id),
                Arg::Text(user_id),
                Arg::Int(version),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed != 1 {
        return Err(StoreError::Conflict(
            "the wallet changed since it was read".to_owned(),
        ));
    }
    let entry = deduct.entry(after, next_version(version)?);
    if !insert_entry::<D>(connection, &entry).await? {
        // A debit for the order committed since our read: the retry finds it.
        return Err(StoreError::Conflict(
            "a debit for the order appeared since it was looked for".to_owned(),
        ));
    }
    Ok(deduct.debited(after))
}

/// Takes `x` from the balance only if the balance covers it, returning the new balance and
/// version where the database can (`RETURNING`); MySQL reads them back after.
const WALLET_DEBIT_IF_COVERED: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_wallets SET balance = balance - " ? ", version = version + 1, updated_at = " ?
    " WHERE tenant_id = " ? " AND user_id = " ? " AND balance >= " ?
    { mysql: "", _: " RETURNING balance, version" }
);

/// Undoes this transaction's debit whole (its row is still locked by it): the amount back,
/// and the version back to what it was, so that a wallet's versions stay one per ledger entry
/// — the order the audit reads them in is a chain 1, 2, 3 … (a put-back that counted as a
/// change left two versions with no entry, which the storm's chain check found).
const WALLET_PUT_BACK: PerDialect<&str> = dialect_sql!(
    "UPDATE pay_wallets SET balance = balance + " ? ", version = version - 1 WHERE tenant_id = " ?
    " AND user_id = " ?
);

/// The user's debit for an order, read as it is now (a locking read: on MySQL a plain read
/// would see the transaction's snapshot, older than the debit whose key it just ran into).
const ENTRY_SELECT_DEBIT_CURRENT: PerDialect<&str> = dialect_sql!(
    "SELECT " ledger_entry_columns!() " FROM pay_wallet_entries WHERE tenant_id = " ?
    " AND user_id = " ? " AND order_id = " ? " AND kind = 'DEBIT'" for_update
);

/// `conditional-update`: one statement decides and writes; no read before it.
async fn deduct_conditional<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    let Deduct {
        tenant_id,
        user_id,
        amount,
        now_ms,
        ..
    } = *deduct;
    let key = [Arg::Text(tenant_id), Arg::Text(user_id)];
    let debit_args = [
        Arg::Int(amount.fen()),
        Arg::Int(now_ms),
        Arg::Text(tenant_id),
        Arg::Text(user_id),
        Arg::Int(amount.fen()),
    ];
    let after = if D::KIND == SqlDialect::MySql {
        let changed = connection
            .run(WALLET_DEBIT_IF_COVERED.get::<D>(), &debit_args)
            .await
            .map_err(store_error::<D>)?;
        if changed == 1 {
            // Our own write, on a row our update locked: read back as it is.
            let row = connection
                .row(WALLET_SELECT_LOCKED.get::<D>(), &key)
                .await
                .map_err(store_error::<D>)?;
            Some(row.ok_or_else(|| StoreError::Conflict("wallet vanished".to_owned()))?)
        } else {
            None
        }
    } else {
        connection
            .row(WALLET_DEBIT_IF_COVERED.get::<D>(), &debit_args)
            .await
            .map_err(store_error::<D>)?
    };
    let Some(after) = after else {
        return not_debited::<D>(connection, deduct).await;
    };
    let entry = deduct.entry(
        stored_balance(after.int(0).map_err(read)?)?,
        after.int(1).map_err(read)?,
    );
    let after = entry.balance_after;
    if insert_entry::<D>(connection, &entry).await? {
        return Ok(deduct.debited(after));
    }
    debited_before::<D>(connection, deduct).await
}

pub(super) fn stored_balance(stored: i64) -> Result<Balance, StoreError> {
    Balance::from_stored(stored)
        .ok_or_else(|| StoreError::Corrupt(format!("balance {stored} out of bounds")))
}

/// A conditional debit that changed nothing: the order was debited before, or the balance does
/// not cover it.
async fn not_debited<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    let Deduct {
        tenant_id,
        user_id,
        order_id,
        ..
    } = *deduct;
    if let Some(existing) = find_debit::<D>(connection, tenant_id, user_id, order_id).await? {
        return Ok(DeductOutcome::AlreadyDeducted(existing));
    }
    let balance = match connection
        .row(
            WALLET_SELECT.get::<D>(),
            &[Arg::Text(tenant_id), Arg::Text(user_id)],
        )
        .await
        .map_err(store_error::<D>)?
    {
        Some(row) => row.int(0).map_err(read)?,
        None => 0,
    };
    Ok(DeductOutcome::InsufficientFunds {
        balance_fen: balance,
    })
}

/// A conditional debit whose entry found the order debited before: gives the amount back (the
/// row is this transaction's until it ends, so nobody saw it gone) and names that debit.
async fn debited_before<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    deduct: &Deduct<'_>,
) -> Result<DeductOutcome, StoreError> {
    let Deduct {
        tenant_id,
        user_id,
        order_id,
        amount,
        ..
    } = *deduct;
    connection
        .run(
            WALLET_PUT_BACK.get::<D>(),
            &[
                Arg::Int(amount.fen()),
                Arg::Text(tenant_id),
                Arg::Text(user_id),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let existing = find_entry::<D>(
        connection,
        ENTRY_SELECT_DEBIT_CURRENT.get::<D>(),
        tenant_id,
        user_id,
        order_id,
    )
    .await?;
    match existing {
        Some(existing) => Ok(DeductOutcome::AlreadyDeducted(existing)),
        // The entry number, not the order, was taken (numbers are unique per request, so only
        // a clash of random numbers does that): the transaction is retried whole.
        None => Err(StoreError::Conflict(
            "entry number taken by another deduct".to_owned(),
        )),
    }
}

/// The whole first-time `conditional-update` deduct on PostgreSQL as one statement, run outside
/// a transaction (one round trip, one commit): only if no record holds the key (the toolkit's
/// `claim` item), the balance debited if it covers the amount, the ledger entry inserted, and
/// the key's record written completed with the answer, the balance after the debit filled into
/// its hole (the toolkit's `recorded` item, `$1` … `$12`). `$13` user, `$14` order, `$15`
/// amount, `$16` entry number. It answers the balance after the debit, or NULL when nothing
/// happened (the key was taken before, or the balance does not cover the amount). A debit of
/// the same order or a record of the same key written meanwhile is a unique violation, which
/// undoes the whole statement: duplicates wait for each other on those keys, and the loser
/// acts on nothing.
const DEDUCT_RECORDED_POSTGRES: &str = concat!(
    "WITH ",
    mideng::postgres_unrecorded_cte!(),
    ", debited AS (UPDATE pay_wallets SET balance = balance - $15, version = version + 1, updated_at = $7 \
     WHERE tenant_id = $1 AND user_id = $13 AND balance >= $15 AND EXISTS (SELECT 1 FROM claim) RETURNING balance, version), \
     entry AS (INSERT INTO pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, wallet_version, created_at) \
     SELECT $16, $1, $13, 'DEBIT', $15, $14, $14, balance, version, $7 FROM debited RETURNING balance_after), ",
    mideng::postgres_recorded_cte!("entry", "balance_after"),
    " SELECT (SELECT balance_after FROM entry), (SELECT COUNT(*) FROM recorded)"
);

/// The first-time `conditional-update` deduct on PostgreSQL in one statement and one round
/// trip (`DEDUCT_RECORDED_POSTGRES`), its record written with `template`'s answer: the balance
/// after the debit when it committed, or `None` when nothing was written (the key was taken
/// before, the balance does not cover the amount, no wallet, or a duplicate's debit or record
/// came first): the caller then goes the way of a transaction with the record begun first,
/// which judges each of those. A connection lost after the statement was sent is
/// [`StoreError::OutcomeUnknown`], as a lost `COMMIT` is.
pub async fn deduct_recorded_postgres<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    claim: &FirstClaim,
    template: &AnswerTemplate,
    deduct: &Deduct<'_>,
) -> Result<Option<Balance>, StoreError> {
    let mut args = claim.recorded_args(template).to_vec();
    args.extend([
        Arg::Text(deduct.user_id),
        Arg::Text(deduct.order_id),
        Arg::Int(deduct.amount.fen()),
        Arg::Text(deduct.entry_no),
    ]);
    let answer = connection.row(DEDUCT_RECORDED_POSTGRES, &args).await;
    let row = match answer {
        Ok(row) => row.ok_or_else(|| {
            StoreError::Corrupt("the deduct statement answered no row".to_owned())
        })?,
        Err(error) if is_unique_violation(&error) => return Ok(None),
        Err(error) => return Err(autocommit_error::<D>(error)),
    };
    match (row.opt_int(0).map_err(read)?, row.int(1).map_err(read)?) {
        (Some(after), 1) => Ok(Some(stored_balance(after)?)),
        (None, 0) => Ok(None),
        (after, recorded) => Err(StoreError::Corrupt(format!(
            "the deduct statement debited to {after:?} and wrote {recorded} records"
        ))),
    }
}

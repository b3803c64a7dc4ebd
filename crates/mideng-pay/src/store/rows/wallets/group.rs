//! Group commit on PostgreSQL: the first-time `conditional-update` deducts of many requests
//! as one statement, run outside a transaction (one round trip and one commit for the group).
//!
//! The statement reads the group from one JSON argument, one object per request (its record's
//! columns from the toolkit, its deduct, its place in the group). A request whose key has a
//! record, or whose order has a debit, as the statement's snapshot shows, is left out. The
//! wallets of the others are locked in one order (so that two groups never wait for each other
//! in a circle) and read as they are now; on each wallet, requests are taken in the group's
//! order while the balance covers them, and from the first it does not cover, that wallet's
//! requests are left out too (a prefix of each wallet's requests is debited; the rest go their
//! own way, where each is judged alone). Each wallet is debited once with the sum of what it
//! covers, each request taken gets its ledger entry (its balance after is the wallet's balance
//! less what its wallet's requests up to it took) and its record with its answer. A key or an
//! order taken by a request in flight when the snapshot was taken fails the whole statement
//! with a unique violation, which undoes it all: the group's requests then go their own way,
//! one by one, where the record is begun first and judges each.

use serde::Serialize;

use super::deduct::stored_balance;
use super::*;

/// One request of a group: its record's columns (the toolkit's `RecordedRow`, flattened), its
/// place in the group and its deduct.
#[derive(Debug, Serialize)]
pub struct GroupedDeduct<'a> {
    #[serde(flatten)]
    record: RecordedRow,
    seq: i64,
    user_id: &'a str,
    order_id: &'a str,
    amount: i64,
    entry_no: &'a str,
}

impl<'a> GroupedDeduct<'a> {
    /// `deduct`, `seq`-th in its group, whose record `claim` writes with `template`'s answer.
    pub fn new(
        seq: i64,
        claim: &FirstClaim,
        template: &AnswerTemplate,
        deduct: &Deduct<'a>,
    ) -> Self {
        Self {
            record: claim.recorded_row(template),
            seq,
            user_id: deduct.user_id,
            order_id: deduct.order_id,
            amount: deduct.amount.fen(),
            entry_no: deduct.entry_no,
        }
    }
}

/// The group's statement (see the module's documentation). `$1` the group as a JSON array,
/// `$2` now (Unix ms). It answers one row per request it debited: its `seq` and its balance
/// after.
const DEDUCT_GROUP_POSTGRES: &str = concat!(
    "WITH input AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(",
    mideng::postgres_recorded_row_columns!(),
    ", seq bigint, user_id text, order_id text, amount bigint, entry_no text)), \
     fresh AS (SELECT i.* FROM input i WHERE NOT EXISTS (SELECT 1 FROM mideng_records r \
     WHERE r.tenant = i.tenant AND r.operation = i.operation AND r.idempotency_key = i.idempotency_key) \
     AND NOT EXISTS (SELECT 1 FROM pay_wallet_entries e WHERE e.tenant_id = i.tenant \
     AND e.user_id = i.user_id AND e.order_id = i.order_id AND e.kind = 'DEBIT')), \
     wallets AS (SELECT w.tenant_id, w.user_id, w.balance, w.version FROM pay_wallets w \
     WHERE (w.tenant_id, w.user_id) IN (SELECT tenant, user_id FROM fresh) \
     ORDER BY w.tenant_id, w.user_id FOR UPDATE), \
     running AS (SELECT f.*, w.balance AS before, w.version AS version_before, \
     SUM(f.amount) OVER (PARTITION BY f.tenant, f.user_id ORDER BY f.seq) AS spent, \
     ROW_NUMBER() OVER (PARTITION BY f.tenant, f.user_id ORDER BY f.seq) AS nth \
     FROM fresh f JOIN wallets w ON w.tenant_id = f.tenant AND w.user_id = f.user_id), \
     accepted AS (SELECT * FROM running WHERE spent <= before), \
     totals AS (SELECT tenant, user_id, SUM(amount) AS total, COUNT(*) AS n FROM accepted GROUP BY tenant, user_id), \
     debited AS (UPDATE pay_wallets w SET balance = w.balance - t.total, version = w.version + t.n, updated_at = $2 \
     FROM totals t WHERE w.tenant_id = t.tenant AND w.user_id = t.user_id RETURNING w.tenant_id, w.user_id), \
     entry AS (INSERT INTO pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, wallet_version, created_at) \
     SELECT a.entry_no, a.tenant, a.user_id, 'DEBIT', a.amount, a.order_id, a.order_id, a.before - a.spent, a.version_before + a.nth, a.created_at \
     FROM accepted a JOIN debited d ON d.tenant_id = a.tenant AND d.user_id = a.user_id RETURNING entry_no, balance_after), \
     settled AS (SELECT a.*, e.balance_after FROM accepted a JOIN entry e ON e.entry_no = a.entry_no), ",
    mideng::postgres_recorded_rows_cte!("settled", "balance_after"),
    " SELECT seq, balance_after, (SELECT COUNT(*) FROM recorded) FROM settled"
);

/// What a group's statement came to.
#[derive(Debug)]
pub enum GroupOutcome {
    /// It committed: the balance after of each request it debited, by `seq` (the others were
    /// left out and changed nothing).
    Committed(Vec<(i64, Balance)>),
    /// It failed and changed nothing (a key or an order taken in flight, a deadlock, a
    /// refusal): every request goes its own way.
    Undone,
}

/// Runs a group's deducts as one statement outside a transaction. A connection lost after the
/// statement was sent is [`StoreError::OutcomeUnknown`] for the whole group.
pub async fn deduct_group_postgres<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    group: &[GroupedDeduct<'_>],
    now_ms: i64,
) -> Result<GroupOutcome, StoreError> {
    let input = serde_json::to_string(group)
        .map_err(|error| StoreError::Corrupt(format!("a group of deducts as JSON: {error}")))?;
    let rows = match connection
        .rows(
            DEDUCT_GROUP_POSTGRES,
            &[Arg::Text(&input), Arg::Int(now_ms)],
        )
        .await
    {
        Ok(rows) => rows,
        Err(error) => {
            return match autocommit_error::<D>(error) {
                unknown @ StoreError::OutcomeUnknown(_) => Err(unknown),
                error => {
                    tracing::debug!(target: "mideng_pay::wallets", %error, requests = group.len(), "a group of deducts was undone: each goes its own way");
                    Ok(GroupOutcome::Undone)
                }
            };
        }
    };
    let mut settled = Vec::with_capacity(rows.len());
    for row in &rows {
        let recorded = row.int(2).map_err(read)?;
        if usize::try_from(recorded).ok() != Some(rows.len()) {
            return Err(StoreError::Corrupt(format!(
                "a group debited {} requests and wrote {recorded} records",
                rows.len()
            )));
        }
        settled.push((
            row.int(0).map_err(read)?,
            stored_balance(row.int(1).map_err(read)?)?,
        ));
    }
    Ok(GroupOutcome::Committed(settled))
}

//! One-time tokens on SQL ([`TokenStore`]).
//!
//! Consumption is one conditional update (`consumed_at IS NULL AND expires_at > now`): of many
//! concurrent consumers exactly one changes the row, whatever the isolation level, so the
//! token takes effect once. The read that follows a refusal only explains it.
//!
//! Issuing is one write transaction that locks the single row of `mideng_token_issuer` (toolkit
//! migration 3), counts the unspent tokens of the scope and of the store, and inserts only under
//! both [`TokenLimits`]: two issuers can never both see the last free place. The lock is one
//! row for the whole store, because the store-wide limit is one count: issues queue behind each
//! other for the length of two counts and an insert (the scope's count reads its primary-key
//! range; the store's an index of unspent tokens by expiry). Consumption does not take it: it
//! only ever lowers the counts.

use std::time::Duration;

use async_trait::async_trait;

use sqlx::Database;

use super::engine::{Arg, Dialect, SqlConn, SqlRow, SqlStore, store_error, timer};
use super::statements::PerDialect;
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::{IdempotencyKey, Scope};
use crate::latency::op;
use crate::limits::PURGE_BATCH_ROWS_MAX;
use crate::token::{
    self, Consumption, IssueError, IssuedToken, Token, TokenCap, TokenLimits, TokenStore,
};

/// The row every issue locks first (see the module's documentation).
const LOCK_ISSUER: PerDialect<&str> =
    crate::dialect_sql!("SELECT id FROM mideng_token_issuer WHERE id = 1" for_update);
/// The scope's unspent tokens: how many, and when the first of them expires.
const COUNT_SCOPE: PerDialect<&str> = crate::dialect_sql!(
    "SELECT COUNT(*), MIN(expires_at) FROM mideng_tokens WHERE tenant = " ? " AND operation = " ?
    " AND consumed_at IS NULL AND expires_at > " ?
);
/// The store's unspent tokens: how many, and when the first of them expires.
const COUNT_ALL: PerDialect<&str> = crate::dialect_sql!(
    "SELECT COUNT(*), MIN(expires_at) FROM mideng_tokens WHERE consumed_at IS NULL AND expires_at > "?
);

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_tokens (tenant, operation, token, expires_at) VALUES (" ? ", " ? ", " ? ", " ? ")"
);
const CONSUME: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_tokens SET consumed_at = " ? ", consumed_by = " ? " WHERE tenant = " ? " AND operation = " ?
    " AND token = " ? " AND consumed_at IS NULL AND expires_at > " ?
);
const SELECT: PerDialect<&str> = crate::dialect_sql!(
    "SELECT expires_at, consumed_at, consumed_by FROM mideng_tokens WHERE tenant = " ? " AND operation = " ?
    " AND token = " ?
);
/// A bounded delete, written per dialect as for records (see `record.rs`).
const PURGE: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_tokens WHERE "
    {
        postgres: "(tenant, operation, token) IN (SELECT tenant, operation, token FROM mideng_tokens WHERE ",
        sqlite: "rowid IN (SELECT rowid FROM mideng_tokens WHERE ",
        mysql: ""
    }
    "expires_at <= " ? { mysql: " ORDER BY expires_at", _: "" } " LIMIT " ?
    { postgres: " FOR UPDATE SKIP LOCKED)", sqlite: ")", mysql: "" }
);

/// Unspent tokens counted by `sql` with `args`: how many, and the earliest expiry among them.
async fn unspent<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    sql: &'static str,
    args: &[Arg<'_>],
) -> Result<(u64, Option<i64>), StoreError> {
    let row = connection
        .row(sql, args)
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| super::engine::corrupt("a count returned no row"))?;
    let read = |error: sqlx::Error| StoreError::Corrupt(format!("unreadable count: {error}"));
    let count = u64::try_from(row.int(0).map_err(read)?)
        .map_err(|_| super::engine::corrupt("negative count"))?;
    Ok((count, row.opt_int(1).map_err(read)?))
}

/// Counts and inserts under the issuer lock, in the caller's write transaction. `Ok(Err(_))`
/// is a limit reached: nothing was written, and the transaction commits empty.
async fn issue_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    scope: &Scope,
    token: &Token,
    ttl_ms: i64,
    limits: TokenLimits,
) -> Result<Result<i64, IssueError>, StoreError> {
    connection
        .row(LOCK_ISSUER.get::<D>(), &[])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| super::engine::corrupt("mideng_token_issuer has no row: migrate"))?;
    // Read after the lock, so that the counts include every issue that held it before.
    let now = now_ms();
    let (in_scope, earliest) = unspent::<D>(
        connection,
        COUNT_SCOPE.get::<D>(),
        &[
            Arg::Text(scope.tenant()),
            Arg::Text(scope.operation()),
            Arg::Int(now),
        ],
    )
    .await?;
    if in_scope >= u64::from(limits.per_scope_max()) {
        return Ok(Err(token::full(TokenCap::Scope, earliest, now)));
    }
    let (in_all, earliest) =
        unspent::<D>(connection, COUNT_ALL.get::<D>(), &[Arg::Int(now)]).await?;
    if in_all >= u64::from(limits.total_max()) {
        return Ok(Err(token::full(TokenCap::Total, earliest, now)));
    }
    let expires_at_ms = now.saturating_add(ttl_ms);
    connection
        .run(
            INSERT.get::<D>(),
            &[
                Arg::Text(scope.tenant()),
                Arg::Text(scope.operation()),
                Arg::Text(token.as_str()),
                Arg::Int(expires_at_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Ok(expires_at_ms))
}

#[async_trait]
impl<D: Dialect> TokenStore for SqlStore<D> {
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, IssueError> {
        let _timer = timer::<D>(op::TOKEN_ISSUE);
        let ttl_ms = token::ttl_ms(ttl)?;
        let token = Token::generate();
        let limits = self.token_limits();
        let expires_at_ms = self
            .write(|transaction| {
                Box::pin(issue_in::<D>(transaction, scope, &token, ttl_ms, limits))
            })
            .await??;
        Ok(IssuedToken {
            token,
            expires_at_ms,
        })
    }

    async fn consume_token_for(
        &self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
    ) -> Result<Consumption, StoreError> {
        let _timer = timer::<D>(op::TOKEN_CONSUME);
        let now = now_ms();
        let identity = [
            Arg::Text(scope.tenant()),
            Arg::Text(scope.operation()),
            Arg::Text(token.as_str()),
        ];
        let [tenant, operation, token_text] = identity;
        let consumed_by = Arg::OptText(key.map(IdempotencyKey::as_str));
        // One conditional update decides, and binds the key in the same step: of many
        // concurrent consumers exactly one changes the row. The read that follows only
        // explains a refusal.
        let changed = self
            .run_once(
                CONSUME.get::<D>(),
                &[
                    Arg::Int(now),
                    consumed_by,
                    tenant,
                    operation,
                    token_text,
                    Arg::Int(now),
                ],
            )
            .await?;
        if changed == 1 {
            return Ok(Consumption::Consumed);
        }
        let found = self
            .read_row(SELECT.get::<D>(), &identity, |row| {
                let read =
                    |error: sqlx::Error| StoreError::Corrupt(format!("unreadable token: {error}"));
                Ok((
                    row.int(0).map_err(read)?,
                    row.opt_int(1).map_err(read)?,
                    row.opt_text(2).map_err(read)?,
                ))
            })
            .await?;
        Ok(match found {
            Some((expires_at_ms, Some(_), spent_by)) if expires_at_ms > now => {
                match (spent_by, key) {
                    (Some(spent_by), Some(key)) if spent_by == key.as_str() => Consumption::SameKey,
                    _ => Consumption::AlreadyConsumed,
                }
            }
            _ => Consumption::Unknown,
        })
    }

    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = timer::<D>(op::TOKEN_PURGE);
        let limit = i64::from(limit.min(PURGE_BATCH_ROWS_MAX));
        self.run_once(PURGE.get::<D>(), &[Arg::Int(now_ms), Arg::Int(limit)])
            .await
    }
}

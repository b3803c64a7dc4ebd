//! One-time tokens on SQL ([`TokenStore`]).
//!
//! Consumption is one conditional update (`consumed_at IS NULL AND expires_at > now`): of many
//! concurrent consumers exactly one changes the row, whatever the isolation level, so the
//! token takes effect once. The read that follows a refusal only explains it.

use std::time::Duration;

use async_trait::async_trait;

use super::engine::{Arg, Dialect, SqlRow, SqlStore, timer};
use super::statements::PerDialect;
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::Scope;
use crate::latency::op;
use crate::limits::PURGE_BATCH_ROWS_MAX;
use crate::token::{self, Consumption, IssuedToken, Token, TokenStore};

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_tokens (tenant, operation, token, expires_at) VALUES (" ? ", " ? ", " ? ", " ? ")"
);
const CONSUME: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_tokens SET consumed_at = " ? " WHERE tenant = " ? " AND operation = " ?
    " AND token = " ? " AND consumed_at IS NULL AND expires_at > " ?
);
const SELECT: PerDialect<&str> = crate::dialect_sql!(
    "SELECT expires_at, consumed_at FROM mideng_tokens WHERE tenant = " ? " AND operation = " ?
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

#[async_trait]
impl<D: Dialect> TokenStore for SqlStore<D> {
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, StoreError> {
        let _timer = timer::<D>(op::TOKEN_ISSUE);
        let expires_at_ms = now_ms().saturating_add(token::ttl_ms(ttl)?);
        let token = Token::generate();
        self.run_once(
            INSERT.get::<D>(),
            &[
                Arg::Text(scope.tenant()),
                Arg::Text(scope.operation()),
                Arg::Text(token.as_str()),
                Arg::Int(expires_at_ms),
            ],
        )
        .await?;
        Ok(IssuedToken {
            token,
            expires_at_ms,
        })
    }

    async fn consume_token(&self, scope: &Scope, token: &Token) -> Result<Consumption, StoreError> {
        let _timer = timer::<D>(op::TOKEN_CONSUME);
        let now = now_ms();
        let identity = [
            Arg::Text(scope.tenant()),
            Arg::Text(scope.operation()),
            Arg::Text(token.as_str()),
        ];
        let [tenant, operation, token_text] = identity;
        // One conditional update decides: of many concurrent consumers exactly one changes the
        // row. The read that follows only explains a refusal.
        let changed = self
            .run_once(
                CONSUME.get::<D>(),
                &[Arg::Int(now), tenant, operation, token_text, Arg::Int(now)],
            )
            .await?;
        if changed == 1 {
            return Ok(Consumption::Consumed);
        }
        let found = self
            .read_row(SELECT.get::<D>(), &identity, |row| {
                let read =
                    |error: sqlx::Error| StoreError::Corrupt(format!("unreadable token: {error}"));
                Ok((row.int(0).map_err(read)?, row.opt_int(1).map_err(read)?))
            })
            .await?;
        Ok(match found {
            Some((expires_at_ms, Some(_))) if expires_at_ms > now => Consumption::AlreadyConsumed,
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

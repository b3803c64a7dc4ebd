//! One-time tokens on Redis ([`TokenStore`]), under [`TokenLimits`], on one node or a cluster.
//!
//! A token is a string key (`1` unspent; once spent, `0`, or `k:` and the idempotency key that
//! spent it) beside its scope's sorted set of unspent tokens scored by expiry; both carry the
//! scope's hash tag, so one script may touch both on Redis Cluster. Issuing in a scope is one
//! script that drops the set's expired members, counts the rest and adds the token only under
//! the scope's limit; consuming is one script that spends the token only while it is in that
//! set, unexpired, and takes it out. The set is therefore the truth of what is unspent, and its
//! count can never pass the limit.
//!
//! The store-wide limit cannot share a slot with every scope, so it is a second sorted set of
//! its own (`prefix:unspent`, one key, on one node of a cluster) kept in two steps around the
//! scope's: an issue first reserves a place in it (the same script, without a token key), then
//! runs the scope's script, and gives the place back if the scope refused; a consumption takes
//! its token out after spending it. Between two steps, or when a step after the first is lost
//! (a connection dropped), the store-wide set holds a token that is not unspent, until its
//! expiry: the count is high, never low, so the limit holds. Every issue and every consumption
//! costs one round trip more for it.
//!
//! Expiry scores are the callers' clocks, as record expiries are: keep them synchronised.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionLike;
use redis::{Script, Value};

use super::{RedisStore, corrupt, integer_of, tag_part};
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::{IdempotencyKey, Scope};
use crate::latency::{Backend, StoreTimer, op};
use crate::token::{self, Consumption, IssueError, IssuedToken, Token, TokenCap, TokenStore};

/// Reserves a place in a set of unspent tokens. KEYS: the set, and (for a scope's set) the
/// token's key. ARGV: now, expires_at (Unix ms), the member, the limit. Drops the members that
/// expired by `now`; then, under the limit, adds the member scored by its expiry, sets the token
/// key to `1` until then (when given), keeps the set until its last member expires and returns
/// `{1}`; at the limit it returns `{0, earliest expiry}` and changes nothing else.
static RESERVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local unspent = KEYS[1]
redis.call('ZREMRANGEBYSCORE', unspent, '-inf', ARGV[1])
if redis.call('ZCARD', unspent) >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', unspent, 0, 0, 'WITHSCORES')
  return {0, first[2]}
end
redis.call('ZADD', unspent, ARGV[2], ARGV[3])
if KEYS[2] then
  redis.call('SET', KEYS[2], '1', 'PXAT', ARGV[2])
end
local last = redis.call('ZRANGE', unspent, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', unspent, last[2])
return {1}
",
    )
});

/// Consumes a token. KEYS: the token, its scope's set of unspent tokens. ARGV: now, the token,
/// the spent value to write (`0` for a request without a key, `k:` and the key for one with).
/// Returns 1 consumed now, 3 spent before under the same key, 2 spent before otherwise, 0
/// unknown or expired, -1 for a value this store never writes. A token is spent only while its
/// scope's set holds it unexpired, so that what the limit counts and what can be spent are the
/// same tokens. `KEEPTTL` keeps a spent token (and the key bound to it) only as long as it
/// would have lived, so a duplicate is recognised until then.
static CONSUME_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('GET', KEYS[1])
if value == '1' then
  local expires_at = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if not expires_at or tonumber(expires_at) <= tonumber(ARGV[1]) then
    return 0
  end
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL')
  return 1
end
if value == '0' then
  return 2
end
if value and string.sub(value, 1, 2) == 'k:' then
  if value == ARGV[3] then
    return 3
  end
  return 2
end
if value then
  return -1
end
return 0
",
    )
});

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The scope's hash tag: every key of one scope's tokens lives in its slot.
    fn scope_tag(scope: &Scope) -> String {
        format!("{{{}|{}}}", scope.tenant(), scope.operation())
    }

    fn token_key(&self, scope: &Scope, token: &Token) -> String {
        format!(
            "{}:tok:{}:{}",
            self.prefix,
            Self::scope_tag(scope),
            token.as_str()
        )
    }

    fn unspent_key(&self, scope: &Scope) -> String {
        format!("{}:unspent:{}", self.prefix, Self::scope_tag(scope))
    }

    fn all_unspent_key(&self) -> String {
        format!("{}:unspent", self.prefix)
    }

    /// A token's member in the store-wide set: its scope and text, `|`-separated (scope parts
    /// have no `|`; the token's is escaped).
    fn all_unspent_member(scope: &Scope, token: &Token) -> String {
        format!(
            "{}|{}|{}",
            scope.tenant(),
            scope.operation(),
            tag_part(token.as_str())
        )
    }

    /// Runs the reserve script: `None` when reserved, `Some(earliest expiry)` at the limit.
    async fn reserve(
        &self,
        keys: &[&str],
        now: i64,
        expires_at_ms: i64,
        member: &str,
        limit: u32,
    ) -> Result<Option<Option<i64>>, StoreError> {
        let mut invocation = RESERVE_SCRIPT.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation
            .arg(now)
            .arg(expires_at_ms)
            .arg(member)
            .arg(limit);
        let reply: Value = self.invoke(&invocation).await?;
        let Value::Array(items) = reply else {
            return Err(corrupt("token reserve script returned no array"));
        };
        let mut items = items.into_iter();
        match integer_of(items.next().unwrap_or(Value::Nil))? {
            Some(1) => Ok(None),
            Some(0) => Ok(Some(integer_of(items.next().unwrap_or(Value::Nil))?)),
            _ => Err(corrupt("token reserve script returned an unknown verdict")),
        }
    }

    /// Takes `member` out of the store-wide set. A failure leaves it counted until its expiry,
    /// which only keeps the count high: logged, not returned.
    async fn release_store_wide(&self, member: &str, why: &str) {
        let mut command = redis::cmd("ZREM");
        command.arg(self.all_unspent_key()).arg(member);
        if let Err(error) = self.query::<i64>(&command).await {
            tracing::warn!(
                target: "mideng::token",
                %error,
                "could not take a token out of the store-wide count after {why}; it counts until it expires"
            );
        }
    }
}

#[async_trait]
impl<C> TokenStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, IssueError> {
        let _timer = StoreTimer::start(Backend::Redis, op::TOKEN_ISSUE);
        let ttl_ms = token::ttl_ms(ttl)?;
        let now = now_ms();
        let expires_at_ms = now.saturating_add(ttl_ms);
        let token = Token::generate();
        let limits = self.token_limits;
        let member = Self::all_unspent_member(scope, &token);
        // First the store-wide place, so that the token never exists uncounted there.
        let all = self.all_unspent_key();
        if let Some(earliest) = self
            .reserve(&[&all], now, expires_at_ms, &member, limits.total_max())
            .await?
        {
            return Err(token::full(TokenCap::Total, earliest, now));
        }
        let (unspent, token_key) = (self.unspent_key(scope), self.token_key(scope, &token));
        let in_scope = self
            .reserve(
                &[&unspent, &token_key],
                now,
                expires_at_ms,
                token.as_str(),
                limits.per_scope_max(),
            )
            .await;
        // A failure leaves the place reserved: the scope's script may have run, and then the
        // token must stay counted store-wide until it expires.
        match in_scope? {
            None => Ok(IssuedToken {
                token,
                expires_at_ms,
            }),
            Some(earliest) => {
                self.release_store_wide(&member, "its scope refused it")
                    .await;
                Err(token::full(TokenCap::Scope, earliest, now))
            }
        }
    }

    async fn consume_token_for(
        &self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
    ) -> Result<Consumption, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::TOKEN_CONSUME);
        let mut invocation = CONSUME_SCRIPT.prepare_invoke();
        invocation
            .key(self.token_key(scope, token))
            .key(self.unspent_key(scope))
            .arg(now_ms())
            .arg(token.as_str())
            .arg(key.map_or_else(|| "0".to_owned(), |key| format!("k:{}", key.as_str())));
        let found: i64 = self.invoke(&invocation).await?;
        match found {
            1 => {
                self.release_store_wide(&Self::all_unspent_member(scope, token), "spending it")
                    .await;
                Ok(Consumption::Consumed)
            }
            3 => Ok(Consumption::SameKey),
            2 => Ok(Consumption::AlreadyConsumed),
            0 => Ok(Consumption::Unknown),
            _ => Err(corrupt("token holds a value this store never writes")),
        }
    }

    /// Always 0: tokens carry their expiry, and Redis deletes them itself; the sets of unspent
    /// tokens drop expired members on every issue.
    async fn purge_expired_tokens(&self, _now_ms: i64, _limit: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

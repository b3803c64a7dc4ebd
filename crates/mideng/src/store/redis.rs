//! Redis store: every contract as Lua scripts on Redis (single node, or Redis Cluster through
//! [`RedisStore::from_connection`]).
//!
//! For deployments that already run Redis and want the toolkit's records, tokens, locks and
//! state machines there instead of in a SQL database. It behaves like the memory store on every
//! call; the differences that native expiry brings are listed at the end.
//!
//! ## Key layout
//!
//! `{prefix}` below is the store's prefix (`mideng` by default); the braces around the last
//! part are literal Redis hash tags.
//!
//! | data | key | type |
//! |---|---|---|
//! | record | `prefix:rec:{tenant\|operation\|key}` | hash: fingerprint, state, fence, owner, lease_until, status, headers, body, created_at, expires_at |
//! | token | `prefix:tok:{tenant\|operation}:token` | string: `1` unspent, `0` spent |
//! | a scope's unspent tokens | `prefix:unspent:{tenant\|operation}` | sorted set: token, scored by its expiry |
//! | every unspent token | `prefix:unspent` | sorted set: `tenant\|operation\|token`, scored by its expiry |
//! | lock | `prefix:lock:{fs<slot>}:name` | string: the owner nonce |
//! | lock fence | `prefix:fence:{fs<slot>}` | integer: the slot's last fence (1024 slots) |
//! | state | `prefix:state:{kind\|id}` | hash: state, version |
//!
//! Inside the braces, `%`, `{`, `}` and `|` of caller-chosen text are percent-escaped (`%25`,
//! `%7B`, `%7D`, `%7C`): a brace would end the hash tag early (and on a cluster send a lock and
//! its fence counter to different slots), and a `|` would let two identities share a key.
//!
//! ## Why it is built this way
//!
//! - **One script per state change.** Every operation that changes data is a single Lua script
//!   (or a single command), which Redis runs atomically: among concurrent callers exactly one
//!   wins, as with the memory store's mutex. Nothing is read into Rust and written back, which
//!   would let two callers both see "free". Scripts go out as `EVALSHA` and are reloaded on
//!   `NOSCRIPT` (after a restart or failover).
//! - **Hash tags.** Every key a script touches is passed in `KEYS` and carries the same hash
//!   tag, so on Redis Cluster they live in one slot and the script may run there. The lock
//!   script touches two keys (the lock and its slot's fence), both tagged with the slot
//!   ([`crate::lock::fence_slot`]); the token scripts a token and its scope's set of unspent tokens, both tagged with
//!   the scope.
//! - **Token limits in two steps** (`redis/token.rs`). A scope's limit is one script on its
//!   slot; the store-wide limit is a second set, on its own slot, in which an issue reserves a
//!   place *before* its scope's script runs and gives it back if that script refuses, and from
//!   which a spent token is removed *after* it is spent. Between the steps the store-wide count
//!   is high, never low, so neither limit is ever exceeded.
//! - **Native expiry.** Records expire at their `expires_at` (`PEXPIREAT`), tokens at theirs
//!   (`PXAT`), locks after their time-to-live (`PX`), so Redis purges them itself:
//!   `purge_expired` and `purge_expired_tokens` have nothing to do and return 0. The sets of
//!   unspent tokens drop their expired members whenever a token is issued, and vanish with
//!   their last member's expiry.
//! - **Fences per slot, from the server's clock.** A lock key vanishes when its time runs out
//!   or it is released; its fence comes from one of 1024 slot keys, so what is kept does not
//!   grow with the names ever locked. A new fence is the slot's last plus one, or the server's
//!   time in microseconds when that is higher: a slot whose key was lost (Redis restarted
//!   without its data) starts again above every fence it gave before, unless the server's
//!   clock went back. A record's fence lives in the record and restarts at 1 once the record
//!   has expired; the owner nonce still tells the two leases apart, as after a SQL purge.
//!
//! ## Differences from the memory store that native expiry brings
//!
//! - A record past its retention is gone rather than kept until a purge: `find_record` returns
//!   `None` for it, and the next `begin` proceeds with fence 1 and `taken_over = false`.
//! - A lock whose time ran out is gone, so `release` and `renew` with its guard return false
//!   even when nobody took the lock in between.
//!
//! Times are the callers' clocks (Unix ms, as in every store) for the record's own fields and
//! `PEXPIREAT`, and for a token's expiry (the score the limits count by, and `PXAT`); lock
//! lifetimes are relative (`PX`) and run on the Redis server's clock.

mod cluster;
mod token;

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    ErrorKind, FromRedisValue, RedisError, Script, ScriptInvocation, ServerErrorKind, Value,
};

pub use self::cluster::ClusterConnection;
use crate::clock::now_ms;
use crate::error::{InvalidInput, StoreError};
use crate::key::{Fingerprint, IdempotencyKey, Name, Scope};
use crate::latency::{Backend, StoreTimer, op};
use crate::limits::SCOPE_PART_BYTES_MAX;
use crate::lock::{self, LockGuard, LockStore};
use crate::record::{
    Decision, Lease, Record, RecordPolicy, RecordState, RecordStore, StoredResponse, new_owner,
    retry_after,
};
use crate::state::StateStore;
use crate::token::TokenLimits;

/// The prefix of every key unless [`RedisStore::with_prefix`] says otherwise.
const DEFAULT_PREFIX: &str = "mideng";

/// How long a command may wait for its reply. redis-rs 1.x defaults to 500 ms, which a loaded
/// machine (or a Redis busy with a large `BGSAVE` fork) exceeds often enough to turn a healthy
/// store into spurious "unavailable" errors; a slow reply is better than a false failure here,
/// since callers retry a failed `begin` anyway.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection attempt may take. redis-rs 1.x defaults to 1 s, too tight for the
/// same reason, and for TLS handshakes across regions.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// How often redis-rs may retry one call on a Redis Cluster (a redirect, a reconnect, a wait
/// for the slots to settle) before the call fails.
pub const CLUSTER_RETRIES: u32 = 8;

/// Percent-escapes the characters that would break a hash tag (`{`, `}`) or the `|` separator,
/// and `%` itself so that the escaping cannot be confused with text.
fn tag_part(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['%', '{', '}', '|']) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        match character {
            '%' => escaped.push_str("%25"),
            '{' => escaped.push_str("%7B"),
            '}' => escaped.push_str("%7D"),
            '|' => escaped.push_str("%7C"),
            other => escaped.push(other),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// Decides what a request arriving with a key must do: [`crate::record::judge`] in Lua.
///
/// KEYS: the record. ARGV: now, fingerprint, owner, lease_until, expires_at (Unix ms as
/// decimal text, written as given so that Lua never formats a large number).
///
/// Returns `{'proceed', fence, taken_over}`, `{'replay', status, headers, body}`,
/// `{'inflight', retry_after_ms}`, `{'mismatch'}` or `{'corrupt', what}`.
static BEGIN_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local record = KEYS[1]
local now = tonumber(ARGV[1])
if redis.call('EXISTS', record) == 0 then
  redis.call('HSET', record, 'fingerprint', ARGV[2], 'state', 'in_progress', 'fence', '1',
    'owner', ARGV[3], 'lease_until', ARGV[4], 'created_at', ARGV[1], 'expires_at', ARGV[5])
  redis.call('PEXPIREAT', record, ARGV[5])
  return {'proceed', 1, 0}
end
local found = redis.call('HMGET', record, 'fingerprint', 'state', 'fence', 'lease_until', 'expires_at')
local fingerprint, state = found[1], found[2]
local lease_until, expires_at = tonumber(found[4]), tonumber(found[5])
if not fingerprint or not tonumber(found[3]) or not lease_until or not expires_at then
  return {'corrupt', 'record fields missing or not numbers'}
end
if state ~= 'in_progress' and state ~= 'completed' and state ~= 'abandoned' then
  return {'corrupt', 'unknown record state'}
end
if expires_at > now and state ~= 'abandoned' then
  if fingerprint ~= ARGV[2] then
    return {'mismatch'}
  end
  if state == 'completed' then
    local response = redis.call('HMGET', record, 'status', 'headers', 'body')
    return {'replay', response[1], response[2], response[3]}
  end
  if lease_until > now then
    return {'inflight', math.max(1, lease_until - now)}
  end
end
redis.call('HDEL', record, 'status', 'headers', 'body')
local fence = redis.call('HINCRBY', record, 'fence', 1)
redis.call('HSET', record, 'fingerprint', ARGV[2], 'state', 'in_progress', 'owner', ARGV[3],
  'lease_until', ARGV[4], 'created_at', ARGV[1], 'expires_at', ARGV[5])
redis.call('PEXPIREAT', record, ARGV[5])
return {'proceed', fence, 1}
",
    )
});

/// Stores the response if the lease is current. KEYS: the record. ARGV: owner, fence, status,
/// headers, body, expires_at. Returns 1 when written, 0 for a stale lease.
static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'state')
if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] or found[3] ~= 'in_progress' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[3], 'headers', ARGV[4],
  'body', ARGV[5], 'expires_at', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
return 1
",
    )
});

/// Frees the key if the lease is current. KEYS: the record. ARGV: owner, fence. Returns 1 when
/// written, 0 for a stale lease.
static ABANDON_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'state')
if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] or found[3] ~= 'in_progress' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'abandoned', 'lease_until', '0')
return 1
",
    )
});

/// Takes a lock. KEYS: the lock, its slot's fence. ARGV: owner, time-to-live in ms. Returns
/// the new fence, or 0 when the lock is held: the slot's last fence plus one, or the server's
/// time in microseconds when that is higher (below 2^53, so exact in Lua's numbers).
static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now_us)
  local text = string.format('%.0f', fence)
  redis.call('SET', KEYS[2], text)
  return text
end
return '0'
",
    )
});

/// Releases a lock only if the caller still owns it: a plain `DEL` would free the lock of
/// whoever took it after the caller's time ran out. KEYS: the lock. ARGV: owner. Returns 1 or 0.
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Extends a lock only if the caller still owns it. KEYS: the lock. ARGV: owner, time-to-live
/// in ms. Returns 1 or 0.
static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// Creates an entity unless it exists. KEYS: the entity. ARGV: initial state. Returns 1 or 0.
static CREATE_ENTITY_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'version', '0')
return 1
",
    )
});

/// Moves an entity from one state to another. KEYS: the entity. ARGV: from, to. Returns 1 when
/// moved, 0 when the entity is missing or in another state.
static COMPARE_AND_SET_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'state') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  return 1
end
return 0
",
    )
});

/// A store on Redis. Cloning shares the connection.
///
/// `C` is any asynchronous redis-rs connection: the default [`ConnectionManager`] reconnects
/// by itself; a cluster connection works as well, since every script's keys share one slot.
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    connection: C,
    prefix: String,
    token_limits: TokenLimits,
}

/// Prints the prefix only: the connection may carry credentials.
impl<C> std::fmt::Debug for RedisStore<C> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to the Redis server at `url` (`redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS when redis-rs is built with it) through a [`ConnectionManager`],
    /// which reconnects after a dropped connection; the call in flight then fails with
    /// [`StoreError::Unavailable`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(store_error)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(store_error)?;
        Ok(Self::from_connection(connection))
    }
}

impl RedisStore<ClusterConnection> {
    /// Connects to a Redis Cluster through its seed `nodes` (`redis://host:port` each; one
    /// reachable node is enough to discover the rest). The connection follows slot moves and
    /// reconnects to nodes by itself; if it is ever left without a connection to any node
    /// (every node was restarted at once), it starts over from the seed nodes
    /// ([`ClusterConnection`]). Every script's keys share one hash slot, so each state change
    /// still runs atomically on one node.
    ///
    /// redis-rs's retries inside one call are bounded to [`CLUSTER_RETRIES`], with waits of
    /// 100 ms to 1 s between them (its defaults, 16 retries and waits up to 655 s, could hold a
    /// call for minutes while a cluster re-forms): a call fails within a few seconds, and the
    /// caller's own retry or fallback decides what happens next.
    pub async fn connect_cluster(nodes: &[String]) -> Result<Self, StoreError> {
        let client = redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .response_timeout(RESPONSE_TIMEOUT)
            .connection_timeout(CONNECTION_TIMEOUT)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(100)
            .max_retry_wait(1_000)
            .build()
            .map_err(store_error)?;
        let connection = ClusterConnection::connect(client)
            .await
            .map_err(store_error)?;
        Ok(Self::from_connection(connection))
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store on an existing connection (a cluster connection, or a manager configured by the
    /// caller), with the default prefix `mideng`.
    pub fn from_connection(connection: C) -> Self {
        Self {
            connection,
            prefix: DEFAULT_PREFIX.to_owned(),
            token_limits: TokenLimits::default(),
        }
    }

    /// The same store issuing tokens under `limits` instead of the default ones. Every
    /// instance on the server should use the same: each enforces its own against the tokens
    /// of all.
    pub fn with_token_limits(mut self, limits: TokenLimits) -> Self {
        self.token_limits = limits;
        self
    }

    /// The same store with every key under `prefix` instead, for several applications (or
    /// test runs) sharing one Redis. A prefix is 1 to 64 bytes of letters, digits and
    /// `_ . : -`; braces are refused because they would change the keys' hash tags.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, InvalidInput> {
        let allowed = prefix
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b':' | b'-'));
        if prefix.is_empty() || prefix.len() > SCOPE_PART_BYTES_MAX || !allowed {
            return Err(InvalidInput::Malformed {
                what: "Redis key prefix",
                max_bytes: SCOPE_PART_BYTES_MAX,
                alphabet: "letters, digits and _ . : -",
            });
        }
        self.prefix = prefix.to_owned();
        Ok(self)
    }

    /// The prefix of every key this store writes.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The connection the store sends on (a clone of it is a connection to the same server).
    pub fn connection(&self) -> &C {
        &self.connection
    }

    fn record_key(&self, scope: &Scope, key: &IdempotencyKey) -> String {
        let key = tag_part(key.as_str());
        format!(
            "{}:rec:{{{}|{}|{}}}",
            self.prefix,
            scope.tenant(),
            scope.operation(),
            key
        )
    }

    fn lock_key(&self, name: &Name) -> String {
        format!(
            "{}:lock:{{fs{}}}:{}",
            self.prefix,
            lock::fence_slot(name),
            tag_part(name.as_str())
        )
    }

    fn fence_key(&self, name: &Name) -> String {
        format!("{}:fence:{{fs{}}}", self.prefix, lock::fence_slot(name))
    }

    fn state_key(&self, kind: &str, id: &Name) -> String {
        format!(
            "{}:state:{{{}|{}}}",
            self.prefix,
            tag_part(kind),
            tag_part(id.as_str())
        )
    }

    /// Runs a prepared script on a clone of the connection (clones share one multiplexed
    /// connection; the clone only gives this call its own `&mut`).
    async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        invocation
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)
    }

    /// Runs one command.
    async fn query<T: FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        command
            .query_async(&mut connection)
            .await
            .map_err(store_error)
    }
}

/// Unreachable, timed-out, failing-over or loading servers are transient
/// ([`StoreError::Unavailable`]), and so is a redirect (`MOVED`, `ASK`) that redis-rs's
/// retries did not get past: a cluster still moving its slots after its nodes restarted
/// answers so for a moment. Anything else (a script error, a key of the wrong type) is
/// not.
fn store_error(error: RedisError) -> StoreError {
    let transient = error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::BusyLoading
                        | ServerErrorKind::ReadOnly
                )
        )
        // A long-running script blocks the server; the next call may well get through.
        || error.code() == Some("BUSY");
    if transient {
        StoreError::Unavailable(error.to_string())
    } else {
        StoreError::Backend(Box::new(error))
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// The bytes of a string reply, `None` for nil.
fn bytes_of(value: Value) -> Result<Option<Vec<u8>>, StoreError> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => Ok(Some(bytes)),
        Value::SimpleString(text) => Ok(Some(text.into_bytes())),
        _ => Err(corrupt("expected a string from Redis")),
    }
}

/// A string reply as UTF-8 text, `None` for nil.
fn text_of(value: Value) -> Result<Option<String>, StoreError> {
    bytes_of(value)?
        .map(|bytes| String::from_utf8(bytes).map_err(|_| corrupt("stored text is not UTF-8")))
        .transpose()
}

/// An integer reply, or a string holding one (hash fields come back as strings).
fn integer_of(value: Value) -> Result<Option<i64>, StoreError> {
    match value {
        Value::Int(number) => Ok(Some(number)),
        other => text_of(other)?
            .map(|text| {
                text.parse()
                    .map_err(|_| corrupt("stored number unreadable"))
            })
            .transpose(),
    }
}

fn required<T>(value: Option<T>, what: &str) -> Result<T, StoreError> {
    value.ok_or_else(|| StoreError::Corrupt(format!("record without {what}")))
}

fn non_negative(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what}")))
}

/// Rebuilds a stored response from the three hash fields, all present or all absent.
fn response_of(
    status: Value,
    headers: Value,
    body: Value,
) -> Result<Option<StoredResponse>, StoreError> {
    match (integer_of(status)?, text_of(headers)?, bytes_of(body)?) {
        (Some(status), Some(headers), Some(body)) => {
            StoredResponse::from_columns(status, &headers, body).map(Some)
        }
        (None, None, None) => Ok(None),
        _ => Err(corrupt("record with part of a response")),
    }
}

/// Turns the begin script's reply into a decision; `lease` builds the lease for a fence and
/// whether it took over.
fn decision_of(
    reply: Value,
    lease: impl FnOnce(u64, bool) -> Lease,
) -> Result<Decision, StoreError> {
    let Value::Array(items) = reply else {
        return Err(corrupt("begin script returned no array"));
    };
    let mut items = items.into_iter();
    let verdict = text_of(items.next().unwrap_or(Value::Nil))?;
    let mut next = || items.next().unwrap_or(Value::Nil);
    match verdict.as_deref() {
        Some("proceed") => {
            let fence = non_negative(required(integer_of(next())?, "a fence")?, "fence")?;
            let taken_over = required(integer_of(next())?, "a take-over flag")? != 0;
            Ok(Decision::Proceed(lease(fence, taken_over)))
        }
        Some("replay") => {
            let (status, headers, body) = (next(), next(), next());
            response_of(status, headers, body)?
                .map(Decision::Replay)
                .ok_or_else(|| corrupt("completed record without a response"))
        }
        Some("inflight") => {
            let retry_after_ms = required(integer_of(next())?, "a lease end")?;
            Ok(Decision::InFlight {
                retry_after: retry_after(retry_after_ms),
            })
        }
        Some("mismatch") => Ok(Decision::Mismatch),
        Some("corrupt") => Err(StoreError::Corrupt(
            text_of(next())?.unwrap_or_else(|| "record unreadable".to_owned()),
        )),
        _ => Err(corrupt("begin script returned an unknown verdict")),
    }
}

/// The hash fields `find_record` reads, in the order it decodes them.
const RECORD_FIELDS: [&str; 10] = [
    "fingerprint",
    "state",
    "fence",
    "owner",
    "lease_until",
    "status",
    "headers",
    "body",
    "created_at",
    "expires_at",
];

fn record_of(
    fields: Vec<Value>,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Option<Record>, StoreError> {
    // HMGET answers nil for every field of a missing key.
    if fields.iter().all(|field| matches!(field, Value::Nil)) {
        return Ok(None);
    }
    let [
        fingerprint,
        state,
        fence,
        owner,
        lease_until,
        status,
        headers,
        body,
        created_at,
        expires_at,
    ]: [Value; 10] = fields
        .try_into()
        .map_err(|_| corrupt("HMGET returned the wrong number of fields"))?;
    let fingerprint = Fingerprint::from_hex(&required(text_of(fingerprint)?, "a fingerprint")?)
        .map_err(|_| corrupt("stored fingerprint is not 64 hexadecimal digits"))?;
    let state_text = required(text_of(state)?, "a state")?;
    let state = RecordState::parse(&state_text).ok_or_else(|| corrupt("unknown record state"))?;
    Ok(Some(Record {
        scope: scope.clone(),
        key: key.clone(),
        fingerprint,
        state,
        fence: non_negative(required(integer_of(fence)?, "a fence")?, "fence")?,
        owner: required(text_of(owner)?, "an owner")?,
        lease_until_ms: required(integer_of(lease_until)?, "a lease end")?,
        response: response_of(status, headers, body)?,
        created_at_ms: required(integer_of(created_at)?, "a creation time")?,
        expires_at_ms: required(integer_of(expires_at)?, "an expiry")?,
    }))
}

/// The ownership arguments shared by `complete` and `abandon`.
fn lease_invocation<'a>(
    script: &'a Script,
    record_key: &str,
    lease: &Lease,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(record_key)
        .arg(lease.owner.as_str())
        .arg(lease.fence.to_string());
    invocation
}

#[async_trait]
impl<C> RecordStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_BEGIN);
        let now = now_ms();
        let owner = new_owner();
        let lease_until_ms = now.saturating_add(policy.lease_ms());
        let expires_at_ms = now.saturating_add(policy.retention_ms());
        let mut invocation = BEGIN_SCRIPT.prepare_invoke();
        invocation
            .key(self.record_key(scope, key))
            .arg(now)
            .arg(fingerprint.to_hex())
            .arg(owner.as_str())
            .arg(lease_until_ms)
            .arg(expires_at_ms);
        let reply: Value = self.invoke(&invocation).await?;
        decision_of(reply, |fence, taken_over| Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence,
            owner,
            lease_until_ms,
            retention_ms: policy.retention_ms(),
            taken_over,
        })
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_COMPLETE);
        response.validate()?;
        let expires_at_ms = now_ms().saturating_add(lease.retention_ms);
        let record_key = self.record_key(&lease.scope, &lease.key);
        let mut invocation = lease_invocation(&COMPLETE_SCRIPT, &record_key, lease);
        invocation
            .arg(i64::from(response.status))
            .arg(response.headers_json())
            .arg(response.body.as_slice())
            .arg(expires_at_ms);
        let written: i64 = self.invoke(&invocation).await?;
        if written == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_ABANDON);
        let record_key = self.record_key(&lease.scope, &lease.key);
        let invocation = lease_invocation(&ABANDON_SCRIPT, &record_key, lease);
        let written: i64 = self.invoke(&invocation).await?;
        if written == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::RECORD_FIND);
        let mut command = redis::cmd("HMGET");
        command
            .arg(self.record_key(scope, key))
            .arg(&RECORD_FIELDS[..]);
        let fields: Vec<Value> = self.query(&command).await?;
        record_of(fields, scope, key)
    }

    /// Always 0: records carry `PEXPIREAT` at their expiry, and Redis deletes them itself.
    async fn purge_expired(&self, _now_ms: i64, _limit: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[async_trait]
impl<C> LockStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_ACQUIRE);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let held_until_ms = now_ms().saturating_add(ttl_ms);
        let owner = new_owner();
        let mut invocation = ACQUIRE_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(name))
            .key(self.fence_key(name))
            .arg(owner.as_str())
            .arg(ttl_ms);
        let fence: String = self.invoke(&invocation).await?;
        let fence: u64 = fence
            .parse()
            .map_err(|_| corrupt("a lock's fence is not a number"))?;
        if fence == 0 {
            return Ok(None);
        }
        Ok(Some(LockGuard {
            name: name.clone(),
            owner,
            fence,
            held_until_ms,
        }))
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_RELEASE);
        let mut invocation = RELEASE_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(&guard.name))
            .arg(guard.owner.as_str());
        let released: i64 = self.invoke(&invocation).await?;
        Ok(released == 1)
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::LOCK_RENEW);
        let ttl_ms = lock::ttl_ms(ttl)?;
        let mut invocation = RENEW_SCRIPT.prepare_invoke();
        invocation
            .key(self.lock_key(&guard.name))
            .arg(guard.owner.as_str())
            .arg(ttl_ms);
        let renewed: i64 = self.invoke(&invocation).await?;
        Ok(renewed == 1)
    }
}

#[async_trait]
impl<C> StateStore for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn create_entity(
        &self,
        kind: &str,
        id: &Name,
        initial: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_CREATE);
        let mut invocation = CREATE_ENTITY_SCRIPT.prepare_invoke();
        invocation.key(self.state_key(kind, id)).arg(initial);
        let created: i64 = self.invoke(&invocation).await?;
        Ok(created == 1)
    }

    async fn find_state(&self, kind: &str, id: &Name) -> Result<Option<(String, u64)>, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_FIND);
        let mut command = redis::cmd("HMGET");
        command
            .arg(self.state_key(kind, id))
            .arg("state")
            .arg("version");
        let fields: Vec<Value> = self.query(&command).await?;
        let [state, version]: [Value; 2] = fields
            .try_into()
            .map_err(|_| corrupt("HMGET returned the wrong number of fields"))?;
        match (text_of(state)?, integer_of(version)?) {
            (Some(state), Some(version)) => Ok(Some((state, non_negative(version, "version")?))),
            (None, None) => Ok(None),
            _ => Err(corrupt(
                "entity with a state but no version, or the reverse",
            )),
        }
    }

    async fn compare_and_set(
        &self,
        kind: &str,
        id: &Name,
        from: &str,
        to: &str,
    ) -> Result<bool, StoreError> {
        let _timer = StoreTimer::start(Backend::Redis, op::STATE_TRANSITION);
        let mut invocation = COMPARE_AND_SET_SCRIPT.prepare_invoke();
        invocation.key(self.state_key(kind, id)).arg(from).arg(to);
        let moved: i64 = self.invoke(&invocation).await?;
        Ok(moved == 1)
    }
}

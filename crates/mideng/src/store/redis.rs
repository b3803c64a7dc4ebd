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
mod locks;
mod records;
mod states;
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

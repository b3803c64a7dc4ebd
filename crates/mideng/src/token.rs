//! One-time submit tokens: the entry layer.
//!
//! The server issues a token when it renders a form (a checkout page); the submission carries
//! it back, and the token is consumed atomically before any work starts. A second submission
//! with the same token finds it consumed: a double click stopped at the door. Consumption is a
//! single atomic step in every store (a conditional update, or one Lua script), never a read
//! followed by a delete, which would let two concurrent submissions both pass.
//!
//! Issuing is bounded: a store holds at most [`TokenLimits::per_scope_max`] unspent, unexpired
//! tokens per scope and [`TokenLimits::total_max`] in all, and refuses another with
//! [`IssueError::Full`] and the time within which one frees up. Otherwise anyone who may call
//! the issuing route could make the store hold tokens without bound (each lives until it
//! expires). The count and the insert are one step in every store, as consumption is: among
//! any number of concurrent issuers the limits hold.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

use crate::error::{InvalidInput, StoreError};
use crate::key::{IdempotencyKey, Scope, redact};
use crate::limits::{
    NAME_BYTES_MAX, TOKEN_TTL_MS_MAX, TOKENS_PER_SCOPE_MAX, TOKENS_TOTAL_CEILING, TOKENS_TOTAL_MAX,
};

/// A token as issued or presented: 1 to 255 bytes of visible ASCII (issued ones are 64 hex
/// digits). Redacted in `Debug`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// Validates a token presented by a client.
    pub fn parse(text: &str) -> Result<Self, InvalidInput> {
        crate::key::Name::parse(text)
            .map(|name| Self(name.as_str().to_owned()))
            .map_err(|_| InvalidInput::Malformed {
                what: "token",
                max_bytes: NAME_BYTES_MAX,
                alphabet: "visible ASCII",
            })
    }

    /// A fresh random token: 256 bits in hex.
    pub(crate) fn generate() -> Self {
        let mut bytes = [0_u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random number generator is available");
        Self(hex::encode(bytes))
    }

    /// The token text, to hand to the client.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Token({})", redact(&self.0))
    }
}

/// A token and when it stops being accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    /// The token.
    pub token: Token,
    /// Expiry, Unix ms.
    pub expires_at_ms: i64,
}

/// What consuming a token found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumption {
    /// This call consumed it: proceed.
    Consumed,
    /// It was consumed before by a request with the same idempotency key: the same submission
    /// again (a retry of an attempt that failed, timed out or lost its lease), which proceeds.
    /// A token stays bound to the key that consumed it for as long as the token would have
    /// lived.
    SameKey,
    /// It was consumed before, without a key or under another one: a duplicate submission.
    AlreadyConsumed,
    /// Never issued in this scope, or expired.
    Unknown,
}

impl Consumption {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Consumption::Consumed => "consumed",
            Consumption::SameKey => "same_key",
            Consumption::AlreadyConsumed => "already_consumed",
            Consumption::Unknown => "unknown",
        }
    }
}

/// How many unspent, unexpired tokens a store holds at once: per scope, and in all. A spent
/// token no longer counts (it is kept only to tell a duplicate from a forgery), nor does an
/// expired one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenLimits {
    per_scope_max: u32,
    total_max: u32,
}

impl TokenLimits {
    /// At most `per_scope_max` unspent tokens per scope and `total_max` in all: `1 <=
    /// per_scope_max <= total_max <=` [`TOKENS_TOTAL_CEILING`].
    pub fn new(per_scope_max: u32, total_max: u32) -> Result<Self, InvalidInput> {
        if !(1..=TOKENS_TOTAL_CEILING).contains(&total_max) {
            return Err(InvalidInput::CountOutOfRange {
                what: "tokens held in all",
                min: 1,
                max: u64::from(TOKENS_TOTAL_CEILING),
            });
        }
        if !(1..=total_max).contains(&per_scope_max) {
            return Err(InvalidInput::CountOutOfRange {
                what: "tokens held per scope",
                min: 1,
                max: u64::from(total_max),
            });
        }
        Ok(Self {
            per_scope_max,
            total_max,
        })
    }

    /// Unspent tokens one scope may hold.
    pub fn per_scope_max(self) -> u32 {
        self.per_scope_max
    }

    /// Unspent tokens the store may hold, all scopes together.
    pub fn total_max(self) -> u32 {
        self.total_max
    }
}

/// [`TOKENS_PER_SCOPE_MAX`] per scope and [`TOKENS_TOTAL_MAX`] in all (see there why).
impl Default for TokenLimits {
    fn default() -> Self {
        Self {
            per_scope_max: TOKENS_PER_SCOPE_MAX,
            total_max: TOKENS_TOTAL_MAX,
        }
    }
}

/// Which limit refused a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenCap {
    /// The scope holds [`TokenLimits::per_scope_max`] unspent tokens.
    Scope,
    /// The store holds [`TokenLimits::total_max`] unspent tokens.
    Total,
}

impl TokenCap {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            TokenCap::Scope => "scope",
            TokenCap::Total => "total",
        }
    }
}

/// Why no token was issued.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IssueError {
    /// A limit is reached; nothing was issued. When both are, which one is reported depends on
    /// the store.
    #[error("the {} limit of unspent tokens is reached; one frees up within {retry_after:?}", cap.label())]
    Full {
        /// The limit that refused it.
        cap: TokenCap,
        /// Until the earliest unspent token under that limit expires: a place is free by then
        /// at the latest (sooner if a token is spent). At least 1 ms.
        retry_after: Duration,
    },
    /// The store failed, or the input was refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<InvalidInput> for IssueError {
    fn from(invalid: InvalidInput) -> Self {
        IssueError::Store(StoreError::Invalid(invalid))
    }
}

/// The refusal for `cap` when the earliest unspent token under it expires at
/// `earliest_expiry_ms` (or is not known: then a second).
pub(crate) fn full(cap: TokenCap, earliest_expiry_ms: Option<i64>, now_ms: i64) -> IssueError {
    let wait_ms = earliest_expiry_ms.map_or(1_000, |expiry| expiry.saturating_sub(now_ms).max(1));
    IssueError::Full {
        cap,
        retry_after: Duration::from_millis(u64::try_from(wait_ms).unwrap_or(1)),
    }
}

/// Checks a token lifetime against its bounds and returns it in milliseconds.
pub(crate) fn ttl_ms(ttl: Duration) -> Result<i64, InvalidInput> {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if !(1..=TOKEN_TTL_MS_MAX).contains(&ttl_ms) {
        return Err(InvalidInput::OutOfRange {
            what: "token lifetime",
            min_ms: 1,
            max_ms: TOKEN_TTL_MS_MAX,
        });
    }
    Ok(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

/// Storage of one-time tokens.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Issues a new token valid in `scope` for `ttl` (at most a day), unless `scope` holds the
    /// store's [`TokenLimits::per_scope_max`] unspent, unexpired tokens, or the store its
    /// [`TokenLimits::total_max`]: then [`IssueError::Full`], and nothing is issued. Among any
    /// number of concurrent callers the limits hold.
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, IssueError>;

    /// Consumes `token` in `scope` for a request without an idempotency key: exactly one of
    /// any number of concurrent callers gets [`Consumption::Consumed`], and the token is bound
    /// to no key (every later use is [`Consumption::AlreadyConsumed`]).
    async fn consume_token(&self, scope: &Scope, token: &Token) -> Result<Consumption, StoreError> {
        self.consume_token_for(scope, token, None).await
    }

    /// Consumes `token` in `scope` on behalf of the request with idempotency key `key`:
    /// exactly one of any number of concurrent callers gets [`Consumption::Consumed`], and the
    /// token is bound to `key` in the same step. A later call with the same `key` gets
    /// [`Consumption::SameKey`] (the same submission, retried), one with another key or none
    /// [`Consumption::AlreadyConsumed`].
    async fn consume_token_for(
        &self,
        scope: &Scope,
        token: &Token,
        key: Option<&IdempotencyKey>,
    ) -> Result<Consumption, StoreError>;

    /// Deletes at most `limit` tokens that expired before `now_ms`; returns how many.
    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError>;
}

//! One-time submit tokens: the entry layer.
//!
//! The server issues a token when it renders a form (a checkout page); the submission carries
//! it back, and the token is consumed atomically before any work starts. A second submission
//! with the same token finds it consumed: a double click stopped at the door. Consumption is a
//! single atomic step in every store (a conditional update, or one Lua script), never a read
//! followed by a delete, which would let two concurrent submissions both pass.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{InvalidInput, StoreError};
use crate::key::{Scope, redact};
use crate::limits::{NAME_BYTES_MAX, TOKEN_TTL_MS_MAX};

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
    /// It was consumed before: a duplicate submission.
    AlreadyConsumed,
    /// Never issued in this scope, or expired.
    Unknown,
}

impl Consumption {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Consumption::Consumed => "consumed",
            Consumption::AlreadyConsumed => "already_consumed",
            Consumption::Unknown => "unknown",
        }
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
    /// Issues a new token valid in `scope` for `ttl` (at most a day).
    async fn issue_token(&self, scope: &Scope, ttl: Duration) -> Result<IssuedToken, StoreError>;

    /// Consumes `token` in `scope`: exactly one of any number of concurrent callers gets
    /// [`Consumption::Consumed`].
    async fn consume_token(&self, scope: &Scope, token: &Token) -> Result<Consumption, StoreError>;

    /// Deletes at most `limit` tokens that expired before `now_ms`; returns how many.
    async fn purge_expired_tokens(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError>;
}

//! Every bound the toolkit enforces, in one place.
//!
//! A limit that is not written down is a limit that is discovered in production. Each constant
//! names its unit last (`_ms`, `_bytes`) and says why it has the value it has.

/// Longest idempotency key accepted, in bytes (the IETF draft and Stripe both stop at 255).
pub const KEY_BYTES_MAX: usize = 255;

/// Longest tenant or operation name, in bytes. Scopes are identifiers, not free text.
pub const SCOPE_PART_BYTES_MAX: usize = 64;

/// Longest lock name, dedup key, state-machine entity id or token, in bytes.
pub const NAME_BYTES_MAX: usize = 255;

/// Largest stored response body. Replays are served from the store, so a record must stay a
/// small row; APIs that answer with megabytes should store a reference instead.
pub const RESPONSE_BODY_BYTES_MAX: usize = 1024 * 1024;

/// Most response headers kept for replay; only headers chosen for replay are stored at all.
pub const RESPONSE_HEADERS_MAX: usize = 32;

/// Longest stored header name plus value, in bytes.
pub const RESPONSE_HEADER_BYTES_MAX: usize = 8 * 1024;

/// Shortest lease. Anything shorter expires before a database round trip completes.
pub const LEASE_MS_MIN: u64 = 10;

/// Longest lease. A key held for longer than a day is a stuck key, not a slow request.
pub const LEASE_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Longest retention of a record (a little over a year, beyond any refund window we know of).
pub const RETENTION_MS_MAX: u64 = 400 * 24 * 60 * 60 * 1000;

/// Longest life of a one-time token: a checkout page left open for a day is a new checkout.
pub const TOKEN_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Unspent, unexpired one-time tokens one scope may hold at once unless the store is told
/// otherwise ([`crate::token::TokenLimits`]). A checkout page asks for one token when it opens,
/// so this is a thousand pages open and not yet submitted in one tenant's operation: far above
/// what a merchant's buyers do within a token's life, and a ceiling on what one tenant calling
/// the issuing route in a loop can make a store hold (in memory, about 300 bytes a token).
pub const TOKENS_PER_SCOPE_MAX: u32 = 1_000;

/// Unspent, unexpired one-time tokens a store holds at once, all scopes together, unless told
/// otherwise: a hundred scopes at their own limit, and about 30 MB in the memory store, which
/// also keeps no more tokens than this, spent ones included (it forgets spent ones first).
pub const TOKENS_TOTAL_MAX: u32 = 100_000;

/// Largest total a store may be configured to hold ([`crate::token::TokenLimits::new`]): a
/// hundred times the default, about 3 GB in the memory store.
pub const TOKENS_TOTAL_CEILING: u32 = 10_000_000;

/// Longest time `acquire` may wait for a lock. Callers wait briefly and re-check state; they
/// never queue for minutes.
pub const LOCK_WAIT_MS_MAX: u64 = 60 * 1000;

/// Most rows one purge batch deletes, so a purge never holds a long transaction.
pub const PURGE_BATCH_ROWS_MAX: u32 = 10_000;

/// Most attempts at one store operation that keeps failing with a transient conflict
/// (deadlock, serialization failure, busy database) before the conflict is reported.
pub const CONFLICT_RETRIES_MAX: u32 = 16;

/// Most outbox rows one relay round claims (and in-database queue messages one poll claims).
pub const OUTBOX_BATCH_MAX: u32 = 1000;

/// Largest event payload the outbox accepts: events carry ids and amounts, not documents.
pub const OUTBOX_PAYLOAD_BYTES_MAX: usize = 64 * 1024;

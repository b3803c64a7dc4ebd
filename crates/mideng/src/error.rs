//! Errors of the toolkit: invalid input (a caller's mistake) and store failures.

use thiserror::Error;

/// Input that the toolkit refuses before touching any store.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// A text value is empty, too long or has characters outside its alphabet.
    #[error("{what} must be 1 to {max_bytes} bytes of {alphabet}")]
    Malformed {
        /// Which value (for example "idempotency key").
        what: &'static str,
        /// Its byte limit.
        max_bytes: usize,
        /// The characters it may contain.
        alphabet: &'static str,
    },
    /// A duration lies outside its bounds.
    #[error("{what} must be between {min_ms} ms and {max_ms} ms")]
    OutOfRange {
        /// Which duration.
        what: &'static str,
        /// Lower bound, inclusive.
        min_ms: u64,
        /// Upper bound, inclusive.
        max_ms: u64,
    },
    /// A size lies outside its bounds.
    #[error("{what} must be between {min_bytes} and {max_bytes} bytes")]
    SizeOutOfRange {
        /// Which size.
        what: &'static str,
        /// Lower bound, inclusive.
        min_bytes: usize,
        /// Upper bound, inclusive.
        max_bytes: usize,
    },
    /// A count lies outside its bounds.
    #[error("{what} must be between {min} and {max}")]
    CountOutOfRange {
        /// Which count.
        what: &'static str,
        /// Lower bound, inclusive.
        min: u64,
        /// Upper bound, inclusive.
        max: u64,
    },
    /// A response is too large to store for replay.
    #[error("response too large to store: {0}")]
    ResponseTooLarge(&'static str),
    /// A fingerprint is not 64 hexadecimal digits.
    #[error("a fingerprint is 64 hexadecimal digits")]
    Fingerprint,
    /// A state-machine transition is not in the declared table.
    #[error("transition {from} -> {to} is not allowed")]
    IllegalTransition {
        /// Current state.
        from: &'static str,
        /// Requested state.
        to: &'static str,
    },
    /// Two settings that cannot be used together.
    #[error("{what} cannot be combined")]
    Conflicting {
        /// Which settings.
        what: &'static str,
    },
}

/// A store operation that did not complete.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The input was refused before the store was asked.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The lease (or claim) is no longer the current owner of its record: it expired and was
    /// taken over, was abandoned, or the record was purged. Nothing was written.
    #[error("the lease is no longer current: another owner took over or the record is gone")]
    StaleLease,
    /// A write carried a lock's fence lower than one the guarded data has already seen: its
    /// holder's lock ran out and was taken over, and the next holder has written. Nothing was
    /// written; the holder should stop (another holder is doing the work).
    #[error("fence {fence} is stale: a later holder of the lock has written")]
    StaleFence {
        /// The fence the refused write carried.
        fence: u64,
    },
    /// The store cannot be reached (connection refused, pool exhausted, timed out).
    /// Callers may degrade or answer 503; nothing is known to have been written.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store kept reporting transient conflicts (deadlocks, serialization failures, a busy
    /// database) after [`crate::limits::CONFLICT_RETRIES_MAX`] attempts. Safe to retry.
    #[error("store conflict persisted after retries: {0}")]
    Conflict(String),
    /// The store holds data that breaks an invariant of the toolkit (a bug or manual edit).
    #[error("store data breaks an invariant: {0}")]
    Corrupt(String),
    /// A transaction's COMMIT was sent and no answer came back (the connection broke after
    /// it): the transaction may have committed or not. Not transient — the same call retried
    /// unchanged could apply its effect twice. Ask again under the request's idempotency key
    /// (whose record committed with the effect, or not at all) or read what is there.
    #[error("commit outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// Any other failure of the store, with its source.
    #[error("store failure: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// True when the same call may succeed if retried later unchanged.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Conflict(_))
    }
}

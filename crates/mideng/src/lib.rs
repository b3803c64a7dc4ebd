//! # mideng — exactly-once effects for money-moving APIs
//!
//! Duplicates are normal in payments: double clicks, client retries after timeouts, gateways
//! resending to another node, channel callbacks resent for a day, queues redelivering. This
//! crate holds every mechanism that turns "arrived N times" into "took effect once", each as a
//! small contract with one implementation per store, all held to one conformance suite.
//!
//! ## Components, from the outside in
//!
//! - [`token`] — one-time submit tokens, consumed atomically before any work (entry layer).
//! - [`key`] — what identifies a request: [`key::Scope`] (tenant + operation),
//!   [`key::IdempotencyKey`], and the request's [`key::Fingerprint`] (SHA-256 of a canonical
//!   request).
//! - [`record`] — idempotency records: [`record::RecordStore::begin`] answers
//!   [`record::Decision`] `Proceed` (with a fenced lease) / `Replay` / `InFlight` / `Mismatch`;
//!   `complete` stores the response, `abandon` frees the key. The decision rule is the pure
//!   [`record::judge`].
//! - [`lock`] — distributed locks with owner-checked release and fencing tokens.
//! - [`dedup`] — the dedup table for consumers of at-least-once deliveries, built on records.
//! - [`state`] — state machines whose transitions are compare-and-set updates.
//! - `constraint` (with a SQL store) — partial unique constraints ("one PENDING payment per
//!   order") written for each SQL dialect: the database, not application code, is the last
//!   word on duplicates.
//! - [`outbox`] — the transactional outbox, its relay, and the broker port with the
//!   in-database queue, RabbitMQ and NATS JetStream adapters.
//! - [`store`] — the adapters: memory, SQLite, PostgreSQL, MySQL/MariaDB, Redis.
//! - [`redact`] — connection URLs shown without their passwords, for logs and errors.
//! - [`latency`] — every store and broker operation timed into the histogram
//!   `mideng_store_duration_seconds{backend, op}`.
//! - `http` (feature `axum`) — the tower/axum layer with the IETF `Idempotency-Key` semantics.
//!
//! ## How data flows
//!
//! A request arrives → (optionally) its token is consumed → `begin` on its scope + key decides
//! → on `Proceed` the caller does the work (with a lock and CAS transitions where several
//! instances may touch one entity), then `complete`s the record with its response, in the same
//! SQL transaction as the work where possible (`begin_in` / `complete_in`) → any later arrival
//! with that key gets the stored response. A crash leaves an in-progress record whose lease
//! expires; the next arrival takes it over with a higher fence, and the crashed owner, should it
//! wake up, can no longer complete.
//!
//! Every bound lives in [`limits`]; times are Unix milliseconds ([`clock`]).

#![deny(missing_docs)]

pub mod clock;
#[cfg(feature = "_sql")]
pub mod constraint;
pub mod dedup;
pub mod error;
#[cfg(feature = "axum")]
pub mod http;
pub mod key;
pub mod latency;
pub mod limits;
pub mod lock;
pub mod metrics;
pub mod outbox;
pub mod record;
pub mod redact;
pub mod state;
pub mod store;
pub mod token;

/// The README's examples, compiled and run as doctests so that they cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

/// The examples of the toolkit's guide (`docs/toolkit.md`), compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/toolkit.md")]
struct ToolkitGuideExamples;

/// The examples of the HTTP layer's guide (`docs/http-layer.md`), compiled and run.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/http-layer.md")]
struct HttpLayerGuideExamples;

/// The channel configuration example of `docs/channels.md`, compiled.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/channels.md")]
struct ChannelGuideExamples;

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeExamples;

/// The sqlx version the SQL stores are built with, for running your own queries in the same
/// transactions.
#[cfg(feature = "_sql")]
pub use sqlx;

pub use error::{InvalidInput, StoreError};
pub use key::{Fingerprint, IdempotencyKey, Name, Scope};
pub use record::{Decision, Lease, Record, RecordPolicy, RecordState, RecordStore, StoredResponse};

//! The SQL stores: one engine, three dialects, every contract written once.
//!
//! The logic of every contract is generic over a [`Dialect`], which supplies the driver, the
//! statement that opens a write transaction and the classification of driver errors. Each
//! dialect implements the small [`SqlConn`] port (run a statement, fetch rows) for its sqlx
//! connection type, so callers' own transactions (`&mut PgConnection`, …) plug into the
//! transactional forms [`SqlStore::begin_in`] and [`SqlStore::complete_in`].
//!
//! | file | mechanism | invariant it keeps |
//! |---|---|---|
//! | `engine.rs` | the port ([`SqlConn`], [`SqlRow`], [`Arg`]), [`Dialect`], [`SqlDialect`], [`SqlStore`], [`SqlStore::write`], [`back_off`], [`store_error`] | write transactions open the dialect's way; transient conflicts are retried whole, at most [`crate::limits::CONFLICT_RETRIES_MAX`] times, never inside a caller's transaction; driver errors become [`crate::StoreError`] variants |
//! | `once.rs` | [`SqlStore::write_once`], [`Claim`], [`Once`]: a request's record, its effect and its answer in one transaction | the effect commits if and only if its answer is stored with the key's record |
//! | `statements.rs` | [`PerDialect`] and [`dialect_sql!`](crate::dialect_sql), the one way to write a statement per dialect | parameters are numbered in order and each is used once, so one argument list serves every dialect |
//! | `record.rs` | [`crate::record::RecordStore`], `begin_in`, `complete_in`, [`FirstClaim`] and `postgres_claim_cte!` (a record claimed by the caller's own statement), `postgres_unrecorded_cte!` and `insert_completed_in` (a record written once, completed, after the caller's act), `postgres_recorded_cte!` with [`crate::record::AnswerTemplate`] (the record written by the act's own statement) | one row per key; the inserter is told by its owner nonce; a take-over raises the fence; only the current lease completes |
//! | `token.rs` | [`crate::token::TokenStore`] | one conditional update consumes a token, once; an issue counts and inserts under one locked row, so the [`crate::token::TokenLimits`] hold |
//! | `lock.rs` | [`crate::lock::LockStore`] | fences only grow; only the owner releases or renews |
//! | `state.rs` | [`crate::state::StateStore`] | a transition is one compare-and-set |
//! | `migrate.rs` | [`versioned_migrator`], [`PoolSettings`] | the toolkit's migration history never mixes with an application's |
//! | `postgres.rs`, `mysql.rs`, `sqlite.rs` | the dialects: connection, error codes, migrations | each dialect's locking and busy behaviour (see each file) |

mod engine;
mod lock;
mod migrate;
mod once;
mod record;
mod state;
mod statements;
mod token;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use engine::{
    Arg, BoxFuture, Dialect, Failure, SqlConn, SqlDialect, SqlRow, SqlStore, autocommit_error,
    back_off, is_unique_violation, store_error,
};
pub use migrate::{PoolSettings, versioned_migrator};
pub use once::{Claim, Once};
pub use record::{FirstClaim, RecordedRow};
pub use statements::PerDialect;

pub(crate) use engine::{classify_transport, decode_text, sql_port, timer};
pub(crate) use migrate::migrator;

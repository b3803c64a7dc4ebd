//! Adapters: every contract of the core on a concrete store, each behind a cargo feature.
//!
//! | store | records | tokens | locks | states | dedup |
//! |---|---|---|---|---|---|
//! | memory | yes | yes | yes | yes | via records |
//! | SQLite, PostgreSQL, MySQL/MariaDB | yes, plus `begin_in`/`complete_in` | yes | yes | yes | via records |
//! | Redis | yes | yes | yes | yes | via records |
//!
//! [`cached`] (feature `replay-cache`) sits in front of any record store and answers replays of
//! completed records from memory.

#[cfg(feature = "replay-cache")]
pub mod cached;
#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "_sql")]
pub mod sql;

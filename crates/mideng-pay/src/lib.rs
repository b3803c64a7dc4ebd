//! # mideng-pay — the payment service
//!
//! The system the seed documents describe, built on the `mideng` toolkit: orders, payment
//! attempts through Alipay- and WeChat-Pay-style channels, channel callbacks, a wallet and
//! entitlement grants, behind the v1 API of `docs/design.md` §5.
//!
//! Layers, pure rules first:
//!
//! - [`domain`] — the rules, without I/O: money, identifiers, the order and payment state
//!   machines, wallet arithmetic, payment numbers.
//! - [`db`] — the schema per SQL dialect, holding the invariants a database can hold, and the
//!   statements written once over the toolkit's SQL port.
//! - [`store`] — each operation of the service as one local transaction ([`store::PayStore`]).
//! - [`api`] — the v1 HTTP API, with the toolkit's idempotency layer on its routes.
//! - [`workers`] — what runs beside the API: the outbox relay, the entitlement consumer,
//!   reconciliation with the channels (what callbacks missed) and the retention purge.
//! - [`app`] — [`app::Application`]: connect, migrate, provision, serve (with the workers).
//! - [`transport`] — the HTTP/1 server under the API and the metrics listener: deadlines for
//!   heads and bodies, bounded heads, a cap on connections, graceful shutdown.
//! - [`config`] — `mideng.toml` and `MIDENG__*` settings for `mideng serve`.

pub mod api;
pub mod app;
pub mod config;
pub mod db;
pub mod domain;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
pub mod workers;

pub use app::{Application, BuildError, Settings, TenantSeed};

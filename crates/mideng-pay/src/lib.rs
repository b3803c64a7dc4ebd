//! # mideng-pay — the payment service
//!
//! The system the seed documents describe, built on the `mideng` toolkit: orders, payment
//! attempts through Alipay- and WeChat-Pay-style channels, channel callbacks, a wallet and
//! entitlement grants, behind the v1 API (`docs/api.md`).
//!
//! Layers, pure rules first:
//!
//! - [`domain`] — the rules, without I/O: money, identifiers, the order and payment state
//!   machines, wallet arithmetic, payment numbers.
//! - [`store`] — storage, one small port per aggregate next to its statements, each method one
//!   local transaction; the schema per SQL dialect holds the invariants a database can hold.
//! - [`flows`] — the use cases as a request travels (payment: create, close, settle; notify;
//!   wallet: credit, deduct; orders), plain functions over small ports that return a domain
//!   outcome.
//! - [`api`] — the v1 HTTP API: parse, flow, render, with the toolkit's idempotency layer on
//!   its routes.
//! - [`web`] — the pages people look at: the demo checkout at `/` and the operator console
//!   at `/console`, with the in-process journal of decisions the console shows.
//! - [`workers`] — what runs beside the API, calling the same flows: the outbox relay, the
//!   entitlement consumer, reconciliation with the channels (what callbacks missed) and the
//!   retention purge.
//! - [`limits`] — every bound of the service and why.
//! - [`state`] — [`state::AppState`], what every handler and page shares.
//! - [`app`] — [`app::Application`]: connect, migrate, provision, route (the API and the
//!   pages under one boundary), serve (with the workers).
//! - [`telemetry`] — traces over OTLP when configured: the exporter, `traceparent` in and
//!   out, `traceresponse` on every answer.
//! - [`tokens`] — one-time tokens in two stores, the merchant's server's and the checkout
//!   pages', so that no visitor exhausts what the server needs.
//! - [`transport`] — the HTTP/1 server under the API and the metrics listener: deadlines for
//!   heads and bodies, bounded heads, a cap on connections, graceful shutdown.
//! - [`config`] — `mideng.toml` and `MIDENG__*` settings for `mideng serve`, and the channel
//!   adapters they build.
//! - `testing` (feature `testing`) — the one deployment builder (simulator, instances,
//!   database) and TCP proxy, shared by the service's tests, the storm and the bench.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod flows;
pub mod limits;
pub mod metrics;
pub mod state;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tokens;
pub mod transport;
pub mod web;
pub mod workers;

pub use app::{Application, BuildError, Settings, TenantSeed};

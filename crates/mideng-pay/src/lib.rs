//! # mideng-pay — the payment service
//!
//! The system the seed documents describe, built on the `mideng` toolkit: orders, payment
//! attempts through Alipay- and WeChat-Pay-style channels, channel callbacks, a wallet and
//! entitlement grants, behind the v1 API of `docs/design.md` §5.
//!
//! This crate grows in layers, pure rules first:
//!
//! - [`domain`] — the rules, without I/O: money, identifiers, the order and payment state
//!   machines, wallet arithmetic, payment numbers.
//! - [`db`] — the schema per SQL dialect, holding the invariants a database can hold.

pub mod db;
pub mod domain;

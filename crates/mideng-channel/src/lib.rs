//! # mideng-channel — the payment channels' protocols
//!
//! What the service and the channel simulator must agree on, and nothing else: how Alipay
//! (open platform, RSA2) and WeChat Pay API v3 sign, verify and encode their messages, and how
//! amounts convert exactly. The rules follow the channels' public documentation; the tests
//! check them against vectors computed independently with openssl, so that the service and
//! the simulator cannot agree on a wrong scheme.
//!
//! - [`kind`] — [`ChannelKind`], the one name of a channel (`alipay`, `wechat`) that the
//!   adapters, the simulator and the payment service share.
//! - [`money`] — fen ↔ yuan strings, exact, no floats.
//! - [`keys`] — RSA keys, SHA256withRSA signatures, AES-256-GCM.
//! - [`alipay`] — sign content, response-node extraction over the raw text, notify rules.
//! - [`wechat`] — request and notify signature messages, the `Authorization` header,
//!   notification resources.
//! - [`platform_keys`] — the WeChat Pay platform keys trusted by serial, and the rules that
//!   admit a downloaded `/v3/certificates` list into them.
//! - [`bill`] — the channels' daily bills (Alipay's zipped GBK CSV, WeChat Pay's trade bill), read
//!   exactly and checked against their own summaries.
//! - [`strict`] — forms and JSON parsed once, refusing a repeated name: every message is
//!   verified over, and read from, the same value.
//! - [`adapter`] — the [`adapter::Channel`] trait the service calls, with the Alipay and
//!   WeChat Pay implementations: they sign requests, verify responses over the raw text, turn
//!   timeouts and channel errors into an explicit "outcome unknown", and verify notifies.

pub mod adapter;
pub mod alipay;
pub mod bill;
pub mod keys;
pub mod kind;
pub mod money;
pub mod platform_keys;
pub mod strict;
pub mod wechat;

pub use kind::{ChannelKind, UnknownChannel};

//! # mideng-sim — an Alipay-like and a WeChat-Pay-like gateway for tests and the storm
//!
//! The payment service talks to its channels only over HTTP; this crate is a channel on the
//! other end of that HTTP, speaking the real protocols (`docs/channels.md`, signed and encrypted
//! with the `mideng-channel` primitives) so that pointing the service at a real gateway is a
//! configuration change. On top of the protocol it adds what tests need: a clock that runs fast
//! or jumps, a buyer to scan and pay, notifies that are lost, doubled, delayed or reordered on
//! request, failures with unknown outcomes, refunds that end abnormal or closed on request, and
//! a ledger of what it charged and refunded.
//!
//! ## Components
//!
//! - [`simulator`](Simulator) — the handle: the router over the gateways and the control API,
//!   serving with the notify dispatcher beside it, and the clock and keys for Rust callers.
//! - `shared` — what every handler and the dispatcher share: configuration, clock, the world's
//!   lock, the dispatcher's wake-up, the delivery client, the platform's signing identity.
//! - [`error`](SimError) — why a simulator could not be built.
//! - [`config`](SimConfig) — identities and keys of both channels and their merchant.
//! - `certificates` — the WeChat Pay platform's signing identity: its key and serial, and in
//!   certificate mode its certificates (issued at start, renewed by a rotation).
//! - `clock` — channel time: `clock_speed` × real time plus explicit advances.
//! - `trades` — trades, their state machine, each trade's refund book and the ledger (pure).
//! - `faults` — armed "fail the next call" faults, and the fate of the next WeChat Pay refund
//!   (pure).
//! - `notify` — the notify queue and policies (pure), the payload of each channel's notify,
//!   and the dispatcher task that delivers them.
//! - `world` — all the state above, one value behind `shared`'s lock, settled to the clock on
//!   every access.
//! - `gateway::alipay` — `GET`/`POST /gateway.do`: precreate, query, close, refund (made in
//!   the call: `fund_change`), refund query (`alipay.trade.fastpay.refund.query`).
//! - `gateway::alipay_v3` — OpenAPI v3, `POST /v3/alipay/trade/{precreate,query,close,refund}`
//!   and `/v3/alipay/trade/fastpay/refund/query`: the same calls with JSON bodies, header
//!   signatures and `gateway::alipay`'s business rules.
//! - `gateway::wechat` — `POST /v3/pay/transactions/native`, query by out-trade-no or
//!   transaction id, close, `POST /v3/refund/domestic/refunds` (PROCESSING, then SUCCESS,
//!   ABNORMAL or CLOSED on the channel clock) and `GET …/refunds/{out_refund_no}`,
//!   `/v3/certificates`; WeChat's own signed 404 for any other `/v3` request.
//! - `bills` — the daily bills written from the ledger (Alipay's zipped GBK CSV, WeChat Pay's
//!   trade and fund-flow bills), published the next morning or as the day runs, and the
//!   rendered files waiting for their download (pure).
//! - `gateway::alipay_bill`, `gateway::wechat_bill` — `alipay.data.dataservice.bill.downloadurl.query`
//!   and its download; `GET /v3/bill/tradebill`, `/v3/bill/fundflowbill` and
//!   `/v3/billdownload/file`.
//! - `control` — `/sim/…`: scan, pay, close, refund, finish, trade (with its refunds) and
//!   ledger views, the clock, notify policies, fail-next, the next refund's outcome, WeChat
//!   platform rotation.
//!
//! ## How data flows
//!
//! ```text
//! merchant ──HTTP──► gateway::{alipay,wechat} ─┐            ┌─► responses, signed
//!                                              ├─► world ───┤
//! tests, storm ─HTTP─► control ────────────────┘  (one lock)└─► notify queue ──► dispatcher ──HTTP──► merchant
//!                                                   ▲                                   │
//!                                  clock (fast, advanceable) ── wakes ──────────────────┘
//! ```
//!
//! A request is verified (signature, ids, timestamp), then applied to the world in one critical
//! section: the world is settled to the clock (expired trades close, processed refunds end), the
//! transition runs, and its events become notifies in the queue. The dispatcher sleeps until
//! the next due delivery, expiry or end of a refund's processing on the channel clock, sends
//! what is due (signed at send time), and records the merchant's answer; an unacknowledged
//! notify — a refund's included — is retried on the channel's schedule.

mod bills;
mod certificates;
mod clock;
mod config;
mod control;
mod error;
mod faults;
mod gateway;
mod limits;
mod notify;
mod shared;
mod simulator;
mod trades;
mod world;

pub use config::{
    ALIPAY_SELLER_ID, MerchantKeys, SimConfig, WechatPlatformMode, merchant_channels,
};
pub use error::SimError;
pub use simulator::Simulator;

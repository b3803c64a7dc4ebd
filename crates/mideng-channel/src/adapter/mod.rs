//! The channel adapters: what the payment service calls to create, query and close trades and
//! to verify notifies, the same for every channel.
//!
//! Every call that reaches the channel ends in one of three ways: a definite answer, a
//! definite refusal ([`ChannelError::Rejected`]), or [`ChannelError::OutcomeUnknown`] — a
//! timeout, a 5xx, Alipay's 20000 or `ACQ.SYSTEM_ERROR`, a response whose signature does not
//! verify. An unknown outcome is never a failure: the channel may have applied the call, so the
//! caller queries again later and never guesses.

pub mod alipay;
pub mod wechat;

use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

// Which channel an adapter speaks to. Defined outside the adapters, since the simulator and
// the service name channels with it too; kept here as well for the adapters' callers.
pub use crate::kind::ChannelKind;

/// A trade to create at the channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateTrade {
    /// The merchant's payment number (the channel's `out_trade_no`).
    pub out_trade_no: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// What the buyer sees.
    pub subject: String,
    /// When the channel must stop accepting payment (Unix ms).
    pub expires_at_ms: i64,
}

/// A created trade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedTrade {
    /// What the buyer scans (Alipay `qr_code`, WeChat `code_url`).
    pub pay_url: String,
}

/// What the channel says about a trade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TradeState {
    /// The channel has no such trade (Alipay: not scanned yet, or never created).
    NotFound,
    /// Waiting for the buyer.
    Pending,
    /// Paid.
    Paid(Payment),
    /// Closed unpaid.
    Closed,
    /// Paid and then refunded.
    Refunded,
}

/// A payment the channel made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// The channel's number for it (`trade_no` / `transaction_id`).
    pub channel_trade_no: String,
    /// Amount paid, in fen.
    pub amount_fen: i64,
    /// When it was paid (Unix ms), if the channel says.
    pub paid_at_ms: Option<i64>,
}

/// A notify as received: headers (lower-case names) and the raw body.
#[derive(Clone, Debug, Default)]
pub struct RawNotify {
    /// Headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
}

impl RawNotify {
    /// The one value of header `name`: absent is `None`, and a header given twice refuses the
    /// notify, since the signer and the reader could then take different copies.
    pub(crate) fn header(&self, name: &str) -> Result<Option<&str>, NotifyRejection> {
        let mut values = self
            .headers
            .iter()
            .filter(|(candidate, _)| candidate.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str());
        let first = values.next();
        if values.next().is_some() {
            return Err(NotifyRejection::Malformed(
                "a header appears more than once",
            ));
        }
        Ok(first)
    }
}

/// What a verified notify says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifiedState {
    /// The trade was paid.
    Paid(Payment),
    /// The trade was closed.
    Closed,
    /// Anything else the channel reports (a refund), to acknowledge and leave to queries.
    Other(String),
}

/// A notify whose signature and merchant identity were verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedNotify {
    /// The channel's id of this notification: the same on every retry (the channel key).
    pub notify_id: String,
    /// The merchant's payment number.
    pub out_trade_no: String,
    /// Amount of the trade, in fen.
    pub amount_fen: i64,
    /// What happened.
    pub state: NotifiedState,
}

impl VerifiedNotify {
    /// The last checks, which need the merchant's own records: the trade must be ours and the
    /// amount must be ours. `expected_amount_fen` is the amount of our payment with this
    /// `out_trade_no`, or `None` when we have no such payment.
    pub fn check_against(&self, expected_amount_fen: Option<i64>) -> Result<(), NotifyRejection> {
        match expected_amount_fen {
            None => Err(NotifyRejection::UnknownTrade),
            Some(amount) if amount != self.amount_fen => Err(NotifyRejection::AmountMismatch),
            Some(_) => Ok(()),
        }
    }
}

/// Why a notify was not accepted. The service answers the channel's refusal and changes
/// nothing.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NotifyRejection {
    /// The body or headers are not a notify of this channel (a repeated name included).
    #[error("malformed notify: {0}")]
    Malformed(&'static str),
    /// The signature does not verify (forged, tampered, or a verification probe).
    #[error("notify signature does not verify")]
    BadSignature,
    /// The signing timestamp is further than [`crate::wechat::TIMESTAMP_SKEW_SECS_MAX`] from
    /// our clock: a replay of an old message, or a clock far off.
    #[error("notify timestamp outside the accepted window")]
    StaleTimestamp,
    /// Signed under a platform serial we do not know.
    #[error("notify signed under an unknown serial")]
    UnknownSerial,
    /// Signed correctly, but for another merchant (app id, merchant id or seller id).
    #[error("notify is for another merchant")]
    WrongMerchant,
    /// The encrypted resource does not decrypt with our key.
    #[error("notify resource does not decrypt")]
    Undecryptable,
    /// The trade is not one of ours.
    #[error("notify for a trade we do not have")]
    UnknownTrade,
    /// The amount is not the amount of our trade.
    #[error("notify amount differs from ours")]
    AmountMismatch,
}

impl NotifyRejection {
    /// A stable label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            NotifyRejection::Malformed(_) => "malformed",
            NotifyRejection::BadSignature => "bad_signature",
            NotifyRejection::StaleTimestamp => "stale_timestamp",
            NotifyRejection::UnknownSerial => "unknown_serial",
            NotifyRejection::WrongMerchant => "wrong_merchant",
            NotifyRejection::Undecryptable => "undecryptable",
            NotifyRejection::UnknownTrade => "unknown_trade",
            NotifyRejection::AmountMismatch => "amount_mismatch",
        }
    }
}

/// What the merchant tells the channel about a notify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyVerdict {
    /// Taken (or already taken): stop sending it.
    Accepted,
    /// The notify itself is bad (forged, stale, malformed, not ours): it will never be taken.
    /// WeChat Pay gets a 4xx, so that an anonymous sender cannot raise our 5xx alerts at will.
    Refused,
    /// Genuine, but we could not take it now (database down, busy, a case for a person): send
    /// it again. WeChat Pay gets a 5xx.
    RetryLater,
}

/// The answer to send back to the channel for a notify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyAnswer {
    /// HTTP status.
    pub status: u16,
    /// Content type of the body.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

/// A call to the channel that did not give a definite answer.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The channel may or may not have applied the call: query again later, never guess.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The channel refused the call; nothing changed there.
    #[error("refused by the channel: {code} {sub_code}: {message}")]
    Rejected {
        /// Channel code (Alipay `code`, WeChat HTTP status).
        code: String,
        /// Channel sub-code (Alipay `sub_code`, WeChat `code`).
        sub_code: String,
        /// The channel's message.
        message: String,
    },
    /// The call could not be made (bad amount, bad configuration); nothing was sent.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// A payment channel, as the service uses it.
#[async_trait]
pub trait Channel: Send + Sync {
    /// Which channel this is.
    fn kind(&self) -> ChannelKind;

    /// Creates the trade (idempotent at the channel by `out_trade_no` with the same
    /// parameters).
    async fn create_trade(&self, trade: &CreateTrade) -> Result<CreatedTrade, ChannelError>;

    /// What the channel knows about `out_trade_no`.
    async fn query_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError>;

    /// Closes the trade if it is still pending, and reports the state the channel confirms
    /// afterwards: `Closed`, `Paid` (the buyer paid first: run the success flow), or `NotFound`
    /// (never scanned; it may still be paid until the channel's own expiry).
    async fn close_trade(&self, out_trade_no: &str) -> Result<TradeState, ChannelError>;

    /// Verifies a notify's signature, freshness and merchant identity and decodes it, all from
    /// one parse of the message that refuses a repeated name. `now_ms` is our clock (Unix ms),
    /// for the freshness check. The caller then checks it against its own payment
    /// ([`VerifiedNotify::check_against`]) and that the payment is of this channel.
    fn verify_notify(
        &self,
        notify: &RawNotify,
        now_ms: i64,
    ) -> Result<VerifiedNotify, NotifyRejection>;

    /// The answer that tells the channel what became of the notify.
    fn answer(&self, verdict: NotifyVerdict) -> NotifyAnswer;
}

/// Connect timeout for channel calls: the gateway is either reachable quickly or not at all.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Whole-call timeout: past it the outcome is unknown and reconciliation finds out.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response body read from a channel.
pub(crate) const RESPONSE_BYTES_MAX: usize = 256 * 1024;

/// An HTTP client for channel calls. rustls is built without a default crypto provider (so
/// that only one provider, ring, is in the build), so one is installed here first; installing
/// it twice is harmless.
pub(crate) fn http_client() -> Result<reqwest::Client, ChannelError> {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .build()
        .map_err(|error| ChannelError::Invalid(format!("HTTP client: {error}")))
}

/// A transport failure: the request may have reached the channel, so the outcome is unknown.
pub(crate) fn transport_error(error: &reqwest::Error) -> ChannelError {
    ChannelError::OutcomeUnknown(format!("transport: {error}"))
}

/// Reads a response body, bounded.
pub(crate) async fn read_body(response: reqwest::Response) -> Result<String, ChannelError> {
    let bytes = response
        .bytes()
        .await
        .map_err(|error| transport_error(&error))?;
    if bytes.len() > RESPONSE_BYTES_MAX {
        return Err(ChannelError::OutcomeUnknown(
            "response too large".to_owned(),
        ));
    }
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ChannelError::OutcomeUnknown("response is not UTF-8".to_owned()))
}

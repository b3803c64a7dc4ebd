//! The channel adapters: what the payment service calls to create, query and close trades, to
//! refund them and query their refunds, and to verify notifies, the same for every channel.
//!
//! Every call that reaches the channel ends in one of three ways: a definite answer, a
//! definite refusal ([`ChannelError::Rejected`]), or [`ChannelError::OutcomeUnknown`] — a
//! timeout, a 5xx, Alipay's 20000 or `ACQ.SYSTEM_ERROR`, a response whose signature does not
//! verify, an answer about another trade or refund than the one asked about. An unknown
//! outcome is never a failure: the channel may have applied the call, so the caller queries
//! again later and never guesses. For a refund that means asking again under the same
//! `out_refund_no`, never a new one: the channel refunds one number once.

pub mod alipay;
mod bills;
pub mod wechat;

use std::time::Duration;

use async_trait::async_trait;
use thiserror::Error;

use crate::bill::{Bill, BillDate};
use crate::money::{AMOUNT_FEN_MAX, AMOUNT_FEN_MIN};

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

/// A refund to ask the channel for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefundTrade {
    /// The paid trade's merchant number (`out_trade_no`).
    pub out_trade_no: String,
    /// The merchant's number for this refund, and the channel's idempotency key for it
    /// (Alipay `out_request_no`, WeChat `out_refund_no`): asking again with the same number
    /// never refunds twice, so a retry after a lost answer re-asks with it, never a new one.
    pub out_refund_no: String,
    /// Amount to refund, in fen: one fen to `total_fen`.
    pub refund_fen: i64,
    /// The trade's amount, in fen (WeChat's `amount.total`).
    pub total_fen: i64,
    /// Why, as the buyer sees it (at most [`REFUND_REASON_CHARS_MAX`] characters; empty for
    /// none).
    pub reason: String,
}

/// Longest refund number (`out_refund_no`, Alipay's `out_request_no`) both channels take.
pub const REFUND_NUMBER_BYTES_MAX: usize = 64;
/// Longest refund reason, in characters: WeChat Pay's `reason` limit (Alipay takes 256).
pub const REFUND_REASON_CHARS_MAX: usize = 80;

/// Whether `text` is a refund number both channels take: 1 to [`REFUND_NUMBER_BYTES_MAX`]
/// letters, digits and `_ - | * @` (WeChat Pay's set). It also travels in a URL path (the
/// WeChat refund query), so nothing that could end or escape a path segment is let through.
pub(crate) fn is_valid_refund_number(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= REFUND_NUMBER_BYTES_MAX
        && text.bytes().all(|byte| {
            byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'|' | b'*' | b'@')
        })
}

/// Refuses, before anything is sent, a refund number the channels would not take.
pub(crate) fn check_refund_numbers(
    out_trade_no: &str,
    out_refund_no: &str,
) -> Result<(), ChannelError> {
    if out_trade_no.is_empty() || out_trade_no.len() > REFUND_NUMBER_BYTES_MAX {
        return Err(ChannelError::Invalid(
            "out_trade_no must be 1 to 64 bytes".to_owned(),
        ));
    }
    if !is_valid_refund_number(out_refund_no) {
        return Err(ChannelError::Invalid(
            "out_refund_no must be 1 to 64 letters, digits or _-|*@".to_owned(),
        ));
    }
    Ok(())
}

/// Refuses, before anything is sent, a refund the channels would refuse for its form: numbers
/// ([`check_refund_numbers`]), amounts outside the channels' range, a refund larger than the
/// trade or smaller than one fen, a reason too long.
pub(crate) fn check_refund(refund: &RefundTrade) -> Result<(), ChannelError> {
    check_refund_numbers(&refund.out_trade_no, &refund.out_refund_no)?;
    let in_range = |fen: i64| (AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen);
    if !in_range(refund.total_fen) {
        return Err(ChannelError::Invalid(format!(
            "trade amount {} fen out of range",
            refund.total_fen
        )));
    }
    if !in_range(refund.refund_fen) || refund.refund_fen > refund.total_fen {
        return Err(ChannelError::Invalid(format!(
            "refund of {} fen is not 1 fen to the trade's {} fen",
            refund.refund_fen, refund.total_fen
        )));
    }
    if refund.reason.chars().count() > REFUND_REASON_CHARS_MAX {
        return Err(ChannelError::Invalid(
            "the refund reason is longer than 80 characters".to_owned(),
        ));
    }
    Ok(())
}

/// Whether `fen` is an amount a channel may state (for amounts read from answers and notifies).
pub(crate) fn is_channel_amount(fen: i64) -> bool {
    (AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen)
}

/// What the channel says about a refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefundState {
    /// The channel has no refund with this number.
    NotFound,
    /// Accepted, money not yet back (WeChat `PROCESSING`).
    Processing,
    /// The money went back to the buyer.
    Succeeded(Refund),
    /// The channel closed the refund: no money moved, the amount is free again.
    Closed,
    /// The refund failed at the channel for a reason a person must look at (WeChat
    /// `ABNORMAL`: the buyer's account is frozen or closed); no money moved yet.
    Abnormal,
}

/// A refund the channel made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    /// The channel's number for it (WeChat `refund_id`; Alipay has none of its own: the
    /// trade number).
    pub channel_refund_no: String,
    /// Amount refunded, in fen: this refund's, as the channel states it (the amount asked for
    /// when Alipay's answer says money moved in that very call).
    pub refund_fen: i64,
    /// When the money went back (Unix ms), if the channel says.
    pub refunded_at_ms: Option<i64>,
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
    /// A refund of the trade changed state (WeChat `REFUND.SUCCESS`, `REFUND.CLOSED`,
    /// `REFUND.ABNORMAL`): the refund's number and its state. Alipay's trade notifies that
    /// carry refund fields are [`NotifiedState::Other`]: its refund answers and queries are the
    /// truth, the notify only a hint to query.
    Refund {
        /// The merchant's refund number (`out_refund_no`).
        out_refund_no: String,
        /// The refund's amount, in fen, whatever its state: the merchant checks it against its
        /// own refund before the state counts.
        refund_fen: i64,
        /// What became of it.
        state: RefundState,
    },
    /// Anything else the channel reports, to acknowledge and leave to queries.
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

    /// Asks the channel to refund part or all of a paid trade, under the refund's own number;
    /// the state the channel answers (Alipay answers at once, WeChat usually `Processing`).
    /// Asking again with the same number (after an unknown outcome) answers that refund's state
    /// and never refunds twice. A refusal (more than is left to refund, a trade not paid, the
    /// number used with another amount) is [`ChannelError::Rejected`]: nothing moved. A refund
    /// the channels would refuse for its form (see [`RefundTrade`]) is
    /// [`ChannelError::Invalid`], and nothing is sent.
    async fn refund(&self, refund: &RefundTrade) -> Result<RefundState, ChannelError>;

    /// What the channel knows about the refund `out_refund_no` of `out_trade_no`: `NotFound`
    /// when it has no such refund (never received, or failed without moving money).
    async fn query_refund(
        &self,
        out_trade_no: &str,
        out_refund_no: &str,
    ) -> Result<RefundState, ChannelError>;

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

    /// The channel's bill of `date` (its trade bill: every charge and every refund that moved
    /// money that day), downloaded, checked against its own summary (and for WeChat Pay its
    /// hash) and read. `Ok(None)` while the channel has not published it; a file that cannot
    /// be read exactly is an unknown outcome, to ask again.
    async fn bill(&self, date: BillDate) -> Result<Option<Bill>, ChannelError>;
}

/// Connect timeout for channel calls: the gateway is either reachable quickly or not at all.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Whole-call timeout: past it the outcome is unknown and reconciliation finds out.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Where requests to a channel take their trace headers from: installed once by the service
/// ([`propagate_with`]), none otherwise. The channel crate knows nothing of exporters.
static PROPAGATION: std::sync::OnceLock<fn() -> reqwest::header::HeaderMap> =
    std::sync::OnceLock::new();

/// Installs where requests to a channel take their trace headers from (the W3C `traceparent`
/// of the span they are sent in); the first call wins, later ones are ignored.
pub fn propagate_with(source: fn() -> reqwest::header::HeaderMap) {
    let _first = PROPAGATION.set(source);
}

/// Sending a request to a channel in a client span of its own.
pub(crate) trait SendTraced {
    /// Sends in a client span named `name` (`alipay.trade.query`, `GET wechatpay`), with the
    /// trace headers of that span when a source is installed ([`propagate_with`]).
    fn send_traced(
        self,
        name: &str,
    ) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send;
}

impl SendTraced for reqwest::RequestBuilder {
    fn send_traced(
        self,
        name: &str,
    ) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send {
        use tracing::Instrument as _;
        let span = tracing::info_span!("channel.request", otel.name = name, otel.kind = "client");
        let headers =
            span.in_scope(|| PROPAGATION.get().map(|source| source()).unwrap_or_default());
        self.headers(headers).send().instrument(span)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(out_refund_no: &str, refund_fen: i64, total_fen: i64) -> RefundTrade {
        RefundTrade {
            out_trade_no: "P1".to_owned(),
            out_refund_no: out_refund_no.to_owned(),
            refund_fen,
            total_fen,
            reason: "缺货".to_owned(),
        }
    }

    #[test]
    fn a_refund_is_one_fen_to_the_trade_under_a_number_both_channels_take() {
        assert_eq!(check_refund(&refund("R1@2026|a*b_c-d", 1, 100)), Ok(()));
        assert_eq!(check_refund(&refund("R1", 100, 100)), Ok(()));
        for bad in [
            refund("R1", 0, 100),
            refund("R1", -1, 100),
            refund("R1", 101, 100),
            refund("R1", 1, AMOUNT_FEN_MAX + 1),
            refund("", 1, 100),
            refund("R/1", 1, 100),
            refund("R 1", 1, 100),
            refund("R?x=1", 1, 100),
            refund(&"9".repeat(REFUND_NUMBER_BYTES_MAX + 1), 1, 100),
            RefundTrade {
                reason: "长".repeat(REFUND_REASON_CHARS_MAX + 1),
                ..refund("R1", 1, 100)
            },
            RefundTrade {
                out_trade_no: String::new(),
                ..refund("R1", 1, 100)
            },
        ] {
            assert!(
                matches!(check_refund(&bad), Err(ChannelError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}

//! WeChat Pay API v3: request and notify signatures, the `Authorization` header, encrypted
//! notification resources.
//!
//! - Requests: SHA256withRSA with the merchant's key over `METHOD\nURL\ntimestamp\nnonce\nbody\n`
//!   ([`request_message`]), sent as `Authorization: WECHATPAY2-SHA256-RSA2048 mchid="…",
//!   nonce_str="…",timestamp="…",serial_no="…",signature="…"`. A timestamp more than five minutes
//!   off is refused.
//! - Notifies: SHA256withRSA with the platform key over `timestamp\nnonce\nbody\n`
//!   ([`notify_message`], raw body bytes) in the `Wechatpay-*` headers; a signature starting
//!   `WECHATPAY/SIGNTEST/` is a probe and must fail. The `resource` is AES-256-GCM encrypted
//!   with the 32-byte API v3 key: a [`Transaction`] (`TRANSACTION.SUCCESS`) or a
//!   [`RefundNotice`] (`REFUND.*`). A 200 or 204 acknowledges; anything else is retried on
//!   [`NOTIFY_SCHEDULE_SECS`].
//! - Refunds: `POST` [`PATH_REFUNDS`] and `GET` [`PATH_REFUNDS`]`/{out_refund_no}` answer a
//!   [`RefundRecord`]; the same `out_refund_no` refunds once, however often it is sent.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The `Authorization` scheme.
pub const AUTHORIZATION_SCHEME: &str = "WECHATPAY2-SHA256-RSA2048";
/// Signatures starting with this are verification probes and must be rejected.
pub const SIGNTEST_PREFIX: &str = "WECHATPAY/SIGNTEST/";
/// Largest accepted difference between a request's timestamp and the receiver's clock.
pub const TIMESTAMP_SKEW_SECS_MAX: i64 = 300;
/// Notification header: timestamp.
pub const HEADER_TIMESTAMP: &str = "wechatpay-timestamp";
/// Notification header: nonce.
pub const HEADER_NONCE: &str = "wechatpay-nonce";
/// Notification header: signature.
pub const HEADER_SIGNATURE: &str = "wechatpay-signature";
/// Notification header: serial number of the platform certificate.
pub const HEADER_SERIAL: &str = "wechatpay-serial";
/// Notification and answer header: the signature scheme ([`AUTHORIZATION_SCHEME`]).
pub const HEADER_SIGNATURE_TYPE: &str = "wechatpay-signature-type";
/// Answer and notification header: the platform's id for the request or message, which
/// merchants quote to support.
pub const HEADER_REQUEST_ID: &str = "request-id";
/// The only resource encryption.
pub const RESOURCE_ALGORITHM: &str = "AEAD_AES_256_GCM";
/// A notification's `resource_type`: its resource is encrypted.
pub const RESOURCE_TYPE_ENCRYPTED: &str = "encrypt-resource";
/// The associated data, and the `original_type`, of a notification's encrypted transaction.
pub const TRANSACTION_ASSOCIATED_DATA: &str = "transaction";
/// A notification's `event_type` for a successful payment, the only payment event notified.
pub const EVENT_TRANSACTION_SUCCESS: &str = "TRANSACTION.SUCCESS";
/// The associated data, and the `original_type`, of a notification's encrypted refund.
pub const REFUND_ASSOCIATED_DATA: &str = "refund";
/// A notification's `event_type` for a refund that moved the money back.
pub const EVENT_REFUND_SUCCESS: &str = "REFUND.SUCCESS";
/// A notification's `event_type` for a refund that failed at the channel (the buyer's account
/// is frozen or closed); a person must look at it.
pub const EVENT_REFUND_ABNORMAL: &str = "REFUND.ABNORMAL";
/// A notification's `event_type` for a refund the channel closed without moving money.
pub const EVENT_REFUND_CLOSED: &str = "REFUND.CLOSED";

/// Create a native (QR code) transaction.
pub const PATH_NATIVE: &str = "/v3/pay/transactions/native";
/// Query / close by out-trade-no: this prefix, then the number.
pub const PATH_OUT_TRADE_NO: &str = "/v3/pay/transactions/out-trade-no/";
/// The platform certificates (certificate mode).
pub const PATH_CERTIFICATES: &str = "/v3/certificates";
/// Query by the channel's `transaction_id`: this prefix, then the id.
pub const PATH_TRANSACTION_ID: &str = "/v3/pay/transactions/id/";
/// Create a refund (`POST`); a refund is queried at this path, `/`, then its `out_refund_no`.
pub const PATH_REFUNDS: &str = "/v3/refund/domestic/refunds";

/// Paid.
pub const STATE_SUCCESS: &str = "SUCCESS";
/// Not paid yet.
pub const STATE_NOTPAY: &str = "NOTPAY";
/// Closed.
pub const STATE_CLOSED: &str = "CLOSED";
/// Refunded.
pub const STATE_REFUND: &str = "REFUND";

/// A refund's `status`: the money went back to the buyer.
pub const REFUND_STATUS_SUCCESS: &str = "SUCCESS";
/// A refund's `status`: accepted, the money not back yet.
pub const REFUND_STATUS_PROCESSING: &str = "PROCESSING";
/// A refund's `status`: closed by the channel, no money moved.
pub const REFUND_STATUS_CLOSED: &str = "CLOSED";
/// A refund's `status`: failed at the channel (the buyer's account is frozen or closed).
pub const REFUND_STATUS_ABNORMAL: &str = "ABNORMAL";

/// Error `code`: the request's signature does not verify (HTTP 401).
pub const CODE_SIGN_ERROR: &str = "SIGN_ERROR";
/// Error `code`: a parameter is missing or malformed (HTTP 400).
pub const CODE_PARAM_ERROR: &str = "PARAM_ERROR";
/// Error `code`: the platform failed; the outcome is unknown (HTTP 500).
pub const CODE_SYSTEM_ERROR: &str = "SYSTEM_ERROR";
/// Error `code`: the app id is not bound to the merchant id.
pub const CODE_APPID_MCHID_NOT_MATCH: &str = "APPID_MCHID_NOT_MATCH";
/// Error `code`: the order is already paid (a create or a close that came too late).
pub const CODE_ORDERPAID: &str = "ORDERPAID";
/// Error `code`: the order is closed.
pub const CODE_ORDER_CLOSED: &str = "ORDER_CLOSED";
/// Error `code`: the merchant's order number was used with other parameters.
pub const CODE_OUT_TRADE_NO_USED: &str = "OUT_TRADE_NO_USED";
/// Error `code`: no such order (HTTP 404 to a query).
pub const CODE_ORDER_NOT_EXIST: &str = "ORDER_NOT_EXIST";
/// Error `code`: no such API (HTTP 404).
pub const CODE_NOT_FOUND: &str = "NOT_FOUND";
/// Error `code`: the request is well formed but breaks a business rule (HTTP 400): a refund of
/// an unpaid order, more than is left to refund, an `out_refund_no` reused with another amount.
pub const CODE_INVALID_REQUEST: &str = "INVALID_REQUEST";
/// Error `code`: the merchant's balance cannot fund the refund (HTTP 403).
pub const CODE_NOT_ENOUGH: &str = "NOT_ENOUGH";
/// Error `code`: no such order or refund (HTTP 404 to a refund or a refund query).
pub const CODE_RESOURCE_NOT_EXISTS: &str = "RESOURCE_NOT_EXISTS";
/// Error `code`: the day's bill is not out yet (HTTP 400 to a bill request).
pub const CODE_STATEMENT_CREATING: &str = "STATEMENT_CREATING";
/// Error `code`: the day has no bill: nothing moved, or the day has not begun (HTTP 400).
pub const CODE_NO_STATEMENT_EXIST: &str = "NO_STATEMENT_EXIST";
/// `GET` the day's trade bill: `?bill_date=yyyy-MM-dd&bill_type=ALL&tar_type=GZIP`.
pub const PATH_TRADE_BILL: &str = "/v3/bill/tradebill";
/// `GET` the day's fund-flow bill: `?bill_date=yyyy-MM-dd&account_type=BASIC&tar_type=GZIP`.
pub const PATH_FUNDFLOW_BILL: &str = "/v3/bill/fundflowbill";
/// Where bill download URLs point: `?token=…`, a signed `GET`, the answer unsigned.
pub const PATH_BILL_DOWNLOAD: &str = "/v3/billdownload/file";

/// When each notify delivery goes out, in seconds after the event: at once, then 15s, 15s, 30s,
/// 3m, 10m, 20m, 30m, 30m, 30m, 60m, 3h, 3h, 3h, 6h, 6h — 16 deliveries in about a day.
pub const NOTIFY_SCHEDULE_SECS: [u64; 16] = {
    const GAPS: [u64; 15] = [
        15, 15, 30, 180, 600, 1200, 1800, 1800, 1800, 3600, 10800, 10800, 10800, 21600, 21600,
    ];
    let mut schedule = [0_u64; 16];
    let mut index = 0;
    while index < GAPS.len() {
        schedule[index + 1] = schedule[index] + GAPS[index];
        index += 1;
    }
    schedule
};

/// A malformed `Authorization` header.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("malformed Authorization header: {0}")]
pub struct AuthorizationError(pub &'static str);

/// Whether a message signed at `signed_at_secs` (Unix seconds) is within
/// [`TIMESTAMP_SKEW_SECS_MAX`] of `now_ms`, either way: WeChat Pay's own SDKs refuse older (a
/// replay) and newer (a clock far off) messages alike.
pub fn timestamp_is_fresh(signed_at_secs: i64, now_ms: i64) -> bool {
    signed_at_secs
        .checked_mul(1000)
        .and_then(|signed_at_ms| signed_at_ms.checked_sub(now_ms))
        .is_some_and(|skew_ms| {
            skew_ms.unsigned_abs() <= TIMESTAMP_SKEW_SECS_MAX.unsigned_abs() * 1000
        })
}

/// The message a request signature covers.
pub fn request_message(
    method: &str,
    url_path_and_query: &str,
    timestamp: i64,
    nonce: &str,
    body: &str,
) -> String {
    format!("{method}\n{url_path_and_query}\n{timestamp}\n{nonce}\n{body}\n")
}

/// The message a notify (or a response) signature covers.
pub fn notify_message(timestamp: &str, nonce: &str, body: &str) -> String {
    format!("{timestamp}\n{nonce}\n{body}\n")
}

/// The parts of an `Authorization` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// Merchant id.
    pub mchid: String,
    /// Nonce.
    pub nonce: String,
    /// Unix seconds.
    pub timestamp: i64,
    /// Serial number of the merchant certificate.
    pub serial: String,
    /// Base64 signature.
    pub signature: String,
}

impl Authorization {
    /// The header value.
    pub fn to_header(&self) -> String {
        format!(
            "{AUTHORIZATION_SCHEME} mchid=\"{}\",nonce_str=\"{}\",timestamp=\"{}\",serial_no=\"{}\",signature=\"{}\"",
            self.mchid, self.nonce, self.timestamp, self.serial, self.signature
        )
    }

    /// Parses a header value.
    pub fn parse(header: &str) -> Result<Self, AuthorizationError> {
        let rest = header
            .strip_prefix(AUTHORIZATION_SCHEME)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or(AuthorizationError("unknown scheme"))?;
        let mut fields = std::collections::HashMap::new();
        for pair in rest.split(',') {
            let (name, value) = pair
                .trim()
                .split_once('=')
                .ok_or(AuthorizationError("field without value"))?;
            let value = value
                .strip_prefix('"')
                .and_then(|value| value.strip_suffix('"'))
                .ok_or(AuthorizationError("unquoted value"))?;
            if fields.insert(name, value.to_owned()).is_some() {
                // Two `signature=` (or `timestamp=`) fields: which one was checked would
                // depend on the reader. Refused.
                return Err(AuthorizationError("a field appears more than once"));
            }
        }
        let mut take = |name: &'static str| fields.remove(name).ok_or(AuthorizationError(name));
        Ok(Self {
            mchid: take("mchid")?,
            nonce: take("nonce_str")?,
            timestamp: take("timestamp")?
                .parse()
                .map_err(|_| AuthorizationError("timestamp"))?,
            serial: take("serial_no")?,
            signature: take("signature")?,
        })
    }
}

/// Amount of a transaction, in fen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amount {
    /// Order total.
    pub total: i64,
    /// What the payer paid (in notifications and queries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer_total: Option<i64>,
    /// Currency, `CNY`.
    #[serde(default = "cny")]
    pub currency: String,
}

fn cny() -> String {
    "CNY".to_owned()
}

/// The transaction inside a notification (and a query answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// Merchant id.
    pub mchid: String,
    /// App id.
    pub appid: String,
    /// The merchant's number for the payment.
    pub out_trade_no: String,
    /// The channel's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// `SUCCESS`, `NOTPAY`, `CLOSED`, `REFUND`, …
    pub trade_state: String,
    /// When it was paid (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_time: Option<String>,
    /// Amount.
    pub amount: Amount,
}

/// The amounts of a refund, in fen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundAmount {
    /// The order's total.
    pub total: i64,
    /// This refund.
    pub refund: i64,
    /// What the payer paid of the order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer_total: Option<i64>,
    /// What goes back to the payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer_refund: Option<i64>,
    /// Currency, `CNY` (absent from notifications).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
}

/// A refund as the create and query answers show it (`POST /v3/refund/domestic/refunds`,
/// `GET …/refunds/{out_refund_no}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRecord {
    /// The channel's number for the refund.
    pub refund_id: String,
    /// The merchant's number for the refund.
    pub out_refund_no: String,
    /// The channel's number of the refunded payment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// The merchant's number of the refunded payment.
    pub out_trade_no: String,
    /// `SUCCESS`, `PROCESSING`, `CLOSED` or `ABNORMAL`.
    pub status: String,
    /// When the money went back (RFC 3339), once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_time: Option<String>,
    /// Amounts.
    pub amount: RefundAmount,
}

/// The refund inside a refund notification (`REFUND.SUCCESS`, `REFUND.ABNORMAL`,
/// `REFUND.CLOSED`; `original_type` `refund`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundNotice {
    /// Merchant id.
    pub mchid: String,
    /// The merchant's number of the refunded payment.
    pub out_trade_no: String,
    /// The channel's number of the refunded payment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// The merchant's number for the refund.
    pub out_refund_no: String,
    /// The channel's number for the refund.
    pub refund_id: String,
    /// `SUCCESS`, `CLOSED` or `ABNORMAL`.
    pub refund_status: String,
    /// When the money went back (RFC 3339), for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_time: Option<String>,
    /// Where the money went (`支付用户零钱`, a bank card, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_received_account: Option<String>,
    /// Amounts.
    pub amount: RefundAmount,
}

/// The encrypted part of a notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// `AEAD_AES_256_GCM`.
    pub algorithm: String,
    /// Base64 ciphertext with the tag appended.
    pub ciphertext: String,
    /// Associated data (`transaction` or `refund`).
    #[serde(default)]
    pub associated_data: String,
    /// 12-character nonce.
    pub nonce: String,
    /// What the ciphertext is: `transaction` or `refund`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_type: Option<String>,
}

/// A notification body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Notification id (the same on every retry).
    pub id: String,
    /// When it was created (RFC 3339).
    pub create_time: String,
    /// `TRANSACTION.SUCCESS`, `REFUND.SUCCESS`, `REFUND.ABNORMAL` or `REFUND.CLOSED`.
    pub event_type: String,
    /// `encrypt-resource`.
    pub resource_type: String,
    /// A human summary.
    #[serde(default)]
    pub summary: String,
    /// The encrypted transaction or refund.
    pub resource: Resource,
}

/// RFC 3339 in Beijing time (`2026-11-29T12:05:00+08:00`), the channel's format.
pub fn format_rfc3339(unix_ms: i64) -> String {
    let offset = time::UtcOffset::from_hms(8, 0, 0).unwrap_or(time::UtcOffset::UTC);
    time::OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000))
        .ok()
        .map(|moment| moment.to_offset(offset))
        .and_then(|moment| {
            moment
                .format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Parses RFC 3339 into Unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|moment| moment.unix_timestamp() * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_headers_round_trip() {
        let authorization = Authorization {
            mchid: "1230000109".to_owned(),
            nonce: "NONCE".to_owned(),
            timestamp: 1_764_417_600,
            serial: "5157F09EFDC096DE15EBE81A47057A7232F1B8E1".to_owned(),
            signature: "c2ln/bmF+0dXJl=".to_owned(),
        };
        assert_eq!(
            Authorization::parse(&authorization.to_header()),
            Ok(authorization.clone())
        );
        assert!(Authorization::parse("Bearer x").is_err());
        assert!(Authorization::parse("WECHATPAY2-SHA256-RSA2048 mchid=\"1\"").is_err());
        let doubled = format!("{},mchid=\"1230000999\"", authorization.to_header());
        assert_eq!(
            Authorization::parse(&doubled),
            Err(AuthorizationError("a field appears more than once"))
        );
    }

    #[test]
    fn timestamps_within_five_minutes_either_way_are_fresh() {
        let now_ms = 1_764_417_600_000;
        assert!(timestamp_is_fresh(1_764_417_600, now_ms));
        assert!(timestamp_is_fresh(1_764_417_600 - 300, now_ms));
        assert!(timestamp_is_fresh(1_764_417_600 + 300, now_ms));
        assert!(!timestamp_is_fresh(1_764_417_600 - 301, now_ms));
        assert!(!timestamp_is_fresh(1_764_417_600 + 301, now_ms));
        assert!(!timestamp_is_fresh(1_764_417_600 - 86_400, now_ms));
        assert!(!timestamp_is_fresh(i64::MAX, now_ms));
        assert!(!timestamp_is_fresh(i64::MIN, now_ms));
    }

    #[test]
    fn the_notify_schedule_is_sixteen_deliveries_in_about_a_day() {
        assert_eq!(NOTIFY_SCHEDULE_SECS.len(), 16);
        assert_eq!(NOTIFY_SCHEDULE_SECS[1], 15);
        assert_eq!(
            NOTIFY_SCHEDULE_SECS[15], 86_640,
            "24 h 4 min after the first"
        );
    }

    #[test]
    fn rfc3339_is_beijing_time_and_parses_back() {
        assert_eq!(
            format_rfc3339(1_764_417_600_000),
            "2025-11-29T20:00:00+08:00"
        );
        assert_eq!(
            parse_rfc3339("2025-11-29T20:00:00+08:00"),
            Some(1_764_417_600_000)
        );
    }
}

//! Alipay open-platform protocol (RSA2): what is signed, how responses are verified, the codes.
//!
//! - Requests: every parameter but `sign`, empty values skipped, sorted by key (byte order),
//!   joined `k=v&k=v`, signed SHA256withRSA with the merchant's key.
//! - Responses: `{"<method with dots as underscores>_response": {…}, "sign": "…"}`; the gateway
//!   signs the exact text of the response node, so the client verifies over that raw substring,
//!   never over a re-serialisation ([`response_node`]).
//! - Notifies: form posts; remove `sign` and `sign_type`, sort, join, verify with the channel's
//!   key; answer exactly `success`, or be retried on [`NOTIFY_SCHEDULE_SECS`].

use std::collections::{BTreeMap, HashMap};

use serde_json::value::RawValue;
use thiserror::Error;
use time::{OffsetDateTime, UtcOffset, macros::format_description};

/// The gateway's one endpoint.
pub const GATEWAY_PATH: &str = "/gateway.do";

/// Success.
pub const CODE_SUCCESS: &str = "10000";
/// Service unavailable: the outcome is unknown, query again.
pub const CODE_UNKNOWN: &str = "20000";
/// A required parameter is missing.
pub const CODE_MISSING_PARAMETER: &str = "40001";
/// A parameter is illegal (a bad signature too).
pub const CODE_ILLEGAL_PARAMETER: &str = "40002";
/// Business failure; see the `sub_code`.
pub const CODE_BUSINESS_FAILED: &str = "40004";
/// Insufficient permission.
pub const CODE_NO_PERMISSION: &str = "40006";

/// The trade does not exist (yet: a precreated trade exists only once the buyer scans).
pub const SUB_TRADE_NOT_EXIST: &str = "ACQ.TRADE_NOT_EXIST";
/// The trade was paid already.
pub const SUB_TRADE_HAS_SUCCESS: &str = "ACQ.TRADE_HAS_SUCCESS";
/// The trade was closed already.
pub const SUB_TRADE_HAS_CLOSE: &str = "ACQ.TRADE_HAS_CLOSE";
/// The `out_trade_no` was used with different parameters.
pub const SUB_CONTEXT_INCONSISTENT: &str = "ACQ.CONTEXT_INCONSISTENT";
/// The trade's status does not allow the operation (closing a paid or closed trade, refunding
/// an unpaid or closed one).
pub const SUB_TRADE_STATUS_ERROR: &str = "ACQ.TRADE_STATUS_ERROR";
/// The trade is finished (`TRADE_FINISHED`) and can no longer be refunded.
pub const SUB_TRADE_HAS_FINISHED: &str = "ACQ.TRADE_HAS_FINISHED";
/// The refund asks for more than is left to refund of the trade (退款金额超限).
pub const SUB_REFUND_AMT_NOT_EQUAL_TOTAL: &str = "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL";
/// The `out_request_no` was used before with other parameters (another amount).
pub const SUB_DISCORDANT_REPEAT_REQUEST: &str = "ACQ.DISCORDANT_REPEAT_REQUEST";
/// The channel failed internally: the outcome is unknown.
pub const SUB_SYSTEM_ERROR: &str = "ACQ.SYSTEM_ERROR";
/// The sub-code that goes with [`CODE_UNKNOWN`] (sic: the channel's spelling).
pub const SUB_UNKNOWN_ERROR: &str = "isp.unknow-error";
/// The signature does not verify.
pub const SUB_INVALID_SIGNATURE: &str = "isv.invalid-signature";

/// Waiting for the buyer.
pub const TRADE_WAIT_BUYER_PAY: &str = "WAIT_BUYER_PAY";
/// Paid (refundable).
pub const TRADE_SUCCESS: &str = "TRADE_SUCCESS";
/// Paid and finished (no longer refundable).
pub const TRADE_FINISHED: &str = "TRADE_FINISHED";
/// Closed unpaid, or fully refunded.
pub const TRADE_CLOSED: &str = "TRADE_CLOSED";

/// `fund_change` of a refund answer: money moved in this very call.
pub const FUND_CHANGE_YES: &str = "Y";
/// `fund_change` of a refund answer: no money moved in this call (a repeat of a refund made
/// before, or one not done yet); `alipay.trade.fastpay.refund.query` says which.
pub const FUND_CHANGE_NO: &str = "N";
/// `refund_status` of `alipay.trade.fastpay.refund.query`: the refund is done. An answer
/// without `refund_status` means the channel has no such refund (never received, or failed).
pub const REFUND_SUCCESS: &str = "REFUND_SUCCESS";
/// `refund_status` of a refund still being processed (Alipay's asynchronous refund product).
pub const REFUND_PROCESSING: &str = "REFUND_PROCESSING";
/// The `query_options` entry that makes `alipay.trade.fastpay.refund.query` answer
/// `gmt_refund_pay`, the time the refund was made.
pub const QUERY_OPTION_GMT_REFUND_PAY: &str = "gmt_refund_pay";

/// When each notify delivery goes out, in seconds after the event: the first at once, then
/// +4m, +10m, +10m, +1h, +2h, +6h, +15h — 8 deliveries in about 25 hours.
pub const NOTIFY_SCHEDULE_SECS: [u64; 8] = [
    0,
    4 * 60,
    14 * 60,
    24 * 60,
    84 * 60,
    204 * 60,
    564 * 60,
    1464 * 60,
];

/// The only body that acknowledges a notify.
pub const NOTIFY_ACK: &str = "success";
/// What a merchant answers to a notify it cannot accept now (so it is delivered again).
pub const NOTIFY_NACK: &str = "failure";

/// A response that is not a well-formed gateway response.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("malformed gateway response: {0}")]
pub struct ResponseError(pub &'static str);

/// The text that is signed: the parameters other than `excluded`, sorted by key, joined
/// `k=v&k=v`, values as they are (URL-decoded); empty values are skipped when
/// `skip_empty`.
fn sign_content<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
    excluded: &[&str],
    skip_empty: bool,
) -> String {
    let sorted: BTreeMap<&str, &str> = params
        .into_iter()
        .filter(|(key, value)| !(excluded.contains(key) || (skip_empty && value.is_empty())))
        .collect();
    sorted
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The sign content of a gateway request: everything but `sign`, empty values skipped.
pub fn request_sign_content<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    sign_content(params, &["sign"], true)
}

/// The sign content of a notify: everything but `sign` and `sign_type`, **empty values kept**
/// (`passback_params=` is signed as `passback_params=`), as Alipay's own verifiers build it.
/// The verifier passes a [`Form`](crate::strict::Form), whose names are unique, so that the text signed is the
/// text read.
pub fn notify_sign_content<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    sign_content(params, &["sign", "sign_type"], false)
}

/// The response node's key for `method`: `alipay.trade.query` → `alipay_trade_query_response`.
pub fn response_key(method: &str) -> String {
    format!("{}_response", method.replace('.', "_"))
}

/// Splits a gateway response into the raw text of its response node (exactly as received, for
/// signature verification) and its signature. The node is `<method>_response`, or
/// `error_response` when the gateway refused the call before dispatching it.
pub fn response_node<'a>(
    body: &'a str,
    method: &str,
) -> Result<(&'a str, Option<String>), ResponseError> {
    // A key given twice (two response nodes, two signatures, a node with a repeated field)
    // would let the signed text and the text read differ: refused before anything is read.
    crate::strict::check_json(body)
        .map_err(|_| ResponseError("not a JSON object with unique keys"))?;
    let envelope: HashMap<&'a str, &'a RawValue> =
        serde_json::from_str(body).map_err(|_| ResponseError("not a JSON object"))?;
    let node = envelope
        .get(response_key(method).as_str())
        .or_else(|| envelope.get("error_response"))
        .ok_or(ResponseError("no response node"))?;
    let sign = envelope
        .get("sign")
        .map(|raw| {
            serde_json::from_str::<String>(raw.get())
                .map_err(|_| ResponseError("sign is not a string"))
        })
        .transpose()?;
    Ok((node.get(), sign))
}

/// Builds a response body the way the gateway does: `{"<key>":<node>,"sign":"<sign>"}`, with
/// the node's text exactly as signed.
pub fn response_body(method: &str, node: &str, sign: &str) -> String {
    format!(
        "{{\"{}\":{},\"sign\":{}}}",
        response_key(method),
        node,
        serde_json::Value::String(sign.to_owned())
    )
}

/// Beijing time, the channel's clock for timestamps.
pub(crate) const BEIJING: UtcOffset = match UtcOffset::from_hms(8, 0, 0) {
    Ok(offset) => offset,
    Err(_) => UtcOffset::UTC,
};

/// `yyyy-MM-dd HH:mm:ss` in Beijing time, the gateway's timestamp format.
pub fn format_timestamp(unix_ms: i64) -> String {
    let format = format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000))
        .map(|moment| moment.to_offset(BEIJING))
        .ok()
        .and_then(|moment| moment.format(format).ok())
        .unwrap_or_default()
}

/// Parses a gateway timestamp (Beijing time) into Unix milliseconds.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let format = format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::PrimitiveDateTime::parse(text, format)
        .ok()
        .map(|moment| moment.assume_offset(BEIJING).unix_timestamp() * 1000)
}

/// Alipay OpenAPI v3: `POST /v3/alipay/trade/precreate|query|close|refund` and
/// `/v3/alipay/trade/fastpay/refund/query` with JSON bodies, what the official Node SDK's
/// `curl()` speaks.
///
/// - Requests carry `authorization: ALIPAY-SHA256withRSA app_id=…,nonce=…,timestamp=…,sign=…`;
///   the auth string is everything between the scheme and `,sign=`, and the signature (the
///   merchant's key, SHA256withRSA) covers `auth\nMETHOD\npath?query\nbody\n`, followed by
///   `app_auth_token\n` when an `alipay-app-auth-token` header is sent ([`v3::request_message`]).
///   The timestamp is Unix milliseconds.
/// - Answers, errors included, carry `alipay-timestamp`, `alipay-nonce` and `alipay-signature`
///   over `timestamp\nnonce\nbody\n` ([`v3::response_message`]), signed with Alipay's key. A
///   success is HTTP 200 with the business fields at the top level; a failure is 4xx or 5xx
///   with `{"code", "message"}`.
pub mod v3 {
    use thiserror::Error;

    /// The `authorization` scheme.
    pub const AUTHORIZATION_SCHEME: &str = "ALIPAY-SHA256withRSA";
    /// The optional header naming a third-party app's authorisation token (signed when sent).
    pub const HEADER_APP_AUTH_TOKEN: &str = "alipay-app-auth-token";
    /// The answer's signing time, Unix milliseconds.
    pub const HEADER_TIMESTAMP: &str = "alipay-timestamp";
    /// The answer's nonce.
    pub const HEADER_NONCE: &str = "alipay-nonce";
    /// The answer's signature, base64.
    pub const HEADER_SIGNATURE: &str = "alipay-signature";
    /// The answer's trace id.
    pub const HEADER_TRACE_ID: &str = "alipay-trace-id";
    /// `alipay.trade.precreate`.
    pub const PATH_PRECREATE: &str = "/v3/alipay/trade/precreate";
    /// `alipay.trade.query`.
    pub const PATH_QUERY: &str = "/v3/alipay/trade/query";
    /// `alipay.trade.close`.
    pub const PATH_CLOSE: &str = "/v3/alipay/trade/close";
    /// `alipay.trade.refund`.
    pub const PATH_REFUND: &str = "/v3/alipay/trade/refund";
    /// `alipay.trade.fastpay.refund.query`.
    pub const PATH_REFUND_QUERY: &str = "/v3/alipay/trade/fastpay/refund/query";
    /// How far a request's timestamp may be from the gateway's clock, either way.
    pub const TIMESTAMP_SKEW_MS_MAX: i64 = 5 * 60 * 1000;
    /// The longest `authorization` value read (a 4096-bit signature is 684 characters).
    pub const AUTHORIZATION_BYTES_MAX: usize = 2048;
    /// The longest nonce accepted.
    pub const NONCE_BYTES_MAX: usize = 64;

    /// A malformed `authorization` value.
    #[derive(Clone, Debug, PartialEq, Eq, Error)]
    #[error("malformed authorization: {0}")]
    pub struct AuthorizationError(pub &'static str);

    /// The parts of an `authorization` value, each named once.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Authorization {
        /// The text signed first: every field before `sign`, exactly as sent.
        pub auth_string: String,
        /// The merchant's app id.
        pub app_id: String,
        /// The request's nonce.
        pub nonce: String,
        /// When the request was signed, Unix milliseconds.
        pub timestamp_ms: i64,
        /// The signature, base64.
        pub signature: String,
    }

    impl Authorization {
        /// Parses `ALIPAY-SHA256withRSA name=value,…,sign=…`: `sign` last, `app_id`, `nonce`
        /// and `timestamp` required, no name twice, no empty value. Other fields (such as
        /// `app_cert_sn`) are kept in the signed auth string.
        pub fn parse(header: &str) -> Result<Self, AuthorizationError> {
            if header.len() > AUTHORIZATION_BYTES_MAX {
                return Err(AuthorizationError("too long"));
            }
            let fields_text = header
                .strip_prefix(AUTHORIZATION_SCHEME)
                .and_then(|rest| rest.strip_prefix(' '))
                .ok_or(AuthorizationError("not the ALIPAY-SHA256withRSA scheme"))?;
            let mut fields: Vec<(&str, &str)> = Vec::new();
            for field in fields_text.split(',') {
                let (name, value) = field
                    .split_once('=')
                    .ok_or(AuthorizationError("a field without ="))?;
                if name.is_empty() || value.is_empty() {
                    return Err(AuthorizationError("an empty name or value"));
                }
                if fields.iter().any(|(seen, _)| *seen == name) {
                    // Which of two values was signed would depend on the reader.
                    return Err(AuthorizationError("a field named twice"));
                }
                fields.push((name, value));
            }
            let Some((&("sign", signature), signed_fields)) = fields.split_last() else {
                return Err(AuthorizationError("sign is not the last field"));
            };
            let field = |wanted: &str| {
                signed_fields
                    .iter()
                    .find(|(name, _)| *name == wanted)
                    .map(|(_, value)| *value)
            };
            let app_id = field("app_id").ok_or(AuthorizationError("no app_id"))?;
            let nonce = field("nonce").ok_or(AuthorizationError("no nonce"))?;
            if nonce.len() > NONCE_BYTES_MAX {
                return Err(AuthorizationError("nonce too long"));
            }
            let timestamp = field("timestamp").ok_or(AuthorizationError("no timestamp"))?;
            if timestamp.len() > 15 || !timestamp.bytes().all(|byte| byte.is_ascii_digit()) {
                return Err(AuthorizationError("timestamp is not Unix milliseconds"));
            }
            let timestamp_ms = timestamp
                .parse()
                .map_err(|_| AuthorizationError("timestamp is not Unix milliseconds"))?;
            // `sign=` and its value are the end of the text, after one comma.
            let auth_end = fields_text.len() - signature.len() - ",sign=".len();
            Ok(Self {
                auth_string: fields_text[..auth_end].to_owned(),
                app_id: app_id.to_owned(),
                nonce: nonce.to_owned(),
                timestamp_ms,
                signature: signature.to_owned(),
            })
        }

        /// Whether the timestamp is within [`TIMESTAMP_SKEW_MS_MAX`] of `now_ms`, either way.
        pub fn is_fresh(&self, now_ms: i64) -> bool {
            self.timestamp_ms.abs_diff(now_ms) <= TIMESTAMP_SKEW_MS_MAX.unsigned_abs()
        }
    }

    /// The `authorization` value for an auth string and its signature.
    pub fn authorization(auth_string: &str, signature: &str) -> String {
        format!("{AUTHORIZATION_SCHEME} {auth_string},sign={signature}")
    }

    /// What a request's signature covers: `auth\nMETHOD\npath?query\nbody\n`, then
    /// `app_auth_token\n` when one is sent.
    pub fn request_message(
        auth_string: &str,
        method: &str,
        path_and_query: &str,
        body: &str,
        app_auth_token: Option<&str>,
    ) -> String {
        let mut message = format!("{auth_string}\n{method}\n{path_and_query}\n{body}\n");
        if let Some(token) = app_auth_token {
            message.push_str(token);
            message.push('\n');
        }
        message
    }

    /// What an answer's signature covers: `timestamp\nnonce\nbody\n`.
    pub fn response_message(timestamp: &str, nonce: &str, body: &str) -> String {
        format!("{timestamp}\n{nonce}\n{body}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_content_sorts_skips_empty_and_excluded_values() {
        let params = [
            ("b", "2"),
            ("sign", "x"),
            ("a", "1"),
            ("c", ""),
            ("sign_type", "RSA2"),
        ];
        assert_eq!(request_sign_content(params), "a=1&b=2&sign_type=RSA2");
        assert_eq!(notify_sign_content(params), "a=1&b=2&c=");
    }

    #[test]
    fn the_response_node_is_the_raw_text_as_received() {
        let body = r#"{"alipay_trade_query_response":{"code":"10000","msg":"Success" ,"total_amount":"1.00"},"sign":"abc"}"#;
        let (node, sign) = response_node(body, "alipay.trade.query").expect("node");
        assert_eq!(
            node,
            r#"{"code":"10000","msg":"Success" ,"total_amount":"1.00"}"#
        );
        assert_eq!(sign.as_deref(), Some("abc"));
        let error = r#"{"error_response":{"code":"40002","msg":"Invalid Arguments","sub_code":"isv.invalid-signature"}}"#;
        assert!(response_node(error, "alipay.trade.query").is_ok_and(|(_, sign)| sign.is_none()));
        assert!(response_node("[]", "alipay.trade.query").is_err());
        let two_nodes = r#"{"alipay_trade_query_response":{"code":"10000"},"alipay_trade_query_response":{"code":"40004"},"sign":"abc"}"#;
        assert!(response_node(two_nodes, "alipay.trade.query").is_err());
        let repeated_field = r#"{"alipay_trade_query_response":{"code":"10000","total_amount":"1.00","total_amount":"9.00"},"sign":"abc"}"#;
        assert!(response_node(repeated_field, "alipay.trade.query").is_err());
    }

    #[test]
    fn timestamps_are_beijing_time() {
        assert_eq!(format_timestamp(1_764_417_600_000), "2025-11-29 20:00:00");
        assert_eq!(
            parse_timestamp("2025-11-29 20:00:00"),
            Some(1_764_417_600_000)
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn the_notify_schedule_is_eight_deliveries_in_about_a_day() {
        let gaps: Vec<u64> = NOTIFY_SCHEDULE_SECS
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .collect();
        assert_eq!(gaps, [240, 600, 600, 3600, 7200, 21600, 54000]);
    }

    #[test]
    fn a_v3_authorization_keeps_its_auth_string_and_refuses_what_is_ambiguous() {
        let header = "ALIPAY-SHA256withRSA app_id=2021000000000001,app_cert_sn=ab,\
                      nonce=5f1e-9a,timestamp=1764590000123,sign=c2lnbg==";
        let parsed = v3::Authorization::parse(header).expect("a well-formed authorization");
        assert_eq!(
            parsed.auth_string,
            "app_id=2021000000000001,app_cert_sn=ab,nonce=5f1e-9a,timestamp=1764590000123"
        );
        assert_eq!(parsed.app_id, "2021000000000001");
        assert_eq!(parsed.nonce, "5f1e-9a");
        assert_eq!(parsed.timestamp_ms, 1_764_590_000_123);
        assert_eq!(parsed.signature, "c2lnbg==");
        assert_eq!(
            v3::authorization(&parsed.auth_string, &parsed.signature),
            header
        );
        assert!(parsed.is_fresh(1_764_590_000_123 + 300_000));
        assert!(!parsed.is_fresh(1_764_590_000_123 + 300_001));
        for bad in [
            "ALIPAY-SHA256withRSA app_id=1,app_id=2,nonce=n,timestamp=1,sign=s",
            "ALIPAY-SHA256withRSA app_id=1,nonce=n,timestamp=1,sign=s,sign=t",
            "ALIPAY-SHA256withRSA app_id=1,nonce=n,sign=s,timestamp=1",
            "ALIPAY-SHA256withRSA app_id=1,nonce=n,timestamp=1.5,sign=s",
            "ALIPAY-SHA256withRSA app_id=1,timestamp=1,sign=s",
            "ALIPAY-SHA256withRSA app_id=,nonce=n,timestamp=1,sign=s",
            "WECHATPAY2-SHA256-RSA2048 app_id=1,nonce=n,timestamp=1,sign=s",
        ] {
            assert!(v3::Authorization::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn v3_messages_end_every_line_with_a_newline() {
        assert_eq!(
            v3::request_message("a=1", "POST", "/v3/x?y=1", "{}", None),
            "a=1\nPOST\n/v3/x?y=1\n{}\n"
        );
        assert_eq!(
            v3::request_message("a=1", "POST", "/v3/x", "", Some("token")),
            "a=1\nPOST\n/v3/x\n\ntoken\n"
        );
        assert_eq!(v3::response_message("1", "n", "{}"), "1\nn\n{}\n");
    }
}

//! The simulated gateways: the merchant-facing HTTP endpoints of each channel.
//!
//! - [`alipay`] — the open platform's single `/gateway.do` (GET or POST).
//! - [`alipay_v3`] — Alipay OpenAPI v3's precreate, query, close, refund and refund query, on
//!   the same business rules as [`alipay`].
//! - [`wechat`] — WeChat Pay API v3's native create, query and close, refunds and the refund
//!   query; every other `/v3` request answers WeChat's own signed 404 (the [`not_found`]
//!   fallback).
//! - [`alipay_bill`], [`wechat_bill`] — each channel's daily bill: the call that names its
//!   download URL, and the download.
//!
//! Both read bounded bodies, verify the merchant before doing anything, answer every client
//! error the way the channel documents it, and apply state changes through the world's lock.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Uri, header};
use axum::response::Response;

use crate::limits::{NOTIFY_URL_BYTES_MAX, OUT_TRADE_NO_BYTES_MAX, REQUEST_BODY_BYTES_MAX};

pub(crate) mod alipay;
pub(crate) mod alipay_bill;
pub(crate) mod alipay_v3;
pub(crate) mod wechat;
pub(crate) mod wechat_bill;

/// What answers a request no route takes: under `/v3/` (but Alipay's `/v3/alipay/`), WeChat
/// Pay's own signed 404, as the WeChat SDKs expect of that API; elsewhere the control API's
/// problem+json.
pub(crate) async fn not_found(
    State(simulator): State<crate::simulator::Simulator>,
    uri: Uri,
) -> Response {
    let path = uri.path();
    if path.starts_with("/v3/") && !path.starts_with("/v3/alipay/") {
        wechat::unknown_route(&simulator)
    } else {
        crate::control::not_found().await
    }
}

/// The request body could not be read within [`REQUEST_BODY_BYTES_MAX`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyUnreadable;

/// Reads a request body, refusing more than [`REQUEST_BODY_BYTES_MAX`].
pub(crate) async fn read_body(body: Body) -> Result<Bytes, BodyUnreadable> {
    axum::body::to_bytes(body, REQUEST_BODY_BYTES_MAX)
        .await
        .map_err(|_| BodyUnreadable)
}

/// The request's `Host`, to name download URLs on the address the merchant reached; none when
/// absent, repeated or not a plain host and port.
pub(crate) fn host(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::HOST).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().filter(|host| {
            !host.is_empty()
                && host.len() <= 255
                && host
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b".-:[]".contains(&byte))
        }),
        _ => None,
    }
}

/// Whether `text` is a merchant order number both channels accept: 1 to 64 letters, digits
/// and `_ - | *` (the union of the channels' character sets; it also keeps numbers safe in
/// URL paths).
pub(crate) fn is_valid_out_trade_no(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= OUT_TRADE_NO_BYTES_MAX
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'|' | b'*'))
}

/// Whether `text` is a refund number both channels accept: 1 to 64 letters, digits and
/// `_ - | * @` (WeChat Pay's set for `out_refund_no`; it also keeps numbers safe in URL
/// paths).
pub(crate) fn is_valid_out_refund_no(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= OUT_TRADE_NO_BYTES_MAX
        && text.bytes().all(|byte| {
            byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'|' | b'*' | b'@')
        })
}

/// Whether `text` is a usable notify URL: absolute http or https, at most
/// [`NOTIFY_URL_BYTES_MAX`] bytes.
pub(crate) fn is_valid_notify_url(text: &str) -> bool {
    text.len() <= NOTIFY_URL_BYTES_MAX
        && reqwest::Url::parse(text)
            .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_numbers_and_notify_urls_are_checked() {
        assert!(is_valid_out_trade_no("P20261129000001"));
        assert!(is_valid_out_trade_no("a_b-c|d*e"));
        assert!(!is_valid_out_trade_no(""));
        assert!(!is_valid_out_trade_no("a/b"));
        assert!(!is_valid_out_trade_no(&"9".repeat(65)));
        assert!(is_valid_out_refund_no("R1@2026|a*b_c-d"));
        assert!(!is_valid_out_refund_no(""));
        assert!(!is_valid_out_refund_no("R/1"));
        assert!(!is_valid_out_refund_no("R 1"));
        assert!(!is_valid_out_refund_no(&"9".repeat(65)));
        assert!(is_valid_notify_url("http://127.0.0.1:8080/notify"));
        assert!(!is_valid_notify_url("ftp://127.0.0.1/notify"));
        assert!(!is_valid_notify_url("/notify"));
    }
}

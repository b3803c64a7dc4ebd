//! Identifiers chosen by clients (order, user, SKU, credit reference) and payment numbers chosen
//! by the service.
//!
//! Client identifiers are 1 to 64 bytes of letters, digits, `_` and `-` ([`ID_PATTERN`]): they
//! appear in URLs, in channel parameters, in database keys and in logs, so anything wider — NUL,
//! control characters, bidirectional overrides such as U+202E, spaces, non-ASCII — is refused at
//! the edge by this one rule.
//! Payment numbers are the channels' `out_trade_no`: `P`, the creation time to the second, and
//! 48 random bits — 27 characters, within WeChat Pay's 6 to 32 and Alipay's 64.

use serde::Serialize;
use thiserror::Error;

/// Longest client identifier.
pub const ID_BYTES_MAX: usize = 64;

/// The rule every client identifier follows, as the OpenAPI document states it.
pub const ID_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";

/// An identifier that breaks the rules.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{what} must be 1 to 64 bytes of letters, digits, _ and -")]
pub struct IdError {
    /// Which identifier.
    pub what: &'static str,
}

fn checked(text: &str, what: &'static str) -> Result<String, IdError> {
    let valid = !text.is_empty()
        && text.len() <= ID_BYTES_MAX
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(IdError { what })
    }
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates the identifier.
            pub fn parse(text: &str) -> Result<Self, IdError> {
                checked(text, $what).map(Self)
            }

            /// The identifier as given.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

identifier!(
    /// A merchant's order id, unique per tenant.
    OrderId,
    "order_id"
);
identifier!(
    /// A user of the merchant (wallet owner, entitlement holder).
    UserId,
    "user_id"
);
identifier!(
    /// A stock-keeping unit granted as an entitlement.
    Sku,
    "sku"
);
identifier!(
    /// A credit's reference (the caller's top-up id): the credit's business key, one credit
    /// per tenant, user and reference.
    Reference,
    "reference"
);

/// A fresh number for a ledger entry or grant: `prefix`, the UTC time to the second, and 48
/// random bits (27 characters).
pub fn new_number(prefix: char, unix_ms: i64) -> String {
    let format = time::macros::format_description!("[year][month][day][hour][minute][second]");
    let stamp = time::OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000))
        .ok()
        .and_then(|moment| moment.format(format).ok())
        .unwrap_or_else(|| "00000000000000".to_owned());
    let mut random = [0_u8; PAYMENT_NO_RANDOM_BYTES];
    getrandom::fill(&mut random).expect("the OS random number generator is available");
    format!("{prefix}{stamp}{}", hex::encode(random))
}

/// A fresh refund number for a refund created at `unix_ms` (the channel's `out_request_no` /
/// `out_refund_no`).
pub fn new_refund_no(unix_ms: i64) -> String {
    new_number('R', unix_ms)
}

/// A payment attempt's number, which is also the channel's `out_trade_no`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PaymentNo(String);

/// Random part of a payment number, in bytes (48 bits: collisions within one second are
/// vanishingly rare, and the database's unique key refuses one anyway).
const PAYMENT_NO_RANDOM_BYTES: usize = 6;

impl PaymentNo {
    /// A fresh number for a payment created at `unix_ms`.
    pub fn generate(unix_ms: i64) -> Self {
        Self(new_number('P', unix_ms))
    }

    /// Validates a payment number presented by a client or a channel (any identifier shape is
    /// accepted, so that numbers from an older format still resolve).
    pub fn parse(text: &str) -> Result<Self, IdError> {
        checked(text, "payment_no").map(Self)
    }

    /// The number.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_identifiers_are_short_and_url_safe() {
        assert!(OrderId::parse("o-1001_A").is_ok());
        assert!(OrderId::parse(&"o".repeat(64)).is_ok());
        for bad in [
            "",
            "o 1",
            "o/1",
            "订单",
            &"o".repeat(65),
            "o%20",
            "o\u{0}1",
            "o\n1",
            "o\u{7f}",
            "o\u{202e}1",
        ] {
            assert_eq!(
                OrderId::parse(bad),
                Err(IdError { what: "order_id" }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_client_identifier_follows_the_documented_pattern() {
        assert_eq!(ID_PATTERN, format!("^[A-Za-z0-9_-]{{1,{ID_BYTES_MAX}}}$"));
        assert_eq!(
            Reference::parse("top\u{0}up"),
            Err(IdError { what: "reference" })
        );
        assert!(Reference::parse("top-up_1").is_ok());
    }

    #[test]
    fn payment_numbers_fit_both_channels_and_differ() {
        let first = PaymentNo::generate(1_764_417_600_000);
        let second = PaymentNo::generate(1_764_417_600_000);
        assert_ne!(first, second);
        assert_eq!(first.as_str().len(), 27);
        assert!(first.as_str().starts_with("P20251129120000"));
        assert!(PaymentNo::parse(first.as_str()).is_ok());
    }
}

//! Body fields as clients send them, and the one rule that turns each into a domain value with
//! one status and one code, whichever route it arrives on:
//!
//! - an amount that is not an integer of 1 to [`AMOUNT_FEN_MAX`] fen — zero, negative, too
//!   large, beyond `i64`, a fraction, a string, `null` — is 422 `invalid-amount`;
//! - a client identifier (`order_id`, `user_id`, `sku`, `reference`) outside
//!   [`ID_PATTERN`](crate::domain::ids::ID_PATTERN) — NUL, control characters, U+202E, spaces,
//!   non-ASCII, over 64 bytes — is 422 `invalid-request`, its detail naming the field.
//!
//! Both are well-formed JSON that breaks the contract, hence 422; 400 stays for what is not
//! JSON at all (`malformed-json`) and for malformed headers.

use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ApiError;
use super::error::Code;
use crate::domain::ids::IdError;
use crate::domain::money::{AMOUNT_FEN_MAX, Amount};

/// An `amount` as it arrived: an integer that fits `i64`, or any other JSON value, kept apart so
/// that every wrong amount gets the same answer instead of a deserializer's type error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmountField {
    /// An integer within `i64` (not yet checked against the amount's range).
    Integer(i64),
    /// A fraction, an integer beyond `i64`, a string, a boolean, `null`, an array or an object.
    NotAnInteger,
}

impl AmountField {
    /// The amount, or 422 `invalid-amount`.
    pub fn parse(self) -> Result<Amount, ApiError> {
        let refuse = |shown: String| {
            ApiError::new(
                Code::InvalidAmount,
                format!("amount must be an integer of 1 to {AMOUNT_FEN_MAX} fen, got {shown}"),
            )
        };
        match self {
            AmountField::Integer(fen) => Amount::new(fen).map_err(|_| refuse(fen.to_string())),
            AmountField::NotAnInteger => Err(refuse("something else".to_owned())),
        }
    }
}

impl From<i64> for AmountField {
    fn from(fen: i64) -> Self {
        AmountField::Integer(fen)
    }
}

impl Serialize for AmountField {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            AmountField::Integer(fen) => serializer.serialize_i64(*fen),
            AmountField::NotAnInteger => serializer.serialize_unit(),
        }
    }
}

struct AmountVisitor;

impl<'de> Visitor<'de> for AmountVisitor {
    type Value = AmountField;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an amount in fen")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<AmountField, E> {
        Ok(AmountField::Integer(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<AmountField, E> {
        Ok(i64::try_from(value).map_or(AmountField::NotAnInteger, AmountField::Integer))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<AmountField, E> {
        // JSON integers beyond u64 arrive here too: never an amount.
        Ok(AmountField::NotAnInteger)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<AmountField, E> {
        Ok(AmountField::NotAnInteger)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<AmountField, E> {
        Ok(AmountField::NotAnInteger)
    }

    fn visit_unit<E: de::Error>(self) -> Result<AmountField, E> {
        Ok(AmountField::NotAnInteger)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<AmountField, A::Error> {
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(AmountField::NotAnInteger)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<AmountField, A::Error> {
        while entries.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(AmountField::NotAnInteger)
    }
}

impl<'de> Deserialize<'de> for AmountField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AmountVisitor)
    }
}

/// A client identifier, or 422 `invalid-request` naming the field.
pub(super) fn identifier<T>(parsed: Result<T, IdError>) -> Result<T, ApiError> {
    parsed.map_err(|error| ApiError::new(Code::InvalidRequest, error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount_of(json: &str) -> Result<i64, &'static str> {
        let field: AmountField = serde_json::from_str(json).map_err(|_| "not deserialized")?;
        field.parse().map(Amount::fen).map_err(|error| error.code())
    }

    #[test]
    fn every_wrong_amount_is_invalid_amount() {
        assert_eq!(amount_of("1"), Ok(1));
        assert_eq!(amount_of("10000000000"), Ok(AMOUNT_FEN_MAX));
        for wrong in [
            "0",
            "-1",
            "10000000001",
            "9223372036854775807",
            "18446744073709551615",
            "100000000000000000000000",
            "1.5",
            "1e3",
            "\"100\"",
            "true",
            "null",
            "[1]",
            "{\"fen\":1}",
        ] {
            assert_eq!(amount_of(wrong), Err("invalid-amount"), "{wrong}");
        }
    }
}

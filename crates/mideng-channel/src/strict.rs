//! Parse once, refusing what is ambiguous: the one way every channel message is read.
//!
//! A message that is verified and then read must be verified over, and read from, the same
//! parsed value. When the parser lets a name appear twice, the verifier and the reader can
//! disagree about which occurrence counts — one signs over the last `out_trade_no`, the other
//! acts on the first — and a genuine signature then vouches for values nobody signed (the
//! classic parameter-pollution hole). So every form and every JSON object the channels exchange
//! is parsed here into a value in which each name appears once, and a repeated name refuses
//! the whole message.
//!
//! - [`Form`] — `application/x-www-form-urlencoded` (Alipay notifies, gateway parameters, query
//!   strings): a map from name to value, built from one or more sources (query string and body),
//!   refusing a name given twice anywhere.
//! - [`json`] / [`check_json`] — JSON text parsed with `serde_json` after a walk that refuses
//!   an object with a repeated key at any depth (`serde_json` itself keeps the last one).

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use thiserror::Error;

/// Largest form accepted (bytes of one source): notifies and gateway calls are a few KiB.
pub const FORM_BYTES_MAX: usize = 64 * 1024;
/// Most parameters one form may carry (notifies carry about 30).
pub const FORM_FIELDS_MAX: usize = 256;

/// Why a message was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StrictError {
    /// The same name appears more than once.
    #[error("the name {0:?} appears more than once")]
    Repeated(String),
    /// Not valid form encoding, or an empty name.
    #[error("malformed form encoding")]
    MalformedForm,
    /// Larger than [`FORM_BYTES_MAX`] or with more than [`FORM_FIELDS_MAX`] fields.
    #[error("form too large")]
    TooLarge,
    /// Not valid JSON (or not of the expected shape).
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
}

/// A form in which every name appears once. Values are URL-decoded; iteration is in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Form {
    fields: BTreeMap<String, String>,
}

impl Form {
    /// Parses one form.
    pub fn parse(bytes: &[u8]) -> Result<Self, StrictError> {
        Self::parse_sources(&[bytes])
    }

    /// Parses several sources (a query string and a body) into one form; a name given twice,
    /// in one source or across them, refuses the whole.
    pub fn parse_sources(sources: &[&[u8]]) -> Result<Self, StrictError> {
        let mut fields = BTreeMap::new();
        for source in sources {
            if source.len() > FORM_BYTES_MAX {
                return Err(StrictError::TooLarge);
            }
            let pairs: Vec<(String, String)> =
                serde_urlencoded::from_bytes(source).map_err(|_| StrictError::MalformedForm)?;
            for (name, value) in pairs {
                if name.is_empty() {
                    return Err(StrictError::MalformedForm);
                }
                if fields.contains_key(&name) {
                    return Err(StrictError::Repeated(name));
                }
                if fields.len() == FORM_FIELDS_MAX {
                    return Err(StrictError::TooLarge);
                }
                fields.insert(name, value);
            }
        }
        Ok(Self { fields })
    }

    /// The value of `name`, if present (possibly empty).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// The value of `name` if present and not empty.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|value| !value.is_empty())
    }

    /// Every field, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// Refuses JSON text that is malformed or has an object with a repeated key at any depth.
pub fn check_json(text: &str) -> Result<(), StrictError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    UniqueKeys
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
        .map_err(|error| {
            let message = error.to_string();
            match message.strip_prefix(REPEATED_PREFIX) {
                Some(rest) => {
                    StrictError::Repeated(rest.split(" at line").next().unwrap_or(rest).to_owned())
                }
                None => StrictError::MalformedJson(message),
            }
        })
}

/// Parses JSON text into `T` after [`check_json`], so that `T` is read from a text in which
/// every key is unambiguous.
pub fn json<T: DeserializeOwned>(text: &str) -> Result<T, StrictError> {
    check_json(text)?;
    serde_json::from_str(text).map_err(|error| StrictError::MalformedJson(error.to_string()))
}

/// [`json`] over bytes that must be UTF-8.
pub fn json_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StrictError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| StrictError::MalformedJson("not UTF-8".to_owned()))?;
    json(text)
}

const REPEATED_PREFIX: &str = "repeated key ";

/// A deserializer walk that accepts any JSON and fails on an object with a repeated key.
/// `serde_json` bounds the nesting depth (128) itself.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        while items.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = entries.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format_args!(
                    "{REPEATED_PREFIX}{key}"
                )));
            }
            entries.next_value_seed(UniqueKeys)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_refuses_a_repeated_name_in_one_source_or_across_sources() {
        assert_eq!(
            Form::parse(b"a=1&b=2&a=3"),
            Err(StrictError::Repeated("a".to_owned()))
        );
        assert_eq!(
            Form::parse_sources(&[b"a=1", b"b=2&a=1"]),
            Err(StrictError::Repeated("a".to_owned()))
        );
        let form = Form::parse(b"b=%E6%94%AF&a=&c=x+y").expect("valid");
        assert_eq!(form.get("a"), Some(""));
        assert_eq!(form.non_empty("a"), None);
        assert_eq!(form.get("b"), Some("支"));
        assert_eq!(form.get("c"), Some("x y"));
        assert_eq!(
            form.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(Form::parse(b"=1"), Err(StrictError::MalformedForm));
    }

    #[test]
    fn json_with_a_repeated_key_at_any_depth_is_refused() {
        assert_eq!(
            check_json(r#"{"a":1,"a":2}"#),
            Err(StrictError::Repeated("a".to_owned()))
        );
        assert_eq!(
            check_json(r#"{"x":[{"b":{"c":1,"c":1}}]}"#),
            Err(StrictError::Repeated("c".to_owned()))
        );
        assert_eq!(
            check_json(r#"{"a":{"a":1},"b":[1,"a",null,true,1.5]}"#),
            Ok(())
        );
        assert!(matches!(
            check_json(r#"{"a":1} trailing"#),
            Err(StrictError::MalformedJson(_))
        ));
        assert!(matches!(
            check_json("{"),
            Err(StrictError::MalformedJson(_))
        ));
        let value: serde_json::Value = json(r#"{"k":"v"}"#).expect("valid");
        assert_eq!(value["k"], "v");
    }
}

//! Identification: what makes two requests "the same business intent".
//!
//! A request is identified by its [`Scope`] (tenant + operation) and its [`IdempotencyKey`];
//! its content is summarised by a [`Fingerprint`], so that a key reused for a different
//! request is detected instead of silently replaying the wrong answer.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::InvalidInput;
use crate::limits::{KEY_BYTES_MAX, NAME_BYTES_MAX, SCOPE_PART_BYTES_MAX};

/// Bytes 0x21..=0x7E: printable ASCII without the space.
fn is_visible_ascii(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_graphic())
}

/// Letters, digits and `_ . : -`, the alphabet of tenant and operation names.
fn is_identifier(text: &str) -> bool {
    text.bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b':' | b'-'))
}

fn checked(
    text: &str,
    what: &'static str,
    max_bytes: usize,
    alphabet: &'static str,
    allowed: fn(&str) -> bool,
) -> Result<String, InvalidInput> {
    if text.is_empty() || text.len() > max_bytes || !allowed(text) {
        return Err(InvalidInput::Malformed {
            what,
            max_bytes,
            alphabet,
        });
    }
    Ok(text.to_owned())
}

/// A short, non-reversible label for a key, safe to put in logs and metrics: keys are chosen by
/// callers and may carry user data, so logs carry this instead of the key itself.
pub fn redact(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!("sha256:{}", hex::encode(&digest[..6]))
}

/// A caller-chosen idempotency key: 1 to 255 bytes of visible ASCII (0x21–0x7E).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a key as received from a caller.
    pub fn parse(text: &str) -> Result<Self, InvalidInput> {
        checked(
            text,
            "idempotency key",
            KEY_BYTES_MAX,
            "visible ASCII",
            is_visible_ascii,
        )
        .map(Self)
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A label for logs that does not reveal the key.
    pub fn redacted(&self) -> String {
        redact(&self.0)
    }
}

/// Keys are redacted in `Debug` so that a stray `{:?}` cannot leak one into a log.
impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "IdempotencyKey({})", self.redacted())
    }
}

/// A validated name for a lock, a dedup entry or a state-machine entity: 1 to 255 bytes of
/// visible ASCII.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// Validates a name.
    pub fn parse(text: &str) -> Result<Self, InvalidInput> {
        checked(
            text,
            "name",
            NAME_BYTES_MAX,
            "visible ASCII",
            is_visible_ascii,
        )
        .map(Self)
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// Where a key lives: keys of different tenants, or of different operations of one tenant,
/// never collide, so one tenant can never receive another's replay.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    tenant: String,
    operation: String,
}

/// Tenant names starting with this character are reserved for the toolkit's own namespaces
/// (the dedup table lives under one), so user tenants cannot collide with them.
pub(crate) const RESERVED_TENANT: &str = "~dedup";

impl Scope {
    /// A scope for `operation` (for example `payments.create`) of `tenant`. Both are 1 to 64
    /// bytes of letters, digits and `_ . : -`.
    pub fn new(tenant: &str, operation: &str) -> Result<Self, InvalidInput> {
        let tenant = checked(
            tenant,
            "tenant",
            SCOPE_PART_BYTES_MAX,
            "letters, digits and _ . : -",
            is_identifier,
        )?;
        let operation = checked(
            operation,
            "operation",
            SCOPE_PART_BYTES_MAX,
            "letters, digits and _ . : -",
            is_identifier,
        )?;
        Ok(Self { tenant, operation })
    }

    /// The dedup table's scope for one kind of work; its tenant cannot be a user tenant.
    pub(crate) fn dedup(kind: &str) -> Result<Self, InvalidInput> {
        let mut scope = Self::new("reserved", kind)?;
        scope.tenant = RESERVED_TENANT.to_owned();
        Ok(scope)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The operation.
    pub fn operation(&self) -> &str {
        &self.operation
    }
}

/// SHA-256 of a canonical request. Two requests with the same key must have the same
/// fingerprint, or the second is refused as a mismatch rather than replayed.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of an HTTP request: method, route template and body. A JSON body is
    /// canonicalised first (see [`canonical_json`]), so key order and whitespace do not change
    /// the fingerprint; any other body is taken byte for byte.
    pub fn of_request(method: &str, route: &str, body: &[u8]) -> Self {
        let canonical_body = match serde_json::from_slice::<Value>(body) {
            Ok(value) => canonical_json(&value).into_bytes(),
            Err(_) => body.to_vec(),
        };
        Self::of_parts(&[method.as_bytes(), route.as_bytes(), &canonical_body])
    }

    /// The fingerprint of a JSON value under a label (for non-HTTP callers).
    pub fn of_json(label: &str, value: &Value) -> Self {
        Self::of_parts(&[label.as_bytes(), canonical_json(value).as_bytes()])
    }

    /// The fingerprint of several byte strings. Each part is length-prefixed, so that
    /// `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// Parses the 64-digit hexadecimal form that stores persist.
    pub fn from_hex(text: &str) -> Result<Self, InvalidInput> {
        let mut bytes = [0_u8; 32];
        hex::decode_to_slice(text, &mut bytes).map_err(|_| InvalidInput::Fingerprint)?;
        Ok(Self(bytes))
    }

    /// The 64-digit lowercase hexadecimal form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Fingerprint({})", &self.to_hex()[..12])
    }
}

/// JSON without insignificant whitespace and with object keys sorted by code point, so that
/// equal documents have equal text. Numbers and strings are written as serde_json writes them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|left, right| left.0.cmp(right.0));
            out.push('{');
            for (index, (name, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_up_to_255_bytes() {
        assert!(IdempotencyKey::parse("PAY_20240520_8891_a3f2c1").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
        assert!(IdempotencyKey::parse("tab\t").is_err());
        assert!(IdempotencyKey::parse("ключ").is_err());
    }

    #[test]
    fn scopes_refuse_reserved_and_odd_characters() {
        assert!(Scope::new("t1", "payments.create").is_ok());
        assert!(Scope::new("~dedup", "x").is_err());
        assert!(Scope::new("t1", "").is_err());
        assert!(Scope::new("t 1", "x").is_err());
        assert_eq!(
            Scope::dedup("grant").map(|s| s.tenant().to_owned()).ok(),
            Some(RESERVED_TENANT.to_owned())
        );
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_a_fingerprint() {
        let first =
            Fingerprint::of_request("POST", "/v1/pay", br#"{"a":1,"b":{"y":[1,2],"x":"s"}}"#);
        let second = Fingerprint::of_request(
            "POST",
            "/v1/pay",
            b" { \"b\" : {\"x\":\"s\", \"y\":[1, 2]},\n\"a\":1 } ",
        );
        assert_eq!(first, second);
        let other =
            Fingerprint::of_request("POST", "/v1/pay", br#"{"a":2,"b":{"y":[1,2],"x":"s"}}"#);
        assert_ne!(first, other);
        let other_route =
            Fingerprint::of_request("POST", "/v1/refund", br#"{"a":1,"b":{"y":[1,2],"x":"s"}}"#);
        assert_ne!(first, other_route);
    }

    #[test]
    fn fingerprint_parts_are_unambiguous_and_round_trip_through_hex() {
        let split_one = Fingerprint::of_parts(&[b"ab", b"c"]);
        let split_two = Fingerprint::of_parts(&[b"a", b"bc"]);
        assert_ne!(split_one, split_two);
        assert_eq!(
            Fingerprint::from_hex(&split_one.to_hex()).ok(),
            Some(split_one)
        );
        assert!(Fingerprint::from_hex("zz").is_err());
    }

    #[test]
    fn canonical_json_reads_back_as_itself_even_for_long_decimals() {
        // Found by the canonical_json fuzz target: without exact float parsing, the canonical
        // text of this document changed when it was parsed and written again.
        let value: Value =
            serde_json::from_str("[1e2, -0.0, 123456789.01234567890, 5.1]").expect("json");
        let canonical = canonical_json(&value);
        let again: Value = serde_json::from_str(&canonical).expect("json");
        assert_eq!(canonical_json(&again), canonical);
    }

    #[test]
    fn canonical_json_sorts_keys_recursively() {
        let value: Value =
            serde_json::from_str(r#"{"b":[{"d":1,"c":2}],"a":"é"}"#).unwrap_or(Value::Null);
        assert_eq!(canonical_json(&value), r#"{"a":"é","b":[{"c":2,"d":1}]}"#);
    }

    #[test]
    fn redaction_hides_the_key_but_is_stable() {
        let key = IdempotencyKey::parse("secret-user-42").unwrap_or_else(|_| unreachable!());
        assert_eq!(key.redacted(), key.redacted());
        assert!(!format!("{key:?}").contains("secret"));
    }
}

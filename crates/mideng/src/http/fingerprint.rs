//! What a request is, for its record: its key when the body carries it
//! ([`super::RouteConfigBuilder::key_from_body`]) and its fingerprint (method, route, path,
//! query, chosen headers and the body, whole or by named fields).

use std::collections::HashSet;
use std::fmt;

use axum::extract::MatchedPath;
use axum::http::HeaderValue;
use axum::http::request::Parts;

use super::config::RouteConfig;
use crate::key::{Fingerprint, IdempotencyKey};

/// Whether `body` is JSON that names a member twice in one object, at any depth. A body that
/// is not JSON is not ambiguous here: the fields of such a body are absent.
pub fn repeats_a_member(body: &[u8]) -> bool {
    // A repetition is the one data error the walk below raises; a body that is no JSON to
    // serde_json (its syntax, invalid UTF-8, nesting past its limit) fails as syntax or EOF.
    // The walk stops at the first error, so a repetition met before a syntax error further on
    // is confirmed by reading the whole body (only then, so only for a refused body).
    match serde_json::from_slice::<Unrepeated>(body) {
        Ok(Unrepeated) => false,
        Err(error) if error.classify() == serde_json::error::Category::Data => {
            serde_json::from_slice::<serde_json::Value>(body).is_ok()
        }
        Err(_) => false,
    }
}

/// A JSON value accepted only when no object in it names a member twice.
struct Unrepeated;

impl<'de> serde::Deserialize<'de> for Unrepeated {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnrepeatedVisitor)
    }
}

struct UnrepeatedVisitor;

impl<'de> serde::de::Visitor<'de> for UnrepeatedVisitor {
    type Value = Unrepeated;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value whose objects name each member once")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_unit<E>(self) -> Result<Unrepeated, E> {
        Ok(Unrepeated)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Unrepeated, A::Error> {
        while items.next_element::<Unrepeated>()?.is_some() {}
        Ok(Unrepeated)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut members: A,
    ) -> Result<Unrepeated, A::Error> {
        let mut names = HashSet::new();
        while let Some(name) = members.next_key::<String>()? {
            if !names.insert(name) {
                return Err(serde::de::Error::custom("a member named twice"));
            }
            members.next_value::<Unrepeated>()?;
        }
        Ok(Unrepeated)
    }
}

/// The key at `pointer` of a JSON body: a string, or an integer as its decimal digits. `None`
/// when the body is not JSON or has no such field; `Err` when the field is there but is not a
/// valid key (another JSON type, or a string that [`IdempotencyKey::parse`] refuses).
pub(super) fn key_in_body(body: &[u8], pointer: &str) -> Result<Option<IdempotencyKey>, ()> {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(None);
    };
    let text = match document.pointer(pointer) {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(text)) => text.clone(),
        Some(serde_json::Value::Number(number)) if number.is_i64() || number.is_u64() => {
            number.to_string()
        }
        Some(_) => return Err(()),
    };
    IdempotencyKey::parse(&text).map(Some).map_err(|_| ())
}

/// The body's part of the fingerprint: the whole body, or only the configured fields of a JSON
/// body (each as `pointer: value`, `null` when absent).
fn body_fingerprint(fields: &[String], body: &[u8]) -> Fingerprint {
    if fields.is_empty() {
        return Fingerprint::of_request("", "", body);
    }
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Fingerprint::of_request("", "", body);
    };
    let picked: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|pointer| {
            let value = document
                .pointer(pointer)
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            (pointer.clone(), value)
        })
        .collect();
    let bytes = serde_json::to_vec(&picked).unwrap_or_default();
    Fingerprint::of_request("", "", &bytes)
}

pub(super) fn fingerprint_of(config: &RouteConfig, parts: &Parts, body: &[u8]) -> Fingerprint {
    let wanted = &config.fingerprint;
    let method = if wanted.method {
        parts.method.as_str()
    } else {
        ""
    };
    let route = match (wanted.path, parts.extensions.get::<MatchedPath>()) {
        (true, Some(matched)) => matched.as_str(),
        _ => "",
    };
    let path = if wanted.path { parts.uri.path() } else { "" };
    let query = if wanted.query {
        parts.uri.query().unwrap_or("")
    } else {
        ""
    };
    let canonical_body = if wanted.body {
        body_fingerprint(&wanted.body_fields, body)
    } else {
        Fingerprint::of_parts(&[])
    };
    let mut pieces: Vec<&[u8]> = vec![
        method.as_bytes(),
        route.as_bytes(),
        path.as_bytes(),
        query.as_bytes(),
    ];
    let header_values: Vec<String> = wanted
        .headers
        .iter()
        .map(|name| {
            let values: Vec<&[u8]> = parts
                .headers
                .get_all(name)
                .iter()
                .map(HeaderValue::as_bytes)
                .collect();
            format!("{name}:{}", hex_join(&values))
        })
        .collect();
    pieces.extend(header_values.iter().map(String::as_bytes));
    let body_hex = canonical_body.to_hex();
    pieces.push(body_hex.as_bytes());
    Fingerprint::of_parts(&pieces)
}

fn hex_join(values: &[&[u8]]) -> String {
    values.iter().map(hex::encode).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::repeats_a_member;

    #[test]
    fn only_json_that_names_a_member_twice_is_repeated() {
        assert!(repeats_a_member(br#"{"a":1,"a":2}"#));
        assert!(repeats_a_member(br#"{"m":[{"a":1,"\u0061":2}]}"#));
        assert!(!repeats_a_member(br#"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#));
        // Found by the fuzz target: a repetition before a syntax error, and a key that is not
        // UTF-8, are bodies that are no JSON, never "ambiguous".
        assert!(!repeats_a_member(br#"{"m":[{"a":1,"\u0061":2}W}"#));
        assert!(!repeats_a_member(b"{\"m\":[{\"a\":1,\"}\xf4\\u0061\":2}]}"));
        assert!(!repeats_a_member(b"not json"));
    }
}

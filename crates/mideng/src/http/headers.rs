//! Reading the idempotency request headers, once, into values that refuse what is ambiguous.
//!
//! A key may arrive as `Idempotency-Key` (the IETF draft: an RFC 8941 structured-field string,
//! `"…"`; or a plain value, as Stripe's clients send it) or as the older `X-Idempotent-Key`.
//! Anything that could name two keys is refused rather than resolved by picking one: a header
//! repeated on several field lines, or both spellings present (even with equal values, since a
//! client or proxy that sends both is not saying one thing). A value that begins with `"` is a
//! structured string and must parse as exactly one, with no parameters and nothing after it;
//! its escapes (`\"`, `\\`) are decoded before the key rules apply. A one-time token arrives as
//! `Idempotency-Token` or `Idempotent-Token`, under the same rule: one of them, once.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use sfv::visitor::{ItemVisitor, ParameterVisitor};
use sfv::{BareItemFromInput, KeyRef};
use thiserror::Error;

use crate::error::InvalidInput;
use crate::key::IdempotencyKey;
use crate::token::Token;

/// The request header that carries the key (IETF draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The older header name that some clients send; accepted too, but never beside the other.
pub const X_IDEMPOTENT_KEY: HeaderName = HeaderName::from_static("x-idempotent-key");
/// The request header that carries a one-time submit token.
pub const IDEMPOTENCY_TOKEN: HeaderName = HeaderName::from_static("idempotency-token");
/// The token header as some clients spell it (the spelling of the seeds' token scheme);
/// accepted too, but never beside the other.
pub const IDEMPOTENT_TOKEN: HeaderName = HeaderName::from_static("idempotent-token");

/// Why the key or token headers of a request were refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The header came on more than one field line.
    #[error("{header} was sent more than once")]
    Repeated {
        /// The header's name.
        header: &'static str,
    },
    /// Both `Idempotency-Key` and `X-Idempotent-Key` were sent.
    #[error("Idempotency-Key and X-Idempotent-Key were both sent")]
    BothSpellings,
    /// Both `Idempotency-Token` and `Idempotent-Token` were sent.
    #[error("Idempotency-Token and Idempotent-Token were both sent")]
    BothTokenSpellings,
    /// The value begins with `"` but is not one RFC 8941 string (unbalanced quote, a bad
    /// escape, parameters or anything after the closing quote).
    #[error("the value is not one structured-field string")]
    NotAString,
    /// The value is not ASCII text.
    #[error("the value is not ASCII text")]
    NotText,
    /// The value breaks the key's or the token's own rules.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
}

/// The one value of `name`, if any; two or more field lines are refused.
fn single<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<Option<&'a HeaderValue>, HeaderError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(HeaderError::Repeated { header: label });
    }
    Ok(first)
}

/// Reads the request's key: `None` when neither header is present.
pub fn read_idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, HeaderError> {
    let standard = single(headers, &IDEMPOTENCY_KEY, "Idempotency-Key")?;
    let older = single(headers, &X_IDEMPOTENT_KEY, "X-Idempotent-Key")?;
    match (standard, older) {
        (Some(_), Some(_)) => Err(HeaderError::BothSpellings),
        (Some(value), None) | (None, Some(value)) => parse_key_value(value.as_bytes()).map(Some),
        (None, None) => Ok(None),
    }
}

/// Parses one key field value: a structured string when it begins with `"`, else the plain
/// value as it stands.
pub fn parse_key_value(value: &[u8]) -> Result<IdempotencyKey, HeaderError> {
    if value.first() == Some(&b'"') {
        let text = sfv::Parser::new(value)
            .parse_item_with_visitor(StringOnly)
            .map_err(|_| HeaderError::NotAString)?;
        return Ok(IdempotencyKey::parse(&text)?);
    }
    let text = std::str::from_utf8(value).map_err(|_| HeaderError::NotText)?;
    Ok(IdempotencyKey::parse(text)?)
}

/// Reads the request's one-time token, from `Idempotency-Token` or `Idempotent-Token` (never
/// both): `None` when absent.
pub fn read_idempotency_token(headers: &HeaderMap) -> Result<Option<Token>, HeaderError> {
    let standard = single(headers, &IDEMPOTENCY_TOKEN, "Idempotency-Token")?;
    let other = single(headers, &IDEMPOTENT_TOKEN, "Idempotent-Token")?;
    let value = match (standard, other) {
        (Some(_), Some(_)) => return Err(HeaderError::BothTokenSpellings),
        (Some(value), None) | (None, Some(value)) => value,
        (None, None) => return Ok(None),
    };
    let text = value.to_str().map_err(|_| HeaderError::NotText)?;
    Ok(Some(Token::parse(text)?))
}

/// Accepts an sf-item that is a string without parameters.
struct StringOnly;

/// The item was not a bare string, or carried parameters.
#[derive(Debug, Error)]
#[error("expected a structured-field string without parameters")]
struct NotAPlainString;

impl<'de> ItemVisitor<'de> for StringOnly {
    type Out = String;
    type Error = NotAPlainString;

    fn bare_item(
        self,
        bare_item: BareItemFromInput<'de>,
    ) -> Result<impl ParameterVisitor<'de, Out = Self::Out>, Self::Error> {
        match bare_item {
            BareItemFromInput::String(text) => Ok(NoParameters(text.as_str().to_owned())),
            _ => Err(NotAPlainString),
        }
    }
}

/// Refuses any parameter: the draft defines none, and a key with parameters is not one this
/// service can tell apart from the same key without them.
struct NoParameters(String);

impl<'de> ParameterVisitor<'de> for NoParameters {
    type Out = String;
    type Error = NotAPlainString;

    fn parameter(
        &mut self,
        _key: &'de KeyRef,
        _value: BareItemFromInput<'de>,
    ) -> Result<(), Self::Error> {
        Err(NotAPlainString)
    }

    fn finish(self) -> Result<Self::Out, Self::Error> {
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(value: &[u8]) -> Result<String, HeaderError> {
        parse_key_value(value).map(|key| key.as_str().to_owned())
    }

    #[test]
    fn structured_strings_are_decoded_and_plain_values_taken_as_they_stand() {
        assert_eq!(key_of(b"\"abc\"").as_deref(), Ok("abc"));
        assert_eq!(key_of(br#""a\"b""#).as_deref(), Ok("a\"b"));
        assert_eq!(key_of(br#""a\\b""#).as_deref(), Ok("a\\b"));
        assert_eq!(key_of(b"plain-1").as_deref(), Ok("plain-1"));
        assert_eq!(key_of(b"a\"b").as_deref(), Ok("a\"b"));
    }

    #[test]
    fn broken_structured_strings_are_refused() {
        for value in [
            &b"\"abc"[..],
            b"\"abc\"x",
            b"\"abc\", \"def\"",
            b"\"abc\";p=1",
            br#""a\b""#,
            b"\"\"",
            b"\"has space\"",
        ] {
            assert!(
                key_of(value).is_err(),
                "{:?} must be refused",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn a_repeated_or_doubly_spelled_key_is_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(read_idempotency_key(&headers), Ok(None));
        headers.append(IDEMPOTENCY_KEY, HeaderValue::from_static("a"));
        headers.append(IDEMPOTENCY_KEY, HeaderValue::from_static("a"));
        assert!(matches!(
            read_idempotency_key(&headers),
            Err(HeaderError::Repeated { .. })
        ));
        let mut headers = HeaderMap::new();
        headers.append(IDEMPOTENCY_KEY, HeaderValue::from_static("a"));
        headers.append(X_IDEMPOTENT_KEY, HeaderValue::from_static("a"));
        assert_eq!(
            read_idempotency_key(&headers),
            Err(HeaderError::BothSpellings)
        );
    }

    #[test]
    fn a_token_comes_under_either_spelling_but_never_both() {
        let token = "tok_0123456789abcdef0123456789abcdef";
        for name in [IDEMPOTENCY_TOKEN, IDEMPOTENT_TOKEN] {
            let mut headers = HeaderMap::new();
            headers.append(name.clone(), HeaderValue::from_static(token));
            let read =
                read_idempotency_token(&headers).map(|token| token.map(|t| t.as_str().to_owned()));
            assert_eq!(read, Ok(Some(token.to_owned())), "{name}");
        }
        let mut headers = HeaderMap::new();
        headers.append(IDEMPOTENCY_TOKEN, HeaderValue::from_static(token));
        headers.append(IDEMPOTENT_TOKEN, HeaderValue::from_static(token));
        assert_eq!(
            read_idempotency_token(&headers).map(|_| ()),
            Err(HeaderError::BothTokenSpellings)
        );
        let mut headers = HeaderMap::new();
        headers.append(IDEMPOTENT_TOKEN, HeaderValue::from_static(token));
        headers.append(IDEMPOTENT_TOKEN, HeaderValue::from_static(token));
        assert!(matches!(
            read_idempotency_token(&headers),
            Err(HeaderError::Repeated { .. })
        ));
    }
}

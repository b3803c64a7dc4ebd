//! Header values → the key reader. Never panics; a key is accepted only when exactly one value
//! was sent, it is 1–255 bytes of visible ASCII, and writing it back as an RFC 8941 string
//! reads as the same key.
//!
//! Input: the first byte picks the header names (all `Idempotency-Key`, all `X-Idempotent-Key`
//! or alternating); the rest is split on `\n` into one field line per piece.

#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mideng::http::{IDEMPOTENCY_KEY, X_IDEMPOTENT_KEY, read_idempotency_key};

fuzz_target!(|data: &[u8]| {
    let Some((&layout, rest)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    for (index, piece) in rest.split(|&byte| byte == b'\n').enumerate() {
        let Ok(value) = HeaderValue::from_bytes(piece) else {
            return;
        };
        let name = match (layout % 3, index % 2) {
            (0, _) | (2, 0) => IDEMPOTENCY_KEY,
            _ => X_IDEMPOTENT_KEY,
        };
        headers.append(name, value);
    }
    let Ok(Some(key)) = read_idempotency_key(&headers) else {
        return;
    };
    assert_eq!(
        headers.len(),
        1,
        "a key was accepted from several field lines"
    );
    let text = key.as_str();
    assert!((1..=255).contains(&text.len()), "{text:?}");
    assert!(
        text.bytes().all(|byte| (0x21..=0x7e).contains(&byte)),
        "{text:?}"
    );

    let string = sfv::StringRef::from_str(text).expect("visible ASCII is an sf-string");
    let serialised = sfv::ItemSerializer::new().bare_item(string).finish();
    let mut again = HeaderMap::new();
    again.insert(
        IDEMPOTENCY_KEY,
        HeaderValue::from_str(&serialised).expect("an sf-string is a header value"),
    );
    let reread = read_idempotency_key(&again)
        .expect("the written key reads")
        .expect("present");
    assert_eq!(reread, key, "{serialised}");
});

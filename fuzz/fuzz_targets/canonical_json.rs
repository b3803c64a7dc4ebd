//! Request bodies → fingerprints. Never panics; for a JSON body, another spelling of the same
//! document (keys in another order, other whitespace) has the same fingerprint, and the
//! canonical text is a fixed point (canonicalising it again changes nothing).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mideng::key::{Fingerprint, canonical_json};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let fingerprint = Fingerprint::of_request("POST", "/v1/orders", data);
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let canonical = canonical_json(&value);
    let reparsed: Value = serde_json::from_str(&canonical).expect("canonical JSON is JSON");
    assert_eq!(
        canonical_json(&reparsed),
        canonical,
        "canonical text is stable"
    );
    assert_eq!(
        Fingerprint::of_request("POST", "/v1/orders", canonical.as_bytes()),
        fingerprint,
        "the canonical text names the same request"
    );
    let mut respelled = String::new();
    respell(&value, &mut respelled);
    assert_eq!(
        Fingerprint::of_request("POST", "/v1/orders", respelled.as_bytes()),
        fingerprint,
        "{respelled}"
    );
});

/// The document with object keys in reverse order and whitespace around every token.
fn respell(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push_str("{\n ");
            for (index, (name, item)) in map.iter().rev().enumerate() {
                if index > 0 {
                    out.push_str(" ,\t");
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push_str(" : ");
                respell(item, out);
            }
            out.push_str("\r\n}");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(" , ");
                }
                respell(item, out);
            }
            out.push_str(" ]");
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

//! Bytes → the layer's check for a JSON body that names a member twice. Never panics; it says
//! "repeated" only of JSON (so a body that is not JSON is never refused for it), and never of a
//! document that a `serde_json::Value` wrote (whose objects name each member once). Any JSON
//! value written twice under one name of a new object is "repeated" (unless that one more
//! level passes the parser's nesting limit, when it is no JSON at all).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mideng::http::repeats_a_member;

fuzz_target!(|data: &[u8]| {
    let repeated = repeats_a_member(data);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        assert!(!repeated, "not JSON, yet judged repeated");
        return;
    };
    let written = serde_json::to_vec(&value).expect("a value writes");
    assert!(!repeats_a_member(&written), "a written value judged repeated");
    let mut doubled = b"{\"k\":".to_vec();
    doubled.extend_from_slice(&written);
    doubled.extend_from_slice(b",\"k\":");
    doubled.extend_from_slice(&written);
    doubled.push(b'}');
    if serde_json::from_slice::<serde_json::Value>(&doubled).is_ok() {
        assert!(repeats_a_member(&doubled), "a member written twice not judged repeated");
    }
});

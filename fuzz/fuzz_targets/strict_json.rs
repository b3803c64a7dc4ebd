//! The strict JSON reader every channel message goes through. Properties: it never panics; what
//! it accepts `serde_json` parses; what it accepts, written back by `serde_json` (which keeps
//! one value per key), is accepted again and means the same — so no accepted text can carry a
//! key whose copies a later reader might pick differently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mideng_channel::strict;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if strict::check_json(text).is_ok() {
        let value: serde_json::Value =
            serde_json::from_str(text).expect("accepted text is JSON");
        let written = value.to_string();
        assert!(strict::check_json(&written).is_ok());
        let again: serde_json::Value = strict::json(&written).expect("accepted again");
        assert_eq!(again, value);
    }
});

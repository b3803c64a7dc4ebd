//! Alipay yuan strings → fen. Accepted ⇒ within the channel's range, and the canonical yuan
//! string of the result parses back to the same fen.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mideng_channel::money::{AMOUNT_FEN_MAX, AMOUNT_FEN_MIN, fen_to_yuan, yuan_to_fen};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(fen) = yuan_to_fen(text) else {
        return;
    };
    assert!(
        (AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen),
        "{text:?} accepted as {fen} fen"
    );
    let canonical = fen_to_yuan(fen).expect("an accepted amount can be written");
    assert_eq!(yuan_to_fen(&canonical), Ok(fen), "{text:?} → {canonical:?}");
    let (whole, fraction) = canonical.split_once('.').expect("two decimals");
    assert!(!whole.is_empty() && fraction.len() == 2, "{canonical:?}");
});

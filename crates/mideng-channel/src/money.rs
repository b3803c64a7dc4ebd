//! Exact conversion between integer fen (the service's unit) and Alipay's yuan strings.
//!
//! The grammar accepted is deliberately narrower than any decimal library's: one to nine
//! integer digits (no sign, no leading `+`, no exponent) and at most two decimals, within the
//! channel's range `0.01 ..= 100000000.00`. Parsing is digit arithmetic on `i64`; there is no
//! float anywhere.

use thiserror::Error;

/// The smallest amount a channel accepts, in fen: one fen, the smallest unit either channel
/// charges.
pub const AMOUNT_FEN_MIN: i64 = 1;
/// The largest amount a channel accepts, in fen: 100 000 000.00 yuan, the top of Alipay's
/// `total_amount` range, and WeChat Pay is held to the same bound so that both channels take
/// the same orders. This is the only definition: the service refuses a larger order before it
/// calls a channel and the simulator refuses one as the channel would, so no amount the
/// service accepts is refused by the channel. It is also why a yuan string has at most nine
/// integer digits, and it leaves sums of many amounts far below `i64::MAX`.
pub const AMOUNT_FEN_MAX: i64 = 10_000_000_000;

/// An amount that is not a valid channel amount.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{0:?} is not an amount of 0.01 to 100000000.00 yuan with at most two decimals")]
pub struct AmountError(pub String);

/// Formats fen as a yuan string with exactly two decimals (`46000` → `"460.00"`).
pub fn fen_to_yuan(fen: i64) -> Result<String, AmountError> {
    if !(AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen) {
        return Err(AmountError(fen.to_string()));
    }
    Ok(format!("{}.{:02}", fen / 100, fen % 100))
}

/// Parses a yuan string (`"460"`, `"460.5"`, `"460.00"`) into fen.
pub fn yuan_to_fen(text: &str) -> Result<i64, AmountError> {
    let refuse = || AmountError(text.to_owned());
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty()
        || whole.len() > 9
        || !digits_only(whole)
        || fraction.len() > 2
        || !digits_only(fraction)
        || (text.contains('.') && fraction.is_empty())
    {
        return Err(refuse());
    }
    let whole: i64 = whole.parse().map_err(|_| refuse())?;
    let fraction: i64 = format!("{fraction:0<2}").parse().map_err(|_| refuse())?;
    let fen = whole
        .checked_mul(100)
        .and_then(|fen| fen.checked_add(fraction))
        .ok_or_else(refuse)?;
    if (AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen) {
        Ok(fen)
    } else {
        Err(refuse())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fen_and_yuan_convert_exactly_both_ways() {
        for (fen, yuan) in [
            (1, "0.01"),
            (46000, "460.00"),
            (46050, "460.50"),
            (10_000_000_000, "100000000.00"),
        ] {
            assert_eq!(fen_to_yuan(fen).as_deref(), Ok(yuan));
            assert_eq!(yuan_to_fen(yuan), Ok(fen));
        }
        assert_eq!(yuan_to_fen("460"), Ok(46000));
        assert_eq!(yuan_to_fen("460.5"), Ok(46050));
        assert_eq!(yuan_to_fen("0.1"), Ok(10));
    }

    #[test]
    fn anything_outside_the_narrow_grammar_is_refused() {
        for bad in [
            "",
            ".",
            "1.",
            ".5",
            "-1.00",
            "+1",
            "1e3",
            "1.001",
            "0",
            "0.00",
            "100000000.01",
            "1,00",
            " 1",
            "1 ",
            "１",
        ] {
            assert!(yuan_to_fen(bad).is_err(), "{bad:?}");
        }
        assert!(fen_to_yuan(0).is_err());
        assert!(fen_to_yuan(-5).is_err());
        assert!(fen_to_yuan(AMOUNT_FEN_MAX + 1).is_err());
    }
}

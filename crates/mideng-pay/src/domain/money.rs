//! Money: integer minor units (fen) with checked arithmetic; never floats.
//!
//! An order amount or a wallet operation is at least 1 fen and at most
//! [`AMOUNT_FEN_MAX`]; a wallet balance is never negative and never overflows. Every operation
//! that could break either returns an error instead.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest single amount: 100 000 000 yuan, the channels' own limit. The channel crate's
/// constant itself, so that the service can never accept an amount a channel refuses.
pub use mideng_channel::money::AMOUNT_FEN_MAX;
/// Smallest single amount: 1 fen.
pub use mideng_channel::money::AMOUNT_FEN_MIN;

/// Largest wallet balance: a thousand times the largest amount, far below `i64::MAX`, so that
/// sums of balances stay exact too.
pub const BALANCE_FEN_MAX: i64 = 1_000 * AMOUNT_FEN_MAX;

/// A money rule broken by an input.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MoneyError {
    /// An amount is zero, negative or above [`AMOUNT_FEN_MAX`].
    #[error("amount must be an integer of {AMOUNT_FEN_MIN} to {AMOUNT_FEN_MAX} fen, got {0}")]
    AmountOutOfRange(i64),
    /// A currency other than CNY.
    #[error("currency must be CNY")]
    UnsupportedCurrency,
    /// A debit larger than the balance.
    #[error("insufficient funds: balance {balance} fen, debit {amount} fen")]
    InsufficientFunds {
        /// The balance before the debit.
        balance: i64,
        /// The debit asked for.
        amount: i64,
    },
    /// A credit that would take the balance above [`BALANCE_FEN_MAX`].
    #[error("balance would exceed {BALANCE_FEN_MAX} fen")]
    BalanceOverflow,
}

/// The one currency the service books in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Currency {
    /// Chinese yuan, booked in fen.
    #[serde(rename = "CNY")]
    Cny,
}

impl Currency {
    /// Parses `CNY`; anything else is refused.
    pub fn parse(text: &str) -> Result<Self, MoneyError> {
        match text {
            "CNY" => Ok(Currency::Cny),
            _ => Err(MoneyError::UnsupportedCurrency),
        }
    }

    /// `CNY`.
    pub fn as_str(self) -> &'static str {
        match self {
            Currency::Cny => "CNY",
        }
    }
}

/// A positive amount of fen, at most [`AMOUNT_FEN_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    /// Validates an amount.
    pub fn new(fen: i64) -> Result<Self, MoneyError> {
        if (AMOUNT_FEN_MIN..=AMOUNT_FEN_MAX).contains(&fen) {
            Ok(Self(fen))
        } else {
            Err(MoneyError::AmountOutOfRange(fen))
        }
    }

    /// The amount in fen.
    pub fn fen(self) -> i64 {
        self.0
    }
}

/// A wallet balance: never negative, never above [`BALANCE_FEN_MAX`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Balance(i64);

impl Balance {
    /// A balance read back from storage; a value outside the bounds is corrupt data.
    pub fn from_stored(fen: i64) -> Option<Self> {
        (0..=BALANCE_FEN_MAX).contains(&fen).then_some(Self(fen))
    }

    /// The balance in fen.
    pub fn fen(self) -> i64 {
        self.0
    }

    /// The balance after crediting `amount`.
    pub fn credit(self, amount: Amount) -> Result<Self, MoneyError> {
        self.0
            .checked_add(amount.fen())
            .filter(|fen| *fen <= BALANCE_FEN_MAX)
            .map(Self)
            .ok_or(MoneyError::BalanceOverflow)
    }

    /// The balance after debiting `amount`; refused when the balance is too small.
    pub fn debit(self, amount: Amount) -> Result<Self, MoneyError> {
        if amount.fen() > self.0 {
            return Err(MoneyError::InsufficientFunds {
                balance: self.0,
                amount: amount.fen(),
            });
        }
        Ok(Self(self.0 - amount.fen()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_positive_and_bounded() {
        assert_eq!(Amount::new(1).map(Amount::fen), Ok(1));
        assert_eq!(
            Amount::new(AMOUNT_FEN_MAX).map(Amount::fen),
            Ok(AMOUNT_FEN_MAX)
        );
        for bad in [0, -1, AMOUNT_FEN_MAX + 1, i64::MIN, i64::MAX] {
            assert_eq!(Amount::new(bad), Err(MoneyError::AmountOutOfRange(bad)));
        }
    }

    #[test]
    fn balances_never_go_negative_or_overflow() {
        let amount = |fen| Amount::new(fen).expect("valid");
        let balance = Balance::default().credit(amount(500)).expect("credit");
        assert_eq!(balance.debit(amount(200)).map(Balance::fen), Ok(300));
        assert_eq!(balance.debit(amount(500)).map(Balance::fen), Ok(0));
        assert_eq!(
            balance.debit(amount(501)),
            Err(MoneyError::InsufficientFunds {
                balance: 500,
                amount: 501
            })
        );
        let full = Balance::from_stored(BALANCE_FEN_MAX).expect("bounded");
        assert_eq!(full.credit(amount(1)), Err(MoneyError::BalanceOverflow));
        assert_eq!(Balance::from_stored(-1), None);
    }

    #[test]
    fn only_cny_is_booked() {
        assert_eq!(Currency::parse("CNY"), Ok(Currency::Cny));
        for bad in ["cny", "USD", "", "CNY "] {
            assert_eq!(Currency::parse(bad), Err(MoneyError::UnsupportedCurrency));
        }
    }
}

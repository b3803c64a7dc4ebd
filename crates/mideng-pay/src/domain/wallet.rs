//! Wallets: the ledger entries money moves through, and what a credit or a deduct came to.
//!
//! Balances are [`super::money::Balance`]s (checked arithmetic); a deduct never takes a balance
//! below zero, and each operation has a business key besides the request's key: one debit per
//! user and order, one credit per user and reference.

/// A ledger entry : a credit or a debit (the deduction number is its entry number).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The ledger entry's number.
    pub entry_no: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// Balance right after it.
    pub balance_after_fen: i64,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

/// A debit.
pub type Debit = LedgerEntry;

/// A credit.
pub type Credit = LedgerEntry;

/// What a credit did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreditOutcome {
    /// Credited.
    Credited(Credit),
    /// The balance would exceed its bound; nothing changed.
    TooLarge,
    /// This reference was credited before (under another key): that credit. Nothing changed.
    AlreadyCredited(Credit),
}

/// What a deduct did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeductOutcome {
    /// Debited.
    Debited(Debit),
    /// The balance is too small; nothing changed.
    InsufficientFunds {
        /// The balance found.
        balance_fen: i64,
    },
    /// This order was debited before (under another key): that debit.
    AlreadyDeducted(Debit),
}

/// A ledger entry .
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletEntry {
    /// Entry number.
    pub entry_no: String,
    /// `CREDIT` or `DEBIT`.
    pub kind: String,
    /// Amount in fen.
    pub amount_fen: i64,
    /// The credit's reference, or the debited order.
    pub reference: String,
    /// The debited order, for debits.
    pub order_id: Option<String>,
    /// Balance right after it.
    pub balance_after_fen: i64,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

/// A wallet and its latest entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletStatement {
    /// Balance in fen.
    pub balance_fen: i64,
    /// Latest entries, newest first (at most 100).
    pub entries: Vec<WalletEntry>,
}

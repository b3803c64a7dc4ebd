//! Wallets: the ledger entries money moves through, and what a credit or a deduct came to.
//!
//! Balances are [`super::money::Balance`]s (checked arithmetic); a deduct never takes a balance
//! below zero, and each operation has a business key besides the request's key: one debit per
//! user and order, one credit per user and reference.

/// How a deduct keeps the balance from going below zero when requests race on one wallet:
/// the three schemes of the seeds' selection guide, and the third with group commit. Every one keeps the same rules (one debit
/// per user and order, never below zero, insufficient funds answered and stored); they differ
/// in how concurrent deducts of one wallet wait for each other. Credits always lock the row.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum WalletStrategy {
    /// Pessimistic: read the balance `FOR UPDATE`, decide, write; racing deducts queue on the
    /// row lock.
    RowLock,
    /// Optimistic: read the balance and its version without a lock, decide, write only if the
    /// version is unchanged (compare-and-set); a deduct that lost the race is retried whole, a
    /// bounded number of times.
    Optimistic,
    /// One conditional update, `balance = balance - x WHERE balance >= x`, with no prior read:
    /// the database decides in the statement that writes.
    #[default]
    ConditionalUpdate,
    /// Conditional updates with group commit: the first-time deducts that arrive together go to
    /// the database as one statement and one commit (PostgreSQL), each request with its own
    /// answer and record; one wallet's debits of a group are one `UPDATE`, each checked in
    /// turn against what the ones before it left (from the first the balance does not cover,
    /// the wallet's requests leave the group). A request the group cannot settle (its key or
    /// order taken, the balance short, the group's statement failed) goes the
    /// `conditional-update` way on its own. On MySQL, MariaDB and SQLite it is
    /// `conditional-update`.
    GroupCommit,
}

impl WalletStrategy {
    /// Every strategy, in the order of the selection guide.
    pub const ALL: [WalletStrategy; 4] = [
        WalletStrategy::RowLock,
        WalletStrategy::Optimistic,
        WalletStrategy::ConditionalUpdate,
        WalletStrategy::GroupCommit,
    ];

    /// The name used in configuration, metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            WalletStrategy::RowLock => "row-lock",
            WalletStrategy::Optimistic => "optimistic",
            WalletStrategy::ConditionalUpdate => "conditional-update",
            WalletStrategy::GroupCommit => "group-commit",
        }
    }

    /// The strategy of a configuration name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|strategy| strategy.as_str() == name)
    }
}

impl std::fmt::Display for WalletStrategy {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

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

/// The reference of a deduction's reversal: a credit's business key, so the
/// one-credit-per-reference unique index allows one reversal per deduction.
pub fn reversal_reference(deduction_no: &str) -> String {
    format!("{REVERSAL_REFERENCE_PREFIX}{deduction_no}")
}

/// The prefix of reversal references; a client's own credit reference may not start with it.
pub const REVERSAL_REFERENCE_PREFIX: &str = "reversal-";

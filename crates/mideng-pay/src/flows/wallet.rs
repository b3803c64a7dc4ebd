//! Wallets: credit and deduct. Each runs in one transaction with its idempotency record —
//! begun, acted on and completed there, so that a first-time request commits once — and the
//! money moves and the answer is stored together or not at all; the answer is rendered by the
//! caller's pure [`Render`] function inside that transaction. A duplicate comes back as the
//! record's decision, with nothing moved. Each operation has
//! a business key besides the request's key — a deduct one debit per user and order, a credit
//! one credit per user and reference, a reversal one per deduction — held by a unique index.

use mideng::StoreError;

use crate::domain::ids::{OrderId, Reference, UserId, new_number};
use crate::domain::money::Amount;
use crate::domain::wallet::{CreditOutcome, DeductOutcome, WalletStatement};
use crate::flows::{Ports, decision, operation};
pub use crate::store::{Answered, Render, ReverseOutcome, WalletRecord};

/// A credit, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreditRequest {
    /// The wallet's owner.
    pub user_id: UserId,
    /// How much.
    pub amount: Amount,
    /// The credit's business key: one credit per user and reference.
    pub reference: Reference,
}

/// A deduct, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeductRequest {
    /// The wallet's owner.
    pub user_id: UserId,
    /// The order paid for: one debit per user and order.
    pub order_id: OrderId,
    /// How much.
    pub amount: Amount,
}

/// Credits a wallet at most once per reference, beginning and completing `record` (if any)
/// with `render(outcome)` in the same transaction.
pub async fn credit(
    ports: &Ports,
    record: WalletRecord<'_>,
    request: &CreditRequest,
    render: Render<'_, CreditOutcome>,
) -> Result<Answered<CreditOutcome>, StoreError> {
    let entry_no = new_number('C', ports.clock.now_ms());
    let answered = ports
        .store
        .wallets
        .credit(
            record,
            request.user_id.as_str(),
            request.amount,
            request.reference.as_str(),
            &entry_no,
            render,
        )
        .await?;
    let Answered::Ran(outcome, _) = &answered else {
        return Ok(answered);
    };
    if matches!(outcome, CreditOutcome::AlreadyCredited(_)) {
        durable_without_record(ports, record).await?;
    }
    let label = match outcome {
        CreditOutcome::Credited(_) => "credited",
        CreditOutcome::AlreadyCredited(_) => "already_credited",
        CreditOutcome::TooLarge => "refused",
    };
    decision(
        "constraint",
        operation::WALLET_CREDIT,
        record.tenant(),
        request.user_id.as_str(),
        label,
    );
    Ok(answered)
}

/// Deducts from a wallet at most once per order, never below zero, by the configured
/// [`crate::domain::wallet::WalletStrategy`], beginning and completing `record` (if any) with
/// `render(outcome)` in the same transaction.
pub async fn deduct(
    ports: &Ports,
    record: WalletRecord<'_>,
    request: &DeductRequest,
    render: Render<'_, DeductOutcome>,
) -> Result<Answered<DeductOutcome>, StoreError> {
    let entry_no = new_number('D', ports.clock.now_ms());
    let answered = ports
        .store
        .wallets
        .deduct(
            record,
            ports.settings.wallet_strategy,
            request.user_id.as_str(),
            request.order_id.as_str(),
            request.amount,
            &entry_no,
            render,
        )
        .await?;
    let Answered::Ran(outcome, _) = &answered else {
        return Ok(answered);
    };
    if matches!(outcome, DeductOutcome::AlreadyDeducted(_)) {
        durable_without_record(ports, record).await?;
    }
    let label = match outcome {
        DeductOutcome::Debited(_) => "debited",
        DeductOutcome::AlreadyDeducted(_) => "already_deducted",
        DeductOutcome::InsufficientFunds { .. } => "insufficient_funds",
    };
    decision(
        "constraint",
        operation::WALLET_DEDUCT,
        record.tenant(),
        request.order_id.as_str(),
        label,
    );
    Ok(answered)
}

/// Before "done already" on the word of another transaction's row: with a record, the
/// operation's own commit stored it and waited for the standby, which covers what it read;
/// without one, nothing was committed, so the store's fence waits instead.
async fn durable_without_record(ports: &Ports, record: WalletRecord<'_>) -> Result<(), StoreError> {
    match record {
        WalletRecord::Claim(_) => Ok(()),
        WalletRecord::Unrecorded { .. } => ports.store.backend.fence().await,
    }
}

/// Puts a deduction back into the wallet at most once (one reversal per deduction, held by a
/// unique index), with its own ledger entry.
pub async fn reverse(
    ports: &Ports,
    tenant: &str,
    user_id: &UserId,
    deduction_no: &str,
) -> Result<ReverseOutcome, StoreError> {
    let entry_no = new_number('C', ports.clock.now_ms());
    let outcome = ports
        .store
        .wallets
        .reverse(tenant, user_id.as_str(), deduction_no, &entry_no)
        .await?;
    if matches!(outcome, ReverseOutcome::AlreadyReversed(_)) {
        ports.store.backend.fence().await?;
    }
    let label = match &outcome {
        ReverseOutcome::Reversed(_) => "reversed",
        ReverseOutcome::AlreadyReversed(_) => "already_reversed",
        ReverseOutcome::NoDeduction => "no_deduction",
        ReverseOutcome::TooLarge => "refused",
    };
    decision(
        "constraint",
        operation::WALLET_REVERSE,
        tenant,
        deduction_no,
        label,
    );
    Ok(outcome)
}

/// The tenant's wallet of `user_id`: its balance and its ledger (an empty one when the user
/// has none yet).
pub async fn statement(
    ports: &Ports,
    tenant: &str,
    user_id: &UserId,
) -> Result<WalletStatement, StoreError> {
    ports.store.wallets.wallet(tenant, user_id.as_str()).await
}

/// A page of the wallet's ledger in its order, after the entry `after`, at most `limit`;
/// `None` when `after` is no entry of this wallet.
pub async fn entries(
    ports: &Ports,
    tenant: &str,
    user_id: &UserId,
    after: Option<&str>,
    limit: u32,
) -> Result<Option<Vec<crate::domain::wallet::WalletEntry>>, StoreError> {
    ports
        .store
        .wallets
        .entries(tenant, user_id.as_str(), after, limit)
        .await
}

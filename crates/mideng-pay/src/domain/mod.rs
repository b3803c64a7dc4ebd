//! The service's rules, free of I/O, so that each is tested once on its own.
//!
//! - [`money`] — amounts in fen with checked arithmetic, the one currency, wallet balances.
//! - [`bill`] — matching a channel's daily bill against our payments and refunds.
//! - [`charge`] — the one-PAID rule: what a charge the channel reports does to an attempt.
//! - [`clock`] — the one clock of the service (a port: the only thing here that is not pure).
//! - [`events`] — the events of the outbox and the grants they ask for.
//! - [`ids`] — validated identifiers (orders, users, SKUs) and payment numbers.
//! - [`keys`] — the two kinds of API key (secret, publishable) and what each opens.
//! - [`notify`] — notify matching: what a verified channel notify may speak for.
//! - [`order`] — the order state machine.
//! - [`outbound`] — the outbound-address rule: the addresses and names a tenant's webhook URL
//!   may reach.
//! - [`payment`] — payment attempts and their state machine.
//! - [`refund`] — refunds of a paid payment and their state machine.
//! - [`wallet`] — ledger entries and what a credit or a deduct came to.
//! - [`webhook`] — merchant notifications: events, secrets, signatures, the retry schedule.

pub mod bill;
pub mod charge;
pub mod clock;
pub mod events;
pub mod ids;
pub mod keys;
pub mod money;
pub mod notify;
pub mod order;
pub mod outbound;
pub mod payment;
pub mod refund;
pub mod wallet;
pub mod webhook;

/// RFC 3339 (UTC, milliseconds) for a Unix-ms instant.
pub fn rfc3339(unix_ms: i64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|moment| {
            moment
                .format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

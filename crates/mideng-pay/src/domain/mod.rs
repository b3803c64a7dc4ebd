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

/// RFC 3339 in UTC with exactly three digits of milliseconds (`2026-12-07T18:15:42.700Z`), for
/// a Unix-ms instant: one width for every time the API writes, so that the strings sort as the
/// instants do (the well-known format trims trailing zeros, and `42.7Z` sorts after `42.79Z`).
pub fn rfc3339(unix_ms: i64) -> String {
    const FORMAT: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    let nanos = i128::from(unix_ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|moment| moment.format(FORMAT).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_have_one_width_and_sort_as_their_instants() {
        let times: Vec<String> = [1_796_667_342_700, 1_796_667_342_790, 1_796_667_343_000]
            .into_iter()
            .map(super::rfc3339)
            .collect();
        assert_eq!(
            times,
            [
                "2026-12-07T18:15:42.700Z",
                "2026-12-07T18:15:42.790Z",
                "2026-12-07T18:15:43.000Z"
            ]
        );
        assert!(times.windows(2).all(|pair| pair[0] < pair[1]));
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
    }
}

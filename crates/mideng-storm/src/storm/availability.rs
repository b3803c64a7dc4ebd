//! What each kind of fault did to the clients, from their own history: how many attempts sent
//! inside its windows had no definite answer, how long the clients went without an ok answer
//! from a window's start until shortly after its end, and how the operations left without an
//! answer there ended. Pure: the history ([`crate::audit::history`]) and the timeline's fault
//! windows in, figures out.

use serde::Serialize;

use super::report::{FaultWindow, by_kind};
use crate::audit::history::{Operation, Outcome};

/// How long after a window ends its stretch without an ok answer may still run: the proxy
/// following the new primary, connections re-established, a retry's back-off.
pub const AFTER_WINDOW_MS: u64 = 5_000;

/// One kind of fault, as the clients lived it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultAvailability {
    /// The kind, as the timeline names it.
    pub kind: String,
    /// Its windows.
    pub windows: usize,
    /// Attempts sent inside its windows.
    pub attempts: u64,
    /// Of those, the ones without a definite answer (no answer, a 5xx, a 202).
    pub unanswered: u64,
    /// The median window's longest stretch without an ok answer to any client, from the
    /// window's start to [`AFTER_WINDOW_MS`] after its end, milliseconds.
    pub without_ok_median_ms: u64,
    /// The longest such stretch of all its windows, milliseconds.
    pub without_ok_max_ms: u64,
    /// The longest its kind is allowed ([`super::excuses::unavailability_ceiling_ms`]): past
    /// it, the run fails.
    pub without_ok_ceiling_ms: u64,
    /// Operations with an unanswered attempt inside its windows.
    pub unanswered_operations: u64,
    /// Of those, answered ok by a later attempt under the same key.
    pub settled_ok: u64,
    /// Of those, refused by a later attempt (the refusal the first would have had).
    pub settled_refused: u64,
    /// Of those, never answered (the history check judged their effect).
    pub never_answered: u64,
}

/// The figures of every kind on the timeline, in the order the kinds first struck.
pub fn availability(history: &[Operation], windows: &[FaultWindow]) -> Vec<FaultAvailability> {
    let mut ok_times: Vec<u64> = history
        .iter()
        .flat_map(|operation| &operation.attempts)
        .filter(|attempt| matches!(attempt.outcome, Outcome::Ok { .. }))
        .map(|attempt| attempt.completed_ms)
        .collect();
    ok_times.sort_unstable();
    by_kind(windows)
        .into_iter()
        .map(|(kind, windows)| {
            let inside = |at: u64| windows.iter().any(|w| w.from_ms <= at && at <= w.to_ms);
            let mut figures = FaultAvailability {
                kind: kind.to_owned(),
                windows: windows.len(),
                without_ok_ceiling_ms: super::excuses::unavailability_ceiling_ms(kind),
                ..FaultAvailability::default()
            };
            for operation in history {
                let mut unanswered_here = false;
                for attempt in operation.attempts.iter().filter(|a| inside(a.invoked_ms)) {
                    figures.attempts += 1;
                    if attempt.outcome == Outcome::Unknown {
                        figures.unanswered += 1;
                        unanswered_here = true;
                    }
                }
                if unanswered_here {
                    figures.unanswered_operations += 1;
                    match operation.attempts.last().map(|last| &last.outcome) {
                        Some(Outcome::Ok { .. }) => figures.settled_ok += 1,
                        Some(Outcome::Refused { .. }) => figures.settled_refused += 1,
                        _ => figures.never_answered += 1,
                    }
                }
            }
            let mut stretches: Vec<u64> = windows
                .iter()
                .map(|window| longest_without(&ok_times, window.from_ms, window.to_ms))
                .collect();
            stretches.sort_unstable();
            figures.without_ok_median_ms = stretches.get(stretches.len() / 2).copied().unwrap_or(0);
            figures.without_ok_max_ms = stretches.last().copied().unwrap_or(0);
            figures
        })
        .collect()
}

/// The longest stretch between `from` and `to` + [`AFTER_WINDOW_MS`] with no ok answer in
/// `ok_times` (sorted): from `from` to the first, between two, and from the last to the end.
fn longest_without(ok_times: &[u64], from: u64, to: u64) -> u64 {
    let end = to.saturating_add(AFTER_WINDOW_MS);
    let start = ok_times.partition_point(|&at| at < from);
    let mut last = from;
    let mut longest = 0;
    for &at in ok_times[start..].iter().take_while(|&&at| at <= end) {
        longest = longest.max(at - last);
        last = at;
    }
    longest.max(end - last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::history::{Attempt, OpKind};

    fn ok() -> Outcome {
        Outcome::Ok {
            number: Some("D1".to_owned()),
            balance_after: None,
        }
    }

    fn operation(attempts: &[(u64, u64, Outcome)]) -> Operation {
        Operation {
            kind: OpKind::Deduct,
            tenant: "t".to_owned(),
            subject: "u".to_owned(),
            business_key: "o".to_owned(),
            amount: 1,
            attempts: attempts
                .iter()
                .map(|(invoked_ms, completed_ms, outcome)| Attempt {
                    invoked_ms: *invoked_ms,
                    completed_ms: *completed_ms,
                    outcome: outcome.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_failover_window_counts_its_unanswered_attempts_their_settling_and_its_outage() {
        let refused = Outcome::Refused {
            code: "insufficient-funds".to_owned(),
        };
        let history = vec![
            // Answered before the fault, and 9 s into it: the clients' only ok answers.
            operation(&[(500, 1_000, ok())]),
            operation(&[(10_500, 11_000, ok())]),
            // Lost in the window, answered ok by the retry after it.
            operation(&[(2_500, 4_500, Outcome::Unknown), (12_000, 12_400, ok())]),
            // Lost, then refused by the retry.
            operation(&[(3_000, 5_000, Outcome::Unknown), (13_000, 13_100, refused)]),
            // Lost, and never answered.
            operation(&[(4_000, 6_000, Outcome::Unknown)]),
            // Another kind's window, later.
            operation(&[(30_100, 30_200, Outcome::Unknown)]),
        ];
        let windows = [
            FaultWindow::of("PostgreSQL primary cut off", 2_000, 14_000),
            FaultWindow::of("database commit answers lost", 30_000, 31_000),
        ];
        let figures = availability(&history, &windows);
        assert_eq!(figures.len(), 2);
        let failover = &figures[0];
        assert_eq!(failover.kind, "PostgreSQL primary cut off");
        assert_eq!((failover.attempts, failover.unanswered), (6, 3));
        assert_eq!(
            (
                failover.unanswered_operations,
                failover.settled_ok,
                failover.settled_refused,
                failover.never_answered
            ),
            (3, 1, 1, 1)
        );
        // From the window's start (2 s) to the ok at 11 s: 9 s; then 12.4 s; then to 19 s.
        assert_eq!(failover.without_ok_max_ms, 9_000);
        assert_eq!(failover.without_ok_median_ms, 9_000);
        let commits = &figures[1];
        assert_eq!(
            (commits.attempts, commits.unanswered, commits.never_answered),
            (1, 1, 1)
        );
        // No ok answer at all from 30 s to 5 s after the window: the whole stretch.
        assert_eq!(commits.without_ok_max_ms, 6_000);
    }
}

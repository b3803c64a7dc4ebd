//! The attacker's notifies: whatever it sent had to be refused, and what it aimed at must not
//! have moved. Checked only when the attacker ran.
use super::{ChannelFacts, ClientFacts, Index, Violation, violation};

/// The invariants checked here, by the name their violations carry.
pub(super) const INVARIANTS: [&str; 2] = [
    "every attack refused",
    "an attacked payment changes only through the workload",
];

/// Checks them, adding what it finds to `violations`.
pub(super) fn check(
    channel: &ChannelFacts,
    client: &ClientFacts,
    index: &Index<'_>,
    violations: &mut Vec<Violation>,
) {
    // The attacker: whatever it sent had to be refused, and what it aimed at must not have
    // moved. A victim's only legitimate change is a close after its expiry (the reconciler's)
    // or one the channel made too; it is never paid (its buyer never paid).
    for accepted in &client.accepted_attacks {
        violations.push(violation("every attack refused", accepted.clone()));
    }
    for number in &client.attacked {
        let Some(payment) = index.payments.get(number.as_str()) else {
            violations.push(violation(
                "an attacked payment changes only through the workload",
                format!("{number} is gone"),
            ));
            continue;
        };
        let closed_at_channel = channel
            .trades
            .get(number)
            .is_some_and(|trade| trade.status == "CLOSED");
        let untouched = match payment.status.as_str() {
            "PENDING" => true,
            "CLOSED" => closed_at_channel || payment.updated_at_ms >= payment.expires_at_ms,
            _ => false,
        };
        if !untouched {
            violations.push(violation(
                "an attacked payment changes only through the workload",
                format!(
                    "{number} is {} here (its buyer never paid, nobody closed it{})",
                    payment.status,
                    if payment.status == "CLOSED" {
                        ", open at the channel, before its expiry"
                    } else {
                        ""
                    }
                ),
            ));
        }
    }
}

//! The channel's ledger against ours, order by order, and what is left for a person.
//!
//! - **The channel's ledger equals ours**: for every order, what the channel charged minus what
//!   it refunded, over all the order's attempts, equals what this service holds for it: the
//!   PAID payment's amount less its successful refunds, plus each refund case's amount less the
//!   refunds made for it — to the fen. A charge nobody recorded, a refund made twice or a case
//!   that never was all break it.
//! - **Every charge not kept here is a refund case**: a charged attempt that is not PAID here
//!   has a case.
//! - **Every case refunded, or open with its reason**: after quiescence a case whose refund was
//!   asked has it SUCCESS for the case's whole amount, or ABNORMAL (held by the channel for a
//!   person); an OPEN one (automatic refunds off, or every ask closed by the channel) names its
//!   kind. A case whose refund the channel closed is asked again, so none ends there.
//! - **Nothing parked without being counted**: every event a consumer parked or still fails is
//!   one of the storm's events no consumer can process, each of those is parked, and no outbox
//!   row is parked (no broker of the storm refuses for good).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{AuditFigures, ChannelFacts, ClientFacts, Snapshot, Violation, violation};

/// The invariants checked here.
pub(super) const INVARIANTS: [&str; 4] = [
    "the channel's ledger equals ours, order by order",
    "every charge not kept here is a refund case",
    "every refund case refunded, or open with its reason",
    "nothing parked without being counted",
];

/// The invariant about parked events, checked only in a deployment the storm started.
pub(super) const PARKED_INVARIANT: &str = "nothing parked without being counted";

/// Open cases the report names at most (the count is whole).
pub(super) const OPEN_CASES_NAMED_MAX: usize = 50;

/// The kinds a case may carry: its reason.
const CASE_KINDS: [&str; 3] = [
    "PAID_AFTER_CANCEL",
    "DOUBLE_CHARGE",
    "FAILED_ATTEMPT_CHARGED",
];

/// Counts an open case and names it (up to [`OPEN_CASES_NAMED_MAX`]).
fn name_open(figures: &mut AuditFigures, case: &super::CaseFact, standing: &str) {
    figures.cases_open += 1;
    if figures.open_cases.len() < OPEN_CASES_NAMED_MAX {
        figures.open_cases.push(format!(
            "{} ({}, {} fen): {standing}",
            case.payment_no, case.kind, case.amount
        ));
    }
}

/// Checks the per-order ledger identity, the refund cases and the parked events.
pub(super) fn check_ledger(
    snapshot: &Snapshot,
    channel: &ChannelFacts,
    client: &ClientFacts,
    violations: &mut Vec<Violation>,
    figures: &mut AuditFigures,
) {
    let cases: HashMap<&str, &super::CaseFact> = snapshot
        .cases
        .iter()
        .map(|case| (case.payment_no.as_str(), case))
        .collect();
    let mut refunded_here: HashMap<&str, i64> = HashMap::new();
    let mut refund_status: HashMap<&str, (&str, i64)> = HashMap::new();
    for refund in &snapshot.refunds {
        refund_status.insert(
            refund.refund_no.as_str(),
            (refund.status.as_str(), refund.amount),
        );
        if refund.status == "SUCCESS" {
            let sum = refunded_here.entry(refund.payment_no.as_str()).or_default();
            *sum = sum.saturating_add(refund.amount);
        }
    }
    let sum = |amounts: Option<&Vec<i64>>| {
        amounts
            .into_iter()
            .flatten()
            .fold(0_i64, |sum, amount| sum.saturating_add(*amount))
    };

    // Order by order: (the channel's net, ours, the attempts).
    let mut per_order: BTreeMap<(&str, &str), (i64, i64, Vec<&str>)> = BTreeMap::new();
    for payment in &snapshot.payments {
        let number = payment.payment_no.as_str();
        let charged = sum(channel.charges.get(number));
        let given = sum(channel.refunded.get(number));
        let case = cases.get(number);
        let kept = payment.status == "PAID" || case.is_some();
        let held = if kept {
            let amount = case.map_or(payment.amount, |case| case.amount);
            amount.saturating_sub(refunded_here.get(number).copied().unwrap_or(0))
        } else {
            0
        };
        if charged > 0 && payment.status != "PAID" && case.is_none() {
            violations.push(violation(
                "every charge not kept here is a refund case",
                format!("{number} is {} here and charged {charged}", payment.status),
            ));
        }
        let order = per_order
            .entry((payment.tenant_id.as_str(), payment.order_id.as_str()))
            .or_default();
        order.0 = order.0.saturating_add(charged.saturating_sub(given));
        order.1 = order.1.saturating_add(held);
        order.2.push(number);
    }
    for ((tenant, order), (theirs, ours, attempts)) in &per_order {
        figures.ledger_orders += 1;
        if theirs != ours {
            violations.push(violation(
                "the channel's ledger equals ours, order by order",
                format!(
                    "{tenant}/{order}: the channel holds {theirs}, we hold {ours} ({})",
                    attempts.join(", ")
                ),
            ));
        }
    }

    for case in &snapshot.cases {
        figures.cases += 1;
        let refunded = case
            .refund_no
            .as_deref()
            .and_then(|number| refund_status.get(number));
        match (case.status.as_str(), refunded) {
            ("REFUND_ASKED", Some(("SUCCESS", amount))) if *amount == case.amount => {
                figures.cases_refunded += 1;
            }
            ("OPEN", _) if CASE_KINDS.contains(&case.kind.as_str()) => {
                name_open(figures, case, "no refund asked");
            }
            // The channel holds the money of an ABNORMAL refund until a person acts there.
            ("REFUND_ASKED", Some(("ABNORMAL", _))) => {
                name_open(figures, case, "its refund ABNORMAL at the channel");
            }
            (status, refund) => violations.push(violation(
                "every refund case refunded, or open with its reason",
                format!(
                    "{} ({}): {status}, refund {refund:?} for {}",
                    case.payment_no, case.kind, case.amount
                ),
            )),
        }
    }

    if !client.parked_checked {
        return;
    }
    let mut parked: HashSet<&str> = HashSet::new();
    for failure in &snapshot.failures {
        if failure.status == "PARKED" {
            figures.parked += 1;
            parked.insert(failure.message_id.as_str());
        }
        if matches!(failure.status.as_str(), "PARKED" | "FAILING")
            && !client.poisoned.contains(&failure.message_id)
        {
            violations.push(violation(
                "nothing parked without being counted",
                format!(
                    "{} ({}) is {} after {} failures and is none of the storm's",
                    failure.message_id, failure.consumer, failure.status, failure.attempts
                ),
            ));
        }
    }
    for id in &client.poisoned {
        if !parked.contains(id.as_str()) {
            violations.push(violation(
                "nothing parked without being counted",
                format!("{id}: an event no consumer can process is not parked"),
            ));
        }
    }
    for id in &snapshot.parked_outbox {
        violations.push(violation(
            "nothing parked without being counted",
            format!("outbox row {id} is parked: the broker refused it"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{charged, order, payment};
    use super::super::{CaseFact, FailureFact, RefundFact};
    use super::*;

    fn case(number: &str, order: &str, status: &str, refund: Option<&str>) -> CaseFact {
        CaseFact {
            payment_no: number.to_owned(),
            tenant_id: "t".to_owned(),
            order_id: order.to_owned(),
            kind: "FAILED_ATTEMPT_CHARGED".to_owned(),
            amount: 100,
            status: status.to_owned(),
            refund_no: refund.map(str::to_owned),
        }
    }

    fn refund(number: &str, payment: &str, status: &str) -> RefundFact {
        RefundFact {
            refund_no: number.to_owned(),
            tenant_id: "t".to_owned(),
            request_key: format!("auto-{payment}"),
            payment_no: payment.to_owned(),
            order_id: "o1".to_owned(),
            amount: 100,
            status: status.to_owned(),
        }
    }

    fn checked(
        snapshot: &Snapshot,
        channel: &ChannelFacts,
        client: &ClientFacts,
    ) -> Vec<Violation> {
        let mut violations = Vec::new();
        check_ledger(
            snapshot,
            channel,
            client,
            &mut violations,
            &mut AuditFigures::default(),
        );
        violations
    }

    /// An order with a FAILED attempt the channel charged and a PAID second attempt: the
    /// identity holds once the case is refunded, and breaks without the case, with the case
    /// unrefunded, or with a refund the channel did not make.
    #[test]
    fn a_charged_failed_attempt_balances_only_as_a_refunded_case() {
        let snapshot = Snapshot {
            payments: vec![payment("P1", "o1", "FAILED"), payment("P2", "o1", "PAID")],
            orders: vec![order("o1", "PAID")],
            cases: vec![case("P1", "o1", "REFUND_ASKED", Some("R1"))],
            refunds: vec![refund("R1", "P1", "SUCCESS")],
            ..Snapshot::default()
        };
        let mut channel = charged(&["P1", "P2"]);
        channel.refunded.insert("P1".to_owned(), vec![100]);
        let client = ClientFacts::default();
        assert_eq!(checked(&snapshot, &channel, &client), []);

        let no_case = Snapshot {
            cases: Vec::new(),
            refunds: Vec::new(),
            ..snapshot.clone()
        };
        // Without a case nothing gives the first charge back.
        let mut kept_both = channel.clone();
        kept_both.refunded.clear();
        let names: Vec<&str> = checked(&no_case, &kept_both, &client)
            .iter()
            .map(|v| v.invariant)
            .collect();
        assert!(
            names.contains(&"every charge not kept here is a refund case"),
            "{names:?}"
        );
        assert!(
            names.contains(&"the channel's ledger equals ours, order by order"),
            "{names:?}"
        );

        let unrefunded = Snapshot {
            refunds: vec![refund("R1", "P1", "PROCESSING")],
            ..snapshot.clone()
        };
        let names: Vec<&str> = checked(&unrefunded, &channel, &client)
            .iter()
            .map(|v| v.invariant)
            .collect();
        assert!(
            names.contains(&"every refund case refunded, or open with its reason"),
            "{names:?}"
        );

        let names: Vec<&str> = checked(&snapshot, &kept_both, &client)
            .iter()
            .map(|v| v.invariant)
            .collect();
        assert_eq!(names, ["the channel's ledger equals ours, order by order"]);
    }

    /// A case left open (no refund asked) or held ABNORMAL at the channel passes the case
    /// invariant, and the report names each: payment, reason, amount, where its refund stands.
    #[test]
    fn open_cases_are_named_in_the_figures() {
        let snapshot = Snapshot {
            payments: vec![
                payment("P1", "o1", "FAILED"),
                payment("P2", "o1", "PAID"),
                payment("P3", "o2", "FAILED"),
            ],
            orders: vec![order("o1", "PAID"), order("o2", "CREATED")],
            cases: vec![
                case("P1", "o1", "OPEN", None),
                case("P3", "o2", "REFUND_ASKED", Some("R3")),
            ],
            refunds: vec![refund("R3", "P3", "ABNORMAL")],
            ..Snapshot::default()
        };
        let mut figures = AuditFigures::default();
        let mut violations = Vec::new();
        check_ledger(
            &snapshot,
            &charged(&["P2"]),
            &ClientFacts::default(),
            &mut violations,
            &mut figures,
        );
        assert!(
            violations
                .iter()
                .all(|v| v.invariant != "every refund case refunded, or open with its reason"),
            "{violations:?}"
        );
        assert_eq!(figures.cases_open, 2);
        assert_eq!(
            figures.open_cases,
            [
                "P1 (FAILED_ATTEMPT_CHARGED, 100 fen): no refund asked",
                "P3 (FAILED_ATTEMPT_CHARGED, 100 fen): its refund ABNORMAL at the channel"
            ]
        );
    }

    #[test]
    fn a_parked_event_is_a_violation_unless_the_storm_wrote_it_and_each_of_those_is_parked() {
        let failure = |id: &str, status: &str| FailureFact {
            message_id: id.to_owned(),
            consumer: "entitlement.grant".to_owned(),
            status: status.to_owned(),
            attempts: 5,
        };
        let client = ClientFacts {
            poisoned: ["m1".to_owned(), "m2".to_owned()].into(),
            parked_checked: true,
            ..ClientFacts::default()
        };
        let snapshot = Snapshot {
            failures: vec![failure("m1", "PARKED"), failure("m2", "PARKED")],
            ..Snapshot::default()
        };
        assert_eq!(checked(&snapshot, &ChannelFacts::default(), &client), []);

        let other = Snapshot {
            failures: vec![
                failure("m1", "PARKED"),
                failure("m2", "FAILING"),
                failure("m3", "PARKED"),
            ],
            parked_outbox: vec!["o9".to_owned()],
            ..Snapshot::default()
        };
        let found = checked(&other, &ChannelFacts::default(), &client);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found
                .iter()
                .all(|v| v.invariant == "nothing parked without being counted")
        );
    }
}

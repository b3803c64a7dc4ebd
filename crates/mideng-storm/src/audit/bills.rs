//! The channels' own bills of the run's days: after quiescence every line of every bill
//! matches our payments and refunds to the fen, and every payment PAID and refund SUCCESS of
//! those days is on its bill. The storm runs the service's bill reconciliation
//! (`mideng_pay::workers::bill`) over each channel and day; this judges what it reported.

use mideng_pay::workers::bill::BillReport;

use super::{AuditFigures, Violation, violation};

/// The invariants checked here: only when the storm started the deployment (it reconciles the
/// bills through the service's own ports).
pub(super) const INVARIANTS: [&str; 1] = ["every line of the channels' bills matches ours"];

/// Judges one bill run per channel and day: a bill not published, or any line or record in
/// disagreement (each of which the run kept as a case), is a violation. A charge the bill
/// found and the success flow recorded (`repaired`) is counted, not a violation: that is the
/// bill doing its work.
pub fn check_bills(reports: &[BillReport], figures: &mut AuditFigures) -> Vec<Violation> {
    let mut violations = Vec::new();
    for report in reports {
        figures.bill_lines += report.lines;
        figures.bill_matched += report.matched;
        figures.bill_repaired += report.repaired;
        if !report.published {
            violations.push(violation(
                "every line of the channels' bills matches ours",
                format!("{} {}: no bill", report.channel, report.date),
            ));
        } else if report.disagreements > report.repaired {
            violations.push(violation(
                "every line of the channels' bills matches ours",
                format!(
                    "{} {}: {} of {} lines or records disagree: {}",
                    report.channel,
                    report.date,
                    report.disagreements - report.repaired,
                    report.lines,
                    report.open.join("; ")
                ),
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(channel: &str, lines: u64, disagreements: u64) -> BillReport {
        BillReport {
            channel: channel.to_owned(),
            date: "2026-12-04".to_owned(),
            published: true,
            lines,
            matched: lines - disagreements.min(lines),
            disagreements,
            ..BillReport::default()
        }
    }

    #[test]
    fn a_disagreement_or_a_missing_bill_is_a_violation_and_a_repair_is_counted() {
        let mut figures = AuditFigures::default();
        let clean = [report("alipay", 40, 0), report("wechat", 12, 0)];
        assert!(check_bills(&clean, &mut figures).is_empty());
        assert_eq!((figures.bill_lines, figures.bill_matched), (52, 52));

        let repaired = BillReport {
            repaired: 1,
            ..report("alipay", 3, 1)
        };
        assert!(check_bills(&[repaired], &mut figures).is_empty());
        assert_eq!(figures.bill_repaired, 1);

        let unpublished = BillReport {
            published: false,
            ..BillReport::default()
        };
        let broken = check_bills(&[report("wechat", 5, 2), unpublished], &mut figures);
        assert_eq!(broken.len(), 2, "{broken:?}");
        assert!(broken[0].detail.contains("2 of 5"), "{broken:?}");
    }
}

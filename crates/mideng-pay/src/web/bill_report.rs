//! The report of a bill reconciliation run as one self-contained HTML page: per channel and
//! day, how many lines the bill had and how many matched, were repaired or disagree, the
//! bill's totals, and every case of that day with its evidence.

use crate::domain::bill::BillCase;
use crate::workers::bill::BillReport;

use super::escape_html;

/// The page for `reports` and the `cases` of their days.
pub fn render(reports: &[BillReport], cases: &[BillCase]) -> String {
    let mut rows = String::new();
    for report in reports {
        let published = if report.published {
            "published"
        } else {
            "not published yet"
        };
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{published}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            escape_html(&report.date),
            escape_html(&report.channel),
            report.lines,
            report.matched,
            report.repaired,
            report.disagreements,
            report.cases_found,
            report.charged_fen,
            report.refunded_fen,
        ));
    }
    let mut case_rows = String::new();
    for case in cases {
        let amount = |fen: Option<i64>| fen.map_or_else(|| "-".to_owned(), |fen| fen.to_string());
        case_rows.push_str(&format!(
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            case.status.as_str().to_ascii_lowercase(),
            escape_html(&case.bill_date),
            escape_html(&case.channel),
            case.kind.as_str(),
            escape_html(&case.reference),
            amount(case.ours_fen),
            amount(case.billed_fen),
            case.status.as_str(),
            escape_html(&case.detail),
            escape_html(case.resolution.as_deref().unwrap_or("")),
        ));
    }
    if case_rows.is_empty() {
        case_rows.push_str("<tr><td colspan=\"9\">none: every line matched</td></tr>\n");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mideng · bill reconciliation</title>\n\
<style>body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}\
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f3f3f3}}\
tr.open td{{background:#fff3f0}}tr.repaired td{{background:#f0fff3}}</style></head><body>\n\
<h1>Bill reconciliation</h1>\n<p>Each channel's daily bill matched line by line against our payments and refunds, and our PAID payments and successful refunds of the day looked for on the bill. Amounts in fen.</p>\n\
<table><thead><tr><th>day</th><th>channel</th><th>bill</th><th>lines</th><th>matched</th><th>repaired</th><th>disagreements</th><th>new cases</th><th>charged</th><th>refunded</th></tr></thead><tbody>\n{rows}</tbody></table>\n\
<h2>Cases of these days</h2>\n\
<table><thead><tr><th>day</th><th>channel</th><th>kind</th><th>number</th><th>ours</th><th>billed</th><th>status</th><th>evidence</th><th>resolution</th></tr></thead><tbody>\n{case_rows}</tbody></table>\n\
</body></html>\n"
    )
}

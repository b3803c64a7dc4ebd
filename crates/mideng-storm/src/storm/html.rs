//! The storm's report as one HTML page (`--html`): the run in a few lines, then one figure per
//! question — which duplicates were sent (`duplicates-by-source`), which faults
//! (`faults-by-kind`), what each layer caught over time with the fault windows shaded
//! (`layers-over-time`), how long each operation took (`latency-percentiles`), what the
//! attacker sent (`attacks`) and whether each invariant held (`invariants`). Pure: a function
//! of the [`StormReport`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::StormReport;
use crate::html::{
    Bar, BarGroup, LineChart, PERCENTILE_CLASSES, Row, Scale, Series, Window, bar_chart, escape,
    figure, legend, line_chart, number, page, table,
};

/// At most this many violations are listed one by one (the JSON has them all).
const VIOLATIONS_LISTED_MAX: usize = 500;

/// Milliseconds as seconds, for the timeline's axis.
fn seconds(millis: u64) -> f64 {
    // Exact for any storm: a day is 8.64e7 ms, far below 2^53.
    f64::from(u32::try_from(millis).unwrap_or(u32::MAX)) / 1000.0
}

/// A count as a bar's value.
fn value(count: u64) -> f64 {
    f64::from(u32::try_from(count).unwrap_or(u32::MAX))
}

/// One bar per entry, the largest first (ties by name).
fn count_bars(counts: &BTreeMap<String, u64>) -> Vec<BarGroup> {
    let mut entries: Vec<(&String, &u64)> = counts.iter().collect();
    entries.sort_by(|left, right| right.1.cmp(left.1).then(left.0.cmp(right.0)));
    entries
        .into_iter()
        .map(|(label, count)| BarGroup {
            label: label.clone(),
            bars: vec![Bar::new(value(*count), count.to_string(), "")],
        })
        .collect()
}

impl StormReport {
    /// The report as one self-contained HTML page: inline SVG charts and tables, no script,
    /// nothing fetched.
    pub fn html(&self) -> String {
        let mut body = String::new();
        self.html_header(&mut body);
        body.push_str(&self.html_duplicates());
        body.push_str(&self.html_faults());
        body.push_str(&self.html_layers_over_time());
        body.push_str(&self.html_latencies());
        body.push_str(&self.html_attacks());
        body.push_str(&self.html_history());
        body.push_str(&self.html_invariants());
        let verdict = if self.passed() {
            "every invariant held".to_owned()
        } else {
            format!("{} violation(s)", self.violations.len())
        };
        page(
            &format!("mideng storm · seed {} · {verdict}", self.seed),
            &body,
        )
    }

    fn html_header(&self, body: &mut String) {
        body.push_str("<h1>mideng storm</h1>\n");
        if self.passed() {
            body.push_str("<p><span class=\"pass-badge\">every invariant held</span></p>\n");
        } else {
            let _ = writeln!(
                body,
                "<p><span class=\"fail-badge\">{} invariant violation(s)</span></p>",
                self.violations.len()
            );
        }
        let mut facts = vec![
            ("commit", self.commit.clone()),
            ("seed", self.seed.to_string()),
            ("stack", self.stack.clone()),
            ("instances", self.instances.to_string()),
            (
                "time",
                format!(
                    "{} s workload, {} s quiescence",
                    self.duration_secs, self.quiescence_secs
                ),
            ),
            ("requests", self.requests.to_string()),
            (
                "5xx during faults (excused)",
                self.errors_during_faults.to_string(),
            ),
        ];
        if let Some(strategy) = &self.wallet_strategy {
            facts.push(("wallet strategy", strategy.clone()));
        }
        if let Some(layer) = self.broken_layer {
            facts.push(("layer turned off", layer.name().to_owned()));
        }
        body.push_str("<dl class=\"summary\">\n");
        for (name, fact) in facts {
            let _ = writeln!(body, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&fact));
        }
        body.push_str("</dl>\n");
    }

    fn html_duplicates(&self) -> String {
        let content = if self.duplicates.is_empty() {
            "<p class=\"note\">No duplicate was sent.</p>\n".to_owned()
        } else {
            format!(
                "<p class=\"note\">{} duplicates sent by the clients, by source.</p>\n{}",
                self.duplicates.values().sum::<u64>(),
                bar_chart(
                    &count_bars(&self.duplicates),
                    Scale::Linear,
                    "duplicates sent"
                )
            )
        };
        figure(
            "duplicates-by-source",
            "duplicates-by-source",
            "Duplicates sent, by source",
            &content,
        )
    }

    fn html_faults(&self) -> String {
        let content = if self.faults.is_empty() {
            "<p class=\"note\">No fault was injected.</p>\n".to_owned()
        } else {
            let rows: Vec<Row> = self
                .timeline
                .fault_kinds()
                .into_iter()
                .map(|kind| {
                    let caught: Vec<String> = kind
                        .caught
                        .iter()
                        .map(|(layer, count)| format!("{layer} {count}"))
                        .collect();
                    (
                        None,
                        vec![
                            (kind.kind, false),
                            (format!("{:.1}", seconds(kind.first_ms)), true),
                            (kind.count.to_string(), true),
                            (format!("{:.1}", seconds(kind.median_ms)), true),
                            (format!("{:.1}", seconds(kind.max_ms)), true),
                            (caught.join(" · "), false),
                        ],
                    )
                })
                .collect();
            format!(
                "{}<p class=\"note\">Each kind's windows: when the first began, how long they \
                 lasted, and what each layer caught in the sampling intervals they touched.</p>\n{}{}",
                bar_chart(&count_bars(&self.faults), Scale::Linear, "faults injected"),
                table(
                    &[
                        ("window", false),
                        ("first at (s)", true),
                        ("windows", true),
                        ("median (s)", true),
                        ("longest (s)", true),
                        ("caught around them", false),
                    ],
                    &rows,
                ),
                self.html_availability()
            )
        };
        figure(
            "faults-by-kind",
            "faults-by-kind",
            "Faults, by kind",
            &content,
        )
    }

    /// What each kind of fault did to the clients, from their history.
    fn html_availability(&self) -> String {
        if self.availability.is_empty() {
            return String::new();
        }
        let rows: Vec<Row> = self
            .availability
            .iter()
            .map(|kind| {
                (
                    None,
                    vec![
                        (kind.kind.clone(), false),
                        (kind.attempts.to_string(), true),
                        (kind.unanswered.to_string(), true),
                        (format!("{:.1}", seconds(kind.without_ok_median_ms)), true),
                        (
                            format!(
                                "{:.1} (ceiling {:.0})",
                                seconds(kind.without_ok_max_ms),
                                seconds(kind.without_ok_ceiling_ms)
                            ),
                            true,
                        ),
                        (kind.settled_ok.to_string(), true),
                        (kind.settled_refused.to_string(), true),
                        (kind.never_answered.to_string(), true),
                    ],
                )
            })
            .collect();
        format!(
            "<p class=\"note\">What each kind did to the clients: attempts sent inside its \
             windows and those without a definite answer; the longest stretch without an ok \
             answer to any client, from a window's start to {} s after its end; and how the \
             operations left without an answer there ended.</p>\n{}",
            super::availability::AFTER_WINDOW_MS / 1000,
            table(
                &[
                    ("window", false),
                    ("attempts", true),
                    ("unanswered", true),
                    ("no ok, median (s)", true),
                    ("no ok, longest (s)", true),
                    ("ok on a retry", true),
                    ("refused on a retry", true),
                    ("never answered", true),
                ],
                &rows,
            )
        )
    }

    fn html_layers_over_time(&self) -> String {
        let timeline = &self.timeline;
        let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
        for sample in &timeline.samples {
            for (layer, caught) in &sample.caught {
                *totals.entry(layer.as_str()).or_default() += caught;
            }
        }
        let series: Vec<Series> = totals
            .keys()
            .map(|layer| Series {
                name: (*layer).to_owned(),
                points: timeline
                    .samples
                    .iter()
                    .map(|sample| {
                        let caught = sample.caught.get(*layer).copied().unwrap_or(0);
                        let span = seconds(sample.to_ms.saturating_sub(sample.from_ms)).max(0.001);
                        (
                            seconds(sample.from_ms.midpoint(sample.to_ms)),
                            value(caught) / span,
                        )
                    })
                    .collect(),
            })
            .collect();
        let chart = LineChart {
            series,
            windows: timeline
                .fault_windows
                .iter()
                .map(|window| Window {
                    from: seconds(window.from_ms),
                    to: seconds(window.to_ms),
                    label: window.kind.clone(),
                })
                .collect(),
            marks: vec![(
                seconds(timeline.quiescence_start_ms),
                "quiescence".to_owned(),
            )],
            x_max: seconds(timeline.end_ms),
            x_unit: "seconds since the workload began".to_owned(),
            y_unit: "caught per second".to_owned(),
        };
        let mut content = format!(
            "<p class=\"note\">What each layer stopped or settled (the service's decision \
             counters, first arrivals left out), per second, sampled every {} s through the \
             workload, quiescence and the audit. Shaded: the {} fault window(s); the dashed \
             line: quiescence begins.</p>\n",
            number(seconds(timeline.interval_ms)),
            timeline.fault_windows.len()
        );
        if totals.is_empty() {
            content.push_str(
                "<p class=\"note\">No layer caught anything in the samples (against a \
                 deployment the storm did not start, the counters come from \
                 --target-metrics).</p>\n",
            );
        }
        content.push_str(&line_chart(&chart));
        let rows: Vec<Row> = self
            .layers
            .iter()
            .map(|(layer, outcomes)| {
                let outcomes_text = outcomes
                    .iter()
                    .map(|(outcome, count)| format!("{outcome} {count}"))
                    .collect::<Vec<_>>()
                    .join(" · ");
                (
                    None,
                    vec![
                        (layer.clone(), false),
                        (outcomes.values().sum::<u64>().to_string(), true),
                        (outcomes_text, false),
                    ],
                )
            })
            .collect();
        if !rows.is_empty() {
            content.push_str(
                "<p class=\"note\">In total, by layer and <code>operation:outcome</code>:</p>\n",
            );
            content.push_str(&table(
                &[
                    ("layer", false),
                    ("caught", true),
                    ("what it caught", false),
                ],
                &rows,
            ));
        }
        figure(
            "layers-over-time",
            "layers-over-time",
            "What each layer caught, over time",
            &content,
        )
    }

    fn html_latencies(&self) -> String {
        if self.latencies.is_empty() {
            return figure(
                "latency-percentiles",
                "latency-percentiles",
                "Latency per operation",
                "<p class=\"note\">No request was answered.</p>\n",
            );
        }
        let groups: Vec<BarGroup> = self
            .latencies
            .iter()
            .map(|(operation, latency)| BarGroup {
                label: format!("{operation} ({} answers)", latency.count),
                bars: [
                    latency.p50_ms,
                    latency.p90_ms,
                    latency.p99_ms,
                    latency.max_ms,
                ]
                .into_iter()
                .zip(PERCENTILE_CLASSES)
                .map(|(ms, (class, _))| Bar::new(ms, format!("{class} {} ms", number(ms)), class))
                .collect(),
            })
            .collect();
        let legend_entries: Vec<(&str, &str)> = PERCENTILE_CLASSES
            .iter()
            .map(|(class, colour)| (*colour, *class))
            .collect();
        let rows: Vec<Row> = self
            .latencies
            .iter()
            .map(|(operation, latency)| {
                (
                    None,
                    vec![
                        (operation.clone(), false),
                        (latency.count.to_string(), true),
                        (number(latency.p50_ms), true),
                        (number(latency.p90_ms), true),
                        (number(latency.p99_ms), true),
                        (number(latency.max_ms), true),
                    ],
                )
            })
            .collect();
        let content = format!(
            "<p class=\"note\">As the storm's clients saw them, loopback HTTP included, \
             answered requests only (a request a client gave up on has no latency); faults \
             and the clients' own retries are in these figures. Percentiles within 3 %.</p>\n\
             {}{}{}",
            legend(&legend_entries),
            bar_chart(&groups, Scale::Log10, "milliseconds"),
            table(
                &[
                    ("operation", false),
                    ("answers", true),
                    ("p50 ms", true),
                    ("p90 ms", true),
                    ("p99 ms", true),
                    ("max ms", true),
                ],
                &rows,
            )
        );
        figure(
            "latency-percentiles",
            "latency-percentiles",
            "Latency per operation",
            &content,
        )
    }

    fn html_attacks(&self) -> String {
        let Some(attacks) = &self.attacks else {
            return String::new();
        };
        let rows: Vec<Row> = attacks
            .kinds
            .iter()
            .chain(&attacks.boundary.kinds)
            .map(|(kind, counts)| {
                (
                    None,
                    vec![
                        (kind.clone(), false),
                        (counts.sent.to_string(), true),
                        (counts.acknowledged.to_string(), true),
                        (counts.refused.to_string(), true),
                        (counts.unanswered.to_string(), true),
                        (counts.stopped_by.to_owned(), false),
                    ],
                )
            })
            .collect();
        let boundary = &attacks.boundary;
        let listeners = if boundary.kinds.is_empty() {
            String::new()
        } else {
            format!(
                "<p class=\"note\">The canary, which no tenant may reach, accepted {} \
                 connection(s) (must be 0); the stalled endpoint got {} requests, at most {} open \
                 at once (the dispatchers may hold {}).</p>\n",
                boundary.canary_connections,
                boundary.stall_requests,
                boundary.stall_open_max,
                boundary.stall_open_allowed
            )
        };
        let content = format!(
            "<p class=\"note\">{} hostile notifies · {} victims of {} tenant(s) · {} across \
             tenants · <strong>{} accepted</strong> (must be 0; a replay is acknowledged as a \
             duplicate).</p>\n{listeners}{}",
            attacks.sent(),
            attacks.victims,
            attacks.victim_tenants,
            attacks.cross_tenant,
            attacks.accepted,
            table(
                &[
                    ("attack", false),
                    ("sent", true),
                    ("acknowledged", true),
                    ("refused", true),
                    ("no answer", true),
                    ("stopped by", false),
                ],
                &rows,
            )
        );
        figure("attacks", "attacks", "The attacker's notifies", &content)
    }

    fn html_history(&self) -> String {
        if self.audit.history.is_empty() {
            return String::new();
        }
        let rows: Vec<Row> = self
            .audit
            .history
            .iter()
            .map(|(kind, counts)| {
                (
                    None,
                    vec![
                        (kind.clone(), false),
                        (counts.operations.to_string(), true),
                        (counts.attempts.to_string(), true),
                        (counts.unknown_attempts.to_string(), true),
                        (counts.ok.to_string(), true),
                        (counts.refused.to_string(), true),
                        (counts.unknown.to_string(), true),
                        (counts.unknown_applied.to_string(), true),
                        (counts.unknown_not_applied.to_string(), true),
                        (counts.settled_by_retry.to_string(), true),
                    ],
                )
            })
            .collect();
        let mut content = String::from(
            "<p class=\"note\">Every keyed operation the clients invoked, with each attempt's \
             invocation and answer: ok, refused, or no definite answer (none, a 5xx, a 202). \
             The history check holds each to the database: ok took effect once, refused took \
             none, never answered at most one; each wallet's ledger order respects real time \
             and every answer.</p>\n",
        );
        content.push_str(&table(
            &[
                ("operation", false),
                ("operations", true),
                ("attempts", true),
                ("attempts without an answer", true),
                ("ok", true),
                ("refused", true),
                ("never answered", true),
                ("of which applied", true),
                ("of which not applied", true),
                ("ok after an attempt without an answer", true),
            ],
            &rows,
        ));
        let linearizable = &self.audit.linearizable;
        if linearizable.wallets > 0 {
            content.push_str(&format!(
                "<p class=\"note\">Linearizability: {} of {} wallets checked ({} operations, \
                 {} reads, {} deducts refused for funds){}.</p>\n",
                linearizable.checked,
                linearizable.wallets,
                linearizable.operations,
                linearizable.reads,
                linearizable.refused_for_funds,
                if linearizable.unchecked.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; <strong>unchecked</strong> (search past its budget, neither passed \
                         nor failed): {}",
                        escape(&linearizable.unchecked.join(", "))
                    )
                }
            ));
        }
        figure(
            "history",
            "history",
            "The clients' history: what each operation came to",
            &content,
        )
    }

    fn html_invariants(&self) -> String {
        let rows: Vec<Row> = self
            .invariants
            .iter()
            .map(|result| {
                let (class, verdict) = match (result.checked, result.violations) {
                    (false, _) => ("unchecked", "not checked"),
                    (true, 0) => ("pass", "pass"),
                    (true, _) => ("fail", "FAIL"),
                };
                (
                    Some(class),
                    vec![
                        (result.invariant.clone(), false),
                        (verdict.to_owned(), false),
                        (result.violations.to_string(), true),
                    ],
                )
            })
            .collect();
        let audit = &self.audit;
        let mut content = format!(
            "<p class=\"note\">Audited after quiescence: {}. Webhook invariants need the \
             storm's own merchant, attack invariants the attacker.</p>\n",
            escape(&super::report::audit_summary(audit))
        );
        content.push_str(&table(
            &[
                ("invariant", false),
                ("result", false),
                ("violations", true),
            ],
            &rows,
        ));
        if !self.violations.is_empty() {
            let _ = writeln!(
                content,
                "<details open><summary>{} violation(s){}</summary>\n<ul>",
                self.violations.len(),
                if self.violations.len() > VIOLATIONS_LISTED_MAX {
                    format!(", the first {VIOLATIONS_LISTED_MAX}")
                } else {
                    String::new()
                }
            );
            for violation in self.violations.iter().take(VIOLATIONS_LISTED_MAX) {
                let _ = writeln!(
                    content,
                    "<li><strong>{}</strong>: {}</li>",
                    escape(violation.invariant),
                    escape(&violation.detail)
                );
            }
            content.push_str("</ul>\n</details>\n");
        }
        figure(
            "invariants",
            "invariants",
            "The audit's invariants",
            &content,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::history::HistoryCounts;
    use crate::audit::{AuditFigures, Violation, invariant_results};
    use crate::html::tests::{attribute, figure_of, number_attribute, tags};
    use crate::storm::{FaultAvailability, FaultWindow, LatencySummary, LayerSample, Timeline};

    fn report() -> StormReport {
        let violations = vec![Violation {
            invariant: "balances equal the ledger",
            detail: "u1 <b>50</b> & 60".to_owned(),
        }];
        StormReport {
            commit: "0123abc".to_owned(),
            seed: 42,
            stack: "embedded".to_owned(),
            instances: 1,
            duration_secs: 10,
            quiescence_secs: 5,
            requests: 1000,
            errors_during_faults: 3,
            errors_during_faults_by_kind: BTreeMap::new(),
            clock_refusals: 0,
            notifies_sent_back: 0,
            commit_answers_lost: 0,
            duplicates: BTreeMap::from([
                ("double click".to_owned(), 40),
                ("manual replay".to_owned(), 10),
                ("<script>alert(1)</script>".to_owned(), 20),
            ]),
            faults: BTreeMap::from([("instance killed mid-request".to_owned(), 2)]),
            layers: BTreeMap::from([(
                "key".to_owned(),
                BTreeMap::from([("wallet.deduct:replayed".to_owned(), 30)]),
            )]),
            audit: AuditFigures {
                history: BTreeMap::from([(
                    "deduct".to_owned(),
                    HistoryCounts {
                        operations: 40,
                        attempts: 52,
                        unknown_attempts: 9,
                        ok: 35,
                        refused: 3,
                        unknown: 2,
                        unknown_applied: 1,
                        unknown_not_applied: 1,
                        settled_by_retry: 6,
                    },
                )]),
                ..AuditFigures::default()
            },
            invariants: invariant_results(&violations, true, false, true),
            violations,
            broken_layer: None,
            wallet_strategy: Some("optimistic".to_owned()),
            attacks: None,
            timeline: Timeline {
                interval_ms: 1000,
                workload_end_ms: 10_000,
                quiescence_start_ms: 11_000,
                end_ms: 20_000,
                samples: (0..20)
                    .map(|second| LayerSample {
                        from_ms: second * 1000,
                        to_ms: (second + 1) * 1000,
                        requests: 50,
                        caught: BTreeMap::from([("key".to_owned(), second)]),
                    })
                    .collect(),
                fault_windows: vec![FaultWindow {
                    kind: "instance killed mid-request".to_owned(),
                    from_ms: 4_000,
                    to_ms: 6_000,
                }],
            },
            availability: vec![FaultAvailability {
                kind: "instance killed mid-request".to_owned(),
                windows: 1,
                attempts: 120,
                unanswered: 7,
                without_ok_median_ms: 1_500,
                without_ok_max_ms: 1_500,
                without_ok_ceiling_ms: 15_000,
                unanswered_operations: 6,
                settled_ok: 5,
                settled_refused: 1,
                never_answered: 0,
            }],
            latencies: BTreeMap::from([(
                "POST /v1/orders".to_owned(),
                LatencySummary {
                    count: 100,
                    p50_ms: 2.0,
                    p90_ms: 8.0,
                    p99_ms: 20.0,
                    max_ms: 2000.0,
                },
            )]),
        }
    }

    #[test]
    fn html_storm_page_has_every_chart_with_its_title() {
        let page = report().html();
        assert!(page.starts_with("<!DOCTYPE html>"));
        for chart in [
            "duplicates-by-source",
            "faults-by-kind",
            "layers-over-time",
            "latency-percentiles",
            "history",
            "invariants",
        ] {
            let figure = figure_of(&page, chart);
            assert!(figure.contains(&format!("id=\"{chart}\"")), "{chart}");
            assert!(figure.contains("<h2>"), "{chart} has no title");
        }
        // Self-contained: nothing to fetch, nothing to run.
        for absent in ["<script", "http://", "https://", "src=", "<link"] {
            let without_svg_namespace = page.replace("http://www.w3.org/2000/svg", "");
            assert!(!without_svg_namespace.contains(absent), "{absent}");
        }
    }

    #[test]
    fn html_duplicate_bars_are_proportional_to_the_counts() {
        let page = report().html();
        let bars = tags(figure_of(&page, "duplicates-by-source"), "rect", "bar");
        let width_of = |count: f64| {
            bars.iter()
                .find(|bar| number_attribute(bar, "data-value") == count)
                .map(|bar| number_attribute(bar, "width"))
                .unwrap_or_else(|| panic!("no bar of {count}"))
        };
        assert_eq!(bars.len(), 3);
        assert!((width_of(40.0) - 4.0 * width_of(10.0)).abs() < 0.01);
        assert!((width_of(20.0) - 2.0 * width_of(10.0)).abs() < 0.01);
    }

    #[test]
    fn html_storm_escapes_what_the_run_named() {
        let page = report().html();
        assert!(!page.contains("<script>alert(1)</script>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("u1 &lt;b&gt;50&lt;/b&gt; &amp; 60"));
    }

    #[test]
    fn html_fault_windows_are_shaded_where_they_were() {
        let page = report().html();
        let figure = figure_of(&page, "layers-over-time");
        let windows = tags(figure, "rect", "window");
        assert_eq!(windows.len(), 1);
        assert_eq!(attribute(windows[0], "data-from"), Some("4"));
        assert_eq!(attribute(windows[0], "data-to"), Some("6"));
        // 4 s to 6 s of a 20 s timeline: a tenth of the plot, a fifth of the way in.
        let plot = crate::html::LINE_PLOT_RIGHT - crate::html::LINE_PLOT_LEFT;
        let x = number_attribute(windows[0], "x");
        let width = number_attribute(windows[0], "width");
        assert!(
            (x - crate::html::LINE_PLOT_LEFT - 0.2 * plot).abs() < 0.01,
            "{x}"
        );
        assert!((width - 0.1 * plot).abs() < 0.01, "{width}");
        let lines = tags(figure, "polyline", "series");
        assert_eq!(lines.len(), 1);
        assert_eq!(attribute(lines[0], "data-series"), Some("key"));
        assert_eq!(
            attribute(lines[0], "points").map(|points| points.split(' ').count()),
            Some(20)
        );
    }

    #[test]
    fn html_invariants_are_coloured_by_their_result() {
        let page = report().html();
        let figure = figure_of(&page, "invariants");
        let failed: Vec<&str> = figure
            .match_indices("<tr class=\"fail\">")
            .map(|(start, _)| &figure[start..])
            .collect();
        assert_eq!(failed.len(), 1);
        assert!(failed[0].starts_with("<tr class=\"fail\"><td>balances equal the ledger</td>"));
        assert!(figure.contains("<tr class=\"pass\"><td>one paid payment per order</td>"));
        assert!(figure.contains("<tr class=\"unchecked\"><td>every attack refused</td>"));
        assert!(page.contains("fail-badge"));
    }

    #[test]
    fn html_latency_bars_per_operation_and_percentile() {
        let page = report().html();
        let figure = figure_of(&page, "latency-percentiles");
        let bars = tags(figure, "rect", "bar");
        assert_eq!(bars.len(), 4);
        let widths: Vec<f64> = bars
            .iter()
            .map(|bar| number_attribute(bar, "width"))
            .collect();
        assert!(
            widths.windows(2).all(|pair| pair[0] < pair[1]),
            "{widths:?}"
        );
        assert!(figure.contains("<td class=\"number\">2000</td>"));
    }
}

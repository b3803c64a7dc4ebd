//! The bench's report as one HTML page (`--html`): per concurrency, the throughput of every
//! scenario, limit and wallet strategy as horizontal bars (`throughput`), the ratios
//! (`ratios`) and the goals against their targets (`goals`), each with its table. Pure: a
//! function of the [`BenchReport`].

use std::fmt::Write as _;

use super::report::{BenchReport, BenchRun, Machinery, OpenLoopResult, Operation};
use crate::html::{
    Bar, BarGroup, P999_CLASS, PERCENTILE_CLASSES, Row, Scale, bar_chart, escape, figure, legend,
    number, page, table,
};

/// Colours of the throughput chart's classes, for its legend (the page's style has the same).
const THROUGHPUT_LEGEND: [(&str, &str); 3] = [
    ("#4e79a7", "machinery on"),
    ("#f28e2b", "machinery off"),
    ("#9c9c9c", "the machine's limit"),
];

impl BenchReport {
    /// The report as one self-contained HTML page: inline SVG charts and tables, no script,
    /// nothing fetched.
    pub fn html(&self) -> String {
        let concurrency: Vec<String> = self.concurrency.iter().map(u16::to_string).collect();
        let strategies: Vec<&str> = self
            .wallet_strategies
            .iter()
            .map(|strategy| strategy.as_str())
            .collect();
        let mut body = String::from("<h1>mideng bench</h1>\n<dl class=\"summary\">\n");
        for (name, fact) in [
            ("stack", self.stack.clone()),
            ("per scenario", format!("up to {} s", self.duration_secs)),
            ("concurrent clients", concurrency.join(" then ")),
            ("wallet strategies", strategies.join(", ")),
        ] {
            let _ = writeln!(body, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(&fact));
        }
        body.push_str("</dl>\n");
        for run in &self.runs {
            let _ = writeln!(
                body,
                "<section id=\"c{0}\" data-concurrency=\"{0}\">",
                run.concurrency
            );
            body.push_str(&throughput(run));
            body.push_str(&open_loop(run));
            body.push_str(&ratios(run));
            body.push_str(&goals(run));
            body.push_str(&run_notes(run));
            body.push_str("</section>\n");
        }
        if !self.notes.is_empty() {
            body.push_str("<h2>Notes</h2>\n<ul>\n");
            for note in &self.notes {
                let _ = writeln!(body, "<li>{}</li>", escape(note));
            }
            body.push_str("</ul>\n");
        }
        page(
            &format!(
                "mideng bench · {} · {} concurrent clients",
                self.stack,
                concurrency.join(", ")
            ),
            &body,
        )
    }
}

/// The bar class of a machinery.
fn machinery_class(machinery: Machinery) -> &'static str {
    match machinery {
        Machinery::On => "on",
        Machinery::Off => "off",
    }
}

fn figures_cells(figures: &super::report::Figures) -> Vec<(String, bool)> {
    vec![
        (figures.requests.to_string(), true),
        (figures.errors.to_string(), true),
        (format!("{:.1}", figures.per_second), true),
        (format!("{:.2}", figures.p50_ms), true),
        (format!("{:.2}", figures.p99_ms), true),
        (
            figures.cpu.map_or_else(
                || "-".to_owned(),
                |cpu| {
                    format!(
                        "{:.0}: {:.0} / {:.0} / {:.0} / {:.0}",
                        cpu.total_us(),
                        cpu.service_us,
                        cpu.client_us,
                        cpu.database_us,
                        cpu.redis_us
                    )
                },
            ),
            true,
        ),
    ]
}

fn throughput(run: &BenchRun) -> String {
    let mut groups: Vec<BarGroup> = run
        .scenarios
        .iter()
        .map(|scenario| BarGroup {
            label: format!(
                "{} · machinery {} · {}",
                scenario.operation.label(),
                scenario.machinery.label(),
                scenario.path.label()
            ),
            bars: vec![Bar::new(
                scenario.figures.per_second,
                format!("{} req/s", number(scenario.figures.per_second)),
                machinery_class(scenario.machinery),
            )],
        })
        .collect();
    groups.extend(run.strategies.iter().map(|row| BarGroup {
        label: format!(
            "{} · {} strategy · first-time",
            row.operation.label(),
            row.strategy.as_str()
        ),
        bars: vec![Bar::new(
            row.first_time.figures.per_second,
            format!("{} req/s", number(row.first_time.figures.per_second)),
            "on",
        )],
    }));
    groups.extend(run.limits.iter().map(|limit| BarGroup {
        label: limit.name.clone(),
        bars: vec![Bar::new(
            limit.figures.per_second,
            format!("{} ops/s", number(limit.figures.per_second)),
            "limit",
        )],
    }));
    let scenario_rows: Vec<Row> = run
        .scenarios
        .iter()
        .map(|scenario| {
            let mut cells = vec![
                (scenario.operation.label().to_owned(), false),
                (scenario.machinery.label().to_owned(), false),
                (scenario.path.label().to_owned(), false),
            ];
            cells.extend(figures_cells(&scenario.figures));
            cells.push((scenario.replayed.to_string(), true));
            cells.push((scenario.refused.to_string(), true));
            (None, cells)
        })
        .collect();
    let limit_rows: Vec<Row> = run
        .limits
        .iter()
        .map(|limit| {
            let mut cells = vec![(limit.name.clone(), false)];
            cells.extend(figures_cells(&limit.figures));
            (None, cells)
        })
        .collect();
    let strategy_rows: Vec<Row> = run
        .strategies
        .iter()
        .map(|row| {
            let mut cells = vec![
                (row.strategy.as_str().to_owned(), false),
                (
                    match row.operation {
                        Operation::DeductHotWallet => "hot",
                        _ => "distinct",
                    }
                    .to_owned(),
                    false,
                ),
            ];
            cells.extend(figures_cells(&row.first_time.figures));
            cells.push((
                row.fraction_of_limit
                    .map_or_else(|| "-".to_owned(), |fraction| format!("{fraction:.3}")),
                true,
            ));
            cells.push((
                format!("{}/{}", row.replay.replayed, row.replay.figures.requests),
                true,
            ));
            (None, cells)
        })
        .collect();
    let figure_headers = [
        ("requests", true),
        ("errors", true),
        ("per s", true),
        ("p50 ms", true),
        ("p99 ms", true),
        ("CPU µs/req: service / client / database / redis", true),
    ];
    let mut content = format!(
        "<p class=\"note\">Answers per second of wall time, the clients and the service on the \
         same machine: every scenario of the two deployments, each wallet strategy's \
         first-time deducts, and the machine's limits measured in the same run.</p>\n{}{}",
        legend(&THROUGHPUT_LEGEND),
        bar_chart(&groups, Scale::Linear, "per second")
    );
    let mut headers = vec![("scenario", false), ("machinery", false), ("path", false)];
    headers.extend(figure_headers);
    headers.extend([("replayed", true), ("refused", true)]);
    content.push_str(&table(&headers, &scenario_rows));
    if !limit_rows.is_empty() {
        let mut headers = vec![("machine limit", false)];
        headers.extend(figure_headers);
        content.push_str(&table(&headers, &limit_rows));
    }
    if !strategy_rows.is_empty() {
        let mut headers = vec![("wallet strategy", false), ("wallets", false)];
        headers.extend(figure_headers);
        headers.extend([("/ limit", true), ("replays", true)]);
        content.push_str(&table(&headers, &strategy_rows));
    }
    figure(
        &format!("throughput-c{}", run.concurrency),
        "throughput",
        &format!("Throughput at {} concurrent clients", run.concurrency),
        &content,
    )
}

/// The open loop's latency percentiles, per scenario, on a logarithmic scale.
fn open_loop(run: &BenchRun) -> String {
    if run.open_loop.is_empty() {
        return String::new();
    }
    let classes = [
        PERCENTILE_CLASSES[0],
        PERCENTILE_CLASSES[2],
        P999_CLASS,
        PERCENTILE_CLASSES[3],
    ];
    let label = |row: &OpenLoopResult| {
        format!(
            "{} · machinery {} · {} · {} of {} req/s offered",
            row.operation.label(),
            row.machinery.label(),
            row.path.label(),
            number(row.offered_per_second),
            number(row.closed_per_second)
        )
    };
    let groups: Vec<BarGroup> = run
        .open_loop
        .iter()
        .map(|row| BarGroup {
            label: label(row),
            bars: [
                row.figures.p50_ms,
                row.figures.p99_ms,
                row.p999_ms,
                row.max_ms,
            ]
            .into_iter()
            .zip(classes)
            .map(|(ms, (class, _))| Bar::new(ms, format!("{class} {} ms", number(ms)), class))
            .collect(),
        })
        .collect();
    let rows: Vec<Row> = run
        .open_loop
        .iter()
        .map(|row| {
            let mut cells = vec![
                (row.operation.label().to_owned(), false),
                (row.machinery.label().to_owned(), false),
                (row.path.label().to_owned(), false),
                (format!("{:.1}", row.offered_per_second), true),
                (format!("{:.1}", row.figures.per_second), true),
                (row.figures.errors.to_string(), true),
            ];
            cells.extend(
                [
                    row.figures.p50_ms,
                    row.figures.p99_ms,
                    row.p999_ms,
                    row.max_ms,
                ]
                .map(|ms| (format!("{ms:.2}"), true)),
            );
            (None, cells)
        })
        .collect();
    let legend_entries: Vec<(&str, &str)> = classes
        .iter()
        .map(|(class, colour)| (*colour, *class))
        .collect();
    let content = format!(
        "<p class=\"note\">The deducts sent again on a fixed schedule, at a share of what the \
         closed loop reached: each request's latency counts from when it was due, so that a slow \
         answer delays no later measurement.</p>\n{}{}{}",
        legend(&legend_entries),
        bar_chart(&groups, Scale::Log10, "milliseconds"),
        table(
            &[
                ("scenario", false),
                ("machinery", false),
                ("path", false),
                ("offered/s", true),
                ("answered/s", true),
                ("errors", true),
                ("p50 ms", true),
                ("p99 ms", true),
                ("p99.9 ms", true),
                ("max ms", true),
            ],
            &rows,
        )
    );
    figure(
        &format!("open-loop-c{}", run.concurrency),
        "open-loop",
        &format!(
            "Latency in the open loop at {} concurrent clients",
            run.concurrency
        ),
        &content,
    )
}

fn ratios(run: &BenchRun) -> String {
    let groups: Vec<BarGroup> = run
        .ratios
        .iter()
        .map(|ratio| BarGroup {
            label: ratio.name.clone(),
            bars: vec![Bar::new(ratio.value, format!("{:.3}", ratio.value), "")],
        })
        .collect();
    let rows: Vec<Row> = run
        .ratios
        .iter()
        .map(|ratio| {
            (
                None,
                vec![
                    (ratio.name.clone(), false),
                    (format!("{:.3}", ratio.value), true),
                    (ratio.detail.clone(), false),
                ],
            )
        })
        .collect();
    let content = if groups.is_empty() {
        "<p class=\"note\">No ratio could be computed.</p>\n".to_owned()
    } else {
        format!(
            "{}{}",
            bar_chart(&groups, Scale::Linear, "ratio"),
            table(&[("ratio", false), ("value", true), ("from", false)], &rows)
        )
    };
    figure(
        &format!("ratios-c{}", run.concurrency),
        "ratios",
        &format!("Ratios at {} concurrent clients", run.concurrency),
        &content,
    )
}

fn goals(run: &BenchRun) -> String {
    if run.goals.is_empty() {
        return String::new();
    }
    let groups: Vec<BarGroup> = run
        .goals
        .iter()
        .map(|goal| BarGroup {
            label: goal.name.clone(),
            bars: vec![Bar {
                value: goal.value,
                text: format!("{:.3} (goal ≥ {})", goal.value, number(goal.goal)),
                class: if goal.met { "met" } else { "unmet" },
                target: Some(goal.goal),
            }],
        })
        .collect();
    let rows: Vec<Row> = run
        .goals
        .iter()
        .map(|goal| {
            (
                Some(if goal.met { "pass" } else { "fail" }),
                vec![
                    (goal.name.clone(), false),
                    (format!("{:.3}", goal.value), true),
                    (format!("≥ {}", number(goal.goal)), true),
                    ((if goal.met { "met" } else { "not met" }).to_owned(), false),
                    (goal.detail.clone(), false),
                ],
            )
        })
        .collect();
    let content = format!(
        "<p class=\"note\">Each goal's ratio against a baseline of the same run; the black \
         tick is the target.</p>\n{}{}",
        bar_chart(&groups, Scale::Linear, "ratio"),
        table(
            &[
                ("goal", false),
                ("value", true),
                ("target", true),
                ("result", false),
                ("from", false),
            ],
            &rows
        )
    );
    figure(
        &format!("goals-c{}", run.concurrency),
        "goals",
        &format!("Goals at {} concurrent clients", run.concurrency),
        &content,
    )
}

/// The run's first errors and notes, when there are any.
fn run_notes(run: &BenchRun) -> String {
    let mut failures: Vec<String> = run
        .scenarios
        .iter()
        .chain(
            run.strategies
                .iter()
                .flat_map(|row| [&row.first_time, &row.replay]),
        )
        .filter_map(|scenario| {
            scenario.first_error.as_ref().map(|error| {
                format!(
                    "{} ({}, {}): {error}",
                    scenario.operation.label(),
                    scenario.machinery.label(),
                    scenario.path.label()
                )
            })
        })
        .collect();
    failures.extend(run.limits.iter().filter_map(|limit| {
        limit
            .first_error
            .as_ref()
            .map(|error| format!("{}: {error}", limit.name))
    }));
    let mut out = String::new();
    for (title, items) in [("First errors", &failures), ("Notes", &run.notes)] {
        if items.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<h3>{title} at {} concurrent clients</h3>\n<ul>",
            run.concurrency
        );
        for item in items {
            let _ = writeln!(out, "<li>{}</li>", escape(item));
        }
        out.push_str("</ul>\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{
        Figures, Goal, GoalKind, LimitKind, LimitResult, OpenLoopResult, PathKind, Ratio,
        ScenarioResult, Via,
    };
    use crate::html::tests::{attribute, figure_of, number_attribute, tags};

    fn figures(per_second: f64) -> Figures {
        Figures {
            requests: 100,
            errors: 0,
            seconds: 1.0,
            per_second,
            p50_ms: 1.0,
            p99_ms: 2.0,
            cpu: None,
        }
    }

    fn report() -> BenchReport {
        let mut run = BenchRun::new(16);
        run.scenarios = vec![
            ScenarioResult {
                operation: Operation::DeductDistinctWallets,
                machinery: Machinery::On,
                path: PathKind::FirstTime,
                figures: figures(1_000.0),
                replayed: 0,
                refused: 0,
                first_error: Some("<500> & more".to_owned()),
            },
            ScenarioResult {
                operation: Operation::DeductDistinctWallets,
                machinery: Machinery::Off,
                path: PathKind::FirstTime,
                figures: figures(2_000.0),
                replayed: 0,
                refused: 0,
                first_error: None,
            },
        ];
        run.limits = vec![LimitResult {
            name: "one-row-insert commit, SQLite, same driver".to_owned(),
            kind: LimitKind::OneRowInsert,
            via: Via::SameDriver,
            figures: figures(4_000.0),
            first_error: None,
        }];
        run.ratios = vec![
            Ratio {
                name: "layer overhead".to_owned(),
                value: 0.5,
                detail: "1000 / 2000".to_owned(),
            },
            Ratio {
                name: "replay speed-up".to_owned(),
                value: 12.0,
                detail: "12000 / 1000".to_owned(),
            },
        ];
        run.goals = vec![
            Goal {
                kind: GoalKind::DeductOnOff,
                name: "deduct on / off".to_owned(),
                value: 0.5,
                goal: 0.9,
                met: false,
                detail: "d".to_owned(),
            },
            Goal {
                kind: GoalKind::ReplayVsFirstTime,
                name: "replay / first-time".to_owned(),
                value: 12.0,
                goal: 10.0,
                met: true,
                detail: "d".to_owned(),
            },
        ];
        run.open_loop = vec![OpenLoopResult {
            operation: Operation::DeductDistinctWallets,
            machinery: Machinery::On,
            path: PathKind::Replay,
            closed_per_second: 1_000.0,
            offered_per_second: 500.0,
            figures: figures(499.0),
            p999_ms: 10.0,
            max_ms: 100.0,
            replayed: 499,
            first_error: None,
        }];
        BenchReport {
            stack: "embedded (SQLite)".to_owned(),
            duration_secs: 5,
            open_loop_percent: 50,
            concurrency: vec![16],
            wallet_strategies: Vec::new(),
            runs: vec![run],
            memory: None,
            notes: vec!["a <note>".to_owned()],
        }
    }

    fn width_of(bars: &[&str], value: f64) -> f64 {
        bars.iter()
            .find(|bar| number_attribute(bar, "data-value") == value)
            .map(|bar| number_attribute(bar, "width"))
            .unwrap_or_else(|| panic!("no bar of {value}"))
    }

    #[test]
    fn html_throughput_bars_are_proportional_to_the_rates() {
        let page = report().html();
        let figure = figure_of(&page, "throughput");
        assert!(figure.contains("id=\"throughput-c16\""));
        assert!(figure.contains("<h2>Throughput at 16 concurrent clients</h2>"));
        let bars = tags(figure, "rect", "bar");
        assert_eq!(bars.len(), 3);
        let on = width_of(&bars, 1_000.0);
        assert!((width_of(&bars, 2_000.0) - 2.0 * on).abs() < 0.01);
        assert!((width_of(&bars, 4_000.0) - 4.0 * on).abs() < 0.01);
        assert_eq!(tags(figure, "rect", "off").len(), 1);
        assert_eq!(tags(figure, "rect", "limit").len(), 1);
    }

    #[test]
    fn html_ratio_and_goal_bars_with_their_targets() {
        let page = report().html();
        let ratios = tags(figure_of(&page, "ratios"), "rect", "bar");
        assert!((width_of(&ratios, 12.0) - 24.0 * width_of(&ratios, 0.5)).abs() < 0.01);
        let figure = figure_of(&page, "goals");
        let unmet = tags(figure, "rect", "unmet");
        let met = tags(figure, "rect", "met");
        assert_eq!((unmet.len(), met.len()), (1, 1));
        let targets = tags(figure, "line", "target");
        assert_eq!(
            targets
                .iter()
                .map(|target| attribute(target, "data-value"))
                .collect::<Vec<_>>(),
            [Some("0.9"), Some("10")]
        );
        assert!(figure.contains("<tr class=\"fail\"><td>deduct on / off</td>"));
        assert!(figure.contains("<tr class=\"pass\"><td>replay / first-time</td>"));
    }

    /// The open loop's percentiles on a logarithmic scale: a decade apart, equally far apart.
    #[test]
    fn html_open_loop_latencies_on_a_log_scale() {
        let page = report().html();
        let figure = figure_of(&page, "open-loop");
        assert!(figure.contains("id=\"open-loop-c16\""));
        assert!(figure.contains("500 of 1000 req/s offered"));
        let bars = tags(figure, "rect", "bar");
        assert_eq!(bars.len(), 4, "p50, p99, p99.9 and max");
        assert_eq!(tags(figure, "rect", "p999").len(), 1);
        let (p999, max) = (width_of(&bars, 10.0), width_of(&bars, 100.0));
        let p50 = width_of(&bars, 1.0);
        assert!(
            ((max - p999) - (p999 - p50)).abs() < 0.01,
            "{p50} {p999} {max}"
        );
        assert!(figure.contains(">10.00<"), "the table's p99.9");
    }

    #[test]
    fn html_bench_escapes_errors_and_notes() {
        let page = report().html();
        assert!(page.contains("&lt;500&gt; &amp; more"));
        assert!(page.contains("a &lt;note&gt;"));
        assert!(!page.contains("<note>"));
        assert!(!page.contains("<script"));
    }
}

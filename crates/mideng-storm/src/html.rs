//! The pieces of the storm's and the bench's HTML reports (`--html`): one self-contained page
//! (its style inline, no script, nothing fetched), charts drawn here as inline SVG from the
//! report's own numbers.
//!
//! Everything here is pure — values in, markup out — so that the pages can be tested without a
//! browser. Every text that reaches the page goes through [`escape`]: labels come from the run
//! (duplicate sources, layer outcomes, violation details with ids, error messages).
//!
//! Each chart is a `<figure>` with a stable `id` and `data-chart` and an `<h2>` title, so that a
//! test can find it; each bar is a `<rect class="bar …">` with its value in `data-value`, each
//! line a `<polyline class="series">`, each shaded window a `<rect class="window">`.

use std::fmt::Write as _;

/// Width of every chart's `viewBox`; the page scales it to the window.
const CHART_WIDTH: f64 = 1000.0;
/// Left and right margins of a bar chart.
const BAR_MARGIN: f64 = 12.0;
/// Room right of the longest bar for its value.
const BAR_VALUE_ROOM: f64 = 150.0;
/// Height of one bar, and the gap below it.
const BAR_HEIGHT: f64 = 13.0;
const BAR_GAP: f64 = 3.0;
/// Height of a group's label line above its bars.
const GROUP_LABEL_HEIGHT: f64 = 16.0;
/// A fault window shorter than this many units of the chart is drawn this wide, to stay
/// visible.
const WINDOW_MIN_WIDTH: f64 = 2.0;

/// Colours of the line series, in turn (chosen to stay apart for the usual ten layers).
const PALETTE: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#393b79", "#637939",
];

/// `text` with the characters HTML gives a meaning to replaced by references: safe inside
/// elements and inside quoted attributes (the service's pages use the same function).
pub(crate) use mideng_pay::web::escape_html as escape;

/// A whole page: `title` (escaped here) and `body` (markup, already escaped by its builder).
pub(crate) fn page(title: &str, body: &str) -> String {
    let mut style = STYLE.to_owned();
    for (class, colour) in PERCENTILE_CLASSES.into_iter().chain([P999_CLASS]) {
        let _ = writeln!(style, "svg rect.bar.{class} {{ fill: {colour}; }}");
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{style}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        escape(title)
    )
}

/// Bar classes of the latency charts and their colours (the page's style and the charts'
/// legends).
/// The 99.9th percentile's bar class and colour (the bench's open loop).
pub(crate) const P999_CLASS: (&str, &str) = ("p999", "#b07aa1");

pub(crate) const PERCENTILE_CLASSES: [(&str, &str); 4] = [
    ("p50", "#a0cbe8"),
    ("p90", "#4e79a7"),
    ("p99", "#f28e2b"),
    ("max", "#e15759"),
];

/// The page's style: system fonts, a readable width, pass and fail colours.
const STYLE: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto;
  max-width: 1100px; padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; }
h2 { margin: 0 0 0.5rem; font-size: 1.2rem; }
figure { margin: 2rem 0; padding: 1rem; border: 1px solid #ddd; border-radius: 6px; }
figcaption, .note { color: #555; font-size: 0.9rem; margin: 0.4rem 0; }
svg { width: 100%; height: auto; display: block; }
svg text { font-family: system-ui, sans-serif; font-size: 12px; fill: #222; }
svg .axis { stroke: #888; stroke-width: 1; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .target { stroke: #000; stroke-width: 2; }
svg .mark { stroke: #555; stroke-dasharray: 4 3; }
svg rect.window { fill: #f28e8e; fill-opacity: 0.35; }
svg rect.bar { fill: #4e79a7; }
svg rect.bar.limit { fill: #9c9c9c; }
svg rect.bar.off { fill: #f28e2b; }
svg rect.bar.met { fill: #59a14f; }
svg rect.bar.unmet { fill: #e15759; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
td.number, th.number { text-align: right; font-variant-numeric: tabular-nums; }
tr.pass td.result, .pass-badge { background: #d8f0d2; color: #1e5e14; }
tr.fail td.result, .fail-badge { background: #f8d0d0; color: #8a1010; font-weight: bold; }
tr.unchecked td.result { background: #eee; color: #666; }
.pass-badge, .fail-badge { padding: 0.1rem 0.5rem; border-radius: 4px; }
.legend { display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; font-size: 0.85rem; margin: 0.3rem 0; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.3rem;
  vertical-align: middle; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.summary dt { color: #555; }
dl.summary dd { margin: 0; }
";

/// A chart or a table with its title: `<figure id data-chart><h2>…</h2>…</figure>`. `id` and
/// `chart` are identifiers chosen by the code, `title` is escaped here.
pub(crate) fn figure(id: &str, chart: &str, title: &str, content: &str) -> String {
    format!(
        "<figure id=\"{}\" data-chart=\"{}\">\n<h2>{}</h2>\n{content}</figure>\n",
        escape(id),
        escape(chart),
        escape(title)
    )
}

/// A number as a chart or a table shows it: whole when it is whole or above 100, one decimal
/// above 10, else two (ratios, milliseconds).
pub(crate) fn number(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_owned();
    }
    let magnitude = value.abs();
    if magnitude >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A row of a [`table`]: its class (`pass`, `fail`, …) if any, and its cells, each `(text,
/// numeric)`.
pub(crate) type Row = (Option<&'static str>, Vec<(String, bool)>);

/// A table: header cells `(name, numeric)`, then the rows; every text is escaped here.
pub(crate) fn table(headers: &[(&str, bool)], rows: &[Row]) -> String {
    let mut out = String::from("<table>\n<thead><tr>");
    for (header, numeric) in headers {
        let class = if *numeric { " class=\"number\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(header));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (row_class, cells) in rows {
        match row_class {
            Some(class) => {
                let _ = write!(out, "<tr class=\"{}\">", escape(class));
            }
            None => out.push_str("<tr>"),
        }
        for (index, (text, numeric)) in cells.iter().enumerate() {
            let mut classes = Vec::new();
            if *numeric {
                classes.push("number");
            }
            // The column named "result" is the one a pass or fail row colours.
            if headers
                .get(index)
                .is_some_and(|(header, _)| *header == "result")
            {
                classes.push("result");
            }
            if classes.is_empty() {
                let _ = write!(out, "<td>{}</td>", escape(text));
            } else {
                let _ = write!(
                    out,
                    "<td class=\"{}\">{}</td>",
                    classes.join(" "),
                    escape(text)
                );
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// How a bar chart maps values to lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Length proportional to the value, from zero.
    Linear,
    /// Length proportional to the value's logarithm, over whole decades (latencies, whose
    /// maximum can be a thousand times their median).
    Log10,
}

/// One bar: its value, the text shown beside it, its class (its colour: `bar` plus this), and
/// an optional target drawn as a tick across it.
#[derive(Clone, Debug)]
pub(crate) struct Bar {
    pub(crate) value: f64,
    pub(crate) text: String,
    pub(crate) class: &'static str,
    pub(crate) target: Option<f64>,
}

impl Bar {
    /// A bar without a target.
    pub(crate) fn new(value: f64, text: String, class: &'static str) -> Self {
        Self {
            value,
            text,
            class,
            target: None,
        }
    }
}

/// A label and its bars, one under the other.
#[derive(Clone, Debug)]
pub(crate) struct BarGroup {
    pub(crate) label: String,
    pub(crate) bars: Vec<Bar>,
}

/// The axis of a scale: the length of `value` out of `width`, and the gridlines with their
/// labels.
struct Axis {
    scale: Scale,
    /// Linear: the axis' maximum. Log10: the decades' exponents, low and high.
    low: f64,
    high: f64,
    /// Every value is whole (counts): gridlines only at whole numbers.
    whole: bool,
}

impl Axis {
    fn new(scale: Scale, values: impl Iterator<Item = f64> + Clone) -> Self {
        let whole = values.clone().all(|value| value.fract() == 0.0);
        let positive = values.filter(|value| value.is_finite() && *value > 0.0);
        match scale {
            Scale::Linear => Self {
                scale,
                low: 0.0,
                high: nice_ceiling(positive.fold(0.0, f64::max)),
                whole,
            },
            Scale::Log10 => {
                let min = positive.clone().fold(f64::INFINITY, f64::min);
                let max = positive.fold(0.0, f64::max);
                if max <= 0.0 {
                    return Self {
                        scale,
                        low: 0.0,
                        high: 1.0,
                        whole,
                    };
                }
                // Half the smallest value's decade below it: the shortest bar still shows.
                let low = (min / 2.0).log10().floor();
                let high = max.log10().ceil().max(low + 1.0);
                Self {
                    scale,
                    low,
                    high,
                    whole,
                }
            }
        }
    }

    /// The length of `value` on an axis `width` long.
    fn length(&self, value: f64, width: f64) -> f64 {
        if !value.is_finite() || value <= 0.0 {
            return 0.0;
        }
        let fraction = match self.scale {
            Scale::Linear => value / self.high,
            Scale::Log10 => (value.log10() - self.low) / (self.high - self.low),
        };
        fraction.clamp(0.0, 1.0) * width
    }

    /// Gridline values and their labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        match self.scale {
            Scale::Linear => {
                // Quarters of the axis; for counts, the round whole step nearest them.
                let step = if self.whole && (self.high / 4.0).fract() != 0.0 {
                    nice_ceiling(self.high / 4.0).ceil().max(1.0)
                } else {
                    self.high / 4.0
                };
                let mut ticks = Vec::new();
                let mut value = 0.0;
                while value <= self.high * (1.0 + 1e-9) {
                    ticks.push((value, number(value)));
                    value += step;
                }
                ticks
            }
            Scale::Log10 => {
                let mut ticks = Vec::new();
                let mut exponent = self.low;
                while exponent <= self.high + 0.5 {
                    let value = 10f64.powf(exponent);
                    ticks.push((value, number(value)));
                    exponent += 1.0;
                }
                ticks
            }
        }
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten at or above `value` (1 for nothing):
/// gridlines at quarters of it fall on round numbers.
fn nice_ceiling(value: f64) -> f64 {
    if !value.is_finite() || value <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|step| step * power)
        .find(|candidate| *candidate >= value * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

/// Horizontal bars: each group's label on its own line, its bars under it, the value beside
/// each bar; gridlines with their values along the top. `unit` names the axis.
pub(crate) fn bar_chart(groups: &[BarGroup], scale: Scale, unit: &str) -> String {
    let values = groups
        .iter()
        .flat_map(|group| group.bars.iter())
        .flat_map(|bar| std::iter::once(bar.value).chain(bar.target));
    let axis = Axis::new(scale, values);
    let plot_width = CHART_WIDTH - 2.0 * BAR_MARGIN - BAR_VALUE_ROOM;
    let top = 40.0;
    let rows: f64 = groups
        .iter()
        .map(|group| GROUP_LABEL_HEIGHT + count(group.bars.len()) * (BAR_HEIGHT + BAR_GAP) + 6.0)
        .sum();
    let height = top + rows + 8.0;
    let mut svg = format!(
        "<svg viewBox=\"0 0 {CHART_WIDTH} {height:.0}\" role=\"img\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{BAR_MARGIN}\" y=\"12\">{}{}</text>",
        escape(unit),
        if scale == Scale::Log10 {
            " (log scale)"
        } else {
            ""
        }
    );
    for (value, label) in axis.ticks() {
        let x = BAR_MARGIN + axis.length(value, plot_width);
        let x = if value <= 0.0 { BAR_MARGIN } else { x };
        let _ = writeln!(
            svg,
            "<line class=\"grid\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            top - 4.0,
            height - 4.0,
            top - 8.0,
            escape(&label)
        );
    }
    let mut y = top;
    for group in groups {
        y += GROUP_LABEL_HEIGHT;
        let _ = writeln!(
            svg,
            "<text x=\"{BAR_MARGIN}\" y=\"{:.1}\">{}</text>",
            y - 4.0,
            escape(&group.label)
        );
        for bar in &group.bars {
            let width = axis.length(bar.value, plot_width);
            let _ = writeln!(
                svg,
                "<rect class=\"bar {}\" x=\"{BAR_MARGIN}\" y=\"{y:.1}\" width=\"{width:.3}\" \
                 height=\"{BAR_HEIGHT}\" data-value=\"{}\"><title>{}: {}</title></rect>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                escape(bar.class),
                bar.value,
                escape(&group.label),
                escape(&bar.text),
                BAR_MARGIN + width + 4.0,
                y + BAR_HEIGHT - 2.0,
                escape(&bar.text)
            );
            if let Some(target) = bar.target {
                let x = BAR_MARGIN + axis.length(target, plot_width);
                let _ = writeln!(
                    svg,
                    "<line class=\"target\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" \
                     y2=\"{:.1}\" data-value=\"{target}\"><title>target {}</title></line>",
                    y - 2.0,
                    y + BAR_HEIGHT + 2.0,
                    number(target)
                );
            }
            y += BAR_HEIGHT + BAR_GAP;
        }
        y += 6.0;
    }
    svg.push_str("</svg>\n");
    svg
}

/// A legend of coloured swatches: `(colour, label)`.
pub(crate) fn legend(entries: &[(&str, &str)]) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for (colour, label) in entries {
        let _ = write!(
            out,
            "<span><span class=\"swatch\" style=\"background:{}\"></span>{}</span>",
            escape(colour),
            escape(label)
        );
    }
    out.push_str("</div>\n");
    out
}

/// One line of a line chart: its name and its points `(x, y)`.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A span of the x axis shaded behind the lines (a fault window), with what it was.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    pub(crate) from: f64,
    pub(crate) to: f64,
    pub(crate) label: String,
}

/// A line chart: series over a shared x axis from 0 to `x_max`, windows shaded behind them,
/// and dashed vertical marks with a label (a phase's start).
#[derive(Clone, Debug)]
pub(crate) struct LineChart {
    pub(crate) series: Vec<Series>,
    pub(crate) windows: Vec<Window>,
    pub(crate) marks: Vec<(f64, String)>,
    pub(crate) x_max: f64,
    pub(crate) x_unit: String,
    pub(crate) y_unit: String,
}

/// The plot area of a line chart, in the units of its `viewBox`.
pub(crate) const LINE_PLOT_LEFT: f64 = 60.0;
pub(crate) const LINE_PLOT_RIGHT: f64 = CHART_WIDTH - 20.0;
const LINE_PLOT_TOP: f64 = 20.0;
const LINE_PLOT_BOTTOM: f64 = 300.0;

/// The colour of the series at `index`.
pub(crate) fn series_colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// The line chart as SVG, then its legend (the series' colours, then the windows').
pub(crate) fn line_chart(chart: &LineChart) -> String {
    let x_max = if chart.x_max.is_finite() && chart.x_max > 0.0 {
        chart.x_max
    } else {
        1.0
    };
    let y_max = nice_ceiling(
        chart
            .series
            .iter()
            .flat_map(|series| series.points.iter().map(|(_, y)| *y))
            .fold(0.0, f64::max),
    );
    let plot_width = LINE_PLOT_RIGHT - LINE_PLOT_LEFT;
    let plot_height = LINE_PLOT_BOTTOM - LINE_PLOT_TOP;
    let x_of = |x: f64| LINE_PLOT_LEFT + (x / x_max).clamp(0.0, 1.0) * plot_width;
    let y_of = |y: f64| LINE_PLOT_BOTTOM - (y / y_max).clamp(0.0, 1.0) * plot_height;
    let height = LINE_PLOT_BOTTOM + 40.0;
    let mut svg = format!(
        "<svg viewBox=\"0 0 {CHART_WIDTH} {height:.0}\" role=\"img\" \
         xmlns=\"http://www.w3.org/2000/svg\">\n"
    );
    for window in &chart.windows {
        let from = x_of(window.from);
        let width = (x_of(window.to) - from).max(WINDOW_MIN_WIDTH);
        let _ = writeln!(
            svg,
            "<rect class=\"window\" x=\"{from:.2}\" y=\"{LINE_PLOT_TOP}\" width=\"{width:.2}\" \
             height=\"{plot_height}\" data-from=\"{}\" data-to=\"{}\"><title>{} ({}–{} {})\
             </title></rect>",
            window.from,
            window.to,
            escape(&window.label),
            number(window.from),
            number(window.to),
            escape(&chart.x_unit)
        );
    }
    for step in 0..=4 {
        let value = y_max * f64::from(step) / 4.0;
        let y = y_of(value);
        let _ = writeln!(
            svg,
            "<line class=\"grid\" x1=\"{LINE_PLOT_LEFT}\" y1=\"{y:.1}\" x2=\"{LINE_PLOT_RIGHT}\" \
             y2=\"{y:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LINE_PLOT_LEFT - 6.0,
            y + 4.0,
            number(value)
        );
    }
    let x_step = nice_ceiling(x_max / 10.0);
    let mut tick = 0.0;
    while tick <= x_max + 1e-9 {
        let x = x_of(tick);
        let _ = writeln!(
            svg,
            "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{LINE_PLOT_BOTTOM}\" x2=\"{x:.1}\" \
             y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            LINE_PLOT_BOTTOM + 4.0,
            LINE_PLOT_BOTTOM + 16.0,
            number(tick)
        );
        tick += x_step;
    }
    let _ = writeln!(
        svg,
        "<line class=\"axis\" x1=\"{LINE_PLOT_LEFT}\" y1=\"{LINE_PLOT_BOTTOM}\" \
         x2=\"{LINE_PLOT_RIGHT}\" y2=\"{LINE_PLOT_BOTTOM}\"/>\
         <line class=\"axis\" x1=\"{LINE_PLOT_LEFT}\" y1=\"{LINE_PLOT_TOP}\" \
         x2=\"{LINE_PLOT_LEFT}\" y2=\"{LINE_PLOT_BOTTOM}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"{LINE_PLOT_LEFT}\" y=\"12\">{}</text>",
        (LINE_PLOT_LEFT + LINE_PLOT_RIGHT) / 2.0,
        LINE_PLOT_BOTTOM + 34.0,
        escape(&chart.x_unit),
        escape(&chart.y_unit)
    );
    for (x, label) in &chart.marks {
        let x = x_of(*x);
        let _ = writeln!(
            svg,
            "<line class=\"mark\" x1=\"{x:.1}\" y1=\"{LINE_PLOT_TOP}\" x2=\"{x:.1}\" \
             y2=\"{LINE_PLOT_BOTTOM}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 4.0,
            LINE_PLOT_TOP + 12.0,
            escape(label)
        );
    }
    for (index, series) in chart.series.iter().enumerate() {
        let points: Vec<String> = series
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", x_of(*x), y_of(*y)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" \
             stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            escape(&series.name),
            series_colour(index),
            points.join(" "),
            escape(&series.name)
        );
    }
    svg.push_str("</svg>\n");
    let mut entries: Vec<(&str, &str)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(index, series)| (series_colour(index), series.name.as_str()))
        .collect();
    if !chart.windows.is_empty() {
        entries.push(("rgba(242, 142, 142, 0.6)", "fault window"));
    }
    svg.push_str(&legend(&entries));
    svg
}

/// `count` as a float for layout arithmetic (counts of bars are small).
fn count(count: usize) -> f64 {
    f64::from(u32::try_from(count).unwrap_or(u32::MAX))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The value of attribute `name` in the first tag of `markup` (test helper: the markup is
    /// ours, attributes always double-quoted).
    pub(crate) fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
        let marker = format!(" {name}=\"");
        let start = tag.find(&marker)? + marker.len();
        let end = tag[start..].find('"')? + start;
        Some(&tag[start..end])
    }

    /// Every opening tag `<{element} …>` in `markup` whose class list holds `class`.
    pub(crate) fn tags<'a>(markup: &'a str, element: &str, class: &str) -> Vec<&'a str> {
        let opening = format!("<{element} ");
        markup
            .match_indices(&opening)
            .filter_map(|(start, _)| {
                let end = markup[start..].find('>')? + start;
                Some(&markup[start..=end])
            })
            .filter(|tag| {
                attribute(tag, "class")
                    .is_some_and(|classes| classes.split(' ').any(|name| name == class))
            })
            .collect()
    }

    /// The markup of the (first) figure whose `data-chart` is `chart`.
    pub(crate) fn figure_of<'a>(page: &'a str, chart: &str) -> &'a str {
        let marker = format!("data-chart=\"{chart}\"");
        let at = page
            .find(&marker)
            .unwrap_or_else(|| panic!("no figure {chart}"));
        let start = page[..at].rfind("<figure").unwrap_or(at);
        let end = page[start..]
            .find("</figure>")
            .map_or(page.len(), |end| start + end);
        &page[start..end]
    }

    pub(crate) fn number_attribute(tag: &str, name: &str) -> f64 {
        attribute(tag, name)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no number {name} in {tag}"))
    }

    #[test]
    fn html_escape_covers_every_character_with_a_meaning() {
        assert_eq!(
            escape("<a href=\"x\">Tom & 'Jerry'</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("支付 ⇒ ok"), "支付 ⇒ ok");
    }

    #[test]
    fn html_linear_bars_are_proportional_to_their_values() {
        let groups = [("a", 30.0), ("b", 10.0), ("c", 0.0)]
            .map(|(label, value)| BarGroup {
                label: label.to_owned(),
                bars: vec![Bar::new(value, number(value), "")],
            })
            .to_vec();
        let svg = bar_chart(&groups, Scale::Linear, "count");
        let widths: Vec<f64> = tags(&svg, "rect", "bar")
            .iter()
            .map(|tag| number_attribute(tag, "width"))
            .collect();
        assert_eq!(widths.len(), 3);
        assert!((widths[0] - 3.0 * widths[1]).abs() < 0.01, "{widths:?}");
        assert!(widths[0] > 100.0, "{widths:?}");
        assert_eq!(widths[2], 0.0);
    }

    #[test]
    fn html_log_bars_take_a_step_per_decade() {
        let groups = vec![BarGroup {
            label: "latency".to_owned(),
            bars: vec![
                Bar::new(1.0, "1".to_owned(), "p50"),
                Bar::new(10.0, "10".to_owned(), "p90"),
                Bar::new(100.0, "100".to_owned(), "max"),
            ],
        }];
        let svg = bar_chart(&groups, Scale::Log10, "ms");
        let widths: Vec<f64> = tags(&svg, "rect", "bar")
            .iter()
            .map(|tag| number_attribute(tag, "width"))
            .collect();
        // Decades 10^-1 to 10^2 (half the smallest value's decade below it): each decade a
        // third of the width.
        let step = widths[1] - widths[0];
        assert!(step > 100.0, "{widths:?}");
        assert!((widths[2] - widths[1] - step).abs() < 0.01, "{widths:?}");
        assert!((widths[0] - step).abs() < 0.01, "{widths:?}");
        assert!(svg.contains("(log scale)"));
    }

    #[test]
    fn html_count_axes_have_whole_gridlines() {
        let labels = |values: &[f64]| -> Vec<String> {
            Axis::new(Scale::Linear, values.iter().copied())
                .ticks()
                .into_iter()
                .map(|(_, label)| label)
                .collect()
        };
        assert_eq!(labels(&[1.0, 1.0]), ["0", "1"]);
        assert_eq!(labels(&[3.0, 5.0]), ["0", "2", "4"]);
        assert_eq!(labels(&[400.0]), ["0", "125", "250", "375", "500"]);
        assert_eq!(labels(&[0.3, 0.5]), ["0", "0.12", "0.25", "0.38", "0.50"]);
    }

    #[test]
    fn html_nice_ceilings_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(180.0), 200.0);
        assert_eq!(nice_ceiling(2000.0), 2000.0);
        assert_eq!(nice_ceiling(2300.0), 2500.0);
    }

    #[test]
    fn html_line_chart_shades_its_windows_where_they_were() {
        let chart = LineChart {
            series: vec![Series {
                name: "key".to_owned(),
                points: vec![(1.0, 2.0), (2.0, 4.0)],
            }],
            windows: vec![Window {
                from: 2.0,
                to: 4.0,
                label: "instance killed".to_owned(),
            }],
            marks: Vec::new(),
            x_max: 10.0,
            x_unit: "s".to_owned(),
            y_unit: "per s".to_owned(),
        };
        let svg = line_chart(&chart);
        let windows = tags(&svg, "rect", "window");
        assert_eq!(windows.len(), 1);
        let plot = LINE_PLOT_RIGHT - LINE_PLOT_LEFT;
        let x = number_attribute(windows[0], "x");
        let width = number_attribute(windows[0], "width");
        assert!((x - (LINE_PLOT_LEFT + 0.2 * plot)).abs() < 0.01, "{x}");
        assert!((width - 0.2 * plot).abs() < 0.01, "{width}");
        let lines = tags(&svg, "polyline", "series");
        assert_eq!(lines.len(), 1);
        assert_eq!(
            attribute(lines[0], "points").map(|p| p.split(' ').count()),
            Some(2)
        );
    }
}

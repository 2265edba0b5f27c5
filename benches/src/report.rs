//! Turning measurements into a printed table, a CSV file and an SVG chart.
//!
//! Every figure is a [`Row`]: one series (a structure) at one size in one section (a workload or
//! a memory phase), holding the median of its repetitions and their spread. Tables are printed in
//! Markdown so a run can be pasted into BENCHMARKS.md as it is.

use plotters::prelude::*;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Workload or phase, e.g. `reset`.
    pub section: String,
    /// Structure, e.g. `lazy-heap`.
    pub series: String,
    /// Live timers (or threads, for the scaling section).
    pub n: u64,
    /// Median over the repetitions.
    pub median: f64,
    /// Smallest repetition.
    pub min: f64,
    /// Largest repetition.
    pub max: f64,
    /// Unit of the three figures, e.g. `ns/op`.
    pub unit: String,
}

impl Row {
    /// A row from repeated samples (at least one).
    pub fn from_samples(section: &str, series: &str, n: u64, unit: &str, samples: &[f64]) -> Row {
        assert!(!samples.is_empty(), "a row needs at least one sample");
        Row {
            section: section.to_owned(),
            series: series.to_owned(),
            n,
            median: median(samples),
            min: samples.iter().copied().fold(f64::INFINITY, f64::min),
            max: samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            unit: unit.to_owned(),
        }
    }
}

/// Median of `samples` (mean of the middle two for an even count).
pub fn median(samples: &[f64]) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The median of `series` at `n` in `section`, if measured.
pub fn lookup(rows: &[Row], section: &str, series: &str, n: u64) -> Option<f64> {
    rows.iter()
        .find(|r| r.section == section && r.series == series && r.n == n)
        .map(|r| r.median)
}

/// Sizes measured in `section`, ascending.
fn sizes(rows: &[Row], section: &str) -> Vec<u64> {
    let set: BTreeSet<u64> = rows
        .iter()
        .filter(|r| r.section == section)
        .map(|r| r.n)
        .collect();
    set.into_iter().collect()
}

/// Series of `section` in first-seen order.
fn series(rows: &[Row], section: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.section == section) {
        if !out.contains(&r.series) {
            out.push(r.series.clone());
        }
    }
    out
}

/// `1000` as `10^3` and so on; other numbers as they are.
pub fn size_label(n: u64) -> String {
    let mut p = 0;
    let mut m = n;
    while m >= 10 && m.is_multiple_of(10) {
        m /= 10;
        p += 1;
    }
    if m == 1 && p >= 3 {
        format!("10^{p}")
    } else {
        n.to_string()
    }
}

/// A figure with three significant digits or so.
pub fn figure(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Markdown table of `section`: one line per series, one column per size, median (min-max).
pub fn table(rows: &[Row], section: &str, title: &str) -> String {
    let ns = sizes(rows, section);
    let mut out = String::new();
    let _ = writeln!(out, "{title}\n");
    let _ = write!(out, "| structure |");
    for n in &ns {
        let _ = write!(out, " {} |", size_label(*n));
    }
    let _ = write!(out, "\n|---|");
    for _ in &ns {
        let _ = write!(out, "---:|");
    }
    out.push('\n');
    for s in series(rows, section) {
        let _ = write!(out, "| {s} |");
        for &n in &ns {
            match rows
                .iter()
                .find(|r| r.section == section && r.series == s && r.n == n)
            {
                Some(r) if r.max > r.min * 1.0001 => {
                    let _ = write!(
                        out,
                        " {} ({}–{}) |",
                        figure(r.median),
                        figure(r.min),
                        figure(r.max)
                    );
                }
                Some(r) => {
                    let _ = write!(out, " {} |", figure(r.median));
                }
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    out
}

/// All rows as CSV with a header line.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from("section,series,n,median,min,max,unit\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            r.section, r.series, r.n, r.median, r.min, r.max, r.unit
        );
    }
    out
}

/// Draws `section` as an SVG at `path`: medians against size, both axes logarithmic, one line
/// per series.
pub fn svg_chart(rows: &[Row], section: &str, title: &str, path: &Path) -> Result<(), String> {
    let ns = sizes(rows, section);
    let names = series(rows, section);
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.section == section && r.median > 0.0)
        .collect();
    if ns.len() < 2 || mine.is_empty() {
        return Err(format!("{section}: need two sizes to draw a line"));
    }
    let x_range = (ns[0] as f64 / 1.5)..(ns[ns.len() - 1] as f64 * 1.5);
    let y_lo = mine.iter().map(|r| r.median).fold(f64::INFINITY, f64::min) / 1.5;
    let y_hi = mine.iter().map(|r| r.median).fold(0.0, f64::max) * 1.5;
    let unit = mine[0].unit.clone();
    let err = |e: &dyn std::fmt::Display| format!("{section}: {e}");

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range.log_scale(), (y_lo..y_hi).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("live timers")
        .y_desc(unit)
        .x_label_formatter(&|x| size_label(x.round() as u64))
        .y_label_formatter(&|y| figure(*y))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = ns
            .iter()
            .filter_map(|&n| lookup(rows, section, name, n).map(|v| (n as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// A text plot of `section` for a Markdown file: cost (log scale, one line per doubling) against
/// population (one column per size), each series drawn with its own letter in its own place
/// within a size's column, so no point hides another. The letters are listed under the plot.
pub fn text_plot(rows: &[Row], section: &str, title: &str) -> String {
    let ns = sizes(rows, section);
    let names = series(rows, section);
    let points: Vec<(usize, usize, f64)> = names
        .iter()
        .enumerate()
        .flat_map(|(s, name)| {
            ns.iter().enumerate().filter_map(move |(c, &n)| {
                lookup(rows, section, name, n)
                    .filter(|v| *v > 0.0)
                    .map(|v| (s, c, v))
            })
        })
        .collect();
    let (lo, hi) = points.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
        (lo.min(p.2), hi.max(p.2))
    });
    if points.is_empty() || ns.len() < 2 {
        return String::new();
    }
    let (lo, hi) = (lo.log2().floor(), hi.log2().ceil());
    let lines = (hi - lo) as usize + 1;
    let width = (names.len() + 2).max(8);
    let mut grid = vec![vec![' '; ns.len() * width]; lines];
    for &(s, c, v) in &points {
        let line = (hi - v.log2()).round() as usize;
        grid[line.min(lines - 1)][c * width + 1 + s] = letter(s);
    }
    let mut out = format!(
        "{title}

```text
"
    );
    for (i, line) in grid.iter().enumerate() {
        let label = figure(2f64.powf(hi - i as f64));
        let _ = writeln!(out, "{label:>7} |{}", line.iter().collect::<String>());
    }
    let _ = writeln!(out, "{:>7} +{}", "", "-".repeat(ns.len() * width));
    let _ = write!(out, "{:>8}", "");
    for &n in &ns {
        let _ = write!(out, " {:<w$}", size_label(n), w = width - 1);
    }
    let _ = writeln!(
        out,
        "  live timers
"
    );
    for (s, name) in names.iter().enumerate() {
        let _ = writeln!(out, "  {} {name}", letter(s));
    }
    out.push_str(
        "```
",
    );
    out
}

/// The plot letter of the `i`th series.
fn letter(i: usize) -> char {
    (b'a' + (i % 26) as u8) as char
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Row> {
        vec![
            Row::from_samples("reset", "a", 1000, "ns/op", &[3.0, 1.0, 2.0]),
            Row::from_samples("reset", "a", 100_000, "ns/op", &[4.0]),
            Row::from_samples("reset", "b", 1000, "ns/op", &[8.0, 6.0]),
        ]
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn sizes_print_as_powers_of_ten() {
        assert_eq!(size_label(1000), "10^3");
        assert_eq!(size_label(10_000_000), "10^7");
        assert_eq!(size_label(2), "2");
        assert_eq!(size_label(1500), "1500");
    }

    #[test]
    fn table_has_a_cell_per_series_and_size() {
        let t = table(&rows(), "reset", "Reset");
        assert!(t.contains("| a | 2.00 (1.00–3.00) | 4.00 |"), "{t}");
        assert!(t.contains("| b | 7.00 (6.00–8.00) | – |"), "{t}");
    }

    #[test]
    fn csv_has_a_line_per_row() {
        let c = csv(&rows());
        assert_eq!(c.lines().count(), 4);
        assert!(c.contains("reset,b,1000,7,6,8,ns/op"));
    }

    #[test]
    fn text_plot_puts_each_point_on_its_line() {
        let p = text_plot(&rows(), "reset", "Reset");
        // `b` at 10^3 is 7 ns (the 8 ns line), `a` is 2 ns there and 4 ns at 10^5.
        let lines: Vec<&str> = p.lines().filter(|l| l.contains('|')).collect();
        assert_eq!(lines.len(), 3, "{p}");
        assert!(lines[0].starts_with("   8.00 |  b "), "{p}");
        assert!(lines[1].starts_with("   4.00 |         a"), "{p}");
        assert!(lines[2].starts_with("   2.00 | a "), "{p}");
        assert!(p.contains("  b b\n") && p.contains("10^5"), "{p}");
        assert_eq!(text_plot(&rows(), "nothing", "x"), "");
    }

    #[test]
    fn chart_is_written_as_svg() {
        let path = std::env::temp_dir().join(format!("tickwheel-chart-{}.svg", std::process::id()));
        svg_chart(&rows(), "reset", "Reset", &path).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("written");
        std::fs::remove_file(&path).ok();
        assert!(
            svg.starts_with("<svg") && svg.contains("polyline"),
            "{svg:.200}"
        );
        assert!(svg_chart(&rows(), "nothing", "x", &path).is_err());
    }
}

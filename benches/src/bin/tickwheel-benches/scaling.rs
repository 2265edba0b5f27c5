//! The per-core sections: the keepalive load on every design at 1, 2 and all pinned threads, the
//! timerfd driver's lateness, and their tables.
//!
//! Model: each measurement is a [`Cell`] keyed by typed fields (design, remote share, timers per
//! core, threads); the tables look cells up by those keys, and the CSV rows are written from the
//! cells, never read back.

use std::fmt::Write as _;
use std::time::Duration;

use tickwheel_benches::percore::keepalive::{self, Design, Load};
use tickwheel_benches::percore::{self, LatenessSummary};
use tickwheel_benches::report::{self, Row, median};
use tickwheel_percpu::Mode;

use crate::wheel::Plan;
use crate::{SEED, die};

/// A share of connections whose timer lives on another core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Share {
    fraction: f64,
    label: &'static str,
}

const fn share(fraction: f64, label: &'static str) -> Share {
    Share { fraction, label }
}

/// The shares of the tables.
const SHARES: [Share; 3] = [
    share(0.0, "remote 0%"),
    share(0.1, "remote 10%"),
    share(0.5, "remote 50%"),
];
const LOCAL: Share = SHARES[0];

/// Every refresh remote: with the 0% run at the same thread count, the cost of one remote
/// refresh against one local one.
const ALL_REMOTE: Share = share(1.0, "remote 100%");

/// One design under one load: the samples of its repetitions.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    design: Design,
    share: Share,
    per_core: usize,
    threads: u64,
    /// Million refreshes per second, all threads together.
    rates: Vec<f64>,
    /// Nanoseconds per refresh on each thread.
    ns: Vec<f64>,
    /// percpu only: `ReserveEmpty` refusals, their retries, and ms stalled, per repetition.
    pressure: [Vec<f64>; 3],
}

/// Every cell of a scaling run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scaling {
    cells: Vec<Cell>,
    /// One-way cache-line transfer between the first two cores, ns, one sample per repetition
    /// (measured in the same run, before the loads; empty on one core).
    one_way_ns: Vec<f64>,
    /// Bytes per pending timer (`u64` payload) at a population, per memory design.
    bytes: Vec<(&'static str, usize, f64)>,
}

fn pop_label(per_core: usize) -> String {
    format!("{} timers/core", report::size_label(per_core as u64))
}

impl Scaling {
    fn cell(&self, d: Design, share: Share, per_core: usize, threads: u64) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| (c.design, c.share, c.per_core, c.threads) == (d, share, per_core, threads))
    }

    /// Median rate, M refreshes/s over all threads.
    fn rate(&self, d: Design, share: Share, per_core: usize, threads: u64) -> Option<f64> {
        self.cell(d, share, per_core, threads)
            .map(|c| median(&c.rates))
    }

    fn ns(&self, d: Design, share: Share, per_core: usize, threads: u64) -> Option<f64> {
        self.cell(d, share, per_core, threads)
            .map(|c| median(&c.ns))
    }

    /// Median of percpu's pressure counter `k` (0: ReserveEmpty, 2: ms stalled).
    fn pressure(&self, k: usize, share: Share, per_core: usize, threads: u64) -> String {
        self.cell(Design::Percpu, share, per_core, threads)
            .filter(|c| !c.pressure[k].is_empty())
            .map_or("–".into(), |c| format!("{:.0}", median(&c.pressure[k])))
    }

    /// Populations and thread counts, in the order measured.
    fn populations(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.cells.iter().map(|c| c.per_core).collect();
        v.dedup();
        v
    }

    fn threads(&self) -> Vec<u64> {
        let mut t: Vec<u64> = self.cells.iter().map(|c| c.threads).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Rate at `threads` over the rate on one thread with no remote refreshes.
    fn scaling(&self, d: Design, share: Share, per_core: usize, threads: u64) -> Option<f64> {
        Some(self.rate(d, share, per_core, threads)? / self.rate(d, LOCAL, per_core, 1)?)
    }

    /// Marginal ns of a remote refresh at `threads`: with half the refreshes remote,
    /// t50 = (t0 + t_remote) / 2.
    fn marginal(&self, d: Design, per_core: usize, threads: u64) -> Option<f64> {
        let t0 = self.ns(d, LOCAL, per_core, threads)?;
        Some(2.0 * self.ns(d, SHARES[2], per_core, threads)? - t0)
    }

    /// Median one-way cache-line transfer, ns.
    fn one_way(&self) -> Option<f64> {
        (!self.one_way_ns.is_empty()).then(|| median(&self.one_way_ns))
    }

    /// The rows of `summary.csv` (and the per-core refresh table).
    pub(crate) fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        if !self.one_way_ns.is_empty() {
            rows.push(Row::from_samples(
                "percore_pingpong",
                "cache line, one way between cores 0 and 1",
                2,
                "ns",
                &self.one_way_ns,
            ));
        }
        for c in &self.cells {
            let mut push = |section: &str, series: &str, unit: &str, samples: &[f64]| {
                rows.push(Row::from_samples(section, series, c.threads, unit, samples));
            };
            let (label, pop) = (c.share.label, pop_label(c.per_core));
            let series = format!("{}, {label}, {pop}", c.design.name());
            push(
                "percore_peers",
                &series,
                "M refreshes/s, all threads",
                &c.rates,
            );
            push("percore_ns_per_op", &series, "ns/refresh per thread", &c.ns);
            if c.design != Design::Percpu {
                continue;
            }
            let series = format!("{label}, {pop}");
            if c.share != ALL_REMOTE {
                let per_core: Vec<f64> = c.rates.iter().map(|r| r / c.threads as f64).collect();
                push(
                    "percore_refresh",
                    &series,
                    "M refreshes/s per core",
                    &per_core,
                );
            }
            let units = ["count", "count", "ms, all threads"];
            for ((section, unit), samples) in PRESSURE.iter().zip(units).zip(&c.pressure) {
                if !samples.is_empty() {
                    push(section, &series, unit, samples);
                }
            }
        }
        rows
    }
}

const PRESSURE: [&str; 3] = [
    "percore_reserve_empty",
    "percore_reserve_retries",
    "percore_stalled_ms",
];

/// Thread counts of the scaling section: one, two, and every core (each at most once).
fn scaling_threads(cores: usize) -> Vec<usize> {
    let mut t = vec![1, 2.min(cores), cores];
    t.dedup();
    t
}

/// The per-core keepalive load on every design, 1, 2 and all pinned threads, each remote share;
/// designs interleaved inside each repetition, checksums compared across designs.
pub(crate) fn run_scaling(plan: &Plan) -> Scaling {
    let (populations, ops, reps) = if plan.quick {
        (vec![1_000], 20_000, 1)
    } else {
        (vec![10_000, 100_000, 1_000_000], 1_000_000, 3)
    };
    let populations = plan.per_core.map_or(populations, |n| vec![n]);
    let reps = plan.reps.map_or(reps, |r| r.max(1) as u64);
    let mut scaling = Scaling::default();
    let mem_n = if plan.quick { 10_000 } else { 1_000_000 };
    for design in percore::MEMORY_DESIGNS {
        let bytes = bytes_in_fresh_process(design, mem_n)
            .unwrap_or_else(|e| die(&format!("percore-mem {design}: {e}")));
        scaling.bytes.push((design, mem_n, bytes));
    }
    if percore::available_cores() >= 2 {
        let round_trips = if plan.quick { 10_000 } else { 1_000_000 };
        for _ in 0..reps.max(3) {
            let d = percore::pingpong::one_way(0, 1, round_trips)
                .unwrap_or_else(|e| die(&format!("ping-pong: {e}")));
            scaling.one_way_ns.push(d.as_nanos() as f64);
        }
    }
    for per_core in populations {
        for threads in scaling_threads(percore::available_cores()) {
            let shares = SHARES.into_iter().chain([ALL_REMOTE]);
            for share in shares.filter(|s| threads > 1 || s.fraction == 0.0) {
                let load = Load {
                    threads,
                    remote_share: share.fraction,
                    per_core,
                    ops_per_thread: ops,
                    seed: SEED,
                };
                scaling.cells.extend(measure(load, share, reps));
            }
        }
    }
    scaling
}

/// Bytes per pending timer of one memory design, measured by this binary in a fresh process.
fn bytes_in_fresh_process(design: &str, n: usize) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["percore-mem", design, &n.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .map_err(|e| format!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

/// Every design that supports `load`, `reps` times, interleaved: one cell per design.
fn measure(mut load: Load, share: Share, reps: u64) -> Vec<Cell> {
    let designs: Vec<Design> = Design::ALL
        .into_iter()
        .filter(|d| d.supports(&load))
        .collect();
    let mut cells: Vec<Cell> = designs
        .iter()
        .map(|&design| Cell {
            design,
            share,
            per_core: load.per_core,
            threads: load.threads as u64,
            rates: Vec::new(),
            ns: Vec::new(),
            pressure: Default::default(),
        })
        .collect();
    let what = format!(
        "{} threads, {}, {}",
        load.threads,
        share.label,
        pop_label(load.per_core)
    );
    for rep in 0..reps {
        load.seed = SEED + rep;
        let mut sums = Vec::new();
        let mut log = format!("  keepalive {what}:");
        // Each repetition starts with another design: the first run of a process pays for
        // memory the later ones find warm, and no design should always pay.
        let n = cells.len();
        for i in (0..n).map(|k| (k + rep as usize) % n) {
            let cell = &mut cells[i];
            let design = cell.design;
            let run = keepalive::keepalive_scaling(design, &load)
                .unwrap_or_else(|e| die(&format!("scaling, {}, {what}: {e}", design.name())));
            let rate = run.aggregate_ops_per_sec() / 1e6;
            log.push_str(&format!(" {} {rate:.1} M/s;", design.name()));
            cell.rates.push(rate);
            cell.ns.push(run.ns_per_op());
            sums.push((design.name(), run.checksum));
            if design == Design::Percpu {
                cell.pressure[0].push(run.backpressure.reserve_empty as f64);
                cell.pressure[1].push(run.reserve_empty_retries() as f64);
                cell.pressure[2].push(run.stalled().as_secs_f64() * 1e3);
            }
        }
        eprintln!("{log}");
        if let Some(bad) = sums.iter().find(|s| s.1 != sums[0].1) {
            die(&format!(
                "keepalive, {what}: checksums disagree: {bad:?} vs {:?}",
                sums[0]
            ));
        }
    }
    cells
}

/// One run of the per-core keepalive load on one design (for instruction counts, or a look at one
/// configuration).
pub(crate) fn one_keepalive_run(design: Design, load: &Load) -> Result<String, String> {
    let run = keepalive::keepalive_scaling(design, load)?;
    Ok(format!(
        "{}: {:.2} M refreshes/s all threads, {:.1} ns/refresh per thread, {:?}, {:?}, {} retries, {:.1?} stalled",
        design.name(),
        run.aggregate_ops_per_sec() / 1e6,
        run.ns_per_op(),
        run.checksum,
        run.backpressure,
        run.reserve_empty_retries(),
        run.stalled()
    ))
}

/// Lateness of the timerfd driver next to a bare timerfd, by name.
pub(crate) type Timeliness = Vec<(&'static str, LatenessSummary)>;

/// Lateness of the timerfd driver next to a bare timerfd.
pub(crate) fn run_timeliness(plan: &Plan) -> Timeliness {
    let timers = if plan.quick { 20 } else { 400 };
    let (ms, us100) = (Duration::from_millis(1), Duration::from_micros(100));
    // The thread that measures is pinned; do it on a helper thread so the main one stays free.
    let floor = std::thread::spawn(move || percore::timerfd_floor(timers, SEED)).join();
    let floor = floor.expect("no panic").unwrap_or_else(|e| die(&e));
    let mut out = vec![("bare timerfd (floor)", floor)];
    for (mode, tick, name) in [
        (Mode::Exact, ms, "driver, exact, 1 ms tick"),
        (Mode::Coarse, ms, "driver, coarse, 1 ms tick"),
        (Mode::Exact, us100, "driver, exact, 100 µs tick"),
    ] {
        let run = std::thread::spawn(move || percore::driver_lateness(mode, tick, timers, SEED));
        let (mine, _own) = run.join().expect("no panic").unwrap_or_else(|e| die(&e));
        out.push((name, mine));
    }
    out
}

/// The rows of `summary.csv` for the timeliness section.
pub(crate) fn timeliness_rows(t: &Timeliness) -> Vec<Row> {
    let mut rows = Vec::new();
    for (series, s) in t {
        for (section, v) in [
            ("lateness_p50", s.p50),
            ("lateness_p99", s.p99),
            ("lateness_max", s.max),
        ] {
            let us = v.as_nanos() as f64 / 1e3;
            rows.push(Row::from_samples(
                section,
                series,
                s.count as u64,
                "µs",
                &[us],
            ));
        }
    }
    rows
}

/// Every per-core table: refreshes per core, the designs side by side, local against remote, the
/// cross-core targets and the timeliness table.
pub(crate) fn tables(scaling: &Scaling, timeliness: &Timeliness) -> String {
    let mut md = report::table(
        &scaling.rows(),
        "percore_refresh",
        "### per-core keepalive — million refreshes per second per core (columns: pinned threads)",
    );
    md.push('\n');
    if let Some(one_way) = scaling.one_way() {
        let (lo, hi) = scaling
            .one_way_ns
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let _ = writeln!(
            md,
            "cache line between cores 0 and 1, one way (two-thread ping-pong, same run): {one_way:.0} ns (min {lo:.0}, max {hi:.0}, {} runs)\n",
            scaling.one_way_ns.len()
        );
    }
    for (design, n, bytes) in &scaling.bytes {
        let _ = writeln!(
            md,
            "bytes per pending timer with a u64 payload, {} at {} (RSS growth, fresh process): {bytes:.1}\n",
            match *design {
                "percpu" => "one per-core base",
                _ => "tickwheel::Wheel behind a std Mutex",
            },
            report::size_label(*n as u64)
        );
    }
    md.push_str(&scaling_lines(scaling));
    for pop in scaling.populations() {
        md.push_str(&peer_table(scaling, pop));
    }
    md.push_str(&local_remote_table(scaling));
    md.push_str(&cross_core_targets(scaling));
    md.push_str("### timeliness — lateness from deadline to handler, µs\n\n| timer | p50 | p99 | max |\n|---|---:|---:|---:|\n");
    let us = |d: Duration| report::figure(d.as_nanos() as f64 / 1e3);
    for (name, s) in timeliness {
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} |",
            us(s.p50),
            us(s.p99),
            us(s.max)
        );
    }
    md.push('\n');
    md
}

/// "scaling ... on N cores" lines: aggregate rate over the single-core rate, per share.
fn scaling_lines(s: &Scaling) -> String {
    let mut md = String::new();
    let Some(&max) = s.threads().last().filter(|&&t| t > 1) else {
        return md;
    };
    for pop in s.populations() {
        if s.rate(Design::Percpu, LOCAL, pop, 1).is_none() {
            continue;
        }
        let _ = write!(
            md,
            "scaling, {} on {max} cores (aggregate rate / single-core rate, ideal {max}):",
            pop_label(pop)
        );
        for share in SHARES {
            if let Some(v) = s.scaling(Design::Percpu, share, pop, max) {
                let _ = write!(md, " {}: {v:.2};", share.label);
            }
        }
        md.push_str("\n\n");
    }
    md
}

fn show(v: Option<f64>) -> String {
    v.map_or("–".to_string(), report::figure)
}

fn show_ratio(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |r| format!("{r:.2}x"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a / b)
}

/// The designs side by side at one population.
fn peer_table(s: &Scaling, pop: usize) -> String {
    let mut md = format!(
        "### per-core keepalive against locks, {} — million refreshes per second, all threads together (medians)\n\n",
        pop_label(pop)
    );
    md.push_str(
        "| threads | remote | percpu | wheel/core + std Mutex | wheel/core + parking_lot | global Mutex | bare Wheel | percpu / std | percpu / parking_lot | percpu scaling | std Mutex scaling | ReserveEmpty | stalled (ms) |\n",
    );
    md.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for t in s.threads() {
        for share in SHARES {
            let rate = |d| s.rate(d, share, pop, t);
            let Some(p) = rate(Design::Percpu) else {
                continue;
            };
            let (std_m, pl) = (
                rate(Design::StdMutexPerCore),
                rate(Design::ParkingLotPerCore),
            );
            let scaling = |d| match s.scaling(d, share, pop, t) {
                Some(v) if t > 1 => format!("{v:.2}"),
                _ => "–".to_string(),
            };
            let _ = writeln!(
                md,
                "| {t} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                share.label.trim_start_matches("remote "),
                report::figure(p),
                show(std_m),
                show(pl),
                show(rate(Design::GlobalMutex)),
                show(rate(Design::BareWheel)),
                show_ratio(ratio(Some(p), std_m)),
                show_ratio(ratio(Some(p), pl)),
                scaling(Design::Percpu),
                scaling(Design::StdMutexPerCore),
                s.pressure(0, share, pop, t),
                s.pressure(2, share, pop, t),
            );
        }
    }
    md.push('\n');
    md
}

/// The thread count the cross-core figures are read at: two (or the most measured, if fewer).
fn pair(s: &Scaling) -> u64 {
    s.threads()
        .into_iter()
        .filter(|&t| t <= 2)
        .max()
        .unwrap_or(1)
}

/// Remote against local, at the same thread count. The marginal cost of a remote refresh comes
/// from the 0% and 50% runs, where the owner and one remote core both use each core's timers. The
/// 100% runs are shown too, but there each core's timers have a single user (the next core in the
/// ring), so a lock-based remote refresh moves no cache lines and looks as cheap as a local one.
fn local_remote_table(s: &Scaling) -> String {
    let mut md = String::new();
    let pair = pair(s);
    if !s.threads().iter().any(|&t| t > 1) {
        return md;
    }
    let _ = writeln!(
        md,
        "### one keepalive refresh, local and remote — ns per refresh on each thread, turns included ({pair} threads; local: the 0% run; remote: 2·t(50%) − t(0%), and the 100% run)\n"
    );
    md.push_str("| design | timers/core | local | remote | remote / local | all remote (100%) | 100% / local | ReserveEmpty (100%) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    for pop in s.populations() {
        for d in [
            Design::Percpu,
            Design::StdMutexPerCore,
            Design::ParkingLotPerCore,
            Design::GlobalMutex,
        ] {
            let Some(local) = s.ns(d, LOCAL, pop, pair) else {
                continue;
            };
            let remote = s.marginal(d, pop, pair);
            let all = s.ns(d, ALL_REMOTE, pop, pair);
            let full = if d == Design::Percpu {
                s.pressure(0, ALL_REMOTE, pop, pair)
            } else {
                "–".to_string()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {full} |",
                d.name(),
                report::size_label(pop as u64),
                report::figure(local),
                show(remote),
                show_ratio(ratio(remote, Some(local))),
                show(all),
                show_ratio(ratio(all, Some(local))),
            );
        }
    }
    md.push('\n');
    md
}

/// One line of a targets table (nothing when there is no measurement).
fn target_line(
    out: &mut String,
    target: &str,
    pop: usize,
    measured: Option<String>,
    goal: &str,
    met: bool,
) {
    if let Some(m) = measured {
        let met = if met { "yes" } else { "NO" };
        let pop = report::size_label(pop as u64);
        let _ = writeln!(out, "| {target} | {pop} | {m} | {goal} | {met} |");
    }
}

/// The targets of the cross-core path.
/// The cross-core targets at one population, read at `pair` threads.
fn cross_core_lines(s: &Scaling, pop: usize, pair: u64, lines: &mut String) {
    let line = |out: &mut String, target: String, m: Option<String>, goal: &str, met| {
        target_line(out, &target, pop, m, goal, met);
    };
    let x = |r: Option<f64>| r.map(|r| format!("{r:.2}x"));
    let r = ratio(
        s.rate(Design::Percpu, LOCAL, pop, 1),
        s.rate(Design::StdMutexPerCore, LOCAL, pop, 1),
    );
    line(
        lines,
        "percpu vs Wheel + std Mutex, one thread, no remote".into(),
        x(r),
        "≥1.2x",
        r.is_some_and(|r| r >= 1.2),
    );
    for share in &SHARES {
        let r = ratio(
            s.rate(Design::Percpu, *share, pop, pair),
            s.rate(Design::StdMutexPerCore, *share, pop, pair),
        );
        let target = format!(
            "percpu vs wheel per core + std Mutex, {}, {pair} threads",
            share.label
        );
        line(lines, target, x(r), "≥1.5x", r.is_some_and(|r| r >= 1.5));
    }
    for (share, goal) in [(SHARES[1], 1.8), (SHARES[2], 1.3)] {
        let v = s
            .scaling(Design::Percpu, share, pop, pair)
            .filter(|_| pair > 1);
        let target = format!("percpu {pair}-thread scaling, {}", share.label);
        line(
            lines,
            target,
            v.map(|v| format!("{v:.2}")),
            &format!("≥{goal}"),
            v.is_some_and(|v| v >= goal),
        );
    }
    let r = ratio(
        s.rate(Design::Percpu, LOCAL, pop, 1),
        s.rate(Design::BareWheel, LOCAL, pop, 1),
    );
    line(
        lines,
        "percpu vs bare Wheel, one thread, no remote".into(),
        x(r),
        "≥0.95x",
        r.is_some_and(|r| r >= 0.95),
    );
    let r = ratio(
        s.marginal(Design::Percpu, pop, pair),
        s.ns(Design::Percpu, LOCAL, pop, pair),
    );
    let r = r.filter(|_| pair > 1);
    line(
        lines,
        format!("percpu remote / local refresh, {pair} threads"),
        x(r),
        "≤2x",
        r.is_some_and(|r| r <= 2.0),
    );
    let r = ratio(s.marginal(Design::Percpu, pop, pair), s.one_way()).filter(|_| pair > 1);
    line(
        lines,
        format!("percpu remote refresh / one-way cache-line transfer, {pair} threads"),
        x(r),
        "≤1.5x",
        r.is_some_and(|r| r <= 1.5),
    );
    // The largest count of any run at this population (0%, 10% and 50% remote, every thread
    // count and repetition; the 100% runs are shown with the cost).
    let worst = s
        .cells
        .iter()
        .filter(|c| c.design == Design::Percpu && c.per_core == pop && c.share != ALL_REMOTE)
        .flat_map(|c| c.pressure[0].iter().copied())
        .reduce(f64::max);
    let target = "percpu ReserveEmpty in the timed phase (worst run)".to_string();
    line(
        lines,
        target,
        worst.map(|w| format!("{w:.0}")),
        "0",
        worst == Some(0.0),
    );
}

fn cross_core_targets(s: &Scaling) -> String {
    let mut lines = String::new();
    for &(design, n, bytes) in &s.bytes {
        if design == "percpu" {
            target_line(
                &mut lines,
                "bytes per pending timer on a base, u64 payload",
                n,
                Some(format!("{bytes:.1}")),
                "≤40",
                bytes <= 40.0,
            );
        }
    }
    for pop in s.populations() {
        cross_core_lines(s, pop, pair(s), &mut lines);
    }
    if lines.is_empty() {
        return lines;
    }
    format!(
        "### targets of the cross-core path\n\n| target | timers/core | measured | goal | met |\n|---|---|---:|---:|---|\n{lines}\n"
    )
}

/// The per-core scaling lines of the wheel section's targets table: at the most threads measured,
/// percpu's aggregate rate over its one-thread rate, against 90% of ideal.
pub(crate) fn scaling_targets(s: &Scaling) -> String {
    let mut out = String::new();
    let Some(&n) = s.threads().last().filter(|&&t| t > 1) else {
        return out;
    };
    for pop in s.populations() {
        for share in SHARES {
            let Some(scale) = s.scaling(Design::Percpu, share, pop, n) else {
                continue;
            };
            let goal = 0.9 * n as f64;
            let met = if scale >= goal { "yes" } else { "NO" };
            let _ = writeln!(
                out,
                "| per-core scaling, {}, {} | {n} cores | {scale:.2} | ≥{goal:.1} | {met} |",
                share.label,
                pop_label(pop)
            );
        }
    }
    out
}

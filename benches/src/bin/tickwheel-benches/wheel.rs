//! The wheel section: every workload at each size for every structure, memory per timer, the
//! output files and the targets table.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use tickwheel_benches::report::{self, Row};
use tickwheel_benches::workload::{self, Workload};
use tickwheel_benches::{Kind, Timers, mem, percore, with_timers};

use crate::scaling::{self, Scaling, Timeliness};
use crate::{SEED, die};

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) out: PathBuf,
    pub(crate) reps: Option<usize>,
    pub(crate) sizes: Option<Vec<usize>>,
    /// Structures to run (all when empty).
    pub(crate) only: Vec<Kind>,
    /// Workloads to run (all when empty).
    pub(crate) workloads: Vec<Workload>,
    pub(crate) skip_memory: bool,
    /// Skip the multi-core sections (scaling, timeliness).
    pub(crate) skip_cores: bool,
    /// Keepalive timers per core in the scaling section.
    pub(crate) per_core: Option<usize>,
    /// Run the per-core keepalive section alone.
    pub(crate) scaling_only: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            quick: false,
            out: PathBuf::from("target/bench-results"),
            reps: None,
            sizes: None,
            only: Vec::new(),
            workloads: Vec::new(),
            skip_memory: false,
            skip_cores: false,
            per_core: None,
            scaling_only: false,
        }
    }
}

impl Plan {
    fn sizes(&self) -> Vec<usize> {
        match (&self.sizes, self.quick) {
            (Some(s), _) => s.clone(),
            (None, true) => vec![1_000, 10_000],
            (None, false) => vec![1_000, 100_000, 1_000_000, 10_000_000],
        }
    }

    fn reps_at(&self, n: usize) -> usize {
        match (self.reps, self.quick) {
            (Some(r), _) => r.max(1),
            (None, true) => 1,
            (None, false) if n >= 10_000_000 => 1,
            (None, false) => 5,
        }
    }

    fn kinds(&self) -> Vec<Kind> {
        if self.only.is_empty() {
            Kind::ALL.to_vec()
        } else {
            self.only.clone()
        }
    }

    fn workloads(&self) -> Vec<Workload> {
        if self.workloads.is_empty() {
            Workload::ALL.to_vec()
        } else {
            self.workloads.clone()
        }
    }

    /// Sizes at which memory is measured (each in its own process).
    fn mem_sizes(&self) -> Vec<usize> {
        if self.quick {
            vec![10_000]
        } else {
            vec![100_000, 1_000_000]
        }
    }
}

/// What a run measured.
#[derive(Debug, Default)]
struct Results {
    /// Workloads and memory: section = workload, series = structure.
    rows: Vec<Row>,
    scaling: Scaling,
    timeliness: Timeliness,
}

/// The whole run (or the scaling section alone); writes the output files.
pub(crate) fn run(plan: &Plan) {
    let cores = percore::available_cores(); // before any thread is pinned
    eprintln!("{cores} cores available for pinning");
    let started = Instant::now();
    let mut results = Results::default();
    if plan.scaling_only {
        results.scaling = scaling::run_scaling(plan);
    } else {
        for n in plan.sizes() {
            for w in plan.workloads() {
                if n < 10_000_000 || runs_at_ten_million(w) {
                    results
                        .rows
                        .extend(run_workload(&plan.kinds(), w, n, plan.reps_at(n)));
                }
            }
            let size = report::size_label(n as u64);
            eprintln!("  {size} live timers done at {:.0?}", started.elapsed());
        }
        for n in plan.mem_sizes().into_iter().filter(|_| !plan.skip_memory) {
            results.rows.extend(run_memory(&plan.kinds(), n));
        }
        if !plan.skip_cores {
            results.scaling = scaling::run_scaling(plan);
            eprintln!("  scaling done at {:.0?}", started.elapsed());
            results.timeliness = scaling::run_timeliness(plan);
            eprintln!("  timeliness done at {:.0?}", started.elapsed());
        }
    }
    write_outputs(plan, &results).unwrap_or_else(|e| die(&e));
    eprintln!("finished in {:.1?}", started.elapsed());
}

/// At 10^7 only the workloads whose story changes with size run (one repetition each).
fn runs_at_ten_million(w: Workload) -> bool {
    matches!(
        w,
        Workload::Insert | Workload::Cancel | Workload::Reset | Workload::Refresh | Workload::Fire
    )
}

/// Runs `w` at size `n` for every structure, `reps` times, interleaved; one row per structure.
fn run_workload(kinds: &[Kind], w: Workload, n: usize, reps: usize) -> Vec<Row> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for rep in 0..reps {
        let seed = SEED + rep as u64;
        let mut sums = Vec::new();
        let mut log = format!("  {} {}:", w.name(), report::size_label(n as u64));
        for (i, &kind) in kinds.iter().enumerate() {
            let t = Instant::now();
            let out = with_timers!(kind, |make| w.run(make, n, seed));
            log.push_str(&format!(
                " {} {:.2?} [{:.1}]",
                kind.name(),
                t.elapsed(),
                out.ns_per_op()
            ));
            samples[i].push(out.ns_per_op());
            sums.push((kind.name(), out.checksum));
        }
        eprintln!("{log}");
        if let Some(bad) = sums.iter().find(|s| s.1 != sums[0].1) {
            let first = sums[0];
            die(&format!(
                "{} at {n}: checksums disagree: {bad:?} vs {first:?}",
                w.name()
            ));
        }
    }
    kinds
        .iter()
        .zip(samples)
        .map(|(k, s)| Row::from_samples(w.name(), k.name(), n as u64, "ns/op", &s))
        .collect()
}

/// In this (fresh) process: bytes of resident memory per timer after arming `n` keepalive timers,
/// and after the reset workload's refreshes on top (four per timer; the clock moving, nothing
/// firing).
pub(crate) fn measure_memory<Q: Timers>(mut q: Q, n: usize, seed: u64) -> (f64, f64) {
    let deadlines = workload::keepalive_deadlines(n, seed);
    let plan = workload::refresh_plan(n, workload::refresh_count(n), seed);
    // Touch the id buffer before the baseline so only the structure's own memory is counted.
    let mut ids: Vec<Q::Id> = Vec::with_capacity(n);
    for slot in ids.spare_capacity_mut() {
        *slot = std::mem::MaybeUninit::zeroed();
    }
    std::hint::black_box(ids.spare_capacity_mut());
    let base = mem::rss_bytes().unwrap_or_else(|| die("no /proc/self/status"));
    q.scope(|q| {
        for (i, &d) in deadlines.iter().enumerate() {
            ids.push(q.insert(d, i as u64));
        }
    });
    let armed = mem::rss_bytes().unwrap_or(0);
    let per_tick = workload::resets_per_tick(plan.len());
    q.scope(|q| workload::keepalive_phase(q, &mut ids, &plan, per_tick));
    let refreshed = mem::rss_bytes().unwrap_or(0);
    assert_eq!(q.len(), n);
    let per = |after: u64| after.saturating_sub(base) as f64 / n as f64;
    (per(armed), per(refreshed))
}

/// Bytes per timer of each structure at `n`, each measured by `mem` in a fresh process.
fn run_memory(kinds: &[Kind], n: usize) -> Vec<Row> {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(&format!("own path: {e}")));
    let mut rows = Vec::new();
    for &kind in kinds {
        let t = Instant::now();
        let out = Command::new(&exe)
            .args(["mem", kind.name(), &n.to_string(), &SEED.to_string()])
            .output()
            .unwrap_or_else(|e| die(&format!("re-running for memory: {e}")));
        let text = String::from_utf8_lossy(&out.stdout);
        let figures: Vec<f64> = text
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        let [insert, reset] = figures[..] else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            die(&format!("mem {} {n}: {text} {stderr}", kind.name()))
        };
        let size = report::size_label(n as u64);
        eprintln!("  memory {} {size}: {:.2?}", kind.name(), t.elapsed());
        let unit = "bytes/timer";
        rows.push(Row::from_samples(
            "bytes_armed",
            kind.name(),
            n as u64,
            unit,
            &[insert],
        ));
        rows.push(Row::from_samples(
            "bytes_refreshed",
            kind.name(),
            n as u64,
            unit,
            &[reset],
        ));
    }
    rows
}

fn write_outputs(plan: &Plan, results: &Results) -> Result<(), String> {
    std::fs::create_dir_all(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    let rows = &results.rows;
    let mut md = String::new();
    for w in Workload::ALL {
        let title = format!("{}: {}", w.name(), w.unit());
        md.push_str(&report::table(
            rows,
            w.name(),
            &format!("### {} — {}", w.name(), w.unit()),
        ));
        md.push('\n');
        md.push_str(&report::text_plot(
            rows,
            w.name(),
            &format!("{}: {} against live timers", w.name(), w.unit()),
        ));
        md.push('\n');
        let svg = plan.out.join(format!("{}.svg", w.name()));
        if let Err(e) = report::svg_chart(rows, w.name(), &title, &svg) {
            eprintln!("no chart: {e}");
        }
    }
    for (section, title) in [
        ("bytes_armed", "### bytes per timer — armed (RSS growth)"),
        (
            "bytes_refreshed",
            "### bytes per timer — after refreshes (4 per timer at 10^6)",
        ),
    ] {
        md.push_str(&report::table(rows, section, title));
        md.push('\n');
    }
    md.push_str(&scaling::tables(&results.scaling, &results.timeliness));
    md.push_str(&targets(results));
    md.push_str(&wheel_targets(rows));
    println!("{md}");
    let mut all = rows.clone();
    all.extend(results.scaling.rows());
    all.extend(scaling::timeliness_rows(&results.timeliness));
    let write = |name: &str, text: &str| {
        let p = plan.out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    write("summary.csv", &report::csv(&all))?;
    write("tables.md", &md)?;
    eprintln!("wrote {}", plan.out.display());
    Ok(())
}

/// One ratio of the core wheel's table: `slow`'s time over `fast`'s on `section`, with a goal
/// (`at_least`, or at most) or none.
struct WheelRatio {
    section: &'static str,
    slow: &'static str,
    fast: &'static str,
    goal: Option<(f64, bool)>,
}

const EXACT: &str = "tickwheel-exact";
const COARSE: &str = "tickwheel-coarse";
/// The faster of the two modes at that size.
const BEST: &str = "best";

const WHEEL_RATIOS: [WheelRatio; 8] = {
    const fn r(
        section: &'static str,
        slow: &'static str,
        fast: &'static str,
        goal: Option<(f64, bool)>,
    ) -> WheelRatio {
        WheelRatio {
            section,
            slow,
            fast,
            goal,
        }
    }
    [
        r("fire", "btreemap", COARSE, Some((1.5, true))),
        r("fire", "btreemap", EXACT, Some((1.0, true))),
        r("reset", COARSE, EXACT, Some((1.2, false))),
        r("refresh", COARSE, EXACT, Some((1.2, false))),
        r("refresh", "lazy-heap", BEST, Some((3.0, true))),
        r("reset", "lazy-heap", BEST, Some((1.5, true))),
        r("insert", "lazy-heap", BEST, None),
        r("cancel", "lazy-heap", BEST, None),
    ]
};

/// The median time of `series` (or of the faster mode, for [`BEST`]) at `n`.
fn wheel_time(rows: &[Row], section: &str, series: &str, n: u64) -> Option<f64> {
    if series != BEST {
        return report::lookup(rows, section, series, n);
    }
    let e = report::lookup(rows, section, EXACT, n);
    let c = report::lookup(rows, section, COARSE, n);
    e.zip(c).map(|(e, c)| e.min(c)).or(e).or(c)
}

/// The core wheel's ratios at 10^6 and at 10^7, and how far each moved between the two sizes
/// (a ratio that holds at 10^6 should hold within 20% at 10^7).
fn wheel_targets(rows: &[Row]) -> String {
    let (m, t) = (1_000_000, 10_000_000);
    let mut out = String::new();
    for w in &WHEEL_RATIOS {
        let ratio = |n| {
            Some(wheel_time(rows, w.section, w.slow, n)? / wheel_time(rows, w.section, w.fast, n)?)
        };
        let (at_m, at_t) = (ratio(m), ratio(t));
        if at_m.is_none() && at_t.is_none() {
            continue;
        }
        let cell = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}x"));
        let moved = at_m.zip(at_t).map(|(a, b)| b / a);
        let meets = |r: f64| {
            w.goal
                .is_none_or(|(g, at_least)| if at_least { r >= g } else { r <= g })
        };
        let met = at_m.is_some_and(meets)
            && at_t.is_none_or(meets)
            && moved.is_none_or(|x| (0.8..=1.2).contains(&x));
        // With no goal, only the move between the sizes is judged.
        let met = match (w.goal.is_some() || moved.is_some(), met) {
            (false, _) => "–",
            (true, true) => "yes",
            (true, false) => "NO",
        };
        let goal = w.goal.map_or("–".to_owned(), |(g, at_least)| {
            format!("{}{g}x", if at_least { "≥" } else { "≤" })
        });
        let moved = moved.map_or("–".to_owned(), |x| format!("{x:.2}"));
        out.push_str(&format!(
            "| {}: {} / {} | {goal} | {} | {} | {moved} | {met} |\n",
            w.section,
            w.slow,
            w.fast,
            cell(at_m),
            cell(at_t)
        ));
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "### the core wheel at 10^6 and 10^7 (ratio = first time / second time)\n\n\
         | ratio | goal | 10^6 | 10^7 | 10^7 / 10^6 | met |\n|---|---|---:|---:|---:|---|\n{out}\n"
    )
}

/// A ratio target: `peer`'s time over tickwheel's on `workload` must reach `goal`.
struct RatioTarget {
    label: &'static str,
    workload: Workload,
    peer: Kind,
    goal: f64,
}

const fn target(label: &'static str, workload: Workload, peer: Kind, goal: f64) -> RatioTarget {
    RatioTarget {
        label,
        workload,
        peer,
        goal,
    }
}

const RATIO_TARGETS: [RatioTarget; 9] = [
    target(
        "keepalive refresh vs DelayQueue",
        Workload::Refresh,
        Kind::DelayQueue,
        5.0,
    ),
    target(
        "keepalive refresh vs lazy heap",
        Workload::Refresh,
        Kind::LazyHeap,
        1.5,
    ),
    target(
        "reset (30-60 s) vs DelayQueue",
        Workload::Reset,
        Kind::DelayQueue,
        5.0,
    ),
    target(
        "reset (30-60 s) vs lazy heap",
        Workload::Reset,
        Kind::LazyHeap,
        1.5,
    ),
    target("insert vs lazy heap", Workload::Insert, Kind::LazyHeap, 1.0),
    target(
        "cancel vs DelayQueue",
        Workload::Cancel,
        Kind::DelayQueue,
        8.0,
    ),
    target("fire vs DelayQueue", Workload::Fire, Kind::DelayQueue, 10.0),
    target("fire vs BTreeMap", Workload::Fire, Kind::BTree, 1.0),
    target("catch-up vs BTreeMap", Workload::CatchUp, Kind::BTree, 1.0),
];

const MODES: [Kind; 2] = [Kind::TickExact, Kind::TickCoarse];

/// The target ratios at the largest size measured up to 10^6, memory, and per-core scaling.
fn targets(results: &Results) -> String {
    use std::fmt::Write as _;
    let rows = &results.rows;
    let reset = Workload::Reset.name();
    let largest = |section: &str, cap: u64| {
        rows.iter()
            .filter(|r| r.n <= cap && r.section == section)
            .map(|r| r.n)
            .max()
    };
    let Some(n) = largest(reset, 1_000_000) else {
        return String::new();
    };
    let time = |w: Workload, k: Kind| report::lookup(rows, w.name(), k.name(), n);
    let mut out = format!(
        "### targets at {} live timers (ratio = peer time / tickwheel time)\n\n",
        report::size_label(n)
    );
    out.push_str("| target | mode | measured | goal | met |\n|---|---|---:|---:|---|\n");
    for t in &RATIO_TARGETS {
        for mode in MODES {
            if let Some(r) = time(t.workload, t.peer)
                .zip(time(t.workload, mode))
                .map(|(p, m)| p / m)
            {
                let met = if r >= t.goal { "yes" } else { "NO" };
                let (label, goal, mode) = (t.label, t.goal, mode.name());
                let _ = writeln!(out, "| {label} | {mode} | {r:.2}x | ≥{goal}x | {met} |");
            }
        }
    }
    for section in ["bytes_armed", "bytes_refreshed"] {
        let m = largest(section, u64::MAX);
        for mode in MODES.map(Kind::name) {
            if let Some(b) = m.and_then(|m| report::lookup(rows, section, mode, m)) {
                // RSS growth also carries the wheel's fixed tables and page rounding, about
                // 0.1 B per timer at 10^6; a 33rd byte per entry would show as 33 B.
                let met = if b < 32.5 { "yes" } else { "NO" };
                let _ = writeln!(
                    out,
                    "| {section} | {mode} | {b:.1} B | ≤32 B (+fixed tables) | {met} |"
                );
            }
        }
    }
    out.push_str(&scaling::scaling_targets(&results.scaling));
    out
}

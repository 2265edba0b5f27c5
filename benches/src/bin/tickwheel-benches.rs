//! The bench runner: whole-run workloads over every structure, side by side, in one process.
//!
//! `tickwheel-benches [--quick] [--out DIR] [--reps N]` runs every workload at each size for
//! every structure, interleaving structures inside each repetition so machine noise falls on all
//! of them alike, checks that they agree on every checksum, measures bytes per timer in a fresh
//! process per structure (`tickwheel-benches mem KIND N SEED`), then prints Markdown tables and the
//! target ratios and writes `summary.csv` and one SVG chart per workload into the output folder.
//! `tickwheel-benches shm [--pairs N] [--live N] [--reps N]` runs only the cross-process section
//! (see `tickwheel_benches::shm`).

#![deny(unsafe_op_in_unsafe_fn)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use tickwheel_benches::percore;
use tickwheel_benches::report::{self, Row};
use tickwheel_benches::workload::{self, Workload};
use tickwheel_benches::{Kind, Timers, mem, with_timers};
use tickwheel_percpu::Mode;

const SEED: u64 = 0x7157_3eed;

/// What to run.
#[derive(Debug, Clone)]
struct Plan {
    quick: bool,
    out: PathBuf,
    reps: Option<usize>,
    sizes: Option<Vec<usize>>,
    /// Structures to run (all when empty).
    only: Vec<Kind>,
    /// Workloads to run (all when empty).
    workloads: Vec<Workload>,
    skip_memory: bool,
    /// Skip the multi-core sections (queue, scaling, timeliness).
    skip_cores: bool,
    /// Keepalive timers per core in the scaling section.
    per_core: Option<usize>,
}

impl Plan {
    fn sizes(&self) -> Vec<usize> {
        if let Some(s) = &self.sizes {
            return s.clone();
        }
        if self.quick {
            vec![1_000, 10_000]
        } else {
            vec![1_000, 100_000, 1_000_000, 10_000_000]
        }
    }

    fn reps_at(&self, n: usize) -> usize {
        match (self.reps, self.quick) {
            (Some(r), _) => r.max(1),
            (None, true) => 1,
            (None, false) if n >= 10_000_000 => 1,
            (None, false) if n >= 1_000_000 => 5,
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

fn parse_args() -> Result<Plan, String> {
    let mut plan = Plan {
        quick: false,
        out: PathBuf::from("target/bench-results"),
        reps: None,
        sizes: None,
        only: Vec::new(),
        workloads: Vec::new(),
        skip_memory: false,
        skip_cores: false,
        per_core: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => plan.quick = true,
            "--out" => plan.out = args.next().ok_or("--out needs a folder")?.into(),
            "--reps" => {
                let r = args.next().ok_or("--reps needs a count")?;
                plan.reps = Some(r.parse().map_err(|e| format!("--reps {r}: {e}"))?);
            }
            "--sizes" => {
                let list = args.next().ok_or("--sizes needs a list like 1000,100000")?;
                let parsed: Result<Vec<usize>, _> = list.split(',').map(str::parse).collect();
                plan.sizes = Some(parsed.map_err(|e| format!("--sizes {list}: {e}"))?);
            }
            "--only" => {
                let list = args.next().ok_or("--only needs structure names")?;
                for name in list.split(',') {
                    plan.only
                        .push(Kind::from_name(name).ok_or(format!("no structure {name}"))?);
                }
            }
            "--workloads" => {
                let list = args.next().ok_or("--workloads needs workload names")?;
                for name in list.split(',') {
                    let w = Workload::ALL.into_iter().find(|w| w.name() == name);
                    plan.workloads.push(w.ok_or(format!("no workload {name}"))?);
                }
            }
            "--no-memory" => plan.skip_memory = true,
            "--no-cores" => plan.skip_cores = true,
            "--per-core" => {
                let v = args.next().ok_or("--per-core needs a count")?;
                plan.per_core = Some(v.parse().map_err(|e| format!("--per-core {v}: {e}"))?);
            }
            "--bench" => {} // passed by `cargo bench`
            other => {
                return Err(format!(
                    "unknown argument {other:?}; try --quick, --out DIR, --reps N, --sizes A,B, --only KIND,.., --workloads W,.., --no-memory, --no-cores, --per-core N"
                ));
            }
        }
    }
    Ok(plan)
}

/// Pins glibc's mmap threshold. By default glibc raises it after a large block is freed, so the
/// first repetition grows its big arrays with `mremap` and later ones by copying on the heap;
/// fixing it gives every repetition (and every structure) the same allocator behaviour.
fn steady_allocator() {
    // SAFETY: `mallopt` only changes a malloc tunable; it is called once, before any thread
    // starts, with a valid parameter and value.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
    if ok != 1 {
        eprintln!("note: mallopt(M_MMAP_THRESHOLD) refused; repetitions may differ");
    }
}

fn main() {
    steady_allocator();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("mem") {
        let (kind, n, seed) = parse_mem_args(&args[2..]).unwrap_or_else(|e| die(&e));
        let (insert, reset) = with_timers!(kind, |make| measure_memory(make(), n, seed));
        println!("{insert} {reset}");
        return;
    }
    if args.get(1).map(String::as_str) == Some("shm") {
        // Forks worker processes: runs before this process starts any thread.
        let plan = tickwheel_benches::shm::parse(&args[2..]).unwrap_or_else(|e| die(&e));
        print!("{}", tickwheel_benches::shm::run(plan));
        return;
    }
    let plan = parse_args().unwrap_or_else(|e| die(&e));
    let cores = percore::available_cores(); // before any thread is pinned
    eprintln!("{cores} cores available for pinning");
    let started = Instant::now();
    let mut rows = Vec::new();
    for n in plan.sizes() {
        for w in plan.workloads() {
            if n >= 10_000_000 && !runs_at_ten_million(w) {
                continue;
            }
            rows.extend(run_workload(&plan.kinds(), w, n, plan.reps_at(n)));
        }
        eprintln!(
            "  {} live timers done at {:.0?}",
            report::size_label(n as u64),
            started.elapsed()
        );
    }
    for n in plan.mem_sizes() {
        if !plan.skip_memory {
            rows.extend(run_memory(&plan.kinds(), n));
        }
    }
    if !plan.skip_cores {
        rows.extend(run_queues(&plan));
        eprintln!("  queues done at {:.0?}", started.elapsed());
        rows.extend(run_scaling(&plan));
        eprintln!("  scaling done at {:.0?}", started.elapsed());
        rows.extend(run_timeliness(&plan));
        eprintln!("  timeliness done at {:.0?}", started.elapsed());
    }
    write_outputs(&plan, &rows).unwrap_or_else(|e| die(&e));
    eprintln!("finished in {:.1?}", started.elapsed());
}

fn die(msg: &str) -> ! {
    eprintln!("tickwheel-benches: {msg}");
    std::process::exit(2)
}

/// At 10^7 only the workloads whose story changes with size run (one repetition each).
fn runs_at_ten_million(w: Workload) -> bool {
    matches!(
        w,
        Workload::Insert | Workload::Reset | Workload::Refresh | Workload::Fire
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
            log.push_str(&format!(" {} {:.2?}", kind.name(), t.elapsed()));
            samples[i].push(out.ns_per_op());
            sums.push((kind.name(), out.checksum));
        }
        eprintln!("{log}");
        if let Some(bad) = sums.iter().find(|s| s.1 != sums[0].1) {
            die(&format!(
                "{} at {n}: checksums disagree: {bad:?} vs {:?}",
                w.name(),
                sums[0]
            ));
        }
    }
    kinds
        .iter()
        .zip(samples)
        .map(|(k, s)| Row::from_samples(w.name(), k.name(), n as u64, "ns/op", &s))
        .collect()
}

fn parse_mem_args(args: &[String]) -> Result<(Kind, usize, u64), String> {
    let [kind, n, seed] = args else {
        return Err("usage: mem KIND N SEED".into());
    };
    let kind = Kind::from_name(kind).ok_or_else(|| format!("no structure named {kind}"))?;
    let n = n.parse().map_err(|e| format!("N {n}: {e}"))?;
    let seed = seed.parse().map_err(|e| format!("SEED {seed}: {e}"))?;
    Ok((kind, n, seed))
}

/// In this (fresh) process: bytes of resident memory per timer after arming `n` keepalive timers,
/// and after the reset workload's refreshes on top (four per timer; the clock moving, nothing
/// firing).
fn measure_memory<Q: Timers>(mut q: Q, n: usize, seed: u64) -> (f64, f64) {
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
            die(&format!(
                "mem {} {n}: {text} {}",
                kind.name(),
                String::from_utf8_lossy(&out.stderr)
            ))
        };
        eprintln!(
            "  memory {} {}: {:.2?}",
            kind.name(),
            report::size_label(n as u64),
            t.elapsed()
        );
        rows.push(Row::from_samples(
            "bytes_armed",
            kind.name(),
            n as u64,
            "bytes/timer",
            &[insert],
        ));
        rows.push(Row::from_samples(
            "bytes_refreshed",
            kind.name(),
            n as u64,
            "bytes/timer",
            &[reset],
        ));
    }
    rows
}

fn write_outputs(plan: &Plan, rows: &[Row]) -> Result<(), String> {
    std::fs::create_dir_all(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    let mut md = String::new();
    for w in Workload::ALL {
        md.push_str(&report::table(
            rows,
            w.name(),
            &format!("### {} — {}", w.name(), w.unit()),
        ));
        md.push('\n');
        let svg = plan.out.join(format!("{}.svg", w.name()));
        if let Err(e) =
            report::svg_chart(rows, w.name(), &format!("{}: {}", w.name(), w.unit()), &svg)
        {
            eprintln!("no chart: {e}");
        }
    }
    md.push_str(&report::table(
        rows,
        "bytes_armed",
        "### bytes per timer — armed (RSS growth)",
    ));
    md.push('\n');
    md.push_str(&report::table(
        rows,
        "bytes_refreshed",
        "### bytes per timer — after refreshes (4 per timer at 10^6)",
    ));
    md.push('\n');
    md.push_str(&percore_tables(rows));
    md.push_str(&targets(rows));
    println!("{md}");
    let write = |name: &str, text: &str| {
        let p = plan.out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    write("summary.csv", &report::csv(rows))?;
    write("tables.md", &md)?;
    eprintln!("wrote {}", plan.out.display());
    Ok(())
}

/// The target ratios at the largest size measured up to 10^6.
fn targets(rows: &[Row]) -> String {
    let n = rows
        .iter()
        .filter(|r| r.n <= 1_000_000 && r.section == "reset")
        .map(|r| r.n)
        .max();
    let Some(n) = n else { return String::new() };
    let ratio = |section: &str, slow: &str, fast: &str| {
        let (s, f) = (
            report::lookup(rows, section, slow, n)?,
            report::lookup(rows, section, fast, n)?,
        );
        Some(s / f)
    };
    let mut out = format!(
        "### targets at {} live timers (ratio = peer time / tickwheel time)\n\n",
        report::size_label(n)
    );
    out.push_str("| target | mode | measured | goal | met |\n|---|---|---:|---:|---|\n");
    let checks: [(&str, &str, &str, f64); 9] = [
        (
            "keepalive refresh vs DelayQueue",
            "refresh",
            "delayqueue",
            5.0,
        ),
        (
            "keepalive refresh vs lazy heap",
            "refresh",
            "lazy-heap",
            1.5,
        ),
        ("reset (30-60 s) vs DelayQueue", "reset", "delayqueue", 5.0),
        ("reset (30-60 s) vs lazy heap", "reset", "lazy-heap", 1.5),
        ("insert vs lazy heap", "insert", "lazy-heap", 1.0),
        ("cancel vs DelayQueue", "cancel", "delayqueue", 8.0),
        ("fire vs DelayQueue", "fire", "delayqueue", 10.0),
        ("fire vs BTreeMap", "fire", "btreemap", 1.0),
        ("catch-up vs BTreeMap", "catch_up", "btreemap", 1.0),
    ];
    for (label, section, peer, goal) in checks {
        for mode in ["tickwheel-exact", "tickwheel-coarse"] {
            if let Some(r) = ratio(section, peer, mode) {
                let met = if r >= goal { "yes" } else { "NO" };
                let _ = std::fmt::Write::write_fmt(
                    &mut out,
                    format_args!("| {label} | {mode} | {r:.2}x | ≥{goal}x | {met} |\n"),
                );
            }
        }
    }
    for section in ["bytes_armed", "bytes_refreshed"] {
        let m = rows
            .iter()
            .filter(|r| r.section == section)
            .map(|r| r.n)
            .max();
        for mode in ["tickwheel-exact", "tickwheel-coarse"] {
            if let Some(b) = m.and_then(|m| report::lookup(rows, section, mode, m)) {
                // RSS growth also carries the wheel's fixed tables and page rounding, about
                // 0.1 B per timer at 10^6; a 33rd byte per entry would show as 33 B.
                let met = if b < 32.5 { "yes" } else { "NO" };
                let _ = std::fmt::Write::write_fmt(
                    &mut out,
                    format_args!(
                        "| {section} | {mode} | {b:.1} B | ≤32 B (+fixed tables) | {met} |\n"
                    ),
                );
            }
        }
    }
    let ours = "tickwheel_percpu mpsc::Queue";
    let seg = rows
        .iter()
        .find(|r| r.section == "queue_cross_core" && r.series == ours);
    if let Some(seg_n) = seg.map(|r| r.n) {
        for (label, peer) in [
            ("cross-core queue vs SegQueue", "crossbeam SegQueue"),
            ("cross-core queue vs ArrayQueue", "crossbeam ArrayQueue"),
        ] {
            let r = report::lookup(rows, "queue_cross_core", peer, seg_n)
                .zip(report::lookup(rows, "queue_cross_core", ours, seg_n))
                .map(|(p, o)| p / o);
            if let Some(r) = r {
                let met = if r >= 1.0 { "yes" } else { "NO" };
                let _ = std::fmt::Write::write_fmt(
                    &mut out,
                    format_args!("| {label} | mpsc::Queue | {r:.2}x | ≥1x | {met} |\n"),
                );
            }
        }
    }
    let n = rows
        .iter()
        .filter(|r| r.section == "percore_refresh")
        .map(|r| r.n)
        .max();
    for r in rows
        .iter()
        .filter(|r| r.section == "percore_refresh" && Some(r.n) == n && r.n > 1)
    {
        let pop = r.series.split_once(", ").map_or("", |(_, p)| p);
        if let Some(one) = report::lookup(rows, "percore_refresh", &format!("remote 0%, {pop}"), 1)
        {
            let scale = r.median * r.n as f64 / one;
            let goal = 0.9 * r.n as f64;
            let met = if scale >= goal { "yes" } else { "NO" };
            let _ = std::fmt::Write::write_fmt(
                &mut out,
                format_args!(
                    "| per-core scaling, {} | {} cores | {scale:.2} | ≥{goal:.1} | {met} |\n",
                    r.series, r.n
                ),
            );
        }
    }
    out
}

/// Cross-core and same-thread queue figures.
fn run_queues(plan: &Plan) -> Vec<Row> {
    let (items, reps) = if plan.quick {
        (100_000, 1)
    } else {
        (2_000_000, 9)
    };
    let names: Vec<&str> = percore::queues().iter().map(|q| q.name()).collect();
    let two_cores = percore::available_cores() >= 2;
    if !two_cores {
        eprintln!("only one core: no cross-core queue figures");
    }
    let mut cross = vec![Vec::new(); names.len()];
    let mut local = vec![Vec::new(); names.len()];
    for _ in 0..reps {
        for (i, q) in percore::queues().iter().enumerate() {
            if two_cores {
                match percore::cross_core_ns_per_item(q.as_ref(), items) {
                    Ok(ns) => cross[i].push(ns),
                    Err(e) => die(&e),
                }
            }
        }
        for (i, q) in percore::queues().iter().enumerate() {
            local[i].push(percore::same_thread_ns_per_pair(q.as_ref(), items));
        }
    }
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if two_cores {
            rows.push(Row::from_samples(
                "queue_cross_core",
                name,
                items,
                "ns/item",
                &cross[i],
            ));
        }
        rows.push(Row::from_samples(
            "queue_same_thread",
            name,
            items,
            "ns/pair",
            &local[i],
        ));
    }
    rows
}

/// Shares of connections whose timer lives on another core.
const REMOTE_SHARES: [(f64, &str); 3] =
    [(0.0, "remote 0%"), (0.1, "remote 10%"), (0.5, "remote 50%")];

/// Keepalive refreshes per second per core, 1..=available pinned threads.
fn run_scaling(plan: &Plan) -> Vec<Row> {
    let (populations, ops, reps) = if plan.quick {
        (vec![1_000], 100_000, 1)
    } else {
        (vec![10_000, 100_000], 2_000_000, 5)
    };
    let populations = plan.per_core.map_or(populations, |n| vec![n]);
    let cores = percore::available_cores();
    let mut rows = Vec::new();
    for per_core in populations {
        for threads in 1..=cores {
            for (share, label) in REMOTE_SHARES {
                if threads == 1 && share > 0.0 {
                    continue; // one core has no other core to send to
                }
                let mut samples = Vec::new();
                for rep in 0..reps {
                    let runs =
                        percore::keepalive_scaling(threads, share, per_core, ops, SEED + rep)
                            .unwrap_or_else(|e| die(&format!("scaling, {threads} threads: {e}")));
                    let per_core_rate: f64 =
                        runs.iter().map(percore::CoreRun::ops_per_sec).sum::<f64>()
                            / threads as f64;
                    samples.push(per_core_rate / 1e6);
                }
                let series = format!(
                    "{label}, {} timers/core",
                    report::size_label(per_core as u64)
                );
                rows.push(Row::from_samples(
                    "percore_refresh",
                    &series,
                    threads as u64,
                    "M refreshes/s per core",
                    &samples,
                ));
            }
        }
    }
    rows
}

/// Lateness of the timerfd driver next to a bare timerfd.
fn run_timeliness(plan: &Plan) -> Vec<Row> {
    let timers = if plan.quick { 20 } else { 400 };
    let ms = Duration::from_millis(1);
    let us100 = Duration::from_micros(100);
    let mut rows = Vec::new();
    let mut push = |series: &str, s: percore::LatenessSummary| {
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
    };
    // The thread that measures is pinned; do it on a helper thread so the main one stays free.
    let floor = std::thread::spawn(move || percore::timerfd_floor(timers, SEED)).join();
    push(
        "bare timerfd (floor)",
        floor.expect("no panic").unwrap_or_else(|e| die(&e)),
    );
    for (mode, tick, name) in [
        (Mode::Exact, ms, "driver, exact, 1 ms tick"),
        (Mode::Coarse, ms, "driver, coarse, 1 ms tick"),
        (Mode::Exact, us100, "driver, exact, 100 µs tick"),
    ] {
        let run =
            std::thread::spawn(move || percore::driver_lateness(mode, tick, timers, SEED)).join();
        let (mine, _own) = run.expect("no panic").unwrap_or_else(|e| die(&e));
        push(name, mine);
    }
    rows
}

fn percore_tables(rows: &[Row]) -> String {
    let mut md = String::new();
    md.push_str(&report::table(
        rows,
        "queue_cross_core",
        "### cross-core queue — ns per item, producer on core 1, consumer on core 0",
    ));
    md.push('\n');
    md.push_str(&report::table(
        rows,
        "queue_same_thread",
        "### queue on one thread — ns per push+pop pair",
    ));
    md.push('\n');
    md.push_str(&report::table(
        rows,
        "percore_refresh",
        "### per-core keepalive — million refreshes per second per core (columns: pinned threads)",
    ));
    md.push('\n');
    let max_threads = rows
        .iter()
        .filter(|r| r.section == "percore_refresh")
        .map(|r| r.n)
        .max()
        .unwrap_or(1);
    let populations: Vec<String> = rows
        .iter()
        .filter(|r| r.section == "percore_refresh" && r.series.starts_with("remote 0%"))
        .map(|r| r.series.trim_start_matches("remote 0%").to_string())
        .fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    if max_threads > 1 {
        for pop in populations {
            let Some(one) = report::lookup(rows, "percore_refresh", &format!("remote 0%{pop}"), 1)
            else {
                continue;
            };
            md.push_str(&format!(
                "scaling{pop} on {max_threads} cores (aggregate rate / single-core rate, ideal {max_threads}):"
            ));
            for (_, label) in REMOTE_SHARES {
                let series = format!("{label}{pop}");
                if let Some(v) = report::lookup(rows, "percore_refresh", &series, max_threads) {
                    md.push_str(&format!(" {label}: {:.2};", v * max_threads as f64 / one));
                }
            }
            md.push_str("\n\n");
        }
    }
    md.push_str("### timeliness — lateness from deadline to handler, µs\n\n| timer | p50 | p99 | max |\n|---|---:|---:|---:|\n");
    let mut names: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.section == "lateness_p50") {
        names.push(&r.series);
    }
    for name in names {
        let get = |section: &str| {
            rows.iter()
                .find(|r| r.section == section && r.series == name)
                .map_or("–".into(), |r| report::figure(r.median))
        };
        md.push_str(&format!(
            "| {name} | {} | {} | {} |\n",
            get("lateness_p50"),
            get("lateness_p99"),
            get("lateness_max")
        ));
    }
    md.push('\n');
    md
}

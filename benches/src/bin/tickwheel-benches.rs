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
use tickwheel_benches::asynk;
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
    /// Skip the multi-core sections (scaling, timeliness).
    skip_cores: bool,
    /// Keepalive timers per core in the scaling section.
    per_core: Option<usize>,
    /// Run the per-core keepalive section alone.
    scaling_only: bool,
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
        scaling_only: false,
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
            "--scaling-only" => plan.scaling_only = true,
            "--bench" => {} // passed by `cargo bench`
            other => {
                return Err(format!(
                    "unknown argument {other:?}; try --quick, --out DIR, --reps N, --sizes A,B, --only KIND,.., --workloads W,.., --no-memory, --no-cores, --per-core N, --scaling-only"
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
    if args.get(1).map(String::as_str) == Some("async") {
        return run_async(&args[2..]).unwrap_or_else(|e| die(&e));
    }
    if args.get(1).map(String::as_str) == Some("async-mem") {
        let [api, n] = &args[2..] else {
            die("usage: async-mem tokio|tickwheel N")
        };
        let n = n.parse().map_err(|e| format!("bad N: {e}"));
        let b = n.and_then(|n| asynk::bytes_per_sleep(api, n));
        println!("{}", b.unwrap_or_else(|e| die(&e)));
        return;
    }
    if args.get(1).map(String::as_str) == Some("keepalive") {
        let report = one_keepalive_run(&args[2..]).unwrap_or_else(|e| die(&e));
        println!("{report}");
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
    if plan.scaling_only {
        rows.extend(run_scaling(&plan));
        write_outputs(&plan, &rows).unwrap_or_else(|e| die(&e));
        eprintln!("finished in {:.1?}", started.elapsed());
        return;
    }
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
        rows.extend(run_scaling(&plan));
        eprintln!("  scaling done at {:.0?}", started.elapsed());
        rows.extend(run_timeliness(&plan));
        eprintln!("  timeliness done at {:.0?}", started.elapsed());
    }
    write_outputs(&plan, &rows).unwrap_or_else(|e| die(&e));
    eprintln!("finished in {:.1?}", started.elapsed());
}

/// `async [--quick] [--reps N] [--out DIR] [--workloads W,..] [--no-memory]`: the async section (tickwheel-percpu's `time`
/// module against `tokio::time` on the same runtime); writes `async.md` into the folder.
fn run_async(args: &[String]) -> Result<(), String> {
    let (mut quick, mut reps, mut out) = (false, 5, PathBuf::from("target/bench-results"));
    let mut only = Vec::new();
    let mut skip_memory = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => (quick, reps) = (true, 1),
            "--reps" => {
                let r = it.next().ok_or("--reps needs a count")?;
                reps = r.parse().map_err(|e| format!("--reps {r}: {e}"))?;
                if reps == 0 {
                    return Err("--reps must be at least 1".into());
                }
            }
            "--out" => out = it.next().ok_or("--out needs a folder")?.into(),
            "--workloads" => {
                let list = it.next().ok_or("--workloads needs names like fire,reset")?;
                only = list.split(',').map(str::to_owned).collect();
            }
            "--no-memory" => skip_memory = true,
            other => {
                return Err(format!(
                    "unknown argument {other:?}; try --quick, --reps N, --out DIR, --workloads W,.., --no-memory"
                ));
            }
        }
    }
    let lines = asynk::run(reps, quick, &only);
    let mut mem = Vec::new();
    let sizes: &[usize] = match (skip_memory, quick) {
        (true, _) => &[],
        (false, true) => &[10_000],
        (false, false) => &[100_000, 1_000_000],
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    for &n in sizes {
        let mut per = Vec::new();
        for api in ["tokio", "tickwheel"] {
            let child = Command::new(&exe)
                .args(["async-mem", api, &n.to_string()])
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&child.stdout);
            per.push(
                text.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("{api} mem: {e}: {text}"))?,
            );
        }
        mem.push((n, per[0], per[1]));
    }
    let md = asynk::markdown(&lines, &mem);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    std::fs::write(out.join("async.md"), &md).map_err(|e| e.to_string())?;
    println!("{md}");
    Ok(())
}

fn die(msg: &str) -> ! {
    eprintln!("tickwheel-benches: {msg}");
    std::process::exit(2)
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
        md.push_str(&report::text_plot(
            rows,
            w.name(),
            &format!("{}: {} against live timers", w.name(), w.unit()),
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
    md.push_str(&wheel_targets(rows));
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

/// The core wheel's ratios at 10^6 and at 10^7, and how far each moved between the two sizes
/// (a ratio that holds at 10^6 should hold within 20% at 10^7). `best` is the faster mode.
fn wheel_targets(rows: &[Row]) -> String {
    const EXACT: &str = "tickwheel-exact";
    const COARSE: &str = "tickwheel-coarse";
    const BEST: &str = "best";
    let time = |section: &str, series: &str, n: u64| match series {
        BEST => {
            let e = report::lookup(rows, section, EXACT, n);
            let c = report::lookup(rows, section, COARSE, n);
            e.zip(c).map(|(e, c)| e.min(c)).or(e).or(c)
        }
        _ => report::lookup(rows, section, series, n),
    };
    let ratio = |section: &str, slow: &str, fast: &str, n: u64| {
        Some(time(section, slow, n)? / time(section, fast, n)?)
    };
    // (section, numerator, denominator, goal: at least `Some((g, true))`, at most `false`).
    let checks = [
        ("fire", "btreemap", COARSE, Some((1.5, true))),
        ("fire", "btreemap", EXACT, Some((1.0, true))),
        ("reset", COARSE, EXACT, Some((1.2, false))),
        ("refresh", COARSE, EXACT, Some((1.2, false))),
        ("refresh", "lazy-heap", BEST, Some((3.0, true))),
        ("reset", "lazy-heap", BEST, Some((1.5, true))),
        ("insert", "lazy-heap", BEST, None),
        ("cancel", "lazy-heap", BEST, None),
    ];
    let (m, t) = (1_000_000, 10_000_000);
    let mut out = String::from(
        "### the core wheel at 10^6 and 10^7 (ratio = first time / second time)\n\n\
         | ratio | goal | 10^6 | 10^7 | 10^7 / 10^6 | met |\n|---|---|---:|---:|---:|---|\n",
    );
    let mut any = false;
    for (section, slow, fast, goal) in checks {
        let (at_m, at_t) = (ratio(section, slow, fast, m), ratio(section, slow, fast, t));
        if at_m.is_none() && at_t.is_none() {
            continue;
        }
        any = true;
        let cell = |r: Option<f64>| r.map_or("–".to_owned(), |r| format!("{r:.2}x"));
        let moved = at_m.zip(at_t).map(|(a, b)| b / a);
        let meets =
            |r: f64| goal.is_none_or(|(g, at_least)| if at_least { r >= g } else { r <= g });
        let met = at_m.is_some_and(meets)
            && at_t.is_none_or(meets)
            && moved.is_none_or(|x| (0.8..=1.2).contains(&x));
        // With no goal, only the move between the sizes is judged.
        let met = match (goal.is_some() || moved.is_some(), met) {
            (false, _) => "–",
            (true, true) => "yes",
            (true, false) => "NO",
        };
        let goal = goal.map_or("–".to_owned(), |(g, at_least)| {
            format!("{}{g}x", if at_least { "≥" } else { "≤" })
        });
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "| {section}: {slow} / {fast} | {goal} | {} | {} | {} | {} |\n",
                cell(at_m),
                cell(at_t),
                moved.map_or("–".to_owned(), |x| format!("{x:.2}")),
                met
            ),
        );
    }
    if any { out + "\n" } else { String::new() }
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

/// Shares of connections whose timer lives on another core.
const REMOTE_SHARES: [(f64, &str); 3] =
    [(0.0, "remote 0%"), (0.1, "remote 10%"), (0.5, "remote 50%")];

/// Every refresh remote: with the 0% run at the same thread count, the cost of one remote
/// refresh against one local one.
const ALL_REMOTE: (f64, &str) = (1.0, "remote 100%");

/// Thread counts of the scaling section: one, two, and every core (each at most once).
fn scaling_threads(cores: usize) -> Vec<usize> {
    let mut t = vec![1, 2.min(cores), cores];
    t.dedup();
    t
}

/// The per-core keepalive load on every design, 1, 2 and all pinned threads, each remote share;
/// designs interleaved inside each repetition, checksums compared across designs.
///
/// Rows: `percore_refresh` (percpu, per-core rate, as before), `percore_peers` (every design,
/// aggregate rate), `percore_ns_per_op` (every design, per thread), and the percpu cross-core
/// counters of the timed phase (`percore_inbox_full`,
/// `percore_inbox_retries`, `percore_stalled_ms`).
fn run_scaling(plan: &Plan) -> Vec<Row> {
    use percore::keepalive::{self, Design, Load};
    let (populations, ops, reps) = if plan.quick {
        (vec![1_000], 20_000, 1)
    } else {
        (vec![10_000, 100_000], 1_000_000, 3)
    };
    let populations = plan.per_core.map_or(populations, |n| vec![n]);
    let reps = plan.reps.map_or(reps, |r| r.max(1) as u64);
    let cores = percore::available_cores();
    let mut rows = Vec::new();
    for per_core in populations {
        let pop = format!("{} timers/core", report::size_label(per_core as u64));
        for threads in scaling_threads(cores) {
            let shares = REMOTE_SHARES
                .iter()
                .chain(std::iter::once(&ALL_REMOTE))
                .filter(|(share, _)| threads > 1 || *share == 0.0);
            for &(share, label) in shares {
                let mut load = Load {
                    threads,
                    remote_share: share,
                    per_core,
                    ops_per_thread: ops,
                    seed: SEED,
                };
                let designs: Vec<Design> = Design::ALL
                    .into_iter()
                    .filter(|d| d.supports(&load))
                    .collect();
                let mut rates = vec![Vec::new(); designs.len()];
                let mut ns = vec![Vec::new(); designs.len()];
                let mut pressure = [Vec::new(), Vec::new(), Vec::new()];
                for rep in 0..reps {
                    load.seed = SEED + rep;
                    let mut sums = Vec::new();
                    let mut log = format!("  keepalive {threads} threads, {label}, {pop}:");
                    // Each repetition starts with another design: the first run of a process
                    // pays for memory the later ones find warm, and no design should always pay.
                    let n = designs.len();
                    for i in (0..n).map(|k| (k + rep as usize) % n) {
                        let design = designs[i];
                        let run = keepalive::keepalive_scaling(design, &load).unwrap_or_else(|e| {
                            die(&format!(
                                "scaling, {}, {threads} threads: {e}",
                                design.name()
                            ))
                        });
                        let rate = run.aggregate_ops_per_sec() / 1e6;
                        log.push_str(&format!(" {} {rate:.1} M/s;", design.name()));
                        rates[i].push(rate);
                        ns[i].push(run.ns_per_op());
                        sums.push((design.name(), run.checksum));
                        if design == Design::Percpu {
                            pressure[0].push(run.backpressure.inbox_full as f64);
                            pressure[1].push(run.inbox_full_retries() as f64);
                            pressure[2].push(run.stalled().as_secs_f64() * 1e3);
                        }
                    }
                    eprintln!("{log}");
                    if let Some(bad) = sums.iter().find(|s| s.1 != sums[0].1) {
                        die(&format!(
                            "keepalive, {threads} threads, {label}, {pop}: checksums disagree: {bad:?} vs {:?}",
                            sums[0]
                        ));
                    }
                }
                for (i, design) in designs.iter().enumerate() {
                    let series = format!("{}, {label}, {pop}", design.name());
                    let n = threads as u64;
                    let unit = "M refreshes/s, all threads";
                    rows.push(Row::from_samples(
                        "percore_peers",
                        &series,
                        n,
                        unit,
                        &rates[i],
                    ));
                    let unit = "ns/refresh per thread";
                    rows.push(Row::from_samples(
                        "percore_ns_per_op",
                        &series,
                        n,
                        unit,
                        &ns[i],
                    ));
                    if *design == Design::Percpu && share < 1.0 {
                        let per_core: Vec<f64> = rates[i].iter().map(|r| r / n as f64).collect();
                        rows.push(Row::from_samples(
                            "percore_refresh",
                            &format!("{label}, {pop}"),
                            n,
                            "M refreshes/s per core",
                            &per_core,
                        ));
                    }
                }
                let series = format!("{label}, {pop}");
                for (section, samples) in [
                    "percore_inbox_full",
                    "percore_inbox_retries",
                    "percore_stalled_ms",
                ]
                .into_iter()
                .zip(&pressure)
                {
                    if !samples.is_empty() {
                        rows.push(Row::from_samples(
                            section,
                            &series,
                            threads as u64,
                            if section == "percore_stalled_ms" {
                                "ms, all threads"
                            } else {
                                "count"
                            },
                            samples,
                        ));
                    }
                }
            }
        }
    }
    rows
}

/// `keepalive DESIGN THREADS REMOTE_SHARE PER_CORE OPS [SEED]`: one run of the per-core keepalive
/// load on one design (for instruction counts, or a look at one configuration).
fn one_keepalive_run(args: &[String]) -> Result<String, String> {
    use percore::keepalive::{self, Design, Load};
    let usage = || {
        let keys: Vec<&str> = Design::ALL.iter().map(|d| d.key()).collect();
        format!(
            "usage: keepalive DESIGN THREADS REMOTE_SHARE PER_CORE OPS [SEED]; DESIGN is one of {}",
            keys.join(", ")
        )
    };
    let (design, rest) = args.split_first().ok_or_else(usage)?;
    let design =
        Design::from_key(design).ok_or_else(|| format!("no design {design:?}; {}", usage()))?;
    let num = |i: usize, what: &str| -> Result<f64, String> {
        let v = rest.get(i).ok_or_else(usage)?;
        v.parse().map_err(|e| format!("{what} {v}: {e}"))
    };
    if rest.len() > 5 {
        return Err(usage());
    }
    let load = Load {
        threads: num(0, "THREADS")? as usize,
        remote_share: num(1, "REMOTE_SHARE")?,
        per_core: num(2, "PER_CORE")? as usize,
        ops_per_thread: num(3, "OPS")? as u64,
        seed: match rest.get(4) {
            Some(v) => v.parse().map_err(|e| format!("SEED {v}: {e}"))?,
            None => SEED,
        },
    };
    let run = keepalive::keepalive_scaling(design, &load)?;
    Ok(format!(
        "{}: {:.2} M refreshes/s all threads, {:.1} ns/refresh per thread, {:?}, {:?}, {} retries, {:.1?} stalled",
        design.name(),
        run.aggregate_ops_per_sec() / 1e6,
        run.ns_per_op(),
        run.checksum,
        run.backpressure,
        run.inbox_full_retries(),
        run.stalled()
    ))
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
    md.push_str(&peer_tables(rows));
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

/// The per-core keepalive designs side by side: one table per population, the cost of a remote
/// refresh against a local one, and the targets of the cross-core path.
fn peer_tables(rows: &[Row]) -> String {
    use percore::keepalive::Design;
    use std::fmt::Write as _;
    let get = |section: &str, design: Design, label: &str, pop: &str, threads: u64| {
        let series = format!("{}, {label}, {pop}", design.name());
        report::lookup(rows, section, &series, threads)
    };
    let rate = |d, label, pop, threads| get("percore_peers", d, label, pop, threads);
    let show = |v: Option<f64>| v.map_or("–".to_string(), report::figure);
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let show_ratio = |v: Option<f64>| v.map_or("–".to_string(), |r| format!("{r:.2}x"));
    let percpu = Design::Percpu.name();
    // Populations, in first-seen order, from the percpu rows at 0% remote on one thread.
    let mut pops: Vec<String> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.section == "percore_peers" && r.n == 1)
    {
        if let Some(pop) = r.series.strip_prefix(&format!("{percpu}, remote 0%, ")) {
            if !pops.iter().any(|p| p == pop) {
                pops.push(pop.to_string());
            }
        }
    }
    let mut threads: Vec<u64> = rows
        .iter()
        .filter(|r| r.section == "percore_peers")
        .map(|r| r.n)
        .collect();
    threads.sort_unstable();
    threads.dedup();
    // The targets are for two threads (or the most this machine has, if fewer).
    let pair = threads
        .iter()
        .copied()
        .filter(|&t| t <= 2)
        .max()
        .unwrap_or(1);
    let pressure = |section: &str, label: &str, pop: &str, t: u64| {
        report::lookup(rows, section, &format!("{label}, {pop}"), t)
            .map_or("–".to_string(), |c| format!("{c:.0}"))
    };
    let mut md = String::new();
    for pop in &pops {
        let _ = writeln!(
            md,
            "### per-core keepalive against locks, {pop} — million refreshes per second, all threads together (medians)\n"
        );
        md.push_str(
            "| threads | remote | percpu | wheel/core + std Mutex | wheel/core + parking_lot | global Mutex | bare Wheel | percpu / std | percpu / parking_lot | percpu scaling | std Mutex scaling | InboxFull | stalled (ms) |\n",
        );
        md.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for &t in &threads {
            for (_, label) in REMOTE_SHARES {
                let Some(p) = rate(Design::Percpu, label, pop, t) else {
                    continue;
                };
                let std_m = rate(Design::StdMutexPerCore, label, pop, t);
                let pl = rate(Design::ParkingLotPerCore, label, pop, t);
                let scaling = |d: Design| {
                    let one = rate(d, "remote 0%", pop, 1)?;
                    Some(rate(d, label, pop, t)? / one)
                };
                let scaling = |d| {
                    if t == 1 {
                        "–".to_string()
                    } else {
                        scaling(d).map_or("–".to_string(), |s| format!("{s:.2}"))
                    }
                };
                let _ = writeln!(
                    md,
                    "| {t} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    label.trim_start_matches("remote "),
                    report::figure(p),
                    show(std_m),
                    show(pl),
                    show(rate(Design::GlobalMutex, label, pop, t)),
                    show(rate(Design::BareWheel, label, pop, t)),
                    show_ratio(ratio(Some(p), std_m)),
                    show_ratio(ratio(Some(p), pl)),
                    scaling(Design::Percpu),
                    scaling(Design::StdMutexPerCore),
                    pressure("percore_inbox_full", label, pop, t),
                    pressure("percore_stalled_ms", label, pop, t),
                );
            }
        }
        md.push('\n');
    }
    // Remote against local, at the same thread count. The marginal cost of a remote refresh
    // comes from the 0% and 50% runs (half the refreshes remote: t50 = (t0 + t_remote) / 2), where
    // the owner and one remote core both use each core's timers. The 100% runs are shown too, but
    // there each core's timers have a single user (the next core in the ring), so a lock-based
    // remote refresh moves no cache lines and looks as cheap as a local one.
    let marginal = |d: Design, pop: &str| {
        let t0 = get("percore_ns_per_op", d, "remote 0%", pop, pair)?;
        let t50 = get("percore_ns_per_op", d, "remote 50%", pop, pair)?;
        Some(2.0 * t50 - t0)
    };
    if threads.iter().any(|&t| t > 1) {
        let _ = writeln!(
            md,
            "### one keepalive refresh, local and remote — ns per refresh on each thread, turns included ({pair} threads; local: the 0% run; remote: 2·t(50%) − t(0%), and the 100% run)\n"
        );
        md.push_str("| design | timers/core | local | remote | remote / local | all remote (100%) | 100% / local | InboxFull (100%) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
        for pop in &pops {
            for d in [
                Design::Percpu,
                Design::StdMutexPerCore,
                Design::ParkingLotPerCore,
                Design::GlobalMutex,
            ] {
                let local = get("percore_ns_per_op", d, "remote 0%", pop, pair);
                let remote = marginal(d, pop);
                let all = get("percore_ns_per_op", d, ALL_REMOTE.1, pop, pair);
                if local.is_none() {
                    continue;
                }
                let full = if d == Design::Percpu {
                    pressure("percore_inbox_full", ALL_REMOTE.1, pop, pair)
                } else {
                    "–".to_string()
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {full} |",
                    d.name(),
                    pop.trim_end_matches(" timers/core"),
                    show(local),
                    show(remote),
                    show_ratio(ratio(remote, local)),
                    show(all),
                    show_ratio(ratio(all, local)),
                );
            }
        }
        md.push('\n');
    }
    // The targets of the cross-core path.
    let mut targets = String::new();
    let mut line = |target: String, pop: &str, measured: Option<String>, goal: &str, met: bool| {
        if let Some(m) = measured {
            let met = if met { "yes" } else { "NO" };
            let pop = pop.trim_end_matches(" timers/core");
            let _ = writeln!(targets, "| {target} | {pop} | {m} | {goal} | {met} |");
        }
    };
    for pop in &pops {
        for (_, label) in &REMOTE_SHARES[1..] {
            let r = ratio(
                rate(Design::Percpu, label, pop, pair),
                rate(Design::StdMutexPerCore, label, pop, pair),
            );
            let m = r.map(|r| format!("{r:.2}x"));
            line(
                format!("percpu vs wheel per core + std Mutex, {label}, {pair} threads"),
                pop,
                m,
                "≥1.5x",
                r.is_some_and(|r| r >= 1.5),
            );
        }
        for (label, goal) in [("remote 10%", 1.8), ("remote 50%", 1.3)] {
            let s = ratio(
                rate(Design::Percpu, label, pop, pair),
                rate(Design::Percpu, "remote 0%", pop, 1),
            );
            line(
                format!("percpu {pair}-thread scaling, {label}"),
                pop,
                s.filter(|_| pair > 1).map(|s| format!("{s:.2}")),
                &format!("≥{goal}"),
                s.is_some_and(|s| s >= goal),
            );
        }
        let r = ratio(
            rate(Design::Percpu, "remote 0%", pop, 1),
            rate(Design::BareWheel, "remote 0%", pop, 1),
        );
        line(
            "percpu vs bare Wheel, one thread, no remote".into(),
            pop,
            r.map(|r| format!("{r:.2}x")),
            "≥0.95x",
            r.is_some_and(|r| r >= 0.95),
        );
        let r = ratio(
            marginal(Design::Percpu, pop),
            get("percore_ns_per_op", Design::Percpu, "remote 0%", pop, pair),
        );
        line(
            format!("percpu remote / local refresh, {pair} threads"),
            pop,
            r.filter(|_| pair > 1).map(|r| format!("{r:.2}x")),
            "≤2x",
            r.is_some_and(|r| r <= 2.0),
        );
        // The largest count of any run of the table at this population (0%, 10% and 50% remote,
        // every thread count and repetition; the 100% runs are shown with the cost).
        let worst = rows
            .iter()
            .filter(|r| {
                r.section == "percore_inbox_full"
                    && r.series.ends_with(pop.as_str())
                    && !r.series.starts_with(ALL_REMOTE.1)
            })
            .map(|r| r.max)
            .reduce(f64::max);
        line(
            "percpu InboxFull in the timed phase (worst run)".to_string(),
            pop,
            worst.map(|w| format!("{w:.0}")),
            "0",
            worst == Some(0.0),
        );
    }
    if !targets.is_empty() {
        md.push_str("### targets of the cross-core path\n\n| target | timers/core | measured | goal | met |\n|---|---|---:|---:|---|\n");
        md.push_str(&targets);
        md.push('\n');
    }
    md
}

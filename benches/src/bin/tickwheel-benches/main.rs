//! The bench runner: whole-run workloads over every structure, side by side, in one process.
//!
//! `tickwheel-benches [--quick] [--out DIR] [--reps N] ...` runs every workload at each size for
//! every structure, interleaving structures inside each repetition so machine noise falls on all
//! of them alike, checks that they agree on every checksum, measures bytes per timer in a fresh
//! process per structure (`tickwheel-benches mem KIND N SEED`), then prints Markdown tables and the
//! target ratios and writes `summary.csv` and one SVG chart per workload into the output folder.
//! Subcommands run one section: `async`, `keepalive`, `shm` (see `--help`, and `SUBCOMMAND
//! --help` for each).
//!
//! Layout: `cli` (the command line), `wheel` (the workloads, memory, the output files and the
//! targets), `scaling` (the per-core sections and their tables, keyed by typed cells).

#![deny(unsafe_op_in_unsafe_fn)]

mod cli;
mod scaling;
mod wheel;

use std::process::Command as Process;

use tickwheel_benches::{asynk, with_timers};

use crate::cli::{AsyncPlan, Command};

const SEED: u64 = 0x7157_3eed;

pub(crate) fn die(msg: &str) -> ! {
    eprintln!("tickwheel-benches: {msg}");
    std::process::exit(2)
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
    let command = cli::parse().unwrap_or_else(|e| die(&e));
    steady_allocator();
    match command {
        Command::Help(text) => println!("{text}"),
        Command::Wheel(plan) => wheel::run(&plan),
        Command::Mem(kind, n, seed) => {
            let (insert, reset) = with_timers!(kind, |make| wheel::measure_memory(make(), n, seed));
            println!("{insert} {reset}");
        }
        Command::Async(plan) => run_async(&plan).unwrap_or_else(|e| die(&e)),
        Command::PercoreMem(design, n) => {
            let bytes = tickwheel_benches::percore::bytes_per_pending_timer(&design, n)
                .unwrap_or_else(|e| die(&e));
            println!("{bytes}");
        }
        Command::AsyncMem(api, n) => {
            let bytes = asynk::bytes_per_sleep(&api, n).unwrap_or_else(|e| die(&e));
            println!("{bytes}");
        }
        Command::AsyncOne(api, workload, flavor, n) => {
            let (ns, tally) =
                asynk::run_one(&api, &workload, &flavor, n).unwrap_or_else(|e| die(&e));
            println!("{ns:.1} ns/op, {tally:?}");
        }
        Command::Keepalive(design, load) => {
            let report = scaling::one_keepalive_run(design, &load).unwrap_or_else(|e| die(&e));
            println!("{report}");
        }
        // Forks worker processes: runs before this process starts any thread.
        Command::Shm(plan) => print!("{}", tickwheel_benches::shm::run(plan)),
    }
}

/// The async section (tickwheel-percpu's `time` module against `tokio::time`, tokio's per-worker
/// timer where built with `--cfg tokio_unstable`, and pingora-timeout, on the same runtimes);
/// writes `async.md` into the folder. `lateness` is one of the workload names.
fn run_async(plan: &AsyncPlan) -> Result<(), String> {
    let report = asynk::run(plan.reps, plan.quick, &plan.workloads);
    let sizes: &[usize] = match (plan.skip_memory, plan.quick) {
        (true, _) => &[],
        (false, true) => &[10_000],
        (false, false) => &[100_000, 1_000_000],
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut mem = Vec::new();
    for &n in sizes {
        let mut per = Vec::new();
        for api in asynk::MEMORY_APIS {
            let child = Process::new(&exe)
                .args(["async-mem", api, &n.to_string()])
                .output()
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&child.stdout);
            per.push(
                text.trim()
                    .parse()
                    .map_err(|e| format!("{api} mem: {e}: {text}"))?,
            );
        }
        mem.push((n, per));
    }
    let md = asynk::markdown(&report, &mem);
    std::fs::create_dir_all(&plan.out).map_err(|e| e.to_string())?;
    std::fs::write(plan.out.join("async.md"), &md).map_err(|e| e.to_string())?;
    println!("{md}");
    Ok(())
}

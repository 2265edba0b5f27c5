//! The demo's final report and the invariants that decide its exit status.
//!
//! Two views are printed side by side: the server's (its counters, and the lateness of each timer
//! close measured from the base's clock at the last reset to the moment of closing) and the
//! clients' (what the load generator saw on the wire). The invariants compare them: an active
//! connection must never be closed, no timer may close before its timeout, every request gets
//! exactly one response, and both timeouts must actually have fired during the run.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cli::mode_name;
use crate::load::{LoadReport, Plan};
use crate::server::Config;
use crate::server::common::percentiles;
use crate::server::stats::{CoreReport, Snapshot};
use crate::server::sys::NofileLimit;

/// What the run was set up with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Server configuration.
    pub(crate) config: Config,
    /// Where the server listened.
    pub(crate) addr: SocketAddr,
    /// CPU of each worker.
    pub(crate) cpus: Vec<usize>,
    /// The load.
    pub(crate) plan: Plan,
    /// The descriptor limit.
    pub(crate) nofile: NofileLimit,
}

/// Prints what is about to run.
pub(crate) fn print_header(s: &Settings) {
    println!("tickwheel keep-alive demo: HTTP/1.1 server and load generator on loopback");
    println!(
        "  server    {} | {} cores pinned to CPUs {:?} | timer mode {} | tick 1 ms",
        s.addr,
        s.cpus.len(),
        s.cpus,
        mode_name(s.config.mode)
    );
    println!(
        "  timeouts  idle {} ms (reset on every request) | header {} ms",
        s.config.idle_timeout.as_millis(),
        s.config.header_timeout.as_millis()
    );
    println!(
        "  load      {} connections: {} active, {} going idle, {} slowloris | {} threads | {} s",
        s.plan.connections(),
        s.plan.active,
        s.plan.idle,
        s.plan.slow,
        s.plan.threads,
        s.plan.duration.as_secs()
    );
    println!("  fd limit  {}", nofile_text(s.nofile));
}

fn nofile_text(n: NofileLimit) -> String {
    if n.after > n.before {
        format!("{} (raised from {})", n.after, n.before)
    } else {
        format!("{} (already at the hard limit)", n.after)
    }
}

/// Milliseconds with one decimal.
fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn spread(p: Option<[Duration; 3]>) -> String {
    match p {
        Some([p50, p99, max]) => format!("p50 {}  p99 {}  max {}", ms(p50), ms(p99), ms(max)),
        None => "no samples".to_string(),
    }
}

fn per_second(n: u64, elapsed: Duration) -> u64 {
    (n as f64 / elapsed.as_secs_f64().max(1e-9)) as u64
}

/// Prints the report; returns true when every invariant held.
pub(crate) fn print_report(
    s: &Settings,
    load: &LoadReport,
    cores: &[CoreReport],
    elapsed: Duration,
) -> bool {
    let total = Snapshot::total(cores.iter().map(|c| &c.counters));
    let idle_lateness: Vec<Duration> = cores.iter().flat_map(|c| c.idle_lateness.clone()).collect();
    let header_lateness: Vec<Duration> = cores
        .iter()
        .flat_map(|c| c.header_lateness.clone())
        .collect();
    println!("report after {:.1} s", elapsed.as_secs_f64());
    let row = |label: &str, value: String| println!("  {label:<38} {value}");
    row(
        "requests served",
        format!("{} ({}/s)", total.served, per_second(total.served, elapsed)),
    );
    row("connections accepted", total.accepted.to_string());
    row("closed by the idle timeout", total.idle_closes.to_string());
    row(
        "closed by the header timeout",
        total.header_closes.to_string(),
    );
    row(
        "active connections closed by a timer",
        format!("{} (must be 0)", load.active_closed),
    );
    row(
        "idle close lateness (server)",
        spread(percentiles(&idle_lateness)),
    );
    row(
        "header close lateness (server)",
        spread(percentiles(&header_lateness)),
    );
    row(
        "idle closes seen by clients",
        format!(
            "{}: {}",
            load.idle_closed,
            spread(load.idle_gap_percentiles())
        ),
    );
    row(
        "header closes seen by clients",
        format!(
            "{}: {}",
            load.slow_closed,
            spread(load.slow_gap_percentiles())
        ),
    );
    row(
        "timer resets",
        format!(
            "{}/s ({} in all)",
            per_second(total.resets, elapsed),
            total.resets
        ),
    );
    row(
        "requests sent / answered / unanswered",
        format!("{} / {} / {}", load.sent, load.answered, load.unanswered),
    );
    print_cores(cores);
    let failures = invariants(s, load, &total);
    print_verdict(&failures);
    failures.is_empty()
}

fn print_cores(cores: &[CoreReport]) {
    println!("  per core:");
    for c in cores {
        let k = &c.counters;
        println!(
            "    core {} (CPU {}): accepted {}, served {}, idle closes {}, header closes {}, \
             peer closes {}, resets {}, open at shutdown {}",
            c.index,
            c.cpu,
            k.accepted,
            k.served,
            k.idle_closes,
            k.header_closes,
            k.peer_closes,
            k.resets,
            c.closed_at_shutdown
        );
    }
    println!("  bases:");
    for c in cores {
        let b = &c.base;
        let l = &b.lateness;
        println!(
            "    base {}: scheduled {}, fired {}, cancelled locally {}, cancelled remotely {}, \
             reserve empty {}, cascades {}, fire lateness over {} fires: p50 {} p99 {} max {}",
            c.index,
            b.scheduled,
            b.fired,
            b.cancelled_local,
            b.cancelled_remote,
            b.reserve_empty,
            b.cascades,
            l.count,
            ms(l.p50),
            ms(l.p99),
            ms(l.max)
        );
    }
}

/// Every invariant that failed, as a sentence.
fn invariants(s: &Settings, load: &LoadReport, total: &Snapshot) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failed.push(what);
        }
    };
    check(
        load.active_closed == 0,
        format!(
            "{} active connections were closed by the server",
            load.active_closed
        ),
    );
    check(
        total.early_closes == 0,
        format!(
            "{} timer closes came before their timeout",
            total.early_closes
        ),
    );
    check(
        load.unanswered == 0,
        format!("{} requests were never answered", load.unanswered),
    );
    check(
        load.wrong_status == 0,
        format!("{} responses had an unexpected status", load.wrong_status),
    );
    check(
        total.served == load.answered,
        format!(
            "server served {} but clients received {}",
            total.served, load.answered
        ),
    );
    check(
        total.stale_timers == 0 && total.timer_failures == 0,
        format!(
            "{} stale timers fired, {} timers could not be armed",
            total.stale_timers, total.timer_failures
        ),
    );
    check(
        load.overdue == 0,
        format!(
            "{} idle or slow connections outlived their timeout",
            load.overdue
        ),
    );
    check(
        total.idle_closes > 0 && total.header_closes > 0,
        format!(
            "the idle ({} ms) and header ({} ms) timeouts must both fire during the run",
            s.config.idle_timeout.as_millis(),
            s.config.header_timeout.as_millis()
        ),
    );
    failed
}

fn print_verdict(failures: &[String]) {
    if failures.is_empty() {
        println!("  invariants: all held");
        return;
    }
    println!("  invariants: {} FAILED", failures.len());
    for f in failures {
        println!("    - {f}");
    }
}

//! The embedded demo: the server on 127.0.0.1 plus the load generator, a live status line, and a
//! final report whose invariants decide the exit status.
//!
//! Sizing: every connection costs two descriptors in this one process (client and server end),
//! so the connection count is the smaller of [`TARGET_CONNECTIONS`] and what the open-file limit
//! allows after raising it. On a 2-core machine with the usual hard limit that is the full
//! target; with a low limit the demo shrinks and says so.
//!
//! Timeouts default to 2 s idle and 1 s header so both fire many times in the ~12 s run.

use std::io::{self, IsTerminal, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use tickwheel_percpu::Mode;

use crate::cli::Options;
use crate::load::{Load, Plan};
use crate::report::{self, Settings};
use crate::server::stats::Snapshot;
use crate::server::sys::{self, NofileLimit};
use crate::server::{Config, Server};

/// Connections the demo aims for.
const TARGET_CONNECTIONS: usize = 4000;
/// Descriptors kept free for everything that is not a connection.
const RESERVED_FDS: u64 = 256;
/// How long the load runs.
const LOAD_DURATION: Duration = Duration::from_secs(12);
/// Load generator threads.
const LOAD_THREADS: usize = 2;
/// Demo defaults.
const IDLE_TIMEOUT: Duration = Duration::from_millis(2000);
const HEADER_TIMEOUT: Duration = Duration::from_millis(1000);

/// Runs the demo; returns whether every invariant held.
pub(crate) fn run(options: Options) -> Result<bool, Box<dyn std::error::Error>> {
    let nofile = sys::raise_nofile_limit()?;
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        cores: options.cores,
        idle_timeout: options.idle_timeout.unwrap_or(IDLE_TIMEOUT),
        header_timeout: options.header_timeout.unwrap_or(HEADER_TIMEOUT),
        mode: options.mode.unwrap_or(Mode::Coarse),
    };
    let server = Server::start(config)?;
    let plan = plan_for(nofile, server.local_addr(), &config);
    let settings = Settings {
        config,
        addr: server.local_addr(),
        cpus: server.cpus().to_vec(),
        plan,
        nofile,
    };
    report::print_header(&settings);
    let started = Instant::now();
    let load = Load::start(plan)?;
    show_progress(&server, &load, started);
    let finished = load.finish()?;
    let elapsed = started.elapsed();
    // Stop the server before the clients hang up, so their closes are not a burst of work
    // landing on the server while its timers are still measured; it closes its ends itself.
    let cores = server.shutdown()?;
    drop(finished.sockets);
    Ok(report::print_report(
        &settings,
        &finished.report,
        &cores,
        elapsed,
    ))
}

/// Splits the connections the descriptor limit allows: 60% active, 25% idle, 15% slow.
fn plan_for(nofile: NofileLimit, addr: SocketAddr, config: &Config) -> Plan {
    let affordable = (nofile.after.saturating_sub(RESERVED_FDS) / 2) as usize;
    let total = TARGET_CONNECTIONS.min(affordable).max(20);
    let active = total * 60 / 100;
    let idle = total * 25 / 100;
    Plan {
        addr,
        active,
        idle,
        slow: total - active - idle,
        threads: LOAD_THREADS,
        duration: LOAD_DURATION,
        idle_timeout: config.idle_timeout,
        header_timeout: config.header_timeout,
    }
}

/// Prints one status line per second until the load stops (bounded by the load's own end).
fn show_progress(server: &Server, load: &Load, started: Instant) {
    let in_place = io::stdout().is_terminal();
    let limit = LOAD_DURATION + Duration::from_secs(5);
    let mut previous = Snapshot::total(&server.snapshot());
    let mut second = 1u32;
    while !load.is_finished() && started.elapsed() < limit {
        let next = started + Duration::from_secs(u64::from(second));
        thread::sleep(
            next.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
        if Instant::now() < next {
            continue;
        }
        let now = Snapshot::total(&server.snapshot());
        print_status(second, &now, &(now - previous), in_place);
        previous = now;
        second += 1;
    }
    if in_place {
        println!();
    }
}

fn print_status(second: u32, total: &Snapshot, last_second: &Snapshot, in_place: bool) {
    let line = format!(
        "[{second:>3} s] connections {:>5} | {:>6} req/s | timeouts: idle {:>5}, header {:>5} | resets {:>6}/s",
        total.open(),
        last_second.served,
        total.idle_closes,
        total.header_closes,
        last_second.resets,
    );
    let mut out = io::stdout().lock();
    // The status line is best effort: a closed stdout must not stop the demo.
    let _ = if in_place {
        write!(out, "\r{line}")
    } else {
        writeln!(out, "{line}")
    };
    let _ = out.flush();
}

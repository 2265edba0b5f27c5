//! A thread-per-core HTTP/1.1 keep-alive server whose connection timeouts run on tickwheel's
//! per-core timer bases, with a built-in load generator.
//!
//! `cargo run --release -p tickwheel-percpu --example keepalive` runs the demo: the server on
//! 127.0.0.1, thousands of loopback connections (active, going idle, slowloris) for about 12 s,
//! a live status line, then a report; the exit status is non-zero if an invariant failed.
//! `--listen ADDR` runs the plain server until Ctrl-C instead (try it with curl or wrk). What each
//! line of the report means, a sample run and the plain server's behaviour: the workspace's
//! ARCHITECTURE.md, "The main job".
//!
//! Layout: `server/` is the server proper (shared with `tests/keepalive.rs`): `worker` is the
//! per-core event loop, `conn` the connection slab, `http` the request framing, `date` the `Date`
//! header, `stats` the counters, `sys` the system calls. `load` is the load generator, `demo` and `report` run and
//! judge the demo, `cli` parses flags, `signal` waits for Ctrl-C.

#![deny(unsafe_op_in_unsafe_fn)]

mod cli;
mod demo;
mod load;
mod report;
mod server;
mod signal;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tickwheel_percpu::Mode;

use crate::cli::{Options, Run};
use crate::server::{Config, Server, stats::Snapshot, sys};

/// Plain-server defaults.
const IDLE_TIMEOUT: Duration = Duration::from_millis(5000);
const HEADER_TIMEOUT: Duration = Duration::from_millis(3000);

fn main() -> ExitCode {
    let run = match cli::parse(std::env::args().skip(1)) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = match run {
        Run::Help => {
            println!("{}", cli::USAGE);
            Ok(true)
        }
        Run::Demo(options) => demo::run(options),
        Run::Serve(addr, options) => serve(addr, options).map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("keepalive: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves on `addr` until SIGINT or SIGTERM, then shuts down and prints the counters.
fn serve(addr: SocketAddr, options: Options) -> Result<(), Box<dyn std::error::Error>> {
    let nofile = sys::raise_nofile_limit()?;
    println!("open-file limit: {} (was {})", nofile.after, nofile.before);
    let signals = signal::Shutdown::install()?;
    let config = Config {
        listen: addr,
        cores: options.cores,
        idle_timeout: options.idle_timeout.unwrap_or(IDLE_TIMEOUT),
        header_timeout: options.header_timeout.unwrap_or(HEADER_TIMEOUT),
        mode: options.mode.unwrap_or(Mode::Coarse),
    };
    let server = Server::start(config)?;
    println!(
        "listening on http://{} | {} cores pinned to CPUs {:?} | idle timeout {} ms | \
         header timeout {} ms | timer mode {} | Ctrl-C stops",
        server.local_addr(),
        server.cpus().len(),
        server.cpus(),
        config.idle_timeout.as_millis(),
        config.header_timeout.as_millis(),
        cli::mode_name(config.mode),
    );
    let signo = signals.wait()?;
    println!("signal {signo} received, shutting down");
    let cores = server.shutdown()?;
    let total = Snapshot::total(cores.iter().map(|c| &c.counters));
    let open: usize = cores.iter().map(|c| c.closed_at_shutdown).sum();
    println!(
        "served {} requests on {} connections; closed {} idle, {} by header timeout, {} open at \
         shutdown; {} timer resets",
        total.served, total.accepted, total.idle_closes, total.header_closes, open, total.resets
    );
    Ok(())
}

//! Command-line flags.
//!
//! Model: `--listen` chooses the plain server (runs until Ctrl-C); without it the example runs the
//! embedded demo (server plus load on loopback). The other flags apply to both; what is not
//! given takes the mode's default, so the demo's timeouts are short enough to fire during its run.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use tickwheel_percpu::Mode;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// The embedded demo: server on 127.0.0.1, load generator, report.
    Demo(Options),
    /// A plain server on the given address until SIGINT or SIGTERM.
    Serve(SocketAddr, Options),
    /// Print usage.
    Help,
}

/// Flags shared by both runs (`None`: the run's default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// `--cores N`.
    pub(crate) cores: Option<usize>,
    /// `--idle-timeout MS`.
    pub(crate) idle_timeout: Option<Duration>,
    /// `--header-timeout MS`.
    pub(crate) header_timeout: Option<Duration>,
    /// `--mode exact|coarse`.
    pub(crate) mode: Option<Mode>,
}

/// A flag that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsageError {
    flag: String,
    problem: &'static str,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}\n\n{}", self.flag, self.problem, USAGE)
    }
}

impl std::error::Error for UsageError {}

/// Usage text.
pub(crate) const USAGE: &str = "\
usage: keepalive [--listen ADDR] [--cores N] [--idle-timeout MS] [--header-timeout MS]
                 [--mode exact|coarse]

  without --listen: run the demo (server on 127.0.0.1 plus built-in load, ~13 s, then a report;
                    exits non-zero if an invariant failed)
  --listen ADDR     serve HTTP/1.1 on ADDR (e.g. 127.0.0.1:8080) until Ctrl-C
  --cores N         worker threads, one pinned per CPU (default: every CPU available)
  --idle-timeout MS keep-alive idle timeout (default 5000; demo 2000)
  --header-timeout MS  time allowed for a request head once started (default 3000; demo 1000)
  --mode MODE       timer wheel mode: exact or coarse (default coarse)";

fn usage_error(flag: &str, problem: &'static str) -> UsageError {
    UsageError {
        flag: flag.to_string(),
        problem,
    }
}

/// Parses the arguments after the program name.
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Run, UsageError> {
    let mut args = args.into_iter();
    let mut options = Options::default();
    let mut listen = None;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(Run::Help);
        }
        let value = args
            .next()
            .ok_or_else(|| usage_error(&flag, "needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(parse_addr(&flag, &value)?),
            "--cores" => options.cores = Some(parse_count(&flag, &value)?),
            "--idle-timeout" => options.idle_timeout = Some(parse_ms(&flag, &value)?),
            "--header-timeout" => options.header_timeout = Some(parse_ms(&flag, &value)?),
            "--mode" => options.mode = Some(parse_mode(&flag, &value)?),
            _ => return Err(usage_error(&flag, "unknown flag")),
        }
    }
    Ok(match listen {
        Some(addr) => Run::Serve(addr, options),
        None => Run::Demo(options),
    })
}

fn parse_addr(flag: &str, value: &str) -> Result<SocketAddr, UsageError> {
    value
        .parse()
        .map_err(|_| usage_error(flag, "expects IP:PORT, e.g. 127.0.0.1:8080"))
}

fn parse_count(flag: &str, value: &str) -> Result<usize, UsageError> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(usage_error(flag, "expects a whole number above 0")),
    }
}

fn parse_ms(flag: &str, value: &str) -> Result<Duration, UsageError> {
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(usage_error(flag, "expects milliseconds above 0")),
    }
}

fn parse_mode(flag: &str, value: &str) -> Result<Mode, UsageError> {
    match value {
        "exact" => Ok(Mode::Exact),
        "coarse" => Ok(Mode::Coarse),
        _ => Err(usage_error(flag, "expects exact or coarse")),
    }
}

/// The name of a mode as the flag spells it.
pub(crate) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exact => "exact",
        Mode::Coarse => "coarse",
    }
}

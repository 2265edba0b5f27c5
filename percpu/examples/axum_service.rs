//! An axum service on tokio's multi-thread runtime with its timers on the tickwheel bases.
//!
//! `GET /` answers a small body; `GET /sleep/MS` sleeps MS milliseconds first. Every request runs
//! under the service's own handler limit (`--limit-ms`, an axum middleware around `timeout`); a
//! request that runs past it is answered `503 Service Unavailable` (the server gave up, the client
//! did nothing wrong, so not 408). `GET /sleep/x` with no number is axum's `400 Bad Request`.
//!
//! The router is served per connection by hyper's `http1::Builder` (not `axum::serve`, which
//! gives no way to set hyper's timer), wrapped by hyper-util's `TowerToHyperService`, so that the
//! builder's `timer` drives hyper's header-read timeout. In hyper 1.x that one timer also closes a
//! kept-alive connection that sends no next request (`--keepalive-ms`): hyper arms it whenever it
//! waits for a request head, idle or not.
//!
//! What moves to tickwheel with `--timer tickwheel` (the default): the service's own `timeout`
//! and `sleep` (from `tickwheel_percpu::time`, the same names as `tokio::time`), and hyper's
//! header-read/keep-alive timer through `HyperTimer`. Each worker thread gets a base
//! (`Timers::on_thread_start`) whose turning task runs on the runtime (`Timers::spawn_drivers`).
//! What does not: crates that call `tokio::time` themselves (tower's and tower-http's timeout
//! layers, reqwest's timeouts, tokio-util's `DelayQueue`) still use the runtime's time driver, so
//! the runtime is built with `enable_time` here too. `--timer tokio` uses `tokio::time` and
//! hyper-util's `TokioTimer` instead; `--timer tokio-alt` the same on tokio's per-worker timer
//! (`Builder::enable_alt_timer`, only in a build with `RUSTFLAGS="--cfg tokio_unstable"`).
//!
//! ```text
//! cargo run --release -p tickwheel-percpu --features hyper --example axum_service -- \
//!     --listen 127.0.0.1:8080 --workers 2 --timer tickwheel
//! ```
//! serves until SIGINT or SIGTERM, then lets in-flight requests finish (each within its limit) and
//! prints what its timers did: requests, handler timeouts fired, sleeps, and the bases' counters.
//! `--check` instead runs a bounded self-check for each timer on 127.0.0.1:0 (a few requests, one
//! past the limit, one idle connection, then a SIGTERM to itself). `examples/axum_service/bench.sh`
//! loads it with wrk.

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "the examples' shared helpers; this uses some")]
mod common;

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tickwheel_percpu::time::{HyperTimer, Timers};
use tokio::signal::unix::{SignalKind, signal};

/// Whose timers the service uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Tickwheel,
    Tokio,
    TokioAlt,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Self::Tickwheel => "tickwheel",
            Self::Tokio => "tokio",
            Self::TokioAlt => "tokio-alt",
        }
    }
}

#[derive(Clone, Debug)]
struct Options {
    listen: SocketAddr,
    workers: usize,
    timer: Which,
    limit: Duration,
    keep_alive: Duration,
    check: bool,
}

const USAGE: &str = "flags: --listen ADDR, --workers N, --timer tickwheel|tokio|tokio-alt, \
                     --limit-ms MS, --keepalive-ms MS, --check";

fn parse() -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Options {
        listen: "127.0.0.1:8080".parse().expect("address"),
        workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        timer: Which::Tickwheel,
        limit: Duration::from_millis(1000),
        keep_alive: Duration::from_millis(5000),
        check: false,
    };
    let mut args = lexopt::Parser::from_env();
    while let Some(arg) = args.next()? {
        match arg {
            Long("listen") => o.listen = args.value()?.parse()?,
            Long("workers") => o.workers = args.value()?.parse()?,
            Long("timer") => {
                o.timer = match args.value()?.string()?.as_str() {
                    "tickwheel" => Which::Tickwheel,
                    "tokio" => Which::Tokio,
                    "tokio-alt" => Which::TokioAlt,
                    other => {
                        return Err(
                            format!("--timer tickwheel|tokio|tokio-alt, not {other:?}").into()
                        );
                    }
                }
            }
            Long("limit-ms") => o.limit = Duration::from_millis(args.value()?.parse()?),
            Long("keepalive-ms") => o.keep_alive = Duration::from_millis(args.value()?.parse()?),
            Long("check") => o.check = true,
            Long("help") => return Err(USAGE.into()),
            _ => return Err(format!("{}; {USAGE}", arg.unexpected()).into()),
        }
    }
    if o.workers == 0 || o.limit.is_zero() || o.keep_alive.is_zero() {
        return Err("--workers, --limit-ms and --keepalive-ms must be above zero".into());
    }
    Ok(o)
}

/// What the service counts; printed at shutdown.
#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    timed_out: AtomicU64,
    sleeps: AtomicU64,
}

/// The router's state.
#[derive(Clone, Debug)]
struct App {
    which: Which,
    limit: Duration,
    // Relaxed increments throughout: plain tallies, read after the runtime has shut down.
    counts: Arc<Counts>,
}

/// `future` under a limit of `d` on `which`'s timer: `None` if the limit came first.
async fn within<F: Future>(which: Which, d: Duration, future: F) -> Option<F::Output> {
    match which {
        Which::Tickwheel => tickwheel_percpu::time::timeout(d, future).await.ok(),
        Which::Tokio | Which::TokioAlt => tokio::time::timeout(d, future).await.ok(),
    }
}

async fn pause(which: Which, d: Duration) {
    match which {
        Which::Tickwheel => tickwheel_percpu::time::sleep(d).await,
        Which::Tokio | Which::TokioAlt => tokio::time::sleep(d).await,
    }
}

async fn hello() -> &'static str {
    "hello\n"
}

async fn sleep_ms(State(app): State<App>, Path(ms): Path<u64>) -> String {
    app.counts.sleeps.fetch_add(1, Ordering::Relaxed);
    pause(app.which, Duration::from_millis(ms)).await;
    format!("slept {ms} ms\n")
}

/// The handler limit, as a user writes it: a middleware around the rest of the stack.
async fn limit(State(app): State<App>, req: Request, next: Next) -> Response {
    app.counts.requests.fetch_add(1, Ordering::Relaxed);
    match within(app.which, app.limit, next.run(req)).await {
        Some(response) => response,
        None => {
            app.counts.timed_out.fetch_add(1, Ordering::Relaxed);
            (StatusCode::SERVICE_UNAVAILABLE, "handler timed out\n").into_response()
        }
    }
}

fn router(app: App) -> Router {
    Router::new()
        .route("/", get(hello))
        .route("/sleep/{ms}", get(sleep_ms))
        .layer(middleware::from_fn_with_state(app.clone(), limit))
        .with_state(app)
}

/// Accepts on `listener` until SIGINT or SIGTERM, then waits (within the handler limit and a
/// second) for the connections to finish; `ready` learns the address once the signals are hooked.
async fn serve(
    listener: std::net::TcpListener,
    app: App,
    keep_alive: Duration,
    ready: impl FnOnce(SocketAddr),
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    let mut http = hyper::server::conn::http1::Builder::new();
    http.header_read_timeout(keep_alive).keep_alive(true);
    match app.which {
        Which::Tickwheel => http.timer(HyperTimer::new()),
        Which::Tokio | Which::TokioAlt => http.timer(TokioTimer::new()),
    };
    let service = TowerToHyperService::new(router(app.clone()));
    let graceful = GracefulShutdown::new();
    ready(listener.local_addr()?);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => {
                        // Out of descriptors, or the client gave up: let the others go on.
                        pause(app.which, Duration::from_millis(1)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), service.clone()));
                tokio::spawn(conn);
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    drop(listener);
    if within(
        app.which,
        app.limit + Duration::from_secs(1),
        graceful.shutdown(),
    )
    .await
    .is_none()
    {
        eprintln!("axum_service: connections still open at shutdown were dropped");
    }
    Ok(())
}

/// Turns on tokio's per-worker timer, where this build has it.
#[allow(
    unexpected_cfgs,
    reason = "tokio_unstable is set by RUSTFLAGS, as tokio asks"
)]
fn enable_alt_timer(b: &mut tokio::runtime::Builder) -> Result<(), String> {
    #[cfg(tokio_unstable)]
    {
        b.enable_alt_timer();
        Ok(())
    }
    #[cfg(not(tokio_unstable))]
    {
        let _ = b;
        Err("--timer tokio-alt needs a build with RUSTFLAGS=\"--cfg tokio_unstable\"".into())
    }
}

/// What a run did, printed at its end.
#[derive(Debug)]
struct Report {
    which: Which,
    requests: u64,
    timed_out: u64,
    sleeps: u64,
    /// Summed over the bases (tickwheel only).
    bases: Option<tickwheel_percpu::BaseStats>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} requests, {} handler timeouts fired, {} sleeps",
            self.which.name(),
            self.requests,
            self.timed_out,
            self.sleeps
        )?;
        match &self.bases {
            Some(s) => write!(
                f,
                "; bases: {} timers scheduled, {} fired, {} cancelled ({} from other threads), \
                 fired late by p99 {:?} (max {:?})",
                s.scheduled,
                s.fired,
                s.cancelled_local + s.cancelled_remote,
                s.cancelled_remote,
                s.lateness.p99,
                s.lateness.max
            ),
            None => write!(f, "; tokio's timer keeps no counters"),
        }
    }
}

/// The counters of all the bases of `timers`, added up (lateness: the worst base's).
fn sum_bases(timers: &Timers) -> tickwheel_percpu::BaseStats {
    let mut sum = tickwheel_percpu::BaseStats::default();
    for s in (0..timers.len()).filter_map(|i| timers.base_stats(i)) {
        sum.scheduled += s.scheduled;
        sum.fired += s.fired;
        sum.cancelled_local += s.cancelled_local;
        sum.cancelled_remote += s.cancelled_remote;
        sum.lateness.count += s.lateness.count;
        sum.lateness.p99 = sum.lateness.p99.max(s.lateness.p99);
        sum.lateness.max = sum.lateness.max.max(s.lateness.max);
    }
    sum
}

/// Builds the runtime for `o.timer`, serves until a signal, shuts the runtime down and reports.
fn run(o: &Options, ready: impl FnOnce(SocketAddr)) -> Result<Report, String> {
    // SO_REUSEPORT is not needed here; the high backlog is (10 000 connections arriving at once).
    let listener = common::listen_reuseport(o.listen, 65_535)
        .map_err(|e| format!("listen on {}: {e}", o.listen))?;
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(o.workers).enable_io();
    let timers = match o.timer {
        Which::Tickwheel => {
            let timers = Timers::new(o.workers).map_err(|e| format!("bases: {e}"))?;
            // The time driver stays for crates that call tokio::time themselves.
            b.on_thread_start(timers.on_thread_start()).enable_time();
            Some(timers)
        }
        Which::Tokio => {
            b.enable_time();
            None
        }
        Which::TokioAlt => {
            enable_alt_timer(&mut b)?;
            None
        }
    };
    let rt = b.build().map_err(|e| format!("runtime: {e}"))?;
    let app = App {
        which: o.timer,
        limit: o.limit,
        counts: Arc::default(),
    };
    rt.block_on(async {
        if let Some(timers) = &timers {
            timers.spawn_drivers()?;
        }
        serve(listener, app.clone(), o.keep_alive, ready).await
    })
    .map_err(|e| format!("serve: {e}"))?;
    // Stops the turning tasks, so that nothing holds a base while its counters are read.
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(Report {
        which: o.timer,
        requests: app.counts.requests.load(Ordering::Relaxed),
        timed_out: app.counts.timed_out.load(Ordering::Relaxed),
        sleeps: app.counts.sleeps.load(Ordering::Relaxed),
        bases: timers.as_ref().map(sum_bases),
    })
}

/// One request on a connection of its own: the status and the body.
fn get_once(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(tcp, "GET {path} HTTP/1.1\r\nHost: check\r\n\r\n")?;
    read_response(&mut tcp)
}

/// Reads one response with a `content-length` body.
fn read_response(tcp: &mut TcpStream) -> io::Result<(u16, String)> {
    let mut buf = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = resp.parse(&buf) {
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= head + len {
                let body = String::from_utf8_lossy(&buf[head..head + len]).into_owned();
                return Ok((resp.code.unwrap_or(0), body));
            }
        }
        let mut chunk = [0u8; 1024];
        match tcp.read(&mut chunk)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed mid-response",
                ));
            }
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A kept-alive connection that sends nothing after its first answer: how long after the request
/// was sent the server closed it (`Err` if it did not within `give_up`).
fn idle_close_after(addr: SocketAddr, give_up: Duration) -> io::Result<Duration> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(give_up))?;
    let sent = Instant::now();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: check\r\n\r\n")?;
    read_response(&mut tcp)?;
    let mut byte = [0u8; 1];
    match tcp.read(&mut byte) {
        Ok(0) => Ok(sent.elapsed()),
        Ok(_) => Err(io::Error::other("bytes after the response")),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(sent.elapsed()),
        Err(e) => Err(e),
    }
}

/// The client half of `--check`: requests against `addr`, with `o`'s limits.
fn check_requests(addr: SocketAddr, o: &Options) -> Result<(), String> {
    let ask = |path: &str| get_once(addr, path).map_err(|e| format!("GET {path}: {e}"));
    let expect = |path: &str, status: u16, body: &str| -> Result<(), String> {
        let (got, text) = ask(path)?;
        if got == status && text.starts_with(body) {
            Ok(())
        } else {
            Err(format!(
                "GET {path}: {got} {text:?}, expected {status} {body:?}"
            ))
        }
    };
    expect("/", 200, "hello")?;
    expect("/sleep/5", 200, "slept 5 ms")?;
    expect("/sleep/x", 400, "")?;
    let start = Instant::now();
    let past = format!("/sleep/{}", (o.limit * 10).as_millis());
    expect(&past, 503, "handler timed out")?;
    if start.elapsed() < o.limit {
        return Err(format!(
            "GET {past}: cut off after {:?}, before the limit {:?}",
            start.elapsed(),
            o.limit
        ));
    }
    let closed = idle_close_after(addr, o.keep_alive + Duration::from_secs(5))
        .map_err(|e| format!("idle connection: {e}"))?;
    if closed < o.keep_alive {
        return Err(format!(
            "idle connection closed after {closed:?}, before {:?}",
            o.keep_alive
        ));
    }
    Ok(())
}

/// The server's side of `--check`: its counts after the client's requests.
fn check_counts(r: &Report) -> Result<(), String> {
    // `/`, `/sleep/5`, `/sleep/x` (refused by the extractor, inside the limit), the long sleep,
    // and the idle connection's one request.
    let want = (5, 1, 2);
    let got = (r.requests, r.timed_out, r.sleeps);
    if got != want {
        return Err(format!(
            "(requests, timeouts, sleeps) = {got:?}, expected {want:?}"
        ));
    }
    if let Some(s) = &r.bases {
        // The handler limits, the sleeps and hyper's header-read timers went to the bases.
        if s.scheduled < 5 || s.fired < 2 {
            return Err(format!("the bases saw too little: {s:?}"));
        }
    }
    Ok(())
}

/// For each timer this build has: the service on 127.0.0.1:0, the requests, SIGTERM, the counts.
fn self_check(o: &Options) -> Result<(), String> {
    let mut kinds = vec![Which::Tickwheel, Which::Tokio];
    if enable_alt_timer(&mut tokio::runtime::Builder::new_multi_thread()).is_ok() {
        kinds.push(Which::TokioAlt);
    }
    for which in kinds {
        let o = Options {
            listen: "127.0.0.1:0".parse().expect("address"),
            workers: 2,
            timer: which,
            limit: Duration::from_millis(200),
            keep_alive: Duration::from_millis(300),
            ..o.clone()
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let server = {
            let o = o.clone();
            std::thread::spawn(move || {
                run(&o, move |addr| {
                    let _ = tx.send(addr);
                })
            })
        };
        let addr = rx
            .recv()
            .map_err(|_| format!("{}: the server did not start", which.name()));
        let asked = addr.clone().and_then(|addr| check_requests(addr, &o));
        // SAFETY: raise has no memory preconditions; the server thread handles SIGTERM (its
        // handler was hooked before the address was sent), so the process is not ended.
        if addr.is_ok() && unsafe { libc::raise(libc::SIGTERM) } != 0 {
            return Err(format!("raise: {}", io::Error::last_os_error()));
        }
        let report = server
            .join()
            .map_err(|_| "server thread panicked".to_string())??;
        println!("{report}");
        asked
            .and(check_counts(&report))
            .map_err(|e| format!("{}: {e}", which.name()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("axum_service: {e}");
            return ExitCode::from(2);
        }
    };
    if o.check {
        return match self_check(&o) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("axum_service: check failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let ready = |addr| {
        eprintln!(
            "serving on http://{addr} with {} worker(s), {} timer; handler limit {:?}, \
             keep-alive {:?}; SIGINT or SIGTERM stops{}",
            o.workers,
            o.timer.name(),
            o.limit,
            o.keep_alive,
            common::build_note()
        )
    };
    match run(&o, ready) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("axum_service: {e}");
            ExitCode::FAILURE
        }
    }
}

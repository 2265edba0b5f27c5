//! A hyper HTTP/1.1 server, one current-thread tokio runtime per pinned core, all cores
//! accepting on one port through `SO_REUSEPORT`. Each connection's header-read timeout (hyper's
//! own, through `http1::Builder::timer`) and its idle keep-alive timeout (a sleep reset in place
//! at every request) run on the core's tickwheel base, or, with `--timer tokio`, on hyper-util's
//! `TokioTimer` (tokio's time driver on the same runtime), for comparison.
//!
//! ```text
//! cargo run --release -p tickwheel-percpu --features hyper --example hyper_server
//! ```
//! runs the comparison: for each timer, the server on 127.0.0.1 and the built-in loopback load
//! generator (100 and 1000 busy connections, then several thousand idle keep-alive connections),
//! printing requests per second, p99 latency and how late idle connections were closed (never
//! early). `--listen ADDR` serves until killed instead (try it with wrk), `--timer tokio|tickwheel`
//! picks the timer, `--cores N` the number of cores, `--idle-ms` and `--header-ms` the timeouts,
//! `--idle-against ADDR` only opens `--idle-conns` idle keep-alive connections to a server
//! already running (for instance while wrk loads it) and reports how late they were closed,
//! given the server's `--idle-ms`; `--secs S` the length of each busy phase, `--idle-conns K` the idle phase, `--mode
//! coarse|exact` the bases' wheel mode (Coarse, the default, closes an idle connection up to
//! up to 8/63 (12.7%) of the idle timeout late; Exact at the tick).
//!
//! Layout: this file is the server and the flags; `load` is the load generator.

#![deny(unsafe_op_in_unsafe_fn)]

#[path = "../common/mod.rs"]
#[allow(dead_code, reason = "the examples' shared helpers; this uses some")]
mod common;
mod load;

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};
use hyper_util::rt::{TokioIo, TokioTimer};
use tickwheel_percpu::time::{HyperTimer, Timers};
use tickwheel_percpu::{Config as BaseConfig, Mode};

/// Which timer the connections use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Tickwheel,
    Tokio,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Self::Tickwheel => "tickwheel",
            Self::Tokio => "tokio",
        }
    }
}

#[derive(Clone, Debug)]
struct Options {
    timer: Option<Which>,
    cores: usize,
    listen: Option<SocketAddr>,
    against: Option<SocketAddr>,
    idle: Duration,
    header: Duration,
    secs: u64,
    idle_conns: usize,
    mode: Mode,
}

fn parse() -> Result<Options, String> {
    let cores = core_affinity::get_core_ids().map_or(1, |c| c.len());
    let mut o = Options {
        timer: None,
        // On a small machine leave a core to the load generator.
        cores: if cores > 2 { cores - 1 } else { 1 },
        listen: None,
        against: None,
        idle: Duration::from_millis(2000),
        header: Duration::from_millis(10_000),
        secs: 3,
        idle_conns: 4000,
        mode: Mode::Coarse,
    };
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>, flag: &str| -> Result<u64, String> {
        let v = v.ok_or(format!("{flag} needs a number"))?;
        v.parse().map_err(|e| format!("{flag} {v}: {e}"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--timer" => {
                o.timer = Some(match args.next().as_deref() {
                    Some("tickwheel") => Which::Tickwheel,
                    Some("tokio") => Which::Tokio,
                    other => return Err(format!("--timer tickwheel|tokio, not {other:?}")),
                })
            }
            "--cores" => o.cores = num(args.next(), "--cores")?.max(1) as usize,
            "--listen" => {
                let v = args.next().ok_or("--listen needs an address")?;
                o.listen = Some(v.parse().map_err(|e| format!("--listen {v}: {e}"))?);
            }
            "--idle-against" => {
                let v = args.next().ok_or("--idle-against needs an address")?;
                o.against = Some(v.parse().map_err(|e| format!("--idle-against {v}: {e}"))?);
            }
            "--idle-ms" => o.idle = Duration::from_millis(num(args.next(), "--idle-ms")?),
            "--header-ms" => o.header = Duration::from_millis(num(args.next(), "--header-ms")?),
            "--secs" => o.secs = num(args.next(), "--secs")?.max(1),
            "--idle-conns" => o.idle_conns = num(args.next(), "--idle-conns")? as usize,
            "--mode" => {
                o.mode = match args.next().as_deref() {
                    Some("coarse") => Mode::Coarse,
                    Some("exact") => Mode::Exact,
                    other => return Err(format!("--mode coarse|exact, not {other:?}")),
                }
            }
            other => {
                return Err(format!(
                    "unknown flag {other:?}; flags: --timer tickwheel|tokio, --cores N, \
                     --listen ADDR, --idle-against ADDR, --idle-ms MS, --header-ms MS, --secs S, --idle-conns K, \
                     --mode coarse|exact"
                ));
            }
        }
    }
    if o.idle.is_zero() || o.header.is_zero() {
        return Err("timeouts must be above zero".into());
    }
    if o.idle >= o.header {
        // hyper's header-read timeout also runs while a kept-alive connection waits for its
        // next request, so it would close idle connections first.
        return Err(format!(
            "--idle-ms ({:?}) must be below --header-ms ({:?}): hyper's header-read timeout \
             also runs while a kept-alive connection waits for its next request",
            o.idle, o.header
        ));
    }
    Ok(o)
}

/// Counters the server threads share with the report.
#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    idle_closed: AtomicU64,
}

/// One connection: hyper with `timer` for its header-read timeout, and an idle timeout (a
/// sleep from the same timer, reset in place at every request). Returns when the client goes,
/// hyper gives up, or the connection was idle for `idle`.
async fn connection<T>(tcp: tokio::net::TcpStream, timer: T, o: Arc<Options>, counts: Arc<Counts>)
where
    T: Timer + Clone + Send + Sync + 'static,
{
    let _ = tcp.set_nodelay(true);
    let idle: Rc<RefCell<Pin<Box<dyn Sleep>>>> = Rc::new(RefCell::new(timer.sleep(o.idle)));
    let service = {
        let (idle, timer, o, counts) = (idle.clone(), timer.clone(), o.clone(), counts.clone());
        hyper::service::service_fn(move |_req| {
            timer.reset(&mut idle.borrow_mut(), Instant::now() + o.idle);
            counts.requests.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(hyper::Response::new(String::from("hello\n"))) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(timer)
        .header_read_timeout(o.header)
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service);
    let mut conn = std::pin::pin!(conn);
    poll_fn(|cx| {
        if conn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        if idle.borrow_mut().as_mut().poll(cx).is_ready() {
            counts.idle_closed.fetch_add(1, Ordering::Relaxed);
            return Poll::Ready(()); // dropping `conn` closes the socket
        }
        Poll::Pending
    })
    .await;
}

async fn accept_loop<T>(
    listener: std::net::TcpListener,
    timer: T,
    o: Arc<Options>,
    counts: Arc<Counts>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    T: Timer + Clone + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::from_std(listener).expect("register listener");
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        tokio::task::spawn_local(connection(tcp, timer.clone(), o.clone(), counts.clone()));
                    }
                    _ = stop.changed() => break,
                }
            }
        })
        .await;
}

/// Server threads, one per core, until `stop` is sent.
struct Server {
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    counts: Arc<Counts>,
}

fn start(which: Which, addr: SocketAddr, o: &Options) -> Result<Server, String> {
    let first =
        common::listen_reuseport(addr, 4096).map_err(|e| format!("listen on {addr}: {e}"))?;
    let addr = first.local_addr().map_err(|e| e.to_string())?;
    let mut listeners = vec![first];
    for _ in 1..o.cores {
        listeners.push(
            common::listen_reuseport(addr, 4096).map_err(|e| format!("listen on {addr}: {e}"))?,
        );
    }
    let config = BaseConfig::default().mode(o.mode);
    let timers = Timers::with_config(o.cores, config).map_err(|e| e.to_string())?;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (stop, rx) = tokio::sync::watch::channel(false);
    let counts = Arc::new(Counts::default());
    let o = Arc::new(o.clone());
    let threads = listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            let (timers, o, counts, rx) = (timers.clone(), o.clone(), counts.clone(), rx.clone());
            let core = cores.get(i).copied();
            std::thread::spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core);
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                    .expect("runtime");
                match which {
                    Which::Tickwheel => {
                        let serve = accept_loop(listener, HyperTimer::new(), o, counts, rx);
                        timers.block_on(i, &rt, serve).expect("base fd");
                    }
                    Which::Tokio => {
                        let serve = accept_loop(listener, TokioTimer::new(), o, counts, rx);
                        rt.block_on(serve);
                    }
                }
            })
        })
        .collect();
    Ok(Server {
        addr,
        stop,
        threads,
        counts,
    })
}

impl Server {
    fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hyper_server: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(addr) = o.against {
        let r = load::idle_only(addr, &o);
        return if r.early == 0 && r.errors == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if let Some(addr) = o.listen {
        let which = o.timer.unwrap_or(Which::Tickwheel);
        let server = match start(which, addr, &o) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hyper_server: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "serving on http://{} with {} core(s), {} timer; idle {:?}, header read {:?}{}",
            server.addr,
            o.cores,
            which.name(),
            o.idle,
            o.header,
            common::build_note()
        );
        for t in server.threads {
            let _ = t.join();
        }
        return ExitCode::SUCCESS;
    }
    let kinds = match o.timer {
        Some(w) => vec![w],
        None => vec![Which::Tickwheel, Which::Tokio],
    };
    let mut ok = true;
    let mut rows = Vec::new();
    for which in kinds {
        let server = match start(which, "127.0.0.1:0".parse().unwrap(), &o) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hyper_server: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "{}: server on {} ({} core(s))",
            which.name(),
            server.addr,
            o.cores
        );
        let report = load::run(server.addr, &o);
        let served = server.counts.requests.load(Ordering::Relaxed);
        let idle_closed = server.counts.idle_closed.load(Ordering::Relaxed);
        server.shutdown();
        eprintln!(
            "{}: {served} requests served, {idle_closed} idle connections closed by the idle timer",
            which.name()
        );
        ok &= report.early == 0 && report.errors == 0;
        rows.push((which, report));
    }
    println!(
        "{}",
        load::table(&rows.iter().map(|(w, r)| (w.name(), r)).collect::<Vec<_>>())
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("hyper_server: an idle connection closed early, or requests failed");
        ExitCode::FAILURE
    }
}

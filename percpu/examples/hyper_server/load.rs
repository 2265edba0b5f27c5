//! The loopback load generator: busy phases (each connection sends a request as soon as the
//! previous answer is in, for a fixed time) and an idle phase (each connection sends one request,
//! then waits for the server to close it; the lateness is measured from the moment the request was
//! sent, which is never after the server saw it, so a negative lateness means an early close).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::Options;
use crate::common::percentiles;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";

/// One busy phase.
#[derive(Debug)]
pub(crate) struct Busy {
    pub(crate) conns: usize,
    pub(crate) requests_per_sec: f64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
}

/// What a run measured.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) busy: Vec<Busy>,
    pub(crate) idle_conns: usize,
    /// Idle-close lateness, ms: p50, p99, max.
    pub(crate) late_ms: [f64; 3],
    pub(crate) early: usize,
    pub(crate) errors: usize,
}

/// Reads one response (headers and a `content-length` body); false on EOF or a bad response.
async fn read_response(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = resp.parse(buf) {
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= head + len {
                return resp.code == Some(200);
            }
        }
        let mut chunk = [0u8; 1024];
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn busy_conn(addr: SocketAddr, until: Instant) -> (Vec<u64>, usize) {
    let mut lat = Vec::new();
    let Ok(mut tcp) = TcpStream::connect(addr).await else {
        return (lat, 1);
    };
    let _ = tcp.set_nodelay(true);
    let mut buf = Vec::with_capacity(512);
    while Instant::now() < until {
        let t = Instant::now();
        if tcp.write_all(REQUEST).await.is_err() || !read_response(&mut tcp, &mut buf).await {
            return (lat, 1);
        }
        lat.push(t.elapsed().as_micros() as u64);
    }
    (lat, 0)
}

async fn busy(addr: SocketAddr, conns: usize, secs: u64) -> (Busy, usize) {
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..conns)
        .map(|_| tokio::task::spawn_local(busy_conn(addr, until)))
        .collect();
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (lat, e) = t.await.unwrap_or((Vec::new(), 1));
        all.extend(lat);
        errors += e;
    }
    let took = start.elapsed().as_secs_f64();
    let [p50_us, p99_us, _] = percentiles(&all).unwrap_or([0; 3]);
    let b = Busy {
        conns,
        requests_per_sec: all.len() as f64 / took,
        p50_us,
        p99_us,
    };
    (b, errors)
}

/// One idle connection: a request, then the time from sending it to the server's close, in µs
/// relative to `sent + idle` (negative: early). `None` on an error or no close in time.
async fn idle_conn(addr: SocketAddr, idle: Duration, give_up: Duration) -> Option<i64> {
    let mut tcp = TcpStream::connect(addr).await.ok()?;
    let mut buf = Vec::with_capacity(512);
    let sent = Instant::now();
    tcp.write_all(REQUEST).await.ok()?;
    if !read_response(&mut tcp, &mut buf).await {
        return None;
    }
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(give_up, tcp.read(&mut byte)).await;
    match closed {
        Ok(Ok(0)) | Ok(Err(_)) => {
            let now = Instant::now();
            let due = sent + idle;
            Some(if now >= due {
                (now - due).as_micros() as i64
            } else {
                -((due - now).as_micros() as i64)
            })
        }
        _ => None,
    }
}

async fn idle_phase(addr: SocketAddr, conns: usize, o: &Options, r: &mut Report) {
    let give_up = o.idle + Duration::from_secs(10);
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        tasks.push(tokio::task::spawn_local(idle_conn(addr, o.idle, give_up)));
        if i % 256 == 255 {
            // Let the accept queue drain.
            tokio::task::yield_now().await;
        }
    }
    let mut late = Vec::new();
    for t in tasks {
        match t.await.ok().flatten() {
            Some(us) if us < 0 => r.early += 1,
            Some(us) => late.push(us as u64),
            None => r.errors += 1,
        }
    }
    r.idle_conns = conns;
    r.late_ms = percentiles(&late)
        .unwrap_or([0; 3])
        .map(|us| us as f64 / 1000.0);
}

/// Runs `phases` on a fresh current-thread runtime (with a `LocalSet`) on this thread.
fn on_client_runtime<F: std::future::Future<Output = Report>>(phases: F) -> Report {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    tokio::task::LocalSet::new().block_on(&rt, phases)
}

/// The idle phase's one-line summary.
fn idle_line(r: &Report) -> String {
    format!(
        "{} idle connections: closed late by p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} early, {} errors",
        r.idle_conns, r.late_ms[0], r.late_ms[1], r.late_ms[2], r.early, r.errors
    )
}

/// Runs the phases against `addr` on a current-thread runtime on this thread.
pub(crate) fn run(addr: SocketAddr, o: &Options) -> Report {
    on_client_runtime(async {
        let mut r = Report::default();
        for conns in [100, 1000] {
            let (b, e) = busy(addr, conns, o.secs).await;
            eprintln!(
                "  {conns} busy connections: {:.0} req/s, p50 {} µs, p99 {} µs, {e} errors",
                b.requests_per_sec, b.p50_us, b.p99_us
            );
            r.errors += e;
            r.busy.push(b);
            // Let the server's idle timers close these before the idle phase.
            tokio::time::sleep(o.idle + Duration::from_millis(500)).await;
        }
        idle_phase(addr, o.idle_conns, o, &mut r).await;
        eprintln!("  {}", idle_line(&r));
        r
    })
}

/// Only the idle phase, against a server already running.
pub(crate) fn idle_only(addr: SocketAddr, o: &Options) -> Report {
    on_client_runtime(async {
        let mut r = Report::default();
        idle_phase(addr, o.idle_conns, o, &mut r).await;
        println!("{}", idle_line(&r));
        r
    })
}

/// A markdown table of the runs.
pub(crate) fn table(rows: &[(&str, &Report)]) -> String {
    let mut s = String::from(
        "| timer | busy conns | req/s | p50 µs | p99 µs |\n|---|---:|---:|---:|---:|\n",
    );
    for (name, r) in rows {
        for b in &r.busy {
            s.push_str(&format!(
                "| {name} | {} | {:.0} | {} | {} |\n",
                b.conns, b.requests_per_sec, b.p50_us, b.p99_us
            ));
        }
    }
    s.push_str("\n| timer | idle conns | close late p50 ms | p99 ms | max ms | early | errors |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (name, r) in rows {
        s.push_str(&format!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
            r.idle_conns, r.late_ms[0], r.late_ms[1], r.late_ms[2], r.early, r.errors
        ));
    }
    s
}

//! End-to-end tests of the keep-alive example server over real loopback sockets.
//!
//! Each test starts its own server on 127.0.0.1:0 (one `SO_REUSEPORT` listener per core, all on
//! the port the first one got) with short timeouts, drives it with blocking `TcpStream`s, and
//! shuts it down. Timing rules: "not before" is asserted exactly (a close must come no earlier
//! than the timeout, measured on the client from just before the request was written, which is
//! never later than the server's own start of the timeout); "after" only with a generous bound,
//! because the machine running the tests may be busy. The last test runs the example's own load
//! generator, scaled down, against the server and checks the invariants the demo checks.

#[allow(
    dead_code,
    reason = "the example uses parts of the server module that these tests do not"
)]
#[path = "../examples/keepalive/server/mod.rs"]
mod server;

#[allow(
    dead_code,
    reason = "the example uses parts of the load generator that these tests do not"
)]
#[path = "../examples/keepalive/load.rs"]
mod load;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use server::{Config, Server, StartError};
use tickwheel_percpu::Mode;

const IDLE: Duration = Duration::from_millis(300);
const HEADER: Duration = Duration::from_millis(200);
/// Allowed lateness on a busy machine: coarse rounding (1/8 of the timeout) plus scheduling.
const SLACK: Duration = Duration::from_millis(1500);
const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

fn cores() -> usize {
    core_affinity::get_core_ids().map_or(1, |ids| ids.len().clamp(1, 2))
}

fn start_with(idle: Duration, header: Duration, mode: Mode) -> Server {
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        cores: Some(cores()),
        idle_timeout: idle,
        header_timeout: header,
        mode,
    };
    Server::start(config).expect("server starts")
}

fn start() -> Server {
    start_with(IDLE, HEADER, Mode::Coarse)
}

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A response as the client saw it.
#[derive(Debug)]
struct Response {
    status: u16,
    close: bool,
    body: Vec<u8>,
}

/// Reads exactly one response, keeping any bytes after it in `pending`.
fn read_response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Response {
    let mut chunk = [0u8; 4096];
    for _ in 0..1000 {
        if let Some((len, response)) = parse(pending) {
            pending.drain(..len);
            return response;
        }
        let n = stream.read(&mut chunk).expect("read a response");
        assert!(n > 0, "connection closed before a whole response arrived");
        pending.extend_from_slice(&chunk[..n]);
    }
    panic!("no complete response after 1000 reads");
}

fn parse(buf: &[u8]) -> Option<(usize, Response)> {
    let mut fields = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut fields);
    let httparse::Status::Complete(head) = response.parse(buf).expect("well-formed response")
    else {
        return None;
    };
    let field = |name: &str| {
        let found = response
            .headers
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name));
        found.map(|f| String::from_utf8_lossy(f.value).into_owned())
    };
    let length: usize = field("content-length")?.parse().ok()?;
    let close = field("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let status = response.code?;
    (buf.len() >= head + length).then(|| {
        let body = buf[head..head + length].to_vec();
        (
            head + length,
            Response {
                status,
                close,
                body,
            },
        )
    })
}

/// Waits for the server to close; returns when it did. Panics on unexpected data or a timeout.
fn await_close(stream: &mut TcpStream) -> Instant {
    let mut chunk = [0u8; 1024];
    match stream.read(&mut chunk) {
        Ok(0) => Instant::now(),
        Ok(n) => panic!("unexpected bytes before close: {:?}", &chunk[..n]),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Instant::now(),
        Err(e) => panic!("waiting for the server to close: {e}"),
    }
}

fn get(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Response {
    stream.write_all(GET).unwrap();
    read_response(stream, pending)
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    for _ in 0..5 {
        let response = get(&mut stream, &mut pending);
        assert_eq!(response.status, 200);
        assert!(!response.close);
        assert_eq!(response.body, b"Hello from tickwheel\n");
    }
    let total = server::stats::Snapshot::total(&server.snapshot());
    assert_eq!((total.accepted, total.served), (1, 5));
    assert!(
        total.resets >= 4,
        "every request after the first resets the idle timer: {total:?}"
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    let batch = [GET, b"DELETE / HTTP/1.1\r\n\r\n", GET].concat();
    stream.write_all(&batch).unwrap();
    let statuses: Vec<u16> = (0..3)
        .map(|_| read_response(&mut stream, &mut pending).status)
        .collect();
    assert_eq!(statuses, [200, 405, 200]);
    assert!(pending.is_empty(), "exactly three responses");
    assert_eq!(
        get(&mut stream, &mut pending).status,
        200,
        "still open afterwards"
    );
}

#[test]
fn connection_close_is_honoured() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    stream
        .write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let response = read_response(&mut stream, &mut pending);
    assert_eq!(response.status, 200);
    assert!(response.close);
    await_close(&mut stream);
}

/// Reads until the server's clean close (EOF, not a reset).
fn await_eof(stream: &mut TcpStream) {
    let mut chunk = [0u8; 1024];
    match stream.read(&mut chunk) {
        Ok(0) => {}
        Ok(n) => panic!("unexpected bytes before close: {:?}", &chunk[..n]),
        Err(e) => panic!("expected a clean close, got {e}"),
    }
}

#[test]
fn bytes_after_connection_close_are_discarded_without_a_reset() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    let mut batch = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec();
    for _ in 0..1000 {
        batch.extend_from_slice(GET);
    }
    stream.write_all(&batch).unwrap();
    let response = read_response(&mut stream, &mut pending);
    assert_eq!((response.status, response.close), (200, true));
    assert!(
        pending.is_empty(),
        "nothing is answered after Connection: close"
    );
    await_eof(&mut stream);
}

/// The idle timer closes a silent connection, never before the timeout.
fn idle_close_after_timeout(mode: Mode) {
    let server = start_with(IDLE, HEADER, mode);
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    let sent = Instant::now();
    assert_eq!(get(&mut stream, &mut pending).status, 200);
    let closed = await_close(&mut stream);
    let waited = closed - sent;
    assert!(
        waited >= IDLE,
        "closed after {waited:?}, before the {IDLE:?} idle timeout"
    );
    assert!(waited <= IDLE + SLACK, "closed only after {waited:?}");
    let total = server::stats::Snapshot::total(&server.snapshot());
    assert_eq!((total.idle_closes, total.early_closes), (1, 0));
}

#[test]
fn idle_connection_closes_after_the_timeout_and_not_before_coarse() {
    idle_close_after_timeout(Mode::Coarse);
}

#[test]
fn idle_connection_closes_after_the_timeout_and_not_before_exact() {
    idle_close_after_timeout(Mode::Exact);
}

#[test]
fn each_request_resets_the_idle_timeout() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    let began = Instant::now();
    // Requests every third of the timeout keep the connection well past one timeout.
    for _ in 0..8 {
        assert_eq!(get(&mut stream, &mut pending).status, 200);
        std::thread::sleep(IDLE / 3);
    }
    assert!(began.elapsed() > IDLE * 2);
    let sent = Instant::now();
    assert_eq!(get(&mut stream, &mut pending).status, 200);
    let waited = await_close(&mut stream) - sent;
    assert!(
        waited >= IDLE && waited <= IDLE + SLACK,
        "closed after {waited:?}"
    );
}

#[test]
fn slowloris_is_closed_by_the_header_timeout() {
    // A long idle timeout, so only the header timer can explain the close.
    let idle = Duration::from_secs(20);
    let server = start_with(idle, HEADER, Mode::Coarse);
    let mut stream = connect(&server);
    let started = Instant::now();
    stream.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    // Keep trickling header fields, never finishing the head, until the server gives up.
    let mut pending = Vec::new();
    stream.set_read_timeout(Some(HEADER / 4)).unwrap();
    let mut chunk = [0u8; 1024];
    let response_at = loop {
        assert!(
            started.elapsed() < HEADER + SLACK,
            "slow client never closed"
        );
        match stream.read(&mut chunk) {
            Ok(0) => panic!("closed without a 408"),
            Ok(n) => {
                pending.extend_from_slice(&chunk[..n]);
                break Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // The server may have closed between reads; a failed write ends the loop next.
                let _ = stream.write_all(b"X-Slow: 1\r\n");
            }
            Err(e) => panic!("{e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let response = read_response(&mut stream, &mut pending);
    assert_eq!(response.status, 408);
    await_close(&mut stream);
    let waited = response_at - started;
    assert!(
        waited >= HEADER,
        "header timeout fired after {waited:?}, before {HEADER:?}"
    );
    assert!(waited <= HEADER + SLACK);
    let total = server::stats::Snapshot::total(&server.snapshot());
    assert_eq!((total.header_closes, total.idle_closes), (1, 0));
}

#[test]
fn malformed_request_gets_400_and_close() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    stream.write_all(b"THIS IS NOT HTTP\r\n\r\n").unwrap();
    let response = read_response(&mut stream, &mut pending);
    assert_eq!(response.status, 400);
    assert!(response.close);
    await_close(&mut stream);
}

#[test]
fn oversized_header_gets_431_and_close() {
    let server = start();
    let mut stream = connect(&server);
    let mut pending = Vec::new();
    let mut request = b"GET / HTTP/1.1\r\nX-Huge: ".to_vec();
    request.resize(request.len() + 16 * 1024, b'a');
    request.extend_from_slice(b"\r\n\r\n");
    // The server may close before reading everything; a reset on write is fine.
    let _ = stream.write_all(&request);
    let response = read_response(&mut stream, &mut pending);
    assert_eq!(response.status, 431);
    assert!(response.close);
    await_eof(&mut stream);
}

#[test]
fn many_concurrent_connections_are_all_served() {
    server::sys::raise_nofile_limit().expect("raise the open-file limit");
    let server = start_with(
        Duration::from_secs(10),
        Duration::from_secs(5),
        Mode::Coarse,
    );
    let mut streams: Vec<TcpStream> = (0..300).map(|_| connect(&server)).collect();
    for stream in &mut streams {
        stream.write_all(GET).unwrap();
    }
    for stream in &mut streams {
        assert_eq!(read_response(stream, &mut Vec::new()).status, 200);
    }
    let per_core = server.snapshot();
    let total = server::stats::Snapshot::total(&per_core);
    assert_eq!(
        (total.accepted, total.served, total.open()),
        (300, 300, 300)
    );
    if per_core.len() > 1 {
        assert!(
            per_core.iter().all(|c| c.accepted > 0),
            "SO_REUSEPORT spreads: {per_core:?}"
        );
    }
}

#[test]
fn shutdown_closes_every_connection_and_stops_listening() {
    let server = start_with(
        Duration::from_secs(10),
        Duration::from_secs(5),
        Mode::Coarse,
    );
    let addr = server.local_addr();
    let mut idle = connect(&server);
    let mut pending = Vec::new();
    assert_eq!(get(&mut idle, &mut pending).status, 200);
    let mut half = connect(&server);
    half.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    // Wait until both are accepted (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    while server::stats::Snapshot::total(&server.snapshot()).accepted < 2 {
        assert!(Instant::now() < deadline, "connections not accepted");
        std::thread::sleep(Duration::from_millis(5));
    }
    let reports = server.shutdown().expect("clean shutdown");
    let open: usize = reports.iter().map(|r| r.closed_at_shutdown).sum();
    assert_eq!(open, 2);
    for r in &reports {
        assert_eq!(
            r.counters.open(),
            0,
            "core {} left connections open",
            r.index
        );
    }
    await_close(&mut idle);
    await_close(&mut half);
    assert!(TcpStream::connect(addr).is_err(), "listeners are closed");
}

#[test]
fn asking_for_more_cores_than_exist_is_an_error() {
    let available = core_affinity::get_core_ids().map_or(0, |ids| ids.len());
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        cores: Some(available + 1),
        idle_timeout: IDLE,
        header_timeout: HEADER,
        mode: Mode::Coarse,
    };
    match Server::start(config) {
        Err(StartError::TooManyCores { asked, .. }) => assert_eq!(asked, available + 1),
        other => panic!("expected TooManyCores, got {other:?}"),
    }
}

#[test]
fn built_in_load_keeps_every_invariant() {
    server::sys::raise_nofile_limit().expect("raise the open-file limit");
    // Active clients pause at most a quarter of the idle timeout, leaving 750 ms for a busy
    // machine.
    let (idle, header) = (Duration::from_millis(1000), Duration::from_millis(400));
    let server = start_with(idle, header, Mode::Coarse);
    let plan = load::Plan {
        addr: server.local_addr(),
        active: 60,
        idle: 30,
        slow: 15,
        threads: 2,
        duration: Duration::from_millis(3000),
        idle_timeout: idle,
        header_timeout: header,
    };
    let finished = load::Load::start(plan).unwrap().finish().unwrap();
    let cores = server.shutdown().unwrap();
    drop(finished.sockets);
    let seen = finished.report;
    let total = server::stats::Snapshot::total(cores.iter().map(|c| &c.counters));
    assert_eq!(seen.active_closed, 0, "{seen:?}");
    assert_eq!(
        (seen.unanswered, seen.wrong_status, seen.overdue),
        (0, 0, 0),
        "{seen:?}"
    );
    assert_eq!(seen.answered, total.served);
    assert!(seen.idle_closed > 0 && seen.slow_closed > 0, "{seen:?}");
    assert!(
        seen.idle_gaps.iter().all(|&gap| gap >= idle),
        "an idle close came early"
    );
    assert!(
        seen.slow_gaps.iter().all(|&gap| gap >= header),
        "a header close came early"
    );
    assert_eq!((total.early_closes, total.stale_timers), (0, 0));
}

//! The built-in load generator: thousands of client connections over loopback, on threads of
//! their own, each thread with its own epoll loop and a heap of wake-up times.
//!
//! Three kinds of client, chosen to exercise each timer path:
//! - active: sends a burst of 1-3 pipelined GETs, waits for every response, sleeps a random
//!   interval no longer than a quarter of the idle timeout, repeats. The server must never close one:
//!   every close the client sees is counted as an active connection closed by a timer.
//! - idle: sends 1-3 GETs, then falls silent until the server closes it (idle timeout), notes how
//!   long after its last request that came, and reconnects.
//! - slow: sends a request line and then one more header field every fifth of the header timeout,
//!   never finishing the head (slowloris), until the server closes it; then reconnects.
//!
//! It runs for a fixed time, then stops sending, waits (bounded) for outstanding responses and
//! returns its counts with the still-open sockets. Every loop is bounded by a deadline.
//!
//! Given up: connects are blocking (loopback completes them at once); the random numbers come
//! from a small xorshift generator, which is plenty for spreading intervals.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::server::common::{Rng, percentiles};
use crate::server::sys::{Epoll, Event, READABLE};

/// How much load to make and for how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// The server to load.
    pub(crate) addr: SocketAddr,
    /// Active connections.
    pub(crate) active: usize,
    /// Connections that go idle (and reconnect after each close).
    pub(crate) idle: usize,
    /// Connections that send their headers slowly (and reconnect after each close).
    pub(crate) slow: usize,
    /// Load threads.
    pub(crate) threads: usize,
    /// How long to send load.
    pub(crate) duration: Duration,
    /// The server's idle timeout (to size intervals).
    pub(crate) idle_timeout: Duration,
    /// The server's header timeout (to pace slow clients).
    pub(crate) header_timeout: Duration,
}

impl Plan {
    /// Connections in all.
    pub(crate) fn connections(&self) -> usize {
        self.active + self.idle + self.slow
    }
}

/// What the load threads saw, summed.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadReport {
    /// Requests written.
    pub(crate) sent: u64,
    /// Responses received.
    pub(crate) answered: u64,
    /// Responses whose status was not the one expected.
    pub(crate) wrong_status: u64,
    /// Requests written whose response never came (at a close, or when the run ended).
    pub(crate) unanswered: u64,
    /// Active connections the server closed (must be 0).
    pub(crate) active_closed: u64,
    /// Idle connections closed by the server after going silent.
    pub(crate) idle_closed: u64,
    /// Slow connections closed by the server.
    pub(crate) slow_closed: u64,
    /// Connects that failed.
    pub(crate) connect_errors: u64,
    /// Idle or slow connections still open well past their timeout when the run ended.
    pub(crate) overdue: u64,
    /// Client view of idle closes: from the last request written to the close being seen.
    pub(crate) idle_gaps: Vec<Duration>,
    /// Client view of slow closes: from the first header byte written to the close being seen.
    pub(crate) slow_gaps: Vec<Duration>,
}

impl LoadReport {
    fn merge(&mut self, other: LoadReport) {
        self.sent += other.sent;
        self.answered += other.answered;
        self.wrong_status += other.wrong_status;
        self.unanswered += other.unanswered;
        self.active_closed += other.active_closed;
        self.idle_closed += other.idle_closed;
        self.slow_closed += other.slow_closed;
        self.connect_errors += other.connect_errors;
        self.overdue += other.overdue;
        self.idle_gaps.extend(other.idle_gaps);
        self.slow_gaps.extend(other.slow_gaps);
    }

    /// p50, p99 and max of the client-seen idle close gaps.
    pub(crate) fn idle_gap_percentiles(&self) -> Option<[Duration; 3]> {
        percentiles(&self.idle_gaps)
    }

    /// p50, p99 and max of the client-seen slow close gaps.
    pub(crate) fn slow_gap_percentiles(&self) -> Option<[Duration; 3]> {
        percentiles(&self.slow_gaps)
    }
}

/// Running load threads.
#[derive(Debug)]
pub(crate) struct Load {
    threads: Vec<JoinHandle<io::Result<Finished>>>,
}

/// The end of a run: what the clients saw, and their sockets, still open.
///
/// The sockets are handed back rather than closed so the caller can stop the server first:
/// thousands of simultaneous client closes would otherwise land on the server as one burst of
/// work while its timers are still being measured.
#[derive(Debug)]
pub(crate) struct Finished {
    /// What the clients saw.
    pub(crate) report: LoadReport,
    /// Client sockets still open; dropping them closes them.
    pub(crate) sockets: Vec<TcpStream>,
}

impl Load {
    /// Starts the load threads; they stop by themselves after `plan.duration` plus a drain.
    pub(crate) fn start(plan: Plan) -> io::Result<Load> {
        let mut threads = Vec::new();
        let start = Instant::now();
        for t in 0..plan.threads {
            let roles = roles_for_thread(&plan, t);
            let thread = thread::Builder::new()
                .name(format!("load-{t}"))
                .spawn(move || Generator::new(plan, t as u64, roles, start)?.run())?;
            threads.push(thread);
        }
        Ok(Load { threads })
    }

    /// True once every load thread has stopped.
    pub(crate) fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Waits for the load threads, sums what they saw and collects their open sockets.
    pub(crate) fn finish(self) -> io::Result<Finished> {
        let mut finished = Finished {
            report: LoadReport::default(),
            sockets: Vec::new(),
        };
        for thread in self.threads {
            let one = thread
                .join()
                .map_err(|_| io::Error::other("a load thread panicked"))??;
            finished.report.merge(one.report);
            finished.sockets.extend(one.sockets);
        }
        Ok(finished)
    }
}

/// The roles of thread `t`'s clients: every `threads`-th client of the whole plan.
fn roles_for_thread(plan: &Plan, t: usize) -> Vec<Role> {
    let all = (0..plan.active)
        .map(|_| Role::Active)
        .chain((0..plan.idle).map(|_| Role::Idle))
        .chain((0..plan.slow).map(|_| Role::Slow));
    all.skip(t).step_by(plan.threads.max(1)).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Active,
    Idle,
    Slow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not connected; a wake-up connects.
    Disconnected,
    /// Waiting for responses to requests in flight.
    Waiting,
    /// Between requests; a wake-up sends the next.
    Pausing,
    /// Idle client after its last response: waiting for the server to close.
    Silent,
    /// Slow client sending its head piece by piece.
    Trickling,
    /// Done for this run.
    Finished,
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tickwheel-load\r\n\r\n";
const SLOW_START: &[u8] = b"GET /slow HTTP/1.1\r\nHost: localhost\r\n";
/// Most header fields a slow client sends; far below the server's 431 limit.
const SLOW_STEPS: u32 = 40;
/// Time over which the first connections are opened.
const RAMP: Duration = Duration::from_millis(1000);
/// Longest wait for outstanding responses once the run is over.
const DRAIN: Duration = Duration::from_millis(1000);

#[derive(Debug)]
struct Client {
    role: Role,
    stream: Option<TcpStream>,
    generation: u32,
    state: State,
    in_flight: u32,
    requests_left: u32,
    steps_sent: u32,
    received: Vec<u8>,
    last_request: Instant,
    first_byte: Instant,
}

impl Client {
    fn new(role: Role, now: Instant) -> Self {
        Client {
            role,
            stream: None,
            generation: 0,
            state: State::Disconnected,
            in_flight: 0,
            requests_left: 0,
            steps_sent: 0,
            received: Vec::new(),
            last_request: now,
            first_byte: now,
        }
    }
}

struct Generator {
    plan: Plan,
    epoll: Epoll,
    clients: Vec<Client>,
    wakeups: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    rng: Rng,
    report: LoadReport,
    load_end: Instant,
    scratch: Vec<u8>,
    events: Vec<Event>,
}

impl Generator {
    fn new(plan: Plan, seed: u64, roles: Vec<Role>, start: Instant) -> io::Result<Generator> {
        let mut generator = Generator {
            plan,
            epoll: Epoll::new(512)?,
            clients: roles.into_iter().map(|r| Client::new(r, start)).collect(),
            wakeups: BinaryHeap::new(),
            rng: Rng::new(seed),
            report: LoadReport::default(),
            load_end: start + plan.duration,
            scratch: vec![0; 64 * 1024],
            events: Vec::new(),
        };
        let n = generator.clients.len().max(1) as u32;
        for i in 0..generator.clients.len() {
            generator.wake_at(start + RAMP * i as u32 / n, i);
        }
        Ok(generator)
    }

    fn run(mut self) -> io::Result<Finished> {
        let hard_end = self.load_end + DRAIN;
        loop {
            let now = Instant::now();
            if now >= hard_end || (now >= self.load_end && self.in_flight() == 0) {
                break;
            }
            let timeout = self.wait_ms(now, hard_end);
            self.epoll.wait(&mut self.events, timeout)?;
            for i in 0..self.events.len() {
                let Event { token, .. } = self.events[i];
                self.on_event(token);
            }
            self.run_due(Instant::now());
        }
        let sockets = self.finish_all(Instant::now());
        Ok(Finished {
            report: self.report,
            sockets,
        })
    }

    /// Milliseconds until the next wake-up (at most until `hard_end`, at least 0).
    fn wait_ms(&self, now: Instant, hard_end: Instant) -> i32 {
        let next = self
            .wakeups
            .peek()
            .map_or(hard_end, |Reverse((t, _, _))| *t);
        let wait = next.min(hard_end).saturating_duration_since(now);
        wait.as_millis().min(1000) as i32 + i32::from(!wait.subsec_micros().is_multiple_of(1000))
    }

    fn in_flight(&self) -> u64 {
        self.clients.iter().map(|c| u64::from(c.in_flight)).sum()
    }

    fn wake_at(&mut self, at: Instant, i: usize) {
        let generation = self.clients[i].generation;
        self.wakeups.push(Reverse((at, i, generation)));
    }

    fn run_due(&mut self, now: Instant) {
        while let Some(&Reverse((at, i, generation))) = self.wakeups.peek() {
            if at > now {
                return;
            }
            self.wakeups.pop();
            if self.clients[i].generation == generation {
                self.wake(i, now);
            }
        }
    }

    fn wake(&mut self, i: usize, now: Instant) {
        if now >= self.load_end {
            return; // the run is over: send nothing more
        }
        match (self.clients[i].state, self.clients[i].role) {
            (State::Disconnected, _) => self.connect(i, now),
            (State::Pausing, Role::Active) => {
                let burst = self.rng.upto(3);
                self.send_requests(i, burst, now);
            }
            (State::Pausing, Role::Idle) => self.send_requests(i, 1, now),
            (State::Trickling, Role::Slow) => self.trickle(i, now),
            _ => {}
        }
    }

    // ---- connection life ----

    fn connect(&mut self, i: usize, now: Instant) {
        let stream = match open(self.plan.addr) {
            Ok(stream) => stream,
            Err(_) => {
                self.report.connect_errors += 1;
                self.wake_at(now + Duration::from_millis(100), i);
                return;
            }
        };
        let client = &mut self.clients[i];
        client.generation = client.generation.wrapping_add(1);
        let token = (u64::from(client.generation) << 32) | i as u64;
        if self.epoll.add(stream.as_raw_fd(), READABLE, token).is_err() {
            self.report.connect_errors += 1;
            return;
        }
        client.stream = Some(stream);
        client.received.clear();
        client.in_flight = 0;
        client.steps_sent = 0;
        match client.role {
            Role::Active => {
                client.state = State::Pausing;
                let first = self.rng.between(Duration::ZERO, self.max_interval());
                self.wake_at(now + first, i);
            }
            Role::Idle => {
                client.requests_left = self.rng.upto(3);
                client.state = State::Pausing;
                self.wake_at(now, i);
            }
            Role::Slow => {
                client.state = State::Trickling;
                client.first_byte = now;
                self.write(i, SLOW_START, now);
                self.wake_at(now + self.slow_step(), i);
            }
        }
    }

    /// Active clients pause at most a quarter of the idle timeout: three quarters of it are left
    /// as margin for a busy machine, so a timer that closes an active connection is a bug.
    fn max_interval(&self) -> Duration {
        self.plan.idle_timeout / 4
    }

    fn slow_step(&self) -> Duration {
        self.plan.header_timeout / 5
    }

    fn send_requests(&mut self, i: usize, n: u32, now: Instant) {
        let burst = REQUEST.repeat(n as usize);
        let client = &mut self.clients[i];
        client.in_flight += n;
        client.state = State::Waiting;
        client.requests_left = client.requests_left.saturating_sub(n);
        client.last_request = now;
        self.report.sent += u64::from(n);
        self.write(i, &burst, now);
    }

    fn trickle(&mut self, i: usize, now: Instant) {
        let client = &mut self.clients[i];
        if client.steps_sent >= SLOW_STEPS {
            return;
        }
        client.steps_sent += 1;
        let field = format!("X-Slow-{}: still typing\r\n", client.steps_sent);
        self.write(i, field.as_bytes(), now);
        let step = self.slow_step();
        self.wake_at(now + step, i);
    }

    /// Writes all of `bytes` (small; a full socket buffer here means the server is not reading,
    /// which is treated as the connection being lost).
    fn write(&mut self, i: usize, bytes: &[u8], now: Instant) {
        let ok = match self.clients[i].stream.as_ref() {
            Some(mut stream) => stream.write_all(bytes).is_ok(),
            None => false,
        };
        if !ok {
            self.on_closed(i, now);
        }
    }

    fn on_event(&mut self, token: u64) {
        let i = (token & u64::from(u32::MAX)) as usize;
        let generation = (token >> 32) as u32;
        if self
            .clients
            .get(i)
            .is_none_or(|c| c.generation != generation)
        {
            return;
        }
        let now = Instant::now();
        let read = match self.clients[i].stream.as_ref() {
            Some(mut stream) => stream.read(&mut self.scratch),
            None => return,
        };
        match read {
            Ok(0) => self.on_closed(i, now),
            Ok(n) => {
                let fresh = self.scratch[..n].to_vec();
                self.on_bytes(i, &fresh, now);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => self.on_closed(i, now),
        }
    }

    fn on_bytes(&mut self, i: usize, fresh: &[u8], now: Instant) {
        self.clients[i].received.extend_from_slice(fresh);
        loop {
            let client = &mut self.clients[i];
            let Some((len, status)) = parse_response(&client.received) else {
                break;
            };
            client.received.drain(..len);
            let expected = if client.role == Role::Slow { 408 } else { 200 };
            if status != expected || (client.in_flight == 0 && client.role != Role::Slow) {
                self.report.wrong_status += 1;
            }
            if client.in_flight > 0 {
                client.in_flight -= 1;
                self.report.answered += 1;
                if client.in_flight == 0 {
                    self.all_answered(i, now);
                }
            }
        }
    }

    fn all_answered(&mut self, i: usize, now: Instant) {
        let client = &mut self.clients[i];
        match client.role {
            Role::Active => {
                client.state = State::Pausing;
                let pause = self
                    .rng
                    .between(Duration::from_millis(20), self.max_interval());
                self.wake_at(now + pause, i);
            }
            Role::Idle if client.requests_left > 0 => {
                client.state = State::Pausing;
                let pause = self
                    .rng
                    .between(Duration::from_millis(10), Duration::from_millis(200));
                self.wake_at(now + pause, i);
            }
            Role::Idle => client.state = State::Silent,
            Role::Slow => {}
        }
    }

    /// The server closed (or reset) client `i`.
    fn on_closed(&mut self, i: usize, now: Instant) {
        let client = &mut self.clients[i];
        client.stream = None; // closing the socket removes it from the epoll set
        client.generation = client.generation.wrapping_add(1);
        self.report.unanswered += u64::from(client.in_flight);
        client.in_flight = 0;
        let state = client.state;
        client.state = State::Disconnected;
        match client.role {
            Role::Active => {
                self.report.active_closed += 1;
                client.state = State::Finished;
                return;
            }
            Role::Idle if state == State::Silent => {
                self.report.idle_closed += 1;
                self.report.idle_gaps.push(now - client.last_request);
            }
            Role::Idle => {}
            Role::Slow => {
                self.report.slow_closed += 1;
                self.report.slow_gaps.push(now - client.first_byte);
            }
        }
        let again = self.rng.between(Duration::ZERO, Duration::from_millis(300));
        self.wake_at(now + again, i);
    }

    /// Ends the run: counts what is still unanswered or overdue; returns the open sockets.
    fn finish_all(&mut self, now: Instant) -> Vec<TcpStream> {
        let mut sockets = Vec::new();
        let idle_bound = self.plan.idle_timeout * 5 / 4 + Duration::from_millis(500);
        let slow_bound = self.plan.header_timeout * 5 / 4 + Duration::from_millis(500);
        for client in &mut self.clients {
            self.report.unanswered += u64::from(client.in_flight);
            let overdue = match client.state {
                State::Silent => now - client.last_request > idle_bound,
                State::Trickling => now - client.first_byte > slow_bound,
                _ => false,
            };
            self.report.overdue += u64::from(overdue);
            sockets.extend(client.stream.take());
            client.state = State::Finished;
        }
        sockets
    }
}

/// Opens a non-blocking, no-delay connection to `addr`.
fn open(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Finds one complete response at the front of `buf`: its total length and status code.
fn parse_response(buf: &[u8]) -> Option<(usize, u16)> {
    let mut fields = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut fields);
    let head = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return None,
    };
    let body = response
        .headers
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("content-length"))
        .and_then(|f| {
            std::str::from_utf8(f.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .unwrap_or(0);
    let total = head + body;
    (buf.len() >= total).then_some((total, response.code.unwrap_or(0)))
}

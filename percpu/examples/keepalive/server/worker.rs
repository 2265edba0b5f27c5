//! One core's event loop: its listener, its connections and its timer base in one epoll set.
//!
//! Loop, each turn:
//! 1. `epoll_wait` without a timeout: the base's fd becomes readable when a timer is due, so the
//!    loop never needs to compute a wait time itself.
//! 2. `Base::turn`: reads the clock once and collects every due timer. It runs on every turn, not
//!    only when the timer fd is readable; a turn with nothing due costs a vDSO clock read.
//! 3. Fired timers close their connections (idle: the keep-alive timeout; header: a request head
//!    that took too long) before socket events are handled: a timeout that expired before this
//!    turn is not undone by data that arrived during it.
//! 4. The cached `Date` header text is refreshed (formatted again only when the second changed).
//! 5. Socket events: accept, read and answer requests, write responses.
//!
//! Timers per connection (both on this core's base, so no reset ever crosses cores):
//! - idle: armed at accept, re-armed with `reset_after` whenever a read completes at least one
//!   request. When it fires while a request head is half-received, the header timer is in charge
//!   and the idle timer is re-armed when that request completes.
//! - header: armed when a read leaves an incomplete request head behind, reset when a read
//!   completes that request but leaves the start of the next one, cancelled when no partial head
//!   is left.
//!
//! `schedule_after` and `reset_after` read the clock themselves, so a timeout counts from a moment
//! after the request was read: a client that measures from its own send can never see an early
//! close. Each close checks the elapsed time against the timeout and records its lateness.
//!
//! Backpressure: while a response cannot be written in full, the connection waits for
//! writability only and reads nothing more.
//!
//! Closing after a last response (`Connection: close`, 400, 431) lingers: the write side is shut
//! and input is discarded until the peer closes, for at most [`LINGER`] (a third timer kind, in
//! the idle timer's place), so unread input never turns the close into a reset.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tickwheel_percpu::Base;

use super::StartError;
use super::conn::{Armed, Conn, Key, Slab, TimerKind, TimerToken};
use super::date::{DATE_LEN, DateCache};
use super::http::{self, Outcome, Status};
use super::stats::{CoreReport, Count, Counters};
use super::sys::{self, Epoll, Event, HANG_UP, READABLE, StopFlag, WRITABLE};

/// Epoll token of the listener.
const LISTENER: u64 = u64::MAX;
/// Epoll token of the base's timer fd.
const TIMER: u64 = u64::MAX - 1;
/// Epoll token of the stop flag.
const STOP: u64 = u64::MAX - 2;
/// Most events taken from one `epoll_wait`.
const MAX_EVENTS: usize = 256;
/// Most connections accepted per listener event, so a connection storm cannot starve the rest.
const ACCEPTS_PER_EVENT: usize = 128;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// Longest wait for the peer to close after the server's last response (lingering close).
const LINGER: Duration = Duration::from_millis(500);

/// Everything a worker needs, moved into its thread.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) index: usize,
    pub(super) cpu: core_affinity::CoreId,
    pub(super) listener: TcpListener,
    pub(super) base: Base<TimerToken>,
    pub(super) counters: Arc<Counters>,
    pub(super) stop: Arc<StopFlag>,
    pub(super) idle_timeout: Duration,
    pub(super) header_timeout: Duration,
    pub(super) ready: Sender<Result<(), StartError>>,
}

/// Starts the worker thread. It pins itself, reports on `ready`, then runs until stopped.
pub(super) fn spawn(setup: Setup) -> io::Result<JoinHandle<io::Result<CoreReport>>> {
    thread::Builder::new()
        .name(format!("core-{}", setup.index))
        .spawn(move || run(setup))
}

fn run(setup: Setup) -> io::Result<CoreReport> {
    let ready = setup.ready.clone();
    let mut worker = match Worker::new(setup) {
        Ok(worker) => worker,
        Err(e) => {
            let text = e.to_string();
            let _ = ready.send(Err(e));
            return Err(io::Error::other(text));
        }
    };
    // The receiver may be gone if another worker failed first; then the stop flag is raised too.
    let _ = ready.send(Ok(()));
    drop(ready);
    let result = worker.event_loop();
    let report = worker.finish();
    result.map(|()| report)
}

/// Why a connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Peer,
    Idle,
    Header,
    Done,
    NoTimer,
    Shutdown,
}

struct Worker {
    index: usize,
    cpu: usize,
    epoll: Epoll,
    listener: TcpListener,
    accepting: bool,
    base: Base<TimerToken>,
    /// Held so the stop flag's descriptor outlives its registration in `epoll`.
    _stop: Arc<StopFlag>,
    conns: Slab,
    counters: Arc<Counters>,
    idle_timeout: Duration,
    header_timeout: Duration,
    idle_lateness: Vec<Duration>,
    header_lateness: Vec<Duration>,
    closed_at_shutdown: usize,
    date: DateCache,
    scratch: Vec<u8>,
    events: Vec<Event>,
    fired: Vec<TimerToken>,
}

impl Worker {
    fn new(setup: Setup) -> Result<Worker, StartError> {
        if !core_affinity::set_for_current(setup.cpu) {
            return Err(StartError::Pin { cpu: setup.cpu.id });
        }
        let epoll = Epoll::new(MAX_EVENTS)?;
        epoll.add(setup.listener.as_raw_fd(), READABLE, LISTENER)?;
        epoll.add(setup.base.fd(), READABLE, TIMER)?;
        epoll.add(setup.stop.as_raw_fd(), READABLE, STOP)?;
        Ok(Worker {
            index: setup.index,
            cpu: setup.cpu.id,
            epoll,
            listener: setup.listener,
            accepting: true,
            base: setup.base,
            _stop: setup.stop,
            conns: Slab::default(),
            counters: setup.counters,
            idle_timeout: setup.idle_timeout,
            header_timeout: setup.header_timeout,
            idle_lateness: Vec::new(),
            header_lateness: Vec::new(),
            closed_at_shutdown: 0,
            date: DateCache::new(),
            scratch: vec![0; READ_CHUNK],
            events: Vec::with_capacity(MAX_EVENTS),
            fired: Vec::new(),
        })
    }

    /// Runs until the stop flag is raised.
    fn event_loop(&mut self) -> io::Result<()> {
        loop {
            self.epoll.wait(&mut self.events, -1)?;
            self.fire_due_timers();
            self.date.refresh();
            let mut stop = false;
            for i in 0..self.events.len() {
                let Event { token, flags } = self.events[i];
                match token {
                    STOP => stop = true,
                    TIMER => {} // handled by fire_due_timers on every turn
                    LISTENER => self.accept_some(),
                    _ => self.on_connection_event(token, flags),
                }
            }
            if stop {
                return Ok(());
            }
        }
    }

    /// Closes every connection (cancelling its timers) and builds the report.
    fn finish(mut self) -> CoreReport {
        for key in self.conns.keys() {
            self.close(key, Why::Shutdown);
        }
        CoreReport {
            index: self.index,
            cpu: self.cpu,
            counters: self.counters.snapshot(),
            base: self.base.stats(),
            idle_lateness: std::mem::take(&mut self.idle_lateness),
            header_lateness: std::mem::take(&mut self.header_lateness),
            closed_at_shutdown: self.closed_at_shutdown,
        }
    }

    // ---- timers ----

    fn fire_due_timers(&mut self) {
        let fired = &mut self.fired;
        self.base.turn(|token| fired.push(token));
        if self.fired.is_empty() {
            return;
        }
        let mut fired = std::mem::take(&mut self.fired);
        for token in fired.drain(..) {
            self.on_timer(token);
        }
        self.fired = fired;
    }

    fn on_timer(&mut self, token: TimerToken) {
        let Some(conn) = self.conns.get_mut(token.key) else {
            self.counters.add(Count::StaleTimer, 1);
            return;
        };
        let Some(armed) = conn.timer_mut(token.kind).take() else {
            self.counters.add(Count::StaleTimer, 1);
            return;
        };
        let key = token.key;
        match token.kind {
            // A request head is arriving: the header timer decides; idle is re-armed after it.
            TimerKind::Idle if conn.header.is_some() => {}
            TimerKind::Idle => {
                let late = self.lateness(armed.since, self.idle_timeout);
                self.idle_lateness.push(late);
                self.close(key, Why::Idle);
            }
            TimerKind::Header => {
                let late = self.lateness(armed.since, self.header_timeout);
                self.header_lateness.push(late);
                self.say_goodbye(key, Status::RequestTimeout);
                self.close(key, Why::Header);
            }
            TimerKind::Linger => self.close(key, Why::Done),
        }
    }

    /// How long after `since + timeout` it is now (measured at each close, not once per turn);
    /// counts an early close if the timeout has not yet elapsed.
    fn lateness(&self, since: Instant, timeout: Duration) -> Duration {
        let elapsed = Instant::now().saturating_duration_since(since);
        if elapsed < timeout {
            self.counters.add(Count::EarlyClose, 1);
        }
        elapsed.saturating_sub(timeout)
    }

    /// Best effort: queue a final response and try one write; the connection closes right after.
    fn say_goodbye(&mut self, key: Key, status: Status) {
        if let Some(conn) = self.conns.get_mut(key) {
            http::write_response(&mut conn.output, status, false, false, self.date.text());
            let _ = (&conn.stream).write(conn.pending_output());
        }
    }

    /// Arms `kind` on `key` for `delay`, re-arming the existing timer when there is one.
    /// Returns false when no timer could be armed.
    fn arm(&mut self, key: Key, kind: TimerKind, delay: Duration) -> bool {
        let Some(conn) = self.conns.get_mut(key) else {
            return false;
        };
        let slot = conn.timer_mut(kind);
        // Both calls read the clock and count the delay from that reading, which `now()` then
        // returns: the timeout starts after the request was read, never before.
        if let Some(armed) = slot
            && self.base.reset_after(armed.handle, delay)
        {
            armed.since = self.base.now();
            self.counters.add(Count::Reset, 1);
            return true;
        }
        match self.base.schedule_after(delay, TimerToken { key, kind }) {
            Ok(handle) => {
                let since = self.base.now();
                *slot = Some(Armed { handle, since });
                true
            }
            Err(_) => false,
        }
    }

    fn disarm(&mut self, key: Key, kind: TimerKind) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if let Some(armed) = conn.timer_mut(kind).take() {
            self.base.cancel(armed.handle);
        }
    }

    /// Updates both timers after a read: `answered` requests completed, `partial` head left.
    fn after_read(&mut self, key: Key, answered: u64, partial: bool) {
        let mut ok = true;
        if answered > 0 {
            ok &= self.arm(key, TimerKind::Idle, self.idle_timeout);
        }
        let header_armed = self.conns.get_mut(key).is_some_and(|c| c.header.is_some());
        if partial && (answered > 0 || !header_armed) {
            ok &= self.arm(key, TimerKind::Header, self.header_timeout);
        } else if !partial {
            self.disarm(key, TimerKind::Header);
        }
        if !ok {
            self.counters.add(Count::TimerFailure, 1);
            self.close(key, Why::NoTimer);
        }
    }

    // ---- sockets ----

    fn accept_some(&mut self) {
        for _ in 0..ACCEPTS_PER_EVENT {
            match sys::accept_nonblocking(&self.listener) {
                Ok(stream) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.counters.add(Count::AcceptError, 1);
                    if is_out_of_descriptors(&e) {
                        self.pause_accepting();
                    }
                    return;
                }
            }
        }
    }

    /// Out of descriptors: stop listening until a connection closes, instead of spinning on a
    /// listener that stays readable.
    fn pause_accepting(&mut self) {
        if self
            .epoll
            .modify(self.listener.as_raw_fd(), 0, LISTENER)
            .is_ok()
        {
            self.accepting = false;
        }
    }

    fn resume_accepting(&mut self) {
        if !self.accepting
            && self
                .epoll
                .modify(self.listener.as_raw_fd(), READABLE, LISTENER)
                .is_ok()
        {
            self.accepting = true;
        }
    }

    fn admit(&mut self, stream: std::net::TcpStream) {
        // Responses are written whole, one write per batch: Nagle would only add delay.
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let key = self.conns.insert(Conn::new(stream));
        self.counters.add(Count::Accepted, 1);
        if self.epoll.add(fd, READABLE, key.token()).is_err() {
            self.close(key, Why::Peer);
            return;
        }
        if !self.arm(key, TimerKind::Idle, self.idle_timeout) {
            self.counters.add(Count::TimerFailure, 1);
            self.close(key, Why::NoTimer);
        }
    }

    fn on_connection_event(&mut self, token: u64, flags: u32) {
        let Some(key) = Key::from_token(token) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(key) else {
            return; // closed earlier in this turn
        };
        if flags & HANG_UP != 0 && flags & READABLE == 0 {
            // Nothing left to read and the socket is dead: no read or write could succeed.
            return self.close(key, Why::Peer);
        }
        if conn.waiting_to_write {
            self.flush(key);
        } else {
            self.on_readable(key);
        }
    }

    fn on_readable(&mut self, key: Key) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        // For a lingering connection the peer's close is the expected end, not a loss.
        let ended = if conn.lingering { Why::Done } else { Why::Peer };
        let n = match (&conn.stream).read(&mut self.scratch) {
            Ok(0) => return self.close(key, ended),
            Ok(n) => n,
            Err(e) if is_transient(&e) => return,
            Err(_) => return self.close(key, ended),
        };
        if conn.lingering {
            return; // discard: only the peer's close (or the linger timer) is awaited
        }
        let outcome = take_requests(conn, &self.scratch[..n], self.date.text());
        let partial = !conn.input.is_empty();
        self.counters.add(Count::Served, outcome.served);
        self.counters.add(Count::Rejected, outcome.rejected);
        if outcome.close {
            conn.close_after_flush = true;
        } else {
            self.after_read(key, outcome.answered(), partial);
        }
        self.flush(key);
    }

    /// Writes pending output; closes when done and asked to; waits for writability otherwise.
    fn flush(&mut self, key: Key) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        while !conn.pending_output().is_empty() {
            match (&conn.stream).write(conn.pending_output()) {
                Ok(0) => return self.close(key, Why::Peer),
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.close(key, Why::Peer),
            }
        }
        let done = conn.pending_output().is_empty();
        if done {
            conn.output.clear();
            conn.written = 0;
            if conn.close_after_flush && !conn.lingering {
                return self.linger(key);
            }
        }
        if done == conn.waiting_to_write {
            let interest = if done { READABLE } else { WRITABLE };
            let fd = conn.stream.as_raw_fd();
            conn.waiting_to_write = !done;
            if self.epoll.modify(fd, interest, key.token()).is_err() {
                self.close(key, Why::Peer);
            }
        }
    }

    /// Lingering close: the last response is out, so shut the write side (the peer reads EOF)
    /// and discard whatever still arrives until the peer closes or [`LINGER`] passes. Closing
    /// with unread bytes in the socket would send a reset, which can destroy the response before
    /// the peer reads it.
    fn linger(&mut self, key: Key) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        conn.lingering = true;
        conn.input.clear();
        if conn.stream.shutdown(Shutdown::Write).is_err() {
            return self.close(key, Why::Done);
        }
        self.disarm(key, TimerKind::Header);
        self.disarm(key, TimerKind::Idle);
        if !self.arm(key, TimerKind::Linger, LINGER) {
            self.close(key, Why::Done);
        }
    }

    /// Removes the connection, cancels its timers and closes its socket.
    fn close(&mut self, key: Key, why: Why) {
        let Some(conn) = self.conns.remove(key) else {
            return;
        };
        for armed in [conn.idle, conn.header].into_iter().flatten() {
            self.base.cancel(armed.handle);
        }
        self.counters.add(Count::Closed, 1);
        match why {
            Why::Peer => self.counters.add(Count::PeerClose, 1),
            Why::Idle => self.counters.add(Count::IdleClose, 1),
            Why::Header => self.counters.add(Count::HeaderClose, 1),
            Why::Shutdown => self.closed_at_shutdown += 1,
            Why::Done | Why::NoTimer => {}
        }
        drop(conn); // closing the socket also removes it from the epoll set
        self.resume_accepting();
    }
}

/// Feeds newly read bytes to the parser, keeping any incomplete request in `conn.input`.
fn take_requests(conn: &mut Conn, fresh: &[u8], date: &[u8; DATE_LEN]) -> Outcome {
    if conn.input.is_empty() {
        let outcome = http::process(fresh, &mut conn.output, date);
        if !outcome.close {
            conn.input.extend_from_slice(&fresh[outcome.consumed..]);
        }
        return outcome;
    }
    conn.input.extend_from_slice(fresh);
    let outcome = http::process(&conn.input, &mut conn.output, date);
    if outcome.close {
        conn.input.clear();
    } else {
        conn.input.drain(..outcome.consumed);
    }
    outcome
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

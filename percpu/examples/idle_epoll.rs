//! An echo server with a per-connection idle timeout, on raw epoll: one base in your own loop.
//!
//! Each connection gets an idle timer on the base, pushed back on every read (one store, no
//! syscall); when it fires, the connection is closed. The base's fd sits in the same epoll set as
//! the sockets, and the loop turns the base when it is readable.
//!
//! Edge-triggered readiness (`EPOLLET`) is safe on the base's fd provided every report is
//! followed by a `turn`: a turn leaves no work behind without an event on its way (it re-arms its
//! timerfd at the next expiry, which is an event when that is already past, and kicks its own
//! eventfd when another thread's notice arrived during the turn), so nothing waits for an edge
//! that never comes. This program registers the base edge-triggered and the sockets
//! level-triggered. The epoll calls themselves are in `keepalive/server/sys.rs`.
//!
//! `cargo run -p tickwheel-percpu --example idle_epoll` runs a self-check (a chatty client that
//! must never be closed while it talks, a silent one that must be, neither before its timeout);
//! `-- --listen 127.0.0.1:8080` serves until killed (try `nc 127.0.0.1 8080`).

#[path = "common/mod.rs"]
#[allow(dead_code, reason = "the examples' shared helpers; this uses one")]
mod common;
#[path = "keepalive/server/sys.rs"]
#[allow(dead_code, reason = "the keepalive server's syscalls; this uses a few")]
mod sys;

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::thread;
use std::time::{Duration, Instant};

use tickwheel_percpu::{Config, Handle};

const BASE: u64 = u64::MAX; // epoll token of the base; a socket's token is its fd
const LISTENER: u64 = u64::MAX - 1;

struct Conn {
    stream: TcpStream,
    idle: Handle,
}

/// Serves until `stop_after` idle closes (forever with `None`); returns how many there were.
fn serve(listener: &TcpListener, timeout: Duration, stop_after: Option<u64>) -> io::Result<u64> {
    let mut epoll = sys::Epoll::new(64)?;
    // The payload of a connection's timer is its fd: a closed connection's timer is cancelled
    // before the fd can be reused, so a payload never names the wrong connection.
    let mut base = tickwheel_percpu::base::<RawFd>(Config::default())?;
    epoll.add(base.fd(), sys::READABLE | libc::EPOLLET as u32, BASE)?;
    epoll.add(listener.as_raw_fd(), sys::READABLE, LISTENER)?;
    let mut conns: HashMap<RawFd, Conn> = HashMap::new();
    let (mut events, mut closed, mut buf) = (Vec::new(), 0, [0u8; 4096]);
    while stop_after.is_none_or(|n| closed < n) {
        epoll.wait(&mut events, -1)?;
        for ev in &events {
            match ev.token {
                BASE => {
                    base.turn(|fd| {
                        conns.remove(&fd); // dropping the stream closes it
                        closed += 1;
                    });
                }
                LISTENER => loop {
                    let stream = match sys::accept_nonblocking(listener) {
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        other => other?,
                    };
                    let fd = stream.as_raw_fd();
                    let idle = base.schedule_after(timeout, fd).map_err(io::Error::other)?;
                    epoll.add(fd, sys::READABLE, fd as u64)?;
                    conns.insert(fd, Conn { stream, idle });
                },
                token => {
                    let fd = token as RawFd;
                    let Some(conn) = conns.get_mut(&fd) else {
                        continue;
                    };
                    match conn.stream.read(&mut buf) {
                        Ok(n) if n > 0 => {
                            base.reset_after(conn.idle, timeout); // keepalive refresh
                            let _ = conn.stream.write_all(&buf[..n]); // a full buffer: drop it
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        _ => {
                            // The peer left (or failed): the timer must never fire.
                            let conn = conns.remove(&fd).expect("looked up above");
                            assert!(base.cancel(conn.idle), "a pending timer cancels");
                        }
                    }
                }
            }
        }
    }
    Ok(closed)
}

/// A client that sends a line every `gap`, `lines` times, then stays silent until closed.
/// Returns how long after its last line the server closed it.
fn client(addr: SocketAddr, lines: u32, gap: Duration) -> io::Result<Duration> {
    let mut stream = TcpStream::connect(addr)?;
    let mut echo = [0u8; 5];
    let mut last = Instant::now();
    for _ in 0..lines {
        thread::sleep(gap);
        stream.write_all(b"ping\n")?;
        last = Instant::now();
        stream.read_exact(&mut echo)?; // closed while active would fail here
    }
    let n = stream.read(&mut echo)?;
    assert_eq!(n, 0, "only a close ends the wait");
    Ok(last.elapsed())
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, addr] = &args[..]
        && flag == "--listen"
    {
        let addr: SocketAddr = addr.parse().map_err(io::Error::other)?;
        let listener = common::listen_reuseport(addr, 1024)?;
        println!("echo with a 5 s idle timeout on {addr}");
        return serve(&listener, Duration::from_secs(5), None).map(drop);
    }
    let timeout = Duration::from_millis(200);
    let listener = common::listen_reuseport("127.0.0.1:0".parse().unwrap(), 16)?;
    let addr = listener.local_addr()?;
    let chatty = thread::spawn(move || client(addr, 8, timeout / 4));
    let silent = thread::spawn(move || client(addr, 1, Duration::ZERO));
    assert_eq!(serve(&listener, timeout, Some(2))?, 2);
    for (name, c) in [("chatty", chatty), ("silent", silent)] {
        let after = c.join().expect("client thread")?;
        println!("{name} client: closed {after:?} after its last line (timeout {timeout:?})");
        assert!(after >= timeout, "{name}: closed early");
    }
    Ok(())
}

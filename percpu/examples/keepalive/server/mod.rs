//! A thread-per-core HTTP/1.1 keep-alive server whose connection timeouts live on tickwheel's
//! per-core timer bases.
//!
//! Model: [`Server::start`] enumerates the CPUs this process may run on, opens one `SO_REUSEPORT`
//! listener per chosen CPU (the first binds the requested address, possibly port 0; the others
//! bind the port it got), creates one timer base per CPU, and starts one worker thread per CPU,
//! pinned to it. Each worker runs its own epoll loop over its listener, its connections, its
//! base's timer fd and a shared stop flag (see `worker`). The kernel spreads new connections
//! across the listeners, and a connection stays on the core that accepted it for its whole life,
//! so every timer a connection arms, resets or cancels is on its own core's base: nothing crosses
//! cores on the request path.
//!
//! Shutdown: [`Server::shutdown`] (or drop) raises the stop flag, which wakes every loop; each
//! worker closes its connections, cancels their timers and hands back a [`CoreReport`].
//!
//! Given up: connection migration between cores, TLS, request bodies (see `http`).

#[path = "../../common/mod.rs"]
pub(crate) mod common;
pub(crate) mod conn;
pub(crate) mod date;
pub(crate) mod http;
pub(crate) mod stats;
pub(crate) mod sys;
mod worker;

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tickwheel_percpu::Mode;

use self::stats::{CoreReport, Counters, Snapshot};
use self::sys::StopFlag;

/// Listen backlog of each per-core listener.
const BACKLOG: i32 = 4096;

/// How the server is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    /// Address to listen on; port 0 picks a free port (see [`Server::local_addr`]).
    pub(crate) listen: SocketAddr,
    /// Number of cores (one pinned worker each); `None` uses every CPU this process may run on.
    pub(crate) cores: Option<usize>,
    /// Keep-alive idle timeout, reset on every request.
    pub(crate) idle_timeout: Duration,
    /// Longest time a request head may take to arrive once it has started.
    pub(crate) header_timeout: Duration,
    /// Timer wheel mode of the bases.
    pub(crate) mode: Mode,
}

/// Why the server could not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The CPUs this process may run on could not be listed.
    NoCores,
    /// More cores were asked for than this process may run on.
    TooManyCores {
        /// Cores asked for.
        asked: usize,
        /// CPUs available.
        available: usize,
    },
    /// A worker could not be pinned to its CPU.
    Pin {
        /// The CPU id that refused the pin.
        cpu: usize,
    },
    /// A system call failed while setting up.
    Io(io::Error),
}

impl StartError {
    /// True when the failure is a thread that could not be pinned.
    #[allow(dead_code, reason = "used by some includers of this module only")]
    pub(crate) fn is_pin(&self) -> bool {
        matches!(self, StartError::Pin { .. })
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NoCores => f.write_str("could not list the CPUs this process may use"),
            StartError::TooManyCores { asked, available } => {
                write!(
                    f,
                    "asked for {asked} cores but only {available} are available"
                )
            }
            StartError::Pin { cpu } => write!(f, "could not pin a worker thread to CPU {cpu}"),
            StartError::Io(e) => write!(f, "setting up the server failed: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<io::Error> for StartError {
    fn from(e: io::Error) -> Self {
        StartError::Io(e)
    }
}

/// A running server; stops (and joins its threads) on [`Server::shutdown`] or drop.
#[derive(Debug)]
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Arc<StopFlag>,
    counters: Vec<Arc<Counters>>,
    cpus: Vec<usize>,
    threads: Vec<JoinHandle<io::Result<CoreReport>>>,
}

impl Server {
    /// Starts one pinned worker per core; returns once every worker is pinned and listening.
    pub(crate) fn start(config: Config) -> Result<Server, StartError> {
        let cpus = choose_cpus(config.cores)?;
        let listeners = open_listeners(config.listen, cpus.len())?;
        let addr = listeners[0].local_addr()?;
        let base_config = tickwheel_percpu::Config::default().mode(config.mode);
        let (bases, _remote) = tickwheel_percpu::bases(cpus.len(), base_config)?;
        let stop = Arc::new(StopFlag::new()?);
        let mut server = Server {
            addr,
            stop,
            counters: Vec::new(),
            cpus: cpus.iter().map(|c| c.id).collect(),
            threads: Vec::new(),
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        let parts = cpus.into_iter().zip(listeners).zip(bases).enumerate();
        for (index, ((cpu, listener), base)) in parts {
            let counters = Arc::new(Counters::default());
            server.counters.push(Arc::clone(&counters));
            let setup = worker::Setup {
                index,
                cpu,
                listener,
                base,
                counters,
                stop: Arc::clone(&server.stop),
                idle_timeout: config.idle_timeout,
                header_timeout: config.header_timeout,
                ready: ready_tx.clone(),
            };
            server.threads.push(worker::spawn(setup)?);
        }
        drop(ready_tx);
        server.await_ready(&ready_rx)?;
        Ok(server)
    }

    /// Waits for one readiness message per worker; the first failure stops everything.
    fn await_ready(
        &self,
        ready: &mpsc::Receiver<Result<(), StartError>>,
    ) -> Result<(), StartError> {
        for _ in 0..self.threads.len() {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(io::Error::other("a worker exited during start-up").into()),
            }
        }
        Ok(())
    }

    /// The address the server listens on (with the real port when 0 was asked for).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CPU each worker is pinned to, by worker index.
    #[allow(dead_code, reason = "used by some includers of this module only")]
    pub(crate) fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Live counters of each core.
    pub(crate) fn snapshot(&self) -> Vec<Snapshot> {
        self.counters.iter().map(|c| c.snapshot()).collect()
    }

    /// Stops every worker, waits for them, and returns their reports (ordered by core).
    pub(crate) fn shutdown(mut self) -> io::Result<Vec<CoreReport>> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> io::Result<Vec<CoreReport>> {
        let raised = self.stop.raise();
        let mut reports = Vec::new();
        let mut first_error = raised.err();
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(Ok(report)) => reports.push(report),
                Ok(Err(e)) => first_error = first_error.or(Some(e)),
                Err(_) => first_error = first_error.or(Some(io::Error::other("a worker panicked"))),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(reports),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            // Errors cannot be reported from drop; `shutdown` is the way to see them.
            let _ = self.stop_and_join();
        }
    }
}

/// The CPUs to run on: the first `cores` of those this process may use.
fn choose_cpus(cores: Option<usize>) -> Result<Vec<core_affinity::CoreId>, StartError> {
    let all = core_affinity::get_core_ids().ok_or(StartError::NoCores)?;
    let available = all.len();
    let asked = cores.unwrap_or(available);
    if available == 0 {
        return Err(StartError::NoCores);
    }
    if asked == 0 || asked > available {
        return Err(StartError::TooManyCores { asked, available });
    }
    Ok(all.into_iter().take(asked).collect())
}

/// Opens `n` listeners on one port: the first on `addr`, the rest on the port the first got.
fn open_listeners(addr: SocketAddr, n: usize) -> io::Result<Vec<TcpListener>> {
    let first = common::listen_reuseport(addr, BACKLOG)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..n {
        listeners.push(common::listen_reuseport(bound, BACKLOG)?);
    }
    Ok(listeners)
}

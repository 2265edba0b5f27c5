//! The Linux system calls the server makes, each wrapped once.
//!
//! Model: every raw call goes through [`cvt`], which turns the C convention (a `-1` return and
//! `errno`) into `io::Result`, so the rest of the server never sees a `-1`. Every descriptor that a
//! call creates is wrapped in an `OwnedFd` (or a std type built on one) at once, so it is closed
//! when dropped and nothing leaks on an early return.
//!
//! Given up: only what the server needs is here: epoll in level-triggered mode, an eventfd used as
//! a stop flag that wakes every loop, a non-blocking `accept4`, and raising `RLIMIT_NOFILE` (the
//! listening socket is `common::listen_reuseport`, on socket2). Portability beyond Linux is not attempted.

use std::io;
use std::mem;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns a C-style return value (`-1` on failure, with `errno` set) into an `io::Result`; the
/// same rule as the crate's own wrapper.
pub(crate) fn cvt<T: PartialEq + From<i8>>(ret: T) -> io::Result<T> {
    if ret == T::from(-1) {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Wraps a descriptor freshly returned by the kernel so it is closed on drop.
pub(crate) fn owned(fd: RawFd) -> OwnedFd {
    debug_assert!(fd >= 0, "owned() takes a valid descriptor, got {fd}");
    // SAFETY: `fd` was just returned by a successful syscall, so it is open and owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Interest in readability.
pub(crate) const READABLE: u32 = libc::EPOLLIN as u32;
/// Interest in writability.
pub(crate) const WRITABLE: u32 = libc::EPOLLOUT as u32;
/// Reported (never requested): an error or a hang-up on the descriptor.
pub(crate) const HANG_UP: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;

/// An epoll instance (level-triggered) with its own buffer for reported events.
pub(crate) struct Epoll {
    fd: OwnedFd,
    buffer: Vec<libc::epoll_event>,
}

impl std::fmt::Debug for Epoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoll").field("fd", &self.fd).finish()
    }
}

/// One readiness report: the token given at registration and the ready flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    /// The token the descriptor was registered with.
    pub(crate) token: u64,
    /// `EPOLLIN`, `EPOLLOUT`, `EPOLLERR`, `EPOLLHUP`, ... as reported.
    pub(crate) flags: u32,
}

impl Epoll {
    /// Creates an epoll instance with close-on-exec that reports at most `max_events` per wait.
    pub(crate) fn new(max_events: usize) -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; the flag is a valid constant.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        let empty = libc::epoll_event { events: 0, u64: 0 };
        Ok(Epoll {
            fd: owned(fd),
            buffer: vec![empty; max_events.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event that outlives the call; the kernel only reads it.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// Registers `fd` with the given interest; events for it carry `token`.
    pub(crate) fn add(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest, token)
    }

    /// Changes the interest of a registered `fd`.
    pub(crate) fn modify(&self, fd: RawFd, interest: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest, token)
    }

    /// Waits for readiness; fills `out` (cleared first) with the events reported.
    /// `timeout_ms < 0` waits without limit. An interrupted wait returns no events.
    pub(crate) fn wait(&mut self, out: &mut Vec<Event>, timeout_ms: i32) -> io::Result<()> {
        out.clear();
        let max = self.buffer.len().min(libc::c_int::MAX as usize);
        // SAFETY: `buffer` holds `max` initialised epoll_event values that live across the
        // call; the kernel writes at most `max` of them.
        let ret = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.buffer.as_mut_ptr(),
                max as libc::c_int,
                timeout_ms,
            )
        };
        let n = match cvt(ret) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        out.extend(self.buffer[..n].iter().map(|ev| Event {
            token: ev.u64,
            flags: ev.events,
        }));
        Ok(())
    }
}

/// An eventfd used as a level-triggered "stop" flag: once notified it stays readable, so every
/// epoll set it is registered in wakes up, and keeps waking up, until the owners exit.
#[derive(Debug)]
pub(crate) struct StopFlag {
    fd: OwnedFd,
}

impl StopFlag {
    /// Creates the (unset) flag.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; the flags are valid constants.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        Ok(StopFlag { fd: owned(fd) })
    }

    /// Sets the flag (idempotent).
    pub(crate) fn raise(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, the exact size an eventfd expects.
        let ret = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&raw const one).cast::<libc::c_void>(),
                mem::size_of::<u64>(),
            )
        };
        cvt(ret)?;
        Ok(())
    }
}

impl AsRawFd for StopFlag {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Accepts one connection as a non-blocking, close-on-exec socket (one syscall: `accept4`).
/// Returns `WouldBlock` when the queue is empty.
pub(crate) fn accept_nonblocking(listener: &TcpListener) -> io::Result<TcpStream> {
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: null address pointers are allowed by accept4 and mean "peer address not wanted".
    let fd = cvt(unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        )
    })?;
    Ok(TcpStream::from(owned(fd)))
}

/// The open-file limit before and after [`raise_nofile_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NofileLimit {
    /// Soft limit found at start.
    pub(crate) before: u64,
    /// Soft limit now in force (the hard limit, unless raising failed).
    pub(crate) after: u64,
}

fn get_nofile() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live rlimit the kernel writes into.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok(lim)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (as far as an unprivileged process may).
pub(crate) fn raise_nofile_limit() -> io::Result<NofileLimit> {
    let lim = get_nofile()?;
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a live rlimit the kernel only reads.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) })?;
    }
    let after = get_nofile()?.rlim_cur;
    Ok(NofileLimit {
        before: before as u64,
        after: after as u64,
    })
}

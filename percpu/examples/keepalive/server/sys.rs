//! The Linux system calls the server makes, each wrapped once.
//!
//! Model: every raw call goes through [`cvt`], which turns the C convention (a negative return and
//! `errno`) into `io::Result`, so the rest of the server never sees a `-1`. Every descriptor that a
//! call creates is wrapped in an `OwnedFd` (or a std type built on one) at once, so it is closed
//! when dropped and nothing leaks on an early return.
//!
//! Given up: only what the server needs is here: epoll in level-triggered mode, an eventfd used as
//! a stop flag that wakes every loop, a listening socket with `SO_REUSEPORT`, a non-blocking
//! `accept4`, and raising `RLIMIT_NOFILE`. Portability beyond Linux is not attempted.

use std::io;
use std::mem;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turns a C-style return value (negative on failure, with `errno` set) into an `io::Result`.
pub(crate) fn cvt<T: Copy + PartialOrd + Default>(ret: T) -> io::Result<T> {
    if ret < T::default() {
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

/// Builds the C socket address for `addr`; returns storage and its length.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data for which all-zero bytes are a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn set_flag(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: passes a pointer to a live c_int and its exact size; the kernel only reads it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const on).cast::<libc::c_void>(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(ret)?;
    Ok(())
}

/// Opens a non-blocking listening socket on `addr` with `SO_REUSEADDR` and `SO_REUSEPORT`, so
/// several listeners (one per core) can share one port and the kernel spreads connections.
pub(crate) fn listen_reuseport(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: socket takes no pointers; the arguments are valid constants.
    let fd = owned(cvt(unsafe { libc::socket(family, kind, 0) })?);
    set_flag(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR)?;
    set_flag(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT)?;
    let (storage, len) = sockaddr_of(addr);
    // SAFETY: `storage` holds a valid socket address of `len` bytes and outlives the call.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const storage).cast::<libc::sockaddr>(),
            len,
        )
    })?;
    // SAFETY: listen takes no pointers; `fd` is an open socket.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(TcpListener::from(fd))
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

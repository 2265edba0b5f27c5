//! The syscalls a shared timer set needs, each wrapped once: shared mappings, files, process
//! liveness and futexes, and for the owner's fd a timerfd, an eventfd and an epoll instance.
//!
//! Every wrapper turns a `-1` return into `io::Error::last_os_error()` through [`cvt`] (the
//! pattern mio uses), takes and returns owned or borrowed fds, and carries the `// SAFETY:`
//! argument for its one `unsafe` block. Nothing else in the crate calls `libc`. It also counts
//! forks ([`forks`]), so a client can tell that it is a copy a `fork` child inherited.
//!
//! All fds are created non-blocking and close-on-exec.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Turns a `-1` syscall return into the thread's `errno` as an `io::Error`.
fn cvt<T: PartialEq + From<i8>>(ret: T) -> io::Result<T> {
    if ret == T::from(-1) {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Nanoseconds since the clock's zero, from `clock_gettime` (a vDSO call on Linux).
pub(crate) fn clock_ns(clock: libc::clockid_t) -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    cvt(unsafe { libc::clock_gettime(clock, &mut ts) })?;
    Ok(timespec_to_ns(ts))
}

fn timespec_to_ns(ts: libc::timespec) -> u64 {
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn ns_to_timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// A non-blocking timerfd on `clock`.
pub(crate) fn timerfd_create(clock: libc::clockid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant flags; no pointers.
    let fd = cvt(unsafe { libc::timerfd_create(clock, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms `fd` to expire once at the absolute clock time `at_ns`, or disarms it for `None`.
/// Setting the time also clears a pending expiration, so the fd stops being readable.
pub(crate) fn timerfd_set_abs(fd: BorrowedFd<'_>, at_ns: Option<u64>) -> io::Result<()> {
    // A zero it_value disarms, so an (impossible in practice) absolute time of 0 becomes 1 ns.
    let value = at_ns.map_or(ns_to_timespec(0), |ns| ns_to_timespec(ns.max(1)));
    let spec = libc::itimerspec {
        it_interval: ns_to_timespec(0),
        it_value: value,
    };
    // SAFETY: `spec` is a valid itimerspec, the old-value pointer may be null, `fd` is a live fd.
    cvt(unsafe {
        libc::timerfd_settime(
            fd.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        )
    })?;
    Ok(())
}

/// A non-blocking eventfd with counter 0.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant flags; no pointers.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to the eventfd counter, making it readable.
pub(crate) fn eventfd_kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: the buffer is 8 readable bytes, as eventfd requires; `fd` is a live fd.
    cvt(unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) })?;
    Ok(())
}

/// Reads and resets the eventfd counter; 0 if it was already 0.
pub(crate) fn eventfd_take(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut count: u64 = 0;
    // SAFETY: the buffer is 8 writable bytes, as eventfd requires; `fd` is a live fd.
    match cvt(unsafe { libc::read(fd.as_raw_fd(), (&raw mut count).cast(), 8) }) {
        Ok(_) => Ok(count),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// A new epoll instance.
pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with a constant flag; no pointers.
    let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Registers `fd` for level-triggered readability in `epoll`.
pub(crate) fn epoll_add(epoll: BorrowedFd<'_>, fd: RawFd, token: u64) -> io::Result<()> {
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: token,
    };
    // SAFETY: `event` is a valid epoll_event for the call; both fds are live.
    cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) })?;
    Ok(())
}

/// Blocks until something in `epoll` is readable or `timeout_ms` passes (-1: no limit).
/// Returns how many fds were ready; an interrupted wait counts as 0.
pub(crate) fn epoll_wait(epoll: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<usize> {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    // SAFETY: `events` is a writable array of 4 entries and we pass 4 as its length.
    match cvt(unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), 4, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

// ---- Shared memory, files and processes ----

#[cfg_attr(loom, allow(dead_code, reason = "loom builds keep a set in a vector"))]
/// A `MAP_SHARED` read-write mapping of `len` bytes: of `fd` from offset 0, or anonymous (shared
/// with children across `fork`) for `None`. Returns the base address.
pub(crate) fn mmap_shared(fd: Option<BorrowedFd<'_>>, len: usize) -> io::Result<*mut u8> {
    let (flags, raw) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
        None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
    };
    // SAFETY: a fresh mapping at an address the kernel chooses; no existing memory is touched.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            raw,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(ptr.cast())
    }
}

#[cfg_attr(loom, allow(dead_code, reason = "loom builds keep a set in a vector"))]
/// Unmaps a mapping made by [`mmap_shared`].
///
/// # Safety
/// `ptr`/`len` are exactly one mapping returned by [`mmap_shared`], and nothing refers to its
/// memory any more.
pub(crate) unsafe fn munmap(ptr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is one live mapping nobody uses any more.
    cvt(unsafe { libc::munmap(ptr.cast(), len) })?;
    Ok(())
}

#[cfg_attr(loom, allow(dead_code, reason = "loom builds keep a set in a vector"))]
/// Writes a mapping's dirty pages back to its file and waits (`msync(MS_SYNC)`).
///
/// # Safety
/// `ptr`/`len` lie inside one live mapping.
pub(crate) unsafe fn msync(ptr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is mapped; msync reads no memory of ours.
    cvt(unsafe { libc::msync(ptr.cast(), len, libc::MS_SYNC) })?;
    Ok(())
}

/// A close-on-exec memfd named `name` (the name only shows in `/proc/<pid>/fd`) that accepts
/// seals ([`seal_shrink`]).
pub(crate) fn memfd_create(name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is a valid NUL-terminated string for the duration of the call.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), flags) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Seals a memfd against shrinking (`F_SEAL_SHRINK`): from now on no holder of the fd can cut
/// pages from under a mapping.
pub(crate) fn seal_shrink(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain fcntl on a live fd; no pointers.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) })?;
    Ok(())
}

/// Sets the size of the file behind `fd`.
pub(crate) fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "size too large"))?;
    // SAFETY: plain syscall on a live fd; no pointers.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(())
}

/// The size in bytes of the file behind `fd` (`fstat`).
pub(crate) fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: all-zero is a valid `stat` value (plain integers).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat buffer for the call; `fd` is a live fd.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size as u64)
}

/// Creates `path` read-write with `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC` and permission
/// bits `mode` (before the umask): fails if anything, a symlink included, is already there.
pub(crate) fn open_create_excl(path: &std::ffi::CStr, mode: u32) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated and lives for the call; the mode is passed as the variadic
    // argument O_CREAT requires.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens an existing `path` read-write with `O_NOFOLLOW | O_CLOEXEC`.
pub(crate) fn open_existing(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated and lives for the call.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Forks of this process and its ancestors seen since [`watch_forks`] first ran: a `fork` child
/// handler adds one, in the child, before any of its code runs. Not part of any shared protocol,
/// hence std's atomic.
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_fork() {
    // Relaxed: the child's one thread runs this before anything else; threads it starts later
    // see it through their spawn.
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Makes [`forks`] count the forks from now on (once per process; later calls do nothing), and
/// says whether it does: false if `pthread_atfork` failed (out of memory), and then for good.
pub(crate) fn watch_forks() -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static WATCHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    ONCE.call_once(|| {
        // SAFETY: registers a child handler that only adds to an atomic (async-signal-safe, as a
        // fork child handler must be); no prepare or parent handler.
        let ret = unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
        // Relaxed: `call_once` orders this store before every caller's load below.
        WATCHING.store(ret == 0, std::sync::atomic::Ordering::Relaxed);
    });
    WATCHING.load(std::sync::atomic::Ordering::Relaxed)
}

/// The forks counted so far (see [`watch_forks`]): a value read before a `fork` differs in the
/// child, so a copy of a process's state that a child inherited can be told apart cheaply (one
/// load, where `getpid` is a system call).
#[inline]
pub(crate) fn forks() -> u64 {
    // Relaxed: see `count_fork`.
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// True unless `kill(pid, 0)` says there is no such process (`ESRCH`). A process we may not
/// signal (`EPERM`) exists.
pub(crate) fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission; nothing is delivered.
    let ret = unsafe { libc::kill(pid, 0) };
    ret == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg_attr(
    loom,
    allow(dead_code, reason = "loom models have no kernel to sleep in")
)]
/// `FUTEX_WAIT` (process-shared: no `FUTEX_PRIVATE_FLAG`) on the 32-bit word at `addr` while it
/// holds `expected`, for at most `timeout_ns` (`None`: no limit). Returns when woken, on a
/// timeout, on a signal, or at once if the word differs.
///
/// # Safety
/// `addr` is 4-byte aligned and stays mapped for the call.
pub(crate) unsafe fn futex_wait(addr: *const u32, expected: u32, timeout_ns: Option<u64>) {
    let ts = timeout_ns.map(ns_to_timespec);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: the caller guarantees `addr` is a mapped, aligned word; `ts_ptr` is null or points
    // at a live timespec. Errors (EAGAIN, ETIMEDOUT, EINTR) all mean "look again".
    unsafe {
        libc::syscall(libc::SYS_futex, addr, libc::FUTEX_WAIT, expected, ts_ptr);
    }
}

#[cfg_attr(
    loom,
    allow(dead_code, reason = "loom models have no kernel to sleep in")
)]
/// `FUTEX_WAKE` (process-shared) of up to `n` waiters on the 32-bit word at `addr`.
///
/// # Safety
/// `addr` is 4-byte aligned and stays mapped for the call.
pub(crate) unsafe fn futex_wake(addr: *const u32, n: i32) {
    // SAFETY: the caller guarantees `addr` is a mapped, aligned word; FUTEX_WAKE reads nothing else.
    unsafe {
        libc::syscall(libc::SYS_futex, addr, libc::FUTEX_WAKE, n);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn timespec_round_trips() {
        for ns in [0, 1, 999_999_999, 1_000_000_000, 123_456_789_012] {
            assert_eq!(timespec_to_ns(ns_to_timespec(ns)), ns);
        }
    }

    #[test]
    fn cvt_maps_minus_one_to_error() {
        assert!(cvt(-1i32).is_err());
        assert_eq!(cvt(3i32).unwrap(), 3);
    }

    #[test]
    fn eventfd_counts_kicks() {
        let fd = eventfd().unwrap();
        assert_eq!(eventfd_take(fd.as_fd()).unwrap(), 0);
        eventfd_kick(fd.as_fd()).unwrap();
        eventfd_kick(fd.as_fd()).unwrap();
        assert_eq!(eventfd_take(fd.as_fd()).unwrap(), 2);
    }

    #[test]
    fn nested_readiness_through_epoll() {
        let ep = epoll_create().unwrap();
        let ev = eventfd().unwrap();
        epoll_add(ep.as_fd(), ev.as_raw_fd(), 1).unwrap();
        assert_eq!(epoll_wait(ep.as_fd(), 0).unwrap(), 0);
        eventfd_kick(ev.as_fd()).unwrap();
        assert_eq!(epoll_wait(ep.as_fd(), 0).unwrap(), 1);
        eventfd_take(ev.as_fd()).unwrap();
        assert_eq!(epoll_wait(ep.as_fd(), 0).unwrap(), 0);
    }

    #[test]
    fn timerfd_absolute_expiry_in_the_past_is_ready() {
        let ep = epoll_create().unwrap();
        let tfd = timerfd_create(libc::CLOCK_MONOTONIC).unwrap();
        epoll_add(ep.as_fd(), tfd.as_raw_fd(), 2).unwrap();
        timerfd_set_abs(tfd.as_fd(), Some(1)).unwrap();
        assert_eq!(epoll_wait(ep.as_fd(), 1000).unwrap(), 1);
        timerfd_set_abs(tfd.as_fd(), None).unwrap();
        assert_eq!(
            epoll_wait(ep.as_fd(), 0).unwrap(),
            0,
            "re-arming clears readiness"
        );
    }
}

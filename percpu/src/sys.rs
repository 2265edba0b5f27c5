//! The syscalls the crate needs (the driver's, and one hint for the slot table), each wrapped
//! once.
//!
//! Every wrapper turns a `-1` return into `io::Error::last_os_error()` through [`cvt`] (the
//! pattern mio uses), takes and returns owned or borrowed fds, and carries the `// SAFETY:`
//! argument for its one `unsafe` block. Nothing else in the crate calls `libc`.
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

/// A huge page, the unit [`advise_huge_pages`] rounds to.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The huge pages wholly inside `[start, start + len)`, as `(first byte, bytes)`; `None` if the
/// range holds none.
#[cfg_attr(loom, allow(dead_code))]
fn huge_page_span(start: usize, len: usize) -> Option<(usize, usize)> {
    let from = start.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
    let to = start.checked_add(len)? / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    (to > from).then(|| (from, to - from))
}

/// Asks the kernel to back the huge pages wholly inside `[start, start + len)` with huge pages
/// when they are first touched (`madvise(MADV_HUGEPAGE)`). A hint: where transparent huge pages
/// are off, or the call fails, the memory stays as it was, so the result is ignored.
#[cfg_attr(loom, allow(dead_code))]
fn advise_huge_pages(start: *mut u8, len: usize) {
    if let Some((from, bytes)) = huge_page_span(start as usize, len) {
        // SAFETY: `[from, from + bytes)` lies inside `[start, start + len)`, memory the caller
        // owns; `MADV_HUGEPAGE` changes how the kernel backs those pages, never their contents
        // or the mapping.
        let _ = unsafe { libc::madvise(from as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE) };
    }
}

/// Zeroed memory in a private anonymous mapping of its own, its whole huge pages advised
/// ([`advise_huge_pages`]); unmapped when dropped.
///
/// A mapping of its own, not the allocator's memory: the hint stays with the pages it names, and
/// an allocator that reused them after a free would hand them on to allocations that did not ask
/// for huge pages.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) struct Mapping {
    start: std::ptr::NonNull<u8>,
    bytes: usize,
}

#[cfg_attr(loom, allow(dead_code))]
impl Mapping {
    /// `bytes` (more than 0) of zeroed memory starting on a huge-page boundary; `None` if the
    /// kernel refuses it.
    ///
    /// The kernel does not always start a mapping on a huge-page boundary, and only whole huge
    /// pages can be advised, so this maps one huge page more than asked and unmaps the unaligned
    /// head and the rest of the tail.
    pub(crate) fn zeroed(bytes: usize) -> Option<Mapping> {
        // SAFETY: `sysconf` reads a constant of the system; no memory is involved.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let total = bytes.checked_add(HUGE_PAGE_BYTES)?;
        let kept = bytes.checked_next_multiple_of(page)?;
        // SAFETY: a fresh private anonymous mapping, at an address the kernel picks: it aliases
        // nothing, and no fd is involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let raw = p as usize;
        // `raw` is page-aligned, so the boundary is at most a huge page less a page past it, and
        // `kept` is less than `bytes` plus a page: both trimmed ends lie inside the mapping.
        let start = raw.next_multiple_of(HUGE_PAGE_BYTES);
        let (head, tail) = (start - raw, raw + total - (start + kept));
        // SAFETY: `[raw, start)` and `[start + kept, raw + total)` are page-aligned parts of the
        // mapping just made, which nothing references yet.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + kept) as *mut libc::c_void, tail);
            }
        }
        let start = std::ptr::NonNull::new(start as *mut u8)?;
        advise_huge_pages(start.as_ptr(), kept);
        Some(Mapping { start, bytes: kept })
    }

    /// The first byte; the mapping's `bytes` follow it, zeroed until written.
    pub(crate) fn start(&self) -> std::ptr::NonNull<u8> {
        self.start
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is this value's alone, made by `zeroed` with these bytes and
        // unmapped only here; whoever reads through `start` holds a borrow of its owner, which
        // ends before this drop.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.bytes) };
    }
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
    fn the_huge_page_span_is_the_whole_huge_pages_inside_the_range() {
        const H: usize = HUGE_PAGE_BYTES;
        assert_eq!(huge_page_span(0, H), Some((0, H)));
        assert_eq!(huge_page_span(H, 3 * H), Some((H, 3 * H)));
        // A start past a boundary skips to the next; an end before one stops at the last.
        assert_eq!(huge_page_span(16, 3 * H), Some((H, 2 * H)));
        assert_eq!(huge_page_span(H + 16, 3 * H - 32), Some((2 * H, H)));
        // Less than a whole huge page, aligned or not: none.
        assert_eq!(huge_page_span(0, H - 1), None);
        assert_eq!(huge_page_span(16, 2 * H - 32), None);
        assert_eq!(huge_page_span(H, 0), None);
        // At the top of the address space: no overflow, none.
        assert_eq!(huge_page_span(usize::MAX - 10, 5), None);
        assert_eq!(huge_page_span(usize::MAX - H, H), None);
    }

    #[test]
    fn a_mapping_reads_zero_takes_writes_and_goes() {
        // The hint must never change the memory: a fresh mapping reads zero everywhere, keeps
        // what is written, and is unmapped when dropped.
        let bytes = 5 * HUGE_PAGE_BYTES + 4096;
        let map = Mapping::zeroed(bytes).expect("mmap of 10 MiB");
        assert_eq!(
            map.start().as_ptr() as usize % HUGE_PAGE_BYTES,
            0,
            "starts on a huge page"
        );
        // SAFETY: the mapping holds `bytes` bytes and lives to the end of this block.
        let s = unsafe { std::slice::from_raw_parts_mut(map.start().as_ptr(), bytes) };
        assert!(s.iter().step_by(4096).all(|&b| b == 0));
        s[bytes - 1] = 7;
        s[HUGE_PAGE_BYTES] = 9;
        assert_eq!((s[bytes - 1], s[HUGE_PAGE_BYTES], s[0]), (7, 9, 0));
        drop(map);
        assert!(
            Mapping::zeroed(usize::MAX / 2).is_none(),
            "an impossible size is refused"
        );
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

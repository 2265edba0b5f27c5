//! The base's driver: one fd for any loop, and the owner's wake-up bookkeeping, in a type of its
//! own ([`Driver`]) that the base owns and calls at the start and end of each turn, when it files
//! a timer, and to park; it is tested alone below.
//!
//! `fd()` is an epoll fd holding a timerfd (armed with an ABSOLUTE deadline at the wheel's next
//! expiry, re-armed only when that changes) and an eventfd (kicked by remote producers when the
//! owner may be asleep). Any loop (epoll, mio, a runtime's reactor) can register it: epoll fds
//! nest, and the outer loop sees it readable while either inner fd is. Both inner fds are
//! level-triggered, so `turn` must clear them: it re-arms the timerfd whenever the armed time has
//! passed (`timerfd_settime` clears a pending expiry) and reads the eventfd only when a kick is
//! owed, so a turn with nothing to do makes no syscall besides the vDSO clock read.
//!
//! A local schedule earlier than the armed deadline re-arms at once (one syscall), so an outer
//! loop that sleeps on `fd()` right after scheduling wakes in time. Typical keep-alive traffic
//! schedules later than the earliest timer and makes no syscall.
//!
//! Wake-up bookkeeping: a producer kicks the eventfd only when it moves the wake word from PARKED
//! to NOTIFIED (see `protocol::wake`). The owner counts the kicks it is owed: one when `begin`
//! finds NOTIFIED after the owner had parked, and one for each kick it makes itself when `end`
//! finds a message announced during the turn. It reads the eventfd only while it is
//! owed a kick; a kick can land after the read (the producer swaps, then writes), so the debt is
//! kept until a read returns it. An unowed kick cannot exist, so the fd never stays readable with
//! nothing to do.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use super::Base;
use crate::clock::{Timeline, ns_to_tick_floor};
use crate::protocol::wake::{Found, Wake};
use crate::sys;

const TOKEN_TIMER: u64 = 1;
const TOKEN_EVENT: u64 = 2;

/// A base's fds and its owner's wake-up bookkeeping. Owned by the base, touched by its owner only;
/// what it shares with other threads (the wake word, the eventfd) it is handed on each call.
#[derive(Debug)]
pub(super) struct Driver {
    epoll: OwnedFd,
    /// `None` on a manual clock.
    timerfd: Option<OwnedFd>,
    /// Tick the timerfd is armed for.
    armed: Option<u64>,
    /// This owner's last wake-word action was a successful park.
    parked: bool,
    /// Eventfd kicks made but not yet read back.
    kicks_owed: u64,
}

impl Driver {
    /// The epoll fd holding `eventfd` and, on a kernel clock, a timerfd of its own.
    pub(super) fn new(timeline: &Timeline, eventfd: BorrowedFd<'_>) -> io::Result<Self> {
        let epoll = sys::epoll_create()?;
        sys::epoll_add(epoll.as_fd(), eventfd.as_raw_fd(), TOKEN_EVENT)?;
        let timerfd = match timeline.kernel_clock() {
            Some(clock) => {
                let tfd = sys::timerfd_create(clock)?;
                sys::epoll_add(epoll.as_fd(), tfd.as_raw_fd(), TOKEN_TIMER)?;
                Some(tfd)
            }
            None => None,
        };
        Ok(Self {
            epoll,
            timerfd,
            armed: None,
            // The wake word starts parked (see `protocol::wake`): an owner may wait on the fd
            // before its first turn, so remote producers kick from the start, and that kick is
            // owed.
            parked: true,
            kicks_owed: 0,
        })
    }

    /// The fd a loop waits on.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// The tick the timerfd is armed for.
    pub(super) fn armed(&self) -> Option<u64> {
        self.armed
    }

    /// True if the base follows a manual clock (no timerfd).
    pub(super) fn is_manual(&self) -> bool {
        self.timerfd.is_none()
    }

    /// Parks the owner unless a message arrived since the last turn (then false: turn again).
    pub(super) fn try_park(&mut self, wake: &Wake) -> bool {
        if !self.parked {
            if !wake.park() {
                return false;
            }
            self.parked = true;
        }
        true
    }

    /// Blocks until the fd is readable or `timeout` passes.
    pub(super) fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        sys::epoll_wait(self.epoll.as_fd(), timeout_to_ms(timeout))?;
        Ok(())
    }

    /// Start of a turn: takes the wake word and reads the eventfd back if a kick is owed.
    pub(super) fn begin(&mut self, wake: &Wake, eventfd: BorrowedFd<'_>) {
        if wake.begin() == Found::Notified && self.parked {
            // Exactly one producer moved PARKED -> NOTIFIED, and it kicks exactly once.
            self.kicks_owed += 1;
        }
        self.parked = false;
        if self.kicks_owed > 0 {
            // A kick may still be on its way (the producer swaps, then writes): keep owing it.
            let read = sys::eventfd_take(eventfd).unwrap_or(0);
            self.kicks_owed = self.kicks_owed.saturating_sub(read);
        }
    }

    /// End of a turn: tries to park; if a message arrived during the turn, kicks the eventfd so
    /// the fd stays readable and the caller's loop turns again.
    pub(super) fn end(&mut self, wake: &Wake, eventfd: BorrowedFd<'_>) {
        if wake.park() {
            self.parked = true;
        } else {
            let kicked = sys::eventfd_kick(eventfd);
            debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
            self.kicks_owed += 1;
        }
    }

    /// After a turn that drained everything due at `now_tick`: puts the timerfd at `next` (the
    /// wheel's next expiry) if that changed or the armed time passed.
    pub(super) fn rearm(&mut self, timeline: &Timeline, next: Option<u64>, now_tick: u64) {
        // Nothing is due at `now_tick` any more; never arm at or before it (that would make the
        // fd readable with nothing to do).
        let next = next.map(|t| t.max(now_tick + 1));
        let passed = self.armed.is_some_and(|a| a <= now_tick);
        if next != self.armed || passed {
            self.set_timer(timeline, next);
        }
    }

    /// A timer was filed at `expiry`: arms the timerfd at once if that is earlier than it is.
    pub(super) fn arm_if_earlier(&mut self, timeline: &Timeline, expiry: u64) {
        if self.armed.is_none_or(|a| expiry < a) {
            self.set_timer(timeline, Some(expiry));
        }
    }

    fn set_timer(&mut self, timeline: &Timeline, tick: Option<u64>) {
        let Some(tfd) = &self.timerfd else { return };
        let at = tick.and_then(|t| timeline.tick_to_raw_ns(t));
        // Failure needs a bad fd or a bad timespec; both are excluded by construction.
        let set = sys::timerfd_set_abs(tfd.as_fd(), at);
        debug_assert!(set.is_ok(), "timerfd_settime failed: {set:?}");
        // A tick beyond the clock's range leaves the timerfd disarmed but is still remembered, so
        // later turns do not re-arm it again and again.
        self.armed = tick;
    }
}

impl AsRawFd for Driver {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl<T: Send + 'static> Base<T> {
    /// Blocks until `fd()` is readable or `timeout` passes (`None`: no limit). Call `turn` next.
    pub fn park(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let shared = &self.group.bases[self.index];
        if !self.driver.try_park(&shared.wake) {
            return Ok(()); // a message arrived since the last turn
        }
        if self.driver.is_manual() && due_on_manual_clock(self) {
            return Ok(());
        }
        self.driver.wait(timeout)
    }

    pub(super) fn begin_turn(&mut self) {
        let shared = &self.group.bases[self.index];
        self.driver.begin(&shared.wake, shared.eventfd.as_fd());
    }

    pub(super) fn end_turn(&mut self) {
        let shared = &self.group.bases[self.index];
        self.driver.end(&shared.wake, shared.eventfd.as_fd());
    }

    /// Puts the timerfd at the wheel's next expiry if that changed or the armed time passed.
    pub(super) fn rearm(&mut self, now_ns: u64) {
        let now_tick = ns_to_tick_floor(now_ns, self.tick_ns());
        let next = self.wheel.next_expiry();
        self.driver.rearm(&self.group.timeline, next, now_tick);
    }

    pub(super) fn arm_if_earlier(&mut self, expiry: u64) {
        self.driver.arm_if_earlier(&self.group.timeline, expiry);
    }
}

/// On a manual clock: something is due now, or a notice is waiting.
fn due_on_manual_clock<T: Send + 'static>(base: &mut Base<T>) -> bool {
    let now_tick = ns_to_tick_floor(base.read_clock(), base.tick_ns());
    base.wheel.next_expiry().is_some_and(|t| t <= now_tick) || !base.shared().notices.is_empty()
}

/// Milliseconds for `epoll_wait`, rounded up so a short timeout does not become a busy poll.
fn timeout_to_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => i32::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ClockSource;
    use crate::protocol::wake::Notify;

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, length 1, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n > 0
    }

    /// A driver on the monotonic clock with its own wake word and eventfd, as a base has them.
    fn driver() -> (Driver, Wake, OwnedFd, Timeline) {
        let timeline = Timeline::new(&ClockSource::Monotonic, Duration::from_millis(1)).unwrap();
        let eventfd = sys::eventfd().unwrap();
        let driver = Driver::new(&timeline, eventfd.as_fd()).unwrap();
        (driver, Wake::parked(), eventfd, timeline)
    }

    /// A producer's side: notify, and kick if told to.
    fn notify(wake: &Wake, eventfd: &OwnedFd) {
        if wake.notify() == Notify::Kick {
            sys::eventfd_kick(eventfd.as_fd()).unwrap();
        }
    }

    #[test]
    fn a_quiet_turn_parks_and_leaves_the_fd_quiet() {
        let (mut d, wake, efd, _) = driver();
        d.begin(&wake, efd.as_fd());
        d.end(&wake, efd.as_fd());
        assert!(wake.is_parked());
        assert!(!readable(d.fd()));
        assert!(d.try_park(&wake), "already parked");
    }

    #[test]
    fn a_kick_to_a_parked_owner_is_read_back_once() {
        let (mut d, wake, efd, _) = driver();
        d.begin(&wake, efd.as_fd());
        d.end(&wake, efd.as_fd());
        notify(&wake, &efd);
        notify(&wake, &efd); // joins the batch: no second kick
        assert!(readable(d.fd()), "a parked owner is woken");
        d.begin(&wake, efd.as_fd());
        assert_eq!(d.kicks_owed, 0);
        d.end(&wake, efd.as_fd());
        assert!(!readable(d.fd()), "no kick left over");
    }

    #[test]
    fn a_message_during_the_turn_keeps_the_fd_readable_for_one_more_turn() {
        let (mut d, wake, efd, _) = driver();
        d.begin(&wake, efd.as_fd());
        notify(&wake, &efd); // the owner is awake: no kick from the producer
        d.end(&wake, efd.as_fd());
        assert!(readable(d.fd()), "the owner kicked itself");
        d.begin(&wake, efd.as_fd());
        d.end(&wake, efd.as_fd());
        assert!(!readable(d.fd()));
    }

    #[test]
    fn a_passed_timer_is_rearmed_and_its_expiry_cleared() {
        let (mut d, wake, efd, timeline) = driver();
        let now_tick = ns_to_tick_floor(timeline.now_ns(), timeline.tick_ns);
        d.arm_if_earlier(&timeline, now_tick);
        assert_eq!(d.armed(), Some(now_tick));
        std::thread::sleep(Duration::from_millis(2));
        assert!(readable(d.fd()), "the timerfd expired");
        d.begin(&wake, efd.as_fd());
        // The wheel is empty now: disarm, which clears the pending expiry.
        d.rearm(&timeline, None, now_tick + 2);
        assert_eq!(d.armed(), None);
        d.end(&wake, efd.as_fd());
        assert!(!readable(d.fd()), "fd readable with nothing to do");
        // Never armed at or before the tick just drained.
        d.rearm(&timeline, Some(now_tick), now_tick + 2);
        assert_eq!(d.armed(), Some(now_tick + 3));
    }

    #[test]
    fn timeout_rounds_up_to_ms() {
        assert_eq!(timeout_to_ms(None), -1);
        assert_eq!(timeout_to_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_to_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(timeout_to_ms(Some(Duration::from_millis(5))), 5);
        assert_eq!(timeout_to_ms(Some(Duration::MAX)), i32::MAX);
    }
}

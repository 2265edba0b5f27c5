//! The base's driver: one fd for any loop, and the owner's wake-up bookkeeping.
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
//! finds NOTIFIED after the owner had parked, and one for each kick it makes itself when
//! `end_turn` finds a message announced during the turn. It reads the eventfd only while it is
//! owed a kick; a kick can land after the read (the producer swaps, then writes), so the debt is
//! kept until a read returns it. An unowed kick cannot exist, so the fd never stays readable with
//! nothing to do.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use super::Base;
use crate::clock::ns_to_tick_floor;
use crate::protocol::wake::Found;
use crate::shared::Group;
use crate::sys;

const TOKEN_TIMER: u64 = 1;
const TOKEN_EVENT: u64 = 2;

/// The epoll fd for base `index` (holding its eventfd) and, on a kernel clock, its timerfd.
pub(super) fn fds<T>(group: &Group<T>, index: usize) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    let epoll = sys::epoll_create()?;
    let shared = &group.bases[index];
    sys::epoll_add(epoll.as_fd(), shared.eventfd.as_raw_fd(), TOKEN_EVENT)?;
    let timerfd = match group.timeline.kernel_clock() {
        Some(clock) => {
            let tfd = sys::timerfd_create(clock)?;
            sys::epoll_add(epoll.as_fd(), tfd.as_raw_fd(), TOKEN_TIMER)?;
            Some(tfd)
        }
        None => None,
    };
    Ok((epoll, timerfd))
}

impl<T: Send + 'static> Base<T> {
    /// Blocks until `fd()` is readable or `timeout` passes (`None`: no limit). Call `turn` next.
    pub fn park(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if !self.parked {
            if !self.shared().wake.park() {
                return Ok(()); // a message arrived since the last turn
            }
            self.parked = true;
        }
        if self.timerfd.is_none() && self.due_on_manual_clock() {
            return Ok(());
        }
        sys::epoll_wait(self.epoll.as_fd(), timeout_to_ms(timeout))?;
        Ok(())
    }

    /// Takes the wake word and reads the eventfd back if a kick is owed.
    pub(super) fn begin_turn(&mut self) {
        let found = self.shared().wake.begin();
        if found == Found::Notified && self.parked {
            // Exactly one producer moved PARKED -> NOTIFIED, and it kicks exactly once.
            self.kicks_owed += 1;
        }
        self.parked = false;
        if self.kicks_owed > 0 {
            // A kick may still be on its way (the producer swaps, then writes): keep owing it.
            let read = sys::eventfd_take(self.shared().eventfd.as_fd()).unwrap_or(0);
            self.kicks_owed = self.kicks_owed.saturating_sub(read);
        }
    }

    /// Puts the timerfd at the wheel's next expiry if that changed or the armed time passed.
    pub(super) fn rearm(&mut self, now_ns: u64) {
        let now_tick = ns_to_tick_floor(now_ns, self.tick_ns());
        // After the drain nothing is due at `now_tick`; never arm at or before it (that would make
        // the fd readable with nothing to do).
        let next = self.wheel.next_expiry().map(|t| t.max(now_tick + 1));
        let passed = self.armed.is_some_and(|a| a <= now_tick);
        if next != self.armed || passed {
            self.set_timer(next);
        }
    }

    pub(super) fn arm_if_earlier(&mut self, expiry: u64) {
        if self.armed.is_none_or(|a| expiry < a) {
            self.set_timer(Some(expiry));
        }
    }

    pub(super) fn set_timer(&mut self, tick: Option<u64>) {
        let Some(tfd) = &self.timerfd else { return };
        let at = tick.and_then(|t| self.group.timeline.tick_to_raw_ns(t));
        // Failure needs a bad fd or a bad timespec; both are excluded by construction.
        let set = sys::timerfd_set_abs(tfd.as_fd(), at);
        debug_assert!(set.is_ok(), "timerfd_settime failed: {set:?}");
        // A tick beyond the clock's range leaves the timerfd disarmed but is still remembered, so
        // later turns do not re-arm it again and again.
        self.armed = tick;
    }

    /// Tries to park; if a message arrived during the turn, kicks our own eventfd so the fd stays
    /// readable and the caller's loop turns again.
    pub(super) fn end_turn(&mut self) {
        if self.shared().wake.park() {
            self.parked = true;
        } else {
            let kicked = sys::eventfd_kick(self.shared().eventfd.as_fd());
            debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
            self.kicks_owed += 1;
        }
    }

    pub(super) fn due_on_manual_clock(&mut self) -> bool {
        let now_tick = ns_to_tick_floor(self.read_clock(), self.tick_ns());
        self.wheel.next_expiry().is_some_and(|t| t <= now_tick) || !self.shared().notices.is_empty()
    }
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

    #[test]
    fn timeout_rounds_up_to_ms() {
        assert_eq!(timeout_to_ms(None), -1);
        assert_eq!(timeout_to_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_to_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(timeout_to_ms(Some(Duration::from_millis(5))), 5);
        assert_eq!(timeout_to_ms(Some(Duration::MAX)), i32::MAX);
    }
}

//! [`Sleep`]: a future that completes at a deadline, on the base of the thread that first polls it.
//!
//! A sleep is 32 bytes: the deadline, exact, in 12 (see `Deadline`), the driver pointer, and
//! where on that driver it is filed (`Filed`: cell, slot, generation). Given up for that: a
//! deadline more than 2^63 seconds before the process's first stored deadline reads back as
//! that limit (still in the past, so the sleep behaves the same).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use super::Instant;
use super::driver::{self, Driver};
use crate::Handle;
use crate::protocol::cell::{self, Cell};
use crate::sync::Arc;

/// A sleep's deadline as it was given (so [`Sleep::deadline`] and an `Interval` built on it see
/// the very instant, however far in the past or future), and whether the sleep completed at its
/// first poll without being filed.
///
/// Exact in 12 bytes of 4-byte alignment, so that [`Sleep`] lays its registration's `u32`s next
/// to it with no padding: the deadline is `anchor + secs + nanos` (`secs` signed, `nanos` below
/// 10^9), with `anchor` a process-wide `std::time::Instant` read once (see [`anchor`]); bit 31 of
/// the `nanos` word is the flag. `secs` spans every instant of the platform's monotonic clock
/// from the anchor on, and more than 292 billion years before it; a deadline further back than
/// that (made only by `Instant` arithmetic, never by a clock) reads back as that limit, which is
/// just as past.
#[derive(Clone, Copy)]
struct Deadline {
    secs_low: u32,
    secs_high: i32,
    /// The nanoseconds, and [`DONE_UNFILED`].
    nanos: u32,
}

/// Flag of [`Deadline::nanos`]: the sleep completed at its first poll, unfiled.
const DONE_UNFILED: u32 = 1 << 31;
const NANOS_PER_SEC: u32 = 1_000_000_000;
/// Most whole seconds a deadline is stored before the anchor (see [`Deadline`]).
const MOST_SECS_BEFORE: u64 = i64::MAX as u64;

/// The instant deadlines are counted from: the first time one is stored or a driver is made.
pub(super) fn anchor() -> std::time::Instant {
    // A std `OnceLock`, not the sync shim: set once per process, no cross-core protocol.
    static ANCHOR: OnceLock<std::time::Instant> = OnceLock::new();
    *ANCHOR.get_or_init(std::time::Instant::now)
}

impl Deadline {
    fn new(at: Instant) -> Self {
        let (anchor, at) = (anchor(), at.into_std());
        let (secs, nanos) = match at.checked_duration_since(anchor) {
            // Within range unless the anchor's own seconds are negative, which CLOCK_MONOTONIC
            // never gives; saturated then, and the saturated value is still reachable.
            Some(ahead) => (
                i64::try_from(ahead.as_secs()).unwrap_or(i64::MAX),
                ahead.subsec_nanos(),
            ),
            None => {
                // `at = anchor - behind`, with `behind > 0`.
                let behind = anchor.duration_since(at);
                let (s, n) = (behind.as_secs(), behind.subsec_nanos());
                if s >= MOST_SECS_BEFORE {
                    (-(MOST_SECS_BEFORE as i64), 0)
                } else if n == 0 {
                    (-(s as i64), 0)
                } else {
                    (-(s as i64) - 1, NANOS_PER_SEC - n)
                }
            }
        };
        Self {
            secs_low: secs as u32,
            secs_high: (secs >> 32) as i32,
            nanos,
        }
    }

    fn secs(self) -> i64 {
        i64::from(self.secs_high) << 32 | i64::from(self.secs_low)
    }

    fn instant(self) -> Instant {
        let (anchor, secs, nanos) = (anchor(), self.secs(), self.nanos & !DONE_UNFILED);
        // Each stored value is an instant that exists: the deadline itself, or a limit `new`
        // saturated to (`anchor + i64::MAX s` only when the anchor's seconds are negative,
        // `anchor - i64::MAX s` only when they are not).
        let at = if secs >= 0 {
            anchor.checked_add(Duration::new(secs as u64, nanos))
        } else if nanos == 0 {
            anchor.checked_sub(Duration::from_secs(secs.unsigned_abs()))
        } else {
            anchor.checked_sub(Duration::new(
                secs.unsigned_abs() - 1,
                NANOS_PER_SEC - nanos,
            ))
        };
        Instant::from_std(at.expect("a stored deadline is an instant that exists"))
    }

    /// The deadline in nanoseconds since `driver`'s epoch, as the base converts an `Instant`:
    /// from the driver's anchor offset with integer arithmetic, exact (the clamp is the base's
    /// own saturation), or through the `Instant` where the base's clock does not keep its pace.
    fn ns_on(self, driver: &Driver) -> u64 {
        let Some(anchor_ns) = driver.anchor_ns else {
            return (driver.remote.group.timeline).instant_to_ns(self.instant().into_std());
        };
        let since_anchor = i128::from(self.secs()) * i128::from(NANOS_PER_SEC)
            + i128::from(self.nanos & !DONE_UNFILED);
        (anchor_ns + since_anchor).clamp(0, u64::MAX.into()) as u64
    }

    fn done_unfiled(self) -> bool {
        self.nanos & DONE_UNFILED != 0
    }

    fn set_done_unfiled(&mut self) {
        self.nanos |= DONE_UNFILED;
    }
}

/// `t + d`, or a deadline far enough away to stand for "never" where that overflows (as tokio's
/// `Instant::far_future`).
pub(super) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).unwrap_or_else(|| far_future(t))
}

/// A deadline far enough away to stand for "never" when `now + duration` overflows.
fn far_future(now: Instant) -> Instant {
    const THIRTY_YEARS: Duration = Duration::from_secs(86_400 * 365 * 30);
    now.checked_add(THIRTY_YEARS).unwrap_or(now)
}

/// Waits until `duration` has passed (the clock is read now; the timer is filed at the first poll,
/// on the polling thread's base).
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// let start = Instant::now();
/// timers.block_on(0, &rt, time::sleep(Duration::from_millis(5))).unwrap();
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    let now = Instant::now();
    sleep_until(later(now, duration))
}

/// Waits until `deadline` (in the past: completes at the base's next turn).
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// let deadline = Instant::now() + Duration::from_millis(3);
/// timers.block_on(0, &rt, time::sleep_until(deadline)).unwrap();
/// assert!(Instant::now() >= deadline);
/// ```
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline: Deadline::new(deadline),
        driver: None,
        filed: Filed::default(),
    }
}

/// A timer on a per-core base, as a future. Made by [`sleep`] or [`sleep_until`].
///
/// It costs nothing until first polled; the first poll files it on the polling thread's base (a
/// local operation). Polling, resetting or dropping it on another thread (a work-stealing
/// runtime moved its task) uses the cross-core path to the base it was filed on. `Sleep` is
/// `Unpin`: it can be reset and stored without `Box::pin`.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// timers.block_on(0, &rt, async {
///     let mut idle = time::sleep(Duration::from_secs(60));
///     // A request arrived: push the idle timeout back, in place.
///     idle.reset(Instant::now() + Duration::from_millis(2));
///     (&mut idle).await;
///     assert!(idle.is_elapsed());
/// }).unwrap();
/// ```
pub struct Sleep {
    /// The deadline, and whether the sleep completed at its first poll unfiled.
    deadline: Deadline,
    /// The base the sleep is filed on; `None` before its first poll files it, once it completed
    /// unfiled, and after it let go of its cell.
    driver: Option<Arc<Driver>>,
    /// Where on `driver` (meaningless while that is `None`).
    filed: Filed,
}

/// Where a polled sleep is filed on its driver: the cell (its state word holds the current
/// arming's `seq`), and the slot and generation of the base's [`Handle`]; the handle's base
/// index and set tag are the driver's (see [`Driver::handle`]). Kept apart from the driver
/// pointer so that [`Sleep`] packs them with its deadline in 32 bytes.
#[derive(Clone, Copy, Default)]
struct Filed {
    cell: u32,
    slot: u32,
    generation: u32,
}

impl Filed {
    fn new(cell: u32, timer: Handle) -> Self {
        let mut filed = Self {
            cell,
            ..Self::default()
        };
        filed.set_timer(timer);
        filed
    }

    /// The base's timer now carrying the sleep's arming (a handle of the sleep's driver).
    fn set_timer(&mut self, timer: Handle) {
        self.slot = timer.slot;
        self.generation = timer.generation;
    }

    fn handle(self, driver: &Driver) -> Handle {
        driver.handle(self.slot, self.generation)
    }

    fn cell(self, driver: &Driver) -> &Cell {
        driver.cells.get(self.cell)
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline.instant())
            .field("base", &self.driver.as_ref().map(|d| d.index))
            .finish()
    }
}

/// The one cross-core re-arm: moves a pending timer of another thread's base in place (the
/// handle stays valid; a later deadline sends the owner nothing). False if it is not pending
/// (fired or firing).
fn rearm_remote(driver: &Driver, h: Handle, deadline: Instant) -> bool {
    driver.remote.reset_at(h, deadline.into_std())
}

impl Sleep {
    /// The instant this sleep completes at (or after).
    pub fn deadline(&self) -> Instant {
        self.deadline.instant()
    }

    /// True once the timer has fired (false again after a [`Sleep::reset`]).
    pub fn is_elapsed(&self) -> bool {
        self.deadline.done_unfiled()
            || self
                .driver
                .as_deref()
                .is_some_and(|d| self.filed.cell(d).is_fired())
    }

    /// Moves the deadline, in place: no allocation, and on the owning thread no atomic
    /// read-modify-write besides taking the base. Works before, during and after the wait; the
    /// task waiting on it is woken at the new deadline.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = Deadline::new(deadline);
        let Some(driver) = self.driver.as_deref() else {
            return;
        };
        // The common case inline: a pending timer of this thread's open base, moved in place
        // (a later deadline stores one word of its record).
        if !driver.is_closed()
            && driver::is_current(driver)
            && let Some(mut held) = driver.hold()
        {
            let ns = self.deadline.ns_on(driver);
            let filed = self.filed;
            if held.base.reset_own_at_ns(filed.slot, filed.generation, ns) {
                return;
            }
            // Not pending: fired (and, since turns deliver while holding the base,
            // delivered). A base re-arms any pending timer of its own, filed or not.
            refile_held(driver, &mut self.filed, &mut held, ns);
            return;
        }
        self.reset_slow(deadline);
    }

    /// The rest of [`Sleep::reset`] of a filed sleep: its base closed, held by another thread
    /// for a moment, or another thread's.
    #[cold]
    fn reset_slow(&mut self, deadline: Instant) {
        let driver = self.driver.as_deref().expect("a filed sleep has a driver");
        if driver.is_closed() {
            // Nothing will turn that base again: let go of its cell; the next poll files the
            // sleep on the polling thread's base (or reports the closed one).
            self.unregister();
            return;
        }
        let filed = &mut self.filed;
        if rearm_remote(driver, filed.handle(driver), deadline) {
            return;
        }
        // Fired or firing: a new arming; the old payload, if still on its way, is stale.
        let seq = filed.cell(driver).arm();
        let p = cell::payload(filed.cell, seq);
        match driver
            .remote
            .schedule_at(driver.index, deadline.into_std(), p)
        {
            Ok(h) => filed.set_timer(h),
            Err(_) => {
                // The base's reserve of slots is empty (or the base is gone): let go of the
                // cell; the next poll files the sleep afresh on the polling thread's base.
                filed.cell(driver).disarm();
                self.unregister();
            }
        }
    }

    /// Lets go of the cell (cancelling the timer if pending); the next poll files it afresh on
    /// the polling thread's base.
    fn unregister(&mut self) {
        if let Some(driver) = self.driver.take() {
            release(&driver, self.filed);
        }
    }

    fn register(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let driver = driver::with_current(Arc::clone);
        if driver.is_closed() {
            gone(driver.index);
        }
        let Some(mut held) = driver.hold() else {
            // A turn of this base runs on another worker for a moment.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let deadline_ns = self.deadline.ns_on(&driver);
        if deadline_ns <= held.base.now_ns() {
            self.deadline.set_done_unfiled();
            return Poll::Ready(());
        }
        let index = driver.alloc_cell(&mut held);
        // The cell is ours alone (just taken, and we hold the base).
        let seq = driver.cells.get(index).start(cx.waker());
        let timer = driver.schedule_held(&mut held, deadline_ns, index, seq);
        drop(held);
        self.filed = Filed::new(index, timer);
        self.driver = Some(driver);
        Poll::Pending
    }
}

/// [`Sleep::reset`] of a fired sleep, holding its base: a new arming of its cell.
#[cold]
fn refile_held(driver: &Driver, filed: &mut Filed, held: &mut driver::Held<'_>, ns: u64) {
    let seq = filed.cell(driver).arm();
    filed.set_timer(driver.schedule_held(held, ns, filed.cell, seq));
}

/// A sleep on a base that nothing will turn again would pend for ever: panic, as tokio's sleeps
/// do on a runtime that was shut down.
#[cold]
fn gone(index: usize) -> ! {
    panic!(
        "the tickwheel time driver of base {index} is gone (every Timers handle of its set and \
         every task turning it were dropped): this sleep can never complete"
    )
}

/// The sleep lets go of its cell on `driver`: cancel a pending arming, drop the sleep's hold,
/// free the cell if last.
fn release(driver: &Driver, filed: Filed) {
    let cell = filed.cell(driver);
    let held = if driver::is_current(driver) {
        driver.hold()
    } else {
        None
    };
    if let Some(mut held) = held {
        // Holding the base: deliveries run only under it (see `Cell::release_held`).
        if cell.release_held(|| held.base.cancel(filed.handle(driver))) {
            driver.free_held(filed.cell, &mut held);
        }
    } else if cell.release(|| driver.remote.cancel(filed.handle(driver))) {
        driver.free_cell(filed.cell, None);
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(driver) = this.driver.as_deref() else {
            if this.deadline.done_unfiled() {
                return Poll::Ready(());
            }
            return this.register(cx);
        };
        if this.filed.cell(driver).poll(cx.waker()) {
            return Poll::Ready(());
        }
        // After the register: a close after it wakes this waker, one before it is seen here.
        if driver.is_closed() {
            gone(driver.index);
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const _: fn() = || {
        fn auto_traits<T: Send + Sync + Unpin>() {}
        auto_traits::<Sleep>();
    };

    #[test]
    fn a_sleep_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Sleep>(), 32);
    }

    fn round_trip(at: Instant) -> Instant {
        let d = Deadline::new(at);
        let mut done = d;
        done.set_done_unfiled();
        assert!(!d.done_unfiled() && done.done_unfiled());
        assert_eq!(done.instant(), d.instant(), "the flag moved the deadline");
        d.instant()
    }

    #[test]
    fn deadlines_read_back_exactly() {
        let now = Instant::now();
        let anchor = Instant::from_std(anchor());
        let year = Duration::from_secs(86_400 * 365);
        for at in [
            now,
            anchor,
            anchor - Duration::from_nanos(1),
            anchor - Duration::from_secs(1),
            anchor - Duration::new(10, 999_999_999),
            anchor + Duration::new(3, 1),
            now + year * 30,
            now + year * 1000,
            later(now, Duration::MAX),
            later(now, Duration::from_secs(u64::MAX / 4)),
        ] {
            assert_eq!(round_trip(at), at);
        }
    }

    #[test]
    fn the_ends_of_the_clock() {
        let anchor = anchor();
        let secs = Duration::from_secs(MOST_SECS_BEFORE);
        // The latest and the earliest instants there are, and the earliest one kept exactly.
        let mut last = anchor;
        let secs_steps = (0..64).rev().map(|b| Duration::from_secs(1 << b));
        let nanos_steps = (0..30).rev().map(|b| Duration::from_nanos(1 << b));
        let mut first = anchor;
        for step in secs_steps.chain(nanos_steps) {
            while let Some(t) = last.checked_add(step) {
                last = t;
            }
            while let Some(t) = first.checked_sub(step) {
                first = t;
            }
        }
        assert!(last.checked_add(Duration::from_nanos(1)).is_none());
        assert_eq!(round_trip(last.into()), last.into());
        let earliest = anchor - secs;
        assert_eq!(round_trip(earliest.into()), earliest.into());
        // Further back saturates to that limit: still in the past.
        for at in [earliest - Duration::from_nanos(1), first] {
            assert_eq!(round_trip(at.into()), earliest.into());
        }
    }
}

//! [`Sleep`]: a future that completes at a deadline, on the base of the thread that first polls it.
//!
//! A sleep is 40 bytes: the deadline, exact, as the `Instant` it was given; the driver pointer;
//! where on that driver it is filed (`Filed`: cell, slot, generation); and two flags.
//!
//! A reset to a later deadline (the keepalive refresh) stores the new instant in the sleep and
//! sets `LATER`: one comparison and two stores, no conversion, no base, on any thread. The
//! arming filed on the base keeps its earlier deadline; when it fires, the poll it wakes sees
//! `LATER` and, unless the clock has reached the new deadline, files a new arming at it (as a
//! reset after a fire does) and pends. A reset to an earlier deadline moves the timer at once.
//!
//! # Given up
//! - A sleep pushed later while filed is woken once at each deadline it was filed at and then
//!   pushed past (a poll that finds it not yet due and files it again), where tokio moves its
//!   entry inside the driver without a wake; in exchange a push costs no atomic operation.
//! - Until the poll files it again, the base knows only the old deadline: a task woken at it
//!   that does not poll the sleep then (a disabled `select!` branch) is not woken again at the
//!   new one, as tokio's driver would wake it; [`Sleep::is_elapsed`] reads the clock for such a
//!   sleep, so it turns true at the new deadline as tokio's does.
//! - 8 bytes more than a deadline packed in 12 would take (the `Instant` is 16 with padding),
//!   which made every reset pay an `Instant` subtraction.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::Instant;
use super::driver::{self, Driver};
use crate::Handle;
use crate::protocol::cell::{self, Cell};
use crate::sync::Arc;

/// Flag of [`Sleep::flags`]: the sleep completed at its first poll, unfiled.
const DONE_UNFILED: u32 = 1;
/// Flag of [`Sleep::flags`]: the deadline is later than the filed arming's (a fire of that
/// arming is early: file again).
const LATER: u32 = 2;

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
        deadline,
        driver: None,
        filed: Filed::default(),
        flags: 0,
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
    /// The deadline, exactly as given.
    deadline: Instant,
    /// The base the sleep is filed on; `None` before its first poll files it, once it completed
    /// unfiled, and after it let go of its cell.
    driver: Option<Arc<Driver>>,
    /// Where on `driver` (meaningless while that is `None`).
    filed: Filed,
    /// [`DONE_UNFILED`], [`LATER`].
    flags: u32,
}

/// Where a polled sleep is filed on its driver: the cell (its state word holds the current
/// arming's `seq`), and the slot and generation of the base's [`Handle`]; the handle's base
/// index and set tag are the driver's (see [`Driver::handle`]).
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
            .field("deadline", &self.deadline)
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
        self.deadline
    }

    /// True once the timer has fired (false again after a [`Sleep::reset`]).
    pub fn is_elapsed(&self) -> bool {
        self.flags & DONE_UNFILED != 0
            || ((self.driver.as_deref()).is_some_and(|d| self.filed.cell(d).is_fired())
                // Pushed later since the arming that fired was filed: elapsed once the clock
                // reached the deadline, as a poll would find (the deadline is past the fire).
                && (self.flags & LATER == 0 || Instant::now() >= self.deadline))
    }

    /// Moves the deadline, in place: no allocation, and no atomic read-modify-write besides,
    /// for an earlier deadline on the owning thread, taking the base. Works before, during and
    /// after the wait; the task waiting on it is woken at the new deadline.
    ///
    /// A later (or equal) deadline is only stored (see the module doc): the filed arming fires
    /// at the old one, and the poll it wakes files the sleep again.
    pub fn reset(&mut self, deadline: Instant) {
        let later = deadline >= self.deadline;
        self.deadline = deadline;
        let Some(driver) = self.driver.as_deref() else {
            // Not filed: the next poll files it (again, if it had completed unfiled).
            self.flags = 0;
            return;
        };
        if later && !driver.is_closed() {
            self.flags |= LATER;
            return;
        }
        self.rearm(deadline);
    }

    /// Files the filed sleep's deadline on its base now: moves a pending timer in place, or
    /// files a new arming where the last one fired (or is firing).
    fn rearm(&mut self, deadline: Instant) {
        // Whatever happens below, the base holds no arming earlier than the deadline.
        self.flags &= !LATER;
        let driver = self.driver.as_deref().expect("a filed sleep has a driver");
        if driver.is_closed() {
            // Nothing will turn that base again: let go of its cell; the next poll files the
            // sleep on the polling thread's base (or reports the closed one).
            self.unregister();
            return;
        }
        let filed = &mut self.filed;
        if driver::is_current(driver)
            && let Some(mut held) = driver.hold()
        {
            let ns = ns_on(driver, deadline);
            if held.base.reset_own_at_ns(filed.slot, filed.generation, ns) {
                return;
            }
            // Not pending: fired (and, since turns deliver while holding the base,
            // delivered). A base re-arms any pending timer of its own, filed or not.
            let seq = filed.cell(driver).arm();
            filed.set_timer(driver.schedule_held(&mut held, ns, filed.cell, seq));
            return;
        }
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
        self.flags &= !LATER;
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
        let deadline_ns = ns_on(&driver, self.deadline);
        if deadline_ns <= held.base.now_ns() {
            self.flags |= DONE_UNFILED;
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

/// `deadline` in nanoseconds since the epoch of `driver`'s base.
fn ns_on(driver: &Driver, deadline: Instant) -> u64 {
    (driver.remote.group.timeline).instant_to_ns(deadline.into_std())
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
        if cell.release_held(|| held.base.cancel_own(filed.slot, filed.generation)) {
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
        loop {
            let Some(driver) = this.driver.as_deref() else {
                if this.flags & DONE_UNFILED != 0 {
                    return Poll::Ready(());
                }
                return this.register(cx);
            };
            if !this.filed.cell(driver).poll(cx.waker()) {
                // After the register: a close after it wakes this waker, one before it is seen
                // here.
                if driver.is_closed() {
                    gone(driver.index);
                }
                return Poll::Pending;
            }
            if this.flags & LATER == 0 {
                return Poll::Ready(());
            }
            // The arming that fired was filed before the sleep was pushed later.
            if Instant::now() >= this.deadline {
                this.flags &= !LATER;
                return Poll::Ready(());
            }
            // A new arming at the deadline (or the sleep let go of a closed base's cell); the
            // next round registers the waker for it (or files the sleep afresh).
            this.rearm(this.deadline);
        }
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
    fn a_sleep_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Sleep>(), 40);
    }
}

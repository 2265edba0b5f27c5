//! [`Sleep`]: a future that completes at a deadline, on the base of the thread that first polls it.

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

/// A sleep's deadline as it was given (so [`Sleep::deadline`] and an `Interval` built on it see
/// the very instant, however far in the past or future), and whether the sleep completed at its
/// first poll without being filed.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    done_unfiled: bool,
}

impl Deadline {
    fn new(at: Instant) -> Self {
        Self {
            at,
            done_unfiled: false,
        }
    }

    fn instant(self) -> Instant {
        self.at
    }

    fn done_unfiled(self) -> bool {
        self.done_unfiled
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
        reg: None,
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
    reg: Option<Registration>,
}

/// Where a polled sleep is filed.
struct Registration {
    driver: Arc<Driver>,
    /// The cell; its state word holds the current arming's `seq`.
    cell: u32,
    handle: Handle,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline.instant())
            .field("base", &self.reg.as_ref().map(|r| r.driver.index))
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
        self.deadline.done_unfiled() || self.reg.as_ref().is_some_and(|r| r.cell().is_fired())
    }

    /// Moves the deadline, in place: no allocation, and on the owning thread no atomic
    /// read-modify-write besides taking the base. Works before, during and after the wait; the
    /// task waiting on it is woken at the new deadline.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = Deadline::new(deadline);
        let Some(reg) = self.reg.as_mut() else {
            return;
        };
        if reg.driver.is_closed() {
            // Nothing will turn that base again: let go of its cell; the next poll files the
            // sleep on the polling thread's base (or reports the closed one).
            self.unregister();
            return;
        }
        if driver::is_current(&reg.driver)
            && let Some(mut held) = reg.driver.hold()
        {
            if held.base.reset_at(reg.handle, deadline.into_std()) {
                return;
            }
            // Not pending: fired (and, since turns deliver while holding the base,
            // delivered). A base re-arms any pending timer of its own, filed or not.
            let seq = reg.driver.cells.get(reg.cell).arm();
            reg.handle = reg.driver.schedule_held(&mut held, deadline, reg.cell, seq);
            return;
        }
        if rearm_remote(&reg.driver, reg.handle, deadline) {
            return;
        }
        // Fired or firing: a new arming; the old payload, if still on its way, is stale.
        let seq = reg.driver.cells.get(reg.cell).arm();
        let p = cell::payload(reg.cell, seq);
        match reg
            .driver
            .remote
            .schedule_at(reg.driver.index, deadline.into_std(), p)
        {
            Ok(h) => reg.handle = h,
            Err(_) => {
                // The base's reserve of slots is empty (or the base is gone): let go of the
                // cell; the next poll files the sleep afresh on the polling thread's base.
                reg.disarm();
                self.unregister();
            }
        }
    }

    /// Lets go of the cell (cancelling the timer if pending); the next poll files it afresh on
    /// the polling thread's base.
    fn unregister(&mut self) {
        if let Some(reg) = self.reg.take() {
            reg.release();
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
        let deadline = self.deadline.instant();
        if deadline.into_std() <= held.base.now() {
            self.deadline.done_unfiled = true;
            return Poll::Ready(());
        }
        let index = driver.alloc_cell(&mut held);
        // The cell is ours alone (just taken, and we hold the base).
        let seq = driver.cells.get(index).start(cx.waker());
        let handle = driver.schedule_held(&mut held, deadline, index, seq);
        drop(held);
        self.reg = Some(Registration {
            driver,
            cell: index,
            handle,
        });
        Poll::Pending
    }
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

impl Registration {
    fn cell(&self) -> &Cell {
        self.driver.cells.get(self.cell)
    }

    /// Undoes `arm` when no timer carries the new arming.
    fn disarm(&self) {
        self.cell().disarm();
    }

    /// The sleep lets go: cancel a pending arming, drop the sleep's hold, free the cell if last.
    fn release(self) {
        let cell = self.cell();
        let held = if driver::is_current(&self.driver) {
            self.driver.hold()
        } else {
            None
        };
        if let Some(mut held) = held {
            // Holding the base: deliveries run only under it (see `Cell::release_held`).
            if cell.release_held(|| held.base.cancel(self.handle)) {
                self.driver.free_held(self.cell, &mut held);
            }
        } else if cell.release(|| self.driver.remote.cancel(self.handle)) {
            self.driver.free_cell(self.cell, None);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let Some(reg) = this.reg.as_ref() else {
            if this.deadline.done_unfiled() {
                return Poll::Ready(());
            }
            return this.register(cx);
        };
        if reg.cell().poll(cx.waker()) {
            return Poll::Ready(());
        }
        // After the register: a close after it wakes this waker, one before it is seen here.
        if reg.driver.is_closed() {
            gone(reg.driver.index);
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.unregister();
    }
}

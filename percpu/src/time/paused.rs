//! The base of a runtime whose clock is paused (feature `test-util`): how tickwheel's sleeps follow
//! tokio's test clock and take part in its auto-advance.
//!
//! # Model
//!
//! tokio's test clock belongs to one runtime, and tokio pauses only a current-thread runtime, so
//! a paused clock always belongs to one runtime run by one thread at a time. While the clock of
//! the runtime a thread is in does not read as std's (`clock::tokio_clock::departs`: paused, or
//! resumed at an offset), a sleep first polled there is filed on that runtime's own base,
//! whatever base the thread has otherwise (a [`super::Timers`] base or the fallback): one base per
//! runtime, made at its first such sleep and found again by the runtime's id. Its clock is that
//! runtime's clock ([`crate::clock::Timeline::on_tokio`]), read from any thread, so no other
//! runtime's pause or advance moves it, and tests in parallel threads keep their own time.
//!
//! The base arms no timerfd. Its turning task, spawned on the runtime, keeps one tokio timer
//! armed at the wheel's next expiry; tokio's time driver then sees that deadline among its own,
//! and a runtime with nothing else to do jumps its paused clock to the earliest of them (tokio's
//! auto-advance, inhibited by `spawn_blocking` as in tokio), the timer fires, and the task turns
//! the base at the new time. Each release of the base compares the wheel's next expiry with the
//! armed one and, when they differ (a sleep filed, reset or dropped), nudges the task to re-arm,
//! so the runtime never jumps to a deadline nobody waits for. [`super::advance`] turns the base
//! itself after moving the clock, before yielding, so that what came due is woken before the
//! advance completes (as tokio's timers are).
//!
//! # Timing
//!
//! The base's tick is 1 ns: a sleep fires when the clock reaches its deadline, exactly. Under
//! auto-advance the clock moves to tokio's own rounding of that deadline (its 1 ms tick, counted
//! from its driver's start), so the clock reads what it would with tokio's timers.
//!
//! # Given up
//! - A sleep filed on another base before the pause stays there, on real time, until it is
//!   reset after its fire or dropped.
//! - A paused runtime needs tokio's time driver (`enable_time`, which `#[tokio::test]` turns
//!   on): without it the turning task cannot arm its timer and panics, as tokio's sleeps do, and
//!   the base's sleeps report a base that nothing turns.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Mutex, PoisonError, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;

use super::driver::{Driver, Payload};
use crate::clock::tokio_clock;
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::{Base, Config, Mode};

/// What each release of a paused runtime's base checks: the next expiry its turning task armed a
/// tokio timer for.
pub(super) struct Armed {
    /// The armed tick, or [`NONE`] (no timer armed).
    tick: AtomicU64,
    nudge: Notify,
    /// The runtime whose clock the base follows.
    runtime: Handle,
}

/// `Armed::tick` when nothing is armed.
const NONE: u64 = u64::MAX;

impl Armed {
    /// Nudges the turning task if the wheel's next expiry is not the armed one; true if that
    /// expiry is due already, so that the base is to be turned at once (a sleep filed or reset
    /// to a deadline passed is ready at its next poll, as tokio's). The caller holds the base.
    pub(super) fn check(&self, base: &Base<Payload>) -> bool {
        let Some(next) = base.next_expiry() else {
            // Relaxed: written and read under the base's `busy` flag, which orders them.
            if self.tick.load(Ordering::Relaxed) != NONE {
                self.nudge.notify_one();
            }
            return false;
        };
        // Relaxed: as above.
        if next != self.tick.load(Ordering::Relaxed) {
            self.nudge.notify_one();
        }
        base.tick_instant(next) <= tokio_clock::now_on(&self.runtime)
    }
}

/// The paused runtimes' bases, by runtime. A std mutex: taken at the first sleep of a runtime
/// whose clock is paused and by an advance, never on the path of a clock that is not paused.
static BASES: Mutex<Vec<(Id, Weak<Driver>)>> = Mutex::new(Vec::new());

/// The base of the runtime this thread is in, if that runtime's clock is paused (made now if it
/// has none).
pub(super) fn current() -> Option<Arc<Driver>> {
    if !tokio_clock::departs() {
        return None;
    }
    // `departs` is true only inside a runtime.
    let runtime = Handle::try_current().ok()?;
    let id = runtime.id();
    let mut bases = BASES.lock().unwrap_or_else(PoisonError::into_inner);
    bases.retain(|(_, d)| d.strong_count() > 0);
    if let Some(driver) = bases
        .iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, d)| d.upgrade())
    {
        return Some(driver);
    }
    let driver = make(runtime);
    bases.push((id, Arc::downgrade(&driver)));
    Some(driver)
}

/// The base of the runtime this thread is in, if it has one.
fn of_this_runtime() -> Option<Arc<Driver>> {
    let id = Handle::try_current().ok()?.id();
    let bases = BASES.lock().unwrap_or_else(PoisonError::into_inner);
    bases
        .iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, d)| d.upgrade())
}

/// Turns the base of the runtime this thread is in, if it has one: after an advance.
pub(super) fn turn_this_runtime() {
    if let Some(driver) = of_this_runtime() {
        // Held elsewhere only for a moment; the turning task turns it at its next wake.
        driver.turn();
    }
}

/// A base on `runtime`'s clock and its turning task, spawned there. Panics as the fallback does
/// if the base cannot be made.
fn make(runtime: Handle) -> Arc<Driver> {
    let config = Config::default()
        .mode(Mode::Exact)
        .tick(Duration::from_nanos(1));
    let base = crate::bases_on_tokio::<Payload>(1, config, runtime.clone())
        .ok()
        .and_then(|(mut bases, _)| bases.pop())
        .unwrap_or_else(|| panic!("tickwheel time: cannot make the base of a paused runtime"));
    let mut driver = Driver::with_owners(base, true);
    driver.paused = Some(Armed {
        tick: AtomicU64::new(NONE),
        nudge: Notify::new(),
        runtime: runtime.clone(),
    });
    let driver = Arc::new(driver);
    drop(runtime.spawn(keep_turning(driver.clone())));
    driver
}

/// Lets go of the base when the turning task is dropped (its runtime shut down).
struct Keeper(Arc<Driver>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.let_go();
    }
}

/// The turning task: turns the base, arms one tokio timer at the wheel's next expiry, and waits
/// for it or for a nudge.
fn keep_turning(driver: Arc<Driver>) -> impl Future<Output = ()> + Send + 'static {
    let keeper = Keeper(driver);
    async move {
        let driver = &keeper.0;
        let armed = driver.paused.as_ref().expect("a paused runtime's base");
        let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
        loop {
            if !driver.turn() {
                // Held by another thread for a moment.
                tokio::task::yield_now().await;
                continue;
            }
            // Armed before the nudge is listened for: a change after this read nudges.
            let next = {
                let Some(held) = driver.hold() else { continue };
                let next = held.base.next_expiry();
                // Relaxed: under the base (see `Armed::check`).
                armed.tick.store(next.unwrap_or(NONE), Ordering::Relaxed);
                next.map(|t| held.base.tick_instant(t))
            };
            let mut nudged = pin!(armed.nudge.notified());
            if let Some(at) = next {
                timer.as_mut().reset(at.into());
            }
            poll_fn(|cx| {
                if nudged.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                if next.is_some() && timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                Poll::Pending
            })
            .await;
        }
    }
}

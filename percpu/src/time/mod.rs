//! Async timers on the per-core bases, inside tokio runtimes (cargo feature `tokio`).
//!
//! The names of `tokio::time` that programs use, with the same meaning: [`sleep`],
//! [`sleep_until`], [`timeout`], [`timeout_at`], [`interval`], [`interval_at`], [`Instant`],
//! [`Duration`], [`Sleep`], [`Timeout`], [`Interval`], [`MissedTickBehavior`] and
//! [`error::Elapsed`] (which converts into an `io::Error` of kind `TimedOut`). With hyper's
//! `HyperTimer` (feature `hyper`) they put their timers on a [`crate::Base`]: the base of the thread that first
//! polls them. [`Timers`] makes the bases and runs each one inside a runtime.
//!
//! # Fast path and fallback
//!
//! - **Fast path**, a base per core or per worker: [`Timers`] with [`Timers::block_on`] (a
//!   current-thread runtime per core), [`Timers::enter`] with [`Timers::driver`] spawned, or
//!   [`Timers::on_thread_start`] with [`Timers::spawn_drivers`] (a multi-thread runtime). Filing,
//!   resetting and dropping a sleep are calls on the thread's own base: no lock, one uncontended
//!   atomic swap to take the base, and the fire wakes the task on its own thread (the turning
//!   task runs there). This is what the project's benchmarks measure as tickwheel.
//! - **Fallback**, nothing set up: a thread with no base of its own (`#[tokio::main]`,
//!   `#[tokio::test]`, `Runtime::block_on`, `spawn_blocking`, a plain thread, a worker without the
//!   hook) files its sleeps on one process-wide base (Exact mode, 1 ms tick), made at the first
//!   such sleep and turned by a thread of its own, `tickwheel-time` (as pingora-timeout does).
//!   Every thread takes the owner's path on it, so the costs over the fast path are that the
//!   base's flag is contended between all threads using it (a thread that finds it taken yields
//!   and is polled again, or takes the cross-core path), and that every fire is a wake from
//!   the timer thread (a cross-thread wake into the runtime, as with tokio's own timer on a
//!   multi-thread runtime). Nothing needs I/O enabled on the runtime.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel_percpu::time::{self, Timers};
//!
//! // Thread-per-core: one current-thread runtime per core, each with its own base.
//! let timers = Timers::new(2).unwrap();
//! let threads: Vec<_> = (0..2).map(|core| {
//!     let timers = timers.clone();
//!     std::thread::spawn(move || {
//!         let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
//!         timers.block_on(core, &rt, async {
//!             let slow = std::future::pending::<()>();
//!             assert!(time::timeout(Duration::from_millis(3), slow).await.is_err());
//!         }).unwrap();
//!     })
//! }).collect();
//! for t in threads { t.join().unwrap(); }
//! ```
//!
//! # Deviations from `tokio::time`
//!
//! Code written for `tokio::time` compiles and behaves the same after its `use` line names this
//! module; what still differs:
//! - [`timeout`] counts its limit from the first poll that finds the future pending, not from the
//!   call (so it can only end later than tokio's); [`timeout_at`] is fixed at the call.
//! - [`Instant`] is this module's own newtype (it reads the test clock), not
//!   `tokio::time::Instant`: code that hands an `Instant` from tokio or another crate to these
//!   functions converts it (`Instant::from_std(t.into_std())`); `std::time::Instant` converts
//!   with `.into()`.
//! - [`Sleep`] is `Unpin` and [`Sleep::reset`] takes `&mut self`: tokio code that pins a sleep and
//!   calls `sleep.as_mut().reset(..)` compiles as is; a call spelled `Sleep::reset(pinned, ..)`
//!   does not.
//! - The test clock (feature `test-util`) is tokio's, per runtime: `start_paused`,
//!   `tokio::time::pause` and this module's [`pause`], [`advance`] and [`resume`] move one clock,
//!   with tokio's auto-advance, and a paused runtime's sleeps are filed on a base of its own (see
//!   `paused` in the source). A sleep filed on another base before the pause stays on real time
//!   until it is reset after its fire or dropped; a paused runtime needs `enable_time`.
//! - A limit of tokio's is lifted on purpose, so its tests in tokio's suite do not pass here
//!   (`tokio-suite/run.sh` names them): a timer made with no time driver (`enable_time` off, or
//!   outside any runtime) is served by the fallback base instead of panicking (tokio's
//!   `creating_sleep_outside_of_context`, `timeout_panic_caller`, `timeout_at_panic_caller`). Pausing a multi-thread runtime panics
//!   as in tokio, since the pause is tokio's (so `pause_time_in_main_threads` and
//!   `pause_time_in_spawn_threads` pass); a thread-per-core set ([`Timers`]) is not paused as a
//!   whole: each current-thread runtime of it pauses its own clock, and its paused sleeps leave
//!   the set's bases for that runtime's own.
//! - With no per-core setup, timers run on the fallback base's thread (see above), not on the
//!   runtime's own time driver: nothing needs `enable_time`, and a runtime's shutdown does not
//!   stop them. No cooperative budget is charged ([`Timeout`] polls its future first, as tokio's).
//! - A set made with [`Timers::with_config`] in `Mode::Coarse` completes up to 8/63 (12.7%) of the
//!   delay late (not tokio's timing; the default [`Timers::new`] and the fallback are Exact).
//!
//! # Model
//!
//! A [`Sleep`] (40 bytes) is a deadline and, once polled, a *registration*: the base it is filed
//! on, a cell index, and the slot and generation of the base's [`crate::Handle`] (the base
//! rebuilds the rest of the handle); the cell's state word holds the arming number `seq`. The
//! deadline is kept exactly, as the `Instant` given, so that [`Sleep::deadline`] gives it back;
//! a reset to a later deadline stores only that and a flag, and the poll that the filed
//! arming's fire wakes files the sleep again (see `sleep`). The base's payload is
//! a `u64` naming `(cell, seq)`; the cell (24 bytes: one atomic word, its state beside the waker
//! handshake, and a waker slot; in a chunked per-base table that never shrinks or moves) is what
//! the sleeping task and the firing thread share (its protocol, free of tokio so the model
//! checker runs it, is `protocol::cell`). No allocation happens per sleep once the table has grown to the population, and a
//! dropped sleep's cell is reused by the next one: creating and dropping timers does not grow
//! memory. A `Sleep` that is never polled costs nothing, and [`timeout`] files its sleep only if
//! the inner future is not ready at once.
//!
//! Wakers: each poll that does not complete registers the task's current waker in the cell
//! (unless the stored one would wake the same task), so the latest waker is the one woken. The
//! thread that delivers the fire updates the state word (FIRED) and then takes the waker out
//! and wakes it; a register that races that take wakes its own waker (the classic `AtomicWaker`
//! handshake), so no wake is lost. A delivery takes the waker out, so one fire wakes at most once;
//! a sleep that is dropped takes the waker out first, so a fire racing the drop wakes nobody.
//!
//! On the owner's thread (the thread whose current driver is the sleep's base): registering,
//! [`Sleep::reset`] (the base's in-place `reset_at`) and dropping (the base's local cancel) are
//! direct calls on the base, after taking it with one atomic swap that on a current-thread
//! runtime never fails; while the base is held the sleep's own cell is written with plain stores
//! (deliveries, its only other writers, run under the base too). On any other thread (a work-stealing runtime moved the task, or the
//! sleep was sent elsewhere): polling reads the cell only; dropping uses [`crate::Remote::cancel`]
//! (one CAS that races the fire: exactly one wins); resetting uses the one cross-core re-arm
//! function, [`crate::Remote::reset_at`] (in place, the handle kept; a later deadline sends the
//! owner nothing). A re-arm that finds the timer already firing files a new arming (`seq + 1`,
//! a remote schedule); the old payload still arrives, counts down, and neither marks the cell
//! fired nor wakes.
//!
//! Each base is turned by a task ([`Timers::driver`]) that waits on the base's fd through
//! `tokio::io::unix::AsyncFd`, so tokio's reactor wakes it when a timer is due or another
//! thread sent a message; the turn wakes the tasks whose timers fired, after the base is done.
//!
//! # Invariants
//! - Never early: a sleep is ready only when its cell says FIRED for its own `seq`, which only
//!   the delivery of that arming (after the base's never-early fire) sets, and no later
//!   deadline was stored since that arming was filed (else only once the clock reads it).
//! - No leak: a cell is freed by whichever side lets go last (the sleep on drop, the arming on
//!   delivery or a winning cancel); both sides' releases are one atomic update of the same word,
//!   so exactly one of them sees "nobody holds it". Cells freed off the owner's thread go to a
//!   lock-free stack the owner empties.
//! - At most one wake per fire (see Wakers), at most two armings per cell at a time (a turn
//!   delivers each payload inside the base's turn, before it fires anything else).
//!
//! # Given up
//! - The base is held through a try-flag: a thread that finds it taken (only possible on a
//!   multi-thread runtime, while another worker turns it) takes the cross-core path, or, to
//!   register a new sleep, yields and is polled again.
//! - The [`timeout`] limit counts from the first poll that finds the future pending, not from
//!   the call (so it can only be later than tokio's); [`timeout_at`] fixes it at the call.
//! - A base that cannot take another timer panics (see `Config::wheel_capacity`); so does the
//!   first fallback sleep if the fallback base or its thread cannot be made.
//! - A sleep whose base nothing can turn again (every [`Timers`] handle of its set and every
//!   turning task dropped: the runtime and the set are gone) panics when polled, with a message
//!   saying so, as tokio's sleeps do on a runtime that was shut down; a task waiting on one at
//!   that moment is woken to panic, not left pending. A [`Sleep::reset`] of such a sleep lets go
//!   of its cell, and its next poll files it on the polling thread's base. (Dropping the runtime
//!   alone, with the `Timers` kept, is not a close: a new turning task may still be spawned.)
//! - A sleep completes at the base's tick (1 ms by default): at most a tick late plus
//!   scheduling, as tokio's, in `Mode::Exact` (the fallback, and [`Timers::new`]); a set made
//!   with [`Timers::with_config`] in `Mode::Coarse` trades that for cheaper cancelled timeouts
//!   and completes up to 8/63 (12.7%) of the delay late.
//! - A cross-core re-arm of a timer that already fired needs a remote schedule; when the base
//!   refuses it (its reserve of free slots is empty, or the base is gone) the sleep lets go of
//!   its cell and files itself afresh on the polling thread's base at the next poll.

mod driver;
#[cfg(feature = "hyper")]
mod hyper;
mod instant;
mod interval;
#[cfg(feature = "test-util")]
mod paused;
mod sleep;
#[cfg(feature = "test-util")]
mod test_clock;
mod timeout;

use std::fmt;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::task::Poll;

#[cfg(feature = "hyper")]
pub use self::hyper::HyperTimer;
pub use instant::Instant;
pub use interval::{Interval, MissedTickBehavior, interval, interval_at};
pub use sleep::{Sleep, sleep, sleep_until};
pub use std::time::Duration;
#[cfg(feature = "test-util")]
pub use test_clock::{advance, pause, resume};
pub use timeout::{Timeout, timeout, timeout_at};

/// The error of a [`Timeout`], as in `tokio::time::error`.
pub mod error {
    pub use super::timeout::Elapsed;
}

use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::{Config, Mode};
use driver::Driver;

/// A set of bases for async code: one per core (thread-per-core), or one per worker of a
/// multi-thread runtime. `Clone` shares the set.
///
/// Thread-per-core, one current-thread runtime per core: see the [module](self) example, or
/// [`Timers::block_on`]. A multi-thread runtime:
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Timers};
///
/// let timers = Timers::new(2).unwrap();
/// let rt = tokio::runtime::Builder::new_multi_thread()
///     .worker_threads(2)
///     .on_thread_start(timers.on_thread_start())
///     .enable_io()
///     .build()
///     .unwrap();
/// rt.block_on(async {
///     timers.spawn_drivers().unwrap();
///     let job = tokio::spawn(time::timeout(Duration::from_millis(2), std::future::pending::<()>()));
///     assert!(job.await.unwrap().is_err());
/// });
/// ```
#[derive(Clone)]
pub struct Timers {
    set: Arc<Set>,
}

/// What the clones of one `Timers` share.
struct Set {
    drivers: Box<[Arc<Driver>]>,
    next: AtomicUsize,
}

impl Drop for Set {
    fn drop(&mut self) {
        // The last handle is gone: no new turning task can be made for these bases.
        for driver in self.drivers.iter() {
            driver.let_go();
        }
    }
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timers")
            .field("bases", &self.set.drivers.len())
            .finish()
    }
}

fn no_such_base(index: usize, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("no base {index} in a set of {len}"),
    )
}

impl Timers {
    /// Makes `n` bases with tokio's timing: [`Mode::Exact`] and a 1 ms tick, so a sleep
    /// completes at most about 1 ms after its deadline plus scheduling, never before. Errors as
    /// for [`crate::bases`].
    ///
    /// ```
    /// use tickwheel_percpu::time::Timers;
    /// let timers = Timers::new(2).unwrap();
    /// assert_eq!(timers.len(), 2);
    /// ```
    pub fn new(n: usize) -> io::Result<Self> {
        Self::with_config(n, Config::default().mode(Mode::Exact))
    }

    /// Makes `n` bases with `config` as given (see [`crate::bases`] for it and the errors). With
    /// `Config::default()`, that is [`Mode::Coarse`]: no cascading, cheaper for timeouts that are
    /// nearly always cancelled, but a sleep that runs out completes up to 8/63 (12.7%) of its delay
    /// late (an [`Interval`] with a period of a few ms then sees its ticks as missed).
    ///
    /// ```
    /// use tickwheel_percpu::{Config, time::Timers};
    /// let coarse = Timers::with_config(1, Config::default()).unwrap();
    /// # drop(coarse);
    /// ```
    pub fn with_config(n: usize, config: Config) -> io::Result<Self> {
        let (bases, _remote) = crate::bases::<u64>(n, config)?;
        let drivers: Vec<Arc<Driver>> = bases.into_iter().map(Driver::new).collect();
        Ok(Self {
            set: Arc::new(Set {
                drivers: drivers.into(),
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// Number of bases.
    pub fn len(&self) -> usize {
        self.set.drivers.len()
    }

    /// True if the set has no bases (never, for a set made by [`Timers::new`]).
    pub fn is_empty(&self) -> bool {
        self.set.drivers.is_empty()
    }

    /// Timers pending in base `index`'s wheel, and sleeps holding one of its cells (registered,
    /// not yet dropped; a fired sleep still holds its cell until dropped or reset). `None` if the
    /// base does not exist or another thread holds it at this moment.
    ///
    /// ```
    /// use tickwheel_percpu::time::Timers;
    /// let timers = Timers::new(1).unwrap();
    /// assert_eq!(timers.occupancy(0), Some((0, 0)));
    /// ```
    pub fn occupancy(&self, index: usize) -> Option<(usize, usize)> {
        let driver = self.set.drivers.get(index)?;
        let mut held = driver.hold()?;
        let pending = held.base.len();
        Some((pending, driver.cells_in_use(&mut held)))
    }

    /// A snapshot of base `index`'s counters (`None` as for [`Timers::occupancy`]).
    pub fn base_stats(&self, index: usize) -> Option<crate::BaseStats> {
        let driver = self.set.drivers.get(index)?;
        let held = driver.hold()?;
        Some(held.base.stats())
    }

    fn get(&self, index: usize) -> io::Result<&Arc<Driver>> {
        self.set
            .drivers
            .get(index)
            .ok_or_else(|| no_such_base(index, self.set.drivers.len()))
    }

    /// Makes base `index` the calling thread's until the guard drops: sleeps first polled on this
    /// thread are filed on it.
    ///
    /// ```
    /// use tickwheel_percpu::time::Timers;
    /// let timers = Timers::new(1).unwrap();
    /// let _on_base_0 = timers.enter(0).unwrap();
    /// assert!(timers.enter(1).is_err());
    /// ```
    pub fn enter(&self, index: usize) -> io::Result<EnterGuard> {
        let driver = self.get(index)?.clone();
        Ok(EnterGuard {
            previous: driver::set_current(Some(driver)),
            _not_send: PhantomData,
        })
    }

    /// The task that turns base `index`: spawn it once on the runtime that runs the base's
    /// thread (it registers the base's fd with that runtime's reactor at its first poll, so the
    /// runtime needs I/O enabled). It runs until the runtime drops it; an error means the fd
    /// could not be registered.
    pub fn driver(
        &self,
        index: usize,
    ) -> io::Result<impl Future<Output = io::Result<()>> + Send + 'static> {
        Ok(driver::drive(self.get(index)?.clone()))
    }

    /// Spawns the turning task of every base on the current runtime (for a multi-thread runtime;
    /// call from inside it). Panics outside a runtime, like `tokio::spawn`.
    #[track_caller]
    pub fn spawn_drivers(&self) -> io::Result<Vec<tokio::task::JoinHandle<io::Result<()>>>> {
        (0..self.len())
            .map(|i| self.driver(i).map(tokio::spawn))
            .collect()
    }

    /// A hook for `tokio::runtime::Builder::on_thread_start`: gives each new runtime thread a
    /// base, round robin (threads beyond the number of bases share them; blocking-pool threads
    /// take one too).
    pub fn on_thread_start(&self) -> impl Fn() + Send + Sync + 'static {
        let timers = self.clone();
        move || {
            // Relaxed: only spreads threads over bases.
            let i = timers.set.next.fetch_add(1, Ordering::Relaxed) % timers.len();
            driver::set_current(Some(timers.set.drivers[i].clone()));
        }
    }

    /// Runs `future` to completion on `rt` (a current-thread runtime with I/O enabled) with base
    /// `index` as this thread's base and its turning task spawned on `rt`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel_percpu::time::{self, Timers};
    /// let timers = Timers::new(1).unwrap();
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    /// let out = timers.block_on(0, &rt, async {
    ///     time::sleep(Duration::from_millis(1)).await;
    ///     42
    /// });
    /// assert_eq!(out.unwrap(), 42);
    /// ```
    #[track_caller]
    pub fn block_on<F: Future>(
        &self,
        index: usize,
        rt: &tokio::runtime::Runtime,
        future: F,
    ) -> io::Result<F::Output> {
        let _enter = self.enter(index)?;
        let mut turning = std::pin::pin!(self.driver(index)?);
        let mut future = std::pin::pin!(future);
        // The turning task runs inside this future, so it (and its fd registration) is gone
        // when `block_on` returns.
        rt.block_on(std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = future.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            match turning.as_mut().poll(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            }
        }))
    }
}

/// Base of the calling thread until dropped (the previous one comes back); see [`Timers::enter`].
#[must_use = "the base is the thread's only while the guard lives"]
pub struct EnterGuard {
    previous: Option<Arc<Driver>>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for EnterGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        driver::set_current(self.previous.take());
    }
}

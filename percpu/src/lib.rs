//! Per-core timer bases on top of the [`tickwheel`] wheel.
//!
//! [`bases`] makes N bases, one per core you intend to run ([`base`] makes one, for one loop). Each [`Base`] owns a wheel touched
//! only by its owning thread; other threads schedule, re-arm and cancel through a [`Remote`],
//! which uses only atomics and two lock-free stacks per base that can never be full: no mutex, no
//! rwlock, no spin lock, and no waiting for another thread on any cross-core path. Each base
//! exposes one fd that any epoll/mio loop can register ([`Base::fd`]), and one call
//! ([`Base::turn`]) that does its work. [`Runtime`] runs the default loop on pinned threads for
//! users who have no loop of their own. `tickwheel-shm` puts one timer set in shared memory
//! for several processes.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel_percpu::{bases, ClockSource, Config, ManualClock};
//!
//! let clock = ManualClock::new();
//! let config = Config::default().clock(ClockSource::Manual(clock.clone()));
//! let (mut bases, remote) = bases::<&str>(2, config).unwrap();
//! let h = bases[0].schedule_after(Duration::from_millis(10), "local").unwrap();
//! remote.schedule_after(0, Duration::from_millis(5), "from afar").unwrap();
//! assert!(remote.reset_after(h, Duration::from_millis(30))); // in place, from any thread
//! assert!(remote.cancel(h)); // from any thread: true means it will never fire
//! clock.advance(Duration::from_millis(20));
//! let mut fired = Vec::new();
//! bases[0].turn(|v| fired.push(v));
//! assert_eq!(fired, ["from afar"]);
//! ```
//!
//! # Ground rules for the shared slot state
//!
//! Every base has a fixed table of slots (`Config::wheel_capacity`, or 4 Mi by default, allocated
//! zeroed so untouched slots cost no memory). A slot's record is the timer's only record: one
//! `AtomicU64` word packing `(generation, seq, flags, state)`, the deadline tick, a link word for
//! the base's stacks, the owner's wheel links (the base's wheel, `tickwheel::raw`, links the
//! records themselves) and the payload, 40 bytes with a `u64` payload. A [`Handle`] is `(set, base, slot, generation)`. The full transition table
//! is in `protocol::slots`; in short:
//!
//! - `FREE(g)` → `PENDING(g)`: the thread holding the slot arms it (the owner, or a remote that
//!   took it from the base's reserve).
//! - `PENDING(g)` → `CANCELLED(g)`: any thread cancelling, by CAS.
//! - `PENDING(g)` → `FREE(g+1)`: the owner firing or cancelling, by CAS, when no flag is set;
//!   with a flag set (a notice pending, a re-arm in flight, a payload in the cell) the owner
//!   retires it to `CANCELLED` instead and frees it when the notice comes round.
//! - `PENDING` → `PENDING` with `seq + 1`: a remote re-arm, by two CASes around its deadline
//!   store (a `RESETTING` flag held in between, which nobody waits for).
//! - `CANCELLED(g)` → `FREE(g+1)`: the owner, once no flag says another thread still has a use
//!   for the record.
//!
//! Only the `PENDING` word is contested, and everyone who leaves it uses a CAS, so exactly one of
//! "fire" and "cancel" wins. "Fired" is not a state of its own: firing frees the slot and moves
//! the generation on in the same CAS, so every handle of that arming is stale from then on.
//!
//! Cancel against fire, on two cores:
//!
//! ```text
//!   CPU0 (owner of base 0)                 CPU1 (holds handle h = (0, s, g))
//!   turn(): wheel says slot s is due,
//!   deadline word says it is time
//!                                          Remote::cancel(h):
//!   CAS word[s]  PENDING(g) -> FREE(g+1)    CAS word[s]  PENDING(g) -> CANCELLED(g)+QUEUED
//!          \_____________ one of the two CASes comes first ______________/
//!   owner first:  run handler(payload)      -> cancel's CAS fails: returns false ("fired/firing")
//!   cancel first: CAS fails, finds          -> returns true ("will never fire");
//!                 CANCELLED: drop payload;     pushes slot s on the notice stack, so the owner
//!                 the notice frees the slot    frees it at its next turn
//! ```
//!
//! A stale handle (its slot since fired, cancelled or re-armed) carries an old generation, so its
//! CAS compares against a word that can never again be `PENDING(old)` (until the 32-bit
//! generation wraps): it returns false and touches nothing, on any core.
//!
//! Re-arm against fire: the owner reads the deadline word before its CAS to `FREE`; a remote
//! re-arm bumps `seq` after storing the new deadline, so an owner that read the old deadline
//! fails its CAS, reads again, and files the timer at the new deadline.
//!
//! Remote schedule: the remote pops a free slot from the base's reserve (a lock-free stack the
//! owner refills every turn), writes the payload into the slot's cell, arms it, and pushes the slot
//! on the base's notice stack. The owner files it at its next turn. No queue can be full: the
//! stacks are linked through the slots themselves, and a slot is on at most one of them.
//!
//! Wake-ups: see `protocol::wake` (one word, all RMW; no notice is missed, at most one eventfd
//! write happens per park, and only the first notice of a batch touches the word at all).
//!
//! # The loom suite
//!
//! The `loom-tests` crate model-checks these protocols:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p tickwheel-loom-tests --release`

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(target_os = "linux"))]
compile_error!("tickwheel-percpu runs on Linux only: it is built on timerfd, eventfd and epoll");

mod base;
mod clock;
mod error;
mod handle;
/// The cross-core protocols, public only for the loom models (feature `test-hooks`).
#[cfg(any(feature = "test-hooks", loom))]
pub mod protocol;
#[cfg(not(any(feature = "test-hooks", loom)))]
#[allow(
    unreachable_pub,
    dead_code,
    reason = "`pub` for the loom models; parts serve only them, `shm` or `tokio`"
)]
mod protocol;
mod remote;
pub mod runtime;
mod shared;
mod stats;
mod sync;
mod sys;
#[cfg(all(feature = "tokio", not(loom)))]
pub mod time;

use std::io;
use std::time::Duration;

pub use base::Base;
pub use clock::{ClockSource, ManualClock};
pub use error::{ConfigError, ScheduleError};
pub use handle::Handle;
pub use remote::Remote;
pub use runtime::Runtime;
pub use stats::{BaseStats, Lateness};
pub use tickwheel::Mode;

/// The crate README's example, compiled and run as a doc-test so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use crossbeam_utils::CachePadded;
use shared::{Group, Shared};
use sync::Arc;

/// Slots per base when `Config::wheel_capacity` is `None`.
pub const DEFAULT_SLOTS: usize = 1 << 22;

/// Largest `Config::wheel_capacity` (slot indices must stay below the stacks' end marker).
pub const MAX_SLOTS: usize = u32::MAX as usize - 1;

/// Largest `Config::reserve_capacity`.
pub const MAX_RESERVE: usize = 1 << 20;

/// How a set of bases is built: start from `Config::default()` and change what you need.
///
/// ```
/// use std::time::Duration;
/// use tickwheel_percpu::{Config, Mode};
///
/// let config = Config::default()
///     .mode(Mode::Exact)
///     .tick(Duration::from_micros(100))
///     .wheel_capacity(1 << 16);
/// assert_eq!(config.wheel_capacity, Some(1 << 16));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Wheel mode: `Coarse` (default; no cascading, fires up to 8/63 (12.7%) of the delay late, suits
    /// timeouts that are nearly always cancelled) or `Exact`.
    pub mode: Mode,
    /// Wheel tick (default 1 ms). Deadlines round up to a tick, so nothing fires early.
    pub tick: Duration,
    /// Clock to follow (default `CLOCK_MONOTONIC`).
    pub clock: ClockSource,
    /// Most timers per base (at most [`MAX_SLOTS`]); also the size of its shared slot table.
    /// `None`: [`DEFAULT_SLOTS`].
    pub wheel_capacity: Option<usize>,
    /// Free slots each base keeps in reserve for schedules from other threads (1 to
    /// [`MAX_RESERVE`], default 4096): how many remote schedules a base takes between two of its
    /// turns before refusing with `ReserveEmpty`. Remote cancels and re-arms need no reserve.
    pub reserve_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mode: Mode::Coarse,
            tick: Duration::from_millis(1),
            clock: ClockSource::Monotonic,
            wheel_capacity: None,
            reserve_capacity: 4096,
        }
    }
}

impl Config {
    /// Sets [`Config::mode`].
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`Config::tick`].
    #[must_use]
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Sets [`Config::clock`].
    #[must_use]
    pub fn clock(mut self, clock: ClockSource) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`Config::wheel_capacity`] to `Some(slots)`.
    #[must_use]
    pub fn wheel_capacity(mut self, slots: usize) -> Self {
        self.wheel_capacity = Some(slots);
        self
    }

    /// Sets [`Config::reserve_capacity`].
    #[must_use]
    pub fn reserve_capacity(mut self, slots: usize) -> Self {
        self.reserve_capacity = slots;
        self
    }
}

/// Checks a configuration before anything is allocated; returns the slots per base.
fn validate(n: usize, config: &Config) -> Result<usize, ConfigError> {
    if n == 0 || n > usize::from(u16::MAX) {
        return Err(ConfigError::new("n", "in 1..=65535"));
    }
    if config.tick.is_zero() {
        return Err(ConfigError::new("tick", "at least 1 ns"));
    }
    let slots = config.wheel_capacity.unwrap_or(DEFAULT_SLOTS);
    if slots == 0 || slots > MAX_SLOTS {
        return Err(ConfigError::new("wheel_capacity", "in 1..=u32::MAX - 1"));
    }
    if config.reserve_capacity == 0 || config.reserve_capacity > MAX_RESERVE {
        return Err(ConfigError::new("reserve_capacity", "in 1..=2^20"));
    }
    Ok(slots)
}

/// Makes one base, for a program with one event loop; its [`Remote`] is [`Base::remote`].
/// The same as `bases(1, config)` and its only base; the same errors.
///
/// ```
/// use std::time::Duration;
/// use tickwheel_percpu::{base, Config};
///
/// let mut base = base::<&str>(Config::default()).unwrap();
/// let h = base.schedule_after(Duration::from_secs(30), "idle").unwrap();
/// assert!(base.remote().cancel(h));
/// ```
pub fn base<T: Send + 'static>(config: Config) -> io::Result<Base<T>> {
    let (mut bases, _remote) = bases(1, config)?;
    Ok(bases.pop().expect("bases(1, _) makes one base"))
}

/// Makes `n` bases sharing one clock, and a [`Remote`] reaching all of them.
///
/// Errors (`InvalidInput`, checked before anything is allocated): `n` is 0 or above 65,535, a
/// capacity is out of its range or the tick is zero (a [`ConfigError`] naming the field is the
/// error's source); the wheel refuses its geometry (the wheel's [`tickwheel::BuildError`] is the
/// source). Or a timerfd/eventfd/epoll could not be created.
pub fn bases<T: Send + 'static>(n: usize, config: Config) -> io::Result<(Vec<Base<T>>, Remote<T>)> {
    let slots = validate(n, &config)?;
    let timeline = clock::Timeline::new(&config.clock, config.tick)?;
    bases_on(n, &config, slots, timeline)
}

/// [`bases`] on the clock of a tokio runtime (the `time` module's base for a paused runtime;
/// `config.clock` is not read).
#[cfg(all(feature = "test-util", not(loom)))]
fn bases_on_tokio<T: Send + 'static>(
    n: usize,
    config: Config,
    runtime: tokio::runtime::Handle,
) -> io::Result<(Vec<Base<T>>, Remote<T>)> {
    let slots = validate(n, &config)?;
    let timeline = clock::Timeline::on_tokio(runtime, config.tick)?;
    bases_on(n, &config, slots, timeline)
}

fn bases_on<T: Send + 'static>(
    n: usize,
    config: &Config,
    slots: usize,
    timeline: clock::Timeline,
) -> io::Result<(Vec<Base<T>>, Remote<T>)> {
    // The wheel links the slot records themselves; the table is what bounds it.
    let wheels = (0..n)
        .map(|_| {
            tickwheel::Builder::new(config.mode)
                .build_raw()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let shared = (0..n)
        .map(|_| Shared::new(slots).map(CachePadded::new))
        .collect::<io::Result<Vec<_>>>()?;
    let group = Arc::new(Group {
        set: handle::next_set_tag(),
        timeline,
        bases: shared.into_boxed_slice(),
    });
    let reserve_target = config.reserve_capacity.min(slots);
    let mut out = Vec::with_capacity(n);
    for (index, wheel) in wheels.into_iter().enumerate() {
        out.push(Base::new(group.clone(), index, wheel, reserve_target)?);
    }
    Ok((out, Remote { group }))
}

//! Per-core timer bases on top of the [`tickwheel`] wheel.
//!
//! [`bases`] makes N bases, one per core you intend to run. Each [`Base`] owns a wheel touched
//! only by its owning thread; other threads schedule and cancel through a [`Remote`], which uses
//! only atomics and bounded lock-free queues: no mutex, no rwlock, no spin lock on any cross-core
//! path. Each base exposes one fd that any epoll/mio loop can register ([`Base::fd`]), and one call
//! ([`Base::turn`]) that does its work. [`Runtime`] runs the default loop on pinned threads for
//! users who have no loop of their own. [`shm`] puts one timer set in shared memory for several
//! processes.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel_percpu::{bases, ClockSource, Config, ManualClock};
//!
//! let clock = ManualClock::new();
//! let config = Config { clock: ClockSource::Manual(clock.clone()), ..Config::default() };
//! let (mut bases, remote) = bases::<&str>(2, config).unwrap();
//! let h = bases[0].schedule_after(Duration::from_millis(10), "local").unwrap();
//! remote.schedule_after(0, Duration::from_millis(5), "from afar").unwrap();
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
//! zeroed so untouched slots cost no memory). Each slot is one `AtomicU64` packing
//! `(generation: u32, state)`. A [`Handle`] is `(set, base, slot, generation)`.
//!
//! States: `FREE` (held by a free list or by the thread about to arm it), `PENDING` (armed; will
//! fire unless a cancel wins), `CANCELLED` (a cancel won; the owner has yet to reclaim the slot).
//! "Fired" is not a state of its own: firing frees the slot and moves the generation on in the same
//! CAS, so every handle of that arming is stale from then on.
//!
//! | transition                   | who                                     | how   |
//! |------------------------------|-----------------------------------------|-------|
//! | `FREE(g)` → `PENDING(g)`     | the slot's holder (owner, or a remote that took it from the reserve) | store |
//! | `PENDING(g)` → `FREE(g)`     | same holder, before the handle escaped (inbox full) | store |
//! | `PENDING(g)` → `CANCELLED(g)`| any thread cancelling (remote, or owner for an in-flight remote schedule) | CAS |
//! | `PENDING(g)` → `FREE(g+1)`   | owner: fire, or own cancel of a wheel entry | CAS |
//! | `CANCELLED(g)` → `FREE(g+1)` | owner, after removing the wheel entry (if any) | store |
//!
//! Only the `PENDING` word is contested, and everyone who leaves it uses a CAS, so exactly one of
//! "fire" and "cancel" wins. That CAS is the one atomic read-modify-write on the owner's local
//! cancel/fire path; local schedule is a plain store and local reset touches no atomic but a load.
//!
//! Orderings: slot words are all Relaxed. The race is settled by one word's modification order; no
//! other memory is published through the word (the payload never leaves the owner's thread, and a
//! remote schedule's payload travels in the inbox). Slots and messages change hands only through
//! the queues ([`mpsc::Queue`]), whose per-cell sequence numbers are Release on write and Acquire
//! on read, which also carries the slot word's latest value along. The wake word uses AcqRel RMWs
//! (see `protocol::wake`).
//!
//! Cancel against fire, on two cores:
//!
//! ```text
//!   CPU0 (owner of base 0)                 CPU1 (holds handle h = (0, s, g))
//!   turn(): wheel says slot s is due
//!                                          Remote::cancel(h):
//!   CAS word[s]  PENDING(g) -> FREE(g+1)    CAS word[s]  PENDING(g) -> CANCELLED(g)
//!          \_____________ one of the two CASes comes first ______________/
//!   owner first:  run handler(payload)      -> cancel's CAS fails: returns false ("fired/firing")
//!   cancel first: CAS fails, finds          -> returns true ("will never fire");
//!                 CANCELLED(g): drop           pushes Cancel{s, g} notice (best effort)
//!                 payload, FREE(g+1)
//! ```
//!
//! A stale handle (its slot since fired, cancelled or re-armed) carries an old generation, so its
//! CAS compares against a word that can never again equal `PENDING(old)` (until the 32-bit
//! generation wraps): it returns false and touches nothing, on any core.
//!
//! Remote schedule: the remote pops a free slot from the base's reserve (a [`mpsc::Queue`] the
//! owner refills every turn), arms it, pushes `Schedule{slot, g, deadline, payload}` to the inbox
//! and returns the handle. If the inbox is full it un-arms the slot, returns it to the reserve, and
//! hands the payload back (`ScheduleError::InboxFull`). The owner files the payload at its next
//! turn, or reclaims the slot at once if it finds it already `CANCELLED`.
//!
//! Wake-ups: see [`protocol::wake`] (one word, EMPTY/NOTIFIED/PARKED, all RMW; no message is
//! missed and at most one eventfd write happens per park).
//!
//! # The loom suite
//!
//! The `loom-tests` crate model-checks these protocols:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p tickwheel-loom-tests --release`

#![deny(unsafe_op_in_unsafe_fn)]

mod base;
mod clock;
mod error;
mod handle;
pub mod mpsc;
#[doc(hidden)]
pub mod protocol;
mod remote;
pub mod runtime;
pub mod shm;
mod stats;
mod sync;
mod sys;

use std::io;
use std::time::Duration;

pub use base::Base;
pub use clock::{ClockSource, ManualClock};
pub use error::ScheduleError;
pub use handle::Handle;
pub use remote::{Remote, RescheduleError};
pub use runtime::Runtime;
pub use stats::{BaseStats, Lateness};
pub use tickwheel::Mode;

use crossbeam_utils::CachePadded;
use remote::{Group, Shared};
use sync::Arc;
use tickwheel::Wheel;

/// Slots per base when `Config::wheel_capacity` is `None`.
pub const DEFAULT_SLOTS: usize = 1 << 22;

/// How a set of bases is built.
#[derive(Clone, Debug)]
pub struct Config {
    /// Wheel mode: `Coarse` (default; no cascading, fires up to ~12.5% of the delay late, suits
    /// timeouts that are nearly always cancelled) or `Exact`.
    pub mode: Mode,
    /// Wheel tick (default 1 ms). Deadlines round up to a tick, so nothing fires early.
    pub tick: Duration,
    /// Clock to follow (default `CLOCK_MONOTONIC`).
    pub clock: ClockSource,
    /// Most timers per base; also the size of its shared slot table. `None`: [`DEFAULT_SLOTS`].
    pub wheel_capacity: Option<usize>,
    /// Inbox cells per base (rounded up to a power of two, at least 2; default 4096). Also the number of free
    /// slots kept in reserve for remote schedules.
    pub inbox_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mode: Mode::Coarse,
            tick: Duration::from_millis(1),
            clock: ClockSource::Monotonic,
            wheel_capacity: None,
            inbox_capacity: 4096,
        }
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Makes `n` bases sharing one clock, and a [`Remote`] reaching all of them.
///
/// Errors: `n` is 0 or above 65,535; a capacity is 0 or above 2^32; the tick is zero; or a
/// timerfd/eventfd/epoll could not be created.
pub fn bases<T: Send + 'static>(n: usize, config: Config) -> io::Result<(Vec<Base<T>>, Remote<T>)> {
    if n == 0 || n > usize::from(u16::MAX) {
        return Err(invalid("number of bases must be in 1..=65535"));
    }
    let slots = config.wheel_capacity.unwrap_or(DEFAULT_SLOTS);
    if slots == 0 || slots > u32::MAX as usize {
        return Err(invalid("wheel_capacity must be in 1..=u32::MAX"));
    }
    if config.inbox_capacity == 0 {
        return Err(invalid("inbox_capacity must be at least 1"));
    }
    let timeline = clock::Timeline::new(&config.clock, config.tick)?;
    let shared = (0..n)
        .map(|_| Shared::new(slots, config.inbox_capacity).map(CachePadded::new))
        .collect::<io::Result<Vec<_>>>()?;
    let group = Arc::new(Group {
        set: handle::next_set_tag(),
        timeline,
        bases: shared.into_boxed_slice(),
    });
    let reserve_target = config.inbox_capacity.min(slots);
    let mut out = Vec::with_capacity(n);
    for index in 0..n {
        let wheel = match config.wheel_capacity {
            // The table bounds the wheel, so an unbounded wheel is never asked for more.
            None => Wheel::new(config.mode),
            Some(cap) => Wheel::builder(config.mode)
                .capacity(cap)
                .build()
                .map_err(|_| invalid("wheel configuration rejected"))?,
        };
        out.push(Base::new(group.clone(), index, wheel, reserve_target)?);
    }
    Ok((out, Remote { group }))
}

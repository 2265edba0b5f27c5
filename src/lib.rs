//! A hierarchical timing wheel for servers that hold millions of timeouts, nearly all of which are
//! cancelled or re-armed before they fire.
//!
//! # Design
//!
//! A timer is a `u64` tick deadline and a payload. The wheel keeps timers in levels of 64
//! buckets, each level coarser than the one below, after Varghese and Lauck's hierarchical
//! timing wheels. Inserting, cancelling and re-arming are O(1): timers live in a slab and are
//! threaded onto per-bucket lists by index, so a cancel unlinks and frees in place and the next
//! insert reuses the memory. One `u64` bitmap per level says which buckets hold timers, so the
//! next expiry is found in O(levels) and a clock that jumps ahead by any amount walks only the
//! occupied buckets, never the empty ticks.
//!
//! The wheel has two modes behind one API ([`Mode`]):
//!
//! ## Exact: cascading, fires on its deadline tick
//!
//! 64 slots a level, each level 64x coarser. A timer goes on the level of the highest 6-bit digit
//! in which its deadline differs from the clock; when the clock reaches the start of a slot on a
//! higher level, the slot's timers cascade down, at most `levels - 1` times each. Level 2, where
//! timeouts of seconds to minutes wait, keeps its timers in an array per slot with the tick each
//! is filed for: when the clock reaches the slot, the array's positions are sorted by level-1
//! slot and then by tick, and the timers are handed out from it, so such a timer is read when it
//! is placed and when it fires, and not by the cascades between. A timer fires in the first
//! poll whose `now` reaches its deadline, and timers leave a drain in non-decreasing deadline
//! order. A reset to a later deadline, the keepalive refresh, only rewrites the expiry:
//! the timer stays in its slot and is placed again when that slot comes due, as tokio's driver
//! does. Given up: cascading (and that re-placing) costs work on long timers that do expire, and
//! [`Wheel::next_expiry`] may name a slot's start rather than a deadline.
//!
//! Levels for a 1 ms tick (the default is 6 levels, up to 11 cover every `u64`):
//!
//! | level | slot width | a level spans      |
//! |-------|------------|--------------------|
//! | 0     | 1 ms       | 64 ms              |
//! | 1     | 64 ms      | 4.1 s              |
//! | 2     | 4.1 s      | 4.4 min            |
//! | 3     | 4.4 min    | 4.7 h              |
//! | 4     | 4.7 h      | 12.4 days          |
//! | 5     | 12.4 days  | 2.2 years          |
//! | overflow | -       | later deadlines, placed when the clock reaches their 2.2-year block |
//!
//! ## Coarse: Linux `timer_list`, no cascading
//!
//! 64 buckets a level, level `n` has a granularity of `8^n` ticks and holds delays below
//! `63 * 8^n`, the level Linux's `calc_wheel_index` picks. The deadline is rounded *up* to the
//! level's granularity, so a timer never fires early and is never cascaded. Given up: precision.
//! The slack is below one granule, at most 8/63 (about 12.7%) of the delay, and never more than
//! Linux gives for the same delay (Linux is always at least one tick late). For a keepalive that
//! is reset on every request, this is the right trade. A reset to a later expiry (the keepalive
//! refresh) only rewrites it, as in Exact mode: the timer stays in its bucket and is placed again
//! when that bucket comes due. Given up for that: [`Wheel::next_expiry`] may name such a bucket,
//! a wake-up that fires nothing, at most once per bucket that timers were pushed out of.
//!
//! Levels for a 1 ms tick (the default is 9 levels, as Linux with HZ > 100; up to 20):
//!
//! | level | granularity | delays up to | worst slack    |
//! |-------|-------------|--------------|----------------|
//! | 0     | 1 ms        | 63 ms        | 0              |
//! | 1     | 8 ms        | 504 ms       | 7 ms           |
//! | 2     | 64 ms       | 4 s          | 63 ms          |
//! | 3     | 512 ms      | 32 s         | 511 ms         |
//! | 4     | 4.1 s       | 4.3 min      | 4.1 s          |
//! | 5     | 33 s        | 34 min       | 33 s           |
//! | 6     | 4.4 min     | 4.6 h        | 4.4 min        |
//! | 7     | 35 min      | 1.5 days     | 35 min         |
//! | 8     | 4.7 h       | 12.2 days    | 4.7 h          |
//! | overflow | -        | later        | rounded to 4.7 h, placed when in range |
//!
//! ## Both modes
//!
//! - **Never early.** A timer's expiry ([`Wheel::expiry`]) is fixed when it is inserted or reset,
//!   is never before its deadline, and it fires in the first [`Wheel::poll`] whose `now` reaches
//!   it. A deadline at or before [`Wheel::now`] is due at once.
//! - **Any `u64` deadline.** Deadlines beyond the top level wait on an overflow list and are
//!   placed when they come in range, instead of being clamped (Linux) or refused (tokio).
//!   `u64::MAX` works, and no arithmetic overflows.
//! - **Ids are checked.** A [`TimerId`] is a slab index and a generation. A stale id (fired,
//!   cancelled, entry reused) does nothing. Each wheel starts its generations at a random seed,
//!   so an id from another wheel is rejected except with probability about 2^-32 per use; an id
//!   aliases a timer of its own wheel only after exactly 2^32 reuses of its slab entry.
//! - **32 bytes a timer** with a `u64` payload (the slab stores such entries 32-byte aligned, so
//!   one entry never straddles two cache lines; a larger payload adds its own size, unpadded),
//!   and 8 more for an Exact timer while it waits on level 2 (its place in the slot's array);
//!   flat under re-arming, since freed entries are reused at once.
//! - **The clock never goes back**: polling with an earlier `now` is a no-op.
//!
//! The wheel is single-threaded `&mut self` code with no atomics; its one `unsafe` operation is a
//! cache prefetch (`src/prefetch.rs`). Sharing it between cores is the job of the per-core layer
//! built on top of it.
//!
//! # Your own storage
//!
//! [`Wheel`] keeps its timers in its own slab. [`raw::RawWheel`] is the same wheel (levels,
//! bitmaps, clock, drain) over link storage the caller owns: the caller keeps, per timer index,
//! the few fields of [`raw::Links`] (two links, a list number, an expiry) inside its own record,
//! and links, relinks and unlinks indices; `poll` hands an index back when it is due. So a timer
//! that must also live in a table of the caller's (a connection, a slot other threads read) is
//! one record, not a record plus a wheel entry that point at each other. Its storage may even
//! let a timer's expiry rise without telling the wheel (a deferred re-arm); see [`raw`].
//!
//! # Example
//!
//! ```
//! use tickwheel::{Mode, Wheel};
//!
//! let mut wheel = Wheel::new(Mode::Coarse);
//! let keepalive = wheel.insert(5_000, "conn 7").unwrap();
//! // A request arrives at tick 1200: push the idle timeout back.
//! assert!(wheel.reset(keepalive, 1_200 + 5_000));
//! let expiry = wheel.expiry(keepalive).unwrap();
//! assert!(expiry >= 6_200 && expiry - 6_200 <= 6_200 / 8);
//! assert_eq!(wheel.poll(expiry - 1), None);
//! assert_eq!(wheel.poll(expiry), Some((keepalive, "conn 7")));
//! ```
#![deny(unsafe_code)]

mod batches;
mod buckets;
mod builder;
mod geometry;
mod lists;
mod prefetch;
pub mod raw;
mod slab;
mod wheel;

pub use builder::{BuildError, Builder};
pub use wheel::{Drain, Wheel};

/// The crate README's example, compiled and run as a doc-test so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.crate.md")]
struct ReadmeDoctests;

/// How the wheel trades precision for work; see the [crate documentation](crate).
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// // Exact fires on the deadline tick; Coarse rounds a 1000-tick delay up to a 64-tick granule.
/// let mut exact = Wheel::new(Mode::Exact);
/// let mut coarse = Wheel::new(Mode::Coarse);
/// let e = exact.insert(1_000, ()).unwrap();
/// let c = coarse.insert(1_000, ()).unwrap();
/// assert_eq!(exact.expiry(e), Some(1_000));
/// assert_eq!(coarse.expiry(c), Some(1_024));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Cascading levels, 64x coarser each: a timer fires on its deadline tick.
    Exact,
    /// Linux `timer_list`: levels 8x coarser each, deadlines rounded up, no cascading.
    Coarse,
}

/// Names a timer in one [`Wheel`]: a slab index and a generation. Copy it freely; once the timer
/// fires or is cancelled the id goes stale and every call with it does nothing.
///
/// ```
/// use tickwheel::{Mode, TimerId, Wheel};
///
/// let mut wheel = Wheel::new(Mode::Coarse);
/// let id = wheel.insert(100, 'a').unwrap();
/// let stored: u64 = id.to_bits(); // e.g. kept in an atomic or a connection table
/// assert_eq!(wheel.cancel(TimerId::from_bits(stored)), Some('a'));
/// assert_eq!(wheel.cancel(id), None, "stale once cancelled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

impl TimerId {
    /// The id as one `u64`, for callers that store ids in atomics or pack them with other fields.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The id back from [`to_bits`](Self::to_bits). Any `u64` is accepted: an id that names no
    /// timer of the wheel it is used with is simply stale.
    pub fn from_bits(bits: u64) -> Self {
        TimerId {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// The error of [`Wheel::insert`] on a bounded wheel that is full; it hands the value back.
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// let mut wheel = Wheel::builder(Mode::Coarse).capacity(1).build().unwrap();
/// wheel.insert(10, String::from("first")).unwrap();
/// let full = wheel.insert(20, String::from("second")).unwrap_err();
/// assert_eq!(full.to_string(), "the timer wheel is at capacity");
/// assert_eq!(full.into_inner(), "second", "nothing is lost");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// The value that could not be inserted.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::fmt::Display for Full<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the timer wheel is at capacity")
    }
}

impl<T: std::fmt::Debug> std::error::Error for Full<T> {}

/// Counters a wheel keeps since it was built; read them with [`Wheel::stats`].
///
/// New counters may be added, so the struct is `#[non_exhaustive]`: read its fields, do not
/// build one.
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// let mut wheel = Wheel::new(Mode::Coarse);
/// let id = wheel.insert(1_000, ()).unwrap();
/// wheel.reset(id, 5_000); // a keepalive refresh: pushed later, only the expiry is rewritten
/// let stats = wheel.stats();
/// assert_eq!((stats.inserted, stats.resets, stats.resets_deferred), (1, 1, 1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timers inserted.
    pub inserted: u64,
    /// Timers handed out by `poll`.
    pub fired: u64,
    /// Timers removed by `cancel`.
    pub cancelled: u64,
    /// Successful `reset` calls.
    pub resets: u64,
    /// Resets that stayed in their bucket and only rewrote the expiry.
    pub resets_in_place: u64,
    /// Resets to a later expiry in another bucket that only rewrote the expiry; the timer is
    /// placed again when its old bucket comes due (counted in `replaced` then).
    pub resets_deferred: u64,
    /// Timers moved down a level (Exact) or out of the overflow list (both modes).
    pub cascades: u64,
    /// Timers placed again when the bucket they were deferred in came due.
    pub replaced: u64,
}

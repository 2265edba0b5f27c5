//! Time: clock sources, the shared timeline, and tick conversions.
//!
//! All bases made by one [`crate::bases`] call share one [`Timeline`]: a clock, an epoch taken at
//! creation, and the tick length. Time inside the crate is `u64` nanoseconds since the epoch; the
//! wheel runs on ticks of `tick_ns`.
//!
//! Rounding, so nothing fires early: the current tick is `floor(now / tick)` and a deadline's tick
//! is `ceil(deadline / tick)`. A timer fires when the current tick reaches its deadline tick, so
//! `now >= floor(now/tick)*tick >= ceil(deadline/tick)*tick >= deadline`.
//!
//! `Instant` is `CLOCK_MONOTONIC` on Linux. The epoch is read as an `Instant` first and then as raw
//! clock nanoseconds, so the raw epoch is never earlier than the `Instant` epoch; converting an
//! `Instant` deadline to raw time can then only move it later (by the nanoseconds between the two
//! reads), never earlier. For `Manual` the `Instant`s the API hands out are `epoch + elapsed` on
//! the manual clock.
//!
//! `Boottime` counts the time a suspended machine sleeps and `Instant` does not, so the two drift
//! apart by every suspend. There an `Instant` deadline is taken as "this long from now": both
//! clocks are read together when it is converted (`Instant` first), and the time left until it is
//! added to the boottime reading. A deadline handed over just before a suspend therefore fires no
//! earlier than that long after the call, counted in boottime, never early; the `Instant`s the
//! API hands out are converted back the same way.
//!
//! Clock stepping back: the kernel clocks never do; a [`ManualClock`] may be `set` backwards. The
//! base keeps the largest time it has seen, so its wheel never runs backwards.
//!
//! With the `test-util` feature, a timeline may follow one tokio runtime's clock instead
//! ([`Timeline::on_tokio`]): the base of that runtime's paused clock (see `time::paused`). Like a
//! manual clock it arms no timerfd; the runtime turns it.

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use crate::sync::{Arc, AtomicU64, Ordering};
use crate::sys;

/// Which clock the bases follow.
#[derive(Clone, Debug, Default)]
pub enum ClockSource {
    /// `CLOCK_MONOTONIC`: stops while the machine is suspended (the clock of `Instant`).
    #[default]
    Monotonic,
    /// `CLOCK_BOOTTIME`: keeps counting during suspend.
    Boottime,
    /// A clock moved only by hand, for deterministic tests.
    Manual(ManualClock),
}

/// A clock moved by hand; clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use tickwheel_percpu::ManualClock;
/// let clock = ManualClock::new();
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(other.elapsed(), Duration::from_millis(5));
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        // Relaxed: the clock is a value; readers need no other memory ordered with it.
        let _ = self
            .ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |ns| {
                Some(ns.saturating_add(duration_to_ns(by)))
            });
    }

    /// Sets the time since the clock's start; may move it backwards (the bases ignore steps back).
    pub fn set(&self, since_start: Duration) {
        // Relaxed: as in `advance`.
        self.ns
            .store(duration_to_ns(since_start), Ordering::Relaxed);
    }

    /// Time since the clock's start.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now_ns())
    }

    fn now_ns(&self) -> u64 {
        // Relaxed: as in `advance`.
        self.ns.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.elapsed()).finish()
    }
}

/// Saturating conversion of a `Duration` to nanoseconds.
pub(crate) fn duration_to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The tick containing `ns` (the current tick at time `ns`).
pub(crate) fn ns_to_tick_floor(ns: u64, tick_ns: u64) -> u64 {
    ns / tick_ns
}

/// The first tick not earlier than `ns` (a deadline's tick).
pub(crate) fn ns_to_tick_ceil(ns: u64, tick_ns: u64) -> u64 {
    ns.div_ceil(tick_ns)
}

/// The start of `tick` in nanoseconds, saturating.
pub(crate) fn tick_to_ns(tick: u64, tick_ns: u64) -> u64 {
    tick.saturating_mul(tick_ns)
}

enum Source {
    Kernel {
        id: libc::clockid_t,
        epoch_raw_ns: u64,
    },
    Manual(ManualClock),
    /// The clock of one tokio runtime (see [`tokio_clock`]): a base that serves that runtime while
    /// its clock is paused. The timeline's epoch is that clock's reading when it was made.
    #[cfg(all(feature = "test-util", not(loom)))]
    Tokio(tokio::runtime::Handle),
}

/// A tick's length in ns; an error for a zero tick.
fn tick_ns(tick: Duration) -> io::Result<u64> {
    match duration_to_ns(tick) {
        0 => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "tick must be at least 1 ns",
        )),
        ns => Ok(ns),
    }
}

/// The clock, epoch and tick shared by a set of bases.
pub(crate) struct Timeline {
    source: Source,
    epoch: Instant,
    pub(crate) tick_ns: u64,
}

impl Timeline {
    pub(crate) fn new(clock: &ClockSource, tick: Duration) -> io::Result<Self> {
        let tick_ns = tick_ns(tick)?;
        // Instant first, raw second: see the module doc.
        let epoch = Instant::now();
        let source = match clock {
            ClockSource::Monotonic => kernel(libc::CLOCK_MONOTONIC)?,
            ClockSource::Boottime => kernel(libc::CLOCK_BOOTTIME)?,
            ClockSource::Manual(m) => Source::Manual(m.clone()),
        };
        Ok(Self {
            source,
            epoch,
            tick_ns,
        })
    }

    /// A timeline on the clock of the runtime `handle` names (its epoch: that clock, now).
    #[cfg(all(feature = "test-util", not(loom)))]
    pub(crate) fn on_tokio(handle: tokio::runtime::Handle, tick: Duration) -> io::Result<Self> {
        let tick_ns = tick_ns(tick)?;
        let epoch = tokio_clock::now_on(&handle);
        Ok(Self {
            source: Source::Tokio(handle),
            epoch,
            tick_ns,
        })
    }

    /// Nanoseconds since the epoch, now.
    pub(crate) fn now_ns(&self) -> u64 {
        match &self.source {
            Source::Kernel { id, epoch_raw_ns } => {
                let raw = sys::clock_ns(*id).expect("clock_gettime on a clock checked at creation");
                raw.saturating_sub(*epoch_raw_ns)
            }
            Source::Manual(m) => m.now_ns(),
            #[cfg(all(feature = "test-util", not(loom)))]
            Source::Tokio(handle) => {
                duration_to_ns(tokio_clock::now_on(handle).saturating_duration_since(self.epoch))
            }
        }
    }

    /// The kernel clock to arm a timerfd on, or `None` for a clock moved by hand (a manual clock,
    /// or a runtime's paused clock, whose base that runtime turns).
    pub(crate) fn kernel_clock(&self) -> Option<libc::clockid_t> {
        match self.source {
            Source::Kernel { id, .. } => Some(id),
            _ => None,
        }
    }

    /// Absolute kernel-clock nanoseconds at the start of `tick`, if it is representable (never
    /// on a clock moved by hand).
    pub(crate) fn tick_to_raw_ns(&self, tick: u64) -> Option<u64> {
        let at = tick.checked_mul(self.tick_ns)?;
        match self.source {
            Source::Kernel { epoch_raw_ns, .. } => at
                .checked_add(epoch_raw_ns)
                .filter(|&ns| ns < i64::MAX as u64),
            _ => None,
        }
    }

    /// True if `Instant`s run at this timeline's pace (every clock but `CLOCK_BOOTTIME`).
    fn instants_keep_pace(&self) -> bool {
        !matches!(self.source, Source::Kernel { id, .. } if id == libc::CLOCK_BOOTTIME)
    }

    /// Nanoseconds since the epoch of an `Instant` deadline (0 if before the epoch).
    pub(crate) fn instant_to_ns(&self, at: Instant) -> u64 {
        if self.instants_keep_pace() {
            return duration_to_ns(at.saturating_duration_since(self.epoch));
        }
        // Instant first, timeline second: the time left is measured from the earlier reading,
        // so the deadline can only come out later.
        let instant_now = Instant::now();
        deadline_ns_from_remaining(at, instant_now, self.now_ns())
    }

    /// The `Instant` at `ns` since the epoch (saturating far in the future).
    pub(crate) fn ns_to_instant(&self, ns: u64) -> Instant {
        let far = || self.epoch + Duration::from_secs(u32::MAX.into());
        if self.instants_keep_pace() {
            return self
                .epoch
                .checked_add(Duration::from_nanos(ns))
                .unwrap_or_else(far);
        }
        let now_ns = self.now_ns();
        let instant_now = Instant::now();
        if ns <= now_ns {
            let ago = Duration::from_nanos(now_ns - ns);
            instant_now.checked_sub(ago).unwrap_or(self.epoch)
        } else {
            let ahead = Duration::from_nanos(ns - now_ns);
            instant_now.checked_add(ahead).unwrap_or_else(far)
        }
    }
}

/// A deadline on a timeline whose clock need not keep pace with `Instant`: `timeline_now_ns`
/// plus the time left from `instant_now` until `at` (none if `at` has passed). The two readings
/// must be taken together, `instant_now` first.
fn deadline_ns_from_remaining(at: Instant, instant_now: Instant, timeline_now_ns: u64) -> u64 {
    timeline_now_ns.saturating_add(duration_to_ns(at.saturating_duration_since(instant_now)))
}

/// The `time` module's clock, chosen here alone: `std::time::Instant`, or with the `test-util`
/// feature tokio's, which is the clock of the runtime the thread is in (paused, advanced and
/// resumed by tokio's `pause`, `advance` and `resume`, and by `start_paused`) and std's outside
/// a runtime or while nothing ever paused a runtime (one load more than std's).
#[cfg(all(feature = "tokio", not(loom)))]
pub(crate) fn time_now() -> Instant {
    #[cfg(feature = "test-util")]
    return tokio::time::Instant::now().into_std();
    #[cfg(not(feature = "test-util"))]
    return Instant::now();
}

/// Reading tokio's clock (feature `test-util`).
#[cfg(all(feature = "test-util", not(loom)))]
pub(crate) mod tokio_clock {
    use std::time::Instant;

    /// The clock of the runtime `handle` names, from any thread.
    pub(crate) fn now_on(handle: &tokio::runtime::Handle) -> Instant {
        let _in = handle.enter();
        tokio::time::Instant::now().into_std()
    }

    /// True if the clock of the runtime this thread is in does not read as std's now: it is
    /// paused, or runs on from a resume at an offset (false outside a runtime).
    ///
    /// tokio says no more than its readings, so this is told from them: std's clock read between
    /// two readings of tokio's lies between them exactly when tokio's reads as std's (both are
    /// the same monotonic clock, tokio's plus an offset). The three can be equal only when std's
    /// clock did not move between the reads (a coarse clock source) and a paused clock stands at
    /// that very instant; std's is then read until it moves, and tokio's once more.
    pub(crate) fn departs() -> bool {
        let before = tokio::time::Instant::now().into_std();
        let std_now = Instant::now();
        let after = tokio::time::Instant::now().into_std();
        if before == std_now && std_now == after {
            let mut moved = Instant::now();
            while moved == std_now {
                std::hint::spin_loop();
                moved = Instant::now();
            }
            return tokio::time::Instant::now().into_std() < moved;
        }
        !(before <= std_now && std_now <= after)
    }
}

fn kernel(id: libc::clockid_t) -> io::Result<Source> {
    Ok(Source::Kernel {
        id,
        epoch_raw_ns: sys::clock_ns(id)?,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn deadline_rounds_up_and_now_rounds_down() {
        assert_eq!(ns_to_tick_ceil(0, 10), 0);
        assert_eq!(ns_to_tick_ceil(1, 10), 1);
        assert_eq!(ns_to_tick_ceil(10, 10), 1);
        assert_eq!(ns_to_tick_ceil(11, 10), 2);
        assert_eq!(ns_to_tick_floor(19, 10), 1);
        assert_eq!(
            ns_to_tick_ceil(u64::MAX, 1_000_000),
            u64::MAX / 1_000_000 + 1
        );
    }

    #[test]
    fn never_early_for_any_pair() {
        let tick = 7;
        for deadline in 0..200u64 {
            for now in 0..200u64 {
                let due = ns_to_tick_floor(now, tick) >= ns_to_tick_ceil(deadline, tick);
                assert!(
                    !due || now >= deadline,
                    "fires early: now {now} deadline {deadline}"
                );
            }
        }
    }

    #[test]
    fn tick_to_ns_saturates() {
        assert_eq!(tick_to_ns(3, 1_000), 3_000);
        assert_eq!(tick_to_ns(u64::MAX, 2), u64::MAX);
        assert_eq!(duration_to_ns(Duration::MAX), u64::MAX);
    }

    #[test]
    fn manual_clock_moves_both_ways() {
        let c = ManualClock::new();
        c.advance(Duration::from_secs(2));
        c.set(Duration::from_secs(1));
        assert_eq!(c.elapsed(), Duration::from_secs(1));
        c.advance(Duration::MAX);
        assert_eq!(c.now_ns(), u64::MAX);
    }

    #[test]
    fn boottime_deadline_survives_a_suspend() {
        // Stand-in for a suspend: the timeline (boottime) is 30 s ahead of what `Instant` counted
        // since the epoch. A caller asks for "10 s from now" as an `Instant`.
        let epoch = Instant::now();
        let instant_now = epoch + Duration::from_secs(100);
        let boot_now_ns = duration_to_ns(Duration::from_secs(130));
        let at = instant_now + Duration::from_secs(10);
        let deadline = deadline_ns_from_remaining(at, instant_now, boot_now_ns);
        assert_eq!(
            deadline,
            boot_now_ns + duration_to_ns(Duration::from_secs(10))
        );
        // Mapping through the epoch instead would have put the deadline 20 s before now.
        let through_epoch = duration_to_ns(at.saturating_duration_since(epoch));
        assert!(
            through_epoch < boot_now_ns,
            "the old mapping fires 30 s early"
        );
        // A deadline already passed is due now, not before the epoch.
        assert_eq!(
            deadline_ns_from_remaining(epoch, instant_now, boot_now_ns),
            boot_now_ns
        );
    }

    #[test]
    fn boottime_instants_round_trip_through_now() {
        let t = Timeline::new(&ClockSource::Boottime, Duration::from_millis(1)).unwrap();
        let at = Instant::now() + Duration::from_secs(5);
        let ns = t.instant_to_ns(at);
        let now = t.now_ns();
        // Never early: at least the 5 s asked for (less the time since `at` was computed).
        assert!(ns + 1_000_000 >= now + 5_000_000_000, "{ns} vs {now}");
        let back = t.ns_to_instant(ns);
        assert!(back + Duration::from_millis(5) >= at && back <= at + Duration::from_millis(5));
    }

    #[test]
    fn zero_tick_is_rejected() {
        assert!(Timeline::new(&ClockSource::Monotonic, Duration::ZERO).is_err());
    }

    #[test]
    fn monotonic_instant_and_raw_agree() {
        let t = Timeline::new(&ClockSource::Monotonic, Duration::from_millis(1)).unwrap();
        let before = t.instant_to_ns(Instant::now());
        let raw = t.now_ns();
        // The raw epoch is never earlier than the Instant epoch, so raw time lags slightly.
        assert!(raw <= t.instant_to_ns(Instant::now()));
        assert!(
            before <= raw + 1_000_000,
            "clocks disagree by more than 1 ms"
        );
    }
}

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
    /// `CLOCK_MONOTONIC` through the process's test clock (see [`test_clock`]): the bases of the
    /// `time` module. The timeline's epoch is the test clock's.
    #[cfg(all(feature = "tokio", not(loom)))]
    Test {
        epoch_raw_ns: u64,
    },
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

    /// A timeline on the process's test clock (`CLOCK_MONOTONIC` unless paused or advanced).
    #[cfg(all(feature = "tokio", not(loom)))]
    pub(crate) fn on_test_clock(tick: Duration) -> io::Result<Self> {
        let tick_ns = tick_ns(tick)?;
        let epoch = test_clock::epoch();
        Ok(Self {
            source: Source::Test {
                epoch_raw_ns: epoch.raw_ns,
            },
            epoch: epoch.instant,
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
            #[cfg(all(feature = "tokio", not(loom)))]
            Source::Test { .. } => test_clock::now_ns(),
        }
    }

    /// The kernel clock to arm a timerfd on, or `None` for a manual clock.
    pub(crate) fn kernel_clock(&self) -> Option<libc::clockid_t> {
        match self.source {
            Source::Kernel { id, .. } => Some(id),
            Source::Manual(_) => None,
            #[cfg(all(feature = "tokio", not(loom)))]
            Source::Test { .. } => Some(libc::CLOCK_MONOTONIC),
        }
    }

    /// Changes of the clock's pace (a pause, an advance, a resume) so far: a timerfd armed at an
    /// earlier count is armed at the wrong kernel time. Always 0 but on the test clock.
    pub(crate) fn generation(&self) -> u64 {
        match self.source {
            #[cfg(all(feature = "tokio", not(loom)))]
            Source::Test { .. } => test_clock::state().generation,
            _ => 0,
        }
    }

    /// Absolute kernel-clock nanoseconds at the start of `tick`, if it is representable (never
    /// on a manual clock, and on a paused test clock only for a tick already due).
    pub(crate) fn tick_to_raw_ns(&self, tick: u64) -> Option<u64> {
        let at = tick.checked_mul(self.tick_ns)?;
        match self.source {
            Source::Kernel { epoch_raw_ns, .. } => at
                .checked_add(epoch_raw_ns)
                .filter(|&ns| ns < i64::MAX as u64),
            Source::Manual(_) => None,
            #[cfg(all(feature = "tokio", not(loom)))]
            Source::Test { epoch_raw_ns } => {
                let state = test_clock::state();
                if state.paused {
                    // Stands still: a due tick fires at once (an absolute time long past), a
                    // later one only after an `advance`, which turns the base itself.
                    return (at <= state.frozen_ns).then_some(1);
                }
                // Test time runs `offset_ns` ahead of the kernel clock.
                let raw = i128::from(at) + i128::from(epoch_raw_ns) - i128::from(state.offset_ns);
                u64::try_from(raw.max(0))
                    .ok()
                    .filter(|&ns| ns < i64::MAX as u64)
            }
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

/// The process's test clock: `CLOCK_MONOTONIC`, unless [`pause`](test_clock::pause)d (then
/// frozen, moved only by [`advance`](test_clock::advance)) or resumed after a pause (then running
/// on from where it was, `offset_ns` ahead of or behind the kernel clock). The `time` module's
/// `Instant::now` and the clock of its bases.
///
/// One process-wide state behind a mutex, read without it (one relaxed load) until the first
/// pause. A pause rounds the time up to a whole millisecond since the test clock's epoch, so
/// that deadlines of whole milliseconds from a paused time fall on tick boundaries and an
/// `advance` by the same amount makes them due.
#[cfg(all(feature = "tokio", not(loom)))]
pub(crate) mod test_clock {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    use super::duration_to_ns;
    use crate::sys;

    /// The test clock's epoch: an `Instant` and then the raw clock (so the raw epoch is never the
    /// earlier, as in `Timeline::new`).
    pub(crate) struct Epoch {
        pub(crate) instant: Instant,
        pub(crate) raw_ns: u64,
    }

    pub(crate) fn epoch() -> &'static Epoch {
        static EPOCH: OnceLock<Epoch> = OnceLock::new();
        EPOCH.get_or_init(|| {
            let instant = Instant::now();
            let raw_ns = sys::clock_ns(libc::CLOCK_MONOTONIC)
                .expect("clock_gettime(CLOCK_MONOTONIC) fails only with a bad clock id");
            Epoch { instant, raw_ns }
        })
    }

    /// What the clock is doing.
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct State {
        pub(crate) paused: bool,
        /// While paused: the time, ns since the epoch.
        pub(crate) frozen_ns: u64,
        /// While running: test time minus kernel time, ns.
        pub(crate) offset_ns: i64,
        /// Changes so far (see `Timeline::generation`).
        pub(crate) generation: u64,
    }

    /// Set once, by the first change: until then the state is the default and nobody locks.
    static CHANGED: AtomicBool = AtomicBool::new(false);
    static STATE: Mutex<State> = Mutex::new(State {
        paused: false,
        frozen_ns: 0,
        offset_ns: 0,
        generation: 0,
    });

    pub(crate) fn state() -> State {
        // Relaxed: the flag only lets readers skip the mutex while nothing ever changed; the
        // state itself is read under the mutex, which orders it.
        if !CHANGED.load(Ordering::Relaxed) {
            return State::default();
        }
        *STATE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Test time, ns since the epoch.
    pub(crate) fn now_ns() -> u64 {
        let state = state();
        if state.paused {
            return state.frozen_ns;
        }
        running_ns(Instant::now(), state.offset_ns)
    }

    /// Test time as an `Instant`.
    pub(crate) fn now() -> Instant {
        let state = state();
        let now = Instant::now();
        if !state.paused && state.offset_ns == 0 {
            return now;
        }
        let ns = if state.paused {
            state.frozen_ns
        } else {
            running_ns(now, state.offset_ns)
        };
        epoch().instant + Duration::from_nanos(ns)
    }

    /// The test time at kernel time `now` with the clock running `offset_ns` ahead.
    fn running_ns(now: Instant, offset_ns: i64) -> u64 {
        let real = duration_to_ns(now.saturating_duration_since(epoch().instant));
        u64::try_from((i128::from(real) + i128::from(offset_ns)).max(0)).unwrap_or(u64::MAX)
    }

    fn change(f: impl FnOnce(&mut State) -> Result<(), &'static str>) -> Result<(), &'static str> {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut state)?;
        state.generation += 1;
        // Relaxed: see `state`; set while holding the mutex, so a reader that sees it locks and
        // finds this change.
        CHANGED.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Freezes the clock at now, rounded up to a whole millisecond. Err if already paused.
    pub(crate) fn pause() -> Result<(), &'static str> {
        change(|state| {
            if state.paused {
                return Err("time is already frozen");
            }
            let now = running_ns(Instant::now(), state.offset_ns);
            state.frozen_ns = now.div_ceil(1_000_000).saturating_mul(1_000_000);
            state.paused = true;
            Ok(())
        })
    }

    /// Moves the frozen clock forward. Err if not paused.
    pub(crate) fn advance(by: Duration) -> Result<(), &'static str> {
        change(|state| {
            if !state.paused {
                return Err("time is not frozen");
            }
            state.frozen_ns = state.frozen_ns.saturating_add(duration_to_ns(by));
            Ok(())
        })
    }

    /// Lets the clock run on from the frozen time. Err if not paused.
    pub(crate) fn resume() -> Result<(), &'static str> {
        change(|state| {
            if !state.paused {
                return Err("time is not frozen");
            }
            let real = duration_to_ns(Instant::now().saturating_duration_since(epoch().instant));
            let offset = i128::from(state.frozen_ns) - i128::from(real);
            state.offset_ns = i64::try_from(offset).unwrap_or(i64::MAX);
            state.paused = false;
            Ok(())
        })
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

//! [`Interval`]: ticks at a fixed period on one reusable [`Sleep`].

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::sleep::{Sleep, later, sleep_until};
use super::{Duration, Instant};

/// A tick later than this after its deadline counts as missed.
const MISSED_AFTER: Duration = Duration::from_millis(5);

/// What [`Interval`] does when ticks were missed (the task was busy past a deadline). The same
/// variants as tokio's, and like tokio's not `#[non_exhaustive]`, so an exhaustive `match` written
/// for tokio compiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedTickBehavior {
    /// Fire the missed ticks as fast as possible, then keep the original schedule.
    #[default]
    Burst,
    /// Restart the schedule from now: the next tick is one period after this late one.
    Delay,
    /// Drop the missed ticks and keep the original phase: the next tick is the next multiple of
    /// the period after now.
    Skip,
}

impl MissedTickBehavior {
    /// The deadline after a tick due at `due` and seen at `now` (`now - due > MISSED_AFTER`).
    fn next(self, due: Instant, now: Instant, period: Duration) -> Instant {
        match self {
            Self::Burst => later(due, period),
            Self::Delay => later(now, period),
            Self::Skip => {
                let behind = now.duration_since(due).as_nanos() % period.as_nanos();
                later(now, period) - Duration::from_nanos(behind as u64)
            }
        }
    }
}

/// Ticks every `period`, the first tick at once.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// timers.block_on(0, &rt, async {
///     let mut every = time::interval(Duration::from_millis(2));
///     let first = every.tick().await;
///     let second = every.tick().await;
///     assert_eq!(second - first, Duration::from_millis(2));
/// }).unwrap();
/// ```
///
/// Panics if `period` is zero.
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    interval_at(Instant::now(), period)
}

/// Ticks every `period`, the first tick at `start`. Panics if `period` is zero.
///
/// ```
/// use tickwheel_percpu::time::{interval_at, Duration, Instant, MissedTickBehavior};
///
/// let mut every = interval_at(Instant::now() + Duration::from_secs(1), Duration::from_secs(1));
/// every.set_missed_tick_behavior(MissedTickBehavior::Skip);
/// assert_eq!(every.period(), Duration::from_secs(1));
/// ```
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    assert!(!period.is_zero(), "`period` must be non-zero.");
    Interval {
        sleep: sleep_until(start),
        period,
        missed: MissedTickBehavior::default(),
    }
}

/// A periodic timer; see [`interval`].
#[derive(Debug)]
pub struct Interval {
    sleep: Sleep,
    period: Duration,
    missed: MissedTickBehavior,
}

impl Interval {
    /// Waits for the next tick; returns the instant it was due.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick; `Ready(due)` when it has come.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        let due = self.sleep.deadline();
        // A tick already due completes without filing a timer (the first tick, or a burst).
        let now = Instant::now();
        if due > now && Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let now = if due > now { Instant::now() } else { now };
        let next = if now.saturating_duration_since(due) > MISSED_AFTER {
            self.missed.next(due, now, self.period)
        } else {
            later(due, self.period)
        };
        self.sleep.reset(next);
        Poll::Ready(due)
    }

    /// Restarts the schedule: the next tick is one period from now.
    pub fn reset(&mut self) {
        self.reset_after(self.period);
    }

    /// Restarts the schedule: the next tick is now.
    pub fn reset_immediately(&mut self) {
        self.reset_at(Instant::now());
    }

    /// Restarts the schedule: the next tick is `after` from now.
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_at(later(Instant::now(), after));
    }

    /// Restarts the schedule: the next tick is at `deadline`.
    pub fn reset_at(&mut self, deadline: Instant) {
        self.sleep.reset(deadline);
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What happens to missed ticks.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed
    }

    /// Sets what happens to missed ticks.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed = behavior;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_tick_arithmetic() {
        let t0 = Instant::now();
        let p = Duration::from_millis(10);
        let due = t0;
        let now = t0 + Duration::from_millis(35);
        assert_eq!(MissedTickBehavior::Burst.next(due, now, p), t0 + p);
        assert_eq!(MissedTickBehavior::Delay.next(due, now, p), now + p);
        assert_eq!(
            MissedTickBehavior::Skip.next(due, now, p),
            t0 + Duration::from_millis(40)
        );
    }
}

//! [`Remote`]: schedule, re-arm and cancel on any base of a set, from any thread.
//!
//! Every call is one operation of `shared.rs` on the target base's shared state; none takes a
//! lock, none waits for the owner, none can be refused for want of queue space (only a schedule
//! that finds the base's reserve of free slots empty is refused, with its value handed back).

use std::fmt;
use std::time::{Duration, Instant};

use crate::clock::{duration_to_ns, ns_to_tick_ceil};
use crate::error::ScheduleError;
use crate::handle::Handle;
use crate::shared::Group;
use crate::sync::Arc;

/// Schedules, re-arms and cancels on any base of a set, from any thread. `Clone + Send + Sync`.
///
/// ```
/// use std::time::Duration;
/// use tickwheel_percpu::{bases, ClockSource, Config, ManualClock};
///
/// let clock = ManualClock::new();
/// let config = Config::default().clock(ClockSource::Manual(clock.clone()));
/// let (mut bases, remote) = bases::<u32>(2, config).unwrap();
/// let h = remote.schedule_after(1, Duration::from_millis(5), 7).unwrap();
/// assert!(remote.reset_after(h, Duration::from_millis(50))); // keepalive refresh, no message
/// clock.advance(Duration::from_millis(10));
/// assert_eq!(bases[1].turn(|_| {}), 0, "pushed back: nothing fires at 10 ms");
/// assert!(remote.cancel(h)); // true: it will never fire
/// ```
pub struct Remote<T> {
    pub(crate) group: Arc<Group<T>>,
}

impl<T> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Self {
            group: self.group.clone(),
        }
    }
}

impl<T> fmt::Debug for Remote<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("bases", &self.group.bases.len())
            .finish()
    }
}

impl<T: Send + 'static> Remote<T> {
    fn tick_of_ns(&self, deadline_ns: u64) -> u64 {
        ns_to_tick_ceil(deadline_ns, self.group.timeline.tick_ns)
    }

    fn tick_after(&self, delay: Duration) -> u64 {
        let now = self.group.timeline.now_ns();
        self.tick_of_ns(now.saturating_add(duration_to_ns(delay)))
    }

    /// Schedules `value` on base `base` to fire `delay` from now (read from the set's clock now).
    /// Returns at once; the owner files the timer at its next turn and is woken if it sleeps.
    /// On a base that has been dropped: `Err(Closed(value))`. (One that races the drop may get
    /// `Ok`, its payload then dropped with the base.)
    pub fn schedule_after(
        &self,
        base: usize,
        delay: Duration,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let tick = self.tick_after(delay);
        self.group.schedule_at_tick(base, tick, value)
    }

    /// Schedules `value` on base `base` at `deadline` (an `Instant` before the set's start or in
    /// the past fires at the owner's next turn).
    pub fn schedule_at(
        &self,
        base: usize,
        deadline: Instant,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let tick = self.tick_of_ns(self.group.timeline.instant_to_ns(deadline));
        self.group.schedule_at_tick(base, tick, value)
    }

    /// Cancels the timer `h` names. `true`: it will never fire. `false`: it fired, is firing, was
    /// already cancelled, its base is gone (see `schedule_after` for a schedule that raced the
    /// drop), or `h` is stale or from another set.
    pub fn cancel(&self, h: Handle) -> bool {
        self.group.cancel(h)
    }

    /// Re-arms the timer `h` names to fire `delay` from now, in place: the handle stays valid.
    /// `true`: it was pending and now fires at the new deadline (unless re-armed or cancelled
    /// again). `false`: as for [`Remote::cancel`].
    ///
    /// A later deadline (the keepalive refresh) is two CASes on the timer's slot and sends
    /// nothing: the owner finds the new deadline when the old one comes due. An earlier one also
    /// leaves a notice for the owner, which moves the timer at its next turn.
    pub fn reset_after(&self, h: Handle, delay: Duration) -> bool {
        let tick = self.tick_after(delay);
        self.group.rearm(h, tick)
    }

    /// Re-arms the timer `h` names to fire at `deadline`; see [`Remote::reset_after`].
    pub fn reset_at(&self, h: Handle, deadline: Instant) -> bool {
        let tick = self.tick_of_ns(self.group.timeline.instant_to_ns(deadline));
        self.group.rearm(h, tick)
    }

    /// Wakes base `base`'s owner if it is parked (its next turn runs at once).
    pub fn wake(&self, base: usize) {
        if let Some(shared) = self.group.bases.get(base) {
            shared.wake_owner();
        }
    }

    /// Number of bases in the set.
    pub fn len(&self) -> usize {
        self.group.bases.len()
    }

    /// True if the set has no bases (never, for a set made by [`crate::bases`]).
    pub fn is_empty(&self) -> bool {
        self.group.bases.is_empty()
    }
}

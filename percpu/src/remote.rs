//! What other threads share with a base, and the [`Remote`] that uses it.
//!
//! A set of bases is one [`Group`]: the shared timeline and, per base, a cache-padded [`Shared`]
//! (slot table, inbox, reserve of free slots, wake word, eventfd, counters). A remote schedule
//! takes a slot from the reserve, arms it, pushes a `Schedule` message and notifies; a remote
//! cancel is one CAS on the slot word plus a best-effort `Cancel` notice. Neither takes a lock.
//!
//! The reserve is refilled by the owner at each turn, up to the inbox capacity (every remote
//! schedule needs an inbox cell anyway). A remote schedule that finds it empty gets `InboxFull`
//! (or `Full` once the owner has reported its table exhausted).

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use crossbeam_utils::{Backoff, CachePadded};

use crate::clock::{Timeline, duration_to_ns};
use crate::error::ScheduleError;
use crate::handle::Handle;
use crate::mpsc::Queue;
use crate::protocol::slots::SlotTable;
use crate::protocol::wake::Wake;
use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::sys;

/// A message to a base's owner.
pub(crate) enum Msg<T> {
    /// Put the armed slot's timer in the wheel.
    Schedule {
        slot: u32,
        generation: u32,
        deadline_ns: u64,
        value: T,
    },
    /// A cancel won on this slot; remove its wheel entry now rather than at fire time.
    Cancel { slot: u32, generation: u32 },
}

/// The part of a base other threads touch.
pub(crate) struct Shared<T> {
    pub(crate) slots: SlotTable,
    pub(crate) inbox: Queue<Msg<T>>,
    /// Free slots set aside by the owner for remote schedules.
    pub(crate) reserve: Queue<u32>,
    /// Written by every producer: on its own cache line, away from the read-mostly fields.
    pub(crate) wake: CachePadded<Wake>,
    pub(crate) eventfd: OwnedFd,
    /// Set by the owner when it could not refill the reserve: the table is full.
    pub(crate) exhausted: AtomicBool,
    pub(crate) inbox_full: AtomicU64,
    pub(crate) notices_dropped: AtomicU64,
    pub(crate) cancelled_remote: AtomicU64,
}

impl<T> Shared<T> {
    pub(crate) fn new(slots: usize, inbox: usize) -> std::io::Result<Self> {
        Ok(Self {
            slots: SlotTable::new(slots),
            inbox: Queue::new(inbox),
            // Twice the refill target: the owner's top-up reads the length while remotes take
            // and return slots, so the ring may briefly hold a few more than the target.
            reserve: Queue::new(inbox.saturating_mul(2)),
            wake: CachePadded::new(Wake::new()),
            eventfd: sys::eventfd()?,
            exhausted: AtomicBool::new(false),
            inbox_full: AtomicU64::new(0),
            notices_dropped: AtomicU64::new(0),
            cancelled_remote: AtomicU64::new(0),
        })
    }

    /// Announces a message; kicks the owner if it may be blocked.
    pub(crate) fn notify(&self) {
        if self.wake.notify() {
            // The only failure is a counter at 2^64-1, which needs that many unread kicks.
            let kicked = sys::eventfd_kick(self.eventfd.as_fd());
            debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
        }
    }

    fn count(counter: &AtomicU64) {
        // Relaxed: a statistic; read in snapshots only.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Schedules from any thread; see the module doc.
    fn schedule(
        &self,
        handle_of: impl FnOnce(u32, u32) -> Handle,
        deadline_ns: u64,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let Some(slot) = self.reserve.pop() else {
            // Relaxed: a hint to choose the error kind; both mean "not now".
            if self.exhausted.load(Ordering::Relaxed) {
                return Err(ScheduleError::Full(value));
            }
            Self::count(&self.inbox_full);
            return Err(ScheduleError::InboxFull(value));
        };
        let generation = self.slots.arm(slot);
        match self.inbox.push(Msg::Schedule {
            slot,
            generation,
            deadline_ns,
            value,
        }) {
            Ok(()) => {
                self.notify();
                Ok(handle_of(slot, generation))
            }
            Err(msg) => {
                let Msg::Schedule { value, .. } = msg else {
                    unreachable!("pushed a Schedule")
                };
                // No handle escaped, so the arming can be undone in place.
                self.slots.unarm(slot, generation);
                self.give_back(slot);
                Self::count(&self.inbox_full);
                Err(ScheduleError::InboxFull(value))
            }
        }
    }

    /// Returns a reserve slot we took but did not use.
    fn give_back(&self, mut slot: u32) {
        let backoff = Backoff::new();
        // The ring has room for twice the refill target. It can be full here only if the owner
        // refilled it while other remote threads held slots they took from it; then this waits
        // until some schedule (remote, or the owner's own when its private list is empty) takes
        // a slot out. With a tiny inbox on an otherwise quiet base that wait is unbounded; the
        // fix (a return path that cannot be full) is left for later.
        while let Err(s) = self.reserve.push(slot) {
            slot = s;
            backoff.snooze();
        }
    }

    /// Cancels from any thread; true iff the timer will never fire.
    fn cancel(&self, slot: u32, generation: u32) -> bool {
        if !self.slots.cancel(slot, generation) {
            return false;
        }
        Self::count(&self.cancelled_remote);
        if self.inbox.push(Msg::Cancel { slot, generation }).is_err() {
            Self::count(&self.notices_dropped);
        } else if self.inbox.len() * 2 >= self.inbox.capacity() {
            // Notices do not wake the owner on their own (the entry is reclaimed at fire time at
            // the latest), but a half-full inbox would start refusing schedules: wake it.
            self.notify();
        }
        true
    }
}

/// The state shared by a set of bases.
pub(crate) struct Group<T> {
    pub(crate) set: u16,
    pub(crate) timeline: Timeline,
    pub(crate) bases: Box<[CachePadded<Shared<T>>]>,
}

impl<T> Group<T> {
    pub(crate) fn handle(&self, base: usize, slot: u32, generation: u32) -> Handle {
        Handle {
            slot,
            generation,
            base: base as u16,
            set: self.set,
        }
    }

    /// The shared part of the base a handle names, if the handle belongs to this set.
    pub(crate) fn shared_of(&self, h: Handle) -> Option<&Shared<T>> {
        if h.set != self.set {
            return None;
        }
        self.bases.get(h.base()).map(|s| &**s)
    }

    pub(crate) fn schedule_at_ns(
        &self,
        base: usize,
        deadline_ns: u64,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        match self.bases.get(base) {
            Some(shared) => {
                shared.schedule(|slot, g| self.handle(base, slot, g), deadline_ns, value)
            }
            None => Err(ScheduleError::NoSuchBase(value)),
        }
    }

    pub(crate) fn cancel(&self, h: Handle) -> bool {
        self.shared_of(h)
            .is_some_and(|s| s.cancel(h.slot, h.generation))
    }
}

/// Schedules and cancels on any base of a set, from any thread. `Clone + Send + Sync`.
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
    /// Schedules `value` on base `base` to fire `delay` from now (read from the set's clock now).
    /// Returns at once; the owner files the timer at its next turn and is woken if it sleeps.
    pub fn schedule_after(
        &self,
        base: usize,
        delay: Duration,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let deadline_ns = self
            .group
            .timeline
            .now_ns()
            .saturating_add(duration_to_ns(delay));
        self.group.schedule_at_ns(base, deadline_ns, value)
    }

    /// Schedules `value` on base `base` at `deadline` (an `Instant` before the set's start or in
    /// the past fires at the owner's next turn).
    pub fn schedule_at(
        &self,
        base: usize,
        deadline: Instant,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let deadline_ns = self.group.timeline.instant_to_ns(deadline);
        self.group.schedule_at_ns(base, deadline_ns, value)
    }

    /// Cancels the timer `h` names. `true`: it will never fire. `false`: it fired, is firing, was
    /// already cancelled, or `h` is stale or from another set.
    pub fn cancel(&self, h: Handle) -> bool {
        self.group.cancel(h)
    }

    /// Cross-core re-arm: cancels `h` and, if that won, schedules `value` on the same base.
    /// The old payload is dropped by its owner; `value` replaces it. On failure `value` comes
    /// back inside the [`RescheduleError`].
    pub fn reschedule_after(
        &self,
        h: Handle,
        delay: Duration,
        value: T,
    ) -> Result<Handle, RescheduleError<T>> {
        if !self.cancel(h) {
            return Err(RescheduleError::NotPending(value));
        }
        self.schedule_after(h.base(), delay, value)
            .map_err(RescheduleError::Schedule)
    }

    /// Wakes base `base`'s owner if it is parked (its next turn runs at once).
    pub fn wake(&self, base: usize) {
        if let Some(shared) = self.group.bases.get(base) {
            shared.notify();
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

/// Why [`Remote::reschedule_after`] did not re-arm.
#[derive(Debug)]
pub enum RescheduleError<T> {
    /// The old timer fired, is firing, or the handle is stale: nothing was cancelled.
    NotPending(T),
    /// The old timer was cancelled but the new one could not be scheduled.
    Schedule(ScheduleError<T>),
}

impl<T> RescheduleError<T> {
    /// The payload that was not scheduled.
    pub fn into_inner(self) -> T {
        match self {
            Self::NotPending(v) => v,
            Self::Schedule(e) => e.into_inner(),
        }
    }

    /// True if the old timer was still pending (and is now cancelled).
    pub fn cancelled_old(&self) -> bool {
        matches!(self, Self::Schedule(_))
    }
}

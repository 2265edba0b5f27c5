//! The state of a base that other threads share, and the remote side of every cross-core
//! operation.
//!
//! # Model
//! A set of bases is one [`Group`]: the timeline and, per base, a cache-padded [`Shared`]: the
//! slot table (`protocol::slots`), the reserve of free slots and the notice stack
//! (`protocol::stack`), the wake word (`protocol::wake`), the eventfd and a refusal counter.
//! Every remote operation is at most one notice, and most are none:
//!
//! | remote operation        | slot word                | notice | wake-up            |
//! |-------------------------|--------------------------|--------|--------------------|
//! | schedule                | pop reserve, arm queued  | yes    | first of a batch   |
//! | re-arm, later deadline  | two CASes, same line     | no     | no                 |
//! | re-arm, earlier         | two CASes                | yes    | first of a batch   |
//! | cancel                  | one CAS                  | yes*   | first of a batch   |
//!
//! \* unless the slot is already queued, or a re-arm in flight will queue it when it is done.
//!
//! A notice is the slot itself pushed on the notice stack, so notices are never dropped and
//! never refused; the owner takes them all at the start of its next turn. The only refusal left
//! is a schedule that finds the reserve empty (the owner refills it each turn).
//!
//! Closing: when a `Base` is dropped its owner closes the wake word, empties the reserve, drains
//! the notices and retires every pending slot. A pusher whose notify finds the word `CLOSED`
//! drains the notice stack itself and takes its own payload back if it finds it (see
//! `protocol::wake` for why every notice is then drained by someone). A schedule that raced the
//! drop may so return `Ok` for a payload that was dropped with the base (on the thread that
//! drained it), and a handle of such a schedule, or of a re-arm in flight across the drop, may
//! still answer true to a cancel or re-arm; nothing fires on a dropped base either way.
//!
//! # Layout
//! The fields the owner reads on every local operation (the table's pointer) sit on a line no
//! other thread writes; the reserve head, the notice head, the wake word and the counter each
//! have a line of their own, written by remote threads and the owner only when they use them.

use std::os::fd::{AsFd, OwnedFd};

use crossbeam_utils::CachePadded;

use crate::clock::Timeline;
use crate::error::ScheduleError;
use crate::handle::Handle;
use crate::protocol::slots::{Cancel, Rearm, SlotTable, word};
use crate::protocol::stack::{NIL, Notices, Reserve};
use crate::protocol::wake::{Notify, Wake};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::sys;

/// Written by remote threads when they are refused, by the owner when the table fills up.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Remote schedules refused because the reserve was empty.
    pub(crate) count: AtomicU64,
    /// Set by the owner when it could not put a single slot in the reserve: the table is full.
    pub(crate) exhausted: AtomicBool,
}

/// The part of a base other threads touch.
pub(crate) struct Shared<T> {
    pub(crate) slots: SlotTable<T>,
    pub(crate) eventfd: OwnedFd,
    pub(crate) reserve: CachePadded<Reserve>,
    pub(crate) notices: CachePadded<Notices>,
    pub(crate) wake: CachePadded<Wake>,
    pub(crate) refusals: CachePadded<Refusals>,
}

impl<T> Shared<T> {
    pub(crate) fn new(slots: usize) -> std::io::Result<Self> {
        Ok(Self {
            slots: SlotTable::new(slots),
            eventfd: sys::eventfd()?,
            reserve: CachePadded::new(Reserve::new()),
            notices: CachePadded::new(Notices::new()),
            wake: CachePadded::new(Wake::parked()),
            refusals: CachePadded::default(),
        })
    }

    /// Pushes a notice for `slot` and wakes the owner if this push started a batch. On a closed
    /// base, drains the notices and returns the payload of `slot` if this thread found it.
    fn push_notice(&self, slot: u32) -> Option<T> {
        if !self.notices.push(&self.slots, slot) {
            return None;
        }
        match self.wake.notify() {
            Notify::Done => None,
            Notify::Kick => {
                // The only failure is a counter at 2^64-1, which needs that many unread kicks.
                let kicked = sys::eventfd_kick(self.eventfd.as_fd());
                debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
                None
            }
            Notify::Closed => self.drain_closed(slot),
        }
    }

    /// Wakes the owner if it is parked (no notice).
    pub(crate) fn wake_owner(&self) {
        if self.wake.notify() == Notify::Kick {
            let kicked = sys::eventfd_kick(self.eventfd.as_fd());
            debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
        }
    }

    /// On a closed base: takes every notice, dropping the payloads found, except `mine`'s, which
    /// is returned if this call took it.
    pub(crate) fn drain_closed(&self, mine: u32) -> Option<T> {
        let mut kept = None;
        let mut slot = self.notices.take();
        while slot != NIL {
            let next = Notices::next(&self.slots, slot);
            let w = self.slots.take_notice(slot);
            // SAFETY: `take_notice` cleared `CELL` and found it set: this thread now holds the
            // payload a remote scheduler left (a closed base files nothing, so no owner does).
            let value = (w & word::CELL != 0).then(|| unsafe { self.slots.take_payload(slot) });
            if slot == mine {
                kept = value;
            } else {
                drop(value);
            }
            slot = next;
        }
        kept
    }

    /// Schedules from any thread; see the module doc.
    fn schedule(
        &self,
        handle_of: impl FnOnce(u32, u32) -> Handle,
        tick: u64,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let Some(slot) = self.reserve.pop(&self.slots) else {
            return Err(self.refuse(value));
        };
        let generation = self.slots.arm_remote(slot, tick, value);
        match self.push_notice(slot) {
            // The base closed under us and we took our payload back: never scheduled.
            Some(value) => Err(ScheduleError::Closed(value)),
            // Filed by the owner, or dropped with the closing base (the schedule came first).
            None => Ok(handle_of(slot, generation)),
        }
    }

    fn refuse(&self, value: T) -> ScheduleError<T> {
        if self.wake.is_closed() {
            return ScheduleError::Closed(value);
        }
        // Relaxed: a hint choosing between two errors that both mean "not now".
        if self.refusals.exhausted.load(Ordering::Relaxed) {
            return ScheduleError::Full(value);
        }
        // Relaxed: a statistic.
        self.refusals.count.fetch_add(1, Ordering::Relaxed);
        ScheduleError::ReserveEmpty(value)
    }

    /// Cancels from any thread; true iff the timer will never fire.
    fn cancel(&self, slot: u32, generation: u32) -> bool {
        match self.slots.cancel(slot, generation) {
            Cancel::Lost => false,
            Cancel::Won { queue } => {
                if queue {
                    drop(self.push_notice(slot));
                }
                true
            }
        }
    }

    /// Re-arms from any thread; true iff the timer was pending (it now fires at `tick`).
    fn rearm(&self, slot: u32, generation: u32, tick: u64) -> bool {
        match self.slots.rearm(slot, generation, tick) {
            Rearm::Lost => false,
            Rearm::Done { queue } => {
                if queue {
                    drop(self.push_notice(slot));
                }
                true
            }
        }
    }
}

/// The state shared by a set of bases.
pub(crate) struct Group<T> {
    pub(crate) set: u32,
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

    pub(crate) fn schedule_at_tick(
        &self,
        base: usize,
        tick: u64,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        match self.bases.get(base) {
            Some(shared) => shared.schedule(|slot, g| self.handle(base, slot, g), tick, value),
            None => Err(ScheduleError::NoSuchBase(value)),
        }
    }

    pub(crate) fn cancel(&self, h: Handle) -> bool {
        self.shared_of(h)
            .is_some_and(|s| s.cancel(h.slot, h.generation))
    }

    pub(crate) fn rearm(&self, h: Handle, tick: u64) -> bool {
        self.shared_of(h)
            .is_some_and(|s| s.rearm(h.slot, h.generation, tick))
    }
}

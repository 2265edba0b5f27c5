//! One core's timer base: its wheel and the owner's side of the protocol (the fd and the
//! wake-up bookkeeping are in `driver`).
//!
//! # Model
//! A timer is one record, its slot in the shared table (`protocol::slots`): word, deadline, stack
//! link, wheel links and payload. The base's wheel is a [`RawWheel`]: the levels, bitmaps and
//! clock, linking the records themselves through their wheel links (`slots::Filing`), so there
//! is no wheel entry beside the record and no map from one to the other. The wheel, the records'
//! wheel links and the private free list are touched only by the owning thread (`Base` is
//! `Send`, not `Sync`). Other threads reach the base through its [`Shared`] part: slot records,
//! reserve, notice stack, wake word.
//!
//! The slot's deadline is the timer's deadline, and it is also what the wheel files the record
//! by: a record is filed at or before its deadline (the wheel reads the deadline when it places
//! the record). A re-arm to a later deadline, local or remote, only stores the new deadline: when
//! the old placement comes due the wheel (or the owner's fire CAS) finds the later deadline and
//! files the record again. So a keepalive refresh touches one word of one record and no wheel
//! list, and a remote refresh needs no message. A re-arm to an earlier deadline moves the record
//! (at once when local, at the next turn through a notice when remote).
//!
//! Local operations touch the slot word with plain loads and stores, except cancel and fire,
//! which CAS it: another thread may be cancelling or re-arming the same timer, and the CAS is
//! what decides; and the re-file of a timer pushed later, which CASes the word onto itself so
//! that a remote re-arm sees the deadline the record is filed at ("Filing" in
//! `protocol::slots`; the wheel's own placements keep the same rule). A turn takes the notice stack (one load when it is empty), fires what is due,
//! and refills the reserve.
//!
//! # Given up
//! - A timer pushed later costs one extra wheel insertion when its old placement comes due, and
//!   the fd may wake the owner for a record that only moves.
//! - No filed tick is kept apart from the deadline, so the owner cannot tell whether a record is
//!   filed before an earlier deadline except by its bucket: an earlier re-arm (local, or a remote
//!   one's notice) leaves the record where it is when its bucket comes due no later than the new
//!   deadline (the wheel reads the deadline then), and moves it otherwise. The bucket's tick is
//!   never after the tick the record was filed for, so this moves no more often than a kept
//!   filed tick would, and a move is O(1).
//! - With a [`crate::ManualClock`] there is no timerfd: `turn` fires what the manual time makes
//!   due, and `park` returns at once if something is due, else waits for a remote kick or timeout.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use tickwheel::raw::RawWheel;

use crate::clock::{duration_to_ns, ns_to_tick_ceil, ns_to_tick_floor, tick_to_ns};
use crate::error::ScheduleError;
use crate::handle::Handle;
use crate::protocol::slots::{Due, Filing, word};
use crate::protocol::stack::{NIL, Notices};
use crate::remote::Remote;
use crate::shared::{Group, Shared};
use crate::stats::{BaseStats, Histogram};
use crate::sync::{Arc, Ordering};

mod driver;

use driver::Driver;

/// Owner-only counters.
#[derive(Default)]
struct Counters {
    scheduled: u64,
    fired: u64,
    cancelled_local: u64,
    cancelled_remote: u64,
    refiled: u64,
    /// Boxed: about 8 KB of counters, kept off the stack when a base is moved.
    lateness: Box<Histogram>,
}

/// One core's timer base. Owned by one thread: `Send`, not `Sync`.
pub struct Base<T> {
    group: Arc<Group<T>>,
    index: usize,
    /// Links the slot records of this base's table.
    wheel: RawWheel,
    /// Owner's private free slots (no atomics to take one).
    free: Vec<u32>,
    /// Slots at or above this were never handed out.
    next_unused: u32,
    /// How many free slots the reserve for remote schedules is kept at.
    reserve_target: usize,
    /// Slots pushed on the reserve in all (wrapping): with the reserve's pop count, its length.
    reserve_pushes: u32,
    /// What the owner last told remote schedulers about an exhausted table.
    said_exhausted: bool,
    /// Largest clock reading seen, ns since the epoch.
    now_ns: u64,
    /// The fds and the wake-up bookkeeping.
    driver: Driver,
    counters: Counters,
    _not_sync: PhantomData<Cell<()>>,
}

impl<T: Send + 'static> Base<T> {
    pub(crate) fn new(
        group: Arc<Group<T>>,
        index: usize,
        wheel: RawWheel,
        reserve_target: usize,
    ) -> io::Result<Self> {
        let shared = &group.bases[index];
        let driver = Driver::new(&group.timeline, shared.eventfd.as_fd())?;
        let mut base = Self {
            group,
            index,
            wheel,
            free: Vec::new(),
            next_unused: 0,
            reserve_target,
            reserve_pushes: 0,
            said_exhausted: false,
            now_ns: 0,
            driver,
            counters: Counters::default(),
            _not_sync: PhantomData,
        };
        base.refill_reserve();
        Ok(base)
    }

    fn shared(&self) -> &Shared<T> {
        &self.group.bases[self.index]
    }

    fn owns(&self, h: Handle) -> bool {
        h.base() == self.index && h.set == self.group.set
    }

    /// This base's index in its set.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The fd to wait on: readable when a timer is due or a remote notice or wake arrived.
    /// Also available as [`AsFd`] and [`AsRawFd`].
    pub fn fd(&self) -> RawFd {
        self.driver.as_raw_fd()
    }

    /// The base's clock as of its last reading.
    pub fn now(&self) -> Instant {
        self.group.timeline.ns_to_instant(self.now_ns)
    }

    /// The base's clock as of its last reading, in nanoseconds since the set's epoch.
    #[cfg(all(feature = "tokio", not(loom)))]
    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The wheel's next expiry tick (never later than its first timer's), for the `time`
    /// module's base of a paused runtime, which that runtime turns instead of a timerfd.
    #[cfg(all(feature = "test-util", not(loom)))]
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.wheel.next_expiry()
    }

    /// The instant `tick` starts at, on this base's clock.
    #[cfg(all(feature = "test-util", not(loom)))]
    pub(crate) fn tick_instant(&self, tick: u64) -> Instant {
        let timeline = &self.group.timeline;
        timeline.ns_to_instant(tick_to_ns(tick, timeline.tick_ns))
    }

    /// A handle for other threads.
    pub fn remote(&self) -> Remote<T> {
        Remote {
            group: self.group.clone(),
        }
    }

    /// Entries in this base's wheel: pending timers, plus cancelled ones whose notice the owner
    /// has not taken yet (they leave at the next turn).
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// True if the wheel holds no timer.
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Slots in the shared table (the most timers this base can hold).
    pub fn slot_capacity(&self) -> usize {
        self.shared().slots.len()
    }

    /// Slots not in use: the private free list, the remote reserve and never-used slots. Equals
    /// `slot_capacity()` on a quiet base with nothing pending after a turn.
    pub fn free_slots(&self) -> usize {
        let untouched = self.slot_capacity() - self.next_unused as usize;
        let reserve = self.shared().reserve.len_after(self.reserve_pushes);
        self.free.len() + reserve + untouched
    }

    /// Schedules `value` to fire `delay` from now (the clock is read now, so it never fires
    /// before `delay` has passed).
    pub fn schedule_after(
        &mut self,
        delay: Duration,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let now = self.read_clock();
        self.schedule_at_ns(now.saturating_add(duration_to_ns(delay)), value)
    }

    /// Schedules `value` to fire at `deadline` (in the past: at the next turn).
    pub fn schedule_at(&mut self, deadline: Instant, value: T) -> Result<Handle, ScheduleError<T>> {
        let ns = self.group.timeline.instant_to_ns(deadline);
        self.schedule_at_ns(ns, value)
    }

    /// Schedules `value` to fire at `deadline_ns`, nanoseconds since the set's epoch.
    pub(crate) fn schedule_at_ns(
        &mut self,
        deadline_ns: u64,
        value: T,
    ) -> Result<Handle, ScheduleError<T>> {
        let Some(slot) = self.take_slot() else {
            return Err(ScheduleError::Full(value));
        };
        let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
        let generation = self.shared().slots.arm_local(slot, tick, value);
        self.forward_clock();
        self.file(slot, tick);
        self.counters.scheduled += 1;
        Ok(self.group.handle(self.index, slot, generation))
    }

    /// Links an unfiled record into the wheel at `tick` and arms the fd if that is earlier.
    fn file(&mut self, slot: u32, tick: u64) {
        let (wheel, mut filing) = self.filing();
        let expiry = wheel.link(&mut filing, slot, tick);
        self.arm_if_earlier(expiry);
    }

    /// Cancels `h` (of any base in the set). `true`: it will never fire. `false`: it fired, is
    /// firing, was cancelled, or `h` is stale or foreign.
    pub fn cancel(&mut self, h: Handle) -> bool {
        if !self.owns(h) {
            return self.group.cancel(h);
        }
        self.cancel_own(h.slot, h.generation)
    }

    /// [`Base::cancel`] of this base's timer in `slot` at `generation` (the rest of its handle
    /// names this base).
    #[inline]
    pub(crate) fn cancel_own(&mut self, slot: u32, generation: u32) -> bool {
        let Some(freed) = self.shared().slots.cancel_local(slot, generation) else {
            return false;
        };
        // A pending timer of ours whose payload no remote holds (`CELL` is clear once the
        // owner has taken the notice, and a slot is filed only after that).
        self.drop_filed(slot);
        // A flagged slot (remote re-arm in flight, notice pending) is left cancelled; its notice
        // frees it.
        self.filing().1.set_unfiled(slot, !freed);
        if freed {
            self.free.push(slot);
        }
        self.counters.cancelled_local += 1;
        true
    }

    /// Re-arms `h` to fire `delay` from now, in place (the handle stays valid). False if it is
    /// not pending (fired, cancelled, stale or foreign). A later deadline stores one word; an
    /// earlier one moves the record in the wheel. A handle of another base of the set is re-armed as
    /// [`Remote::reset_after`] does. A timer another thread scheduled on this base can be re-armed
    /// before the owner has filed it.
    pub fn reset_after(&mut self, h: Handle, delay: Duration) -> bool {
        let deadline_ns = self.read_clock().saturating_add(duration_to_ns(delay));
        self.reset_at_ns(h, deadline_ns)
    }

    /// Re-arms `h` to fire at `deadline`; see [`Base::reset_after`].
    pub fn reset_at(&mut self, h: Handle, deadline: Instant) -> bool {
        let ns = self.group.timeline.instant_to_ns(deadline);
        self.reset_at_ns(h, ns)
    }

    fn reset_at_ns(&mut self, h: Handle, deadline_ns: u64) -> bool {
        if !self.owns(h) {
            let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
            return self.group.rearm(h, tick);
        }
        self.reset_own_at_ns(h.slot, h.generation, deadline_ns)
    }

    /// [`Base::reset_at`] of this base's timer in `slot` at `generation` (the rest of its handle
    /// names this base), to `deadline_ns` since the set's epoch.
    #[inline]
    pub(crate) fn reset_own_at_ns(&mut self, slot: u32, generation: u32, deadline_ns: u64) -> bool {
        let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
        let Some(old) = self.shared().slots.rearm_local(slot, generation, tick) else {
            return false;
        };
        if tick < old {
            // Earlier than before: the record may be filed too late (the keepalive refresh,
            // always later, stops above having touched the deadline and nothing else). A timer a
            // remote scheduled is filed when its notice is taken, at the deadline then.
            self.move_earlier(slot, tick);
        }
        true
    }

    /// Moves a record, if filed, to an earlier tick, unless its bucket comes due no later than
    /// that anyway (the wheel then reads the deadline and places it again, as for a later one).
    fn move_earlier(&mut self, slot: u32, tick: u64) {
        // The bucket's tick is read against the wheel's own clock, stale or not (its placement
        // invariants are relative to it); the clock is brought forward only for a move.
        let (wheel, filing) = self.filing();
        if !filing.is_filed(slot)
            || wheel
                .bucket_tick(&filing, slot)
                .is_some_and(|at| at <= tick)
        {
            return;
        }
        self.forward_clock();
        let (wheel, mut filing) = self.filing();
        let expiry = wheel.relink(&mut filing, slot, tick);
        self.arm_if_earlier(expiry);
    }

    /// Does the base's work, without blocking: reads the clock once, advances the wheel to now in
    /// one catch-up, takes the notices (remote schedules, cancels, earlier re-arms), calls `f`
    /// with each due payload (in expiry order; timers due at the same tick, or sharing a Coarse
    /// bucket, in no particular order), refills the reserve, re-arms the fd. Returns how many
    /// fired.
    ///
    /// `f` runs while the base is borrowed; to schedule on this base from inside it (a periodic
    /// timer, say), use [`Base::turn_with`], which lends it the base.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel_percpu::{bases, ClockSource, Config, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// let config = Config::default().clock(ClockSource::Manual(clock.clone()));
    /// let (mut bases, _remote) = bases::<&str>(1, config).unwrap();
    /// bases[0].schedule_after(Duration::from_millis(2), "idle timeout").unwrap();
    /// clock.advance(Duration::from_millis(2));
    /// let mut fired = Vec::new();
    /// assert_eq!(bases[0].turn(|what| fired.push(what)), 1);
    /// assert_eq!(fired, ["idle timeout"]);
    /// ```
    pub fn turn(&mut self, mut f: impl FnMut(T)) -> usize {
        self.turn_with(|_, value| f(value))
    }

    /// [`Base::turn`], lending `f` the base with each payload: a handler can schedule, re-arm or
    /// cancel on this base directly, with no notice and no wake-up (a periodic timer re-arms
    /// itself for the cost of a local schedule). A timer it schedules that is already due fires in
    /// this same turn.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tickwheel_percpu::{bases, ClockSource, Config, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// let config = Config::default().clock(ClockSource::Manual(clock.clone()));
    /// let (mut bases, _remote) = bases::<u32>(1, config).unwrap();
    /// bases[0].schedule_after(Duration::from_millis(10), 0).unwrap();
    /// for period in 1..=3 {
    ///     clock.advance(Duration::from_millis(10));
    ///     let fired = bases[0].turn_with(|base, n| {
    ///         base.schedule_after(Duration::from_millis(10), n + 1).unwrap();
    ///     });
    ///     assert_eq!(fired, 1, "period {period}");
    /// }
    /// ```
    pub fn turn_with(&mut self, mut f: impl FnMut(&mut Self, T)) -> usize {
        self.begin_turn();
        let now_ns = self.read_clock();
        // Fire first, so the wheel's clock is at now when the notices file their timers (a timer
        // filed from a stale clock would land on a coarser level); then fire what they made due.
        let mut fired = self.fire_due(now_ns, &mut f);
        self.take_notices();
        fired += self.fire_due(now_ns, &mut f);
        self.refill_reserve();
        self.rearm(now_ns);
        self.end_turn();
        fired
    }

    /// A snapshot of this base's counters.
    pub fn stats(&self) -> BaseStats {
        // Relaxed: a statistic.
        let refused = self.shared().refusals.count.load(Ordering::Relaxed);
        BaseStats {
            scheduled: self.counters.scheduled,
            fired: self.counters.fired,
            cancelled_local: self.counters.cancelled_local,
            cancelled_remote: self.counters.cancelled_remote,
            reserve_empty: refused,
            // Filed again by the owner (the deadline read at firing) or by the wheel (read when
            // the placement came due).
            refiled: self.counters.refiled + self.wheel.stats().replaced,
            cascades: self.wheel.stats().cascades,
            lateness: self.counters.lateness.summary(),
        }
    }

    // ---- the steps of a turn ----

    /// Reads the clock, keeping the largest reading (a manual clock may step back).
    fn read_clock(&mut self) -> u64 {
        self.now_ns = self.now_ns.max(self.group.timeline.now_ns());
        self.now_ns
    }

    /// Moves the wheel's clock up to the base's last clock reading if nothing is due by then, so
    /// that a timer placed now is placed by its real delay: the wheel only moves its clock when
    /// polled, and a base that has not turned for a while (its fd quiet) would otherwise place a
    /// new timer as if its delay were longer, on a coarser level, later than the mode promises.
    /// Costs a comparison when the wheel is current, one `next_expiry` when it is not.
    #[inline]
    fn forward_clock(&mut self) {
        let now_tick = self.now_tick();
        if self.wheel.now() < now_tick {
            self.forward_clock_to(now_tick);
        }
    }

    /// [`Base::forward_clock`] of a wheel behind the base's clock.
    #[cold]
    fn forward_clock_to(&mut self, now_tick: u64) {
        if self.wheel.next_expiry().is_some_and(|t| t <= now_tick) {
            return;
        }
        // `next_expiry` is never later than the first tick at which the drain can hand out a
        // record (the overflow list's sweep included, which reads a deadline a remote re-arm
        // lowered), so this poll fires nothing;
        // should it ever, the timer is filed again as due rather than lost.
        let (wheel, mut filing) = self.filing();
        if let Some(slot) = wheel.poll(&mut filing, now_tick) {
            debug_assert!(false, "forwarding the clock fired slot {slot}");
            wheel.link(&mut filing, slot, now_tick);
        }
    }

    /// Takes every notice pushed since the last turn.
    fn take_notices(&mut self) {
        let mut slot = self.shared().notices.take();
        while slot != NIL {
            let shared = &self.group.bases[self.index];
            // Before the flag is cleared: from then on the slot may be pushed again.
            let next = Notices::next(&shared.slots, slot);
            let w = shared.slots.take_notice(slot);
            self.on_notice(slot, w);
            slot = next;
        }
    }

    /// One notice: `w` is the slot's word as the take found it (with `CELL`, a remote schedule
    /// whose payload the owner now holds in the cell).
    fn on_notice(&mut self, slot: u32, w: u64) {
        let remote_schedule = w & word::CELL != 0;
        match word::state(w) {
            word::PENDING => {
                let deadline = self.shared().slots.deadline(slot);
                // A re-arm in flight may store an earlier deadline without a notice (see "Filing"
                // in `protocol::slots`): file no later than the next tick and look again then.
                let tick = if w & word::RESETTING == 0 {
                    deadline
                } else {
                    deadline.min(self.now_tick().saturating_add(1))
                };
                if remote_schedule {
                    self.counters.scheduled += 1;
                    self.file(slot, tick);
                } else {
                    // A remote re-arm to an earlier deadline.
                    self.move_earlier(slot, tick);
                }
            }
            word::CANCELLED => {
                if remote_schedule {
                    // A remote schedule cancelled before the owner filed it: dropped here.
                    self.counters.scheduled += 1;
                    // SAFETY: `take_notice` cleared `CELL` for us: the payload is ours.
                    drop(unsafe { self.filing().1.take_payload(slot) });
                }
                self.drop_filed(slot);
                if w & word::RESETTING == 0 {
                    // No flag left: the slot is ours to free. (With a re-arm in flight, that
                    // re-arm queues the slot again when it is done.)
                    let mut filing = self.filing().1;
                    let retired_here = filing.retired_here(slot);
                    filing.set_unfiled(slot, false);
                    if !retired_here {
                        self.counters.cancelled_remote += 1;
                    }
                    self.shared().slots.free_cancelled(slot);
                    self.free.push(slot);
                }
            }
            _ => unreachable!("slot {slot} noticed while free: {w:#x}"),
        }
    }

    fn fire_due(&mut self, now_ns: u64, f: &mut impl FnMut(&mut Self, T)) -> usize {
        let tick_ns = self.tick_ns();
        let now_tick = ns_to_tick_floor(now_ns, tick_ns);
        let mut fired = 0;
        loop {
            let (wheel, mut filing) = self.filing();
            let Some(slot) = wheel.poll(&mut filing, now_tick) else {
                break;
            };
            match self.group.bases[self.index].slots.take_due(slot, now_tick) {
                Due::Fire { freed, deadline } => {
                    debug_assert!(deadline <= now_tick, "fired early: {deadline} > {now_tick}");
                    let mut filing = self.filing().1;
                    filing.set_unfiled(slot, !freed);
                    // SAFETY: the fire CAS retired the arming: the payload is ours to hand out.
                    let value = unsafe { filing.take_payload(slot) };
                    if freed {
                        self.free.push(slot);
                    }
                    let late = now_ns.saturating_sub(tick_to_ns(deadline, tick_ns));
                    self.counters.lateness.record(late);
                    self.counters.fired += 1;
                    fired += 1;
                    f(self, value);
                }
                Due::Refile(tick) => {
                    // Pushed later (or a remote re-arm is storing its deadline): file it again.
                    self.counters.refiled += 1;
                    let (wheel, mut filing) = self.filing();
                    wheel.link(&mut filing, slot, tick);
                }
                Due::Cancelled => {
                    // A remote cancel won; its notice frees the slot.
                    let mut filing = self.filing().1;
                    filing.set_unfiled(slot, false);
                    // SAFETY: the slot was filed, so the payload is the owner's, and the cancel
                    // that won left it to the owner.
                    drop(unsafe { filing.take_payload(slot) });
                }
            }
        }
        fired
    }

    // ---- slots ----

    /// A free slot: private list first, then a never-used one, then (rarely) the reserve.
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        if let Some(slot) = self.fresh_slot() {
            return Some(slot);
        }
        let shared = &self.group.bases[self.index];
        shared.reserve.pop(&shared.slots)
    }

    fn fresh_slot(&mut self) -> Option<u32> {
        if (self.next_unused as usize) < self.slot_capacity() {
            let slot = self.next_unused;
            self.next_unused += 1;
            Some(slot)
        } else {
            None
        }
    }

    /// Tops the reserve up to its target from the private list or unused slots.
    fn refill_reserve(&mut self) {
        let mut have = self.shared().reserve.len_after(self.reserve_pushes);
        while have < self.reserve_target {
            let Some(slot) = self.free.pop().or_else(|| self.fresh_slot()) else {
                break;
            };
            let shared = &self.group.bases[self.index];
            shared.reserve.push(&shared.slots, slot);
            self.reserve_pushes = self.reserve_pushes.wrapping_add(1);
            have += 1;
        }
        let exhausted = have == 0;
        if exhausted != self.said_exhausted {
            self.said_exhausted = exhausted;
            // Relaxed: a hint for the error kind remote schedulers report. Stored only when it
            // changes, so the owner does not write a line remote threads read on every turn.
            self.shared()
                .refusals
                .exhausted
                .store(exhausted, Ordering::Relaxed);
        }
    }
}

/// What the owner's steps share with `Drop`, which cannot ask for `T: Send`.
impl<T> Base<T> {
    fn tick_ns(&self) -> u64 {
        self.group.timeline.tick_ns
    }

    /// The base's clock in ticks, as of its last reading.
    fn now_tick(&self) -> u64 {
        ns_to_tick_floor(self.now_ns, self.tick_ns())
    }

    /// The wheel and the table's records as its link storage, lent together.
    fn filing(&mut self) -> (&mut RawWheel, Filing<'_, T>) {
        let now_tick = self.now_tick();
        let slots = &self.group.bases[self.index].slots;
        // SAFETY: this is the owning thread (`Base` is not `Sync`, and only it builds a
        // `Filing` of its table), and `&mut self` keeps this the only `Filing` alive.
        (&mut self.wheel, unsafe { Filing::new(slots, now_tick) })
    }

    /// Takes a filed record out of the wheel and drops its payload; nothing if it is not filed.
    fn drop_filed(&mut self, slot: u32) {
        let (wheel, mut filing) = self.filing();
        if filing.is_filed(slot) {
            wheel.unlink(&mut filing, slot);
            filing.set_unfiled(slot, false);
            // SAFETY: a filed record's payload is the owner's (`CELL` was cleared before it was
            // filed), and it leaves the wheel here, so it is read once.
            drop(unsafe { filing.take_payload(slot) });
        }
    }
}

impl<T> AsRawFd for Base<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.driver.as_raw_fd()
    }
}

impl<T> AsFd for Base<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.driver.fd()
    }
}

impl<T> Drop for Base<T> {
    fn drop(&mut self) {
        // Close the base (see `shared.rs`): from here on remote schedules are refused with their
        // value, and those that raced the close are drained by us or by themselves.
        let shared = &self.group.bases[self.index];
        shared.wake.close();
        while shared.reserve.pop(&shared.slots).is_some() {}
        drop(shared.drain_closed(NIL));
        // Cancels and re-arms of timers that were pending now report false.
        shared.slots.retire_pending(self.next_unused);
        // Pending payloads in the wheel are dropped here, on the owner's thread.
        for slot in 0..self.next_unused {
            self.drop_filed(slot);
        }
    }
}

impl<T> fmt::Debug for Base<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("index", &self.index)
            .field("pending", &self.wheel.len())
            .field("armed_tick", &self.driver.armed())
            .finish_non_exhaustive()
    }
}

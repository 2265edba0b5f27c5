//! One core's timer base: its wheel, its driver fd, and the owner's side of the protocol.
//!
//! # Model
//! The wheel, the slot → wheel-entry map and the private free list are plain memory touched only
//! by the owning thread (`Base` is `Send`, not `Sync`). Other threads reach the base through its
//! [`Shared`] part: slot words, inbox, reserve, wake word.
//!
//! Local operations go straight to the wheel. The one atomic read-modify-write on the local path
//! is the CAS in cancel (and fire): another thread may be cancelling the same timer, and the CAS
//! on the slot word is what decides who wins. Arming is a plain store.
//!
//! # Driver
//! `fd()` is an epoll fd holding a timerfd (armed with an ABSOLUTE deadline at the wheel's next
//! expiry, re-armed only when that changes) and an eventfd (kicked by remote producers when the
//! owner may be asleep). Any loop (epoll, mio, a runtime's reactor) can register it: epoll fds
//! nest, and the outer loop sees it readable while either inner fd is. Both inner fds are
//! level-triggered, so `turn` must clear them: it re-arms the timerfd whenever the armed time has
//! passed (`timerfd_settime` clears a pending expiry) and reads the eventfd only when a kick is
//! owed, so a turn with nothing to do makes no syscall besides the vDSO clock read.
//!
//! A local schedule earlier than the armed deadline re-arms at once (one syscall), so an outer
//! loop that sleeps on `fd()` right after scheduling wakes in time. Typical keep-alive traffic
//! schedules later than the earliest timer and makes no syscall.
//!
//! # Given up
//! - A remote cancel whose notice does not fit in the inbox leaves the wheel entry (and its
//!   payload) until its expiry, when the owner finds the slot CANCELLED and reclaims it.
//! - With a [`crate::ManualClock`] there is no timerfd: `turn` fires what the manual time makes
//!   due, and `park` returns at once if something is due, else waits for a remote kick or timeout.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use tickwheel::{TimerId, Wheel};

use crate::clock::{duration_to_ns, ns_to_tick_ceil, ns_to_tick_floor, tick_to_ns};
use crate::error::ScheduleError;
use crate::handle::Handle;
use crate::protocol::slots::State;
use crate::protocol::wake::Found;
use crate::remote::{Group, Msg, Remote, Shared};
use crate::stats::{BaseStats, Histogram};
use crate::sync::{Arc, Ordering};
use crate::sys;

/// A wheel entry: the slot it belongs to and the payload.
pub(crate) struct Entry<T> {
    slot: u32,
    value: T,
}

/// Owner-only per-slot record.
#[derive(Clone, Copy, Default)]
struct Local {
    /// The wheel entry of the slot's current arming, once it is in the wheel.
    id: Option<TimerId>,
    /// Deadline tick of that arming (for lateness).
    deadline_tick: u64,
}

/// Owner-only counters.
#[derive(Default)]
struct Counters {
    scheduled: u64,
    fired: u64,
    cancelled_local: u64,
    lateness: Histogram,
}

/// One core's timer base. Owned by one thread: `Send`, not `Sync`.
pub struct Base<T> {
    group: Arc<Group<T>>,
    index: usize,
    wheel: Wheel<Entry<T>>,
    local: Vec<Local>,
    /// Owner's private free slots (no atomics to take one).
    free: Vec<u32>,
    /// Slots at or above this were never handed out.
    next_unused: u32,
    /// How many free slots the reserve for remote schedules is kept at.
    reserve_target: usize,
    /// Largest clock reading seen, ns since the epoch.
    now_ns: u64,
    epoll: OwnedFd,
    timerfd: Option<OwnedFd>,
    /// Tick the timerfd is armed for.
    armed: Option<u64>,
    /// This owner's last wake-word action was a successful park.
    parked: bool,
    /// Eventfd kicks made but not yet read back.
    kicks_owed: u64,
    counters: Counters,
    _not_sync: PhantomData<Cell<()>>,
}

const TOKEN_TIMER: u64 = 1;
const TOKEN_EVENT: u64 = 2;

impl<T: Send + 'static> Base<T> {
    pub(crate) fn new(
        group: Arc<Group<T>>,
        index: usize,
        wheel: Wheel<Entry<T>>,
        reserve_target: usize,
    ) -> io::Result<Self> {
        let epoll = sys::epoll_create()?;
        let shared = &group.bases[index];
        sys::epoll_add(epoll.as_fd(), shared.eventfd.as_raw_fd(), TOKEN_EVENT)?;
        let timerfd = match group.timeline.kernel_clock() {
            Some(clock) => {
                let tfd = sys::timerfd_create(clock)?;
                sys::epoll_add(epoll.as_fd(), tfd.as_raw_fd(), TOKEN_TIMER)?;
                Some(tfd)
            }
            None => None,
        };
        let mut base = Self {
            group,
            index,
            wheel,
            local: Vec::new(),
            free: Vec::new(),
            next_unused: 0,
            reserve_target,
            now_ns: 0,
            epoll,
            timerfd,
            armed: None,
            parked: false,
            kicks_owed: 0,
            counters: Counters::default(),
            _not_sync: PhantomData,
        };
        base.refill_reserve();
        Ok(base)
    }

    fn shared(&self) -> &Shared<T> {
        &self.group.bases[self.index]
    }

    fn tick_ns(&self) -> u64 {
        self.group.timeline.tick_ns
    }

    /// This base's index in its set.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The fd to wait on: readable when a timer is due or a remote message or wake arrived.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// The base's clock as of its last reading.
    pub fn now(&self) -> Instant {
        self.group.timeline.ns_to_instant(self.now_ns)
    }

    /// A handle for other threads.
    pub fn remote(&self) -> Remote<T> {
        Remote {
            group: self.group.clone(),
        }
    }

    /// Timers in this base's wheel (pending, or cancelled remotely and not yet reclaimed).
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
    /// `slot_capacity()` on a quiet base with nothing pending and an empty inbox.
    pub fn free_slots(&self) -> usize {
        let untouched = self.slot_capacity() - self.next_unused as usize;
        self.free.len() + self.shared().reserve.len() + untouched
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

    fn schedule_at_ns(&mut self, deadline_ns: u64, value: T) -> Result<Handle, ScheduleError<T>> {
        let Some(slot) = self.take_slot() else {
            return Err(ScheduleError::Full(value));
        };
        let generation = self.shared().slots.arm(slot);
        let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
        match self.wheel.insert(tick, Entry { slot, value }) {
            Ok(id) => {
                self.local[slot as usize] = Local {
                    id: Some(id),
                    deadline_tick: tick,
                };
                self.counters.scheduled += 1;
                self.arm_if_earlier(self.wheel.expiry(id).unwrap_or(tick));
                Ok(self.group.handle(self.index, slot, generation))
            }
            Err(full) => {
                self.shared().slots.unarm(slot, generation);
                self.free.push(slot);
                Err(ScheduleError::Full(full.into_inner().value))
            }
        }
    }

    /// Cancels `h` (of any base in the set). `true`: it will never fire. `false`: it fired, is
    /// firing, was cancelled, or `h` is stale or foreign.
    pub fn cancel(&mut self, h: Handle) -> bool {
        if h.base() != self.index || h.set != self.group.set {
            return self.group.cancel(h);
        }
        let Some(local) = self.local.get(h.slot as usize).copied() else {
            return false;
        };
        let (generation, state) = self.shared().slots.load(h.slot);
        if generation != h.generation || state == State::Free {
            return false;
        }
        let Some(id) = local.id else {
            // A remote schedule still in the inbox: win the word; the apply step reclaims it.
            let won = self.shared().slots.cancel(h.slot, generation);
            self.counters.cancelled_local += u64::from(won);
            return won;
        };
        match self.shared().slots.retire(h.slot, generation) {
            Ok(()) => {
                self.counters.cancelled_local += 1;
                self.drop_entry(h.slot, id);
                self.free.push(h.slot);
                true
            }
            Err(State::Cancelled) => {
                // A remote cancel won first: reclaim now rather than at fire time.
                self.reclaim(h.slot, generation);
                false
            }
            Err(_) => false,
        }
    }

    /// Re-arms an own-base timer to fire `delay` from now: O(1), no atomic RMW. False if `h` is
    /// not pending on this base (fired, cancelled, stale, or another base's: use
    /// [`Remote::reschedule_after`] for those).
    pub fn reset_after(&mut self, h: Handle, delay: Duration) -> bool {
        let deadline_ns = self.read_clock().saturating_add(duration_to_ns(delay));
        self.reset_at_ns(h, deadline_ns)
    }

    /// Re-arms an own-base timer to fire at `deadline`; see [`Base::reset_after`].
    pub fn reset_at(&mut self, h: Handle, deadline: Instant) -> bool {
        let ns = self.group.timeline.instant_to_ns(deadline);
        self.reset_at_ns(h, ns)
    }

    fn reset_at_ns(&mut self, h: Handle, deadline_ns: u64) -> bool {
        if h.base() != self.index || h.set != self.group.set {
            return false;
        }
        let Some(Local { id: Some(id), .. }) = self.local.get(h.slot as usize).copied() else {
            return false;
        };
        if self.shared().slots.load(h.slot) != (h.generation, State::Pending) {
            return false;
        }
        let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
        if !self.wheel.reset(id, tick) {
            return false;
        }
        self.local[h.slot as usize].deadline_tick = tick;
        self.arm_if_earlier(self.wheel.expiry(id).unwrap_or(tick));
        true
    }

    /// Does the base's work, without blocking: reads the clock once, applies the inbox, fires
    /// every due timer (calling `f` with each payload, in deadline order), re-arms the fd.
    /// Returns how many fired.
    pub fn turn(&mut self, mut f: impl FnMut(T)) -> usize {
        self.begin_turn();
        let now_ns = self.read_clock();
        self.apply_inbox();
        let fired = self.fire_due(now_ns, &mut f);
        self.refill_reserve();
        self.rearm(now_ns);
        self.end_turn();
        fired
    }

    /// Blocks until `fd()` is readable or `timeout` passes (`None`: no limit). Call `turn` next.
    pub fn park(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if !self.parked {
            if !self.shared().wake.park() {
                return Ok(()); // a message arrived since the last turn
            }
            self.parked = true;
        }
        if self.timerfd.is_none() && self.due_on_manual_clock() {
            return Ok(());
        }
        sys::epoll_wait(self.epoll.as_fd(), timeout_to_ms(timeout))?;
        Ok(())
    }

    /// A snapshot of this base's counters.
    pub fn stats(&self) -> BaseStats {
        let shared = self.shared();
        // Relaxed: statistics.
        let load = |c: &crate::sync::AtomicU64| c.load(Ordering::Relaxed);
        BaseStats {
            scheduled: self.counters.scheduled,
            fired: self.counters.fired,
            cancelled_local: self.counters.cancelled_local,
            cancelled_remote: load(&shared.cancelled_remote),
            inbox_full: load(&shared.inbox_full),
            cancel_notices_dropped: load(&shared.notices_dropped),
            cascades: self.wheel.stats().cascades,
            lateness: self.counters.lateness.summary(),
        }
    }

    // ---- the steps of a turn ----

    /// Takes the wake word and reads the eventfd back if a kick is owed.
    fn begin_turn(&mut self) {
        let found = self.shared().wake.begin();
        if found == Found::Notified && self.parked {
            // Exactly one producer moved PARKED -> NOTIFIED, and it kicks exactly once.
            self.kicks_owed += 1;
        }
        self.parked = false;
        if self.kicks_owed > 0 {
            // A kick may still be on its way (the producer swaps, then writes): keep owing it.
            let read = sys::eventfd_take(self.shared().eventfd.as_fd()).unwrap_or(0);
            self.kicks_owed = self.kicks_owed.saturating_sub(read);
        }
    }

    /// Reads the clock, keeping the largest reading (a manual clock may step back).
    fn read_clock(&mut self) -> u64 {
        self.now_ns = self.now_ns.max(self.group.timeline.now_ns());
        self.now_ns
    }

    /// Applies at most one inbox-full of messages (so producers cannot keep a turn going).
    fn apply_inbox(&mut self) {
        let budget = self.shared().inbox.capacity();
        for _ in 0..budget {
            let Some(msg) = self.shared().inbox.pop() else {
                break;
            };
            match msg {
                Msg::Schedule {
                    slot,
                    generation,
                    deadline_ns,
                    value,
                } => {
                    self.apply_schedule(slot, generation, deadline_ns, value);
                }
                Msg::Cancel { slot, generation } => {
                    if self.shared().slots.load(slot) == (generation, State::Cancelled)
                        && self.local[slot as usize].id.is_some()
                    {
                        self.reclaim(slot, generation);
                    }
                }
            }
        }
    }

    fn apply_schedule(&mut self, slot: u32, generation: u32, deadline_ns: u64, value: T) {
        self.counters.scheduled += 1;
        match self.shared().slots.load(slot) {
            (g, State::Pending) if g == generation => {
                let tick = ns_to_tick_ceil(deadline_ns, self.tick_ns());
                let inserted = self.wheel.insert(tick, Entry { slot, value });
                // The wheel's capacity equals the slot table's, and this slot is one of them.
                let id =
                    inserted.unwrap_or_else(|_| unreachable!("wheel full below its slot count"));
                self.local[slot as usize] = Local {
                    id: Some(id),
                    deadline_tick: tick,
                };
            }
            (g, State::Cancelled) if g == generation => {
                // Cancelled while in the inbox: never enters the wheel.
                drop(value);
                self.shared().slots.reclaim(slot, generation);
                self.free.push(slot);
            }
            other => unreachable!("slot {slot} gen {generation} applied in state {other:?}"),
        }
    }

    fn fire_due(&mut self, now_ns: u64, f: &mut impl FnMut(T)) -> usize {
        let tick_ns = self.tick_ns();
        let now_tick = ns_to_tick_floor(now_ns, tick_ns);
        let shared = &self.group.bases[self.index];
        let mut fired = 0;
        while let Some((_, Entry { slot, value })) = self.wheel.poll(now_tick) {
            let local = std::mem::take(&mut self.local[slot as usize]);
            let (generation, _) = shared.slots.load(slot);
            self.free.push(slot);
            match shared.slots.retire(slot, generation) {
                Ok(()) => {
                    debug_assert!(
                        local.deadline_tick <= now_tick,
                        "fired early: {} > {now_tick}",
                        local.deadline_tick
                    );
                    let late = now_ns.saturating_sub(tick_to_ns(local.deadline_tick, tick_ns));
                    self.counters.lateness.record(late);
                    self.counters.fired += 1;
                    fired += 1;
                    f(value);
                }
                Err(state) => {
                    debug_assert_eq!(
                        state,
                        State::Cancelled,
                        "slot {slot} in the wheel but {state:?}"
                    );
                    shared.slots.reclaim(slot, generation);
                    drop(value);
                }
            }
        }
        fired
    }

    /// Puts the timerfd at the wheel's next expiry if that changed or the armed time passed.
    fn rearm(&mut self, now_ns: u64) {
        let now_tick = ns_to_tick_floor(now_ns, self.tick_ns());
        // After the drain nothing is due at `now_tick`; never arm at or before it (that would make
        // the fd readable with nothing to do).
        let next = self.wheel.next_expiry().map(|t| t.max(now_tick + 1));
        let passed = self.armed.is_some_and(|a| a <= now_tick);
        if next != self.armed || passed {
            self.set_timer(next);
        }
    }

    fn arm_if_earlier(&mut self, expiry: u64) {
        if self.armed.is_none_or(|a| expiry < a) {
            self.set_timer(Some(expiry));
        }
    }

    fn set_timer(&mut self, tick: Option<u64>) {
        let Some(tfd) = &self.timerfd else { return };
        let at = tick.and_then(|t| self.group.timeline.tick_to_raw_ns(t));
        // Failure needs a bad fd or a bad timespec; both are excluded by construction.
        let set = sys::timerfd_set_abs(tfd.as_fd(), at);
        debug_assert!(set.is_ok(), "timerfd_settime failed: {set:?}");
        self.armed = at.and(tick);
    }

    /// Tries to park; if a message arrived during the turn, kicks our own eventfd so the fd stays
    /// readable and the caller's loop turns again.
    fn end_turn(&mut self) {
        if self.shared().wake.park() {
            self.parked = true;
        } else {
            let kicked = sys::eventfd_kick(self.shared().eventfd.as_fd());
            debug_assert!(kicked.is_ok(), "eventfd write failed: {kicked:?}");
            self.kicks_owed += 1;
        }
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
        self.shared().reserve.pop()
    }

    fn fresh_slot(&mut self) -> Option<u32> {
        if (self.next_unused as usize) < self.slot_capacity() {
            let slot = self.next_unused;
            self.next_unused += 1;
            self.local.push(Local::default());
            Some(slot)
        } else {
            None
        }
    }

    /// Tops the reserve up to its target from the private list or unused slots.
    fn refill_reserve(&mut self) {
        let mut have = self.shared().reserve.len();
        while have < self.reserve_target {
            let Some(slot) = self.free.pop().or_else(|| self.fresh_slot()) else {
                break;
            };
            if let Err(slot) = self.shared().reserve.push(slot) {
                self.free.push(slot);
                break;
            }
            have += 1;
        }
        let exhausted = have == 0;
        // Relaxed: a hint for the error kind remote schedulers report.
        self.shared().exhausted.store(exhausted, Ordering::Relaxed);
    }

    /// Owner: a slot found CANCELLED(g): drop its wheel entry if any, free it.
    fn reclaim(&mut self, slot: u32, generation: u32) {
        if let Some(id) = self.local[slot as usize].id {
            self.drop_entry(slot, id);
        }
        self.shared().slots.reclaim(slot, generation);
        self.free.push(slot);
    }

    fn drop_entry(&mut self, slot: u32, id: TimerId) {
        self.local[slot as usize].id = None;
        let entry = self.wheel.cancel(id);
        debug_assert!(
            entry.as_ref().is_some_and(|e| e.slot == slot),
            "slot {slot} map out of sync"
        );
        drop(entry);
    }

    fn due_on_manual_clock(&mut self) -> bool {
        let now_tick = ns_to_tick_floor(self.read_clock(), self.tick_ns());
        self.wheel.next_expiry().is_some_and(|t| t <= now_tick) || !self.shared().inbox.is_empty()
    }
}

/// Milliseconds for `epoll_wait`, rounded up so a short timeout does not become a busy poll.
fn timeout_to_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => i32::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX),
    }
}

impl<T> AsRawFd for Base<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

impl<T> Drop for Base<T> {
    fn drop(&mut self) {
        // Pending payloads (in the wheel and in the inbox) are dropped here, on the owner's
        // thread. Messages pushed after this point are dropped with the last `Remote`.
        let shared = &self.group.bases[self.index];
        while shared.inbox.pop().is_some() {}
        self.wheel.clear();
    }
}

impl<T> fmt::Debug for Base<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Base")
            .field("index", &self.index)
            .field("pending", &self.wheel.len())
            .field("armed_tick", &self.armed)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn timeout_rounds_up_to_ms() {
        assert_eq!(timeout_to_ms(None), -1);
        assert_eq!(timeout_to_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_to_ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(timeout_to_ms(Some(Duration::from_millis(5))), 5);
        assert_eq!(timeout_to_ms(Some(Duration::MAX)), i32::MAX);
    }
}

//! Adversarial tests of Exact mode's level-2 batches (timers 4096 to 262143 ticks from the clock
//! with 6 levels, kept in a per-slot array and chained in place by level-1 slot and by tick when
//! the clock reaches their slot), from the public API only, against a naive model: a map of the
//! pending timers with the expiry each must fire at and a `BTreeSet` of `(expiry, id)`.
//!
//! What is attacked: a position a timer leaves is never written, so the hand-out must skip it
//! (`Links::is_on`) and never confuse it with a timer filed later; the room rule (a batch takes
//! timers only while it has fewer than `2 * live + 64` positions, else the slot's list); the
//! emptying of a batch whose timers all left (mid-cascade, mid-tick, by `clear`); clocks that
//! jump over several level-2 slots, step tick by tick, or stop mid-tick; clocks and deadlines
//! next to `u64::MAX`; `RawWheel` storage that frees and reuses indices at once, and storage
//! with the default `is_on` whose `list` goes stale after a hand-out; and `Wheel::reserve`
//! making level-2 inserts allocate nothing (a counting global allocator).
//!
//! Checked on every poll: never early, fired in the first poll whose `now` reaches the expiry,
//! exactly once, with its own value, the earliest pending (so a drain is in non-decreasing
//! order); `next_expiry` between the clock and the earliest expiry; `len`, stats.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};

use tickwheel::raw::{Links, RawWheel};
use tickwheel::{Builder, Mode, TimerId, Wheel};

mod common;
use common::{L1, L2, L3, Rng, next_multiple};

// ---- A counting allocator (per thread, so tests may run in parallel) -------------------------

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is passed on unchanged to the system allocator; counting touches only a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above; `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// `f`'s result and the allocations this thread made in it.
fn counted<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (r, ALLOCATIONS.with(Cell::get) - before)
}

// ---- A Wheel and its model --------------------------------------------------------------------

struct Harness {
    wheel: Wheel<u64>,
    rng: Rng,
    /// id -> (expiry, value).
    pending: HashMap<TimerId, (u64, u64)>,
    /// `(expiry, id bits)`.
    order: BTreeSet<(u64, u64)>,
    /// Ids that may name pending timers (cleaned lazily).
    ids: Vec<TimerId>,
    dead: Vec<TimerId>,
    next_value: u64,
    inserted: u64,
    fired: u64,
    cancelled: u64,
    resets: u64,
    /// Everything fired, in order: (expiry, value).
    log: Vec<(u64, u64)>,
}

impl Harness {
    fn new(start: u64, levels: usize, seed: u64) -> Self {
        let wheel = Builder::new(Mode::Exact)
            .levels(levels)
            .start(start)
            .build()
            .unwrap();
        Harness {
            wheel,
            rng: Rng(seed),
            pending: HashMap::new(),
            order: BTreeSet::new(),
            ids: Vec::new(),
            dead: Vec::new(),
            next_value: 1,
            inserted: 0,
            fired: 0,
            cancelled: 0,
            resets: 0,
            log: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        self.wheel.now()
    }

    fn first(&self) -> Option<u64> {
        self.order.first().map(|&(e, _)| e)
    }

    fn forget(&mut self, id: TimerId) -> (u64, u64) {
        let (e, v) = self.pending.remove(&id).expect("pending");
        assert!(self.order.remove(&(e, id.to_bits())));
        if self.dead.len() < 512 {
            self.dead.push(id);
        } else {
            let at = self.rng.below(512) as usize;
            self.dead[at] = id;
        }
        (e, v)
    }

    fn insert(&mut self, deadline: u64) -> TimerId {
        let clock = self.now();
        let value = self.next_value;
        self.next_value += 1;
        let id = self.wheel.insert(deadline, value).unwrap();
        let expiry = self.wheel.expiry(id).unwrap();
        assert_eq!(expiry, deadline.max(clock), "Exact keeps the deadline");
        assert!(
            self.pending.insert(id, (expiry, value)).is_none(),
            "id reused"
        );
        assert!(self.order.insert((expiry, id.to_bits())));
        self.ids.push(id);
        self.inserted += 1;
        id
    }

    fn cancel(&mut self, id: TimerId) {
        let got = self.wheel.cancel(id);
        if self.pending.contains_key(&id) {
            let (_, v) = self.forget(id);
            assert_eq!(got, Some(v), "cancel of a pending timer");
            self.cancelled += 1;
        } else {
            assert_eq!(got, None, "cancel of a stale id");
        }
        assert_eq!(self.wheel.cancel(id), None);
    }

    fn reset(&mut self, id: TimerId, deadline: u64) {
        let clock = self.now();
        let ok = self.wheel.reset(id, deadline);
        if let Some(&(old, v)) = self.pending.get(&id) {
            assert!(ok, "reset of a pending timer");
            self.resets += 1;
            assert!(self.order.remove(&(old, id.to_bits())));
            let e = self.wheel.expiry(id).unwrap();
            assert_eq!(e, deadline.max(clock), "reset keeps the deadline");
            self.pending.insert(id, (e, v));
            self.order.insert((e, id.to_bits()));
        } else {
            assert!(!ok, "reset of a stale id");
        }
    }

    fn poll(&mut self, now: u64) -> Option<TimerId> {
        let before = self.now();
        let got = self.wheel.poll(now);
        let clock = self.now();
        if now < before {
            assert!(got.is_none() && clock == before, "the clock went back");
            return None;
        }
        match got {
            Some((id, value)) => {
                let (e, v) = self
                    .pending
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| panic!("fired {id:?} ({value}): not pending"));
                assert_eq!(v, value, "fired with another timer's value");
                assert!(
                    e <= clock && clock <= now,
                    "early: {e} at {clock}, now {now}"
                );
                let first = self.first().unwrap();
                assert_eq!(e, first, "order: {e} fired while {first} pending");
                self.forget(id);
                self.fired += 1;
                self.log.push((e, v));
                assert_eq!(self.wheel.expiry(id), None, "a fired id is stale");
                Some(id)
            }
            None => {
                if let Some(first) = self.first() {
                    assert!(first > now, "late: {first} not fired by poll({now})");
                }
                assert_eq!(clock, before.max(now), "clock after a drain");
                None
            }
        }
    }

    fn drain(&mut self, now: u64) {
        while self.poll(now).is_some() {}
        self.check();
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.pending.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.pending.is_empty());
        let clock = self.now();
        match (self.wheel.next_expiry(), self.first()) {
            (None, None) => {}
            (Some(ne), Some(first)) => {
                assert!(first >= clock, "pending {first} behind clock {clock}");
                assert!(
                    ne >= clock && ne <= first,
                    "next_expiry {ne}: clock {clock}, first {first}"
                );
            }
            other => panic!("next_expiry and model disagree: {other:?}"),
        }
        let s = self.wheel.stats();
        assert_eq!(s.inserted, self.inserted, "stats.inserted");
        assert_eq!(s.fired, self.fired, "stats.fired");
        assert_eq!(s.cancelled, self.cancelled, "stats.cancelled");
        assert_eq!(s.resets, self.resets, "stats.resets");
        assert!(
            s.resets_in_place + s.resets_deferred <= s.resets,
            "stats resets"
        );
    }

    /// Wakes at `next_expiry` until empty.
    fn run_out(&mut self) {
        let mut wakes = 0u64;
        while let Some(w) = self.wheel.next_expiry() {
            wakes += 1;
            assert!(wakes < 5_000_000, "next_expiry makes no progress");
            self.drain(w);
        }
        assert!(
            self.pending.is_empty(),
            "next_expiry None with timers pending"
        );
        self.wheel.check_invariants();
        self.check();
    }

    /// Steps the clock one tick at a time up to `to`.
    fn step_to(&mut self, to: u64) {
        while self.now() < to {
            let t = self.now() + 1;
            self.drain(t);
        }
    }

    fn pick(&mut self) -> Option<TimerId> {
        if self.pending.is_empty() {
            return None;
        }
        if self.rng.chance(60) {
            let from = self.now().saturating_add(self.rng.below(2 * L2));
            if let Some(&(_, b)) = self.order.range((from, 0)..).next() {
                return Some(TimerId::from_bits(b));
            }
        }
        loop {
            let at = self.rng.below(self.ids.len() as u64) as usize;
            let id = self.ids[at];
            if self.pending.contains_key(&id) {
                return Some(id);
            }
            self.ids.swap_remove(at);
        }
    }

    /// A deadline, most on level 2 and crowded.
    fn deadline(&mut self) -> u64 {
        let c = self.now();
        let next2 = next_multiple(c, L2);
        let rng = &mut self.rng;
        match rng.below(10) {
            0 => c.saturating_add(rng.below(L1)),
            1 => c.saturating_add(rng.range(L1, L2)),
            // The next level-2 slot, one tick or one level-1 slot of it.
            2 => next2.saturating_add(17 * L1 + 5),
            3 => next2.saturating_add(17 * L1 + rng.below(L1)),
            4 => next2.saturating_add(rng.below(L2)),
            5 | 6 => c.saturating_add(rng.range(L2, L3)),
            7 => next2
                .saturating_add(L2 * rng.below(4))
                .saturating_add(rng.below(3)),
            8 => c.saturating_add(rng.range(L3, 8 * L3)),
            _ => u64::MAX - rng.below(L2),
        }
    }

    fn new_deadline(&mut self, id: TimerId) -> u64 {
        let old = self.pending[&id].0;
        let c = self.now();
        let rng = &mut self.rng;
        match rng.below(9) {
            0 => c,
            // Earlier inside the old level-2 slot (a new position, the old left behind).
            1 => rng.range((old / L2 * L2).max(c), old.saturating_add(1)),
            2 => old.saturating_sub(rng.below(L1)).max(c),
            3 => old,
            // Later: inside the slot, past it, past the top level.
            4 => old.saturating_add(rng.below(L1)),
            5 => old.saturating_add(rng.range(L2, 3 * L2)),
            6 => old.saturating_add(1 << 40),
            7 => u64::MAX,
            _ => self.deadline(),
        }
    }

    fn act(&mut self) {
        match self.rng.below(8) {
            0 | 1 => {
                let d = self.deadline();
                self.insert(d);
            }
            2 | 3 => {
                if let Some(id) = self.pick() {
                    self.cancel(id);
                    if self.rng.chance(70) {
                        let d = self.deadline();
                        self.insert(d);
                    }
                }
            }
            4..=6 => {
                if let Some(id) = self.pick() {
                    let d = self.new_deadline(id);
                    self.reset(id, d);
                }
            }
            _ => {
                if !self.dead.is_empty() {
                    let id = self.dead[self.rng.below(self.dead.len() as u64) as usize];
                    if self.rng.chance(50) {
                        self.cancel(id);
                    } else {
                        let d = self.deadline();
                        self.reset(id, d);
                    }
                }
            }
        }
    }

    /// Cancels every pending timer with expiry `e`.
    fn cancel_tick(&mut self, e: u64) {
        let ids: Vec<u64> = self
            .order
            .range((e, 0)..=(e, u64::MAX))
            .map(|&(_, b)| b)
            .collect();
        for b in ids {
            self.cancel(TimerId::from_bits(b));
        }
    }
}

// ---- Wheel tests -----------------------------------------------------------------------------

/// 20k timers on one tick of one level-2 slot and 5k more over the slot; a poll stopped halfway
/// through that tick, the rest of the tick cancelled, and the slot stepped through tick by tick.
#[test]
fn crowded_tick_stopped_midway_and_cancelled() {
    for (seed, start) in [(1, 0u64), (2, 5 * L2 + 77), (3, (1 << 40) + 3)] {
        let mut h = Harness::new(start, 6, seed);
        let slot = next_multiple(start, L2) + L2; // at least 4096 out: level 2
        let hot = slot + 33 * L1 + 9;
        for _ in 0..20_000 {
            h.insert(hot);
        }
        for _ in 0..5_000 {
            let d = slot + h.rng.below(L2);
            h.insert(d);
        }
        h.check();
        h.wheel.check_invariants();
        h.drain(hot - 1);
        h.wheel.check_invariants();
        for _ in 0..7_000 {
            assert!(h.poll(hot).is_some());
        }
        // The rest of the tick cancelled: the tick frozen mid-hand-out empties.
        h.cancel_tick(hot);
        h.wheel.check_invariants();
        h.check();
        h.insert(hot);
        h.insert(hot + 1);
        h.step_to(slot + L2 + 5);
        h.run_out();
    }
}

/// All but one of a waiting batch cancelled, the slot refilled with new timers on the same ticks
/// (taking the freed entries), then the survivor cancelled too (the batch emptied) and refilled
/// again: nothing left behind fires, nothing new is lost, through a jump and through steps.
#[test]
fn batch_cancelled_down_to_one_then_refilled() {
    for jump in [false, true] {
        let mut h = Harness::new(3 * L2 + 100, 6, 7);
        let slot = 6 * L2;
        let old: Vec<TimerId> = (0..3000).map(|k| h.insert(slot + (k * 37) % L2)).collect();
        let keep = old[1234];
        for &id in &old {
            if id != keep {
                h.cancel(id);
            }
        }
        let fresh: Vec<TimerId> = (0..3000).map(|k| h.insert(slot + (k * 37) % L2)).collect();
        h.wheel.check_invariants();
        h.cancel(keep);
        for &id in fresh.iter().step_by(2) {
            h.cancel(id);
        }
        for k in 0..1500 {
            h.insert(slot + (k * 11) % L2);
        }
        h.check();
        h.wheel.check_invariants();
        if jump {
            h.drain(slot + L2 + 1);
        } else {
            h.step_to(slot + L2 + 1);
        }
        assert_eq!(h.fired, 3000, "every live refilled timer, once");
        h.run_out();
    }
}

/// A waiting batch emptied entirely, then refilled in the same slot, several times over before
/// the slot comes due: positions restart and must not be confused with the old ones.
#[test]
fn batch_emptied_and_refilled_many_times() {
    let mut h = Harness::new(0, 6, 11);
    let slot = 9 * L2;
    for round in 0..6u64 {
        let ids: Vec<TimerId> = (0..700)
            .map(|k| h.insert(slot + (k * 13 + round) % L2))
            .collect();
        if round < 5 {
            for id in ids {
                h.cancel(id);
            }
            assert!(h.wheel.is_empty());
            assert_eq!(h.wheel.next_expiry(), None);
        }
        h.wheel.check_invariants();
    }
    h.drain(slot + 3 * L1);
    h.wheel.check_invariants();
    h.step_to(slot + L2);
    assert_eq!(h.fired, 700);
    h.run_out();
}

/// Reset earlier inside the same level-2 slot many times (each leaves a position behind), to
/// the same tick, later inside the slot, past the slot, past the top level, and to `u64::MAX`.
#[test]
fn resets_earlier_in_the_slot_leave_positions_behind() {
    for levels in [6, 3, 11] {
        let mut h = Harness::new(L2 + 5, levels, 13 + levels as u64);
        let slot = 4 * L2;
        let ids: Vec<TimerId> = (0..600).map(|_| h.insert(slot + L2 - 1)).collect();
        for round in 1..40u64 {
            for (k, &id) in ids.iter().enumerate() {
                let k = k as u64;
                let d = match (k + round) % 9 {
                    0 => u64::MAX,
                    1 => slot + L2 + round * 50,
                    2 => slot + (1 << 37) + k,
                    _ => (h.pending[&id].0).saturating_sub(1 + k % 5).max(slot),
                };
                // Timers pushed out come back into the slot next round.
                let d = if round % 4 == 0 && d > slot + L2 {
                    slot + (k * 31) % L2
                } else {
                    d
                };
                h.reset(id, d);
            }
            if round % 8 == 0 {
                h.wheel.check_invariants();
                h.check();
            }
        }
        h.drain(slot - 1);
        assert_eq!(h.fired, 0);
        h.step_to(slot + L2 + 2);
        h.wheel.check_invariants();
        h.run_out();
        assert_eq!(h.fired, 600);
    }
}

/// Mostly-cancelled batches hit the room rule, so later timers go on the slot's list, mixed on
/// the same ticks with batched ones; then the slot's timers are reset earlier and later.
#[test]
fn room_rule_mixes_list_and_batch() {
    for seed in 0..4 {
        let mut h = Harness::new(seed * 1_000_003, 6, 21 + seed);
        let base = next_multiple(h.now(), L2) + L2;
        for s in 0..4 {
            let slot = base + s * L2;
            let ids: Vec<TimerId> = (0..1000).map(|k| h.insert(slot + (k * 7) % L2)).collect();
            // 10 survivors: 1000 positions >= 2 * 10 + 64, the batch is full.
            for &id in &ids[10..] {
                h.cancel(id);
            }
            for k in 0..1200 {
                h.insert(slot + (k * 7) % L2);
            }
            for _ in 0..300 {
                let id = h.pick().unwrap();
                h.cancel(id);
                let d = h.deadline();
                h.insert(d);
            }
        }
        h.check();
        h.wheel.check_invariants();
        for _ in 0..2000 {
            if let Some(id) = h.pick() {
                let d = h.new_deadline(id);
                h.reset(id, d);
            }
        }
        h.wheel.check_invariants();
        h.step_to(base + L2 + 300);
        h.drain(base + 3 * L2 + 7);
        h.wheel.check_invariants();
        h.run_out();
    }
}

/// The room rule's boundary exactly: a batch of 224 timers takes timers up to 512 positions and
/// no further, so the churn past it goes on the slot's list and allocates nothing (one block of
/// 512 positions holds it all).
#[test]
fn room_rule_boundary_allocates_no_second_block() {
    let mut h = Harness::new(0, 6, 5);
    let slot = 3 * L2;
    let live: Vec<TimerId> = (0..224).map(|k| h.insert(slot + k)).collect();
    let mut last = h.insert(slot + 300);
    h.cancel(last);
    // The entry the churn reuses exists; the first block is begun.
    let mut allocs = 0;
    for k in 0..1000 {
        let (id, n) = counted(|| h.wheel.insert(slot + 400 + k % 7, 0).unwrap());
        allocs += n;
        h.pending.insert(id, (slot + 400 + k % 7, 0));
        h.order.insert((slot + 400 + k % 7, id.to_bits()));
        h.inserted += 1;
        h.ids.push(id);
        last = id;
        h.cancel(last);
    }
    assert_eq!(
        allocs, 0,
        "a batch of 224 timers took a 513th position (fewer than 2 * live + 64 allowed)"
    );
    assert_eq!(h.wheel.len(), live.len());
    h.wheel.check_invariants();
    h.run_out();
}

/// Random work on level-2 timers with polls that jump over several level-2 slots, step single
/// ticks, stop mid-tick and cancel the rest of that tick, and clear the wheel mid-run.
#[test]
fn random_level_two_work() {
    for seed in 0..24u64 {
        let start = [0, L2 - 1, 7 * L2 + 4000, 1 << 33, u64::MAX - 40 * L3][seed as usize % 5];
        let levels = [6, 6, 3, 11][seed as usize % 4];
        let mut h = Harness::new(start, levels, 100 + seed);
        for _ in 0..1500 {
            let d = h.deadline();
            h.insert(d);
        }
        for step in 0..300 {
            for _ in 0..h.rng.below(6) {
                h.act();
            }
            let c = h.now();
            let to = match h.rng.below(8) {
                0 | 1 => c.saturating_add(1),
                2 => h.first().unwrap_or(c),
                3 => next_multiple(c, L2)
                    .saturating_sub(1)
                    .saturating_add(h.rng.below(3)),
                4 => c.saturating_add(h.rng.range(2 * L2, 9 * L2)),
                5 => h.wheel.next_expiry().unwrap_or(c),
                _ => c.saturating_add(h.rng.below(L2)),
            };
            if h.rng.chance(25) {
                // Stopped mid-tick: the rest of that tick cancelled, or acted on.
                let mut tick = None;
                for _ in 0..h.rng.below(6) {
                    match h.poll(to) {
                        Some(_) => tick = h.log.last().map(|&(e, _)| e),
                        None => break,
                    }
                }
                if let Some(e) = tick {
                    if h.rng.chance(50) {
                        h.cancel_tick(e);
                    } else {
                        h.act();
                    }
                }
                h.check();
            } else {
                while h.poll(to).is_some() {
                    if h.rng.chance(20) {
                        h.act();
                    }
                }
                h.check();
            }
            if step == 150 && seed % 3 == 0 {
                // Clear mid-run: nothing of the old timers comes back.
                let pending: Vec<TimerId> = h.pending.keys().copied().collect();
                h.wheel.clear();
                for id in pending {
                    h.forget(id);
                }
                h.cancelled = h.wheel.stats().cancelled;
                h.check();
                h.wheel.check_invariants();
            }
            if step % 50 == 0 {
                h.wheel.check_invariants();
            }
        }
        h.run_out();
    }
}

/// `clear` while a tick of the run is being handed out, then the same slot and tick filled
/// again by inserts: only the new timers fire, once each.
#[test]
fn cleared_mid_tick_then_reused() {
    let mut h = Harness::new(0, 6, 31);
    let slot = 2 * L2;
    let hot = slot + 5 * L1 + 3;
    let old: Vec<TimerId> = (0..2000)
        .map(|k| h.insert(if k % 2 == 0 { hot } else { slot + k }))
        .collect();
    h.drain(hot - 1);
    for _ in 0..10 {
        h.poll(hot).unwrap();
    }
    let before_clear = h.fired;
    h.wheel.clear();
    for id in old {
        if h.pending.contains_key(&id) {
            h.forget(id);
        }
    }
    h.cancelled = h.wheel.stats().cancelled;
    h.check();
    assert_eq!(h.wheel.poll(hot), None);
    h.wheel.check_invariants();
    // The same tick, the rest of the window, the next level-2 slot (a new batch).
    for k in 0..1500 {
        let d = [hot, hot + k % 300, slot + L2 + k, slot + 2 * L2 + 17][k as usize % 4];
        h.insert(d);
    }
    h.drain(hot);
    h.step_to(slot + L2 + 3);
    h.run_out();
    assert_eq!(h.fired, before_clear + 1500);
}

/// Clocks near `u64::MAX`: level-2 timers of the last slots, deadlines at `u64::MAX`, with 6
/// levels (the end on the overflow list) and 11 (the top level covers every `u64`).
#[test]
fn the_end_of_time() {
    for levels in [6, 11] {
        for start in [
            u64::MAX - 3 * L2 - 5,
            u64::MAX - L3 + 1,
            u64::MAX - 2 * L2 + 1,
        ] {
            let mut h = Harness::new(start, levels, start ^ levels as u64);
            for k in 0..2000u64 {
                let d = match k % 5 {
                    0 => u64::MAX,
                    1 => u64::MAX - k % 3,
                    2 => start.saturating_add(L2 + k),
                    3 => next_multiple(start, L2).saturating_add(k % L2),
                    _ => start.saturating_add(k % L1),
                };
                h.insert(d);
            }
            for _ in 0..500 {
                let id = h.pick().unwrap();
                let d = h.new_deadline(id);
                h.reset(id, d);
            }
            h.wheel.check_invariants();
            h.drain(start + L2 + 10);
            h.step_to(start.saturating_add(L2 + 200));
            h.drain(u64::MAX - 1);
            h.wheel.check_invariants();
            h.drain(u64::MAX);
            assert!(h.pending.is_empty(), "everything due at u64::MAX");
            h.check();
            assert_eq!(h.wheel.poll(u64::MAX), None);
        }
    }
}

/// One jump over many level-2 slots hands out the same timers in the same order (by expiry) as
/// single steps through them.
#[test]
fn one_jump_and_single_steps_agree() {
    let build = |h: &mut Harness| {
        for k in 0..4000u64 {
            let d = L2 + (k * 2654435761) % (10 * L2);
            h.insert(d);
        }
    };
    let mut a = Harness::new(0, 6, 1);
    let mut b = Harness::new(0, 6, 1);
    build(&mut a);
    build(&mut b);
    a.drain(12 * L2);
    b.step_to(12 * L2);
    assert_eq!(a.log, b.log, "one jump and single steps differ");
    assert_eq!(a.log.len(), 4000);
}

/// `reserve` in Exact mode, then level-2 inserts (spread over every slot, crowded into one,
/// into slots whose batches have positions left behind) allocate nothing.
#[test]
fn reserve_makes_level_two_inserts_allocation_free() {
    for pattern in 0..4u64 {
        let mut w: Wheel<u64> = Wheel::new(Mode::Exact);
        // Batches with positions left behind, and blocks in the pool.
        let mut rng = Rng(pattern);
        let old: Vec<TimerId> = (0..3000)
            .map(|k| w.insert(L2 + rng.below(60 * L2), k).unwrap())
            .collect();
        for (k, &id) in old.iter().enumerate() {
            if k % 4 != 0 {
                w.cancel(id);
            }
        }
        let n = 20_000u64;
        w.reserve(n as usize).unwrap();
        let mut allocs = 0;
        for k in 0..n {
            let d = match pattern {
                0 => L2 + rng.below(62 * L2),
                1 => 5 * L2 + 7,
                2 => 3 * L2 + rng.below(L2),
                _ => [L2 + 1, 40 * L2 + k % L2, rng.below(L3), 2 * L3][k as usize % 4],
            };
            let (id, a) = counted(|| w.insert(d, k));
            allocs += a;
            id.unwrap();
        }
        assert_eq!(
            allocs, 0,
            "pattern {pattern}: inserts into reserved room allocated"
        );
        w.check_invariants();
        let mut count = 0;
        let mut last = 0;
        while let Some(t) = w.next_expiry() {
            for _ in w.drain(t) {
                assert!(t >= last);
                last = t;
                count += 1;
            }
        }
        assert_eq!(count, n + 750);
    }
}

// ---- RawWheel over storage written here --------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Rec {
    next: u32,
    prev: u32,
    list: u32,
    expiry: u64,
    held: bool,
}

/// Storage that frees a record as soon as the wheel lets go of it (getters then panic) and
/// hands the same record out again at once (LIFO); `is_on` per the contract. With `stale`, it
/// keeps every field after a hand-out or unlink and uses the default `is_on`.
struct Table {
    recs: Vec<Rec>,
    free: Vec<u32>,
    stale: bool,
}

impl Table {
    fn at(&self, i: u32) -> &Rec {
        let r = &self.recs[i as usize];
        assert!(self.stale || r.held, "the wheel read freed record {i}");
        r
    }
    fn at_mut(&mut self, i: u32) -> &mut Rec {
        let stale = self.stale;
        let r = &mut self.recs[i as usize];
        assert!(stale || r.held, "the wheel wrote freed record {i}");
        r
    }
}

impl Links for Table {
    fn next(&self, i: u32) -> u32 {
        self.at(i).next
    }
    fn set_next(&mut self, i: u32, v: u32) {
        self.at_mut(i).next = v;
    }
    fn prev(&self, i: u32) -> u32 {
        self.at(i).prev
    }
    fn set_prev(&mut self, i: u32, v: u32) {
        self.at_mut(i).prev = v;
    }
    fn list(&self, i: u32) -> u32 {
        self.at(i).list
    }
    fn set_list(&mut self, i: u32, v: u32) {
        self.at_mut(i).list = v;
    }
    fn is_on(&self, i: u32, list: u32) -> bool {
        let r = &self.recs[i as usize];
        if self.stale {
            r.list == list // the default's answer
        } else {
            r.held && r.list == list
        }
    }
    fn expiry(&self, i: u32) -> u64 {
        self.at(i).expiry
    }
    fn set_expiry(&mut self, i: u32, v: u64) {
        self.at_mut(i).expiry = v;
    }
}

struct Raw {
    wheel: RawWheel,
    t: Table,
    rng: Rng,
    pending: HashMap<u32, u64>,
    order: BTreeSet<(u64, u32)>,
}

impl Raw {
    fn new(start: u64, levels: usize, n: u32, stale: bool, seed: u64) -> Self {
        let blank = Rec {
            next: 0xdead,
            prev: 0xbeef,
            list: 0xf00d,
            expiry: 0,
            held: false,
        };
        Raw {
            wheel: Builder::new(Mode::Exact)
                .levels(levels)
                .start(start)
                .build_raw()
                .unwrap(),
            t: Table {
                recs: vec![blank; n as usize],
                free: (0..n).rev().collect(),
                stale,
            },
            rng: Rng(seed),
            pending: HashMap::new(),
            order: BTreeSet::new(),
        }
    }

    fn set(&mut self, i: u32, e: u64) {
        if let Some(old) = self.pending.insert(i, e) {
            assert!(self.order.remove(&(old, i)));
        }
        self.order.insert((e, i));
    }

    fn release(&mut self, i: u32) {
        let e = self.pending.remove(&i).expect("linked");
        assert!(self.order.remove(&(e, i)));
        self.t.recs[i as usize].held = false;
        if !self.t.stale {
            // Freed: scribble, as an allocator reusing the memory would.
            let r = &mut self.t.recs[i as usize];
            r.list = 0xf00d;
            r.next = 0xdead;
        }
        self.t.free.push(i);
    }

    fn link(&mut self, d: u64) -> Option<u32> {
        let i = self.t.free.pop()?;
        let c = self.wheel.now();
        self.t.recs[i as usize].held = true;
        let e = self.wheel.link(&mut self.t, i, d);
        assert_eq!(e, d.max(c));
        self.set(i, e);
        Some(i)
    }

    fn unlink(&mut self, i: u32) {
        self.wheel.unlink(&mut self.t, i);
        self.release(i);
    }

    fn relink(&mut self, i: u32, d: u64) {
        let c = self.wheel.now();
        let e = self.wheel.relink(&mut self.t, i, d);
        assert_eq!(e, d.max(c));
        self.set(i, e);
    }

    fn poll(&mut self, now: u64) -> Option<u32> {
        let before = self.wheel.now();
        let got = self.wheel.poll(&mut self.t, now);
        let clock = self.wheel.now();
        if now < before {
            assert_eq!(got, None);
            return None;
        }
        match got {
            Some(i) => {
                assert!(
                    self.t.recs[i as usize].held,
                    "handed out {i}, not linked (twice?)"
                );
                let e = *self.pending.get(&i).expect("linked");
                assert!(e <= clock && clock <= now, "early: {e} at {clock}");
                let first = self.order.first().unwrap().0;
                assert_eq!(e, first, "order");
                self.release(i);
                Some(i)
            }
            None => {
                if let Some(&(first, i)) = self.order.first() {
                    assert!(first > now, "late: {i} at {first} not out by {now}");
                }
                assert_eq!(clock, before.max(now));
                None
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.pending.len());
        let c = self.wheel.now();
        match (self.wheel.next_expiry(), self.order.first()) {
            (None, None) => {}
            (Some(ne), Some(&(first, _))) => assert!(ne >= c && ne <= first.max(c)),
            other => panic!("next_expiry and model disagree: {other:?}"),
        }
    }

    fn pick(&mut self) -> Option<u32> {
        let from = self.wheel.now().saturating_add(self.rng.below(2 * L2));
        self.order
            .range((from, 0)..)
            .next()
            .or_else(|| self.order.first())
            .map(|&(_, i)| i)
    }

    fn deadline(&mut self) -> u64 {
        let c = self.wheel.now();
        let n2 = next_multiple(c, L2);
        let rng = &mut self.rng;
        match rng.below(6) {
            0 => c.saturating_add(rng.below(L1)),
            1 => n2.saturating_add(9 * L1 + 2),
            2 => n2.saturating_add(rng.below(2 * L2)),
            3 => c.saturating_add(rng.range(L2, L3)),
            4 => u64::MAX - rng.below(2),
            _ => c.saturating_add(rng.below(L2)),
        }
    }

    fn act(&mut self) {
        match self.rng.below(6) {
            0 => {
                let d = self.deadline();
                self.link(d);
            }
            1 | 2 => {
                if let Some(i) = self.pick() {
                    self.unlink(i);
                    // The same record, at once, often into the same slot.
                    let d = self.deadline();
                    assert_eq!(self.link(d), Some(i), "LIFO reuse");
                }
            }
            3 | 4 => {
                if let Some(i) = self.pick() {
                    let old = self.pending[&i];
                    let c = self.wheel.now();
                    let d = match self.rng.below(4) {
                        0 => (old / L2 * L2).max(c),
                        1 => old.saturating_sub(self.rng.below(L2)).max(c),
                        2 => old.saturating_add(self.rng.below(2 * L2)),
                        _ => self.deadline(),
                    };
                    self.relink(i, d);
                }
            }
            _ => {
                if let Some(i) = self.pick() {
                    self.unlink(i);
                }
            }
        }
    }

    /// Hands out everything due by `now`, each record linked again at once (LIFO) with
    /// probability `relink`%, often into the tick being handed out or the same batch.
    fn drain(&mut self, now: u64, relink: u64) {
        while self.poll(now).is_some() {
            if self.rng.chance(relink) {
                let c = self.wheel.now();
                let d = if self.rng.chance(50) {
                    c
                } else {
                    self.deadline()
                };
                self.link(d);
            }
            if self.rng.chance(20) {
                self.act();
            }
        }
        self.check();
    }
}

fn raw_run(stale: bool) {
    for seed in 0..12u64 {
        let start = [0, L2 - 3, (1 << 41) + 9, u64::MAX - 20 * L3][seed as usize % 4];
        let mut r = Raw::new(start, [6, 3, 11][seed as usize % 3], 2500, stale, seed);
        let slot = next_multiple(start, L2).saturating_add(L2);
        for k in 0..1500u64 {
            let d = if k % 2 == 0 {
                slot.saturating_add(k % 5)
            } else {
                r.deadline()
            };
            r.link(d);
        }
        // A batch cancelled down to a few and refilled with the same records.
        let crowd: Vec<u32> = r
            .order
            .range((slot, 0)..(slot.saturating_add(5), 0))
            .map(|&(_, i)| i)
            .collect();
        for &i in crowd.iter().skip(3) {
            r.unlink(i);
        }
        for k in 0..crowd.len() as u64 {
            r.link(slot.saturating_add(k % 5));
        }
        r.check();
        for _ in 0..250 {
            for _ in 0..r.rng.below(5) {
                r.act();
            }
            let c = r.wheel.now();
            let to = match r.rng.below(5) {
                0 | 1 => c.saturating_add(1),
                2 => r.wheel.next_expiry().unwrap_or(c),
                3 => c.saturating_add(r.rng.range(2 * L2, 6 * L2)),
                _ => c.saturating_add(r.rng.below(L2)),
            };
            if r.rng.chance(25) {
                // Stopped mid-tick, then the rest of the tick unlinked.
                let mut e = None;
                for _ in 0..3 {
                    match r.poll(to) {
                        Some(_) => e = Some(r.wheel.now()),
                        None => break,
                    }
                }
                if let Some(e) = e {
                    let rest: Vec<u32> = r
                        .order
                        .range((e, 0)..=(e, u32::MAX))
                        .map(|&(_, i)| i)
                        .collect();
                    for i in rest {
                        r.unlink(i);
                        if r.rng.chance(50) {
                            assert_eq!(r.link(e), Some(i), "the same record, the same tick");
                        }
                    }
                }
                r.check();
            } else {
                r.drain(to, 30);
            }
        }
        while let Some(w) = r.wheel.next_expiry() {
            r.drain(w, 0);
        }
        assert!(r.pending.is_empty() && r.wheel.is_empty());
        assert_eq!(r.t.free.len(), 2500, "every record came back once");
    }
}

/// A `RawWheel` over storage that frees records at once and reuses them (LIFO) while batch
/// positions still name them; its getters panic on freed records.
#[test]
fn raw_freeing_storage_reused_at_once() {
    raw_run(false);
}

/// The same over storage whose `list` keeps the stale batch position after a hand-out or an
/// unlink's write, with the default `is_on`.
#[test]
fn raw_stale_storage_default_is_on() {
    raw_run(true);
}

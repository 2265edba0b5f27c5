//! Adversarial tests of Exact mode's window and run as lists of positions (`batches.rs` since
//! a03ae87): a level-2 batch, once its slot is reached, sorted into one list per level-1 slot
//! (the chains), the chain of the clock's level-1 slot sorted into one list per tick, and each
//! tick handed out with a cursor, in the order filed.
//!
//! What is attacked: the cursor over a tick's list when the drain stops after any timer and the
//! caller cancels, resets and inserts between single polls; the window emptied (every timer
//! cancelled) in the middle of a tick's hand-out and a new window entered after it, whose lists
//! must start empty and whose cursor must start at 0 (`leave` empties the lists but keeps their
//! capacity); `clear` in the middle of a tick and the wheel used again; dozens of windows in a
//! row through the same lists; ticks of thousands of positions from the batch, from a cascade
//! into the window (`file`) and from the level-1 slot's list (`link_run`); the order a tick's
//! batched timers leave in (the order filed); a `RawWheel` whose storage links a handed-out
//! index again at once; and resets to earlier deadlines that move timers from one level-2 batch
//! to another (within a batch, emptying one, spilling one, leaving the window).
//!
//! Checked against a naive model (a map of pending timers and a `BTreeSet` of `(expiry, id)`) on
//! every poll: never early, never late (a timer fires in the first poll whose `now` reaches its
//! expiry), the earliest pending first, nothing lost, nothing twice, stale ids refused, `len`
//! right, `next_expiry` never later than the earliest pending expiry (or the clock); the wheel's
//! own invariants (`check_invariants`) often.

use std::collections::{BTreeSet, HashMap};

use tickwheel::raw::{Links, NIL, RawWheel};
use tickwheel::{Builder, Mode, TimerId, Wheel};

mod common;
use common::{L1, L2, L3, Rng, next_multiple};

/// A wheel and the naive model of what it holds.
struct Harness {
    wheel: Wheel<u64>,
    rng: Rng,
    /// id -> (expiry, value).
    pending: HashMap<TimerId, (u64, u64)>,
    /// `(expiry, id bits)`.
    order: BTreeSet<(u64, u64)>,
    /// Ids that fired, were cancelled or were cleared: refused from then on.
    dead: Vec<TimerId>,
    next_value: u64,
    /// Polls since the last invariant check.
    since_check: u32,
}

impl Harness {
    fn new(start: u64, seed: u64) -> Self {
        let wheel = Builder::new(Mode::Exact).start(start).build().unwrap();
        Harness {
            wheel,
            rng: Rng(seed),
            pending: HashMap::new(),
            order: BTreeSet::new(),
            dead: Vec::new(),
            next_value: 1,
            since_check: 0,
        }
    }

    fn now(&self) -> u64 {
        self.wheel.now()
    }

    fn first(&self) -> Option<u64> {
        self.order.first().map(|&(e, _)| e)
    }

    fn bury(&mut self, id: TimerId) {
        if self.dead.len() < 4096 {
            self.dead.push(id);
        } else {
            let at = self.rng.below(4096) as usize;
            self.dead[at] = id;
        }
    }

    fn forget(&mut self, id: TimerId) -> (u64, u64) {
        let (e, v) = self.pending.remove(&id).expect("pending");
        assert!(self.order.remove(&(e, id.to_bits())));
        self.bury(id);
        (e, v)
    }

    fn insert(&mut self, deadline: u64) -> TimerId {
        let value = self.next_value;
        self.next_value += 1;
        let expiry = deadline.max(self.now());
        let id = self.wheel.insert(deadline, value).unwrap();
        assert_eq!(
            self.wheel.expiry(id),
            Some(expiry),
            "Exact keeps the deadline"
        );
        assert!(
            self.pending.insert(id, (expiry, value)).is_none(),
            "id reused"
        );
        assert!(self.order.insert((expiry, id.to_bits())));
        id
    }

    fn cancel(&mut self, id: TimerId) {
        let got = self.wheel.cancel(id);
        if self.pending.contains_key(&id) {
            let (_, v) = self.forget(id);
            assert_eq!(got, Some(v), "cancel of a pending timer");
        } else {
            assert_eq!(got, None, "cancel of a stale id");
        }
        assert_eq!(self.wheel.cancel(id), None, "cancelled twice");
    }

    fn reset(&mut self, id: TimerId, deadline: u64) {
        let ok = self.wheel.reset(id, deadline);
        match self.pending.get(&id).copied() {
            Some((old, v)) => {
                assert!(ok, "reset of a pending timer");
                let e = deadline.max(self.now());
                assert_eq!(self.wheel.expiry(id), Some(e), "reset keeps the deadline");
                assert!(self.order.remove(&(old, id.to_bits())));
                assert!(self.order.insert((e, id.to_bits())));
                self.pending.insert(id, (e, v));
            }
            None => assert!(!ok, "reset of a stale id"),
        }
    }

    /// A pending id whose expiry is in `lo..=hi`, if any (a random one among the first few).
    fn pick_in(&mut self, lo: u64, hi: u64) -> Option<TimerId> {
        let skip = self.rng.below(8) as usize;
        let found: Vec<u64> = self
            .order
            .range((lo, 0)..=(hi, u64::MAX))
            .take(skip + 1)
            .map(|&(_, bits)| bits)
            .collect();
        found.last().map(|&bits| TimerId::from_bits(bits))
    }

    /// A random pending id, if any.
    fn pick(&mut self) -> Option<TimerId> {
        if self.pending.is_empty() {
            return None;
        }
        let lo = self.first().unwrap();
        let hi = self.order.last().unwrap().0;
        let at = self.rng.range(lo, hi.saturating_add(1).max(lo + 1));
        self.order
            .range((at, 0)..)
            .next()
            .or_else(|| self.order.first())
            .map(|&(_, bits)| TimerId::from_bits(bits))
    }

    /// Checks the model's promises outside a poll.
    fn check(&mut self) {
        assert_eq!(self.wheel.len(), self.pending.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.pending.is_empty());
        let clock = self.now();
        match (self.wheel.next_expiry(), self.first()) {
            (None, None) => {}
            (Some(next), Some(first)) => {
                assert!(next >= clock, "next_expiry {next} before the clock {clock}");
                assert!(
                    next <= first.max(clock),
                    "next_expiry {next} after the earliest expiry {first} (clock {clock})"
                );
            }
            (next, first) => panic!("next_expiry {next:?} with earliest {first:?}"),
        }
        for _ in 0..4 {
            if self.dead.is_empty() {
                break;
            }
            let id = self.dead[self.rng.below(self.dead.len() as u64) as usize];
            assert_eq!(self.wheel.expiry(id), None, "stale id {id:?} answered");
            assert!(self.wheel.get(id).is_none());
            assert!(!self.wheel.reset(id, clock + 1), "stale id {id:?} reset");
            assert_eq!(self.wheel.cancel(id), None, "stale id {id:?} cancelled");
        }
    }

    fn invariants(&mut self) {
        self.wheel.check_invariants();
        self.since_check = 0;
    }

    /// One poll at `now`, checked against the model.
    fn poll(&mut self, now: u64) -> Option<TimerId> {
        let before = self.now();
        let got = self.wheel.poll(now);
        let clock = self.now();
        if now < before {
            assert!(got.is_none() && clock == before, "the clock went back");
            return None;
        }
        let out = match got {
            Some((id, value)) => {
                let (e, v) = self
                    .pending
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| panic!("fired {id:?} (value {value}): not pending"));
                assert_eq!(v, value, "fired with another timer's value");
                assert!(e <= now, "early: expiry {e} fired at now {now}");
                assert!(
                    clock <= now && e <= clock,
                    "clock {clock}, expiry {e}, now {now}"
                );
                assert_eq!(Some(e), self.first(), "not the earliest pending timer");
                self.forget(id);
                Some(id)
            }
            None => {
                if let Some(first) = self.first() {
                    assert!(first > now, "late: expiry {first} not fired by now {now}");
                }
                assert_eq!(clock, now, "the clock reads now after a drain");
                None
            }
        };
        self.since_check += 1;
        if self.since_check >= 97 {
            self.invariants();
        }
        out
    }

    /// Drains to `now`, all of it.
    fn drain(&mut self, now: u64) -> usize {
        let mut n = 0;
        while self.poll(now).is_some() {
            n += 1;
        }
        n
    }

    /// Steps the clock to `to` a random stride at a time, draining each stop.
    fn step_to(&mut self, to: u64) {
        while self.now() < to {
            let stride = match self.rng.below(4) {
                0 => 1,
                1 => self.rng.range(1, L1),
                2 => self.rng.range(1, L2),
                _ => self.next_expiry_stride(),
            };
            let at = self.now().saturating_add(stride).min(to);
            self.drain(at);
            self.check();
        }
    }

    fn next_expiry_stride(&self) -> u64 {
        match self.wheel.next_expiry() {
            Some(at) if at > self.now() => at - self.now(),
            _ => 1,
        }
    }

    /// Drains until nothing is pending.
    fn run_out(&mut self) {
        while let Some(last) = self.order.last().map(|&(e, _)| e) {
            let to = last.min(self.now().saturating_add(3 * L2));
            self.step_to(to);
        }
        self.check();
        self.invariants();
        assert!(self.wheel.is_empty());
        assert_eq!(self.wheel.next_expiry(), None);
    }
}

/// A level-2 slot at least one slot after the one `t` is in.
fn level_two_slot_after(t: u64, slots: u64) -> u64 {
    next_multiple(t, L2) + slots * L2
}

/// One tick crowded from the batch, then handed out one poll at a time while the caller acts on
/// that very tick between polls: cancels of timers not yet handed out, resets of them to the
/// same tick, to later ticks of the run, past the window and into the past, inserts at the
/// tick (due) and after it, and acts on ids already handed out (stale).
#[test]
fn crowded_tick_handed_out_one_poll_at_a_time_under_fire() {
    for seed in 0..6u64 {
        let start = [0, 3 * L2 + 17, (1 << 44) + 5][seed as usize % 3];
        let mut h = Harness::new(start, seed);
        let slot = level_two_slot_after(start, 1 + seed % 3);
        let hot = slot + L1 * h.rng.range(0, 64) + h.rng.below(L1);
        for _ in 0..2_000 {
            h.insert(hot);
        }
        // Neighbours in the same run and the same window.
        for _ in 0..300 {
            let d = hot - hot % L1 + h.rng.below(L1);
            h.insert(d);
            let d = slot + h.rng.below(L2);
            h.insert(d);
        }
        h.invariants();
        h.step_to(hot - 1);
        h.invariants();
        let mut fired = 0;
        while h.first() == Some(hot) {
            match h.rng.below(10) {
                0 => {
                    if let Some(id) = h.pick_in(hot, hot) {
                        h.cancel(id);
                    }
                }
                1 => {
                    if let Some(id) = h.pick_in(hot, hot) {
                        h.reset(id, hot);
                    }
                }
                2 => {
                    if let Some(id) = h.pick_in(hot, hot) {
                        let d = hot + h.rng.range(1, 3 * L1);
                        h.reset(id, d);
                    }
                }
                3 => {
                    if let Some(id) = h.pick_in(hot, hot) {
                        let d = hot - h.rng.below(5);
                        h.reset(id, d);
                    }
                }
                4 => {
                    h.insert(hot);
                }
                5 => {
                    let d = hot + h.rng.range(1, 2 * L2);
                    h.insert(d);
                }
                6 => {
                    if let Some(&id) = h.dead.last() {
                        h.cancel(id);
                        h.reset(id, hot);
                    }
                }
                7 => {
                    // Pull a later timer of the window into this tick.
                    if let Some(id) = h.pick_in(hot + 1, slot + L2) {
                        h.reset(id, hot);
                    }
                }
                _ => {}
            }
            if h.rng.chance(5) {
                h.invariants();
                h.check();
            }
            // `now` is the tick or a little after: Exact hands out the tick first either way.
            let now = hot + h.rng.below(2) * h.rng.below(L1);
            assert!(h.poll(now).is_some(), "the tick still has timers");
            fired += 1;
        }
        assert!(fired > 1_000);
        h.invariants();
        h.check();
        h.run_out();
    }
}

/// The documented order inside a tick ("ticks hand out in the order filed"): the timers a
/// batch holds for one tick leave in the order they were filed, however the hand-out is cut
/// into polls and however many of them are cancelled along the way, and before the timers that
/// joined the run from the level-1 slot's list.
#[test]
fn a_batched_tick_leaves_in_the_order_filed() {
    for seed in 0..4u64 {
        let mut h = Harness::new(0, seed);
        let slot = level_two_slot_after(0, 2);
        let hot = slot + 7 * L1 + 11;
        let mut expect: Vec<TimerId> = Vec::new();
        for i in 0..2_000u64 {
            if i % 4 == 3 {
                // Other ticks of the same level-1 slot, interleaved in the batch.
                h.insert(hot - 11 + (12 + i % 52));
            } else {
                expect.push(h.insert(hot));
            }
        }
        expect.retain(|&id| {
            let keep = !h.rng.chance(20);
            if !keep {
                h.cancel(id);
            }
            keep
        });
        // In the window, before the run: onto the level-1 slot's list.
        h.step_to(slot + 2 * L1);
        let mut late: BTreeSet<u64> = (0..300).map(|_| h.insert(hot).to_bits()).collect();
        for _ in 0..30 {
            let id = TimerId::from_bits(
                *late
                    .iter()
                    .nth(h.rng.below(late.len() as u64) as usize)
                    .unwrap(),
            );
            h.cancel(id);
            late.remove(&id.to_bits());
        }
        h.step_to(hot - 1);
        let mut got: Vec<TimerId> = Vec::new();
        while let Some(id) = h.poll(hot) {
            got.push(id);
            // A cancel of one ahead of the cursor, or of one behind it (stale).
            if h.rng.chance(5) && got.len() + 1 < expect.len() {
                let at = h.rng.range(got.len() as u64, expect.len() as u64) as usize;
                h.cancel(expect.remove(at));
            }
            if h.rng.chance(2) {
                let at = h.rng.below(got.len() as u64) as usize;
                h.cancel(got[at]);
            }
        }
        assert_eq!(
            got.len(),
            expect.len() + late.len(),
            "seed {seed}: lost or extra timers"
        );
        let (batched, joined) = got.split_at(expect.len());
        assert!(
            batched == expect,
            "seed {seed}: the batch's not in the order filed"
        );
        let joined: BTreeSet<u64> = joined.iter().map(|id| id.to_bits()).collect();
        assert_eq!(joined, late, "seed {seed}: the run's after the batch's");
        h.run_out();
    }
}

/// The window emptied in the middle of a tick's hand-out (every pending timer cancelled, the
/// tick's list half read), then the next level-2 slot entered: its lists start empty and its
/// cursor at 0. The next window's ticks have fewer positions than the old cursor, and more;
/// their positions are on the old window's ticks and level-1 slots too, so anything left of
/// the old lists would hand out a new timer early, twice, or not at all.
#[test]
fn window_emptied_mid_tick_then_a_new_window() {
    for seed in 0..8u64 {
        let start = [0, 9 * L2 + 100][seed as usize % 2];
        let mut h = Harness::new(start, seed);
        let slot = level_two_slot_after(start, 1);
        let run = slot + 20 * L1;
        let hot = run + 30;
        for _ in 0..400 {
            h.insert(hot);
        }
        // The rest of the run and of the window, to be left on the old lists.
        for i in 0..600 {
            h.insert(run + 31 + i % 33);
            let d = slot + h.rng.range(21 * L1, L2);
            h.insert(d);
        }
        // Waiting batches of the next slots, the same ticks and others.
        let next = slot + L2;
        for i in 0..(100 + 150 * (seed % 3)) {
            h.insert(next + 20 * L1 + 30 + (i % 3) * L1);
            let d = next + h.rng.below(L2);
            h.insert(d);
        }
        let after = next + L2;
        for i in 0..300 {
            h.insert(after + 20 * L1 + 30 + i % 2);
        }
        h.invariants();
        h.drain(hot - 1);
        for _ in 0..(150 + 50 * (seed % 4)) {
            assert!(h.poll(hot).is_some());
        }
        h.invariants();
        // Everything in the window goes: the window is left mid-tick.
        let doomed: Vec<TimerId> = h
            .order
            .range((0, 0)..(next, 0))
            .map(|&(_, bits)| TimerId::from_bits(bits))
            .collect();
        for id in doomed {
            h.cancel(id);
        }
        h.invariants();
        h.check();
        if seed % 2 == 0 {
            // A timer due at once, and one later in the abandoned run.
            h.insert(hot);
            h.insert(hot + 5);
            h.drain(hot + 10);
        }
        h.step_to(after + L2 + 1);
        h.invariants();
        h.run_out();
    }
}

/// `clear` with a tick half handed out, a window with chains left and waiting batches behind
/// it; then the same ticks filled again, and the wheel run through several windows.
#[test]
fn cleared_mid_tick_then_reused_through_windows() {
    for seed in 0..6u64 {
        let mut h = Harness::new(0, seed);
        let slot = level_two_slot_after(0, 1 + seed % 2);
        let hot = slot + 5 * L1 + 3;
        for _ in 0..700 {
            h.insert(hot);
        }
        for _ in 0..800 {
            let d = slot + h.rng.below(3 * L2);
            h.insert(d);
        }
        h.drain(hot - 1);
        for _ in 0..(1 + h.rng.below(600)) {
            assert!(h.poll(hot).is_some());
        }
        h.wheel.clear();
        let ids: Vec<TimerId> = h.pending.keys().copied().collect();
        for id in ids {
            h.forget(id);
        }
        h.invariants();
        h.check();
        assert_eq!(h.wheel.next_expiry(), None);
        assert_eq!(h.poll(hot), None, "nothing left of the cleared tick");
        // The same tick (now due), the rest of this window, the next windows.
        for _ in 0..50 {
            h.insert(hot);
        }
        for _ in 0..500 {
            let d = hot + 1 + h.rng.below(4 * L2);
            h.insert(d);
            let d = next_multiple(hot, L2) + L2 + 5 * L1 + 3;
            h.insert(d);
        }
        h.invariants();
        h.run_out();
    }
}

/// Forty level-2 windows in a row through the same lists, each with its own mix: crowded
/// ticks, ticks whose timers all leave before they are reached, windows whose every timer is
/// cancelled before or while they are handed out, and drains stopped mid-tick.
#[test]
fn forty_windows_in_a_row() {
    for seed in 0..3u64 {
        let start = [0, L3 - 2 * L2 + 9, (1 << 33) + L1 + 1][seed as usize];
        let mut h = Harness::new(start, seed);
        let first = level_two_slot_after(start, 1);
        for w in 0..40u64 {
            let slot = first + w * L2;
            // Filled while it waits on level 2 (at least 4096 ticks out).
            let hot_ticks: Vec<u64> = (0..3).map(|_| slot + h.rng.below(L2)).collect();
            let n = h.rng.range(1, 400);
            for i in 0..n {
                let d = if h.rng.chance(60) {
                    hot_ticks[i as usize % 3]
                } else {
                    slot + h.rng.below(L2)
                };
                h.insert(d);
            }
            // Catch up to the slot before this window, in strides and single polls.
            let mode = h.rng.below(4);
            let ahead = slot.saturating_sub(L2);
            if h.now() < ahead {
                h.step_to(ahead);
            }
            match mode {
                0 => {
                    // Every timer of the window cancelled before it is reached.
                    let doomed: Vec<TimerId> = h
                        .order
                        .range((slot, 0)..(slot + L2, 0))
                        .map(|&(_, bits)| TimerId::from_bits(bits))
                        .collect();
                    for id in doomed {
                        h.cancel(id);
                    }
                }
                1 => {
                    // Stopped mid-tick, then the window cancelled whole.
                    let hot = hot_ticks[0];
                    h.step_to(hot - 1);
                    for _ in 0..h.rng.below(40) {
                        h.poll(hot);
                    }
                    let doomed: Vec<TimerId> = h
                        .order
                        .range((0, 0)..(slot + L2, 0))
                        .map(|&(_, bits)| TimerId::from_bits(bits))
                        .collect();
                    for id in doomed {
                        h.cancel(id);
                    }
                    h.invariants();
                }
                2 => {
                    // Stopped mid-tick, its other timers cancelled, some reset onwards.
                    let hot = *hot_ticks.iter().min().unwrap();
                    h.step_to(hot - 1);
                    for _ in 0..h.rng.below(20) {
                        h.poll(hot);
                    }
                    while let Some(id) = h.pick_in(hot, hot) {
                        if h.rng.chance(50) {
                            h.cancel(id);
                        } else {
                            let d = hot + h.rng.range(1, L2);
                            h.reset(id, d);
                        }
                    }
                    h.check();
                }
                _ => {}
            }
            if h.rng.chance(30) {
                h.invariants();
            }
        }
        h.run_out();
    }
}

/// One tick fed from every way into a run, several thousand timers, handed out with polls cut
/// short and cancels between: positions of the level-2 batch, timers a cascade files into the
/// window (from the level-2 slot's list, once the room rule turned them away from a batch of
/// holes, or from level 3 at a level-3 slot's start), and timers on the level-1 slot's list
/// that join the run.
#[test]
fn a_tick_of_thousands_from_batch_cascade_and_slot_list() {
    for seed in 0..4u64 {
        let mut h = Harness::new(0, seed);
        let from_level_three = seed % 2 == 1;
        let slot = if from_level_three {
            // A level-3 slot's start: its cascade enters the window and files into it.
            2 * L3
        } else {
            2 * L3 + 9 * L2
        };
        let hot = slot + 40 * L1 + 17;
        if from_level_three {
            // From tick 0 these are on level 3.
            for _ in 0..3_000 {
                h.insert(hot);
            }
            h.step_to(slot - 2 * L2);
        } else {
            h.step_to(slot - 2 * L2);
            // The batch of `slot`: the hot tick, and holes that make it refuse more.
            for _ in 0..1_500 {
                h.insert(hot);
            }
            let holes: Vec<TimerId> = (0..3_000)
                .map(|i| h.insert(slot + 40 * L1 + i % 17))
                .collect();
            for id in holes {
                h.cancel(id);
            }
            // Turned away from the batch: the slot's list, filed into the window by its cascade.
            for _ in 0..1_500 {
                h.insert(hot);
            }
        }
        for _ in 0..200 {
            let d = slot + h.rng.below(L2);
            h.insert(d);
        }
        h.invariants();
        // Into the window: level 1, the slot's list, joining the run at its start.
        h.step_to(slot + 10 * L1);
        h.invariants();
        for _ in 0..1_500 {
            h.insert(hot);
        }
        h.invariants();
        h.step_to(hot - 1);
        h.invariants();
        let mut handed = 0;
        while h.first() == Some(hot) {
            let now = hot + h.rng.below(2);
            assert!(h.poll(now).is_some());
            handed += 1;
            if h.rng.chance(2) {
                // A run of cancels: some of the tick ahead of the cursor.
                for _ in 0..h.rng.below(30) {
                    if let Some(id) = h.pick_in(hot, hot) {
                        h.cancel(id);
                    }
                }
                h.invariants();
            }
        }
        assert!(handed > 2_000, "only {handed} handed out");
        h.check();
        h.run_out();
    }
}

/// Random work aimed at the run: timers filed into the next windows, the clock stepped tick by
/// tick through the runs, and between single polls of a tick the caller cancels, resets
/// (earlier, later, onto the tick being handed out) and inserts.
#[test]
fn random_single_polls_through_runs() {
    for seed in 0..6u64 {
        let mut h = Harness::new(seed * 1_000_003, seed);
        let end = level_two_slot_after(h.now(), 6);
        while h.now() < end {
            let clock = h.now();
            for _ in 0..h.rng.below(30) {
                let d = match h.rng.below(5) {
                    0 => clock + h.rng.range(L2, 3 * L2),
                    1 => next_multiple(clock, L2) + L2 + h.rng.below(8),
                    2 => clock + h.rng.below(L1),
                    3 => clock + h.rng.range(L1, L2),
                    _ => clock + h.rng.spread(24),
                };
                h.insert(d);
            }
            let span = [2, 8, 64, 700][h.rng.below(4) as usize];
            let to = clock + h.rng.range(1, span);
            loop {
                if h.rng.chance(30) {
                    match h.rng.below(6) {
                        0 => {
                            if let Some(id) = h.pick_in(0, h.now()) {
                                h.cancel(id);
                            }
                        }
                        1 => {
                            if let Some(id) = h.pick() {
                                h.cancel(id);
                            }
                        }
                        2 => {
                            if let Some(id) = h.pick() {
                                let d = h.now() + h.rng.below(3);
                                h.reset(id, d);
                            }
                        }
                        3 => {
                            if let Some(id) = h.pick_in(0, h.now()) {
                                let d = h.now() + h.rng.spread(20);
                                h.reset(id, d);
                            }
                        }
                        4 => {
                            let d = h.now() + h.rng.below(2);
                            h.insert(d);
                        }
                        _ => {
                            if let Some(&id) = h.dead.last() {
                                h.reset(id, 1);
                            }
                        }
                    }
                }
                if h.poll(to).is_none() {
                    break;
                }
            }
            h.check();
        }
        h.run_out();
    }
}

// ---- RawWheel ---------------------------------------------------------------------------------

/// Link fields for a `RawWheel`, with the trait's default `is_on`; a flag per index that the
/// wheel holds it.
struct Store {
    next: Vec<u32>,
    prev: Vec<u32>,
    list: Vec<u32>,
    expiry: Vec<u64>,
    held: Vec<bool>,
}

impl Store {
    fn new(n: usize) -> Self {
        Store {
            next: vec![NIL; n],
            prev: vec![NIL; n],
            list: vec![NIL; n],
            expiry: vec![0; n],
            held: vec![false; n],
        }
    }

    fn held(&self, i: u32) -> usize {
        assert!(
            self.held[i as usize],
            "the wheel touched index {i}, not its own"
        );
        i as usize
    }
}

impl Links for Store {
    fn next(&self, i: u32) -> u32 {
        self.next[self.held(i)]
    }
    fn set_next(&mut self, i: u32, v: u32) {
        let i = self.held(i);
        self.next[i] = v;
    }
    fn prev(&self, i: u32) -> u32 {
        self.prev[self.held(i)]
    }
    fn set_prev(&mut self, i: u32, v: u32) {
        let i = self.held(i);
        self.prev[i] = v;
    }
    fn list(&self, i: u32) -> u32 {
        // The hand-out may look at a position's old timer: answer, it is ours to keep.
        self.list[i as usize]
    }
    fn set_list(&mut self, i: u32, v: u32) {
        let i = self.held(i);
        self.list[i] = v;
    }
    fn expiry(&self, i: u32) -> u64 {
        self.expiry[self.held(i)]
    }
    fn set_expiry(&mut self, i: u32, v: u64) {
        let i = self.held(i);
        self.expiry[i] = v;
    }
}

/// A `RawWheel` whose storage links an index again the moment the wheel hands it out or the
/// caller unlinks it, in the middle of a crowded batched tick: onto the tick being handed out
/// (due), onto a later tick, onto the next window's batch. Each index fires once per linking,
/// never early, never late.
#[test]
fn raw_indices_linked_again_mid_tick() {
    for seed in 0..4u64 {
        let mut rng = Rng(seed);
        let n = 3_000u32;
        let mut wheel: RawWheel = Builder::new(Mode::Exact).build_raw().unwrap();
        let mut store = Store::new(n as usize);
        // Per index: its expiry while linked.
        let mut linked: HashMap<u32, u64> = HashMap::new();
        let slot = level_two_slot_after(0, 1);
        let hot = slot + 3 * L1 + 50;
        let link = |wheel: &mut RawWheel,
                    store: &mut Store,
                    linked: &mut HashMap<u32, u64>,
                    i: u32,
                    d: u64| {
            store.held[i as usize] = true;
            let e = wheel.link(store, i, d);
            assert_eq!(e, d.max(wheel.now()));
            assert!(linked.insert(i, e).is_none());
        };
        for i in 0..n {
            let d = if i % 3 == 0 {
                hot + (i as u64 % 5) * L1
            } else {
                hot
            };
            link(&mut wheel, &mut store, &mut linked, i, d);
        }
        let mut fired = 0u64;
        let mut now = 0;
        let end = slot + 3 * L2;
        while now < end {
            now = if now < hot - 1 {
                hot - 1
            } else {
                (now + rng.range(1, 200)).min(end)
            };
            loop {
                if rng.chance(10) {
                    // Unlink one pending timer, and link it again at once.
                    let Some((&i, _)) = linked
                        .iter()
                        .nth(rng.below(linked.len().max(1) as u64) as usize)
                    else {
                        break;
                    };
                    wheel.unlink(&mut store, i);
                    linked.remove(&i);
                    store.held[i as usize] = false;
                    let d = wheel.now() + rng.below(3) * rng.spread(14);
                    link(&mut wheel, &mut store, &mut linked, i, d);
                }
                let Some(i) = wheel.poll(&mut store, now) else {
                    break;
                };
                let e = linked
                    .remove(&i)
                    .unwrap_or_else(|| panic!("index {i} not linked"));
                assert!(e <= now, "early: {e} at {now}");
                if let Some(&first) = linked.values().min() {
                    assert!(first >= e, "{e} fired before {first}");
                }
                store.held[i as usize] = false;
                fired += 1;
                if rng.chance(60) && wheel.now() < end - 2 * L2 {
                    let d = match rng.below(3) {
                        0 => wheel.now(),
                        1 => wheel.now() + rng.range(1, L1),
                        _ => next_multiple(wheel.now(), L2) + L2 + rng.below(L2),
                    };
                    link(&mut wheel, &mut store, &mut linked, i, d);
                }
            }
            if let Some(&first) = linked.values().min() {
                assert!(first > now, "late: {first} pending at {now}");
            }
            assert_eq!(wheel.len(), linked.len());
        }
        while !linked.is_empty() {
            now += L2;
            while let Some(i) = wheel.poll(&mut store, now) {
                let e = linked.remove(&i).expect("linked");
                assert!(e <= now);
                store.held[i as usize] = false;
                fired += 1;
            }
        }
        assert!(fired >= u64::from(n));
        assert!(wheel.is_empty());
    }
}

/// Resets to earlier deadlines that move timers from one level-2 batch to another (the move
/// `Wheel::reset` makes inline since 4899d52): within one batch, to a batch ahead, the last timer
/// of a batch leaving it (the batch emptied), a batch whose positions have mostly been left
/// (it spills to its slot's list), and timers of the window pushed later and then pulled back to
/// a waiting batch (leaving the window). Each then runs out against the model.
#[test]
fn earlier_resets_between_batches() {
    for seed in 0..6u64 {
        let start = [0, 9 * L2 + 100, 3 * L3 - 2 * L2][seed as usize % 3];
        let mut h = Harness::new(start, seed);
        let first = level_two_slot_after(start, 1);
        // A batch of one, moved earlier within its own slot and then to a slot ahead: the first
        // move files it again in the same batch, the second empties that batch.
        let lone = h.insert(first + 5 * L2 + 3000);
        h.reset(lone, first + 5 * L2 + 100);
        h.invariants();
        h.reset(lone, first + 2 * L2 + 7);
        h.invariants();
        // Crowded batches whose timers are pulled back one slot at a time, over and over.
        let mut ids = Vec::new();
        for i in 0..(500 + 200 * seed) {
            let d = first + (6 + i % 4) * L2 + h.rng.below(L2);
            ids.push(h.insert(d));
        }
        for round in 0..6u64 {
            for &id in &ids {
                if h.rng.below(3) == 0 {
                    continue;
                }
                let Some(&(e, _)) = h.pending.get(&id) else {
                    continue;
                };
                let lo = first + (5 - round.min(4)) * L2;
                let d = if e > lo + 1 { h.rng.range(lo, e) } else { e };
                h.reset(id, d);
            }
            h.invariants();
            h.check();
        }
        // Into the window: some timers pushed later while their slot is the window, then pulled
        // back to a waiting batch before their filed tick comes.
        h.step_to(first + 2 * L2 + 1);
        let in_window: Vec<TimerId> = h
            .order
            .range((first + 2 * L2 + L1, 0)..(first + 3 * L2, 0))
            .map(|&(_, bits)| TimerId::from_bits(bits))
            .collect();
        for &id in &in_window {
            let d = h.now() + 4 * L2 + h.rng.below(L2);
            h.reset(id, d);
        }
        h.invariants();
        for &id in &in_window {
            if h.rng.below(2) == 0 {
                let d = h.now() + L2 + h.rng.below(2 * L2);
                h.reset(id, d);
            } else {
                h.cancel(id);
            }
        }
        h.invariants();
        h.check();
        h.run_out();
    }
}

//! Adversarial tests of Exact mode's level-1 batches and the run they become, from the public
//! API only, against a naive model: a map of pending timers with the expiry each must fire at,
//! and a `BTreeSet` of `(expiry, id)` for the earliest.
//!
//! Timers are filed 64 to 2^24 ticks out, so that they reach level 1 by a cascade from level 2
//! or 3 (a batch) or by a direct insert (the slot's list), often crowded into one level-1 slot or
//! one tick. Between the timers a drain hands out, and between polls, timers are cancelled,
//! reset earlier (into the run's window, into the past, to the tick being handed out, to the same
//! tick) and later (inside the window, past it, far out, `u64::MAX`), and new timers take the
//! freed entries. Polls step one tick, jump to a deadline, to one tick before it, through a
//! whole level-1 window or several level-2 slots at once, or to `next_expiry`.
//!
//! Exact promises checked on every poll: a timer fires in the first drain whose `now` reaches
//! its expiry and in no earlier one, exactly once, with its own value, and each fired timer is
//! the earliest pending one (so the drain is in non-decreasing expiry order and nothing is
//! skipped). `next_expiry` lies between the clock and the earliest expiry (or the clock), and
//! is `Some` iff a timer is pending. The same driver runs Coarse wheels, with its promises:
//! never early, slack at most 8/63 of the delay.
//!
//! The last tests run a `RawWheel` over storage written here that frees entries and links them
//! again at once while a batch or the run still has a position for them, raises expiries behind
//! the wheel's back, and lowers them no further than `bucket_tick` allows.

use std::collections::{BTreeSet, HashMap};

use tickwheel::raw::{Links, NIL, RawWheel};
use tickwheel::{Builder, Mode, TimerId, Wheel};

mod common;
use common::{L1, L2, L3, Rng, next_multiple};

/// A wheel and the model of what it holds.
struct Harness {
    wheel: Wheel<u64>,
    mode: Mode,
    rng: Rng,
    /// Pending timers: id -> (expiry, value).
    pending: HashMap<TimerId, (u64, u64)>,
    /// `(expiry, id bits)` of every pending timer.
    order: BTreeSet<(u64, u64)>,
    /// Ids that may name pending timers (lazily cleaned).
    ids: Vec<TimerId>,
    /// Ids that are stale for good.
    dead: Vec<TimerId>,
    next_value: u64,
    capacity: Option<usize>,
    /// Counts: inserted, fired, cancelled, refused.
    inserted: u64,
    fired: u64,
    cancelled: u64,
    refused: u64,
}

impl Harness {
    fn new(seed: u64, wheel: Wheel<u64>) -> Self {
        Harness {
            mode: wheel.mode(),
            capacity: wheel.capacity(),
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
            refused: 0,
        }
    }

    fn exact(start: u64, levels: usize, capacity: Option<usize>, seed: u64) -> Self {
        let mut b = Builder::new(Mode::Exact).levels(levels).start(start);
        if let Some(c) = capacity {
            b = b.capacity(c);
        }
        Harness::new(seed, b.build().unwrap())
    }

    fn now(&self) -> u64 {
        self.wheel.now()
    }

    fn min_expiry(&self) -> Option<u64> {
        self.order.first().map(|&(e, _)| e)
    }

    /// Checks the expiry the wheel chose for `deadline` set at clock `clock`.
    fn check_expiry(&self, clock: u64, deadline: u64, expiry: u64) {
        if deadline <= clock {
            assert_eq!(
                expiry, clock,
                "a deadline at or before the clock is due at once"
            );
            return;
        }
        match self.mode {
            Mode::Exact => assert_eq!(expiry, deadline, "Exact keeps the deadline"),
            Mode::Coarse => {
                assert!(expiry >= deadline, "Coarse early: {deadline} -> {expiry}");
                let delay = u128::from(deadline - clock);
                let slack = u128::from(expiry - deadline);
                let levels = self.wheel.levels() as u32;
                let top = 1u128 << (3 * (levels - 1));
                if delay < 63 * top {
                    assert!(
                        slack * 63 <= delay * 8,
                        "Coarse slack {slack} for delay {delay} at clock {clock}"
                    );
                } else {
                    assert!(slack < top, "Coarse overflow slack {slack}");
                }
            }
        }
    }

    fn remember(&mut self, id: TimerId, expiry: u64, value: u64) {
        assert!(
            self.pending.insert(id, (expiry, value)).is_none(),
            "id reused while pending"
        );
        assert!(self.order.insert((expiry, id.to_bits())));
        self.ids.push(id);
    }

    fn forget(&mut self, id: TimerId) -> (u64, u64) {
        let (expiry, value) = self.pending.remove(&id).expect("pending");
        assert!(self.order.remove(&(expiry, id.to_bits())));
        if self.dead.len() < 256 {
            self.dead.push(id);
        } else {
            let at = self.rng.below(256) as usize;
            self.dead[at] = id;
        }
        (expiry, value)
    }

    fn insert(&mut self, deadline: u64) -> Option<TimerId> {
        let clock = self.now();
        let value = self.next_value;
        self.next_value += 1;
        match self.wheel.insert(deadline, value) {
            Ok(id) => {
                if let Some(c) = self.capacity {
                    assert!(self.pending.len() < c, "insert beyond capacity {c}");
                }
                let expiry = self.wheel.expiry(id).expect("inserted");
                self.check_expiry(clock, deadline, expiry);
                assert_eq!(self.wheel.get(id), Some(&value));
                self.remember(id, expiry, value);
                self.inserted += 1;
                Some(id)
            }
            Err(full) => {
                assert_eq!(Some(self.pending.len()), self.capacity, "refused, not full");
                assert_eq!(full.into_inner(), value, "the value comes back");
                self.refused += 1;
                None
            }
        }
    }

    fn cancel(&mut self, id: TimerId) {
        let got = self.wheel.cancel(id);
        if self.pending.contains_key(&id) {
            let (_, value) = self.forget(id);
            assert_eq!(got, Some(value), "cancel of a pending timer");
            self.cancelled += 1;
        } else {
            assert_eq!(got, None, "cancel of a stale id");
        }
        assert_eq!(self.wheel.cancel(id), None, "a cancelled id is stale");
    }

    fn reset(&mut self, id: TimerId, deadline: u64) {
        let clock = self.now();
        let ok = self.wheel.reset(id, deadline);
        if self.pending.contains_key(&id) {
            assert!(ok, "reset of a pending timer");
            let (_, value) = self.forget(id);
            self.dead.retain(|&d| d != id);
            let expiry = self.wheel.expiry(id).expect("still pending");
            self.check_expiry(clock, deadline, expiry);
            assert!(self.pending.insert(id, (expiry, value)).is_none());
            assert!(self.order.insert((expiry, id.to_bits())));
        } else {
            assert!(!ok, "reset of a stale id");
            assert_eq!(self.wheel.expiry(id), None);
        }
    }

    /// One poll, checked against the model.
    fn poll(&mut self, now: u64) -> Option<TimerId> {
        let before = self.now();
        let got = self.wheel.poll(now);
        let clock = self.now();
        if now < before {
            assert!(got.is_none(), "a poll behind the clock fired");
            assert_eq!(clock, before, "the clock went back");
            return None;
        }
        match got {
            Some((id, value)) => {
                let (expiry, v) = self
                    .pending
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| panic!("fired {id:?} ({value}), not pending (twice?)"));
                assert_eq!(v, value, "fired with another timer's value");
                assert!(expiry <= now, "early: expiry {expiry} fired by poll({now})");
                assert!(expiry <= clock, "early: expiry {expiry} at clock {clock}");
                assert!(clock <= now, "clock {clock} past now {now}");
                if self.mode == Mode::Exact {
                    let first = self.min_expiry().unwrap();
                    assert_eq!(
                        expiry, first,
                        "Exact order: fired {expiry} while {first} is pending (clock {clock}, now {now})"
                    );
                }
                self.forget(id);
                self.fired += 1;
                assert_eq!(self.wheel.expiry(id), None, "a fired id is stale");
                Some(id)
            }
            None => {
                if let Some(first) = self.min_expiry() {
                    assert!(
                        first > now,
                        "late: {first} not fired by poll({now}) (clock {before} -> {clock})"
                    );
                }
                assert_eq!(clock, before.max(now), "clock after a drain");
                None
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.pending.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.pending.is_empty());
        let clock = self.now();
        let ne = self.wheel.next_expiry();
        match self.min_expiry() {
            None => assert_eq!(ne, None, "next_expiry of an empty wheel"),
            Some(first) => {
                let ne = ne.expect("next_expiry with timers pending");
                if self.mode == Mode::Exact {
                    assert!(first >= clock, "pending {first} behind the clock {clock}");
                }
                assert!(ne >= clock, "next_expiry {ne} behind the clock {clock}");
                assert!(
                    ne <= first.max(clock),
                    "next_expiry {ne} after the first expiry {first} (clock {clock})"
                );
            }
        }
    }

    fn check_stats(&self) {
        let s = self.wheel.stats();
        assert_eq!(s.inserted, self.inserted, "stats.inserted");
        assert_eq!(s.fired, self.fired, "stats.fired");
        assert_eq!(s.cancelled, self.cancelled, "stats.cancelled");
    }

    /// Drains to `now` with the model, acting between timers with probability `act`%.
    fn drain(&mut self, now: u64, act: u64) {
        while self.poll(now).is_some() {
            if self.rng.chance(act) {
                self.act();
            }
        }
        self.check();
    }

    /// A random pending id, preferring those due soon (in a batch, the run or their window).
    fn pick(&mut self) -> Option<TimerId> {
        if self.pending.is_empty() {
            return None;
        }
        if self.rng.chance(60) {
            let clock = self.now();
            let span = [L1, L2, 4 * L2][self.rng.below(3) as usize];
            let from = clock.saturating_add(self.rng.below(span));
            if let Some(&(_, bits)) = self.order.range((from, 0)..).next() {
                return Some(TimerId::from_bits(bits));
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

    /// A deadline for a new timer, relative to the clock.
    fn deadline(&mut self) -> u64 {
        let clock = self.now();
        let window_end = next_multiple(clock, L1);
        let rng = &mut self.rng;
        match rng.below(12) {
            0 => clock.saturating_sub(rng.below(100)),
            1 => clock.saturating_add(rng.range(1, L1)),
            // The rest of the clock's level-0 window (the run's).
            2 => rng.range(clock.saturating_add(1), window_end),
            3 | 4 => clock.saturating_add(rng.range(L1, L2 + L1)),
            5..=7 => clock.saturating_add(rng.range(L2, 8 * L2)),
            8 => clock.saturating_add(rng.range(L3, 4 * L3)),
            9 => u64::MAX - rng.below(3 * L2),
            // The next level-2 slot: one level-1 slot or one tick of it, crowded.
            10 => next_multiple(clock, L2).saturating_add(L1 * 5 + rng.below(3)),
            _ => next_multiple(clock, L2)
                .saturating_add(L2)
                .saturating_add(rng.below(L2)),
        }
    }

    /// A new deadline for the pending timer `id`.
    fn new_deadline(&mut self, id: TimerId) -> u64 {
        let old = self.pending[&id].0;
        let clock = self.now();
        let window_end = next_multiple(clock, L1);
        let rng = &mut self.rng;
        match rng.below(14) {
            // Earlier: into the past, to the clock (the tick being handed out), into the run's
            // window, a little earlier, into the old level-1 slot's start.
            0 => clock.saturating_sub(rng.below(5000)),
            1 => clock,
            2 => rng.range(clock.saturating_add(1), window_end),
            3 => old.saturating_sub(rng.range(1, 40)).max(clock),
            4 => (old / L1 * L1).max(clock),
            // The same tick.
            5 => old,
            // Later: inside the window, past it, to the next level-1 slot, far, the end of time.
            6 => old.saturating_add(rng.range(1, L1 - old % L1)),
            7 => old.saturating_add(rng.range(L1, 3 * L1)),
            8 => old.saturating_add(rng.range(L1, L2)),
            9 => old.saturating_add(rng.range(L2, 4 * L3)),
            10 => u64::MAX - rng.below(2),
            11 => old.saturating_add(rng.range(1, 4)),
            // Anywhere a new timer goes.
            _ => self.deadline(),
        }
    }

    /// One random operation.
    fn act(&mut self) {
        match self.rng.below(10) {
            0 | 1 => {
                let d = self.deadline();
                self.insert(d);
            }
            2 | 3 => {
                if let Some(id) = self.pick() {
                    self.cancel(id);
                    // The freed entry is the next one an insert takes.
                    if self.rng.chance(70) {
                        let d = self.deadline();
                        self.insert(d);
                    }
                }
            }
            4..=7 => {
                if let Some(id) = self.pick() {
                    let d = self.new_deadline(id);
                    self.reset(id, d);
                }
            }
            8 => {
                if !self.dead.is_empty() {
                    let id = self.dead[self.rng.below(self.dead.len() as u64) as usize];
                    match self.rng.below(3) {
                        0 => self.cancel(id),
                        1 => {
                            let d = self.deadline();
                            self.reset(id, d);
                        }
                        _ => assert_eq!(self.wheel.get(id), None, "a stale id reads nothing"),
                    }
                }
            }
            _ => {
                if let Some(id) = self.pick() {
                    let (expiry, value) = self.pending[&id];
                    assert_eq!(self.wheel.expiry(id), Some(expiry), "expiry of {id:?}");
                    assert_eq!(self.wheel.get(id), Some(&value));
                }
            }
        }
    }

    /// Where the next poll goes.
    fn target(&mut self) -> u64 {
        let clock = self.now();
        let first = self.min_expiry();
        let rng = &mut self.rng;
        match rng.below(12) {
            0..=2 => clock.saturating_add(1),
            3 => clock.saturating_add(rng.range(1, L1)),
            4 => first.unwrap_or(clock),
            5 => first.map_or(clock, |f| f.saturating_sub(1)),
            // Through the end of the level-0 window, or the whole next level-1 window.
            6 => (next_multiple(clock, L1) - 1).saturating_add(rng.below(2) * L1),
            // To a level-2 slot boundary, one before or one after.
            7 => (next_multiple(clock, L2) - 1).saturating_add(rng.below(3)),
            // Across several level-2 slots.
            8 => clock.saturating_add(rng.range(2 * L2, 12 * L2)),
            9 => self.wheel.next_expiry().unwrap_or(clock),
            10 => clock.saturating_sub(rng.below(3)),
            _ => clock.saturating_add(rng.range(L1, L2)),
        }
    }

    /// A random round of inserts, operations and polls.
    fn round(&mut self, population: usize, steps: usize) {
        for _ in 0..population {
            let d = self.deadline();
            self.insert(d);
        }
        self.check();
        for step in 0..steps {
            for _ in 0..self.rng.below(4) {
                self.act();
            }
            let to = self.target();
            if self.rng.chance(20) {
                // A drain left early: the rest of its timers stay due.
                for _ in 0..self.rng.below(5) {
                    if self.poll(to).is_none() {
                        break;
                    }
                    self.act();
                }
                self.check();
            } else {
                self.drain(to, 30);
            }
            if step % 64 == 0 && self.pending.len() < 3000 {
                self.wheel.check_invariants();
            }
        }
        self.wheel.check_invariants();
        self.check_stats();
    }

    /// Drains everything, waking at `next_expiry` as an event loop does.
    fn run_out(&mut self) {
        let mut wakes = 0u64;
        while let Some(wake) = self.wheel.next_expiry() {
            wakes += 1;
            assert!(wakes < 10_000_000, "next_expiry makes no progress");
            self.drain(wake, 0);
        }
        assert!(
            self.pending.is_empty(),
            "next_expiry None with timers pending"
        );
        self.check_stats();
    }
}

#[test]
fn random_rounds_exact_default_geometry() {
    for seed in 0..64 {
        let mut h = Harness::exact(0, 6, None, seed);
        h.round(300, 300);
        h.run_out();
    }
}

#[test]
fn random_rounds_exact_any_levels_and_far_starts() {
    let mut rng = Rng(0xbadc0ffee);
    for seed in 0..50 {
        let levels = [2, 3, 4, 6, 11][seed as usize % 5];
        let start = match rng.below(6) {
            0 => 0,
            // Just before a level-2 or level-3 boundary: a cascade is the first event.
            1 => next_multiple(rng.next() >> 8, L2) - 1 - rng.below(3),
            2 => next_multiple(rng.next() >> 8, L3) - 1,
            3 => u64::MAX - rng.below(1 << 20),
            4 => 1 << 63,
            _ => rng.next() >> rng.below(40),
        };
        let mut h = Harness::exact(start, levels, None, seed ^ 0x5eed);
        h.round(200, 250);
        h.run_out();
    }
}

#[test]
fn random_rounds_bounded_and_full() {
    for seed in 0..16 {
        let cap = [1, 7, 64, 300][seed as usize % 4];
        let mut h = Harness::exact(seed * 1_000_003, 6, Some(cap), seed);
        // Filled to the brim, with timers far enough out to come down into batches.
        for _ in 0..cap {
            let d = h.now() + h.rng.range(L2, 6 * L2);
            h.insert(d).expect("room");
        }
        assert!(h.insert(h.now() + 5000).is_none(), "full");
        h.round(cap + 10, 200);
        assert!(h.refused > 0);
        h.run_out();
    }
}

#[test]
fn random_rounds_coarse() {
    for seed in 0..8 {
        let start = [0, u64::MAX - 100_000, 1 << 40, 12345][seed as usize % 4];
        let wheel = Builder::new(Mode::Coarse).start(start).build().unwrap();
        let mut h = Harness::new(seed ^ 0xc0a45e, wheel);
        h.round(200, 200);
        h.run_out();
    }
}

/// A drain acting on the timers of the run between every hand-out: one level-1 slot crowded by a
/// cascade from level 2, handed out tick by tick while its timers are cancelled, reset all over,
/// and their entries taken by new timers.
#[test]
fn the_run_handed_out_under_fire() {
    for seed in 0..40 {
        let start = [0, 4095, 1 << 50, u64::MAX - 3 * L2][seed as usize % 4];
        let mut h = Harness::exact(start, 6, None, seed);
        let slot = next_multiple(h.now(), L2) + L1 * h.rng.range(1, 63);
        for _ in 0..400 {
            let d = slot + h.rng.below(L1);
            h.insert(d);
        }
        // And the slot's list, inserted once the clock is in the level-2 window.
        let into = next_multiple(h.now(), L2);
        h.drain(into, 0);
        for _ in 0..100 {
            let d = slot + h.rng.below(L1);
            h.insert(d);
        }
        let to = slot - h.rng.below(2);
        h.drain(to, 0);
        h.check();
        while h.now() < slot + L1 {
            let to = h.now() + 1 + h.rng.below(3);
            h.drain(to, 60);
            for _ in 0..h.rng.below(6) {
                h.act();
            }
            h.wheel.check_invariants();
        }
        h.run_out();
    }
}

/// One jump through whole windows hands out the same timers, in the same order, as one-tick steps.
#[test]
fn one_jump_and_single_steps_agree() {
    for seed in 0..10 {
        let start = [0, 4000, (1 << 33) - 7, u64::MAX - 5 * L3][seed as usize % 4];
        let mut rng = Rng(seed);
        let deadlines: Vec<u64> = (0..800)
            .map(|_| match rng.below(3) {
                0 => start + rng.range(L1, L2),
                1 => start + rng.range(L2, 4 * L2),
                _ => start + rng.range(L3 - L2, L3 + 2 * L2),
            })
            .collect();
        let end = start + L3 + 2 * L2;
        let mut fired = Vec::new();
        for stepping in [false, true] {
            let mut h = Harness::exact(start, 6, None, seed);
            let values: HashMap<TimerId, usize> = deadlines
                .iter()
                .enumerate()
                .map(|(i, &d)| (h.insert(d).unwrap(), i))
                .collect();
            let mut out = Vec::new();
            if stepping {
                while h.now() < end {
                    let to = h.now() + 1;
                    while let Some(id) = h.poll(to) {
                        out.push((deadlines[values[&id]], to));
                    }
                }
            } else {
                while let Some(id) = h.poll(end) {
                    out.push((deadlines[values[&id]], end));
                }
            }
            assert!(h.pending.is_empty());
            fired.push(out);
        }
        let (jumped, stepped) = (&fired[0], &fired[1]);
        assert_eq!(jumped.len(), stepped.len());
        for (j, s) in jumped.iter().zip(stepped) {
            assert_eq!(j.0, s.0, "same expiry order");
            assert_eq!(s.0, s.1, "a step fires each timer on its deadline tick");
        }
    }
}

/// 100k timers on one level-1 slot, filed there by one cascade; a third cancelled, some reset.
#[test]
fn a_hundred_thousand_on_one_level_one_slot() {
    let mut h = Harness::exact(0, 6, None, 7);
    let slot = 3 * L2 + 17 * L1;
    let mut ids = Vec::new();
    for i in 0..100_000u64 {
        // Half on one tick, the rest spread over the slot's window.
        let d = if i % 2 == 0 { slot + 9 } else { slot + i % L1 };
        ids.push(h.insert(d).unwrap());
    }
    h.drain(3 * L2, 0);
    assert_eq!(h.pending.len(), 100_000, "a cascade fires nothing");
    for (n, &id) in ids.iter().enumerate() {
        match n % 9 {
            0 | 3 | 6 => h.cancel(id),
            1 => h.reset(id, slot + 63 - (n as u64 % 5)), // later, in the window
            4 => h.reset(id, slot + L1 + (n as u64 % 70)), // past the window
            7 => h.reset(id, slot - 1 - (n as u64 % 100)), // earlier, other slots
            _ => {}
        }
    }
    h.check();
    // Into the window, then one tick at a time through it.
    h.drain(slot - L1 / 2, 0);
    while h.now() < slot + 2 * L1 + 10 {
        let to = h.now() + 1;
        h.drain(to, 0);
    }
    h.wheel.check_invariants();
    h.run_out();
}

/// Every entry cancelled from the run while it is handed out is taken at once by a new timer on
/// the same tick or the next: each comes out once, in order.
#[test]
fn freed_run_entries_reused_mid_tick() {
    let mut h = Harness::exact(0, 6, Some(2000), 11);
    let slot = 2 * L2 + 40 * L1;
    for i in 0..2000 {
        h.insert(slot + (i % 4)).unwrap();
    }
    h.drain(slot, 0);
    for tick in slot..slot + 6 {
        while let Some(_fired) = h.poll(tick) {
            if let Some(id) = h.pick() {
                let (e, _) = h.pending[&id];
                if e > tick || h.rng.chance(50) {
                    h.cancel(id);
                    // The entry just freed (and the one the poll freed) are reused.
                    let d = tick + h.rng.below(3);
                    h.insert(d).expect("room");
                    let d = tick + h.rng.below(2);
                    h.insert(d).expect("room");
                }
            }
        }
        h.check();
    }
    h.wheel.check_invariants();
    h.run_out();
}

/// Timers from level 3 down, next to `u64::MAX` with the top level covering every `u64`.
#[test]
fn the_end_of_time_through_every_level() {
    for levels in [4, 6, 11] {
        let start = u64::MAX - 2 * L3 - 5;
        let mut h = Harness::exact(start, levels, None, levels as u64);
        for _ in 0..600 {
            let d = u64::MAX - h.rng.below(2 * L3);
            h.insert(d);
        }
        for _ in 0..20 {
            h.insert(u64::MAX);
        }
        for _ in 0..300 {
            h.act();
            let to = h.target();
            h.drain(to, 20);
        }
        h.drain(u64::MAX, 30);
        assert!(h.pending.is_empty(), "poll(u64::MAX) fires everything");
        assert_eq!(h.now(), u64::MAX);
        h.check_stats();
    }
}

/// `clear` in the middle of a run's tick, then the same slot filled again, by a cascade and by
/// inserts: nothing of the old run comes back.
#[test]
fn cleared_mid_run_and_refilled() {
    for seed in 0..8 {
        let mut h = Harness::exact(0, 6, None, seed);
        let slot = L2 + 30 * L1;
        for i in 0..300 {
            h.insert(slot + i % 5);
        }
        h.drain(slot + 2, 0);
        for _ in 0..h.rng.below(40) {
            h.poll(slot + 3);
        }
        h.wheel.clear();
        for id in h.pending.keys().copied().collect::<Vec<_>>() {
            // Stale now; `stats` counts them as neither fired nor cancelled.
            h.forget(id);
        }
        h.check();
        assert_eq!(h.wheel.next_expiry(), None);
        // The next level-2 window's same slot, by a cascade, and this window's rest, directly.
        let later = slot + L2;
        for i in 0..200 {
            h.insert(later + i % L1);
            h.insert(slot + 3 + i % 60);
        }
        h.round(50, 100);
        h.run_out();
    }
}

// ---- RawWheel over storage written here -------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Rec {
    next: u32,
    prev: u32,
    list: u32,
    expiry: u64,
    held: bool,
}

/// Records the wheel links; touching one it does not hold panics. Freed records are reused
/// last-in first-out, so an entry a batch position named comes back at once.
struct Table {
    recs: Vec<Rec>,
    free: Vec<u32>,
}

impl Table {
    fn new(n: u32) -> Self {
        let blank = Rec {
            next: 0xdead,
            prev: 0xbeef,
            list: 0xf00d,
            expiry: 0,
            held: false,
        };
        Table {
            recs: vec![blank; n as usize],
            free: (0..n).rev().collect(),
        }
    }

    fn at(&self, i: u32) -> &Rec {
        let r = &self.recs[i as usize];
        assert!(r.held, "the wheel read record {i}, which it does not hold");
        r
    }

    fn at_mut(&mut self, i: u32) -> &mut Rec {
        let r = &mut self.recs[i as usize];
        assert!(r.held, "the wheel wrote record {i}, which it does not hold");
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
    fn is_on(&self, i: u32, v: u32) -> bool {
        // Asked of records the wheel let go of too: one this table took back is on no list.
        let r = &self.recs[i as usize];
        r.held && r.list == v
    }
    fn expiry(&self, i: u32) -> u64 {
        self.at(i).expiry
    }
    fn set_expiry(&mut self, i: u32, v: u64) {
        self.at_mut(i).expiry = v;
    }
    fn set_prev_unless_nil(&mut self, i: u32, prev: u32) {
        if i != NIL {
            self.set_prev(i, prev);
        }
    }
}

struct Raw {
    wheel: RawWheel,
    table: Table,
    rng: Rng,
    /// Linked records: index -> expiry.
    pending: HashMap<u32, u64>,
    order: BTreeSet<(u64, u32)>,
}

impl Raw {
    fn new(start: u64, levels: usize, n: u32, seed: u64) -> Self {
        Raw {
            wheel: Builder::new(Mode::Exact)
                .levels(levels)
                .start(start)
                .build_raw()
                .unwrap(),
            table: Table::new(n),
            rng: Rng(seed),
            pending: HashMap::new(),
            order: BTreeSet::new(),
        }
    }

    fn set(&mut self, i: u32, expiry: u64) {
        if let Some(old) = self.pending.insert(i, expiry) {
            assert!(self.order.remove(&(old, i)));
        }
        self.order.insert((expiry, i));
    }

    fn drop_model(&mut self, i: u32) {
        let old = self.pending.remove(&i).expect("linked");
        assert!(self.order.remove(&(old, i)));
    }

    fn link(&mut self, deadline: u64) -> Option<u32> {
        let i = self.table.free.pop()?;
        let clock = self.wheel.now();
        let r = &mut self.table.recs[i as usize];
        assert!(!r.held);
        r.held = true;
        let expiry = self.wheel.link(&mut self.table, i, deadline);
        assert_eq!(expiry, deadline.max(clock), "link's expiry");
        assert_eq!(self.table.recs[i as usize].expiry, expiry);
        self.set(i, expiry);
        Some(i)
    }

    fn unlink(&mut self, i: u32) {
        self.wheel.unlink(&mut self.table, i);
        self.table.recs[i as usize].held = false;
        self.table.free.push(i);
        self.drop_model(i);
    }

    fn relink(&mut self, i: u32, deadline: u64) {
        let clock = self.wheel.now();
        let expiry = self.wheel.relink(&mut self.table, i, deadline);
        assert_eq!(expiry, deadline.max(clock), "relink's expiry");
        self.set(i, expiry);
    }

    /// Raises a linked timer's expiry without telling the wheel (one not yet due only).
    fn raise(&mut self, i: u32, by: u64) {
        let e = self.table.recs[i as usize].expiry;
        if e > self.wheel.now() {
            let to = e.saturating_add(by);
            self.table.recs[i as usize].expiry = to;
            self.set(i, to);
        }
    }

    /// Lowers a linked timer's expiry without telling the wheel, but not below the tick
    /// `bucket_tick` says the wheel next reads it at (so it may stay where it is).
    fn lower(&mut self, i: u32) {
        let clock = self.wheel.now();
        let e = self.table.recs[i as usize].expiry;
        if let Some(at) = self.wheel.bucket_tick(&self.table, i) {
            assert!(at >= clock, "bucket_tick {at} behind the clock {clock}");
            assert!(at <= e, "bucket_tick {at} after the expiry {e}");
            let to = self.rng.range(at, e.saturating_add(1));
            self.table.recs[i as usize].expiry = to;
            self.set(i, to);
        }
    }

    fn pick(&mut self) -> Option<u32> {
        let clock = self.wheel.now();
        let from = clock.saturating_add(self.rng.below(2 * L1));
        self.order
            .range((from, 0)..)
            .next()
            .or_else(|| self.order.first())
            .map(|&(_, i)| i)
    }

    fn poll(&mut self, now: u64) -> Option<u32> {
        let before = self.wheel.now();
        let got = self.wheel.poll(&mut self.table, now);
        let clock = self.wheel.now();
        if now < before {
            assert_eq!(got, None);
            return None;
        }
        match got {
            Some(i) => {
                let r = self.table.recs[i as usize];
                assert!(r.held, "handed out record {i}, which is not linked");
                let e = *self.pending.get(&i).expect("linked");
                assert_eq!(r.expiry, e);
                assert!(
                    e <= clock && clock <= now,
                    "early: {e} at clock {clock}, now {now}"
                );
                let first = self.order.first().unwrap().0;
                assert_eq!(e, first, "order: {e} handed out while {first} is linked");
                self.table.recs[i as usize].held = false;
                self.table.free.push(i);
                self.drop_model(i);
                Some(i)
            }
            None => {
                if let Some(&(first, i)) = self.order.first() {
                    assert!(first > now, "late: record {i} at {first} not out by {now}");
                }
                assert_eq!(clock, before.max(now));
                None
            }
        }
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.pending.len());
        let clock = self.wheel.now();
        match (self.wheel.next_expiry(), self.order.first()) {
            (None, None) => {}
            (Some(ne), Some(&(first, _))) => {
                assert!(ne >= clock && ne <= first.max(clock), "next_expiry {ne}")
            }
            other => panic!("next_expiry and the model disagree: {other:?}"),
        }
    }

    fn deadline(&mut self) -> u64 {
        let clock = self.wheel.now();
        let rng = &mut self.rng;
        match rng.below(6) {
            0 => clock.saturating_sub(rng.below(3)),
            1 => rng.range(clock.saturating_add(1), next_multiple(clock, L1)),
            2 => clock.saturating_add(rng.range(L1, L2)),
            3 => next_multiple(clock, L2).saturating_add(L1 * 7 + rng.below(L1)),
            4 => clock.saturating_add(rng.range(L2, 3 * L3)),
            _ => clock.saturating_add(rng.range(1, 3 * L1)),
        }
    }

    fn act(&mut self) {
        match self.rng.below(8) {
            0 | 1 => {
                let d = self.deadline();
                self.link(d);
            }
            2 | 3 => {
                if let Some(i) = self.pick() {
                    self.unlink(i);
                    // The same record, at once, somewhere the run or a batch may be.
                    let d = self.deadline();
                    assert_eq!(self.link(d), Some(i), "LIFO reuse");
                }
            }
            4 | 5 => {
                if let Some(i) = self.pick() {
                    let old = self.pending[&i];
                    let d = match self.rng.below(5) {
                        0 => self.wheel.now(),
                        1 => old.saturating_sub(self.rng.below(L1)).max(self.wheel.now()),
                        2 => old,
                        3 => old.saturating_add(self.rng.below(L2)),
                        _ => self.deadline(),
                    };
                    self.relink(i, d);
                }
            }
            6 => {
                if let Some(i) = self.pick() {
                    if self.rng.chance(50) {
                        let by = [1, 3, L1, L2, 1 << 40][self.rng.below(5) as usize];
                        self.raise(i, by);
                    } else {
                        self.lower(i);
                    }
                }
            }
            _ => {
                if let Some(i) = self.pick() {
                    self.unlink(i);
                }
            }
        }
    }
}

#[test]
fn raw_storage_reused_while_batched() {
    for seed in 0..20 {
        let start = [0, L2 - 2, (1 << 45) + 3, u64::MAX - 4 * L3][seed as usize % 4];
        let mut r = Raw::new(start, [3, 6, 11][seed as usize % 3], 1500, seed);
        for _ in 0..1000 {
            let d = r.deadline();
            r.link(d);
        }
        for _ in 0..400 {
            for _ in 0..r.rng.below(5) {
                r.act();
            }
            let clock = r.wheel.now();
            let to = match r.rng.below(5) {
                0 | 1 => clock.saturating_add(1),
                2 => r.wheel.next_expiry().unwrap_or(clock),
                3 => next_multiple(clock, L1) - 1,
                _ => clock.saturating_add(r.rng.range(L1, 2 * L2)),
            };
            while r.poll(to).is_some() {
                if r.rng.chance(40) {
                    r.act();
                }
            }
            r.check();
        }
        while let Some(wake) = r.wheel.next_expiry() {
            while r.poll(wake).is_some() {}
        }
        assert!(r.pending.is_empty() && r.wheel.is_empty());
        assert_eq!(r.table.free.len(), 1500, "every record came back");
    }
}

/// A batch position keeps naming a record after it left: unlinking every record of a waiting
/// batch and linking the same records into the same slot must not hand out any twice.
#[test]
fn raw_batch_emptied_and_refilled_with_the_same_records() {
    let mut r = Raw::new(0, 6, 256, 3);
    let slot = 2 * L2 + 9 * L1;
    let ids: Vec<u32> = (0..200).map(|k| r.link(slot + k % L1).unwrap()).collect();
    r.poll(2 * L2); // the cascade files them in slot 9's batch
    assert_eq!(r.pending.len(), 200);
    for &i in &ids[..100] {
        r.unlink(i);
    }
    for k in 0..100 {
        // The same records (LIFO), now on the slot's list, not its batch.
        r.link(slot + (k * 7) % L1).unwrap();
    }
    for &i in &ids[100..150] {
        // Earlier within the slot, and pushed later behind the wheel's back.
        let d = slot + r.pending[&i] % 3;
        r.relink(i, d);
        r.raise(i, 70);
    }
    r.check();
    while r.wheel.now() < slot + 3 * L1 {
        let to = r.wheel.now() + 1;
        while r.poll(to).is_some() {}
        r.check();
    }
    while let Some(wake) = r.wheel.next_expiry() {
        while r.poll(wake).is_some() {}
    }
    assert!(r.pending.is_empty());
    assert_eq!(r.table.free.len(), 256);
}

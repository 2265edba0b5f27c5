//! The wheel against a naive model: a hash map of pending timers with their expected expiries.
//!
//! Random operation sequences run side by side in both modes and many geometries: deadlines
//! near, far, beyond the top level, in the past and next to `u64::MAX`; polls that step by one,
//! jump by 2^40 and more, and land on `next_expiry()`; inserts, cancels and resets in the middle of
//! a drain, due in it or not; stale ids. Every fire, cancel and reset result, `expiry`, `len` and `next_expiry` is
//! checked, and Coarse slack against Linux's `calc_wheel_index` rounding. Coarse `next_expiry`
//! must be the earliest expiry or the old expiry of a timer that a reset pushed later (its
//! bucket comes due there and places it again).
//!
//! The model computes expiries with its own arithmetic (loops and `u128`), not the crate's.

use std::collections::HashMap;

use tickwheel::{Mode, TimerId, Wheel};

mod common;
use common::Rng;

/// What the model expects of a timer inserted at `clock` with `deadline`: (expiry, whether it
/// starts beyond the top level).
fn expected_expiry(mode: Mode, levels: usize, clock: u64, deadline: u64) -> (u64, bool) {
    if deadline <= clock {
        return (clock, false);
    }
    match mode {
        Mode::Exact => {
            let bits = 6 * levels as u32;
            let block = |t: u64| if bits >= 64 { 0 } else { t >> bits };
            (deadline, block(deadline) != block(clock))
        }
        Mode::Coarse => {
            let delay = u128::from(deadline - clock);
            let level = (0..levels).find(|&n| delay < 63u128 << (3 * n));
            let shift = 3 * level.unwrap_or(levels - 1) as u32;
            let granule = 1u128 << shift;
            let rounded = u128::from(deadline).div_ceil(granule) * granule;
            (rounded.min(u128::from(u64::MAX)) as u64, level.is_none())
        }
    }
}

/// Linux's bucket expiry for the same delay: `deadline + granule` rounded down.
fn linux_expiry(levels: usize, clock: u64, deadline: u64) -> u128 {
    let delay = u128::from(deadline.saturating_sub(clock));
    let level = (0..levels)
        .find(|&n| delay < 63u128 << (3 * n))
        .unwrap_or(levels - 1);
    let shift = 3 * level as u32;
    ((u128::from(deadline) + (1u128 << shift)) >> shift) << shift
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    expiry: u64,
    value: u64,
    far: bool,
}

struct Harness {
    rng: Rng,
    wheel: Wheel<u64>,
    model: HashMap<TimerId, Pending>,
    ids: Vec<TimerId>,
    dead: Vec<TimerId>,
    /// Per timer, the expiries a reset moved it away from to a later one: its bucket may still
    /// come due at one of them (a deferred reset), so `next_expiry` may name it.
    deferred: HashMap<TimerId, Vec<u64>>,
    next_value: u64,
    ops: u64,
    /// The wheel's bound, if it has one: an insert beyond it must hand its value back.
    capacity: Option<usize>,
    /// Inserts refused because the wheel was full.
    refused: u64,
}

impl Harness {
    fn new(seed: u64, mode: Mode, bounded: bool) -> Self {
        let mut rng = Rng(seed);
        let max_levels = if mode == Mode::Exact { 11 } else { 20 };
        let levels = match rng.below(4) {
            0 => 1 + rng.below(3) as usize,
            1 => 1 + rng.below(max_levels) as usize,
            _ => Wheel::<u64>::new(mode).levels(),
        };
        let start = match rng.below(6) {
            0 => rng.next(),
            1 => u64::MAX - rng.below(1 << 20),
            2 => rng.below(1 << 40),
            _ => 0,
        };
        // Drawn from a generator of its own, so the unbounded sequences are those of before.
        let capacity = bounded.then(|| 1 + Rng(seed ^ 0xca9a).below(700) as usize);
        let builder = Wheel::builder(mode).levels(levels).start(start);
        let wheel = match capacity {
            Some(capacity) => builder.capacity(capacity),
            None => builder,
        }
        .build()
        .unwrap();
        assert_eq!(wheel.capacity(), capacity);
        Harness {
            rng,
            wheel,
            model: HashMap::new(),
            ids: Vec::new(),
            dead: Vec::new(),
            deferred: HashMap::new(),
            next_value: 0,
            ops: 0,
            capacity,
            refused: 0,
        }
    }

    fn mode(&self) -> Mode {
        self.wheel.mode()
    }

    fn deadline(&mut self) -> u64 {
        let now = self.wheel.now();
        let r = &mut self.rng;
        match r.below(12) {
            0 => now.saturating_sub(r.below(100)),
            1 => now.saturating_add(r.below(64)),
            2..=4 => now.saturating_add(r.below(5_000)),
            5 | 6 => now.saturating_add(r.below(1 << 24)),
            7 => now.saturating_add(r.below(1 << 36)),
            8 => now.saturating_add(1u64 << (30 + r.below(33))),
            9 => u64::MAX - r.below(1 << 10),
            10 => u64::MAX,
            _ => now.saturating_add(r.below(1 << 12)),
        }
    }

    fn insert(&mut self) {
        let deadline = self.deadline();
        let clock = self.wheel.now();
        let value = self.next_value;
        self.next_value += 1;
        if self.capacity == Some(self.model.len()) {
            let full = self.wheel.insert(deadline, value).unwrap_err();
            assert_eq!(
                full.into_inner(),
                value,
                "a full wheel hands the value back"
            );
            assert_eq!(self.wheel.len(), self.model.len(), "and changes nothing");
            self.refused += 1;
            return;
        }
        let id = self.wheel.insert(deadline, value).expect("room for it");
        self.expect_placed(id, clock, deadline);
        self.model.insert(
            id,
            Pending {
                expiry: self.wheel.expiry(id).unwrap(),
                value,
                far: false,
            },
        );
        self.mark_far(id, clock, deadline);
        self.ids.push(id);
    }

    /// Checks the expiry the wheel chose against the model's.
    fn expect_placed(&self, id: TimerId, clock: u64, deadline: u64) {
        let levels = self.wheel.levels();
        let (expected, _) = expected_expiry(self.mode(), levels, clock, deadline);
        let expiry = self.wheel.expiry(id).unwrap();
        assert_eq!(
            expiry,
            expected,
            "{:?} clock {clock} deadline {deadline}",
            self.mode()
        );
        assert!(expiry >= deadline.min(clock.max(deadline)), "never early");
        if self.mode() == Mode::Coarse && deadline > clock {
            let linux = linux_expiry(levels, clock, deadline);
            let (_, far) = expected_expiry(self.mode(), levels, clock, deadline);
            if !far && linux <= u128::from(u64::MAX) {
                assert!(
                    u128::from(expiry) <= linux,
                    "slack above Linux: {expiry} > {linux}"
                );
            }
            if !far {
                let slack = expiry - deadline;
                assert!(
                    slack as u128 * 63 <= u128::from(deadline - clock) * 8,
                    "slack {slack}"
                );
            }
        }
    }

    fn mark_far(&mut self, id: TimerId, clock: u64, deadline: u64) {
        let (_, far) = expected_expiry(self.mode(), self.wheel.levels(), clock, deadline);
        self.model.get_mut(&id).unwrap().far = far;
    }

    fn pick(&mut self) -> Option<TimerId> {
        if self.rng.chance(15) && !self.dead.is_empty() {
            let i = self.rng.below(self.dead.len() as u64) as usize;
            return Some(self.dead[i]);
        }
        while !self.ids.is_empty() {
            let i = self.rng.below(self.ids.len() as u64) as usize;
            let id = self.ids[i];
            if self.model.contains_key(&id) {
                return Some(id);
            }
            self.ids.swap_remove(i);
        }
        None
    }

    fn cancel(&mut self) {
        let Some(id) = self.pick() else { return };
        let expected = self.model.remove(&id).map(|p| p.value);
        self.deferred.remove(&id);
        assert_eq!(self.wheel.cancel(id), expected, "cancel {id:?}");
        assert_eq!(self.wheel.expiry(id), None);
        self.dead.push(id);
    }

    fn reset(&mut self) {
        let Some(id) = self.pick() else { return };
        let deadline = self.deadline();
        let clock = self.wheel.now();
        let live = self.model.contains_key(&id);
        assert_eq!(self.wheel.reset(id, deadline), live, "reset {id:?}");
        if live {
            self.expect_placed(id, clock, deadline);
            self.moved(id);
            self.mark_far(id, clock, deadline);
        } else {
            assert_eq!(self.wheel.expiry(id), None, "stale id stays stale");
        }
    }

    /// Records a reset's new expiry, and the old one if the timer moved later.
    fn moved(&mut self, id: TimerId) {
        let expiry = self.wheel.expiry(id).unwrap();
        let pending = self.model.get_mut(&id).unwrap();
        if expiry > pending.expiry {
            self.deferred.entry(id).or_default().push(pending.expiry);
        }
        pending.expiry = expiry;
    }

    fn poll_target(&mut self) -> u64 {
        let now = self.wheel.now();
        match self.rng.below(10) {
            0 => now.saturating_sub(self.rng.below(10)),
            1..=3 => now.saturating_add(1),
            4 | 5 => now.saturating_add(self.rng.below(600)),
            6 => now.saturating_add(1u64 << (40 + self.rng.below(20))),
            7 if self.rng.chance(10) => u64::MAX,
            _ => self.wheel.next_expiry().unwrap_or(now.saturating_add(1)),
        }
    }

    fn drain(&mut self) {
        let target = self.poll_target();
        let before = self.wheel.now();
        let mut last_expiry = 0;
        while let Some((id, value)) = self.wheel.poll(target) {
            let pending = self.model.remove(&id).expect("fired a timer the model has");
            self.deferred.remove(&id);
            assert_eq!(value, pending.value);
            assert!(
                pending.expiry <= target,
                "fired early: expiry {} now {target}",
                pending.expiry
            );
            if self.mode() == Mode::Exact {
                assert!(pending.expiry >= last_expiry, "Exact order");
            }
            last_expiry = pending.expiry;
            let clock = self.wheel.now();
            assert!(
                before <= clock && clock <= target,
                "clock {clock} within the drain"
            );
            self.dead.push(id);
            self.ops += 1;
            if self.rng.chance(3) {
                self.insert_during_drain(target);
            }
            if self.rng.chance(3) {
                self.cancel();
            }
            if self.rng.chance(3) {
                self.reset_during_drain(target);
            }
            // Any deadline, mostly past the drain: it may land in the next lap of a bucket that
            // is being handed out.
            if self.rng.chance(3) {
                self.insert();
            }
            if self.rng.chance(3) {
                self.reset();
            }
        }
        assert_eq!(
            self.wheel.now(),
            before.max(target),
            "clock after the drain"
        );
        if let Some((id, p)) = self.model.iter().find(|(_, p)| p.expiry <= target) {
            panic!(
                "{id:?} with expiry {} missed by the drain to {target}",
                p.expiry
            );
        }
        // Every bucket due by `target` has been handed out or its timers placed again.
        for ticks in self.deferred.values_mut() {
            ticks.retain(|&tick| tick > target);
        }
        self.deferred.retain(|_, ticks| !ticks.is_empty());
        self.check_next_expiry(target >= before);
    }

    /// A deadline from just before the clock up to `target`: due in a drain to `target`.
    fn due_deadline(&mut self, target: u64) -> u64 {
        let low = self.wheel.now().saturating_sub(2);
        low + self.rng.below((target - low).saturating_add(1))
    }

    /// A timer reset during a drain to a deadline `<= now` comes out of the same drain.
    fn reset_during_drain(&mut self, target: u64) {
        let Some(id) = self.pick() else { return };
        let clock = self.wheel.now();
        let deadline = self.due_deadline(target);
        let live = self.model.contains_key(&id);
        assert_eq!(
            self.wheel.reset(id, deadline),
            live,
            "reset {id:?} during a drain"
        );
        if live {
            let expiry = self.wheel.expiry(id).unwrap();
            assert!(
                expiry <= target,
                "reset during the drain to {target}, expires at {expiry}"
            );
            self.expect_placed(id, clock, deadline);
            self.moved(id);
            self.mark_far(id, clock, deadline);
        }
    }

    /// A timer inserted during a drain with a deadline `<= now` comes out of the same drain.
    fn insert_during_drain(&mut self, target: u64) {
        let clock = self.wheel.now();
        let deadline = self.due_deadline(target);
        let value = self.next_value;
        self.next_value += 1;
        let id = self.wheel.insert(deadline, value).unwrap();
        self.expect_placed(id, clock, deadline);
        let expiry = self.wheel.expiry(id).unwrap();
        assert!(
            expiry <= target,
            "inserted during the drain to {target}, expires at {expiry}"
        );
        self.model.insert(
            id,
            Pending {
                expiry,
                value,
                far: false,
            },
        );
        self.ids.push(id);
    }

    fn check_next_expiry(&self, drained: bool) {
        let earliest = self.model.values().map(|p| p.expiry).min();
        let next = self.wheel.next_expiry();
        assert_eq!(
            next.is_some(),
            earliest.is_some(),
            "next_expiry of an empty wheel"
        );
        let (Some(next), Some(earliest)) = (next, earliest) else {
            return;
        };
        assert!(
            next <= earliest,
            "next_expiry {next} after the earliest expiry {earliest}"
        );
        if drained {
            assert!(
                next > self.wheel.now(),
                "next_expiry {next} not after the drain"
            );
            let far = self.model.values().any(|p| p.far);
            if self.mode() == Mode::Coarse && !far {
                // Exact, unless the bucket of a timer that a reset pushed later comes due first.
                let deferred = self.deferred.values().flatten().any(|&tick| tick == next);
                assert!(
                    next == earliest || deferred,
                    "Coarse next_expiry {next}: neither the earliest expiry {earliest} nor a \
                     deferred bucket"
                );
            }
        }
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0..=6 => self.insert(),
            7..=9 => self.cancel(),
            10..=13 => self.reset(),
            14..=16 => self.drain(),
            17 => self.check_next_expiry(false),
            18 => self.stale_queries(),
            _ => {
                self.reserve();
                let id = self.pick();
                if let Some(id) = id {
                    let expected = self.model.get(&id).map(|p| p.expiry);
                    assert_eq!(self.wheel.expiry(id), expected);
                    assert_eq!(
                        self.wheel.get(id).copied(),
                        self.model.get(&id).map(|p| p.value)
                    );
                }
            }
        }
        self.ops += 1;
        assert_eq!(self.wheel.len(), self.model.len(), "len");
        if self.ops % 128 == 0 {
            self.wheel.check_invariants();
        }
    }

    /// Makes room for a few thousand timers (across chunk boundaries), or for more than any
    /// wheel holds; the amount comes from the operation count, not the generator, so the
    /// sequences stay those of before. Room past the bound or the index space is refused.
    fn reserve(&mut self) {
        let additional = match self.ops % 7 {
            0 => usize::MAX - self.model.len() / 2,
            1 => 1 << 33,
            k => (self.ops as usize % 1_000) * k as usize,
        };
        let fits = self
            .model
            .len()
            .checked_add(additional)
            .is_some_and(|wanted| {
                wanted <= self.capacity.unwrap_or(usize::MAX) && wanted <= u32::MAX as usize - 2047
            });
        match self.wheel.reserve(additional) {
            Ok(()) => assert!(fits, "room for {additional} past the bound"),
            Err(full) => {
                assert!(!fits, "room for {additional} refused");
                assert_eq!(full.into_inner(), additional, "the amount handed back");
            }
        }
        assert_eq!(self.wheel.len(), self.model.len(), "a reserve arms nothing");
    }

    fn stale_queries(&mut self) {
        if self.dead.is_empty() {
            return;
        }
        let id = self.dead[self.rng.below(self.dead.len() as u64) as usize];
        assert_eq!(self.wheel.expiry(id), None);
        assert!(!self.wheel.reset(id, 1));
        assert_eq!(self.wheel.cancel(id), None);
    }
}

fn run(mode: Mode, bounded: bool, total_ops: u64) {
    let mut seed = 0x5eed_0000 + mode as u64;
    let mut done = 0;
    let mut sequences = 0;
    let mut refused = 0;
    while done < total_ops {
        let mut h = Harness::new(seed, mode, bounded);
        for _ in 0..2_000 {
            h.step();
        }
        // Drain everything at the end of time: nothing is lost.
        let left = h.model.len();
        let fired = h.wheel.drain(u64::MAX).count();
        assert_eq!(fired, left, "seed {seed}: everything fires by u64::MAX");
        assert!(h.wheel.is_empty() && h.wheel.next_expiry().is_none());
        h.wheel.check_invariants();
        done += h.ops;
        refused += h.refused;
        seed = seed.wrapping_add(0x9e37_79b9);
        sequences += 1;
    }
    eprintln!(
        "{mode:?} (bounded: {bounded}): {done} operations in {sequences} sequences, {refused} inserts refused"
    );
    assert_eq!(bounded, refused > 0, "a bounded wheel was filled");
}

#[test]
fn exact_matches_model() {
    run(Mode::Exact, false, 1_000_000);
}

#[test]
fn coarse_matches_model() {
    run(Mode::Coarse, false, 1_000_000);
}

/// A bounded wheel keeps its entries in one reserved buffer instead of chunks; the same model
/// judges it, and an insert beyond the bound must hand its value back.
#[test]
fn bounded_exact_matches_model() {
    run(Mode::Exact, true, 500_000);
}

#[test]
fn bounded_coarse_matches_model() {
    run(Mode::Coarse, true, 500_000);
}

/// Exact: level-1 slots full of timers, filed there by the cascade of a level-2 slot and linked
/// there directly, each handed out tick by tick while its timers are cancelled, reset (earlier,
/// later, within the tick being handed out, past the window, into the past) and joined by new
/// ones, against a model of exact expiries: every timer fires in the one-tick poll that reaches
/// its expiry, in expiry order, and nothing else does.
#[test]
fn exact_level_one_slots_handed_out_under_cancels_and_resets() {
    for seed in 0..24u64 {
        let mut rng = Rng(0x1e7e_0000 + seed);
        let builder = Wheel::builder(Mode::Exact);
        let mut wheel = if seed % 2 == 1 {
            builder.capacity(4_000).build().unwrap()
        } else {
            builder.build().unwrap()
        };
        let mut model: HashMap<TimerId, (u64, u64)> = HashMap::new();
        let mut value = 0u64;
        let mut insert = |wheel: &mut Wheel<u64>, model: &mut HashMap<_, _>, deadline: u64| {
            value += 1;
            if let Ok(id) = wheel.insert(deadline, value) {
                let expiry = wheel.expiry(id).unwrap();
                assert_eq!(expiry, deadline.max(wheel.now()));
                model.insert(id, (expiry, value));
            }
        };
        // From clock 0, deadlines in level-2 slot 1: cascaded at 4096 into level 1's batches.
        for _ in 0..1_500 {
            let deadline = 4_096 + rng.below(4_096);
            insert(&mut wheel, &mut model, deadline);
        }
        let pick = |rng: &mut Rng, model: &HashMap<TimerId, (u64, u64)>| {
            let n = model.len() as u64;
            (n > 0).then(|| *model.keys().nth(rng.below(n) as usize).unwrap())
        };
        for now in 4_000..8_400u64 {
            // Now and then, timers linked into a level-1 slot's list directly.
            if rng.chance(10) {
                let deadline = now + 64 + rng.below(1_000);
                insert(&mut wheel, &mut model, deadline);
            }
            let mut last = 0;
            while let Some((id, v)) = wheel.poll(now) {
                let (expiry, value) = model.remove(&id).expect("fired a pending timer");
                assert_eq!(v, value);
                assert!(
                    expiry <= now,
                    "seed {seed}: early, expiry {expiry} at {now}"
                );
                assert!(expiry >= last, "seed {seed}: Exact order");
                last = expiry;
                // Meddle with the slot being handed out, and the ones after it.
                for _ in 0..rng.below(3) {
                    let Some(victim) = pick(&mut rng, &model) else {
                        break;
                    };
                    match rng.below(6) {
                        0 | 1 => {
                            let (_, value) = model.remove(&victim).unwrap();
                            assert_eq!(wheel.cancel(victim), Some(value));
                        }
                        kind => {
                            let deadline = match kind {
                                2 => now.saturating_sub(rng.below(3)),
                                3 => now + rng.below(64),
                                4 => now + rng.below(200),
                                _ => now + 64 * (1 + rng.below(100)),
                            };
                            assert!(wheel.reset(victim, deadline));
                            let expiry = deadline.max(now);
                            assert_eq!(wheel.expiry(victim), Some(expiry));
                            model.get_mut(&victim).unwrap().0 = expiry;
                        }
                    }
                }
                if rng.chance(30) {
                    let deadline = now - 1 + rng.below(70);
                    insert(&mut wheel, &mut model, deadline);
                }
            }
            assert_eq!(wheel.now(), now);
            if let Some((id, (expiry, _))) = model.iter().find(|(_, (e, _))| *e <= now) {
                panic!("seed {seed}: {id:?} with expiry {expiry} missed at {now}");
            }
            let earliest = model.values().map(|(e, _)| *e).min();
            match (wheel.next_expiry(), earliest) {
                (Some(next), Some(earliest)) => assert!(now < next && next <= earliest),
                (next, earliest) => assert_eq!(next.is_some(), earliest.is_some()),
            }
            assert_eq!(wheel.len(), model.len());
            if now % 16 == 0 {
                wheel.check_invariants();
            }
        }
        let left = model.len();
        assert_eq!(wheel.drain(u64::MAX).count(), left, "seed {seed}");
        assert!(wheel.is_empty());
    }
}

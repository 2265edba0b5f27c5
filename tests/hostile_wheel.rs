//! Adversarial tests of `Wheel`'s documented promises, written from the public API alone.
//!
//! Every operation goes through a [`Checker`] that keeps a naive model (a map of pending timers
//! with the expiry the docs promise, computed here with `u128` arithmetic, not the crate's) and
//! checks each answer against it: never early, fired in the first poll that reaches the expiry,
//! Exact in expiry order, every timer out exactly once, stale and foreign ids inert, `len` and
//! `next_expiry` right after every call. Targeted cases aim at the list layout (buckets of 1, 7,
//! 8, 9, 16, 17 timers, heads, middles and tails cancelled or moved while the bucket is being
//! drained); random operation sequences over many seeds cover the rest.

use std::collections::HashMap;

use tickwheel::{Mode, Stats, TimerId, Wheel};

mod common;
use common::Rng;

/// The Coarse level of a delay on a wheel with `levels` levels, `None` past the top level.
fn coarse_level(levels: usize, delay: u64) -> Option<usize> {
    (0..levels).find(|&n| u128::from(delay) < 63u128 << (3 * n))
}

/// The expiry the docs promise for `deadline` set while the clock reads `clock`, and whether it
/// starts past the top level.
fn promised(mode: Mode, levels: usize, clock: u64, deadline: u64) -> (u64, bool) {
    if deadline <= clock {
        return (clock, false);
    }
    let delay = deadline - clock;
    match mode {
        Mode::Exact => {
            let bits = 6 * levels as u32;
            let far = bits < 64 && (deadline >> bits) != (clock >> bits);
            (deadline, far)
        }
        Mode::Coarse => {
            let level = coarse_level(levels, delay);
            let granule = 1u128 << (3 * level.unwrap_or(levels - 1));
            let rounded = u128::from(deadline).div_ceil(granule) * granule;
            (rounded.min(u128::from(u64::MAX)) as u64, level.is_none())
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    expiry: u64,
    value: u64,
    /// A reset moved its expiry later: its old bucket may still be what `next_expiry` names.
    pushed: bool,
    /// Placed past the top level at some point: `next_expiry` may name the sweep instead.
    far: bool,
}

/// A wheel and the model it is checked against.
struct Checker {
    wheel: Wheel<u64>,
    model: HashMap<TimerId, Pending>,
    /// Ids that fired or were cancelled (the most recent ones).
    dead: Vec<TimerId>,
    next_value: u64,
    /// Exact: the expiry of the last timer fired, for the order promise.
    last_fired: Option<u64>,
    counts: Stats,
}

impl Checker {
    fn new(wheel: Wheel<u64>) -> Self {
        Checker {
            wheel,
            model: HashMap::new(),
            dead: Vec::new(),
            next_value: 0,
            last_fired: None,
            counts: Stats::default(),
        }
    }

    fn with(mode: Mode) -> Self {
        Self::new(Wheel::new(mode))
    }

    fn mode(&self) -> Mode {
        self.wheel.mode()
    }

    fn promised(&self, deadline: u64) -> (u64, bool) {
        promised(self.mode(), self.wheel.levels(), self.wheel.now(), deadline)
    }

    fn bury(&mut self, id: TimerId) {
        self.dead.push(id);
        if self.dead.len() > 256 {
            self.dead.remove(0);
        }
    }

    /// Inserts; `None` if the wheel was full (and checks that it had to be).
    fn insert(&mut self, deadline: u64) -> Option<TimerId> {
        let value = self.next_value;
        self.next_value += 1;
        let (expiry, far) = self.promised(deadline);
        let before = self.snapshot();
        match self.wheel.insert(deadline, value) {
            Ok(id) => {
                assert!(
                    self.wheel.capacity().is_none_or(|c| self.model.len() < c),
                    "insert past capacity {:?}",
                    self.wheel.capacity()
                );
                assert!(!self.model.contains_key(&id), "id {id:?} handed out twice");
                assert_eq!(
                    self.wheel.expiry(id),
                    Some(expiry),
                    "{:?} clock {} deadline {deadline}",
                    self.mode(),
                    self.wheel.now()
                );
                assert_eq!(self.wheel.get(id), Some(&value));
                let pending = Pending {
                    expiry,
                    value,
                    pushed: false,
                    far,
                };
                self.model.insert(id, pending);
                self.counts.inserted += 1;
                self.check();
                Some(id)
            }
            Err(full) => {
                assert_eq!(
                    Some(self.model.len()),
                    self.wheel.capacity(),
                    "Full below capacity"
                );
                assert_eq!(full.into_inner(), value, "Full must hand the value back");
                assert_eq!(
                    self.snapshot(),
                    before,
                    "a refused insert changed the wheel"
                );
                None
            }
        }
    }

    fn snapshot(&self) -> (usize, u64, Option<u64>, Stats) {
        (
            self.wheel.len(),
            self.wheel.now(),
            self.wheel.next_expiry(),
            self.wheel.stats(),
        )
    }

    fn cancel(&mut self, id: TimerId) -> bool {
        let before = self.snapshot();
        let got = self.wheel.cancel(id);
        match self.model.remove(&id) {
            Some(p) => {
                assert_eq!(got, Some(p.value), "cancel of pending {id:?}");
                self.counts.cancelled += 1;
                self.bury(id);
                self.check();
                true
            }
            None => {
                assert_eq!(got, None, "cancel of stale or foreign {id:?}");
                assert_eq!(self.snapshot(), before, "a stale cancel changed the wheel");
                false
            }
        }
    }

    fn reset(&mut self, id: TimerId, deadline: u64) -> bool {
        let before = self.snapshot();
        let (expiry, far) = self.promised(deadline);
        let clock = self.wheel.now();
        let done = self.wheel.reset(id, deadline);
        match self.model.get_mut(&id) {
            Some(p) => {
                assert!(done, "reset of pending {id:?}");
                assert_eq!(
                    self.wheel.expiry(id),
                    Some(expiry),
                    "{:?} reset at clock {clock} to {deadline}",
                    self.mode()
                );
                p.pushed |= expiry > p.expiry;
                p.far |= far;
                p.expiry = expiry;
                self.counts.resets += 1;
                self.check();
                true
            }
            None => {
                assert!(!done, "reset of stale or foreign {id:?}");
                assert_eq!(self.snapshot(), before, "a stale reset changed the wheel");
                false
            }
        }
    }

    /// Reads an id with every getter; a pending one's value is rewritten through `get_mut`.
    fn touch(&mut self, id: TimerId) {
        let before = self.snapshot();
        match self.model.get_mut(&id) {
            Some(p) => {
                assert_eq!(self.wheel.get(id), Some(&p.value));
                assert_eq!(self.wheel.expiry(id), Some(p.expiry));
                let v = self.wheel.get_mut(id).expect("pending");
                *v ^= 1 << 63;
                p.value ^= 1 << 63;
            }
            None => {
                assert_eq!(self.wheel.get(id), None);
                assert_eq!(self.wheel.get_mut(id), None);
                assert_eq!(self.wheel.expiry(id), None);
            }
        }
        assert_eq!(self.snapshot(), before, "a getter changed the wheel");
    }

    /// A timer handed out by a poll or drain to `now`.
    fn fired(&mut self, id: TimerId, value: u64, now: u64) {
        let p = self
            .model
            .remove(&id)
            .unwrap_or_else(|| panic!("{id:?} (value {value}) fired but is not pending"));
        assert_eq!(value, p.value, "fired with another timer's value");
        assert!(
            p.expiry <= now && p.expiry <= self.wheel.now(),
            "early: expiry {} fired at poll({now}), clock {}",
            p.expiry,
            self.wheel.now()
        );
        if self.mode() == Mode::Exact {
            if let Some(last) = self.last_fired {
                assert!(
                    last <= p.expiry,
                    "Exact out of order: {last} then {}",
                    p.expiry
                );
            }
            self.last_fired = Some(p.expiry);
        }
        self.counts.fired += 1;
        self.bury(id);
    }

    /// One poll, checked.
    fn poll(&mut self, now: u64) -> Option<TimerId> {
        let clock = self.wheel.now();
        if now < clock {
            let before = self.snapshot();
            assert_eq!(self.wheel.poll(now), None, "poll behind the clock fired");
            assert_eq!(
                self.snapshot(),
                before,
                "poll behind the clock changed the wheel"
            );
            return None;
        }
        match self.wheel.poll(now) {
            Some((id, value)) => {
                self.fired(id, value, now);
                self.check();
                Some(id)
            }
            None => {
                assert_eq!(self.wheel.now(), now, "clock after a drain");
                self.nothing_due();
                self.check();
                if let Some(next) = self.wheel.next_expiry() {
                    assert!(
                        next > now,
                        "next_expiry {next} not after the drain to {now}"
                    );
                }
                None
            }
        }
    }

    fn nothing_due(&self) {
        let now = self.wheel.now();
        if let Some((id, p)) = self.model.iter().find(|(_, p)| p.expiry <= now) {
            panic!(
                "{:?}: {id:?} with expiry {} still pending after a drain to {now}",
                self.mode(),
                p.expiry
            );
        }
    }

    /// Polls until `None`; returns what fired.
    fn drain_to(&mut self, now: u64) -> Vec<TimerId> {
        let mut out = Vec::new();
        while let Some(id) = self.poll(now) {
            out.push(id);
        }
        out
    }

    /// At most `n` through `Drain`, then drops it.
    fn drain_some(&mut self, now: u64, n: usize) -> usize {
        let got: Vec<(TimerId, u64)> = self.wheel.drain(now).take(n).collect();
        for &(id, value) in &got {
            self.fired(id, value, now);
        }
        if got.len() < n && now >= self.wheel.now() {
            self.nothing_due();
        }
        self.check();
        got.len()
    }

    /// Follows `next_expiry` until the wheel is empty.
    fn run_out(&mut self) {
        let mut wakes = 0u64;
        while let Some(wake) = self.wheel.next_expiry() {
            self.drain_to(wake.max(self.wheel.now()));
            wakes += 1;
            assert!(wakes < 100_000, "next_expiry loop does not end");
        }
        assert!(self.model.is_empty(), "left: {:?}", self.model);
        self.check_stats();
    }

    fn check(&self) {
        assert_eq!(self.wheel.len(), self.model.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.model.is_empty());
        let min = self.model.values().map(|p| p.expiry).min();
        let next = self.wheel.next_expiry();
        match (next, min) {
            (None, None) => {}
            (Some(n), Some(m)) => {
                // A timer already overdue (left by a dropped drain, or set in the past) is
                // due at the clock: the answer is then the clock, not the overdue expiry.
                let due_by = m.max(self.wheel.now());
                assert!(
                    n <= due_by,
                    "next_expiry {n} later than the earliest expiry {m} (clock {})",
                    self.wheel.now()
                );
                let exact_answer =
                    self.mode() == Mode::Coarse && !self.model.values().any(|p| p.pushed || p.far);
                if exact_answer && m >= self.wheel.now() {
                    assert_eq!(n, m, "Coarse next_expiry with no reset pushing later");
                }
            }
            _ => panic!("next_expiry {next:?} with earliest pending expiry {min:?}"),
        }
    }

    fn check_stats(&self) {
        let s = self.wheel.stats();
        let c = self.counts;
        assert_eq!(
            (s.inserted, s.fired, s.cancelled, s.resets),
            (c.inserted, c.fired, c.cancelled, c.resets),
            "stats"
        );
    }
}

/// Deadlines that put `n` timers in one bucket, each `n`, for a wheel whose clock is 0: the
/// shared expiry and the deadlines.
fn one_bucket(mode: Mode, n: usize) -> (u64, Vec<u64>) {
    match mode {
        // Level 1, slot 15: one slot, several deadlines.
        Mode::Exact => (1000, (0..n).map(|_| 1000).collect()),
        // Level 2 (granule 64): deadlines 961..=1024 all round up to 1024.
        Mode::Coarse => (1024, (0..n).map(|i| 961 + (i as u64 * 7) % 64).collect()),
    }
}

const SIZES: [usize; 10] = [1, 2, 7, 8, 9, 15, 16, 17, 24, 65];
const MODES: [Mode; 2] = [Mode::Exact, Mode::Coarse];

#[test]
fn buckets_at_chain_boundaries_fire_each_timer_once_on_time() {
    for mode in MODES {
        for n in SIZES {
            let mut c = Checker::with(mode);
            let (expiry, deadlines) = one_bucket(mode, n);
            let mut ids = Vec::new();
            for (i, d) in deadlines.into_iter().enumerate() {
                // Neighbours in other buckets, so the bucket's indices are not consecutive.
                if i % 3 == 0 {
                    c.insert(5_000 + i as u64);
                }
                ids.push(c.insert(d).unwrap());
            }
            assert!(c.drain_to(expiry - 1).iter().all(|id| !ids.contains(id)));
            let mut fired = c.drain_to(expiry);
            fired.sort_unstable_by_key(|id| id.to_bits());
            ids.sort_unstable_by_key(|id| id.to_bits());
            assert_eq!(fired, ids, "{mode:?} n {n}");
            c.run_out();
        }
    }
}

/// Orders in which to take timers of one bucket off: newest first (each a chain's head when it
/// goes), oldest first (tails), the middle out, odd positions, one chain of eight at a time.
fn orders(n: usize) -> Vec<Vec<usize>> {
    let newest: Vec<usize> = (0..n).rev().collect();
    let oldest: Vec<usize> = (0..n).collect();
    let mut middle: Vec<usize> = (0..n).collect();
    middle.sort_by_key(|&i| (i as isize - n as isize / 2).unsigned_abs());
    let odd: Vec<usize> = (0..n).filter(|i| i % 2 == 1).collect();
    let mut by_chain: Vec<usize> = (0..n).collect();
    by_chain.sort_by_key(|&i| (i % 8, n - i));
    vec![newest, oldest, middle, odd, by_chain]
}

#[test]
fn cancelling_heads_middles_and_tails_of_a_bucket() {
    for mode in MODES {
        for n in SIZES {
            for order in orders(n) {
                let mut c = Checker::with(mode);
                let (expiry, deadlines) = one_bucket(mode, n);
                let ids: Vec<_> = deadlines.iter().map(|&d| c.insert(d).unwrap()).collect();
                for &i in &order {
                    assert!(c.cancel(ids[i]), "{mode:?} n {n}");
                    assert!(!c.cancel(ids[i]), "second cancel");
                }
                let fired = c.drain_to(expiry);
                assert_eq!(fired.len(), n - order.len(), "{mode:?} n {n} {order:?}");
                c.run_out();
            }
        }
    }
}

/// While a bucket is drained, after every timer handed out, `act` gets the remaining timers of
/// the bucket (in insertion order) and the one just handed out.
fn drain_acting(mode: Mode, n: usize, mut act: impl FnMut(&mut Checker, &[TimerId], TimerId)) {
    let mut c = Checker::with(mode);
    let (expiry, deadlines) = one_bucket(mode, n);
    let mut rest: Vec<_> = deadlines.iter().map(|&d| c.insert(d).unwrap()).collect();
    let mut turns = 0;
    while let Some(id) = c.poll(expiry) {
        rest.retain(|&r| r != id);
        act(&mut c, &rest, id);
        rest.retain(|r| c.model.contains_key(r));
        turns += 1;
        assert!(turns <= 4 * n + 64, "drain does not end");
    }
    c.run_out();
}

/// The timer of `rest` that came right after `popped` on its chain, if chains are filled by
/// index modulo eight and pushed at the front: the newest remaining one of the same class. Any
/// other layout just makes this an arbitrary remaining timer, which is still a fair target.
fn new_head(rest: &[TimerId], popped: TimerId) -> Option<TimerId> {
    let class = popped.to_bits() % 8;
    rest.iter()
        .rev()
        .copied()
        .find(|r| r.to_bits() % 8 == class)
}

#[test]
fn cancelling_the_next_timer_of_a_chain_while_its_bucket_drains() {
    for mode in MODES {
        for n in SIZES {
            drain_acting(mode, n, |c, rest, popped| {
                if let Some(victim) = new_head(rest, popped) {
                    assert!(c.cancel(victim));
                }
            });
            // And the oldest remaining (a tail), and one from the middle.
            drain_acting(mode, n, |c, rest, _| {
                if let Some(&victim) = rest.first() {
                    assert!(c.cancel(victim));
                }
            });
            drain_acting(mode, n, |c, rest, _| {
                if !rest.is_empty() {
                    assert!(c.cancel(rest[rest.len() / 2]));
                }
            });
        }
    }
}

#[test]
fn resetting_the_next_timer_of_a_chain_while_its_bucket_drains() {
    for mode in MODES {
        for n in SIZES {
            // To at or before now, into the bucket itself, later, much later, past the top
            // level, to the end of time, and the next lap of the bucket being drained.
            let targets = |c: &Checker| {
                let now = c.wheel.now();
                [
                    0,
                    now,
                    now + 1,
                    now + 40,
                    now + 3_000,
                    now + (1 << 40),
                    u64::MAX - 1,
                    u64::MAX,
                    now + 64 * 8 * 8,
                ]
            };
            for k in 0..9 {
                drain_acting(mode, n, |c, rest, popped| {
                    if let Some(victim) = new_head(rest, popped) {
                        let to = targets(c)[k];
                        assert!(c.reset(victim, to));
                    }
                });
            }
            // Every remaining timer of the bucket, in turn, each to a target of its own.
            let mut turn = 0;
            drain_acting(mode, n, |c, rest, _| {
                for &r in rest.iter().rev() {
                    let to = targets(c)[turn % 9];
                    turn += 1;
                    assert!(c.reset(r, to));
                }
            });
        }
    }
}

#[test]
fn inserting_into_the_bucket_being_drained() {
    for mode in MODES {
        for n in SIZES {
            let mut extra = 0;
            drain_acting(mode, n, |c, _, _| {
                if extra < 2 * n {
                    extra += 1;
                    let now = c.wheel.now();
                    // Due at once, then the same bucket's next lap on level 0 and 2.
                    c.insert(now);
                    c.insert(now + 63);
                    c.insert(now + 64 * 64);
                }
            });
        }
    }
}

#[test]
fn resets_between_every_kind_of_bucket_with_crowded_neighbours() {
    for mode in MODES {
        for start in [0, 1 << 20, (1 << 36) - 3, u64::MAX - (1 << 30)] {
            let wheel = Wheel::builder(mode).start(start).build().unwrap();
            let mut c = Checker::new(wheel);
            let s = start;
            let places = [
                0,
                s,
                s + 1,
                s + 62,
                s + 63,
                s + 64,
                s + 1000,
                s + 4096,
                s + 300_000,
                s.saturating_add(1 << 36),
                s.saturating_add(1 << 37),
                s.saturating_add(1 << 50),
                u64::MAX - 7,
                u64::MAX,
            ];
            for (i, &from) in places.iter().enumerate() {
                for (j, &to) in places.iter().enumerate() {
                    // A crowd of nine in each of the two buckets, the mover in the middle.
                    let crowd: Vec<_> = (0..9).map(|_| c.insert(from).unwrap()).collect();
                    let mover = c.insert(from).unwrap();
                    let more: Vec<_> = (0..9).map(|_| c.insert(to).unwrap()).collect();
                    assert!(c.reset(mover, to), "{mode:?} {i} -> {j}");
                    if (i + j) % 2 == 0 {
                        c.cancel(crowd[4]);
                        c.cancel(more[8]);
                    }
                }
            }
            // Walk the clock in steps that stop inside buckets, then run out.
            for step in [1, 50, 63, 700, 5_000, 1 << 30, 1 << 40] {
                let now = c.wheel.now().saturating_add(step);
                c.drain_to(now);
            }
            c.run_out();
        }
    }
}

/// A timer past the top level reset to an earlier deadline that is still past it, alone on the
/// overflow list (so no other timer's expiry keeps the list's bound low).
#[test]
fn an_overflow_timer_reset_earlier_stays_on_time() {
    for mode in MODES {
        for start in [0, 12_345, 1 << 40] {
            for to in [start + (1 << 37), start + (1 << 45), u64::MAX - 1] {
                let wheel = Wheel::builder(mode).start(start).build().unwrap();
                let mut c = Checker::new(wheel);
                let t = c.insert(u64::MAX).unwrap();
                assert!(c.reset(t, to));
                let expiry = c.wheel.expiry(t).unwrap();
                c.drain_to(expiry - 1);
                assert_eq!(c.poll(expiry), Some(t), "{mode:?} start {start} to {to}");
                c.run_out();
            }
        }
    }
}

#[test]
fn reset_into_a_coarse_bucket_frozen_mid_drain() {
    let mut c = Checker::with(Mode::Coarse);
    let due: Vec<_> = (0..17).map(|_| c.insert(10).unwrap()).collect();
    let others: Vec<_> = (0..17).map(|i| c.insert(12 + i % 3).unwrap()).collect();
    // A jump: buckets 10..14 are frozen with the clock at 20; take a few.
    assert_eq!(c.drain_some(20, 3), 3);
    // Into the frozen buckets' ticks (due now), into their next lap (74 is slot 10 again),
    // and a timer of a frozen bucket pushed later while it is being handed out.
    for (k, &id) in due.iter().chain(&others).enumerate() {
        let to = [10, 20, 74, 76, 500, 0][k % 6];
        c.reset(id, to);
    }
    c.insert(74);
    c.insert(10);
    c.drain_to(20);
    c.run_out();
}

#[test]
fn any_u64_deadline_at_any_clock() {
    let clocks = [0, 1, 63, 1 << 36, u64::MAX / 2, u64::MAX - 64, u64::MAX - 1];
    for mode in MODES {
        let max_levels = if mode == Mode::Exact { 11 } else { 20 };
        for levels in [1, 2, 6, 9, max_levels] {
            for &start in &clocks {
                let wheel = Wheel::builder(mode)
                    .levels(levels)
                    .start(start)
                    .build()
                    .unwrap();
                let mut c = Checker::new(wheel);
                let deadlines = [
                    0,
                    start.saturating_sub(1),
                    start,
                    start.saturating_add(1),
                    start.saturating_add(1 << 35),
                    u64::MAX / 2 + 1,
                    u64::MAX - 64,
                    u64::MAX - 2,
                    u64::MAX - 1,
                    u64::MAX,
                ];
                let ids: Vec<_> = deadlines.iter().map(|&d| c.insert(d).unwrap()).collect();
                for (k, &id) in ids.iter().enumerate() {
                    c.reset(id, deadlines[(k * 3 + 1) % deadlines.len()]);
                }
                c.drain_to(u64::MAX - 1);
                c.drain_to(u64::MAX);
                assert!(c.model.is_empty());
                // At the end of time everything is due at once.
                let late = c.insert(7).unwrap();
                assert_eq!(c.wheel.expiry(late), Some(u64::MAX));
                assert_eq!(c.poll(u64::MAX), Some(late));
                c.run_out();
            }
        }
    }
}

#[test]
fn a_clock_stepping_back_fires_nothing_and_loses_nothing() {
    for mode in MODES {
        let mut c = Checker::with(mode);
        for i in 0..20 {
            c.insert(100 + i % 2);
            c.insert(5_000 + i);
        }
        assert_eq!(c.drain_some(200, 7), 7);
        // Behind the clock, wherever the drain left it.
        for back in [0, 1, 99, 100] {
            let now = c.wheel.now();
            if back < now {
                assert_eq!(c.poll(back), None);
            }
        }
        c.drain_to(200);
        assert_eq!(c.wheel.now(), 200);
        for back in [0, 150, 199] {
            c.poll(back);
            let id = c.insert(back).unwrap();
            assert_eq!(
                c.wheel.expiry(id),
                Some(200),
                "a past deadline is due at the clock"
            );
        }
        assert_eq!(c.drain_to(200).len(), 3);
        c.run_out();
    }
}

#[test]
fn a_dropped_drain_leaves_the_rest_pending() {
    for mode in MODES {
        for n in SIZES {
            let mut c = Checker::with(mode);
            let (expiry, deadlines) = one_bucket(mode, n);
            for &d in &deadlines {
                c.insert(d);
                c.insert(d / 2);
            }
            let mut left = 2 * n;
            for take in [0, 1, 2, 7, 8, 9].into_iter().cycle() {
                if left == 0 {
                    break;
                }
                let got = c.drain_some(expiry, take);
                assert_eq!(got, take.min(left), "{mode:?} n {n}");
                left -= got;
                assert_eq!(c.wheel.len(), left);
            }
            assert_eq!(c.drain_some(expiry, 5), 0);
            c.run_out();
        }
    }
}

#[test]
fn a_full_wheel_hands_the_value_back_and_recovers() {
    for mode in MODES {
        for cap in [1, 2, 7, 8, 9, 17] {
            let wheel = Wheel::builder(mode).capacity(cap).build().unwrap();
            let mut c = Checker::new(wheel);
            let ids: Vec<_> = (0..cap).map(|i| c.insert(10 + i as u64).unwrap()).collect();
            assert_eq!(c.insert(1), None);
            assert_eq!(c.insert(u64::MAX), None);
            // A freed entry is reused, and the old id stays stale.
            assert!(c.cancel(ids[cap / 2]));
            let fresh = c.insert(3).unwrap();
            assert_eq!(c.insert(3), None);
            c.touch(ids[cap / 2]);
            assert!(!c.reset(ids[cap / 2], 1));
            assert!(!c.cancel(ids[cap / 2]));
            c.touch(fresh);
            assert_eq!(c.poll(3), Some(fresh));
            c.insert(4).unwrap();
            c.run_out();
        }
        // Ownership: a value that is not Copy comes back whole.
        let mut wheel = Wheel::builder(mode).capacity(1).build().unwrap();
        wheel.insert(1, vec![1u8; 3]).unwrap();
        let full = wheel.insert(2, vec![7u8; 5]).unwrap_err();
        assert_eq!(full.into_inner(), vec![7u8; 5]);
        assert_eq!(wheel.len(), 1);
        assert!(
            Wheel::builder(mode)
                .capacity(0)
                .build::<()>()
                .unwrap_err()
                .is_capacity()
        );
    }
}

#[test]
fn foreign_and_stale_ids_do_nothing() {
    for mode in MODES {
        // Two wheels fed the same operations hand out ids with the same indices.
        let mut a = Checker::with(mode);
        let mut b = Checker::with(mode);
        let mut a_ids = Vec::new();
        for i in 0..40u64 {
            a_ids.push(a.insert(10 + i % 4).unwrap());
            b.insert(10 + i % 4).unwrap();
        }
        for &id in &a_ids {
            assert!(!b.cancel(id));
            assert!(!b.reset(id, 0));
            b.touch(id);
            // Forged ids near the real one.
            let bits = id.to_bits();
            for forged in [
                bits ^ (1 << 32),
                bits.wrapping_add(1 << 32),
                bits | 0xffff_ffff,
            ] {
                let forged = TimerId::from_bits(forged);
                assert!(!a.cancel(forged));
                assert!(!a.reset(forged, 1));
                a.touch(forged);
            }
        }
        // Stale: fired and cancelled, with their entries reused since.
        for &id in &a_ids[..20] {
            a.cancel(id);
        }
        a.drain_to(20);
        for _ in 0..40 {
            a.insert(30);
        }
        for &id in &a_ids {
            assert!(!a.cancel(id));
            assert!(!a.reset(id, 0));
            a.touch(id);
        }
        a.run_out();
        b.run_out();
    }
}

/// Coarse expiries against the documented slack: below one granule of the delay's level, at
/// most 8/63 of the delay, and never later than Linux's bucket for the same delay.
#[test]
fn coarse_slack_stays_within_the_documented_bound() {
    let mut rng = Rng(7);
    for levels in [1, 2, 3, 9, 14, 20] {
        for start in [0, 1, 7, 4095, 1 << 33, u64::MAX - (1 << 45), rng.next()] {
            let mut wheel = Wheel::builder(Mode::Coarse)
                .levels(levels)
                .start(start)
                .build()
                .unwrap();
            let mut delays: Vec<u64> = Vec::new();
            for n in 0..21u32 {
                let edge = 63u64.saturating_mul(1u64 << (3 * n).min(63));
                delays.extend([edge.saturating_sub(1), edge, edge.saturating_add(1)]);
            }
            for _ in 0..200 {
                delays.push(rng.spread(64));
            }
            for delay in delays {
                let deadline = start.saturating_add(delay);
                let delay = deadline - start;
                let id = wheel.insert(deadline, ()).unwrap();
                let expiry = wheel.expiry(id).unwrap();
                assert!(expiry >= deadline, "early: {deadline} -> {expiry}");
                let slack = u128::from(expiry - deadline);
                assert!(
                    slack * 63 < u128::from(delay) * 8 || slack == 0,
                    "slack {slack} over 8/63 of delay {delay} (levels {levels}, clock {start})"
                );
                if let Some(level) = coarse_level(levels, delay) {
                    let shift = 3 * level as u32;
                    assert!(
                        slack < 1u128 << shift,
                        "slack {slack} not below one granule"
                    );
                    let linux = ((u128::from(deadline) >> shift) + 1) << shift;
                    assert!(u128::from(expiry) <= linux, "later than Linux: {linux}");
                }
                assert_eq!(wheel.cancel(id), Some(()));
            }
        }
    }
}

/// Random operation sequences.
struct Fuzz {
    rng: Rng,
    c: Checker,
    foreign: Wheel<u64>,
    foreign_ids: Vec<TimerId>,
    live: Vec<TimerId>,
    /// Deadlines many timers share, so buckets hold long chains.
    hot: [u64; 4],
}

impl Fuzz {
    fn new(seed: u64, mode: Mode) -> Self {
        let mut rng = Rng(seed);
        let max_levels = if mode == Mode::Exact { 11 } else { 20 };
        let mut b = Wheel::builder(mode);
        if rng.chance(40) {
            b = b.levels(1 + rng.below(max_levels) as usize);
        }
        b = b.start(match rng.below(5) {
            0 => rng.next(),
            1 => u64::MAX - rng.below(1 << 16),
            2 => rng.below(1 << 40),
            _ => 0,
        });
        if rng.chance(30) {
            b = b.capacity(1 + rng.below(40) as usize);
        }
        let c = Checker::new(b.build().unwrap());
        let now = c.wheel.now();
        Fuzz {
            rng,
            c,
            foreign: Wheel::new(mode),
            foreign_ids: Vec::new(),
            live: Vec::new(),
            hot: [now; 4],
        }
    }

    fn deadline(&mut self) -> u64 {
        let now = self.c.wheel.now();
        let r = &mut self.rng;
        match r.below(16) {
            0 => 0,
            1 => now,
            2 => now.saturating_sub(r.below(1000)),
            3 => u64::MAX - r.below(3),
            4 => now.saturating_add(1u64 << r.below(64)),
            5..=10 => self.hot[r.below(4) as usize].saturating_add(r.below(3)),
            _ => now.saturating_add(r.spread(40)),
        }
    }

    fn pick(&mut self) -> TimerId {
        let r = &mut self.rng;
        match r.below(12) {
            0 if !self.c.dead.is_empty() => self.c.dead[r.below(self.c.dead.len() as u64) as usize],
            1 if !self.foreign_ids.is_empty() => {
                self.foreign_ids[r.below(self.foreign_ids.len() as u64) as usize]
            }
            2 => TimerId::from_bits(r.next()),
            _ if !self.live.is_empty() => self.live[r.below(self.live.len() as u64) as usize],
            _ => TimerId::from_bits(r.next() & 0xffff_ffff_0000_00ff),
        }
    }

    fn target(&mut self) -> u64 {
        let now = self.c.wheel.now();
        let r = &mut self.rng;
        match r.below(12) {
            0 => now,
            1 => now.saturating_sub(1 + r.below(100)),
            2 | 3 => self.c.wheel.next_expiry().unwrap_or(now).max(now),
            4 | 5 => self.hot[r.below(4) as usize].saturating_add(r.below(3)),
            6 => now.saturating_add(r.below(64)),
            7 => now.saturating_add(1u64 << r.below(64)),
            8 if r.chance(5) => u64::MAX,
            _ => now.saturating_add(r.below(5000)),
        }
    }

    fn mutate(&mut self) {
        match self.rng.below(10) {
            0..=3 => {
                let d = self.deadline();
                if let Some(id) = self.c.insert(d) {
                    self.live.push(id);
                }
            }
            4 | 5 => {
                let id = self.pick();
                self.c.cancel(id);
            }
            6..=8 => {
                let id = self.pick();
                let d = self.deadline();
                self.c.reset(id, d);
            }
            _ => {
                let id = self.pick();
                self.c.touch(id);
            }
        }
        self.live.retain(|id| self.c.model.contains_key(id));
    }

    fn step(&mut self) {
        match self.rng.below(20) {
            0 => {
                let i = self.rng.below(4) as usize;
                let now = self.c.wheel.now();
                let r = &mut self.rng;
                self.hot[i] = now.saturating_add(r.spread(30));
            }
            1 => {
                let d = self.deadline();
                if let Ok(id) = self.foreign.insert(d, 0) {
                    self.foreign_ids.push(id);
                }
            }
            2..=4 => {
                // A drain at one `now` with operations between its polls.
                let now = self.target();
                for _ in 0..1 + self.rng.below(12) {
                    if self.c.poll(now).is_none() {
                        break;
                    }
                    if self.rng.chance(60) {
                        self.mutate();
                    }
                }
            }
            5 => {
                let now = self.target();
                let n = self.rng.below(10) as usize;
                self.c.drain_some(now, n);
            }
            _ => self.mutate(),
        }
        self.live.retain(|id| self.c.model.contains_key(id));
    }
}

fn random_runs(seeds: std::ops::Range<u64>) {
    for seed in seeds {
        for mode in MODES {
            let mut f = Fuzz::new(seed * 2 + 1, mode);
            for _ in 0..800 {
                f.step();
            }
            f.c.run_out();
        }
    }
}

#[test]
fn random_operation_sequences_against_the_model() {
    random_runs(0..300);
}

/// A reset to a later deadline in Coarse mode is deferred: the timer stays in its bucket and is
/// placed again when that comes due. At clock 15 a deadline of 518 (delay 503, level 1, granule
/// 8) gets expiry 520, and `expiry()` says so. Placed again at clock 16, the expiry's delay is
/// 504, level 2 (granule 64): it is rounded again to 576. The timer does not fire at poll(520),
/// and Linux would give it 520 for that delay.
#[test]
fn a_coarse_deferred_reset_fires_at_the_expiry_it_was_given() {
    let mut c = Checker::with(Mode::Coarse);
    let t = c.insert(16).unwrap();
    assert_eq!(c.poll(15), None);
    assert!(c.reset(t, 518));
    assert_eq!(c.wheel.expiry(t), Some(520));
    assert_eq!(c.poll(16), None);
    assert_eq!(
        c.wheel.expiry(t),
        Some(520),
        "expiry moved when placed again"
    );
    assert_eq!(c.poll(520), Some(t));
    c.run_out();
}

//! Adversarial tests of `RawWheel` over storage written here: a `Vec` of link fields that
//! panics when the wheel touches an index it does not hold (never linked, unlinked, or handed
//! out), in two flavours (the trait's default helpers, or every helper overridden, and an expiry
//! the wheel may set or one the storage keeps as the deadline itself).
//!
//! Between calls the storage is walked as the `Links` docs describe it: every linked entry is on
//! the list its `list` names, chains start at an entry whose `prev` is `NIL`, and each `next`
//! is answered by a `prev`. Behaviour is checked against a naive model: everything linked comes
//! out exactly once, at or after its expiry and in the first poll that reaches it; unlinked
//! timers never do.

use std::collections::{HashMap, HashSet};

use tickwheel::raw::{Links, NIL, RawWheel};
use tickwheel::{Builder, Mode};

mod common;
use common::Rng;

#[derive(Debug, Clone, Copy)]
struct Entry {
    next: u32,
    prev: u32,
    list: u32,
    expiry: u64,
    /// Linked and not handed back: the wheel may touch it.
    held: bool,
}

/// The caller's storage.
struct Store {
    entries: Vec<Entry>,
    /// Ignore `set_expiry`: the expiry is the deadline the caller wrote.
    keep_deadline: bool,
}

impl Store {
    fn new(n: usize, keep_deadline: bool) -> Self {
        let blank = Entry {
            next: 0xdead,
            prev: 0xbeef,
            list: 0xf00d,
            expiry: 0,
            held: false,
        };
        Store {
            entries: vec![blank; n],
            keep_deadline,
        }
    }

    fn at(&self, i: u32) -> &Entry {
        let e = &self.entries[i as usize];
        assert!(e.held, "the wheel read index {i}, which it does not hold");
        e
    }

    fn at_mut(&mut self, i: u32) -> &mut Entry {
        let e = &mut self.entries[i as usize];
        assert!(e.held, "the wheel wrote index {i}, which it does not hold");
        e
    }

    /// Walks every list through the links alone.
    fn check_chains(&self) {
        let mut lists: HashMap<u32, Vec<u32>> = HashMap::new();
        for (i, e) in self.entries.iter().enumerate() {
            if e.held {
                lists.entry(e.list).or_default().push(i as u32);
            }
        }
        for (list, members) in lists {
            let mut seen = HashSet::new();
            for &head in members
                .iter()
                .filter(|&&i| self.entries[i as usize].prev == NIL)
            {
                let mut at = head;
                loop {
                    assert!(seen.insert(at), "list {list}: {at} reached twice");
                    let next = self.entries[at as usize].next;
                    if next == NIL {
                        break;
                    }
                    let n = self.entries.get(next as usize).unwrap_or_else(|| {
                        panic!("list {list}: next of {at} is {next}, out of range")
                    });
                    assert!(n.held, "list {list}: next of {at} is {next}, not linked");
                    assert_eq!(n.list, list, "list {list}: next of {at} is on another list");
                    assert_eq!(n.prev, at, "list {list}: prev of {next} is not {at}");
                    at = next;
                }
            }
            assert_eq!(
                seen.len(),
                members.len(),
                "list {list}: entries reached from heads with prev == NIL"
            );
        }
    }
}

impl Links for Store {
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
        // Asked of indices the wheel let go of too: one this store took back is on no list.
        let e = &self.entries[i as usize];
        e.held && e.list == v
    }
    fn expiry(&self, i: u32) -> u64 {
        self.at(i).expiry
    }
    fn set_expiry(&mut self, i: u32, v: u64) {
        if !self.keep_deadline {
            self.at_mut(i).expiry = v;
        }
    }
}

/// The same storage with every helper of the trait overridden, as a record table would.
struct Overriding(Store);

impl Links for Overriding {
    fn next(&self, i: u32) -> u32 {
        self.0.next(i)
    }
    fn set_next(&mut self, i: u32, v: u32) {
        self.0.set_next(i, v)
    }
    fn prev(&self, i: u32) -> u32 {
        self.0.prev(i)
    }
    fn set_prev(&mut self, i: u32, v: u32) {
        self.0.set_prev(i, v)
    }
    fn list(&self, i: u32) -> u32 {
        self.0.list(i)
    }
    fn set_list(&mut self, i: u32, v: u32) {
        self.0.set_list(i, v)
    }
    fn is_on(&self, i: u32, v: u32) -> bool {
        self.0.is_on(i, v)
    }
    fn expiry(&self, i: u32) -> u64 {
        self.0.expiry(i)
    }
    fn set_expiry(&mut self, i: u32, v: u64) {
        self.0.set_expiry(i, v)
    }
    fn set_prev_unless_nil(&mut self, i: u32, prev: u32) {
        // A lookup that fails for NIL anyway: test once.
        if let Some(e) = self.0.entries.get_mut(i as usize) {
            assert!(e.held, "the wheel wrote index {i}, which it does not hold");
            e.prev = prev;
        }
    }
    fn unlink_fields(&self, i: u32) -> (u32, u32, u32) {
        let e = self.0.at(i);
        (e.next, e.prev, e.list)
    }
    fn next_and_expiry(&self, i: u32) -> (u32, u64) {
        let e = self.0.at(i);
        (e.next, e.expiry)
    }
    fn set_head(&mut self, i: u32, next: u32, list: u32, expiry: u64) {
        let keep = self.0.keep_deadline;
        let e = self.0.at_mut(i);
        e.list = list;
        e.prev = NIL;
        e.next = next;
        if !keep {
            e.expiry = expiry;
        }
    }
}

trait Storage: Links {
    fn store(&mut self) -> &mut Store;
}

impl Storage for Store {
    fn store(&mut self) -> &mut Store {
        self
    }
}

impl Storage for Overriding {
    fn store(&mut self) -> &mut Store {
        &mut self.0
    }
}

#[derive(Debug, Clone, Copy)]
struct Linked {
    /// The expiry `link` or `relink` returned.
    placed: u64,
    /// The storage raised the expiry since, without telling the wheel.
    raised: bool,
}

/// A raw wheel, its storage and the model.
struct Harness<S> {
    wheel: RawWheel,
    links: S,
    model: HashMap<u32, Linked>,
    counts: (u64, u64, u64, u64),
}

impl<S: Storage> Harness<S> {
    fn new(wheel: RawWheel, links: S) -> Self {
        Harness {
            wheel,
            links,
            model: HashMap::new(),
            counts: (0, 0, 0, 0),
        }
    }

    fn free(&mut self, i: u32) -> bool {
        !self.links.store().entries[i as usize].held
    }

    fn link(&mut self, i: u32, deadline: u64) {
        let clock = self.wheel.now();
        let s = self.links.store();
        let e = &mut s.entries[i as usize];
        assert!(!e.held);
        e.held = true;
        e.expiry = deadline;
        let placed = self.wheel.link(&mut self.links, i, deadline);
        assert!(placed >= deadline || (deadline <= clock && placed == clock));
        self.model.insert(
            i,
            Linked {
                placed,
                raised: false,
            },
        );
        self.counts.0 += 1;
        self.check();
    }

    fn unlink(&mut self, i: u32) {
        self.wheel.unlink(&mut self.links, i);
        self.links.store().entries[i as usize].held = false;
        self.model.remove(&i).expect("unlinked a timer not linked");
        self.counts.2 += 1;
        self.check();
    }

    fn relink(&mut self, i: u32, deadline: u64) {
        let clock = self.wheel.now();
        if self.links.store().keep_deadline {
            self.links.store().entries[i as usize].expiry = deadline;
        }
        let placed = self.wheel.relink(&mut self.links, i, deadline);
        assert!(placed >= deadline || (deadline <= clock && placed == clock));
        self.model.insert(
            i,
            Linked {
                placed,
                raised: false,
            },
        );
        self.counts.3 += 1;
        self.check();
    }

    /// Raises a pending timer's expiry behind the wheel's back (only one not yet due, the case
    /// the docs promise for).
    fn raise(&mut self, i: u32, by: u64) {
        let now = self.wheel.now();
        let e = &mut self.links.store().entries[i as usize];
        if e.expiry > now {
            e.expiry = e.expiry.saturating_add(by);
            self.model.get_mut(&i).unwrap().raised = true;
        }
    }

    fn poll(&mut self, now: u64) -> Option<u32> {
        let clock = self.wheel.now();
        let got = self.wheel.poll(&mut self.links, now);
        if now < clock {
            assert_eq!(got, None, "poll behind the clock fired");
            assert_eq!(self.wheel.now(), clock);
            return None;
        }
        match got {
            Some(i) => {
                let m = self
                    .model
                    .remove(&i)
                    .expect("handed out a timer not linked");
                let e = self.links.store().entries[i as usize];
                assert!(e.held, "handed out {i} twice");
                assert!(e.expiry <= now, "early: expiry {} at poll({now})", e.expiry);
                // Storage that keeps the deadline may fire between it and the placement.
                if !m.raised && !self.links.store().keep_deadline {
                    assert!(m.placed <= now, "early: placed at {} poll({now})", m.placed);
                }
                self.links.store().entries[i as usize].held = false;
                self.counts.1 += 1;
            }
            None => {
                assert_eq!(self.wheel.now(), now);
                for (i, m) in &self.model {
                    assert!(
                        m.raised || m.placed > now,
                        "{i} placed at {} still linked after a drain to {now}",
                        m.placed
                    );
                }
            }
        }
        self.check();
        got
    }

    fn drain_to(&mut self, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| self.poll(now)).collect()
    }

    fn check(&mut self) {
        self.links.store().check_chains();
        assert_eq!(self.wheel.len(), self.model.len());
        // A raised timer is placed again at a tick of the wheel's choosing: no bound from it.
        let min = self
            .model
            .values()
            .filter(|m| !m.raised)
            .map(|m| m.placed)
            .min();
        match (self.wheel.next_expiry(), min) {
            (None, None) => {}
            (Some(_), None) if !self.model.is_empty() => {}
            (Some(n), Some(m)) => assert!(
                n <= m.max(self.wheel.now()),
                "next_expiry {n} later than the earliest expiry {m}"
            ),
            (n, m) => panic!("next_expiry {n:?} with earliest expiry {m:?}"),
        }
    }

    fn run_out(&mut self) {
        self.drain_to(u64::MAX);
        assert!(self.model.is_empty(), "left linked: {:?}", self.model);
        let s = self.wheel.stats();
        assert_eq!(
            (s.inserted, s.fired, s.cancelled, s.resets),
            self.counts,
            "stats"
        );
    }
}

const MODES: [Mode; 2] = [Mode::Exact, Mode::Coarse];
const SIZES: [usize; 9] = [1, 2, 7, 8, 9, 16, 17, 24, 65];

/// Runs `body` for each mode and flavour of storage: (mode, keep_deadline, overriding).
fn each_flavour(mut body: impl FnMut(Mode, bool, bool)) {
    for mode in MODES {
        for keep_deadline in [false, true] {
            for overriding in [false, true] {
                body(mode, keep_deadline, overriding);
            }
        }
    }
}

fn harness<S: Storage>(mode: Mode, links: S) -> Harness<S> {
    Harness::new(Builder::new(mode).build_raw().unwrap(), links)
}

/// One bucket of `n` timers whose indices are `first, first + stride, ...`; after each one
/// handed out, the entry that then heads its chain (`prev == NIL`, seen in the storage) is
/// unlinked, relinked to `to`, or left alone.
fn drain_hitting_heads<S: Storage>(h: &mut Harness<S>, n: usize, stride: u32, act: u8) {
    let ids: Vec<u32> = (0..n as u32).map(|k| 1 + k * stride).collect();
    for &i in &ids {
        h.link(i, 1000);
    }
    let due = h.model[&ids[0]].placed;
    while let Some(popped) = h.poll(due) {
        let head = h
            .model
            .keys()
            .copied()
            .find(|&i| i % 8 == popped % 8 && h.links.store().entries[i as usize].prev == NIL);
        if let Some(head) = head {
            match act {
                0 => h.unlink(head),
                1 => h.relink(head, 0),
                2 => h.relink(head, due + 5_000),
                3 => h.relink(head, u64::MAX),
                _ => {}
            }
        }
    }
    h.run_out();
}

#[test]
fn chain_heads_hit_while_their_bucket_drains() {
    each_flavour(|mode, keep, over| {
        for n in SIZES {
            for stride in [1, 8, 3] {
                for act in 0..5 {
                    let store = Store::new(1 + 65 * 8, keep);
                    if over {
                        drain_hitting_heads(&mut harness(mode, Overriding(store)), n, stride, act);
                    } else {
                        drain_hitting_heads(&mut harness(mode, store), n, stride, act);
                    }
                }
            }
        }
    });
}

/// Random links, unlinks, relinks, raised expiries and polls on 64 indices.
fn random_run<S: Storage>(seed: u64, mode: Mode, links: S) {
    let mut rng = Rng(seed);
    let start = match rng.below(4) {
        0 => rng.next(),
        1 => u64::MAX - rng.below(1 << 12),
        _ => 0,
    };
    let max_levels = if mode == Mode::Exact { 11 } else { 20 };
    let levels = if rng.below(3) == 0 {
        1 + rng.below(max_levels) as usize
    } else if mode == Mode::Exact {
        6
    } else {
        9
    };
    let wheel = Builder::new(mode)
        .levels(levels)
        .start(start)
        .build_raw()
        .unwrap();
    let mut h = Harness::new(wheel, links);
    let mut hot = [start; 3];
    for _ in 0..700 {
        let now = h.wheel.now();
        let deadline = match rng.below(10) {
            0 => now.saturating_sub(rng.below(50)),
            1 => u64::MAX - rng.below(2),
            2 => now.saturating_add(1 << rng.below(64)),
            3..=6 => hot[rng.below(3) as usize].saturating_add(rng.below(2)),
            _ => now.saturating_add(rng.spread(40)),
        };
        // Indices of one chain class more often than not, so chains grow long.
        let i = if rng.below(3) == 0 {
            rng.below(64) as u32
        } else {
            (rng.below(8) * 8 + 5) as u32
        };
        match rng.below(12) {
            0..=3 if h.free(i) => h.link(i, deadline),
            0..=3 => h.relink(i, deadline),
            4 | 5 if !h.free(i) => h.unlink(i),
            6 if !h.free(i) => h.raise(i, rng.spread(20)),
            7 => hot[rng.below(3) as usize] = now.saturating_add(rng.spread(30)),
            _ => {
                let target = match rng.below(6) {
                    0 => now.saturating_sub(rng.below(10)),
                    1 => h.wheel.next_expiry().unwrap_or(now),
                    2 => hot[rng.below(3) as usize],
                    3 => now.saturating_add(1 << rng.below(64)),
                    _ => now.saturating_add(rng.below(3000)),
                };
                for _ in 0..1 + rng.below(10) {
                    if h.poll(target).is_none() {
                        break;
                    }
                    // Between polls at one `now`: link, relink or unlink.
                    let j = (rng.below(8) * 8 + 5) as u32;
                    match rng.below(4) {
                        0 if h.free(j) => h.link(j, target.saturating_sub(rng.below(3))),
                        1 if !h.free(j) => h.relink(j, now.saturating_add(rng.below(200))),
                        2 if !h.free(j) => h.unlink(j),
                        _ => {}
                    }
                }
            }
        }
    }
    h.run_out();
}

#[test]
fn random_operation_sequences_against_the_model() {
    for seed in 0..120 {
        each_flavour(|mode, keep, over| {
            let store = Store::new(64, keep);
            let seed = seed * 8 + u64::from(keep) * 2 + u64::from(over);
            if over {
                random_run(seed, mode, Overriding(store));
            } else {
                random_run(seed, mode, store);
            }
        });
    }
}

#[test]
fn a_timer_unlinked_is_never_handed_out_and_never_touched_again() {
    each_flavour(|mode, keep, _| {
        let mut h = harness(mode, Store::new(40, keep));
        for i in 0..40 {
            h.link(i, 100 + u64::from(i % 3));
        }
        // Heads (the last linked of each chain), tails, and the middle.
        for i in [39, 38, 0, 1, 20, 21, 22, 23, 24, 25, 26, 27, 28] {
            h.unlink(i);
        }
        let out = h.drain_to(200);
        assert_eq!(out.len(), 27);
        assert!(out.iter().all(|i| ![39, 38, 0, 1].contains(i)));
        h.run_out();
    });
}

//! Exact mode's batches: the timers a cascade files on level 1, kept in one array per slot
//! instead of that slot's list, and the *run*, the batch of the level-1 slot that came due last,
//! handed out tick by tick.
//!
//! ## Model
//! A cascade from level 2 or above reads each timer's expiry anyway; one that lands on level 1
//! is appended to the batch of its slot with its tick there (its level-0 digit), and its entry
//! is made the one entry of a list of its own, the list id `base + (slot << 25 | position)`
//! (`prev` and `next` are `NIL`). When the clock reaches the slot's start, the wheel makes the
//! batch the run: its positions are chained by tick through the array, and the timers linked
//! into the slot's list (inserted or relinked there directly) are walked and appended to it.
//! Each tick of the window is then handed out from its chain. So a timer that came down from
//! level 2 is read twice on its way out, by the cascade that filed it and when it is handed out,
//! instead of three times (that cascade, the walk of its level-1 list into level 0's lists, and
//! the pop off one of those), and the loads of a tick's hand-out come from an array, not from the
//! previous timer's link.
//!
//! An unlink finds the position from the entry's list id alone and leaves `NIL` there; a timer
//! handed out leaves `NIL` too. A batch whose timers have all left is emptied, and the run's
//! batch when the next run begins or the next cascade files timers.
//!
//! ## Invariants (checked by [`Batches::check`])
//! - a position holds a timer iff that timer's entry names the position as its list;
//! - a waiting batch holds `live[slot]` timers, and its bit in `waiting` is set iff that is not
//!   zero; a batch with no timers is empty (no positions);
//! - the run's timers are on the chain of the tick they were filed for, `run_live[tick]` of
//!   them, with their bits in `run_ticks`; `frozen` is the bit of one of those ticks, or 0;
//! - the run has timers only while the clock is in its window, and then no cascade files timers
//!   (a cascade at or above level 2 comes due at the start of a level-2 slot, after the window);
//!   the wheel hands a tick's run timers out after those linked into the tick's level-0 bucket.
//!
//! ## Given up
//! - Memory: 8 bytes a timer waiting on level 1 or in the run (its position), and each batch
//!   keeps the capacity of the largest it held.
//! - A timer whose expiry rose while it waited is placed again at the tick it was filed for, not
//!   at its level-1 slot's start: the wheel reads its expiry then, as it does for a level-0
//!   bucket.
//! - A batch holds at most 2^25 timers; past that a cascade links timers into the slot's list.

use crate::buckets::Bucket;
use crate::geometry::SLOTS;
use crate::lists::{Links, NIL};

/// log2 of the positions a batch has list ids for.
const POSITION_BITS: u32 = 25;
/// Positions a batch has list ids for.
const BATCH_LEN: usize = 1 << POSITION_BITS;
/// Bits of a position's link that hold the next position of its tick's chain.
const NEXT_BITS: u32 = 26;
/// The end of a tick's chain (no position is this large).
const END: u32 = (1 << NEXT_BITS) - 1;

/// One position: the timer (`NIL` once it left) and, packed, its tick and the next position of
/// that tick's chain (meaningful in the run only).
#[derive(Debug, Clone, Copy)]
struct Filed {
    index: u32,
    link: u32,
}

impl Filed {
    fn new(index: u32, tick: usize, next: u32) -> Self {
        debug_assert!(tick < SLOTS && next <= END);
        Filed {
            index,
            link: (tick as u32) << NEXT_BITS | next,
        }
    }

    #[inline]
    fn tick(self) -> usize {
        (self.link >> NEXT_BITS) as usize & (SLOTS - 1)
    }

    #[inline]
    fn next(self) -> u32 {
        self.link & END
    }
}

/// Where a batched timer waits: in the batch of a level-1 slot, for a tick of that slot's
/// window, or in the run, for a tick of the window the clock is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Waiting { slot: usize, tick: usize },
    Run { tick: usize },
}

/// The batches of level 1 and the run.
#[derive(Debug)]
pub(crate) struct Batches {
    /// The list id of position 0 of slot 0's batch.
    base: Bucket,
    /// Per level-1 slot: its timers by position.
    batches: Vec<Vec<Filed>>,
    /// Per slot: timers in its batch (the run's counted in `run_live` instead).
    live: [u32; SLOTS],
    /// Bit `s` set iff `live[s] > 0`.
    waiting: u64,
    /// The slot whose batch is the run, `SLOTS` if none.
    run: usize,
    /// Per tick of the run's window: the first position of its chain, `END` if none.
    heads: [u32; SLOTS],
    /// Per tick: the run's timers for it.
    run_live: [u32; SLOTS],
    /// Bit `d` set iff `run_live[d] > 0`.
    run_ticks: u64,
    /// The bit of the tick being handed out, or 0.
    frozen: u64,
}

impl Batches {
    /// No batches, with list ids from `base`.
    pub(crate) fn new(base: Bucket) -> Self {
        assert!(
            u64::from(base) + ((SLOTS as u64) << POSITION_BITS) < u64::from(u32::MAX - 1),
            "list ids fit below u32::MAX - 1"
        );
        Batches {
            base,
            batches: (0..SLOTS).map(|_| Vec::new()).collect(),
            live: [0; SLOTS],
            waiting: 0,
            run: SLOTS,
            heads: [END; SLOTS],
            run_live: [0; SLOTS],
            run_ticks: 0,
            frozen: 0,
        }
    }

    /// True if `list` is a batch position rather than a list.
    #[inline(always)]
    pub(crate) fn holds(&self, list: Bucket) -> bool {
        list >= self.base
    }

    /// Level 1's slots with a waiting batch.
    #[inline]
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting
    }

    /// The ticks of the run's window that have timers left.
    #[inline]
    pub(crate) fn run_ticks(&self) -> u64 {
        self.run_ticks
    }

    /// Files a timer a cascade detached, with `expiry`, in the batch of level-1 `slot` for
    /// `tick`; `false` if the batch is full (link it into the slot's list instead).
    #[inline(always)]
    pub(crate) fn file(
        &mut self,
        links: &mut impl Links,
        index: u32,
        (slot, tick): (usize, usize),
        expiry: u64,
    ) -> bool {
        debug_assert_eq!(self.run, SLOTS, "no cascade files timers during a run");
        let slot = slot & (SLOTS - 1);
        let at = self.batches[slot].len();
        if at >= BATCH_LEN {
            return false;
        }
        links.set_head(index, NIL, self.id(slot, at), expiry);
        self.batches[slot].push(Filed::new(index, tick, END));
        self.live[slot] += 1;
        self.waiting |= 1 << slot;
        true
    }

    /// The list id of `slot`'s position `at`.
    #[inline(always)]
    fn id(&self, slot: usize, at: usize) -> Bucket {
        self.base + ((slot << POSITION_BITS) | at) as Bucket
    }

    /// Forgets the run, whose timers have all left.
    #[inline]
    pub(crate) fn end_run(&mut self) {
        if self.run == SLOTS {
            return;
        }
        debug_assert_eq!(self.run_ticks, 0, "the run is handed out");
        self.batches[self.run].clear();
        self.run = SLOTS;
        self.heads = [END; SLOTS];
    }

    /// Makes the batch of level-1 `slot`, whose start the clock has reached, the run, chaining
    /// its timers by tick; returns how many it holds.
    pub(crate) fn begin_run(&mut self, slot: usize) -> u64 {
        self.end_run();
        let slot = slot & (SLOTS - 1);
        self.run = slot;
        self.waiting &= !(1 << slot);
        let live = std::mem::take(&mut self.live[slot]);
        for (at, filed) in self.batches[slot].iter_mut().enumerate() {
            if filed.index == NIL {
                continue;
            }
            let tick = filed.tick();
            *filed = Filed::new(filed.index, tick, self.heads[tick]);
            self.heads[tick] = at as u32;
            self.run_live[tick] += 1;
            self.run_ticks |= 1 << tick;
        }
        u64::from(live)
    }

    /// Appends a detached timer with `expiry` to the run, for `tick` of its window; `false` if
    /// the run is full (link it into the level-0 bucket instead).
    #[inline(always)]
    pub(crate) fn link_run(
        &mut self,
        links: &mut impl Links,
        index: u32,
        tick: usize,
        expiry: u64,
    ) -> bool {
        let run = self.run;
        debug_assert_ne!(run, SLOTS, "a run begun");
        let at = self.batches[run].len();
        if at >= BATCH_LEN {
            return false;
        }
        links.set_head(index, NIL, self.id(run, at), expiry);
        let tick = tick & (SLOTS - 1);
        self.batches[run].push(Filed::new(index, tick, self.heads[tick]));
        self.heads[tick] = at as u32;
        self.run_live[tick] += 1;
        self.run_ticks |= 1 << tick;
        true
    }

    /// Where the timer whose list is `list` (a batch position) waits.
    #[inline]
    pub(crate) fn place(&self, list: Bucket) -> Place {
        let (slot, at) = self.split(list);
        let tick = self.batches[slot][at].tick();
        if slot == self.run {
            Place::Run { tick }
        } else {
            Place::Waiting { slot, tick }
        }
    }

    /// The slot and position of the batch position `list`.
    #[inline(always)]
    fn split(&self, list: Bucket) -> (usize, usize) {
        let rel = (list - self.base) as usize;
        ((rel >> POSITION_BITS) & (SLOTS - 1), rel & (BATCH_LEN - 1))
    }

    /// Takes the timer out of the batch position `list`.
    #[inline]
    pub(crate) fn unlink(&mut self, list: Bucket) {
        let (slot, at) = self.split(list);
        let filed = &mut self.batches[slot][at];
        debug_assert_ne!(filed.index, NIL, "batch position {list} left twice");
        filed.index = NIL;
        let tick = filed.tick();
        if slot == self.run {
            self.run_live[tick] -= 1;
            if self.run_live[tick] == 0 {
                self.run_ticks &= !(1 << tick);
                self.frozen &= !(1 << tick);
            }
        } else {
            self.live[slot] -= 1;
            if self.live[slot] == 0 {
                self.waiting &= !(1 << slot);
                self.batches[slot].clear();
            }
        }
    }

    /// Starts handing out the run's timers of `tick`, if it has any.
    #[inline]
    pub(crate) fn freeze(&mut self, tick: usize) {
        let bit = 1 << (tick & (SLOTS - 1));
        if self.run_ticks & bit != 0 {
            debug_assert_eq!(self.frozen, 0, "one tick at a time");
            self.frozen = bit;
        }
    }

    /// Calls `f` with each timer of the tick being handed out, if one is, in the order
    /// [`take`](Self::take) will hand them out (the wheel prefetches their entries).
    #[inline]
    pub(crate) fn each_frozen(&self, mut f: impl FnMut(u32)) {
        if self.frozen == 0 {
            return;
        }
        let tick = self.frozen.trailing_zeros() as usize & (SLOTS - 1);
        let batch = &self.batches[self.run & (SLOTS - 1)];
        let mut at = self.heads[tick];
        while at != END {
            let filed = batch[at as usize];
            if filed.index != NIL {
                f(filed.index);
            }
            at = filed.next();
        }
    }

    /// True if the run is handing out a tick's timers.
    #[inline]
    pub(crate) fn frozen(&self) -> bool {
        self.frozen != 0
    }

    /// True if the run is handing out the timers of `tick`.
    #[inline]
    pub(crate) fn frozen_at(&self, tick: usize) -> bool {
        self.frozen == 1 << (tick & (SLOTS - 1))
    }

    /// Detaches the next timer of the tick being handed out, if one is. Link it again or hand
    /// it out before the next call.
    #[inline(always)]
    pub(crate) fn take(&mut self) -> Option<u32> {
        if self.frozen == 0 {
            return None;
        }
        let tick = self.frozen.trailing_zeros() as usize & (SLOTS - 1);
        let batch = &mut self.batches[self.run & (SLOTS - 1)];
        let mut at = self.heads[tick];
        // `run_live[tick] > 0`: a timer is left on the chain, past the positions it lost.
        let index = loop {
            let filed = &mut batch[at as usize];
            at = filed.next();
            if filed.index != NIL {
                break std::mem::replace(&mut filed.index, NIL);
            }
        };
        self.heads[tick] = at;
        self.run_live[tick] -= 1;
        if self.run_live[tick] == 0 {
            self.run_ticks &= !self.frozen;
            self.frozen = 0;
        }
        Some(index)
    }

    /// Forgets every timer.
    pub(crate) fn clear(&mut self) {
        *self = Batches::new(self.base);
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Every timer batched, with its list id and where it waits; for checks in tests.
    pub(crate) fn members(&self) -> Vec<(Bucket, u32, Place)> {
        let mut out = Vec::new();
        for (slot, batch) in self.batches.iter().enumerate() {
            for (at, filed) in batch.iter().enumerate() {
                if filed.index != NIL {
                    out.push((
                        self.id(slot, at),
                        filed.index,
                        self.place(self.id(slot, at)),
                    ));
                }
            }
        }
        out
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Panics unless the counts, bits and chains agree with the positions.
    pub(crate) fn check(&self) {
        let mut live = [0u32; SLOTS];
        let mut run_live = [0u32; SLOTS];
        for (_, _, place) in self.members() {
            match place {
                Place::Waiting { slot, .. } => live[slot] += 1,
                Place::Run { tick } => run_live[tick] += 1,
            }
        }
        assert_eq!(live, self.live, "batch counts");
        assert_eq!(run_live, self.run_live, "run counts");
        for slot in 0..SLOTS {
            assert_eq!(self.waiting >> slot & 1 == 1, live[slot] > 0, "slot {slot}");
            if live[slot] == 0 && slot != self.run {
                assert!(self.batches[slot].is_empty(), "batch {slot} emptied");
            }
            assert_eq!(
                self.run_ticks >> slot & 1 == 1,
                run_live[slot] > 0,
                "tick {slot}"
            );
        }
        assert!(self.frozen.count_ones() <= 1 && self.frozen & !self.run_ticks == 0);
        if self.run == SLOTS {
            assert_eq!(self.run_ticks, 0, "no run, no ticks");
            return;
        }
        assert_eq!(
            self.waiting >> self.run & 1,
            0,
            "the run's slot is not waiting"
        );
        // Every timer of the run is on its tick's chain.
        let batch = &self.batches[self.run];
        for (tick, &head) in self.heads.iter().enumerate() {
            let mut at = head;
            let mut on_chain = 0;
            while at != END {
                let filed = batch[at as usize];
                assert_eq!(filed.tick(), tick, "position {at} on tick {tick}'s chain");
                on_chain += u32::from(filed.index != NIL);
                at = filed.next();
            }
            assert_eq!(on_chain, run_live[tick], "tick {tick}'s chain");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::plain::Plain;

    #[test]
    fn a_batch_becomes_the_run_and_hands_out_by_tick() {
        let mut links = Plain::with(8);
        let mut b = Batches::new(100);
        assert!(b.file(&mut links, 0, (3, 5), 0));
        assert!(b.file(&mut links, 1, (3, 2), 0));
        assert!(b.file(&mut links, 2, (3, 5), 0));
        assert!(b.file(&mut links, 3, (4, 0), 0));
        assert_eq!(b.waiting(), 0b11000);
        assert_eq!(links.list(1), 100 + (3 << POSITION_BITS) + 1);
        assert_eq!(b.place(links.list(3)), Place::Waiting { slot: 4, tick: 0 });
        b.unlink(links.list(2));
        b.check();
        assert_eq!(b.begin_run(3), 2);
        assert!(b.link_run(&mut links, 5, 5, 0));
        assert_eq!(b.place(links.list(5)), Place::Run { tick: 5 });
        assert_eq!(b.run_ticks(), 0b100100);
        b.check();
        b.freeze(2);
        assert_eq!(b.take(), Some(1));
        assert!(!b.frozen());
        b.freeze(5);
        assert!(b.frozen_at(5));
        assert_eq!(b.take(), Some(5), "newest first");
        b.unlink(links.list(0));
        assert!(!b.frozen(), "its last timer left");
        assert_eq!(b.take(), None);
        b.check();
        // Slot 4 waits on; a cascade may file more once the run is over.
        b.end_run();
        assert!(b.file(&mut links, 6, (3, 1), 0));
        assert_eq!(
            links.list(6),
            100 + (3 << POSITION_BITS),
            "the run's batch was emptied"
        );
        b.unlink(links.list(3));
        b.check();
        assert_eq!(b.waiting(), 0b1000);
    }

    #[test]
    fn each_frozen_names_what_take_hands_out_in_order() {
        let mut links = Plain::with(16);
        let mut b = Batches::new(100);
        for i in 0..6 {
            assert!(b.file(&mut links, i, (2, if i % 2 == 0 { 7 } else { 9 }), 0));
        }
        b.begin_run(2);
        assert!(b.link_run(&mut links, 10, 7, 0));
        b.unlink(links.list(2));
        let mut named = Vec::new();
        b.each_frozen(|i| named.push(i));
        assert!(named.is_empty(), "nothing frozen");
        b.freeze(7);
        b.each_frozen(|i| named.push(i));
        let mut taken = Vec::new();
        while let Some(i) = b.take() {
            taken.push(i);
        }
        assert_eq!(named, taken);
        assert_eq!(
            taken,
            [10, 4, 0],
            "tick 7's timers, newest first, without the one that left"
        );
        b.freeze(9);
        named.clear();
        b.each_frozen(|i| named.push(i));
        assert_eq!(named, [5, 3, 1]);
        b.check();
    }
}

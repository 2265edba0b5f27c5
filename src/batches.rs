//! Exact mode's batches: the timers on level 2 kept in one array per slot instead of that slot's
//! list; once the clock reaches a slot, its array's positions listed by level-1 slot (the
//! *window* and its *chains*), and the chain of the level-1 slot the clock is in listed by tick
//! (the *run*), handed out tick by tick.
//!
//! ## Model
//! A timer the wheel places on level 2 (linked there, or moved there by a cascade or a sweep) is
//! appended to its slot's batch with the tick it is filed for in that slot's window of 4096
//! ticks (its expiry's two lowest digits), and its entry is made the one entry of a list of its
//! own, the list id `base + (slot << 25 | position)` (`prev` and `next` are `NIL`). When the
//! clock reaches the slot's start, the batch becomes the window: its positions are sorted into
//! one list per level-1 slot (a chain), from the ticks they were filed for, without reading any
//! entry, and the timers a cascade brings onto level 1 (from the slot's list, or from a level
//! above) are appended to the batch and to their chain. When the clock reaches a level-1 slot,
//! that slot's chain becomes the run: sorted again into one list per tick, joined by the timers
//! linked into the level-1 slot's list. Each tick of the run is then handed out from its list in
//! order, the loads of its entries issued from the array ahead of the hand-out.
//!
//! So a timer that waits on level 2 is read twice on its way through the wheel, when it is
//! placed and when it is handed out, instead of four times (the link, the cascade to level 1,
//! the cascade or walk into the run, the hand-out). The sorting reads only the array, 8 bytes a
//! timer in the order the timers came, and then each chain in order: every load's address is
//! known without the one before it (linked chains through the positions, the first version,
//! made a chain of dependent loads of them, 1.7 of the 4.7 D1 misses a fired timer at 10^6 and
//! most of the time at 10^7, where a slot's array outgrows the L2).
//!
//! A timer that leaves a position (unlinked, moved, handed out) is only counted out: its batch's
//! count of timers falls, and nothing is written to the position, since a line and a page of
//! the array per cancel cost more than the list unlink they replace (whose writes land next to
//! the entry). A position holds its timer while the timer's entry still names it
//! ([`Links::is_on`]); the hand-out reads the entry anyway, and skips a position whose timer
//! left. So the chains' counts are of positions, not timers: a level-1 slot or a tick whose
//! timers all left is still visited once (it hands out nothing). A batch whose timers have all
//! left is emptied, positions and all; the window then belongs to no slot until a cascade makes
//! one the window again.
//!
//! ## Invariants (checked by [`Batches::check`])
//! - a position holds a timer iff it names one whose entry names the position as its list; a
//!   position is named in one entry at most (ids are not reused while a batch has positions);
//! - batch `s` holds `live[s]` timers; a waiting batch (not the window) has its bit in `waiting`
//!   set iff that is not zero, and is empty if it is zero; the window holds timers;
//! - every position of the window that holds a timer is once on the chain of the level-1 slot
//!   it was filed for (`slot_lists[s]`, its bit in `chained` iff not empty), or, for the run's
//!   level-1 slot, on the list of its tick (`tick_lists[t]`, bits in `run_ticks`); `frozen` is
//!   the bit of one of those ticks, or 0, and `handed` of its positions are handed out;
//! - waiting batches are level 2's slots after the clock's; the window is the clock's level-2
//!   slot, its chains level 1's slots after the clock's, and the run the clock's level-1 slot
//!   (the wheel hands a tick's run timers out after those linked into its level-0 bucket).
//!
//! ## Given up
//! - Memory: 8 bytes a timer on level 2 (its position), 12 while its batch is the window (its
//!   place on a chain; the lists keep their capacity for the next window). A position a timer
//!   leaves is reused only when its batch is emptied, so a batch takes a timer only while it
//!   has fewer than twice its timers plus 64 positions; a slot
//!   whose timers are mostly cancelled or moved before it comes due gets the rest on its list,
//!   as on the other levels (read again by its cascade). Positions are kept in blocks of 512
//!   from one pool, given back when a batch is emptied; the pool keeps the most blocks it held.
//! - The visit of a level-1 slot or tick whose timers all left ([`RawWheel::next_expiry`] may
//!   name it); a look at each left timer's entry when its tick is handed out.
//! - A timer whose expiry rose while it waited is placed again at the tick it was filed for,
//!   not at its slot's start: the wheel reads its expiry then, as it does for a level-0 bucket.
//! - A batch holds at most 2^25 timers; past that they go on the slot's list.
//!
//! [`RawWheel::next_expiry`]: crate::raw::RawWheel::next_expiry

use crate::buckets::Bucket;
use crate::geometry::SLOTS;
use crate::lists::{Links, NIL};

/// log2 of the positions a batch has list ids for.
const POSITION_BITS: u32 = 25;
/// Positions a batch has list ids for.
const BATCH_LEN: usize = 1 << POSITION_BITS;
/// Positions a batch may have beyond twice its timers.
const SLACK: usize = 64;

/// One position: the timer it was given (`NIL` once handed out) and the tick of its level-2
/// slot's window it was filed for.
#[derive(Debug, Clone, Copy)]
struct Filed {
    index: u32,
    tick: u32,
}

impl Filed {
    /// The level-1 slot of the filed tick.
    #[inline]
    fn slot(self) -> usize {
        (self.tick as usize >> 6) & (SLOTS - 1)
    }

    /// The filed tick within its level-1 slot.
    #[inline]
    fn tick_in_slot(self) -> usize {
        self.tick as usize & (SLOTS - 1)
    }
}

/// The tick of `expiry` in its level-2 slot's window (its two lowest digits).
#[inline(always)]
fn window_tick(expiry: u64) -> u32 {
    (expiry & (SLOTS * SLOTS - 1) as u64) as u32
}

/// log2 of the positions in one block of a batch.
const BLOCK_BITS: u32 = 9;
/// Positions in one block (4 KiB).
const BLOCK: usize = 1 << BLOCK_BITS;

/// The positions of every batch, in blocks of [`BLOCK`] taken from one pool and given back when
/// a batch is emptied, so that memory follows the timers batched in all, not the largest each
/// batch held, and [`reserve`](Pool::reserve) can make room for inserts up front.
#[derive(Debug)]
struct Pool {
    blocks: Vec<[Filed; BLOCK]>,
    /// Blocks no batch uses.
    free: Vec<u32>,
    /// Per level-2 slot: its blocks, in order.
    tables: [Vec<u32>; SLOTS],
    /// Per level-2 slot: its positions.
    lens: [u32; SLOTS],
}

impl Pool {
    fn new() -> Self {
        Pool {
            blocks: Vec::new(),
            free: Vec::new(),
            tables: std::array::from_fn(|_| Vec::new()),
            lens: [0; SLOTS],
        }
    }

    #[inline(always)]
    fn len(&self, slot: usize) -> usize {
        self.lens[slot] as usize
    }

    #[inline(always)]
    fn get(&self, slot: usize, at: usize) -> Filed {
        let block = self.tables[slot][at >> BLOCK_BITS];
        self.blocks[block as usize][at & (BLOCK - 1)]
    }

    #[inline(always)]
    fn get_mut(&mut self, slot: usize, at: usize) -> &mut Filed {
        let block = self.tables[slot][at >> BLOCK_BITS];
        &mut self.blocks[block as usize][at & (BLOCK - 1)]
    }

    /// Appends `filed` to `slot`'s batch.
    #[inline(always)]
    fn push(&mut self, slot: usize, filed: Filed) {
        let at = self.len(slot);
        if at % BLOCK == 0 {
            let block = match self.free.pop() {
                Some(block) => block,
                None => self.grow(),
            };
            self.tables[slot].push(block);
        }
        self.lens[slot] += 1;
        *self.get_mut(slot, at) = filed;
    }

    /// A new block, for a batch to use.
    #[cold]
    fn grow(&mut self) -> u32 {
        self.blocks.push([VACANT; BLOCK]);
        (self.blocks.len() - 1) as u32
    }

    /// Empties `slot`'s batch, its blocks given back.
    fn clear(&mut self, slot: usize) {
        self.free.append(&mut self.tables[slot]);
        self.lens[slot] = 0;
    }

    /// Makes room for `additional` more positions, in whichever batches they go, without
    /// allocating: blocks written now, and room for every table to name them.
    fn reserve(&mut self, additional: usize) {
        if additional == 0 {
            return;
        }
        let used: usize = self.tables.iter().map(Vec::len).sum();
        // Each batch may have a block it has only begun; each timer begins one at most.
        let wanted = used + (additional.div_ceil(BLOCK) + SLOTS).min(additional);
        let more = wanted.saturating_sub(self.blocks.len());
        self.blocks.reserve_exact(more);
        for _ in 0..more {
            let block = self.grow();
            self.free.push(block);
        }
        // Room to give every block back, and for any one batch to take all the new ones.
        self.free.reserve(self.blocks.len() - self.free.len());
        for table in &mut self.tables {
            table.reserve(additional.div_ceil(BLOCK) + 1);
        }
    }

    /// `slot`'s positions in order.
    fn iter(&self, slot: usize) -> impl Iterator<Item = Filed> + '_ {
        let len = self.len(slot);
        self.tables[slot]
            .iter()
            .flat_map(|&block| self.blocks[block as usize].iter().copied())
            .take(len)
    }
}

/// A block's position before any timer is filed there.
const VACANT: Filed = Filed {
    index: NIL,
    tick: 0,
};

/// Where a batched timer waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the batch of level-2 `slot`, for `tick` (0..4096) of that slot's window.
    Waiting { slot: usize, tick: usize },
    /// In the window, on the chain of level-1 `slot`, for `tick` of that slot.
    Window { slot: usize, tick: usize },
    /// In the run, for `tick` of the level-0 window the clock is in.
    Run { tick: usize },
}

/// The batches of level 2, the window and the run.
#[derive(Debug)]
pub(crate) struct Batches {
    /// The list id of position 0 of slot 0's batch.
    base: Bucket,
    /// Per level-2 slot: its positions.
    batches: Pool,
    /// Per level-2 slot: the timers in its batch (the window's included).
    live: [u32; SLOTS],
    /// Bit `s` set iff batch `s` is not the window and `live[s] > 0`.
    waiting: u64,
    /// The level-2 slot whose batch is the window, `SLOTS` if none.
    window: usize,
    /// Per level-1 slot: the window's positions filed for it (its *chain*), in the order filed.
    slot_lists: [Vec<u32>; SLOTS],
    /// Bit `s` set iff `slot_lists[s]` is not empty.
    chained: u64,
    /// The level-1 slot whose chain is the run, `SLOTS` if none.
    run: usize,
    /// Per tick of the run's window: its positions, handed out in order.
    tick_lists: [Vec<u32>; SLOTS],
    /// How many of the frozen tick's positions have been handed out.
    handed: usize,
    /// Bit `d` set iff `tick_lists[d]` is not empty.
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
            batches: Pool::new(),
            live: [0; SLOTS],
            waiting: 0,
            window: SLOTS,
            slot_lists: std::array::from_fn(|_| Vec::new()),
            chained: 0,
            run: SLOTS,
            tick_lists: std::array::from_fn(|_| Vec::new()),
            handed: 0,
            run_ticks: 0,
            frozen: 0,
        }
    }

    /// True if `list` is a batch position rather than a list.
    #[inline(always)]
    pub(crate) fn holds(&self, list: Bucket) -> bool {
        list >= self.base
    }

    /// Level 2's slots with a waiting batch.
    #[inline]
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting
    }

    /// The window's level-1 slots with positions on their chains.
    #[inline]
    pub(crate) fn chained(&self) -> u64 {
        self.chained
    }

    /// The ticks of the run's window with positions on their chains.
    #[inline]
    pub(crate) fn run_ticks(&self) -> u64 {
        self.run_ticks
    }

    /// The list id of `slot`'s position `at`.
    #[inline(always)]
    fn id(&self, slot: usize, at: usize) -> Bucket {
        self.base + ((slot << POSITION_BITS) | at) as Bucket
    }

    /// The slot and position of the batch position `list`.
    #[inline(always)]
    fn split(&self, list: Bucket) -> (usize, usize) {
        let rel = (list - self.base) as usize;
        ((rel >> POSITION_BITS) & (SLOTS - 1), rel & (BATCH_LEN - 1))
    }

    /// The list id the next timer appended to `slot`'s batch gets; `None` if it has no room.
    #[inline(always)]
    fn vacant(&self, slot: usize) -> Option<Bucket> {
        let at = self.batches.len(slot);
        let room = at < BATCH_LEN && at < 2 * self.live[slot] as usize + SLACK;
        room.then(|| self.id(slot, at))
    }

    /// The list id a new timer filed on level-2 `slot` (a waiting batch) gets, for storage that
    /// writes the entry itself (see [`shelved`](Self::shelved)); `None` if the batch has no room
    /// (link it into the slot's list instead).
    #[inline(always)]
    pub(crate) fn position(&self, slot: usize) -> Option<Bucket> {
        debug_assert_ne!(slot, self.window, "level 2 is after the clock's slot");
        self.vacant(slot & (SLOTS - 1))
    }

    /// Files a timer with `expiry` in the batch of level-2 `slot`; `false` if the batch has no
    /// room (link it into the slot's list instead).
    #[inline(always)]
    pub(crate) fn shelve(
        &mut self,
        links: &mut impl Links,
        index: u32,
        slot: usize,
        expiry: u64,
    ) -> bool {
        let Some(list) = self.position(slot) else {
            return false;
        };
        links.set_head(index, NIL, list, expiry);
        self.shelved(index, list, expiry);
        true
    }

    /// The rest of [`shelve`](Self::shelve) once the storage wrote the entry as
    /// [`Links::set_head`] would, at `list` from [`position`](Self::position) (nothing filed in
    /// that batch since).
    #[inline(always)]
    pub(crate) fn shelved(&mut self, index: u32, list: Bucket, expiry: u64) {
        let (slot, at) = self.split(list);
        debug_assert_eq!(at, self.batches.len(slot), "the position named");
        self.batches.push(
            slot,
            Filed {
                index,
                tick: window_tick(expiry),
            },
        );
        self.live[slot] += 1;
        self.waiting |= 1 << slot;
    }

    /// Makes the batch of level-2 `slot` the window, if it is not already (the old window holds
    /// no timers), chaining its positions by level-1 slot; returns how many timers it holds.
    pub(crate) fn enter(&mut self, slot: usize) -> u64 {
        let slot = slot & (SLOTS - 1);
        if slot == self.window {
            return 0;
        }
        self.leave();
        self.window = slot;
        self.waiting &= !(1 << slot);
        let lists = &mut self.slot_lists;
        for (at, filed) in self.batches.iter(slot).enumerate() {
            let to = filed.slot();
            lists[to].push(at as u32);
            self.chained |= 1 << to;
        }
        u64::from(self.live[slot])
    }

    /// Appends a timer a cascade detached, with `expiry` (on level 1 of the clock's level-2
    /// slot, the window's), to the window's chain of its level-1 slot; `false` if the window has
    /// no room (link it into the slot's list instead).
    #[inline(always)]
    pub(crate) fn file(&mut self, links: &mut impl Links, index: u32, expiry: u64) -> bool {
        debug_assert_eq!(self.run, SLOTS, "no cascade files timers during a run");
        let filed = Filed {
            index,
            tick: window_tick(expiry),
        };
        let Some(at) = self.append_to_window(links, filed, expiry) else {
            return false;
        };
        let to = filed.slot();
        self.slot_lists[to].push(at);
        self.chained |= 1 << to;
        true
    }

    /// Appends `filed` (its timer's entry written for the new position, with `expiry`) to the
    /// window's batch, for the caller to put on a chain; its position, or `None` if the window
    /// has no room.
    #[inline(always)]
    fn append_to_window(
        &mut self,
        links: &mut impl Links,
        filed: Filed,
        expiry: u64,
    ) -> Option<u32> {
        let window = self.window & (SLOTS - 1);
        let list = self.vacant(window)?;
        links.set_head(filed.index, NIL, list, expiry);
        self.batches.push(window, filed);
        self.live[window] += 1;
        Some((self.batches.len(window) - 1) as u32)
    }

    /// Empties the window, whose timers have all left (so a clock that moves on without a
    /// cascade leaves no window behind it).
    fn leave(&mut self) {
        if self.window == SLOTS {
            return;
        }
        debug_assert_eq!(self.live[self.window], 0, "the window is handed out");
        self.batches.clear(self.window);
        self.window = SLOTS;
        // Emptied, not freed: the next window fills them again.
        self.slot_lists.iter_mut().for_each(Vec::clear);
        self.tick_lists.iter_mut().for_each(Vec::clear);
        self.chained = 0;
        self.run = SLOTS;
        self.run_ticks = 0;
        self.frozen = 0;
        self.handed = 0;
    }

    /// Leaves the window if it holds no timers, once a cascade is done with it.
    #[inline]
    pub(crate) fn settle(&mut self) {
        if self.window != SLOTS && self.live[self.window] == 0 {
            self.leave();
        }
    }

    /// Forgets the run, whose positions have all been handed out.
    #[inline]
    pub(crate) fn end_run(&mut self) {
        if self.run == SLOTS {
            return;
        }
        debug_assert_eq!(self.run_ticks, 0, "the run is handed out");
        self.run = SLOTS;
    }

    /// Makes the window's chain of level-1 `slot`, whose start the clock has reached, the run,
    /// chaining its positions by tick. The window must be the clock's level-2 slot
    /// ([`enter`](Self::enter)).
    pub(crate) fn begin_run(&mut self, slot: usize) {
        self.end_run();
        let slot = slot & (SLOTS - 1);
        self.run = slot;
        self.chained &= !(1 << slot);
        let window = self.window & (SLOTS - 1);
        // The chain's positions are read in order, each load independent of the last.
        let mut chain = std::mem::take(&mut self.slot_lists[slot]);
        for &at in &chain {
            let tick = self.batches.get(window, at as usize).tick_in_slot();
            self.tick_lists[tick].push(at);
            self.run_ticks |= 1 << tick;
        }
        chain.clear();
        self.slot_lists[slot] = chain;
    }

    /// Appends a detached timer with `expiry` to the run, for `tick` of its window; `false` if
    /// the window has no room (link it into the level-0 bucket instead).
    #[inline(always)]
    pub(crate) fn link_run(
        &mut self,
        links: &mut impl Links,
        index: u32,
        tick: usize,
        expiry: u64,
    ) -> bool {
        debug_assert_ne!(self.run, SLOTS, "a run begun");
        let tick = tick & (SLOTS - 1);
        let filed = Filed {
            index,
            tick: (self.run << 6 | tick) as u32,
        };
        let Some(at) = self.append_to_window(links, filed, expiry) else {
            return false;
        };
        self.tick_lists[tick].push(at);
        self.run_ticks |= 1 << tick;
        true
    }

    /// Where the timer whose list is `list` (a batch position) waits.
    #[inline]
    pub(crate) fn place(&self, list: Bucket) -> Place {
        let (slot, at) = self.split(list);
        let filed = self.batches.get(slot, at);
        if slot != self.window {
            Place::Waiting {
                slot,
                tick: filed.tick as usize,
            }
        } else if filed.slot() == self.run {
            Place::Run {
                tick: filed.tick_in_slot(),
            }
        } else {
            Place::Window {
                slot: filed.slot(),
                tick: filed.tick_in_slot(),
            }
        }
    }

    /// Counts out the timer of the batch position `list`, which leaves it: the caller's entry
    /// names another list from now on (see the module doc).
    #[inline(always)]
    pub(crate) fn unlink(&mut self, list: Bucket) {
        let (slot, _) = self.split(list);
        self.live[slot] -= 1;
        if self.live[slot] == 0 {
            self.emptied(slot);
        }
    }

    /// Empties the batch of `slot`, whose timers have all left.
    #[cold]
    fn emptied(&mut self, slot: usize) {
        if slot == self.window {
            self.leave();
        } else {
            self.waiting &= !(1 << slot);
            self.batches.clear(slot);
        }
    }

    /// Starts handing out the run's positions of `tick`, if it has any.
    #[inline]
    pub(crate) fn freeze(&mut self, tick: usize) {
        let bit = 1 << (tick & (SLOTS - 1));
        if self.run_ticks & bit != 0 {
            debug_assert_eq!(self.frozen, 0, "one tick at a time");
            self.frozen = bit;
        }
    }

    /// Calls `f` with the timer named at each position of the tick being handed out, if one is,
    /// in the order [`take`](Self::take) will come to them (the wheel prefetches their entries;
    /// some may have left).
    #[inline]
    pub(crate) fn each_frozen(&self, mut f: impl FnMut(u32)) {
        if self.frozen == 0 {
            return;
        }
        let tick = self.frozen.trailing_zeros() as usize & (SLOTS - 1);
        let window = self.window & (SLOTS - 1);
        for &at in &self.tick_lists[tick][self.handed..] {
            f(self.batches.get(window, at as usize).index);
        }
    }

    /// True if the run is handing out a tick's positions.
    #[inline]
    pub(crate) fn frozen(&self) -> bool {
        self.frozen != 0
    }

    /// True if the run is handing out the positions of `tick`.
    #[inline]
    pub(crate) fn frozen_at(&self, tick: usize) -> bool {
        self.frozen == 1 << (tick & (SLOTS - 1))
    }

    /// Detaches the next timer of the tick being handed out, skipping positions whose timers
    /// left; `None` once the tick has no positions left. Link the timer again or hand it out
    /// before the next call.
    #[inline(always)]
    pub(crate) fn take(&mut self, links: &impl Links) -> Option<u32> {
        while self.frozen != 0 {
            let tick = self.frozen.trailing_zeros() as usize & (SLOTS - 1);
            let window = self.window & (SLOTS - 1);
            let list = &mut self.tick_lists[tick];
            let at = list[self.handed];
            self.handed += 1;
            if self.handed == list.len() {
                list.clear();
                self.handed = 0;
                self.run_ticks &= !self.frozen;
                self.frozen = 0;
            }
            let filed = self.batches.get_mut(window, at as usize);
            let index = std::mem::replace(&mut filed.index, NIL);
            if index != NIL && links.is_on(index, self.id(window, at as usize)) {
                self.live[window] -= 1;
                if self.live[window] == 0 {
                    self.leave();
                }
                return Some(index);
            }
        }
        None
    }

    /// Forgets every timer; the blocks stay, for the timers to come.
    pub(crate) fn clear(&mut self) {
        let mut batches = std::mem::replace(&mut self.batches, Pool::new());
        for slot in 0..SLOTS {
            batches.clear(slot);
        }
        *self = Batches {
            batches,
            ..Batches::new(self.base)
        };
    }

    /// Makes room for `additional` more timers in the batches, so that filing them allocates
    /// nothing.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.batches.reserve(additional);
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Every timer batched, with its list id and where it waits; for checks in tests.
    pub(crate) fn members(&self, links: &impl Links) -> Vec<(Bucket, u32, Place)> {
        let mut out = Vec::new();
        for slot in 0..SLOTS {
            for (at, filed) in self.batches.iter(slot).enumerate() {
                let list = self.id(slot, at);
                if filed.index != NIL && links.is_on(filed.index, list) {
                    out.push((list, filed.index, self.place(list)));
                }
            }
        }
        out
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Panics unless the counts, bits and chains agree with the positions and the entries.
    pub(crate) fn check(&self, links: &impl Links) {
        let mut live = [0u32; SLOTS];
        let mut named = std::collections::HashSet::new();
        for (list, index, _) in self.members(links) {
            live[self.split(list).0] += 1;
            assert!(named.insert(index), "timer {index} at two positions");
        }
        assert_eq!(live, self.live, "batch counts");
        for (slot, &timers) in live.iter().enumerate() {
            let waits = slot != self.window && timers > 0;
            assert_eq!(self.waiting >> slot & 1 == 1, waits, "slot {slot}");
            if slot != self.window && timers == 0 {
                assert_eq!(self.batches.len(slot), 0, "batch {slot} emptied");
            }
        }
        if self.window == SLOTS {
            assert_eq!(
                self.chained | self.run_ticks | self.frozen,
                0,
                "no window, no chains"
            );
            return;
        }
        assert!(
            self.live[self.window] > 0,
            "a window with no timers is left"
        );
        let window = self.window;
        assert!(self.frozen.count_ones() <= 1 && self.frozen & !self.run_ticks == 0);
        if self.run == SLOTS {
            assert_eq!(self.run_ticks, 0, "no run, no ticks");
        } else {
            assert_eq!(
                self.chained >> self.run & 1,
                0,
                "the run's slot is not chained"
            );
        }
        // Every position of the window that holds a timer is on its chain or its tick's list,
        // once, and the bits name the lists that are not empty.
        let mut on_chain = std::collections::HashSet::new();
        let mut walk = |list: &[u32], belongs: &dyn Fn(Filed) -> bool| {
            for &at in list {
                assert!(
                    (at as usize) < self.batches.len(window),
                    "position {at} past the end"
                );
                let filed = self.batches.get(window, at as usize);
                assert!(belongs(filed), "position {at} on the wrong chain");
                assert!(on_chain.insert(at), "position {at} on two chains");
            }
        };
        for s in 0..SLOTS {
            walk(&self.slot_lists[s], &|f| f.slot() == s);
            let chained = !self.slot_lists[s].is_empty();
            assert_eq!(self.chained >> s & 1 == 1, chained, "level-1 slot {s}");
            walk(&self.tick_lists[s], &|f| {
                f.slot() == self.run && f.tick_in_slot() == s
            });
            let ticked = !self.tick_lists[s].is_empty();
            assert_eq!(self.run_ticks >> s & 1 == 1, ticked, "tick {s}");
        }
        for (list, _, _) in self.members(links) {
            let (slot, at) = self.split(list);
            if slot == self.window {
                assert!(on_chain.contains(&(at as u32)), "position {at} on no chain");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::plain::Plain;

    /// The tick of level-1 `slot`'s tick `tick` in a level-2 window.
    fn at(slot: u64, tick: u64) -> u64 {
        slot << 6 | tick
    }

    /// What the wheel does when a timer leaves a batch: the entry names no position any more.
    fn leave(b: &mut Batches, links: &mut Plain, index: u32) {
        b.unlink(links.list(index));
        links.set_list(index, NIL);
    }

    #[test]
    fn a_batch_becomes_the_window_then_the_run_and_hands_out_by_tick() {
        let mut links = Plain::with(8);
        let mut b = Batches::new(100);
        assert!(b.shelve(&mut links, 0, 7, at(3, 5)));
        assert!(b.shelve(&mut links, 1, 7, at(3, 2)));
        assert!(b.shelve(&mut links, 2, 7, at(3, 5)));
        assert!(b.shelve(&mut links, 3, 7, at(4, 0)));
        assert!(b.shelve(&mut links, 4, 9, at(0, 0)));
        assert_eq!(b.waiting(), 1 << 7 | 1 << 9);
        assert_eq!(links.list(1), 100 + (7 << POSITION_BITS) + 1);
        assert_eq!(
            b.place(links.list(3)),
            Place::Waiting {
                slot: 7,
                tick: 4 * 64
            }
        );
        leave(&mut b, &mut links, 2);
        b.check(&links);
        assert_eq!(b.enter(7), 3, "timers, not positions");
        assert_eq!(b.waiting(), 1 << 9);
        assert_eq!(b.chained(), 1 << 3 | 1 << 4);
        assert_eq!(b.place(links.list(3)), Place::Window { slot: 4, tick: 0 });
        b.check(&links);
        b.begin_run(3);
        assert!(b.link_run(&mut links, 5, 5, 0));
        assert_eq!(b.place(links.list(5)), Place::Run { tick: 5 });
        assert_eq!(b.run_ticks(), 0b100100);
        b.check(&links);
        b.freeze(2);
        assert_eq!(b.take(&links), Some(1));
        assert!(!b.frozen());
        b.freeze(5);
        assert!(b.frozen_at(5));
        assert_eq!(
            b.take(&links),
            Some(0),
            "in the order filed: the batch's, then the run's"
        );
        leave(&mut b, &mut links, 5);
        assert!(
            b.frozen(),
            "timer 2's position and timer 5's are left to visit"
        );
        assert_eq!(b.take(&links), None, "both left");
        assert!(!b.frozen());
        b.check(&links);
        // Level-1 slot 4 waits on; a cascade may file more once the run is over.
        b.end_run();
        assert!(b.file(&mut links, 6, at(5, 1)));
        assert_eq!(
            links.list(6),
            100 + (7 << POSITION_BITS) + 5,
            "appended to the window's batch"
        );
        assert_eq!(b.chained(), 1 << 4 | 1 << 5);
        leave(&mut b, &mut links, 3);
        b.check(&links);
        leave(&mut b, &mut links, 6);
        assert_eq!(
            b.chained(),
            0,
            "the window's last timer left: the window is left"
        );
        b.check(&links);
        assert_eq!(b.enter(9), 1);
        b.check(&links);
        assert_eq!(b.members(&links).len(), 1);
    }

    #[test]
    fn each_frozen_names_what_take_comes_to_in_order() {
        let mut links = Plain::with(16);
        let mut b = Batches::new(100);
        for i in 0..6 {
            let tick = if i % 2 == 0 { 7 } else { 9 };
            assert!(b.shelve(&mut links, i, 2, at(1, tick)));
        }
        b.enter(2);
        b.begin_run(1);
        assert!(b.link_run(&mut links, 10, 7, 0));
        leave(&mut b, &mut links, 2);
        let mut named = Vec::new();
        b.each_frozen(|i| named.push(i));
        assert!(named.is_empty(), "nothing frozen");
        b.freeze(7);
        b.each_frozen(|i| named.push(i));
        assert_eq!(
            named,
            [0, 2, 4, 10],
            "every position, the one that left too"
        );
        let mut taken = Vec::new();
        while let Some(i) = b.take(&links) {
            taken.push(i);
        }
        assert_eq!(taken, [0, 4, 10], "without the one that left");
        b.freeze(9);
        named.clear();
        b.each_frozen(|i| named.push(i));
        assert_eq!(named, [1, 3, 5]);
        b.check(&links);
    }

    #[test]
    fn a_timer_moved_within_its_batch_is_handed_out_once() {
        let mut links = Plain::with(4);
        let mut b = Batches::new(100);
        assert!(b.shelve(&mut links, 0, 3, at(2, 9)));
        assert!(b.shelve(&mut links, 1, 3, at(2, 9)));
        // Timer 0 moves earlier in the same batch: a new position; the old one stays behind.
        let old = links.list(0);
        assert!(b.shelve(&mut links, 0, 3, at(2, 4)));
        b.unlink(old);
        b.check(&links);
        b.enter(3);
        b.begin_run(2);
        b.freeze(4);
        assert_eq!(b.take(&links), Some(0));
        b.freeze(9);
        assert_eq!(b.take(&links), Some(1), "timer 0's old position is skipped");
        assert_eq!(b.take(&links), None);
        assert_eq!(b.chained() | b.run_ticks(), 0, "the window is left");
        b.check(&links);
    }

    #[test]
    fn a_batch_of_holes_takes_no_more_timers() {
        let mut links = Plain::with(256);
        let mut b = Batches::new(100);
        assert!(b.shelve(&mut links, 0, 4, 0), "one that stays");
        let mut filed = 1;
        // Every other timer leaves at once: positions grow twice as fast as the timers.
        while b.shelve(&mut links, filed, 4, 0) {
            leave(&mut b, &mut links, filed);
            filed += 1;
        }
        assert_eq!(filed as usize, 2 + SLACK, "2 * 1 timer + {SLACK} positions");
        assert!(b.position(4).is_none());
        assert!(b.position(5).is_some(), "other batches have room");
        leave(&mut b, &mut links, 0);
        assert!(b.position(4).is_some(), "emptied, so room again");
        b.check(&links);
    }
}

//! The bucket lists: heads of intrusive, index-linked chains over link storage the caller owns.
//!
//! ## Model
//! A timer is an index into the caller's storage, which keeps, per index, the [`Links`] of this
//! file: `next`, `prev`, the list the timer is on, and its expiry. [`Lists`] keeps only the heads.
//! The wheel's own slab (`slab.rs`) is one such storage; the per-core crate's shared slot table is
//! another, so a timer there is one record with its links inside, not a wheel entry beside it.
//!
//! Each list (a bucket) is `chains` chains, an entry going on chain `index % chains`. A list walk
//! is a chain of dependent loads, one cache miss per timer once the storage outgrows the cache;
//! walking the chains of a bucket in turn keeps up to `chains` of those misses in flight at
//! once, which is what makes firing and cascading a large bucket several times faster. How many
//! pays depends on how full a bucket is when it is walked, so the wheel picks it by level
//! ([`few_chain_lists`]): eight for every Coarse bucket, each holding a window of `8^n` ticks
//! (at 10^6 timers, 10^4 to 10^5 a bucket; eight fire them 20-30% faster than four, sixteen are
//! slower again), and for Exact's buckets above level 0, which hold a 64^n-tick window each and
//! are walked whole by a cascade (measured when level 2 was lists too, before its batches,
//! `batches.rs`: at 10^6 timers the cascade from level 2 walked about 70,000, and eight instead
//! of four fired 10^6 timers 13% faster and 10^7 7% faster, and changed no other workload
//! beyond the runs' spread; level 2's lists now take only what its batches have no room for);
//! four for Exact's level 0, whose buckets hold one tick each,
//! a few timers a bucket, where eight made each pop probe more empty chains (Exact firing at
//! 10^6 was 25% slower with eight everywhere, measured before the timers a cascade files on level
//! 1 were handed out from arrays, `batches.rs`, instead of level-0 buckets). The cost is
//! [`MAX_CHAINS`] heads a bucket (32 bytes, one array per bucket, so a chain's head is found with
//! one bounds check; chains past a bucket's count stay empty), and a look at all of them when an
//! unlink or a pop empties a chain, to tell whether the bucket is now empty.
//!
//! Linking is a push-front and unlinking is O(1) given the entry, which records its list. A
//! chain's head has `prev == NIL`, so an unlink knows from the entry alone whether it is a head
//! and looks at the heads only then. Taking the head off (the drain's [`Lists::pop_front`])
//! therefore marks the next entry as the new head, a blind write to the line the walk reads
//! next, which starts that line's miss a turn of the chains early. Unlinking writes the
//! neighbours' links blind too (without reading them), so a cancel waits for its own entry only.
//!
//! ## Invariants
//! - an index is on at most one list, the one its `list` field names, or detached (taken off by
//!   [`Lists::take_list`] or [`Lists::pop_front`], to be linked again or forgotten by the caller);
//! - `prev` is the previous entry of the chain, and `NIL` on the chain's head (a detached
//!   entry's `prev` is stale until it is pushed again).
//!
//! ## Given up
//! Indices are `u32`, `NIL` (`u32::MAX`) ending a chain, so one wheel holds fewer than `2^32`
//! timers.

/// End of a chain, and "no entry".
pub const NIL: u32 = u32::MAX;

/// Most chains a bucket has; the heads array of every bucket has this many.
pub(crate) const MAX_CHAINS: usize = 8;
/// The other number of chains a bucket can have.
const FEW_CHAINS: usize = 4;

/// How many of a wheel's lists, from list 0, have [`FEW_CHAINS`] in `mode` (the rest have
/// [`MAX_CHAINS`]); see the module doc.
pub(crate) fn few_chain_lists(mode: crate::Mode) -> u32 {
    match mode {
        crate::Mode::Coarse => 0,
        crate::Mode::Exact => crate::geometry::SLOTS as u32,
    }
}

/// The per-timer fields a wheel reads and writes, kept by the caller at index `index`.
///
/// The wheel calls these only for indices it was given ([`RawWheel::link`](crate::raw::RawWheel::link))
/// and has not handed back, but for [`is_on`](Self::is_on), which it also calls for an index it
/// unlinked or handed back (see there). Getters of an index the wheel never linked may return
/// anything; the wheel does not call them.
pub trait Links {
    /// The next entry of the chain, or [`NIL`].
    fn next(&self, index: u32) -> u32;
    /// Sets the next entry.
    fn set_next(&mut self, index: u32, next: u32);
    /// The previous entry of the chain, [`NIL`] on a chain's head.
    fn prev(&self, index: u32) -> u32;
    /// Sets the previous entry.
    fn set_prev(&mut self, index: u32, prev: u32);
    /// The list the entry is on (the value last given to [`set_list`](Self::set_list)).
    fn list(&self, index: u32) -> u32;
    /// Records the list the entry is on.
    fn set_list(&mut self, index: u32, list: u32);
    /// True if `index` is linked and its list is `list`. Exact mode asks this of every index it
    /// filed in a batch position when the position's tick comes due, also of one that has left
    /// the position since (unlinked, moved or handed out): the wheel writes nothing to a
    /// position a timer leaves. The default, `list(index) == list`, is right for storage whose
    /// `list` keeps returning the last value set while the index is unlinked (the wheel's
    /// [`unlink`](crate::raw::RawWheel::unlink) of a batched timer sets it to [`NIL`]) or while the index is in use
    /// for another timer; storage that frees an index's fields must say `false` for it.
    #[inline(always)]
    fn is_on(&self, index: u32, list: u32) -> bool {
        self.list(index) == list
    }
    /// The tick to place and fire the entry by. The wheel reads it once per placement and files
    /// the entry by what it read. Storage may let it move (see [`RawWheel`](crate::raw::RawWheel)
    /// for what the wheel then promises).
    fn expiry(&self, index: u32) -> u64;
    /// The expiry the wheel placed the entry at (a Coarse deadline rounded up to its granule).
    /// Storage that keeps the deadline itself as the expiry may ignore it.
    fn set_expiry(&mut self, index: u32, expiry: u64);

    /// Hints that the entry at `index` is about to be read; storage may ignore it.
    #[inline(always)]
    fn prefetch(&self, index: u32) {
        let _ = index;
    }

    /// Sets `prev` of `index` unless `index` is [`NIL`], as an unlink joins the entry after the
    /// one it takes off; storage whose lookup of `NIL` fails anyway may override it to test once.
    #[inline(always)]
    fn set_prev_unless_nil(&mut self, index: u32, prev: u32) {
        if index != NIL {
            self.set_prev(index, prev);
        }
    }

    /// `next`, `prev` and `list` at once, as an unlink reads them; storage that finds an entry
    /// with some work may override it to find it once.
    #[inline(always)]
    fn unlink_fields(&self, index: u32) -> (u32, u32, u32) {
        (self.next(index), self.prev(index), self.list(index))
    }

    /// `next` and `expiry` at once, as a walk of a due or detached list reads them; storage that
    /// finds an entry with some work may override it to find it once.
    #[inline(always)]
    fn next_and_expiry(&self, index: u32) -> (u32, u64) {
        (self.next(index), self.expiry(index))
    }

    /// Makes the entry the head of a chain of `list`: `next`, `prev = NIL`, `list` and
    /// `expiry` at once (see [`unlink_fields`](Self::unlink_fields)).
    #[inline(always)]
    fn set_head(&mut self, index: u32, next: u32, list: u32, expiry: u64) {
        self.set_next(index, next);
        self.set_prev(index, NIL);
        self.set_list(index, list);
        self.set_expiry(index, expiry);
    }
}

/// The heads of one bucket's chains.
type Heads = [u32; MAX_CHAINS];

/// The heads of an empty bucket.
const EMPTY: Heads = [NIL; MAX_CHAINS];

/// A bucket's chains after [`Lists::take_list`]: its entries, walked chain by chain in turn.
#[derive(Debug)]
pub(crate) struct Detached {
    chains: Heads,
    turn: usize,
    /// `chains - 1` of the lists it came from.
    mask: usize,
}

/// The heads of every list.
#[derive(Debug)]
pub(crate) struct Lists {
    heads: Vec<Heads>,
    /// Rotates the chain that `pop_front` takes from next.
    cursor: usize,
    /// Lists below this have [`FEW_CHAINS`], the rest [`MAX_CHAINS`].
    few_below: u32,
}

impl Lists {
    /// `lists` empty lists, those below `few_below` of [`FEW_CHAINS`] chains each, the others of
    /// [`MAX_CHAINS`].
    pub(crate) fn new(lists: usize, few_below: u32) -> Self {
        Lists {
            heads: vec![EMPTY; lists],
            cursor: 0,
            few_below,
        }
    }

    /// Chains of `list`, less one.
    #[inline(always)]
    fn mask(&self, list: u32) -> usize {
        if list < self.few_below {
            FEW_CHAINS - 1
        } else {
            MAX_CHAINS - 1
        }
    }

    /// The chain of its bucket that entry `index` goes on.
    #[inline]
    fn chain_of(&self, list: u32, index: u32) -> usize {
        index as usize & self.mask(list)
    }

    /// True if no entry is on `list`.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn is_empty(&self, list: u32) -> bool {
        self.heads[list as usize] == EMPTY
    }

    /// Links `index` at the front of its chain of `list`, recording the list and `expiry` in the
    /// entry.
    #[inline]
    pub(crate) fn push_front(
        &mut self,
        links: &mut impl Links,
        list: u32,
        index: u32,
        expiry: u64,
    ) {
        let head = self.front(list, index);
        links.set_head(index, head, list, expiry);
        self.pushed_front(links, list, index, head);
    }

    /// The entry `index` goes in front of when pushed on `list`: its chain's head, or `NIL`.
    #[inline]
    pub(crate) fn front(&self, list: u32, index: u32) -> u32 {
        self.heads[list as usize][self.chain_of(list, index)]
    }

    /// The rest of [`push_front`](Self::push_front) once the entry's own links are written as
    /// [`Links::set_head`] writes them, in front of `head` (read by [`front`](Self::front) with
    /// nothing pushed on that chain since): joins the old head to it and makes it the head.
    #[inline]
    pub(crate) fn pushed_front(
        &mut self,
        links: &mut impl Links,
        list: u32,
        index: u32,
        head: u32,
    ) {
        if head != NIL {
            // A blind write: the old head is not read.
            links.set_prev(head, index);
        }
        let chain = self.chain_of(list, index);
        self.heads[list as usize][chain] = index;
    }

    /// Takes the linked entry `index` off its chain; returns its list and whether that list
    /// became empty. (The wheel reads the fields itself, to tell a run position from a list.)
    #[cfg(test)]
    pub(crate) fn unlink(&mut self, links: &mut impl Links, index: u32) -> (u32, bool) {
        let (next, prev, list) = links.unlink_fields(index);
        (list, self.unlink_known(links, index, (next, prev, list)))
    }

    /// [`unlink`](Self::unlink) of an entry whose `next`, `prev` and `list` the caller has read
    /// (and which it may have reused already): joins the neighbours without touching `index`;
    /// returns whether the list became empty.
    #[inline(always)]
    pub(crate) fn unlink_known(
        &mut self,
        links: &mut impl Links,
        index: u32,
        (next, prev, list): (u32, u32, u32),
    ) -> bool {
        if prev == NIL {
            let chain_of = self.chain_of(list, index);
            let heads = &mut self.heads[list as usize];
            let chain = &mut heads[chain_of];
            debug_assert_eq!(*chain, index, "an entry with no prev is its chain's head");
            *chain = next;
            if next == NIL {
                return *heads == EMPTY;
            }
        } else {
            links.set_next(prev, next);
        }
        // Blind, like the write above; `NIL` if `next` just became the head.
        links.set_prev_unless_nil(next, prev);
        false
    }

    /// Detaches the head of the next non-empty chain of `list` (the chains in turn); returns it,
    /// its expiry and whether the list is now empty, or `None` if it was empty. The entry's
    /// `list` is stale until it is pushed again.
    #[inline(always)]
    pub(crate) fn pop_front(
        &mut self,
        links: &mut impl Links,
        list: u32,
    ) -> Option<(u32, u64, bool)> {
        // One predictable branch to a walk whose chain count the compiler knows, so the probes
        // unroll.
        if self.mask(list) == MAX_CHAINS - 1 {
            self.pop_front_of::<MAX_CHAINS>(links, list)
        } else {
            self.pop_front_of::<FEW_CHAINS>(links, list)
        }
    }

    /// [`pop_front`](Self::pop_front) with `C` chains a list.
    #[inline(always)]
    fn pop_front_of<const C: usize>(
        &mut self,
        links: &mut impl Links,
        list: u32,
    ) -> Option<(u32, u64, bool)> {
        let heads = &mut self.heads[list as usize];
        for _ in 0..C {
            self.cursor = self.cursor.wrapping_add(1);
            let chain = self.cursor & (C - 1);
            let head = heads[chain];
            if head != NIL {
                let (next, expiry) = links.next_and_expiry(head);
                heads[chain] = next;
                // The new head is marked as one; its line is the one this chain reads next.
                links.set_prev_unless_nil(next, NIL);
                return Some((head, expiry, next == NIL && *heads == EMPTY));
            }
        }
        None
    }

    /// Detaches every chain of `list`; the entries keep their links to each other but their
    /// `list` fields are stale until each is pushed again or forgotten. Walk them with
    /// [`pop_detached`](Self::pop_detached).
    pub(crate) fn take_list(&mut self, list: u32) -> Detached {
        let chains = std::mem::replace(&mut self.heads[list as usize], EMPTY);
        Detached {
            chains,
            turn: 0,
            mask: self.mask(list),
        }
    }

    /// The next detached entry and its expiry, from the chains in turn; the caller pushes or
    /// forgets it before asking for another.
    #[inline]
    pub(crate) fn pop_detached(links: &impl Links, detached: &mut Detached) -> Option<(u32, u64)> {
        if detached.mask == MAX_CHAINS - 1 {
            Self::pop_detached_of::<MAX_CHAINS>(links, detached)
        } else {
            Self::pop_detached_of::<FEW_CHAINS>(links, detached)
        }
    }

    /// [`pop_detached`](Self::pop_detached) with `C` chains a list.
    #[inline(always)]
    fn pop_detached_of<const C: usize>(
        links: &impl Links,
        detached: &mut Detached,
    ) -> Option<(u32, u64)> {
        for _ in 0..C {
            detached.turn = (detached.turn + 1) & (C - 1);
            let index = detached.chains[detached.turn];
            if index != NIL {
                let (next, expiry) = links.next_and_expiry(index);
                detached.chains[detached.turn] = next;
                return Some((index, expiry));
            }
        }
        None
    }

    /// Forgets every entry.
    pub(crate) fn clear(&mut self) {
        self.heads.fill(EMPTY);
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Every entry on `list`, chain by chain, checking the `prev` links; for checks in tests.
    pub(crate) fn members(&self, links: &impl Links, list: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for chain in 0..MAX_CHAINS {
            let mut index = self.heads[list as usize][chain];
            let mut prev = NIL;
            while index != NIL {
                out.push(index);
                assert_eq!(links.prev(index), prev, "prev link of entry {index}");
                prev = index;
                index = links.next(index);
            }
        }
        out
    }
}

/// Link storage for unit tests.
#[cfg(test)]
pub(crate) mod plain {
    use super::{Links, NIL};

    /// Links in plain vectors, the simplest storage.
    #[derive(Default)]
    pub(crate) struct Plain {
        next: Vec<u32>,
        prev: Vec<u32>,
        list: Vec<u32>,
        expiry: Vec<u64>,
    }

    impl Plain {
        pub(crate) fn with(n: usize) -> Self {
            Plain {
                next: vec![NIL; n],
                prev: vec![NIL; n],
                list: vec![NIL; n],
                expiry: vec![0; n],
            }
        }
    }

    impl Links for Plain {
        fn next(&self, i: u32) -> u32 {
            self.next[i as usize]
        }
        fn set_next(&mut self, i: u32, v: u32) {
            self.next[i as usize] = v;
        }
        fn prev(&self, i: u32) -> u32 {
            self.prev[i as usize]
        }
        fn set_prev(&mut self, i: u32, v: u32) {
            self.prev[i as usize] = v;
        }
        fn list(&self, i: u32) -> u32 {
            self.list[i as usize]
        }
        fn set_list(&mut self, i: u32, v: u32) {
            self.list[i as usize] = v;
        }
        fn expiry(&self, i: u32) -> u64 {
            self.expiry[i as usize]
        }
        fn set_expiry(&mut self, i: u32, v: u64) {
            self.expiry[i as usize] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain::Plain;
    use super::*;

    #[test]
    fn lists_link_and_unlink_in_o1() {
        for chains in [FEW_CHAINS, MAX_CHAINS] {
            link_and_unlink(chains);
        }
    }

    fn link_and_unlink(chains: usize) {
        let c = chains as u32;
        let mut links = Plain::with(2 * chains);
        let mut lists = Lists::new(2, if chains == FEW_CHAINS { 2 } else { 0 });
        for i in [0, 1, 2, c, c + 1] {
            lists.push_front(&mut links, 0, i, 0);
        }
        // Chain by chain, each newest first.
        assert_eq!(lists.members(&links, 0), [c, 0, c + 1, 1, 2]);
        assert_eq!(lists.unlink(&mut links, 1), (0, false), "a chain's tail");
        assert_eq!(lists.unlink(&mut links, c), (0, false), "a chain's head");
        assert_eq!(
            lists.unlink(&mut links, c + 1),
            (0, false),
            "a chain's last"
        );
        assert_eq!(lists.members(&links, 0), [0, 2]);
        lists.unlink(&mut links, 0);
        lists.push_front(&mut links, 1, 0, 0);
        assert_eq!(lists.unlink(&mut links, 2), (0, true));
        assert!(lists.is_empty(0));
        assert_eq!(lists.members(&links, 1), [0]);
    }

    #[test]
    fn a_list_below_the_bound_has_four_chains_and_one_above_it_eight() {
        let mut links = Plain::with(16);
        let mut lists = Lists::new(2, 1);
        for i in 0..8 {
            lists.push_front(&mut links, 0, i, 0);
            lists.push_front(&mut links, 1, 8 + i, 0);
        }
        // Chain by chain, each newest first: list 0 chains by `index % 4`, list 1 by `% 8`.
        assert_eq!(lists.members(&links, 0), [4, 0, 5, 1, 6, 2, 7, 3]);
        assert_eq!(lists.members(&links, 1), (8..16).collect::<Vec<_>>());
        for i in 0..8 {
            assert_eq!(lists.unlink(&mut links, 8 + i), (1, i == 7));
        }
        let mut detached = lists.take_list(0);
        let mut order = Vec::new();
        while let Some((index, _)) = Lists::pop_detached(&links, &mut detached) {
            order.push(index);
        }
        assert_eq!(order, [5, 6, 7, 4, 1, 2, 3, 0], "four chains in turn");
    }

    #[test]
    fn detached_chains_are_walked_in_turn() {
        for chains in [FEW_CHAINS, MAX_CHAINS] {
            walk_detached(chains);
        }
    }

    fn walk_detached(chains: usize) {
        let c = chains as u32;
        let n = 2 * c + 1;
        let mut links = Plain::with(n as usize);
        let mut lists = Lists::new(2, if chains == FEW_CHAINS { 2 } else { 0 });
        for i in 0..n {
            lists.push_front(&mut links, 0, i, 0);
        }
        let mut detached = lists.take_list(0);
        assert!(lists.is_empty(0));
        let mut order = Vec::new();
        while let Some((index, _)) = Lists::pop_detached(&links, &mut detached) {
            order.push(index);
            lists.push_front(&mut links, 1, index, 0);
        }
        // Chain `k` holds `k + c, k` (chain 0 also `2c` in front), newest first; the walk takes
        // one from each chain in turn, starting at chain 1. With four chains: 5 6 7 8 1 2 3 4 0.
        let mut expected: Vec<u32> = (1..c).map(|k| k + c).collect();
        expected.push(2 * c);
        expected.extend(1..=c);
        expected.push(0);
        assert_eq!(order, expected);
        let mut members = lists.members(&links, 1);
        members.sort();
        assert_eq!(members, (0..n).collect::<Vec<_>>());
    }
}

//! The buckets of every level and their summaries: the one owner of "which lists hold timers".
//!
//! ## Model
//! A [`Buckets`] holds the heads of every list (`lists.rs`; the timers and their links are in the
//! caller's storage) and, beside them, what the wheel reads to find work without walking lists: per level, an *occupied* bitmap (bit `s` of
//! level `n` is set iff bucket `n * 64 + s` holds a timer) and a *frozen* bitmap (the bucket's
//! tick has been reached and its timers are being handed out), plus a lower bound of the expiries
//! on the overflow list, one flag each for whether `due` and `overflow` hold timers, and one bit
//! per level saying whether it has a frozen bucket. Every link and unlink goes through this type,
//! and it sets or clears the bits there and then, as tokio's `Level::add_entry`/`remove_entry` do, so the invariants below
//! hold by construction and the wheel never does bitmap arithmetic of its own.
//!
//! Lists are named by a [`Bucket`]: `level * 64 + slot` for wheel buckets, then two special
//! lists, `due` (expiry reached, handed out before anything else) and `overflow` (beyond the top
//! level). The ids after `overflow` name Exact mode's batch positions, each the list of one timer
//! (`batches.rs`, owned here too: an Exact timer linked onto a level-2 bucket goes into its
//! slot's batch while the batch has room, an unlink tells a position from a list by its id, and
//! `len` counts both); the first occupied slot of level 0 counts the run's ticks, that of level
//! 1 the window's chains, that of level 2 the waiting batches.
//!
//! The wheel asks "is this list empty" and "which bucket is frozen" several times per timer it
//! fires; with the bits kept here, each answer is one word, not a look at a bucket's chain heads
//! (`lists.rs`) or a scan of the levels.
//!
//! ## Invariants (checked by [`Buckets::check_bitmaps`])
//! - occupied bit (or the `due`/`overflow` flag) set iff the list is non-empty;
//! - frozen bit set only on an occupied bucket (emptying a bucket thaws it); a level's bit in
//!   `frozen_levels` set iff the level has a frozen bucket;
//! - `overflow_bound` is at most every expiry on the overflow list while that list is non-empty.
//!
//! ## Given up
//! The bound is not raised when the earliest overflow timer leaves (that would need a walk); the
//! wheel's next sweep recomputes it.

use crate::batches::Batches;
use crate::geometry::{MAX_LEVELS, SLOT_BITS, SLOT_MASK, SLOTS};
use crate::lists::{Detached, Links, Lists, NIL};

/// A list identifier: `level * 64 + slot` for wheel buckets, then `due` and `overflow`.
pub(crate) type Bucket = u32;

/// The wheel bucket of `slot` on `level`.
#[inline]
pub(crate) fn wheel_bucket(level: usize, slot: usize) -> Bucket {
    debug_assert!(slot < SLOTS, "slot {slot}");
    ((level << SLOT_BITS) | slot) as Bucket
}

/// The level and slot of a bucket id (meaningful for wheel buckets only).
#[inline]
pub(crate) fn level_and_slot(bucket: Bucket) -> (usize, usize) {
    (
        bucket as usize >> SLOT_BITS,
        (bucket as u64 & SLOT_MASK) as usize,
    )
}

/// The `due` list of a wheel with `levels` levels.
#[inline]
pub(crate) fn due_bucket(levels: usize) -> Bucket {
    (levels * SLOTS) as Bucket
}

/// The `overflow` list of a wheel with `levels` levels.
#[inline]
pub(crate) fn overflow_bucket(levels: usize) -> Bucket {
    due_bucket(levels) + 1
}

/// True for a bucket of one of `levels` levels (not `due` or `overflow`).
#[inline]
pub(crate) fn is_wheel_bucket(bucket: Bucket, levels: usize) -> bool {
    (bucket as usize) < levels * SLOTS
}

/// True for a list whose timers the wheel reads again when it comes due (a wheel bucket, or a
/// batch position of Exact mode's), so that a timer whose expiry rises can stay there: every
/// list but `due` and `overflow`.
#[inline]
pub(crate) fn is_read_again(bucket: Bucket, levels: usize) -> bool {
    bucket < due_bucket(levels) || bucket > overflow_bucket(levels)
}

/// The bit of `slot` in a level's bitmap.
#[inline]
fn slot_bit(slot: usize) -> u64 {
    1 << slot
}

/// `count` consecutive slots from `first`, wrapping past slot 63, as a bitmap (`count <= 64`).
#[inline]
fn slot_run(first: usize, count: u32) -> u64 {
    let low = if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    };
    low.rotate_left(first as u32)
}

/// Every timer list of a wheel, with the bitmaps and bound that summarise them.
#[derive(Debug)]
pub(crate) struct Buckets {
    lists: Lists,
    levels: usize,
    /// Timers on the lists, or detached from them by the wheel's current call.
    len: usize,
    /// Per level: bit `s` set iff bucket `s` of that level is non-empty.
    occupied: [u64; MAX_LEVELS],
    /// Per level: bit `s` set iff bucket `s` is non-empty and its tick has been reached.
    frozen: [u64; MAX_LEVELS],
    /// Bit `n` set iff `frozen[n] != 0`.
    frozen_levels: u32,
    /// True iff the `due` list is non-empty.
    due_occupied: bool,
    /// True iff the `overflow` list is non-empty.
    overflow_occupied: bool,
    /// At most every expiry on the overflow list; meaningful only while that list is non-empty.
    overflow_bound: u64,
    /// Exact mode: level 2's timers, the window and the run (`batches.rs`); their list ids
    /// follow `overflow`.
    pub(crate) batches: Box<Batches>,
    /// Exact mode: level 2's timers go into batches (false in Coarse mode, or with fewer than
    /// three levels).
    batched: bool,
}

impl Buckets {
    /// Lists for `levels` levels, the first `few_chain_lists` of four chains, the others of eight
    /// (see `lists.rs`); level 2's timers in batches if `batched`.
    pub(crate) fn new(levels: usize, few_chain_lists: u32, batched: bool) -> Self {
        debug_assert!((1..=MAX_LEVELS).contains(&levels));
        Buckets {
            lists: Lists::new(levels * SLOTS + 2, few_chain_lists),
            levels,
            len: 0,
            occupied: [0; MAX_LEVELS],
            frozen: [0; MAX_LEVELS],
            frozen_levels: 0,
            due_occupied: false,
            overflow_occupied: false,
            overflow_bound: u64::MAX,
            batches: Box::new(Batches::new(overflow_bucket(levels) + 1)),
            batched: batched && levels > 2,
        }
    }

    /// The level-2 slot of `bucket` if its timers go into batches.
    #[inline(always)]
    fn batch_slot(&self, bucket: Bucket) -> Option<usize> {
        let (level, slot) = level_and_slot(bucket);
        (self.batched && level == 2).then_some(slot)
    }

    /// The list of timers whose expiry has been reached.
    #[inline]
    pub(crate) fn due(&self) -> Bucket {
        due_bucket(self.levels)
    }

    /// The list of timers beyond the top level.
    #[inline]
    pub(crate) fn overflow(&self) -> Bucket {
        overflow_bucket(self.levels)
    }

    /// True for a bucket of one of the levels (not `due` or `overflow`).
    #[inline]
    pub(crate) fn is_wheel(&self, bucket: Bucket) -> bool {
        is_wheel_bucket(bucket, self.levels)
    }

    /// Timers linked (or detached by the current call).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Rewrites a linked timer's expiry without moving it. The caller keeps the wheel's
    /// placement invariants; the overflow bound is kept here.
    #[inline]
    pub(crate) fn set_expiry(&mut self, links: &mut impl Links, index: u32, expiry: u64) {
        links.set_expiry(index, expiry);
        self.expiry_set(links.list(index), expiry);
    }

    /// The bound's part of [`set_expiry`](Self::set_expiry), for storage that set the expiry of
    /// a timer on `bucket` itself.
    #[inline]
    pub(crate) fn expiry_set(&mut self, bucket: Bucket, expiry: u64) {
        if bucket == self.overflow() {
            self.overflow_bound = self.overflow_bound.min(expiry);
        }
    }

    // ---- link and unlink: the only places the summaries change ------------------------------

    /// Links a new timer onto `bucket` with `expiry`.
    #[inline]
    pub(crate) fn insert(
        &mut self,
        links: &mut impl Links,
        bucket: Bucket,
        index: u32,
        expiry: u64,
    ) {
        self.len += 1;
        self.link_detached(links, bucket, index, expiry);
    }

    /// Where a new timer `index` goes on `bucket` (see [`inserted_front`](Self::inserted_front)):
    /// the list its entry records (`bucket`, or a batch position) and the timer it goes in front
    /// of there (`NIL` in a batch).
    #[inline]
    pub(crate) fn front(&self, bucket: Bucket, index: u32) -> (Bucket, u32) {
        match self
            .batch_slot(bucket)
            .and_then(|slot| self.batches.position(slot))
        {
            Some(position) => (position, NIL),
            None => (bucket, self.lists.front(bucket, index)),
        }
    }

    /// [`insert`](Self::insert) of a new timer whose storage wrote its links as
    /// [`Links::set_head`] would, on `list` in front of `head`, from [`front`](Self::front).
    #[inline]
    pub(crate) fn inserted_front(
        &mut self,
        links: &mut impl Links,
        (list, index, head): (Bucket, u32, u32),
        expiry: u64,
    ) {
        self.len += 1;
        self.pushed(links, (list, index, head), expiry);
    }

    /// Joins a timer whose entry was written as [`Links::set_head`] would, on `list` in front of
    /// `head` (from [`front`](Self::front)), to that list or batch.
    #[inline(always)]
    fn pushed(
        &mut self,
        links: &mut impl Links,
        (list, index, head): (Bucket, u32, u32),
        expiry: u64,
    ) {
        if self.batches.holds(list) {
            self.batches.shelved(index, list, expiry);
        } else {
            self.lists.pushed_front(links, list, index, head);
            self.linked(list, expiry);
        }
    }

    /// Takes a linked timer off its list for good; returns the bucket it was on.
    #[inline]
    pub(crate) fn remove(&mut self, links: &mut impl Links, index: u32) -> Bucket {
        let fields = links.unlink_fields(index);
        self.unlink_known(links, index, fields);
        if self.batches.holds(fields.2) {
            // The position is left as it is: the entry must stop naming it (`Links::is_on`).
            links.set_list(index, NIL);
        }
        self.len -= 1;
        fields.2
    }

    /// [`remove`](Self::remove) of a timer whose links the caller read (and whose entry it has
    /// freed already).
    #[inline]
    pub(crate) fn remove_known(
        &mut self,
        links: &mut impl Links,
        index: u32,
        fields: (u32, u32, Bucket),
    ) {
        self.unlink_known(links, index, fields);
        self.len -= 1;
    }

    /// Moves the linked timer `index` to `bucket` with a new expiry.
    #[inline]
    pub(crate) fn relink(
        &mut self,
        links: &mut impl Links,
        index: u32,
        bucket: Bucket,
        expiry: u64,
    ) {
        let fields = links.unlink_fields(index);
        self.unlink_known(links, index, fields);
        self.link_detached(links, bucket, index, expiry);
    }

    /// [`relink`](Self::relink) of a timer whose storage read its old links `old` (`next`,
    /// `prev`, `list`) and wrote it as the head of `list` in front of `head`, from
    /// [`front`](Self::front): joins the old neighbours and the new head to it.
    #[inline]
    pub(crate) fn moved(
        &mut self,
        links: &mut impl Links,
        index: u32,
        old: (u32, u32, Bucket),
        (list, head): (Bucket, u32),
        expiry: u64,
    ) {
        debug_assert_ne!(old.2, list, "a move within a list sets the expiry only");
        // The new place first: leaving a batch may empty it, which would free the position
        // `front` named if the timer moves within that batch.
        self.pushed(links, (list, index, head), expiry);
        self.unlink_known(links, index, old);
    }

    /// The batch position of level `at.0`'s slot `at.1` a timer on the batch position `old`
    /// moves to, if both are batches and the new one has room (see
    /// [`batch_moved`](Self::batch_moved)).
    #[inline(always)]
    pub(crate) fn batch_to_batch(
        &self,
        old: Bucket,
        (level, slot): (usize, usize),
    ) -> Option<Bucket> {
        if level == 2 && self.batched && self.batches.holds(old) {
            self.batches.position(slot)
        } else {
            None
        }
    }

    /// The move of a timer from the batch position `old` to `list`, from
    /// [`batch_to_batch`](Self::batch_to_batch), whose storage wrote its new list and expiry:
    /// [`moved`](Self::moved) without the lists.
    #[inline(always)]
    pub(crate) fn batch_moved(&mut self, index: u32, old: Bucket, list: Bucket, expiry: u64) {
        self.batches.shelved(index, list, expiry);
        self.batches.unlink(old);
    }

    /// Detaches every timer of `bucket` (which becomes empty, so unfrozen); walk them with
    /// [`next_detached`](Self::next_detached) and link each with
    /// [`link_detached`](Self::link_detached) or hand it out with
    /// [`handed_out`](Self::handed_out) before asking for the next.
    pub(crate) fn take(&mut self, bucket: Bucket) -> Detached {
        let detached = self.lists.take_list(bucket);
        self.unlinked(bucket, true);
        detached
    }

    /// The next timer of a detached bucket, and its expiry.
    #[inline]
    pub(crate) fn next_detached(links: &impl Links, detached: &mut Detached) -> Option<(u32, u64)> {
        Lists::pop_detached(links, detached)
    }

    /// Links a detached timer onto `bucket` with `expiry`.
    #[inline]
    pub(crate) fn link_detached(
        &mut self,
        links: &mut impl Links,
        bucket: Bucket,
        index: u32,
        expiry: u64,
    ) {
        if let Some(slot) = self.batch_slot(bucket) {
            if self.batches.shelve(links, index, slot, expiry) {
                return;
            }
        }
        self.lists.push_front(links, bucket, index, expiry);
        self.linked(bucket, expiry);
    }

    /// [`link_detached`](Self::link_detached) onto the wheel bucket of `slot` on `level`.
    #[inline(always)]
    pub(crate) fn link_wheel(
        &mut self,
        links: &mut impl Links,
        (level, slot): (usize, usize),
        index: u32,
        expiry: u64,
    ) {
        if level == 2 && self.batched && self.batches.shelve(links, index, slot, expiry) {
            return;
        }
        self.lists
            .push_front(links, wheel_bucket(level, slot), index, expiry);
        self.occupied[level] |= slot_bit(slot);
    }

    /// A detached timer left the wheel (fired).
    #[inline]
    pub(crate) fn handed_out(&mut self) {
        self.len -= 1;
    }

    /// Takes a timer whose `next`, `prev` and `list` are `fields` off its list or out of its
    /// batch position, without touching its entry; `len` is the caller's.
    #[inline(always)]
    fn unlink_known(&mut self, links: &mut impl Links, index: u32, fields: (u32, u32, Bucket)) {
        let list = fields.2;
        if self.batches.holds(list) {
            self.batches.unlink(list);
            return;
        }
        let now_empty = self.lists.unlink_known(links, index, fields);
        self.unlinked(list, now_empty);
    }

    /// Forgets every timer; the caller forgets their entries.
    pub(crate) fn clear(&mut self) {
        self.lists.clear();
        self.len = 0;
        self.occupied = [0; MAX_LEVELS];
        self.frozen = [0; MAX_LEVELS];
        self.frozen_levels = 0;
        self.due_occupied = false;
        self.overflow_occupied = false;
        self.overflow_bound = u64::MAX;
        self.batches.clear();
    }

    /// A timer with `expiry` joined `bucket`.
    #[inline]
    fn linked(&mut self, bucket: Bucket, expiry: u64) {
        if self.is_wheel(bucket) {
            let (level, slot) = level_and_slot(bucket);
            self.occupied[level] |= slot_bit(slot);
        } else if bucket == self.due() {
            self.due_occupied = true;
        } else {
            self.overflow_bound = if self.overflow_occupied {
                self.overflow_bound.min(expiry)
            } else {
                expiry
            };
            self.overflow_occupied = true;
        }
    }

    /// A timer left `bucket`, which is `now_empty` or not.
    #[inline]
    fn unlinked(&mut self, bucket: Bucket, now_empty: bool) {
        if !now_empty {
            return;
        }
        if self.is_wheel(bucket) {
            let (level, slot) = level_and_slot(bucket);
            self.occupied[level] &= !slot_bit(slot);
            self.frozen[level] &= !slot_bit(slot);
            if self.frozen[level] == 0 {
                self.frozen_levels &= !(1 << level);
            }
        } else if bucket == self.due() {
            self.due_occupied = false;
        } else {
            self.overflow_occupied = false;
        }
    }

    // ---- what the drain reads ----------------------------------------------------------------

    /// True if the `due` list holds a timer.
    #[inline]
    pub(crate) fn has_due(&self) -> bool {
        self.due_occupied
    }

    /// True if the overflow list holds a timer.
    #[inline]
    pub(crate) fn has_overflow(&self) -> bool {
        self.overflow_occupied
    }

    /// At most every overflow expiry (meaningful when [`has_overflow`](Self::has_overflow)).
    #[inline]
    pub(crate) fn overflow_bound(&self) -> u64 {
        self.overflow_bound
    }

    /// Detaches a timer of the occupied `bucket` (`due`, or a frozen one) to hand out next
    /// (the bucket's chains in turn), with its expiry. Link it with
    /// [`link_detached`](Self::link_detached) or hand it out with
    /// [`handed_out`](Self::handed_out) before the next call.
    #[inline(always)]
    pub(crate) fn take_front_occupied(
        &mut self,
        links: &mut impl Links,
        bucket: Bucket,
    ) -> (u32, u64) {
        let (index, expiry, now_empty) = self
            .lists
            .pop_front(links, bucket)
            .expect("occupied bucket");
        self.unlinked(bucket, now_empty);
        (index, expiry)
    }

    /// The lowest level with an occupied bucket, and the first occupied slot at or after `from`
    /// on it (no wrap: Exact keeps every slot at or after the clock's digit).
    /// The run's ticks count as level 0's slots, the window's chains as level 1's and the
    /// waiting batches as level 2's.
    pub(crate) fn first_occupied(&self, from: impl Fn(usize) -> usize) -> Option<(usize, usize)> {
        let (level, bits) = (0..self.levels)
            .map(|level| {
                let batched = match level {
                    0 => self.batches.run_ticks(),
                    1 => self.batches.chained(),
                    2 => self.batches.waiting(),
                    _ => 0,
                };
                (level, self.occupied[level] | batched)
            })
            .find(|&(_, bits)| bits != 0)?;
        let first = from(level);
        debug_assert_eq!(
            bits & (slot_bit(first) - 1),
            0,
            "level {level} has a slot before {first}"
        );
        Some((level, (bits >> first).trailing_zeros() as usize + first))
    }

    /// On `level`, how many slots after `from` (wrapping) the first occupied bucket that is not
    /// frozen lies; `None` if there is none.
    #[inline]
    pub(crate) fn first_live_after(&self, level: usize, from: usize) -> Option<u32> {
        let live = self.occupied[level] & !self.frozen[level];
        (live != 0).then(|| live.rotate_right(from as u32).trailing_zeros())
    }

    // ---- frozen buckets ----------------------------------------------------------------------

    /// True if `bucket` is a wheel bucket whose tick has been reached.
    #[inline]
    pub(crate) fn is_frozen(&self, bucket: Bucket) -> bool {
        if !self.is_wheel(bucket) {
            return false;
        }
        let (level, slot) = level_and_slot(bucket);
        self.frozen[level] & slot_bit(slot) != 0
    }

    /// The first frozen bucket, lowest level first.
    #[inline]
    pub(crate) fn first_frozen(&self) -> Option<Bucket> {
        if self.frozen_levels == 0 {
            return None;
        }
        let level = self.frozen_levels.trailing_zeros() as usize;
        Some(wheel_bucket(
            level,
            self.frozen[level].trailing_zeros() as usize,
        ))
    }

    /// Marks a wheel bucket as reached, and on level 0 the run's timers of the same tick; one
    /// of the two holds timers.
    #[inline]
    pub(crate) fn freeze(&mut self, bucket: Bucket) {
        let (level, slot) = level_and_slot(bucket);
        if level == 0 {
            self.batches.freeze(slot);
        }
        if self.occupied[level] & slot_bit(slot) != 0 {
            self.frozen[level] |= slot_bit(slot);
            self.frozen_levels |= 1 << level;
        } else {
            debug_assert!(self.batches.frozen_at(slot), "freeze empty");
        }
    }

    /// Freezes every occupied bucket among `count` slots of `level` from `first` (wrapping).
    #[inline]
    pub(crate) fn freeze_run(&mut self, level: usize, first: usize, count: u32) {
        self.frozen[level] |= self.occupied[level] & slot_run(first, count);
        if self.frozen[level] != 0 {
            self.frozen_levels |= 1 << level;
        }
    }

    // ---- checks ----------------------------------------------------------------------------

    #[cfg(any(test, feature = "test-hooks"))]
    /// Every entry on `bucket`; for checks in tests.
    pub(crate) fn members(&self, links: &impl Links, bucket: Bucket) -> Vec<u32> {
        self.lists.members(links, bucket)
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Panics unless every bitmap bit agrees with its list. O(buckets).
    pub(crate) fn check_bitmaps(&self) {
        assert_eq!(
            self.due_occupied,
            !self.lists.is_empty(self.due()),
            "due flag"
        );
        let overflow = !self.lists.is_empty(self.overflow());
        assert_eq!(self.overflow_occupied, overflow, "overflow flag");
        for level in 0..MAX_LEVELS {
            let bit = self.frozen_levels >> level & 1 == 1;
            assert_eq!(bit, self.frozen[level] != 0, "frozen level {level}");
        }
        for level in 0..self.levels {
            for slot in 0..SLOTS {
                let bucket = wheel_bucket(level, slot);
                let occupied = self.occupied[level] & slot_bit(slot) != 0;
                assert_eq!(
                    occupied,
                    !self.lists.is_empty(bucket),
                    "bitmap of bucket {bucket}"
                );
                let frozen = self.frozen[level] & slot_bit(slot) != 0;
                assert!(!frozen || occupied, "frozen bucket {bucket} is occupied");
            }
        }
        for level in self.levels..MAX_LEVELS {
            assert_eq!(
                self.occupied[level] | self.frozen[level],
                0,
                "level {level}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::plain::Plain;

    #[test]
    fn bucket_ids_split_back() {
        assert_eq!(wheel_bucket(0, 0), 0);
        assert_eq!(wheel_bucket(2, 5), 133);
        assert_eq!(level_and_slot(133), (2, 5));
        assert_eq!(level_and_slot(wheel_bucket(19, 63)), (19, 63));
    }

    #[test]
    fn slot_runs_wrap() {
        assert_eq!(slot_run(0, 1), 1);
        assert_eq!(slot_run(3, 2), 0b11000);
        assert_eq!(slot_run(63, 2), (1 << 63) | 1);
        assert_eq!(slot_run(17, 64), u64::MAX);
    }

    #[test]
    fn link_and_unlink_keep_the_bits() {
        let mut l = Plain::with(4);
        let mut b = Buckets::new(2, 4, false);
        let bucket = wheel_bucket(1, 7);
        let (x, y) = (0, 1);
        b.insert(&mut l, bucket, x, 10);
        b.insert(&mut l, bucket, y, 11);
        assert_eq!(b.first_occupied(|_| 0), Some((1, 7)));
        b.freeze(bucket);
        assert_eq!(b.first_frozen(), Some(bucket));
        assert_eq!(b.remove(&mut l, x), bucket);
        assert!(b.is_frozen(bucket), "still occupied, still frozen");
        b.relink(&mut l, y, wheel_bucket(0, 3), 12);
        assert!(!b.is_frozen(bucket), "emptied, so thawed");
        assert_eq!(b.first_frozen(), None);
        assert_eq!(b.first_occupied(|_| 0), Some((0, 3)));
        assert_eq!(b.first_live_after(0, 5), Some(62));
        b.freeze_run(0, 60, 8);
        assert!(b.is_frozen(wheel_bucket(0, 3)));
        assert_eq!(b.first_live_after(0, 5), None);
        b.check_bitmaps();
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn overflow_bound_is_kept_on_link() {
        let mut l = Plain::with(4);
        let mut b = Buckets::new(1, 4, false);
        let over = b.overflow();
        b.insert(&mut l, over, 0, 500);
        b.insert(&mut l, over, 1, 700);
        assert_eq!(b.overflow_bound(), 500);
        b.set_expiry(&mut l, 0, 400);
        assert_eq!(b.overflow_bound(), 400);
        let mut detached = b.take(over);
        assert!(!b.has_overflow());
        let mut expiries = Vec::new();
        while let Some((index, expiry)) = Buckets::next_detached(&l, &mut detached) {
            let expiry = expiry + 1000;
            expiries.push(expiry);
            b.link_detached(&mut l, over, index, expiry);
        }
        assert_eq!(b.overflow_bound(), *expiries.iter().min().unwrap());
        b.check_bitmaps();
    }
}

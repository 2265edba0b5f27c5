//! The wheel over link storage the caller owns: levels of buckets, a clock, and the drain that
//! moves the clock. [`Wheel`](crate::Wheel) is this over its own slab; a caller with a table of
//! its own (the per-core crate's shared slot records) links its records directly.
//!
//! ## Model
//! `clock` is the last tick the wheel has been advanced to. Every linked timer is on exactly one
//! list: a wheel bucket (`level * 64 + slot`), `DUE` (expiry already reached), or `OVERFLOW`
//! (beyond the top level), or, in Exact mode, in a batch position (`batches.rs`): a place in a
//! level-2 slot's array, with the tick it is filed for, which becomes the *window* when the clock
//! reaches the slot (its positions listed by level-1 slot) and whose list for the clock's
//! level-1 slot is the *run* (listed by tick). `buckets.rs` owns the lists, the batches and their summaries
//! (per level, one `u64` of non-empty buckets and one of frozen ones); this file only says where
//! a timer goes and when a bucket is due. A timer is an index into the caller's storage, which
//! keeps its [`Links`].
//!
//! A bucket whose expiry the clock has reached is *frozen*: its timers are handed out one by one
//! straight from its list, so firing touches each timer once. `poll(now)` pops `DUE`, then a
//! frozen bucket, and otherwise moves the clock:
//! - Exact goes event by event, in time order: the earliest occupied slot is frozen (level 0) or
//!   cascaded (higher levels), the overflow list swept at the start of its top-level block, and
//!   `clock` set to each event's tick. This keeps the drain in expiry order. The cascade of a
//!   level-2 slot makes its batch the window without reading its timers, and it and the
//!   cascades above file the timers of their lists that land on level 1 in the window; the
//!   cascade of a level-1 slot makes its chain the run and adds the timers of the slot's list to
//!   it, so a level-1 slot's timers go into no level-0 list. Level 0's slots are then its
//!   buckets and the run's ticks together, level 1's its buckets and the window's chains, level
//!   2's its buckets and the batches: freezing slot `d` freezes both, and the bucket is handed
//!   out first.
//! - Coarse has no order to keep, so the first poll of a drain sets `clock = now` before handing
//!   out anything, freezes every bucket whose expiry is `<= now` on every level, and sweeps the
//!   overflow list if it is near. A timer linked during the drain with a deadline `<= now` is then
//!   simply due.
//!
//! Either way the next bucket is found from the bitmaps in O(levels), so a jump of any length
//! costs O(occupied buckets + timers moved), never O(ticks).
//!
//! ## Invariants (checked by `Wheel::check_invariants` and debug assertions)
//! - Never early: a timer is handed out only when `clock >= expiry`, the expiry it read when it
//!   was last placed (a due timer) or when its frozen bucket handed it out (a timer whose expiry
//!   is then later is placed again instead).
//! - Every timer in a wheel bucket has `expiry >= clock`, as read when it was placed.
//! - Exact: a slot on level `n` shares every digit above `n` with `clock`, its index is not below
//!   clock's digit `n`, and its timers expire at or after its start. So the lowest non-empty level
//!   holds the earliest event, and timers leave a drain in non-decreasing expiry order. Each
//!   cascade lowers a level: at most `levels - 1` per placement. A waiting batch is a level-2
//!   slot, a chain of the window a level-1 slot and the run level 0 (the clock's level-0
//!   window); each timer there expires at or after the tick it was filed for. The window holds
//!   timers only while the clock is in its slot, so it has been handed out before any slot
//!   above level 1 comes due; a level-2 cascade makes the chain of the window's first level-1
//!   slot the run at once, since the clock is at that slot's start.
//! - Coarse: no cascading; a timer moves only when it is relinked or when the bucket a later
//!   expiry deferred it in comes due. On level `n` the occupied bucket `i` stands for the unique
//!   granule `g` in `[ceil(clock / 8^n), ceil(clock / 8^n) + 63]` with `g % 64 == i`; placement
//!   keeps every timer inside that window (`delay < 63 * 8^n`), at that granule's tick.
//! - Later expiries (both modes): an expiry that rises while the timer is linked leaves the timer
//!   where it is, so a bucket's timers expire at or after its tick, never before. When the bucket
//!   comes due, a timer whose expiry is still ahead of the clock is placed again instead of
//!   handed out. A batched timer's expiry is read again only when the tick it was filed for comes
//!   due in the run (not when its batch becomes the window, nor when its chain becomes the
//!   run).
//! - A frozen bucket's tick is `<= clock` and it is not in any window; its timers are due or
//!   deferred. In Coarse mode a new timer whose bucket index collides with a frozen bucket thaws
//!   it first: due timers go to `DUE`, deferred ones are placed again.
//! - `OVERFLOW` timers are out of range of the top level; `overflow_bound` is a lower bound of
//!   their expiries. They are swept into the wheel when the clock gets near that bound.
//!
//! ## Storage whose expiry moves
//! [`Links::expiry`] is read once per placement, and the timer is filed by what it read. Storage
//! may raise a linked timer's expiry at any time without telling the wheel (the timer is placed
//! again when its bucket comes due, as above). An expiry that falls must be followed by
//! [`RawWheel::relink`] before the wheel can be relied on to hand it out in time; until then it
//! fires when its old placement comes due. A timer on `DUE` is handed out without a second look:
//! storage whose expiry can rise after the timer became due checks its own deadline when it is
//! handed out.
//!
//! ## Given up
//! - `next_expiry` is a lower bound, not always a tick at which something fires. Exact reports a
//!   slot's start on levels above 0 (the wheel wakes to cascade), and both modes report the
//!   overflow list's sweep, not its bound (the sweep reads each timer's expiry, so one whose
//!   expiry fell is handed out there: nothing is handed out before `next_expiry`). Both modes
//!   report the tick of a bucket whose timers were pushed later: a caller sleeping until then
//!   finds nothing due, once per such bucket, and the drain places those timers again. The
//!   trade: a keepalive refresh touches one entry instead of three (the entry and the two
//!   neighbours an unlink writes), and a busy server refreshes far more often than its buckets
//!   come due. Exact also reports a level-1 slot or tick of the window whose timers all left
//!   (`batches.rs` writes nothing when a timer leaves a batch): nothing fires there.
//! - After an overflow timer is unlinked, `overflow_bound` may be stale (too early) until the
//!   next sweep; the sweep that finds nothing costs one walk of the overflow list.
//! - A sweep walks the whole overflow list. It is meant for rare, very long timers.

use crate::batches::Place;
use crate::buckets::{Bucket, Buckets, due_bucket, level_and_slot, overflow_bucket, wheel_bucket};
use crate::geometry::{
    SLOT_BITS, SLOTS, coarse_slot_tick, granularity_shift, granules_ceil, granules_ceil_positive,
    granules_to_tick, level_for, level_for_delay, level_span_ticks, round_up, slot_for,
    slot_of_granule, slot_start, top_block_start,
};
pub use crate::lists::{Links, NIL};
use crate::{Mode, Stats};

/// What the drain does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Every timer on the bucket is due: hand them out one by one.
    Fire(Bucket),
    /// Exact mode: move every timer on the slot one or more levels down.
    Cascade(Bucket),
    /// Place the overflow timers that are now in range.
    Sweep,
}

/// What [`RawWheel::take_next`] found.
enum Take {
    /// A due timer, taken off its list: hand it out.
    Out(u32),
    /// A timer of a frozen bucket whose expiry rose, placed again: look again.
    PlacedAgain,
    /// Neither `DUE` nor a frozen bucket holds a timer.
    Empty,
}

/// A hierarchical timing wheel over link storage the caller owns (see the [module](self) docs).
///
/// Every call takes the storage; the wheel keeps only the list heads, the bitmaps and the clock.
/// The caller allocates indices, keeps one timer per index, and links, relinks and unlinks them;
/// [`poll`](Self::poll) hands an index back when it is due. Build one with
/// [`Builder::build_raw`](crate::Builder::build_raw).
///
/// ```
/// use tickwheel::raw::{Links, RawWheel};
/// use tickwheel::{Builder, Mode};
///
/// /// Two timers' links in arrays: the caller's storage.
/// #[derive(Default)]
/// struct Two {
///     next: [u32; 2],
///     prev: [u32; 2],
///     list: [u32; 2],
///     expiry: [u64; 2],
/// }
///
/// impl Links for Two {
///     fn next(&self, i: u32) -> u32 { self.next[i as usize] }
///     fn set_next(&mut self, i: u32, v: u32) { self.next[i as usize] = v }
///     fn prev(&self, i: u32) -> u32 { self.prev[i as usize] }
///     fn set_prev(&mut self, i: u32, v: u32) { self.prev[i as usize] = v }
///     fn list(&self, i: u32) -> u32 { self.list[i as usize] }
///     fn set_list(&mut self, i: u32, v: u32) { self.list[i as usize] = v }
///     fn expiry(&self, i: u32) -> u64 { self.expiry[i as usize] }
///     fn set_expiry(&mut self, i: u32, v: u64) { self.expiry[i as usize] = v }
/// }
///
/// let mut links = Two::default();
/// let mut wheel = Builder::new(Mode::Exact).build_raw().unwrap();
/// wheel.link(&mut links, 0, 20);
/// wheel.link(&mut links, 1, 10);
/// assert_eq!(wheel.next_expiry(), Some(10));
/// wheel.relink(&mut links, 0, 5);
/// assert_eq!(wheel.poll(&mut links, 30), Some(0));
/// wheel.unlink(&mut links, 1);
/// assert_eq!(wheel.poll(&mut links, 30), None);
/// assert!(wheel.is_empty());
/// ```
#[derive(Debug)]
pub struct RawWheel {
    mode: Mode,
    levels: usize,
    clock: u64,
    /// The lists, and which are occupied or frozen.
    pub(crate) buckets: Buckets,
    /// The counters, but for `cancelled`, which [`stats`](Self::stats) derives from the others
    /// and the length so that an unlink keeps one counter (the length) and not two.
    pub(crate) stats: Stats,
    /// Timers forgotten by [`clear`](Self::clear), for deriving `cancelled`.
    cleared: u64,
}

impl RawWheel {
    pub(crate) fn from_parts(mode: Mode, levels: usize, start: u64) -> Self {
        RawWheel {
            mode,
            levels,
            clock: start,
            buckets: Buckets::new(
                levels,
                crate::lists::few_chain_lists(mode),
                mode == Mode::Exact,
            ),
            stats: Stats::default(),
            cleared: 0,
        }
    }

    /// Links the timer `index` (on no list) to fire at tick `deadline`; returns its expiry (the
    /// deadline, or in Coarse mode the deadline rounded up to its granule; the clock for a
    /// deadline at or before it). Any deadline is accepted.
    #[inline]
    pub fn link<L: Links>(&mut self, links: &mut L, index: u32, deadline: u64) -> u64 {
        let (bucket, expiry) = self.locate(links, deadline);
        self.buckets.insert(links, bucket, index, expiry);
        self.stats.inserted += 1;
        expiry
    }

    /// [`link`](Self::link) in two halves, for storage that writes a new timer whole: `locate`
    /// gives the bucket and expiry of `deadline`, this the list the entry records there (the
    /// bucket, or a batch position) and the timer `index` goes in front of on it (see
    /// [`Buckets::front`]); the storage writes the entry as [`Links::set_head`] would and
    /// [`linked_new`](Self::linked_new) links the rest.
    #[inline]
    pub(crate) fn front(&self, bucket: Bucket, index: u32) -> (Bucket, u32) {
        self.buckets.front(bucket, index)
    }

    /// The second half of [`front`](Self::front), for the timer `index` written on `list` in
    /// front of `head`.
    #[inline]
    pub(crate) fn linked_new<L: Links>(
        &mut self,
        links: &mut L,
        (list, index, head): (Bucket, u32, u32),
        expiry: u64,
    ) {
        self.buckets
            .inserted_front(links, (list, index, head), expiry);
        self.stats.inserted += 1;
    }

    /// Takes the linked timer `index` off its list; it will not be handed out.
    #[inline]
    pub fn unlink<L: Links>(&mut self, links: &mut L, index: u32) {
        self.buckets.remove(links, index);
    }

    /// [`unlink`](Self::unlink) of a timer whose `next`, `prev` and `list` the caller read as it
    /// freed the entry: the entry itself is not touched again.
    #[inline]
    pub(crate) fn unlink_known<L: Links>(
        &mut self,
        links: &mut L,
        index: u32,
        fields: (u32, u32, u32),
    ) {
        self.buckets.remove_known(links, index, fields);
    }

    /// Exact mode: the batch position a timer now on the batch position `old` gets if it moves
    /// to `deadline` on level 2 and that slot's batch has room; `None` for any other move.
    #[inline(always)]
    pub(crate) fn batch_move_position(&self, old: Bucket, deadline: u64) -> Option<Bucket> {
        if deadline <= self.clock {
            return None;
        }
        let at = exact_slot(self.levels, self.clock, deadline)?;
        self.buckets.batch_to_batch(old, at)
    }

    /// The move [`batch_move_position`](Self::batch_move_position) named, once the storage
    /// wrote the timer's new list `list` and `expiry`.
    #[inline(always)]
    pub(crate) fn batch_moved(&mut self, index: u32, old: Bucket, list: Bucket, expiry: u64) {
        self.buckets.batch_moved(index, old, list, expiry);
    }

    /// Moves the linked timer `index` to `deadline`, earlier or later; returns its new expiry.
    /// (To push a timer later without touching any list, raise its [`Links::expiry`] instead.)
    #[inline]
    pub fn relink<L: Links>(&mut self, links: &mut L, index: u32, deadline: u64) -> u64 {
        let (bucket, expiry) = self.place(deadline);
        self.stats.resets += 1;
        self.move_to(links, index, bucket, expiry)
    }

    /// Moves the linked timer `index` to `bucket` (placed from the current clock) with `expiry`,
    /// and returns the expiry it ends with. Out of line, so that a caller's own fast path stays
    /// small enough to inline.
    #[inline(never)]
    pub(crate) fn move_to<L: Links>(
        &mut self,
        links: &mut L,
        index: u32,
        bucket: Bucket,
        expiry: u64,
    ) -> u64 {
        // Thawing a frozen bucket may move this very timer to `DUE`.
        self.settle(links, bucket);
        if bucket == links.list(index) {
            self.buckets.set_expiry(links, index, expiry);
            self.stats.resets_in_place += 1;
            return expiry;
        }
        self.buckets.relink(links, index, bucket, expiry);
        expiry
    }

    /// [`move_to`](Self::move_to) in two halves, for storage that rewrites the entry itself, as
    /// an insert does (see [`front`](Self::front)): `prepare_move` thaws `bucket` if need be and
    /// names the list the entry records there and the entry the timer goes in front of; the
    /// storage reads the entry's old `next`, `prev` and `list`, writes it as [`Links::set_head`]
    /// would (or, already on that list, sets only its expiry), and [`moved`](Self::moved) joins
    /// the old neighbours and the new. One lookup of the entry instead of three.
    #[inline]
    pub(crate) fn prepare_move<L: Links>(
        &mut self,
        links: &mut L,
        index: u32,
        bucket: Bucket,
    ) -> (Bucket, u32) {
        self.settle(links, bucket);
        self.buckets.front(bucket, index)
    }

    /// The second half of [`prepare_move`](Self::prepare_move), for a timer that left the list
    /// `old.2` (with neighbours `old.0` after it and `old.1` before it) for `list`, in front of
    /// `head`; `old` is `None` if it stayed on its list and only its expiry changed.
    #[inline]
    pub(crate) fn moved<L: Links>(
        &mut self,
        links: &mut L,
        index: u32,
        old: Option<(u32, u32, u32)>,
        (list, head): (Bucket, u32),
        expiry: u64,
    ) {
        match old {
            None => {
                self.buckets.expiry_set(list, expiry);
                self.stats.resets_in_place += 1;
            }
            Some(old) => self.buckets.moved(links, index, old, (list, head), expiry),
        }
    }

    /// Advances the clock towards `now` and hands out one timer whose expiry is `<= now`: it is
    /// on no list from then on, and its `list` field is stale.
    ///
    /// Returns `None` once nothing more is due; the clock then reads `max(now(), now)`. The clock
    /// never goes back: a `now` below [`now()`](Self::now) returns `None` and changes nothing.
    // Always inlined, as `Wheel::poll` is: a call here costs about ten instructions a timer.
    #[inline(always)]
    pub fn poll<L: Links>(&mut self, links: &mut L, now: u64) -> Option<u32> {
        // The common case, the next timer of a bucket being handed out, inline; moving the clock
        // out of line.
        if now == self.clock || (now > self.clock && self.mode == Mode::Exact) {
            if let Take::Out(index) = self.take_next(links) {
                return Some(index);
            }
        }
        self.poll_slow(links, now)
    }

    /// [`poll`](Self::poll) when the next timer is not simply the head of `DUE` or of a frozen
    /// bucket.
    #[inline(never)]
    fn poll_slow<L: Links>(&mut self, links: &mut L, now: u64) -> Option<u32> {
        if now < self.clock {
            return None;
        }
        if self.mode == Mode::Coarse && now > self.clock {
            // Move the clock first, even with timers still to hand out: a timer linked during
            // this drain is then placed relative to `now`, and is due if its deadline is.
            self.advance_coarse(links, now);
        }
        loop {
            match self.take_next(links) {
                Take::Out(index) => return Some(index),
                Take::PlacedAgain => continue,
                Take::Empty => {}
            }
            match self.next_event() {
                Some((at, event)) if at <= now => match self.mode {
                    Mode::Exact => {
                        self.clock = self.clock.max(at);
                        match event {
                            Event::Fire(bucket) => {
                                self.buckets.freeze(bucket);
                                // The tick's run timers are named in an array: start loading
                                // their entries before the first is handed out.
                                self.buckets.batches.each_frozen(|i| links.prefetch(i));
                            }
                            Event::Cascade(bucket) => self.cascade(links, bucket),
                            Event::Sweep => self.sweep(links),
                        }
                    }
                    Mode::Coarse => self.advance_coarse(links, now),
                },
                _ => {
                    self.clock = now;
                    return None;
                }
            }
        }
    }

    /// Takes the next timer of `DUE`, or else of the first frozen bucket, at the current clock.
    #[inline(always)]
    fn take_next<L: Links>(&mut self, links: &mut L) -> Take {
        if self.buckets.has_due() {
            let (due, _) = self.buckets.take_front_occupied(links, self.buckets.due());
            return Take::Out(self.hand_out(due));
        }
        let (index, expiry) = if let Some(bucket) = self.buckets.first_frozen() {
            self.buckets.take_front_occupied(links, bucket)
        } else if let Some(index) = self.buckets.batches.take(links) {
            // Exact: the run's timers of this tick, after those linked into its bucket.
            (index, links.expiry(index))
        } else {
            return Take::Empty;
        };
        if expiry > self.clock {
            // Pushed later after it was placed.
            self.place_again(links, index, expiry);
            return Take::PlacedAgain;
        }
        Take::Out(self.hand_out(index))
    }

    /// The tick at which the bucket holding the linked timer `index` comes due, when the wheel
    /// next reads the timer's expiry (to hand it out or place it again): the clock for a bucket
    /// being handed out. A timer whose deadline moves earlier but not before this tick can stay
    /// where it is, as one whose deadline moves later does. `None` for a timer already due or on
    /// the overflow list (whose bound a move keeps).
    pub fn bucket_tick<L: Links>(&self, links: &L, index: u32) -> Option<u64> {
        let bucket = links.list(index);
        if self.buckets.batches.holds(bucket) {
            // Read when the tick it was filed for comes due.
            return Some(self.batched_tick(bucket));
        }
        if !self.buckets.is_wheel(bucket) {
            return None;
        }
        if self.buckets.is_frozen(bucket) {
            return Some(self.clock);
        }
        let (level, slot) = crate::buckets::level_and_slot(bucket);
        Some(match self.mode {
            Mode::Exact => slot_start(self.clock, level, slot),
            Mode::Coarse => coarse_slot_tick(self.clock, level, slot),
        })
    }

    /// The tick at which the timer in the batch position `list` is next read: the one it was
    /// filed for, or the clock in a tick being handed out.
    fn batched_tick(&self, list: Bucket) -> u64 {
        match self.buckets.batches.place(list) {
            Place::Run { tick } if self.buckets.batches.frozen_at(tick) => self.clock,
            Place::Run { tick } => slot_start(self.clock, 0, tick),
            Place::Window { slot, tick } => slot_start(self.clock, 1, slot) + tick as u64,
            Place::Waiting { slot, tick } => slot_start(self.clock, 2, slot) + tick as u64,
        }
    }

    /// A tick at which something may be due, never later than the earliest linked expiry or the
    /// clock, whichever is later; `None` if nothing is linked. O(levels). See
    /// [`Wheel::next_expiry`](crate::Wheel::next_expiry).
    pub fn next_expiry(&self) -> Option<u64> {
        if self.buckets.has_due()
            || self.buckets.first_frozen().is_some()
            || self.buckets.batches.frozen()
        {
            return Some(self.clock);
        }
        // The overflow list's sweep, not its bound: the sweep reads each timer's expiry, and one
        // that fell since it was placed is handed out from then on.
        self.next_event().map(|(at, _)| at)
    }

    /// The wheel's clock: the tick it has been advanced to.
    pub fn now(&self) -> u64 {
        self.clock
    }

    /// The number of linked timers.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True if no timer is linked.
    pub fn is_empty(&self) -> bool {
        self.buckets.len() == 0
    }

    /// The wheel's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The number of levels below the overflow list.
    pub fn levels(&self) -> usize {
        self.levels
    }

    /// Counters since the wheel was built (`inserted` counts links, `cancelled` unlinks, `resets`
    /// relinks).
    pub fn stats(&self) -> Stats {
        // Every timer linked is still linked, fired, forgotten by `clear`, or unlinked.
        let gone = self.stats.fired + self.cleared + self.buckets.len() as u64;
        Stats {
            cancelled: self.stats.inserted - gone,
            ..self.stats
        }
    }

    /// Forgets every linked timer (their storage is the caller's to clear); the clock and the
    /// counters stay.
    pub fn clear(&mut self) {
        self.cleared += self.buckets.len() as u64;
        self.buckets.clear();
    }

    // ---- placement ------------------------------------------------------------------------

    /// The bucket and expiry of a timer with `deadline`, seen from the current clock.
    #[inline]
    pub(crate) fn place(&self, deadline: u64) -> (Bucket, u64) {
        place(self.mode, self.levels, self.clock, deadline)
    }

    /// `place`, and in Coarse mode, thaws a frozen bucket the timer would collide with.
    #[inline(always)]
    pub(crate) fn locate<L: Links>(&mut self, links: &mut L, deadline: u64) -> (Bucket, u64) {
        let (bucket, expiry) = self.place(deadline);
        self.settle(links, bucket);
        (bucket, expiry)
    }

    /// The second half of `locate`, for a placement already computed: thaws `bucket` if it is
    /// frozen (Coarse mode only), so the timer can join it. Thawing may move any timer of that
    /// bucket, the one being placed among them, so its list is read after this.
    #[inline(always)]
    fn settle<L: Links>(&mut self, links: &mut L, bucket: Bucket) {
        if self.buckets.is_frozen(bucket) {
            debug_assert_eq!(
                self.mode,
                Mode::Coarse,
                "Exact never places into a due slot"
            );
            self.thaw(links, bucket);
        }
        debug_assert!(
            !self.buckets.is_frozen(bucket),
            "located in a frozen bucket"
        );
    }

    /// Empties a frozen bucket so it can take a timer of a later window: timers whose expiry is
    /// reached go to `DUE`; timers pushed later are placed again.
    fn thaw<L: Links>(&mut self, links: &mut L, bucket: Bucket) {
        let due = self.buckets.due();
        let mut detached = self.buckets.take(bucket);
        while let Some((index, expiry)) = Buckets::next_detached(links, &mut detached) {
            if expiry <= self.clock {
                self.buckets.link_detached(links, due, index, expiry);
            } else {
                // May thaw another bucket in turn; each thaw empties one frozen bucket and
                // freezes none, so this ends. `bucket` itself is no longer frozen.
                let (to, placed) = self.locate(links, expiry);
                self.buckets.link_detached(links, to, index, placed);
                self.stats.replaced += 1;
            }
        }
    }

    // ---- the drain ------------------------------------------------------------------------

    /// A timer detached from a due list leaves the wheel.
    #[inline]
    fn hand_out(&mut self, index: u32) -> u32 {
        self.buckets.handed_out();
        self.stats.fired += 1;
        index
    }

    /// The earliest event, if any.
    fn next_event(&self) -> Option<(u64, Event)> {
        let wheel = self.next_wheel_event();
        if !self.buckets.has_overflow() {
            return wheel;
        }
        let sweep_at = self.sweep_tick();
        match wheel {
            Some((at, event)) if at <= sweep_at => Some((at, event)),
            _ => Some((sweep_at, Event::Sweep)),
        }
    }

    /// The tick at which the drain next sweeps the overflow list (which must be non-empty).
    fn sweep_tick(&self) -> u64 {
        match self.mode {
            Mode::Exact => top_block_start(self.buckets.overflow_bound(), self.levels),
            Mode::Coarse => self.coarse_sweep_tick(),
        }
        .max(self.clock)
    }

    /// The earliest bucket to fire or cascade, from the bitmaps.
    fn next_wheel_event(&self) -> Option<(u64, Event)> {
        match self.mode {
            Mode::Exact => self.next_exact_event(),
            Mode::Coarse => self.next_coarse_event(),
        }
    }

    fn next_exact_event(&self) -> Option<(u64, Event)> {
        // Every occupied slot is at or after the clock's digit on its level.
        let (level, slot) = self
            .buckets
            .first_occupied(|level| slot_for(self.clock, level))?;
        let at = slot_start(self.clock, level, slot);
        let bucket = wheel_bucket(level, slot);
        Some((
            at,
            if level == 0 {
                Event::Fire(bucket)
            } else {
                Event::Cascade(bucket)
            },
        ))
    }

    fn next_coarse_event(&self) -> Option<(u64, Event)> {
        let mut best: Option<(u64, Event)> = None;
        for level in 0..self.levels {
            let shift = granularity_shift(level);
            let first_granule = granules_ceil(self.clock, shift);
            let Some(offset) = self
                .buckets
                .first_live_after(level, slot_of_granule(first_granule))
            else {
                continue;
            };
            let granule = first_granule + u64::from(offset);
            let at = granules_to_tick(granule, shift);
            if best.is_none_or(|(earliest, _)| at < earliest) {
                let bucket = wheel_bucket(level, slot_of_granule(granule));
                best = Some((at, Event::Fire(bucket)));
            }
        }
        best
    }

    /// Coarse mode: moves the clock to `now`, freezing every bucket whose expiry it reaches.
    fn advance_coarse<L: Links>(&mut self, links: &mut L, now: u64) {
        for level in 0..self.levels {
            let shift = granularity_shift(level);
            let first_granule = granules_ceil(self.clock, shift);
            // The last granule whose tick is `<= now`; at `u64::MAX` that includes the granule
            // whose tick saturates to `u64::MAX`.
            let last_granule = if now == u64::MAX {
                granules_ceil(now, shift)
            } else {
                now >> shift
            };
            if last_granule < first_granule {
                continue;
            }
            // Granules `first..=last`, at most one lap of the 64 slots.
            let reached = (last_granule - first_granule).min(SLOTS as u64 - 1) as u32 + 1;
            self.buckets
                .freeze_run(level, slot_of_granule(first_granule), reached);
        }
        self.clock = now;
        if self.buckets.has_overflow() && self.coarse_sweep_tick() <= now {
            self.sweep(links);
        }
    }

    fn coarse_sweep_tick(&self) -> u64 {
        // Half the top level's span early: every sweep then places at least the earliest
        // timer, and the next sweep is at least half a span later.
        self.buckets
            .overflow_bound()
            .saturating_sub(level_span_ticks(self.levels - 1) / 2)
    }

    /// Links a timer detached from a due bucket, whose expiry rose to `expiry` after it was
    /// placed, where it now belongs.
    fn place_again<L: Links>(&mut self, links: &mut L, index: u32, expiry: u64) {
        // Coarse: the new bucket may be a frozen one (even the one this timer came from, a lap
        // later); `locate` thaws it first. The detached timer is on no list, so the thaw
        // does not see it.
        let (to, placed) = self.locate(links, expiry);
        self.buckets.link_detached(links, to, index, placed);
        self.stats.replaced += 1;
    }

    /// Exact mode: re-places every timer of a slot relative to the clock (the slot's start).
    /// The clock's level-2 slot becomes the window (`batches.rs`): a level-2 slot's batch is
    /// chained there by level-1 slot without reading its timers, and a timer of the slot's list
    /// (or of a slot above) that lands on level 1 is appended to the window.
    fn cascade<L: Links>(&mut self, links: &mut L, bucket: Bucket) {
        let (level, slot) = level_and_slot(bucket);
        if level == 1 {
            return self.collect(links, bucket);
        }
        // The window (and its run) ends before any slot above level 1 comes due.
        let mut moved = self.buckets.batches.enter(if level == 2 {
            slot
        } else {
            slot_for(self.clock, 2)
        });
        let mut detached = self.buckets.take(bucket);
        while let Some((index, expiry)) = Buckets::next_detached(links, &mut detached) {
            // Down a level at least, unless the expiry rose past this slot. Nearly always to a
            // wheel bucket: that case goes straight there.
            match exact_slot(self.levels, self.clock, expiry) {
                Some((1, _))
                    if expiry > self.clock && self.buckets.batches.file(links, index, expiry) => {}
                Some((level, slot)) if expiry > self.clock => {
                    self.buckets.link_wheel(links, (level, slot), index, expiry);
                }
                _ => {
                    let (to, placed) = self.place(expiry);
                    self.buckets.link_detached(links, to, index, placed);
                }
            }
            moved += 1;
        }
        // A level-2 batch's timers filed for the first 64 ticks are on the chain of the level-1
        // slot the clock has reached: they are the run now, beside level 0's buckets.
        if self.buckets.batches.chained() & 1 << slot_for(self.clock, 1) != 0 {
            self.buckets.batches.begin_run(slot_for(self.clock, 1));
        }
        self.buckets.batches.settle();
        self.stats.cascades += moved;
    }

    /// Exact mode: the cascade of a level-1 slot, whose start the clock has reached. Its chain
    /// of the window becomes the run, and the timers linked into its list join the run by tick
    /// rather than the level-0 buckets of the window the clock entered (which are empty: every
    /// earlier event has been handled). A timer whose expiry rose past the window, or one the
    /// run has no room for, is placed as a cascade places it.
    fn collect<L: Links>(&mut self, links: &mut L, bucket: Bucket) {
        let mut detached = self.buckets.take(bucket);
        // The window is the clock's level-2 slot: entered by that slot's cascade, or here if the
        // slot had nothing on level 2.
        let mut moved = self.buckets.batches.enter(slot_for(self.clock, 2));
        self.buckets.batches.begin_run(level_and_slot(bucket).1);
        let window = self.clock >> SLOT_BITS;
        while let Some((index, expiry)) = Buckets::next_detached(links, &mut detached) {
            let in_run = expiry > self.clock
                && expiry >> SLOT_BITS == window
                && self
                    .buckets
                    .batches
                    .link_run(links, index, slot_for(expiry, 0), expiry);
            if !in_run {
                let (to, placed) = self.place(expiry);
                self.buckets.link_detached(links, to, index, placed);
            }
            moved += 1;
        }
        self.buckets.batches.settle();
        self.stats.cascades += moved;
    }

    /// Places every overflow timer that is now in range; recomputes the bound of the rest.
    fn sweep<L: Links>(&mut self, links: &mut L) {
        let overflow = self.buckets.overflow();
        let mut detached = self.buckets.take(overflow);
        while let Some((index, expiry)) = Buckets::next_detached(links, &mut detached) {
            let (to, placed) = self.locate(links, expiry);
            debug_assert!(
                placed == expiry || to == self.buckets.due() || self.mode == Mode::Coarse,
                "overflow keeps its expiry"
            );
            // The expiry is kept (an overflow expiry is rounded to the top level's granule, so
            // no lower level rounds it further); linking back onto the overflow list recomputes
            // its bound.
            self.buckets.link_detached(links, to, index, expiry);
            if to != overflow {
                self.stats.cascades += 1;
            }
        }
    }

    /// Walks every list and panics with a description if an invariant does not hold, for
    /// storage whose expiries are the ones the wheel set. O(timers).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn check_invariants<L: Links>(&self, links: &L) {
        self.buckets.check_bitmaps();
        self.buckets.batches.check(links);
        let mut seen = 0;
        for bucket in 0..(self.levels * SLOTS + 2) as Bucket {
            for index in self.buckets.members(links, bucket) {
                seen += 1;
                assert_eq!(
                    links.list(index),
                    bucket,
                    "entry {index} records its bucket"
                );
                let expiry = links.expiry(index);
                if bucket == self.buckets.overflow() {
                    let bound = self.buckets.overflow_bound();
                    assert!(expiry >= bound, "overflow bound");
                } else if self.buckets.is_frozen(bucket) {
                    // Due, or pushed later and placed again when handed out.
                } else if self.buckets.is_wheel(bucket) {
                    self.check_placement(bucket, expiry);
                }
            }
        }
        for (bucket, index, place) in self.buckets.batches.members(links) {
            seen += 1;
            assert_eq!(self.mode, Mode::Exact, "batches in Coarse mode");
            assert_eq!(
                links.list(index),
                bucket,
                "entry {index} records its position"
            );
            let expiry = links.expiry(index);
            match place {
                Place::Run { tick } if self.buckets.batches.frozen_at(tick) => continue,
                Place::Run { .. } => {}
                Place::Window { slot, .. } => assert!(
                    slot > slot_for(self.clock, 1),
                    "window slot {slot} behind the clock"
                ),
                Place::Waiting { slot, .. } => assert!(
                    slot > slot_for(self.clock, 2),
                    "batch {slot} behind the clock"
                ),
            }
            let tick = self.batched_tick(bucket);
            assert!(
                tick > self.clock,
                "{place:?} behind the clock {}",
                self.clock
            );
            assert!(
                expiry >= tick,
                "{place:?}: timer at {expiry} filed for {tick}"
            );
        }
        assert_eq!(
            seen,
            self.buckets.len(),
            "every linked timer is on one list"
        );
    }

    #[cfg(feature = "test-hooks")]
    fn check_placement(&self, bucket: Bucket, expiry: u64) {
        assert!(
            expiry >= self.clock,
            "bucket {bucket}: expiry {expiry} behind clock {}",
            self.clock
        );
        let (level, slot) = crate::buckets::level_and_slot(bucket);
        match self.mode {
            Mode::Exact => {
                // The slot is not behind the clock, and comes due no later than its timers
                // (later only for a timer whose expiry was pushed back).
                assert!(
                    slot >= slot_for(self.clock, level),
                    "Exact slot {slot} behind the clock"
                );
                let start = slot_start(self.clock, level, slot);
                assert!(
                    expiry >= start,
                    "Exact timer at {expiry} in the slot starting {start}"
                );
            }
            Mode::Coarse => {
                // The bucket stands for the one granule of the window `first..first + 64` in
                // its slot; its timers expire then, or later if their expiry rose.
                let shift = granularity_shift(level);
                let first = granules_ceil(self.clock, shift);
                let tick = coarse_slot_tick(self.clock, level, slot);
                assert!(
                    expiry >= tick,
                    "Coarse timer at {expiry} in the bucket of tick {tick}"
                );
                let granule = granules_ceil(expiry, shift);
                if granule - first < SLOTS as u64 && expiry == tick {
                    assert_eq!(
                        crate::geometry::bucket_for(expiry, level),
                        slot,
                        "bucket of {expiry}"
                    );
                }
            }
        }
    }
}

/// Exact mode: the level and slot of `deadline` on a wheel whose clock reads `clock`, or `None`
/// past the top level (the overflow list).
#[inline(always)]
fn exact_slot(levels: usize, clock: u64, deadline: u64) -> Option<(usize, usize)> {
    let level = level_for(clock, deadline);
    (level < levels).then(|| (level, slot_for(deadline, level)))
}

/// The bucket and expiry of a timer with `deadline` on a wheel in `mode` with `levels` levels
/// whose clock reads `clock`. A free function, so that `Wheel::reset` can compute it while it
/// holds the timer's entry.
#[inline]
pub(crate) fn place(mode: Mode, levels: usize, clock: u64, deadline: u64) -> (Bucket, u64) {
    let (due, overflow) = (due_bucket(levels), overflow_bucket(levels));
    if deadline <= clock {
        return (due, clock);
    }
    let placed = match mode {
        Mode::Exact => match exact_slot(levels, clock, deadline) {
            Some((level, slot)) => (wheel_bucket(level, slot), deadline),
            None => return (overflow, deadline),
        },
        Mode::Coarse => {
            let level = level_for_delay(deadline - clock);
            if level >= levels {
                let top = granularity_shift(levels - 1);
                return (overflow, round_up(deadline, top));
            }
            let shift = granularity_shift(level);
            // `deadline > clock`, so at least 1.
            let granule = granules_ceil_positive(deadline, shift);
            (
                wheel_bucket(level, slot_of_granule(granule)),
                granules_to_tick(granule, shift),
            )
        }
    };
    debug_assert!(
        placed.1 >= deadline,
        "never early: {deadline} placed at {placed:?}"
    );
    placed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Builder;
    use crate::lists::plain::Plain;

    #[test]
    fn bucket_tick_is_when_the_wheel_next_reads_the_expiry() {
        let mut links = Plain::with(4);
        let mut exact = Builder::new(Mode::Exact).build_raw().unwrap();
        exact.link(&mut links, 0, 100); // level 1, the slot starting at 64
        exact.link(&mut links, 1, 5); // level 0: its own tick
        exact.link(&mut links, 2, 0); // due at once
        assert_eq!(exact.bucket_tick(&links, 0), Some(64));
        assert_eq!(exact.bucket_tick(&links, 1), Some(5));
        assert_eq!(exact.bucket_tick(&links, 2), None, "on the due list");

        let mut links = Plain::with(4);
        let mut coarse = Builder::new(Mode::Coarse).build_raw().unwrap();
        coarse.link(&mut links, 0, 1000); // rounded up to its level's granule
        coarse.link(&mut links, 1, u64::MAX); // past the top level
        assert_eq!(coarse.bucket_tick(&links, 0), Some(1024));
        assert_eq!(coarse.bucket_tick(&links, 1), None, "on the overflow list");
        // Pushed later than its bucket: when the bucket comes due the timer is placed again, and
        // its new bucket is the one reported.
        links.set_expiry(0, 3000);
        assert_eq!(coarse.poll(&mut links, 1024), None);
        assert_eq!(coarse.bucket_tick(&links, 0), Some(3008));
    }
}

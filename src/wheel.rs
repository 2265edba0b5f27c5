//! The wheel: levels of buckets over the slab, a clock, and the drain that moves the clock.
//!
//! ## Model
//! `clock` is the last tick the wheel has been advanced to. Every pending timer is on exactly one
//! list (`slab.rs`): a wheel bucket (`level * 64 + slot`), `DUE` (expiry already reached), or
//! `OVERFLOW` (beyond the top level). `buckets.rs` owns the lists and their summaries (per level,
//! one `u64` of non-empty buckets and one of frozen ones); this file only says where a timer goes
//! and when a bucket is due.
//!
//! A bucket whose expiry the clock has reached is *frozen*: its timers are
//! handed out one by one straight from its list, so firing touches each timer once.
//! `poll(now)` pops `DUE`, then a frozen bucket, and otherwise moves the clock:
//! - Exact goes event by event, in time order: the earliest occupied slot is frozen (level 0) or
//!   cascaded (higher levels), the overflow list swept at the start of its top-level block, and
//!   `clock` set to each event's tick. This keeps the drain in expiry order.
//! - Coarse has no order to keep, so the first poll of a drain sets `clock = now` before handing
//!   out anything, freezes every bucket whose expiry is `<= now` on every level, and sweeps the
//!   overflow list if it is near. A timer inserted or reset during the drain with a deadline
//!   `<= now` is then simply due.
//!
//! Either way the next bucket is found from the bitmaps in O(levels), so a jump of any length
//! costs O(occupied buckets + timers moved), never O(ticks).
//!
//! ## Invariants (checked by `check_invariants` and debug assertions)
//! - Never early: a timer fires only when `clock >= expiry`, and `expiry >= deadline`.
//! - Every timer in a wheel bucket has `expiry >= clock`.
//! - Exact: a slot on level `n` shares every digit above `n` with `clock`, its index is not below
//!   clock's digit `n`, and its timers expire at or after its start. So the lowest non-empty level
//!   holds the earliest event, and timers leave a drain in non-decreasing expiry order. Each
//!   cascade lowers a level: at most `levels - 1` per placement.
//! - Coarse: no cascading; a timer moves only when a reset moves it or when the bucket a reset
//!   deferred it in comes due. On level `n` the occupied bucket `i` stands for the unique granule
//!   `g` in `[ceil(clock / 8^n), ceil(clock / 8^n) + 63]` with `g % 64 == i`; placement keeps
//!   every timer inside that window (`delay < 63 * 8^n`), at that granule's tick.
//! - Deferred resets (both modes): a reset to a later expiry leaves the timer where it is, so a
//!   bucket's timers expire at or after its tick, never before. When the bucket comes due, a
//!   timer whose expiry is still ahead of the clock is placed again instead of fired.
//! - A frozen bucket's tick is `<= clock` and it is not in any window; its timers are due or
//!   deferred. In Coarse mode a new timer whose bucket index collides with a frozen bucket thaws
//!   it first: due timers go to `DUE`, deferred ones are placed again.
//! - `OVERFLOW` timers are out of range of the top level; `overflow_bound` is a lower bound of
//!   their expiries. They are swept into the wheel when the clock gets near that bound.
//!
//! ## Given up
//! - `next_expiry` is a lower bound, not always a tick at which something fires. Exact reports a
//!   slot's start on levels above 0 (the wheel wakes to cascade). Both modes report the tick of a
//!   bucket whose timers a reset pushed later: a caller sleeping until then finds nothing due,
//!   once per such bucket, and the drain places those timers again. Without deferred resets,
//!   Coarse reports the earliest expiry exactly. The trade: a keepalive refresh touches one slab
//!   entry instead of three (the entry and the two neighbours an unlink writes), and a busy
//!   server refreshes far more often than its buckets come due.
//! - After an overflow timer is cancelled, `overflow_bound` may be stale (too early) until the
//!   next sweep; the sweep that finds nothing costs one walk of the overflow list.
//! - A sweep walks the whole overflow list. It is meant for rare, very long timers.

use crate::buckets::{Bucket, Buckets, due_bucket, is_wheel_bucket, overflow_bucket, wheel_bucket};
use crate::geometry::{
    SLOTS, granularity_shift, granules_ceil, granules_ceil_positive, granules_to_tick, level_for,
    level_for_delay, level_span_ticks, round_up, slot_for, slot_of_granule, slot_start,
    top_block_start,
};
use crate::{Builder, Full, Mode, Stats, TimerId};

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

/// A hierarchical timing wheel holding timers with payloads of type `T`.
///
/// See the [crate documentation](crate) for the two modes and their level tables.
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// let mut wheel = Wheel::new(Mode::Exact);
/// let a = wheel.insert(10, "a").unwrap();
/// let b = wheel.insert(20, "b").unwrap();
/// assert!(wheel.reset(b, 5));
/// assert_eq!(wheel.cancel(a), Some("a"));
/// assert_eq!(wheel.next_expiry(), Some(5));
/// assert_eq!(wheel.poll(4), None);
/// assert_eq!(wheel.poll(5), Some((b, "b")));
/// assert!(wheel.is_empty());
/// ```
#[derive(Debug)]
pub struct Wheel<T> {
    mode: Mode,
    levels: usize,
    clock: u64,
    /// The timers, their lists, and which lists are occupied or frozen.
    buckets: Buckets<T>,
    capacity: Option<usize>,
    stats: Stats,
    /// Expiry of the last timer fired, to check the order invariant in debug builds.
    #[cfg(debug_assertions)]
    last_fired: u64,
}

impl Wheel<()> {
    /// A builder to choose levels, capacity and the starting tick; the payload type is chosen by
    /// [`Builder::build`].
    pub fn builder(mode: Mode) -> Builder {
        Builder::new(mode)
    }
}

impl<T> Wheel<T> {
    /// An unbounded wheel in `mode` with the default number of levels, its clock at tick 0.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let wheel: Wheel<u64> = Wheel::new(Mode::Coarse);
    /// assert_eq!((wheel.now(), wheel.levels(), wheel.capacity()), (0, 9, None));
    /// ```
    pub fn new(mode: Mode) -> Self {
        Builder::new(mode)
            .build()
            .expect("default geometry is valid")
    }

    pub(crate) fn from_parts(
        mode: Mode,
        levels: usize,
        capacity: Option<usize>,
        start: u64,
        generation_seed: u32,
    ) -> Self {
        let reserve = capacity.unwrap_or(0);
        Wheel {
            mode,
            levels,
            clock: start,
            buckets: Buckets::new(levels, reserve, generation_seed),
            capacity,
            stats: Stats::default(),
            #[cfg(debug_assertions)]
            last_fired: start,
        }
    }

    /// Adds a timer that expires at tick `deadline` and returns its id.
    ///
    /// Any deadline is accepted: one at or before [`now`](Self::now) is due at once (its expiry
    /// is `now()`), one beyond the top level waits on the overflow list. On a bounded wheel that
    /// is full, the value is handed back in [`Full`].
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::new(Mode::Exact);
    /// let soon = wheel.insert(3, "soon").unwrap();
    /// let late = wheel.insert(u64::MAX, "end of time").unwrap();
    /// assert_eq!(wheel.expiry(soon), Some(3));
    /// assert_eq!(wheel.expiry(late), Some(u64::MAX));
    /// assert_eq!(wheel.len(), 2);
    /// ```
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) -> Result<TimerId, Full<T>> {
        if self.capacity.is_some_and(|cap| self.buckets.len() >= cap) {
            return Err(Full(value));
        }
        let (bucket, expiry) = self.locate(deadline);
        let Some((index, generation)) = self.buckets.insert(bucket, expiry, value) else {
            unreachable!("u32 index space exhausted before capacity was reached");
        };
        self.stats.inserted += 1;
        Ok(TimerId { index, generation })
    }

    /// Removes a pending timer and returns its value; `None` if `id` is stale or foreign.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::new(Mode::Coarse);
    /// let id = wheel.insert(30_000, "request timeout").unwrap();
    /// // The response went out in time.
    /// assert_eq!(wheel.cancel(id), Some("request timeout"));
    /// assert_eq!(wheel.cancel(id), None);
    /// assert!(wheel.is_empty());
    /// ```
    #[inline]
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let (value, _) = self.buckets.remove(id.index, id.generation)?;
        self.stats.cancelled += 1;
        Some(value)
    }

    /// Moves a pending timer to a new deadline; `false` if `id` is stale or foreign.
    ///
    /// When the new expiry falls in the timer's current bucket, or is later than the current
    /// one (the keepalive refresh), only the expiry changes: a timer pushed later stays in its
    /// bucket and is placed again when that bucket comes due, so it never fires early, and
    /// [`next_expiry`](Self::next_expiry) may then name a tick at which nothing fires.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::new(Mode::Coarse);
    /// let idle = wheel.insert(5_000, "conn 1").unwrap();
    /// assert!(wheel.reset(idle, 9_000)); // a request arrived: push the idle timeout back
    /// assert_eq!(wheel.poll(8_999), None);
    /// let expiry = wheel.expiry(idle).unwrap();
    /// assert_eq!(wheel.poll(expiry), Some((idle, "conn 1")));
    /// assert!(!wheel.reset(idle, 10_000), "fired: the id is stale");
    /// ```
    #[inline]
    pub fn reset(&mut self, id: TimerId, deadline: u64) -> bool {
        let (mode, levels, clock) = (self.mode, self.levels, self.clock);
        let Some(timer) = self.buckets.get_mut(id.index, id.generation) else {
            return false;
        };
        let (old_bucket, old_expiry) = (timer.bucket(), timer.expiry);
        self.stats.resets += 1;
        if mode == Mode::Exact && deadline >= old_expiry && is_wheel_bucket(old_bucket, levels) {
            // The same deferral as below; an Exact expiry is the deadline itself, so there is
            // nothing to compute (a deadline past the top level goes to the overflow list when
            // the timer is placed again). On a wheel bucket, no overflow bound to keep.
            timer.expiry = deadline;
            self.stats.resets_deferred += 1;
            return true;
        }
        // Where the timer would go now; pure arithmetic, no memory touched.
        let (bucket, expiry) = place(mode, levels, clock, deadline);
        if expiry >= old_expiry
            && is_wheel_bucket(old_bucket, levels)
            && is_wheel_bucket(bucket, levels)
        {
            // A later expiry only rewrites the entry: the timer stays in its bucket, which comes
            // due no later than the old expiry, so before the new one, and the drain places it
            // again then. One entry touched instead of three (the entry and the two neighbours
            // an unlink writes). In the same bucket, this is all a move would do anyway. On a
            // wheel bucket, no overflow bound to keep.
            timer.expiry = expiry;
            if bucket == old_bucket {
                self.stats.resets_in_place += 1;
            } else {
                self.stats.resets_deferred += 1;
            }
            return true;
        }
        self.reset_move(id.index, bucket, expiry);
        true
    }

    /// The rest of a `reset` that is not a deferral: the timer moves to `bucket` (placed from
    /// the current clock) with `expiry`. Out of line, so that the deferral, the keepalive
    /// refresh, stays small enough to inline into the caller.
    #[inline(never)]
    fn reset_move(&mut self, index: u32, bucket: Bucket, expiry: u64) {
        // Thawing a frozen bucket may move this very timer to `DUE`.
        let (bucket, expiry) = self.settle(bucket, expiry);
        if bucket == self.buckets.timer(index).bucket() {
            self.buckets.set_expiry(index, expiry);
            self.stats.resets_in_place += 1;
            return;
        }
        self.buckets.relink(index, bucket, expiry);
    }

    /// The tick a pending timer fires at; `None` if `id` is stale or foreign.
    #[inline]
    pub fn expiry(&self, id: TimerId) -> Option<u64> {
        self.buckets
            .get(id.index, id.generation)
            .map(|timer| timer.expiry)
    }

    /// A shared reference to a pending timer's value.
    pub fn get(&self, id: TimerId) -> Option<&T> {
        self.buckets
            .get(id.index, id.generation)
            .map(|timer| &timer.value)
    }

    /// A mutable reference to a pending timer's value.
    pub fn get_mut(&mut self, id: TimerId) -> Option<&mut T> {
        self.buckets
            .get_mut(id.index, id.generation)
            .map(|timer| &mut timer.value)
    }

    /// Advances the clock towards `now` and returns one timer whose expiry is `<= now`.
    ///
    /// Returns `None` once nothing more is due; the clock then reads `max(now(), now)`. The clock
    /// never goes back: a `now` below [`now()`](Self::now) returns `None` and changes nothing.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::new(Mode::Exact);
    /// wheel.insert(20, 'b').unwrap();
    /// wheel.insert(10, 'a').unwrap();
    /// let mut fired = Vec::new();
    /// while let Some((_, value)) = wheel.poll(25) {
    ///     fired.push(value);
    /// }
    /// assert_eq!(fired, ['a', 'b']);
    /// assert_eq!(wheel.now(), 25);
    /// ```
    pub fn poll(&mut self, now: u64) -> Option<(TimerId, T)> {
        if now < self.clock {
            return None;
        }
        if self.mode == Mode::Coarse && now > self.clock {
            // Move the clock first, even with timers still to hand out: a timer inserted or
            // reset during this drain is then placed relative to `now`, and is due if its
            // deadline is.
            self.advance_coarse(now);
        }
        loop {
            if let Some(due) = self.buckets.take_front(self.buckets.due()) {
                return Some(self.fire(due));
            }
            if let Some(bucket) = self.buckets.first_frozen() {
                let index = self.buckets.take_front_occupied(bucket);
                if self.buckets.timer(index).expiry > self.clock {
                    // Re-armed to a later deadline after it was placed.
                    self.place_again(index);
                    continue;
                }
                return Some(self.fire(index));
            }
            match self.next_event() {
                Some((at, event)) if at <= now => match self.mode {
                    Mode::Exact => {
                        self.clock = self.clock.max(at);
                        match event {
                            Event::Fire(bucket) => self.buckets.freeze(bucket),
                            Event::Cascade(bucket) => self.cascade(bucket),
                            Event::Sweep => self.sweep(),
                        }
                    }
                    Mode::Coarse => self.advance_coarse(now),
                },
                _ => {
                    self.clock = now;
                    return None;
                }
            }
        }
    }

    /// An iterator over every timer due at `now`, in the order [`poll`](Self::poll) gives them;
    /// each `next()` is one `poll(now)`.
    ///
    /// # Unlike `Vec::drain`
    ///
    /// Only the timers the iterator hands out leave the wheel. Dropping it early (or
    /// `take(n)`) leaves every other due timer pending, and the next poll or drain hands it out;
    /// `std`'s `drain` iterators remove their whole range even when dropped. Timers not yet due
    /// stay in any case. Timers inserted while draining with a deadline `<= now` come out of the
    /// same drain.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::new(Mode::Exact);
    /// for tick in 1..=5 {
    ///     wheel.insert(tick, tick).unwrap();
    /// }
    /// // Handle at most two per turn of the loop.
    /// let first: Vec<u64> = wheel.drain(10).take(2).map(|(_, v)| v).collect();
    /// assert_eq!(first, [1, 2]);
    /// assert_eq!(wheel.len(), 3, "the three not handed out are still pending");
    /// let rest: Vec<u64> = wheel.drain(10).map(|(_, v)| v).collect();
    /// assert_eq!(rest, [3, 4, 5]);
    /// ```
    pub fn drain(&mut self, now: u64) -> Drain<'_, T> {
        Drain { wheel: self, now }
    }

    /// A tick at which something may be due, never later than the earliest pending expiry;
    /// `None` if the wheel is empty. O(levels).
    ///
    /// After a drain to `now` it is `> now`. In Coarse mode it is the tick of the earliest
    /// occupied bucket: the earliest expiry, unless a [`reset`](Self::reset) pushed that
    /// bucket's timers later, in which case a wake-up there fires nothing and places them
    /// again. In Exact mode a higher level reports the start of its earliest slot, and a level-0
    /// slot may likewise hold only timers pushed later.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// // An event loop: sleep until next_expiry, then drain.
    /// let mut wheel = Wheel::new(Mode::Coarse);
    /// wheel.insert(700, "a").unwrap();
    /// wheel.insert(3_000, "b").unwrap();
    /// let mut fired = Vec::new();
    /// while let Some(wake) = wheel.next_expiry() {
    ///     // ... sleep until tick `wake` ...
    ///     fired.extend(wheel.drain(wake).map(|(_, v)| v));
    /// }
    /// assert_eq!(fired, ["a", "b"]);
    /// ```
    pub fn next_expiry(&self) -> Option<u64> {
        if !self.buckets.is_empty(self.buckets.due()) || self.buckets.first_frozen().is_some() {
            return Some(self.clock);
        }
        let wheel = self.next_wheel_event().map(|(at, _)| at);
        let overflow = self
            .buckets
            .has_overflow()
            .then_some(self.buckets.overflow_bound());
        match (wheel, overflow) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The wheel's clock: the tick it has been advanced to.
    pub fn now(&self) -> u64 {
        self.clock
    }

    /// The number of pending timers.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// True if no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.buckets.len() == 0
    }

    /// The most timers the wheel holds at once, if it is bounded.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// The wheel's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The number of levels below the overflow list.
    pub fn levels(&self) -> usize {
        self.levels
    }

    /// Counters since the wheel was built; see [`Stats`] for an example.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Drops every pending timer; the clock and the counters stay, every old id becomes stale.
    pub fn clear(&mut self) {
        self.buckets.clear();
    }

    // ---- placement ------------------------------------------------------------------------

    /// The bucket and expiry of a timer with `deadline`, seen from the current clock.
    #[inline]
    fn place(&self, deadline: u64) -> (Bucket, u64) {
        place(self.mode, self.levels, self.clock, deadline)
    }

    /// `place`, and in Coarse mode, thaws a frozen bucket the timer would collide with.
    #[inline(always)]
    fn locate(&mut self, deadline: u64) -> (Bucket, u64) {
        let (bucket, expiry) = self.place(deadline);
        self.settle(bucket, expiry)
    }

    /// The second half of `locate`, for a placement already computed: thaws `bucket` if it is
    /// frozen (Coarse mode only), so the timer can join it.
    #[inline(always)]
    fn settle(&mut self, bucket: Bucket, expiry: u64) -> (Bucket, u64) {
        if self.buckets.is_frozen(bucket) {
            debug_assert_eq!(
                self.mode,
                Mode::Coarse,
                "Exact never places into a due slot"
            );
            self.thaw(bucket);
        }
        debug_assert!(
            !self.buckets.is_frozen(bucket),
            "located in a frozen bucket"
        );
        (bucket, expiry)
    }

    /// Empties a frozen bucket so it can take a timer of a later window: timers whose expiry is
    /// reached go to `DUE`, keeping their expiries; timers a reset pushed later are placed again.
    fn thaw(&mut self, bucket: Bucket) {
        let due = self.buckets.due();
        let mut detached = self.buckets.take(bucket);
        while let Some(index) = self.buckets.next_detached(&mut detached) {
            let expiry = self.buckets.timer(index).expiry;
            if expiry <= self.clock {
                self.buckets.link_detached(due, index, expiry);
            } else {
                // May thaw another bucket in turn; each thaw empties one frozen bucket and
                // freezes none, so this ends. `bucket` itself is no longer frozen.
                let (to, placed) = self.locate(expiry);
                debug_assert_eq!(placed, expiry, "a deferred expiry is already rounded");
                self.buckets.link_detached(to, index, placed);
                self.stats.replaced += 1;
            }
        }
    }

    // ---- the drain ------------------------------------------------------------------------

    /// Hands out a timer detached from a due list.
    #[inline]
    fn fire(&mut self, index: u32) -> (TimerId, T) {
        // The checks read the entry only in debug builds: in release the entry's first read is
        // the one that frees it.
        #[cfg(debug_assertions)]
        {
            let expiry = self.buckets.timer(index).expiry;
            debug_assert!(
                expiry <= self.clock,
                "never early: expiry {expiry} at clock {}",
                self.clock
            );
            if self.mode == Mode::Exact {
                let last = self.last_fired;
                debug_assert!(expiry >= last, "Exact order: {expiry} after {last}");
            }
            self.last_fired = expiry;
        }
        let (generation, value) = self.buckets.free_detached(index);
        self.stats.fired += 1;
        (TimerId { index, generation }, value)
    }

    /// The earliest event, if any.
    fn next_event(&self) -> Option<(u64, Event)> {
        let wheel = self.next_wheel_event();
        if !self.buckets.has_overflow() {
            return wheel;
        }
        let sweep_at = match self.mode {
            Mode::Exact => top_block_start(self.buckets.overflow_bound(), self.levels),
            Mode::Coarse => self.coarse_sweep_tick(),
        }
        .max(self.clock);
        match wheel {
            Some((at, event)) if at <= sweep_at => Some((at, event)),
            _ => Some((sweep_at, Event::Sweep)),
        }
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
    fn advance_coarse(&mut self, now: u64) {
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
            self.sweep();
        }
    }

    fn coarse_sweep_tick(&self) -> u64 {
        // Half the top level's span early: every sweep then places at least the earliest
        // timer, and the next sweep is at least half a span later.
        self.buckets
            .overflow_bound()
            .saturating_sub(level_span_ticks(self.levels - 1) / 2)
    }

    /// Links a timer detached from a due bucket, whose expiry `reset` pushed later, where it
    /// now belongs.
    fn place_again(&mut self, index: u32) {
        let expiry = self.buckets.timer(index).expiry;
        // Coarse: the new bucket may be a frozen one (even the one this timer came from, a lap
        // later); `locate` thaws it first. The detached timer is on no list, so the thaw
        // does not see it.
        let (to, placed) = self.locate(expiry);
        debug_assert_eq!(placed, expiry, "a deferred expiry is already rounded");
        self.buckets.link_detached(to, index, placed);
        self.stats.replaced += 1;
    }

    /// Exact mode: re-places every timer of a slot relative to the clock (the slot's start).
    fn cascade(&mut self, bucket: Bucket) {
        let mut detached = self.buckets.take(bucket);
        while let Some(index) = self.buckets.next_detached(&mut detached) {
            let expiry = self.buckets.timer(index).expiry;
            // Down a level at least, unless `reset` pushed the expiry past this slot.
            let (to, placed) = self.place(expiry);
            debug_assert_eq!(placed, expiry, "Exact expiry is fixed");
            self.buckets.link_detached(to, index, placed);
            self.stats.cascades += 1;
        }
    }

    /// Places every overflow timer that is now in range; recomputes the bound of the rest.
    fn sweep(&mut self) {
        let overflow = self.buckets.overflow();
        let mut detached = self.buckets.take(overflow);
        while let Some(index) = self.buckets.next_detached(&mut detached) {
            let expiry = self.buckets.timer(index).expiry;
            let (to, placed) = self.locate(expiry);
            debug_assert!(
                placed == expiry || to == self.buckets.due(),
                "overflow keeps its expiry"
            );
            // Linking back onto the overflow list recomputes its bound.
            self.buckets.link_detached(to, index, expiry);
            if to != overflow {
                self.stats.cascades += 1;
            }
        }
    }

    /// Walks every list and panics with a description if an invariant does not hold. O(timers);
    /// for tests, with feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn check_invariants(&self) {
        self.buckets.check_bitmaps();
        let mut seen = 0;
        for bucket in 0..(self.levels * SLOTS + 2) as Bucket {
            for index in self.buckets.members(bucket) {
                seen += 1;
                let timer = self.buckets.timer(index);
                assert_eq!(timer.bucket(), bucket, "entry {index} records its bucket");
                if bucket == self.buckets.overflow() {
                    let bound = self.buckets.overflow_bound();
                    assert!(timer.expiry >= bound, "overflow bound");
                } else if self.buckets.is_frozen(bucket) {
                    // Due, or pushed later by a reset and placed again when handed out.
                } else if self.buckets.is_wheel(bucket) {
                    self.check_placement(bucket, timer.expiry);
                }
            }
        }
        assert_eq!(
            seen,
            self.buckets.len(),
            "every pending timer is on one list"
        );
    }

    #[cfg(any(test, feature = "test-hooks"))]
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
                // (later only for a timer whose expiry `reset` pushed back).
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
                // its slot; its timers expire then, or later if a reset deferred them.
                let shift = granularity_shift(level);
                let first = granules_ceil(self.clock, shift);
                let lap = (slot as u64).wrapping_sub(first) & (SLOTS as u64 - 1);
                let tick = granules_to_tick(first.saturating_add(lap), shift);
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

/// The bucket and expiry of a timer with `deadline` on a wheel in `mode` with `levels` levels
/// whose clock reads `clock`. A free function, so that `reset` can compute it while it holds the
/// timer's entry.
#[inline]
fn place(mode: Mode, levels: usize, clock: u64, deadline: u64) -> (Bucket, u64) {
    let (due, overflow) = (due_bucket(levels), overflow_bucket(levels));
    if deadline <= clock {
        return (due, clock);
    }
    let placed = match mode {
        Mode::Exact => {
            let level = level_for(clock, deadline);
            if level >= levels {
                return (overflow, deadline);
            }
            (wheel_bucket(level, slot_for(deadline, level)), deadline)
        }
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

impl<T> Default for Wheel<T> {
    /// An unbounded Coarse wheel: the mode most servers want for timeouts.
    fn default() -> Self {
        Wheel::new(Mode::Coarse)
    }
}

/// The iterator returned by [`Wheel::drain`]: one [`Wheel::poll`] per item. Dropping it leaves
/// the timers it did not hand out in the wheel, unlike `std`'s `drain` iterators.
#[derive(Debug)]
pub struct Drain<'a, T> {
    wheel: &'a mut Wheel<T>,
    now: u64,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = (TimerId, T);

    fn next(&mut self) -> Option<Self::Item> {
        self.wheel.poll(self.now)
    }
}

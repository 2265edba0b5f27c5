//! The wheel with its own storage: [`RawWheel`] (`raw.rs`, the levels, the clock and the drain)
//! over a slab of entries (`slab.rs`), and the ids that name them.
//!
//! ## Model
//! Each pending timer is one slab entry, linked by the raw wheel through the entry's own fields
//! (`Slab` is the raw wheel's [`Links`]). An entry's expiry is the one the wheel placed it at,
//! and it changes only here: a [`reset`](Wheel::reset) to a later deadline rewrites it and leaves
//! the timer where it is (the raw wheel places it again when its bucket comes due), any other
//! reset moves it.
//!
//! ## Invariants
//! Those of `raw.rs`, and: an id's generation matches its entry iff the timer it named is still
//! pending; the slab holds exactly the linked timers (and, inside a call, the one being handed
//! out).
//!
//! ## Given up
//! See `raw.rs`: `next_expiry` may name a tick at which a timer pushed later only moves.

use crate::buckets::{is_read_again, is_wheel_bucket, level_and_slot};
use crate::geometry::coarse_expiry_stays;
use crate::raw::{RawWheel, place};
use crate::slab::{Chunks, Flat, MAX_ENTRIES, Slab, Store};
use crate::{Builder, Full, Mode, Stats, TimerId};

/// Where a wheel's entries live, chosen when it is built: in one reserved buffer when its
/// capacity is known ([`Flat`]: an entry is one bounds check away), else in chunks that grow
/// ([`Chunks`]: one more load, from a table that stays in cache). Each public call matches once
/// and runs code compiled for that store alone.
#[derive(Debug)]
enum Storage<T> {
    Chunked(Slab<T, Chunks<T>>),
    Flat(Slab<T, Flat<T>>),
}

/// Runs `$body` with `$slab` bound to the wheel's slab, whichever its store.
macro_rules! with_slab {
    ($storage:expr, $slab:ident => $body:expr) => {
        match $storage {
            Storage::Chunked($slab) => $body,
            Storage::Flat($slab) => $body,
        }
    };
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
    /// The levels, the lists and the clock.
    raw: RawWheel,
    /// The timers, with the links the raw wheel threads through them.
    slab: Storage<T>,
    capacity: Option<usize>,
    /// The capacity, `usize::MAX` if unbounded: one comparison an insert.
    limit: usize,
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
        // A known capacity is reserved whole, so the entries need no chunk table; a reservation
        // the allocator refuses (a capacity far beyond memory) falls back to chunks.
        let slab = match capacity.map(Flat::with_capacity) {
            Some(Ok(flat)) => Storage::Flat(Slab::new(flat, generation_seed)),
            Some(Err(refused)) => {
                Storage::Chunked(Slab::new(Chunks::with_capacity(refused), generation_seed))
            }
            None => Storage::Chunked(Slab::new(Chunks::with_capacity(0), generation_seed)),
        };
        Wheel {
            raw: RawWheel::from_parts(mode, levels, start),
            slab,
            capacity,
            limit: capacity.unwrap_or(usize::MAX),
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
        if self.raw.len() >= self.limit {
            return Err(Full(value));
        }
        with_slab!(&mut self.slab, slab => {
            let Some(index) = slab.vacant() else {
                unreachable!("u32 index space exhausted before capacity was reached");
            };
            // Placed first, so that the entry is written once, whole, with its links: a link
            // through `Links` would write it a second time.
            let (bucket, expiry) = self.raw.locate(slab, deadline);
            let (list, head) = self.raw.front(bucket, index);
            let generation = slab.insert_head(index, (head, list, expiry), value);
            self.raw.linked_new(slab, (list, index, head), expiry);
            Ok(TimerId { index, generation })
        })
    }

    /// Makes room for `additional` timers beyond those pending, so that the inserts that use it
    /// allocate nothing: their entries are created now, on the free list, and their memory is
    /// written once here rather than inside the inserts (page faults included), as a server that
    /// knows its load readies its connection objects before the first connection. Room past the
    /// capacity of a bounded wheel, or past the `2^32 - 2048` timers any wheel holds, is refused
    /// with [`Full`], which hands `additional` back; nothing is created then.
    ///
    /// ```
    /// use tickwheel::{Mode, Wheel};
    ///
    /// let mut wheel = Wheel::builder(Mode::Coarse).capacity(1_000).build().unwrap();
    /// wheel.insert(5, "first").unwrap();
    /// assert!(wheel.reserve(999).is_ok());
    /// assert_eq!(wheel.reserve(1_000).unwrap_err().into_inner(), 1_000);
    /// ```
    pub fn reserve(&mut self, additional: usize) -> Result<(), Full<usize>> {
        let limit = self.limit.min(MAX_ENTRIES);
        let wanted = match self.len().checked_add(additional) {
            Some(wanted) if wanted <= limit => wanted,
            _ => return Err(Full(additional)),
        };
        // Within the limit the store always has room, so a refusal here is only defensive.
        let made = with_slab!(&mut self.slab, slab => slab.reserve(wanted));
        if !made {
            return Err(Full(additional));
        }
        if self.raw.mode() == Mode::Exact {
            // Exact files timers 4096 ticks out or more in arrays beside the entries.
            self.raw.buckets.batches.reserve(additional);
        }
        Ok(())
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
        with_slab!(&mut self.slab, slab => {
            // The entry is looked up once: read and freed, then its neighbours are joined.
            let (value, fields) = slab.remove(id.index, id.generation)?;
            self.raw.unlink_known(slab, id.index, fields);
            Some(value)
        })
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
        with_slab!(&mut self.slab, slab => {
            let (mode, levels, clock) = (self.raw.mode(), self.raw.levels(), self.raw.now());
            let Some((timer_expiry, timer)) = slab.get_mut(id.index, id.generation) else {
                return false;
            };
            let (old_bucket, old_expiry) = (timer.list(), *timer_expiry);
            self.raw.stats.resets += 1;
            if mode == Mode::Exact && deadline >= old_expiry && is_read_again(old_bucket, levels) {
                // The same deferral as below; an Exact expiry is the deadline itself, so there is
                // nothing to compute (a deadline past the top level goes to the overflow list when
                // the timer is placed again). On a wheel bucket or in a batch (read again at the
                // tick it was filed for), no overflow bound to keep.
                *timer_expiry = deadline;
                self.raw.stats.resets_deferred += 1;
                return true;
            }
            if mode == Mode::Exact {
                // An earlier deadline from one level-2 batch to another (a timer seconds to
                // minutes out, the move most resets of such timers make): the entry names its new
                // position, the new batch files it, the old one counts it out. No neighbour to
                // join and nothing out of line; any other move takes `move_timer`.
                if let Some(list) = self.raw.batch_move_position(old_bucket, deadline) {
                    timer.set_list(list);
                    *timer_expiry = deadline;
                    self.raw.batch_moved(id.index, old_bucket, list, deadline);
                    return true;
                }
            }
            // Where the timer would go now; pure arithmetic, no memory touched.
            let (bucket, expiry) = place(mode, levels, clock, deadline);
            if expiry >= old_expiry
                && is_wheel_bucket(old_bucket, levels)
                && is_wheel_bucket(bucket, levels)
                && (bucket == old_bucket
                    || coarse_expiry_stays(clock, level_and_slot(bucket).0, expiry))
            {
                // A later expiry only rewrites the entry: the timer stays in its bucket, which comes
                // due no later than the old expiry, so before the new one, and the drain places it
                // again then. One entry touched instead of three (the entry and the two neighbours
                // an unlink writes). In the same bucket, this is all a move would do anyway. On a
                // wheel bucket, no overflow bound to keep. Only an expiry that placing again gives
                // back is deferred: one that its rounding carried past its level's span would be
                // rounded up again, later than `expiry` says, so that timer moves now. (Coarse
                // only: an Exact reset to a later deadline on a wheel bucket returned above.)
                *timer_expiry = expiry;
                if bucket == old_bucket {
                    self.raw.stats.resets_in_place += 1;
                } else {
                    self.raw.stats.resets_deferred += 1;
                }
                return true;
            }
            move_timer(&mut self.raw, slab, id.index, bucket, expiry);
            true
        })
    }

    /// The tick a pending timer fires at; `None` if `id` is stale or foreign.
    #[inline]
    pub fn expiry(&self, id: TimerId) -> Option<u64> {
        with_slab!(&self.slab, slab => {
            slab
                .get(id.index, id.generation)
                .map(|(expiry, _)| expiry)
        })
    }

    /// A shared reference to a pending timer's value.
    pub fn get(&self, id: TimerId) -> Option<&T> {
        with_slab!(&self.slab, slab => {
            slab
                .get(id.index, id.generation)
                .map(|(_, timer)| &timer.value)
        })
    }

    /// A mutable reference to a pending timer's value.
    pub fn get_mut(&mut self, id: TimerId) -> Option<&mut T> {
        with_slab!(&mut self.slab, slab => {
            slab
                .get_mut(id.index, id.generation)
                .map(|(_, timer)| &mut timer.value)
        })
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
    // Always inlined: the common case (the next timer of a due bucket) is a few dozen
    // instructions, and a call would add a frame and hand the result back through memory for
    // every timer a drain hands out; the rest of the drain is out of line in `RawWheel`.
    #[inline(always)]
    pub fn poll(&mut self, now: u64) -> Option<(TimerId, T)> {
        with_slab!(&mut self.slab, slab => {
            let index = self.raw.poll(slab, now)?;
            // The checks read the entry only in debug builds: in release the entry's first read is
            // the one that frees it.
            #[cfg(debug_assertions)]
            {
                let expiry = slab.expiry_of(index);
                let clock = self.raw.now();
                debug_assert!(
                    expiry <= clock,
                    "never early: expiry {expiry} at clock {clock}"
                );
                if self.raw.mode() == Mode::Exact {
                    let last = self.last_fired;
                    debug_assert!(expiry >= last, "Exact order: {expiry} after {last}");
                }
                self.last_fired = expiry;
            }
            let (generation, value) = slab.free(index);
            Some((TimerId { index, generation }, value))
        })
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

    /// A tick at which something may be due, never later than the earliest pending expiry or
    /// the clock, whichever is later; `None` if the wheel is empty. O(levels). A timer already
    /// due (left by a drain dropped early, or inserted at or before [`now`](Self::now)) makes it
    /// the clock.
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
        self.raw.next_expiry()
    }

    /// The wheel's clock: the tick it has been advanced to.
    pub fn now(&self) -> u64 {
        self.raw.now()
    }

    /// The number of pending timers.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// True if no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The most timers the wheel holds at once, if it is bounded.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// The wheel's mode.
    pub fn mode(&self) -> Mode {
        self.raw.mode()
    }

    /// The number of levels below the overflow list.
    pub fn levels(&self) -> usize {
        self.raw.levels()
    }

    /// Counters since the wheel was built; see [`Stats`] for an example.
    pub fn stats(&self) -> Stats {
        self.raw.stats()
    }

    /// Drops every pending timer; the clock and the counters stay, every old id becomes stale.
    pub fn clear(&mut self) {
        self.raw.clear();
        with_slab!(&mut self.slab, slab => slab.clear());
    }

    /// Walks every list and panics with a description if an invariant does not hold. O(timers);
    /// for tests, with feature `test-hooks`.
    #[cfg(feature = "test-hooks")]
    pub fn check_invariants(&self) {
        with_slab!(&self.slab, slab => {
            self.raw.check_invariants(slab);
            assert_eq!(self.raw.len(), slab.occupied(), "every pending timer is linked");
            slab.check_free_list();
        });
    }
}

/// The move of [`Wheel::reset`]: the entry is looked up once more, read and rewritten in one
/// go, and the wheel joins its old neighbours and its new one. Out of line, so that the
/// deferral, the keepalive refresh, stays small enough to inline into the caller.
#[inline(never)]
fn move_timer<T, S: Store<T>>(
    raw: &mut RawWheel,
    slab: &mut Slab<T, S>,
    index: u32,
    bucket: u32,
    expiry: u64,
) {
    let (list, head) = raw.prepare_move(slab, index, bucket);
    let old = slab.move_head(index, (head, list, expiry));
    raw.moved(slab, index, old, (list, head), expiry);
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

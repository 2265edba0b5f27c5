//! The shared slot table: one record per timer slot, and the word whose transitions decide every
//! cross-core race.
//!
//! # Model
//! A record is everything a base knows about one timer: the slot's *word* (generation, sequence,
//! flags, state), its *deadline* (a tick), a *link* (the slot's place on one of the base's stacks,
//! see [`crate::protocol::stack`]), the *filing* (the owner's wheel links: `next`, `prev` and the
//! wheel list the record is on, see [`Filing`]) and the *cell*, which holds the payload for the
//! timer's whole life: written by whoever arms the slot, read out by the owner when it fires or
//! dropped when it is cancelled. A [`crate::Handle`] carries the generation it was issued with, so
//! it names one arming of one slot: when the slot is freed the generation moves on and every old
//! handle misses.
//!
//! # Layout
//! A record is 40 bytes with a `u64` payload (word 8, deadline 8, payload 8, link 4, filing 12,
//! in that order), packed: 64 / 40 is not whole, so most lines hold parts of two records and half
//! the records straddle two lines. Other threads touch the word, the deadline and the link (a
//! remote re-arm writes the word and deadline, a cancel the word, a remote schedule also the
//! cell); the filing is the owner's alone. The word and the deadline come first, so a remote
//! refresh touches one line, except for the one record in eight whose deadline starts a line (at
//! 56 bytes into one, the word ends it). A remote write to one record so also takes the line of a neighbour's
//! record from the owner (false sharing with at most the two neighbours), which costs the owner
//! one transfer the next time it touches that neighbour; padding each record to a line of its
//! own would remove that at 64 bytes a timer, 1.6x the memory and 1.6x the lines a wheel walk
//! misses. Timers that remote threads re-arm are a minority of those a server holds, and the
//! owner touches a record only when it is armed, moved, fired or cancelled, so the packing wins.
//!
//! The word, low bits first: `state` (2 bits: FREE, PENDING, CANCELLED), then three flags,
//! `QUEUED` (the slot is on the base's notice stack), `RESETTING` (a remote thread is writing the
//! deadline), `CELL` (the cell holds a payload the owner has not taken), a 27-bit `seq` bumped by
//! every remote re-arm, and the 32-bit generation.
//!
//! | transition                                   | by                          | operation |
//! |----------------------------------------------|-----------------------------|-----------|
//! | `FREE(g)` → `PENDING(g)`                     | owner, local schedule       | store     |
//! | `FREE(g)` → `PENDING(g)+QUEUED+CELL`         | remote holding the slot     | store     |
//! | `PENDING` → `PENDING+RESETTING`              | remote re-arm               | CAS       |
//! | `PENDING+RESETTING` → `PENDING(seq+1)` (+`QUEUED` if earlier) | that re-arm, done | CAS |
//! | `CANCELLED+RESETTING` → `CANCELLED+QUEUED`   | that re-arm, done after a cancel | CAS  |
//! | `PENDING` → `CANCELLED` (+`QUEUED` unless queued or re-arming) | any thread | CAS |
//! | `PENDING` → `FREE(g+1)` (no flag set)        | owner: fire, own cancel     | CAS       |
//! | `PENDING` → `CANCELLED` (a flag set)         | owner: fire, own cancel     | CAS       |
//! | clear `QUEUED` / `CELL`                      | whoever takes the notice    | fetch_and |
//! | `CANCELLED` (no flag) → `FREE(g+1)`          | owner                       | store     |
//! | `PENDING` → `CANCELLED` (flags kept)         | owner, closing its base     | CAS       |
//!
//! # Invariants
//! - Exactly one thread wins the way out of a published `PENDING(g)`: every leaver uses a CAS on
//!   this word, so "fired" and "cancelled" exclude each other, and a cancel that returns true
//!   means the timer never fires.
//! - The cell holds a payload iff the slot is armed and its payload has not been taken: while
//!   `CELL` is set it is the remote scheduler's (in transit, read only by whoever clears `CELL`),
//!   otherwise the owner's, which reads it out when the timer fires and drops it when it is
//!   cancelled.
//! - A slot is freed only with no flag set: `QUEUED` means its link is in use by the notice
//!   stack, `RESETTING` that a remote thread may still store its deadline, `CELL` that a payload
//!   sits in its cell. The owner retires a flagged slot to `CANCELLED` instead, and frees it when
//!   the notice comes round (whoever clears the last flag of a `CANCELLED` slot makes sure it is
//!   queued). So no thread ever writes a record that has moved on to another arming.
//! - The deadline of a `PENDING` slot is its truth; where the owner's wheel files the record (its
//!   *entry* below) may be earlier (it is filed again when that comes due), never later, except while the slot is `QUEUED` (a
//!   remote re-arm to an earlier deadline queues a notice so the owner moves the entry) and by
//!   one tick after a re-file, or a filing from a notice, during `RESETTING` (the re-arm then
//!   stores a deadline that is already due). "Filing" below says how the owner keeps this while
//!   its own re-arms are plain stores. Never earlier than the deadline, in any case.
//! - A remote re-arm holds `RESETTING` only between two of its own CASes, and no thread waits
//!   for it: a second re-arm returns at once (ordered before the one in flight), a cancel
//!   proceeds, and the owner re-files a due timer it finds `RESETTING` one tick later. So a
//!   re-arming thread that is preempted between its two CASes holds back that one timer (the
//!   owner wakes each tick to look again) and the freeing of its slot if it is cancelled
//!   meanwhile, until it runs again; nothing else waits.
//!
//! # Orderings
//! The word's modification order decides every race, so most accesses are Relaxed. What a word
//! change must publish is published elsewhere: a remote schedule's payload and deadline, and a
//! re-arm's earlier deadline, reach the owner through the notice stack (Release push, Acquire
//! take); slots reach a remote scheduler through the reserve stack likewise. The one exception is
//! the deadline of a later re-arm, which sends nothing: its final CAS is Release and the owner's
//! load before firing is Acquire, so an owner that sees the bumped `seq` sees the deadline too,
//! and an owner that saw the old `seq` fails its CAS to `FREE`.
//!
//! # Filing
//! A remote re-arm to `t` queues a notice only if `t` is earlier than the deadline it reads under
//! `RESETTING`, taking that deadline for an upper bound of the owner's wheel entry. The owner's
//! own re-arm is a plain store (the keepalive refresh touches no other word), so that bound holds
//! only if the owner never files an entry at a deadline the re-arm cannot see. The rule, kept by
//! every place that files an entry at a deadline read from the record (`take_due` re-filing a
//! timer pushed later, the owner filing from a notice, and the wheel itself, which reads the
//! deadline through [`Filing`] whenever it places a record: a cascade, or a bucket that came due
//! holding a record pushed later):
//! - the read follows a Release RMW on the word (`take_due`'s CAS of the word onto itself,
//!   `take_notice`'s fetch_and, the wheel's read's `fetch_or(0)`), so a re-arm that sets
//!   `RESETTING` after that RMW synchronises with it and reads that deadline or a newer one;
//! - a re-arm that set `RESETTING` before it is seen in the word: `take_due` re-files one tick
//!   ahead, and the owner files a noticed slot, or the wheel places a record, no later than the
//!   next tick, to look again then;
//! - the wheel's read needs neither for a deadline at or before the base's clock: such a record
//!   comes due in this turn's drain or the next, where `take_due` decides.
//!
//! An Exact wheel also moves records without reading their deadlines: a level-2 batch sorted
//! into its window and run keeps the tick each record was filed for, a deadline read under the
//! rule above, so the entry stays where it was and no later. It asks [`Filing`]'s `is_on` of
//! records that left a batch: the filing's `list`, which names no batch position once the record
//! left (the owner marks it unfiled, the wheel's unlink sets `NIL`, a new filing overwrites it),
//! read on the owner's thread only.
//!
//! Entries move earlier (a local earlier re-arm, a notice) freely: an earlier entry only costs a
//! look.
//!
//! # Given up
//! - Generations are 32 bits: a handle kept across 2^32 re-uses of its slot could match again.
//!   The owner reuses its most recently freed slot first (for cache locality), so a hot loop of
//!   schedule and cancel at ~20 ns a pair wraps one slot in about 90 s: a handle must not outlive
//!   that much churn of its slot.
//! - Memory: a table of 2 MiB or more is a mapping of its own that asks for huge pages
//!   (`sys::Mapping`; at 10^6 timers a keepalive refresh took about a quarter less time,
//!   BENCHMARKS.md), so where the kernel grants them the memory it takes grows in steps of
//!   2 MiB, not 4 KiB: slots are used from the front (`next_unused`), so at most 2 MiB more than
//!   the records in use. The first touch of a huge page zeroes 2 MiB at once (and may wait for
//!   the kernel to compact memory to find one), so that arm takes longer.
//! - `seq` is 27 bits: an owner preempted between reading a deadline and its CAS while a remote
//!   re-arms the same timer 2^27 times could fire on the old deadline.

use std::mem::MaybeUninit;

use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// State and flags of a slot word.
pub mod word {
    /// Not armed.
    pub const FREE: u64 = 0;
    /// Armed: fires unless a cancel wins.
    pub const PENDING: u64 = 1;
    /// A cancel won (or the owner retired a flagged slot): waiting for the owner to free it.
    pub const CANCELLED: u64 = 2;
    /// Mask of the state.
    pub const STATE: u64 = 0b11;
    /// On the notice stack.
    pub const QUEUED: u64 = 1 << 2;
    /// A remote re-arm is storing the deadline.
    pub const RESETTING: u64 = 1 << 3;
    /// The cell holds a payload.
    pub const CELL: u64 = 1 << 4;
    /// The flags that keep a slot from being freed.
    pub const FLAGS: u64 = QUEUED | RESETTING | CELL;
    const SEQ_SHIFT: u32 = 5;
    const SEQ_MASK: u64 = ((1 << 27) - 1) << SEQ_SHIFT;
    const GEN_SHIFT: u32 = 32;

    /// The generation part.
    pub fn generation(w: u64) -> u32 {
        (w >> GEN_SHIFT) as u32
    }

    /// The state part.
    pub fn state(w: u64) -> u64 {
        w & STATE
    }

    /// True if `w` is `PENDING` with generation `g`, whatever its flags and `seq`.
    pub fn is_pending(w: u64, g: u32) -> bool {
        generation(w) == g && state(w) == PENDING
    }

    /// A flag-free word.
    pub fn pack(g: u32, state: u64) -> u64 {
        (u64::from(g) << GEN_SHIFT) | state
    }

    /// `w` with `seq` moved on (wrapping inside its field).
    pub fn bump_seq(w: u64) -> u64 {
        (w & !SEQ_MASK) | (w.wrapping_add(1 << SEQ_SHIFT) & SEQ_MASK)
    }

    /// `w` with its state replaced.
    pub fn with_state(w: u64, state: u64) -> u64 {
        (w & !STATE) | state
    }
}

use word::{CANCELLED, CELL, FLAGS, FREE, PENDING, QUEUED, RESETTING};

/// The word the owner leaves when it retires the pending word `w` (fire or own cancel): with no
/// flag set the slot is free at the next generation (true); with one it is `CANCELLED`, flags
/// kept, and freed when its notice comes round (false).
fn retired(w: u64) -> (u64, bool) {
    if w & FLAGS == 0 {
        (word::pack(word::generation(w).wrapping_add(1), FREE), true)
    } else {
        (word::with_state(w, CANCELLED), false)
    }
}

/// One slot's record: the one record of its timer. In this order (see "Layout" in the module
/// doc): the two words a remote re-arm writes first, together.
#[repr(C)]
pub(crate) struct Record<T> {
    word: AtomicU64,
    /// Deadline tick of the current arming.
    deadline: AtomicU64,
    /// The payload of the current arming, while it is pending (and until the owner takes it).
    cell: UnsafeCell<MaybeUninit<T>>,
    /// Next slot on whichever stack holds this one.
    pub(crate) link: AtomicU32,
    /// The owner's wheel links; only the owning base's thread touches them (see [`Filing`]).
    filing: UnsafeCell<WheelLinks>,
}

/// A record's wheel links, owner-only.
#[derive(Clone, Copy, Debug, Default)]
struct WheelLinks {
    next: u32,
    prev: u32,
    /// `UNFILED`, `RETIRED_HERE`, or the wheel list the record is on plus one.
    list: u32,
}

/// Not in the owner's wheel (zero, so a zeroed record is unfiled).
const UNFILED: u32 = 0;
/// Not in the owner's wheel, and the owner itself retired this arming to `CANCELLED` (it fired or
/// was cancelled while a flag was set): its notice frees the slot without counting a remote
/// cancel.
const RETIRED_HERE: u32 = u32::MAX;

/// What a cancel found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The cancel lost: fired, firing, already cancelled, or a stale generation.
    Lost,
    /// The cancel won; the canceller must push the slot on the notice stack if `queue`.
    Won {
        /// This call set `QUEUED` and must push the slot.
        queue: bool,
    },
}

/// What a remote re-arm did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rearm {
    /// Not pending (fired, firing, cancelled, stale).
    Lost,
    /// Re-armed, or ordered just before another re-arm in flight. Push the slot if `queue`.
    Done {
        /// This call set `QUEUED` and must push the slot.
        queue: bool,
    },
}

/// What the owner should do with a due wheel entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Fire it: the slot is retired (freed if `freed`, else left `CANCELLED` for its notice).
    Fire {
        /// The slot went straight to `FREE(g+1)`.
        freed: bool,
        /// The deadline tick it fired for.
        deadline: u64,
    },
    /// Not yet: put it back in the wheel at this tick.
    Refile(u64),
    /// A cancel won: drop the payload; the slot's notice frees it (a cancel always leaves the
    /// slot queued, or a re-arm in flight that will queue it).
    Cancelled,
}

/// One base's slot records.
pub struct SlotTable<T> {
    records: Records<T>,
}

// SAFETY: the records' atomics are shared by design; a cell's payload is written by the one thread
// holding the slot (the owner, or a remote scheduler with the slot popped from the reserve), and
// after a remote write it is handed on by the one thread that clears `CELL` (a fetch_and tells
// exactly one caller it held the flag); otherwise only the owner touches it, as it alone touches
// the filing (see `Filing`). So a `T` only moves between threads, never shared: `T: Send` suffices.
unsafe impl<T: Send> Sync for SlotTable<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SlotTable<T> {}

impl<T> std::fmt::Debug for SlotTable<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTable")
            .field("len", &self.records.len())
            .finish()
    }
}

impl<T> SlotTable<T> {
    /// A table of `len` free slots at generation 0.
    pub fn new(len: usize) -> Self {
        Self {
            records: zeroed_records(len),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True if the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(crate) fn record(&self, slot: u32) -> &Record<T> {
        &self.records[slot as usize]
    }

    /// The slot's word (Relaxed: a snapshot; decisions are taken by CAS).
    pub fn load(&self, slot: u32) -> u64 {
        self.records[slot as usize].word.load(Ordering::Relaxed)
    }

    /// The slot's deadline tick (Relaxed: see the module doc for what publishes it).
    pub fn deadline(&self, slot: u32) -> u64 {
        self.records[slot as usize].deadline.load(Ordering::Relaxed)
    }

    /// Owner, local schedule of a slot it holds: puts `value` in the cell, `FREE(g)` →
    /// `PENDING(g)`; returns `g`. The payload is the owner's from here on (see
    /// [`take_payload`](Self::take_payload)).
    pub fn arm_local(&self, slot: u32, tick: u64, value: T) -> u32 {
        let r = &self.records[slot as usize];
        // SAFETY: the owner holds the slot (free on its private list or never used), so no other
        // thread reads or writes its cell; the cell holds no payload (`FREE`).
        r.cell
            .with_mut(|p| unsafe { p.write(MaybeUninit::new(value)) });
        // Relaxed: the holder freed the slot itself or received it through a stack, so it sees
        // the latest FREE word, and nobody else writes a FREE word.
        let g = word::generation(r.word.load(Ordering::Relaxed));
        r.deadline.store(tick, Ordering::Relaxed);
        // Relaxed: the handle reaches other threads only through a synchronising channel.
        r.word.store(word::pack(g, PENDING), Ordering::Relaxed);
        g
    }

    /// Remote holding a slot from the reserve: puts `value` in the cell and arms it queued; the
    /// caller pushes it on the notice stack next (that push publishes the cell and deadline).
    pub(crate) fn arm_remote(&self, slot: u32, tick: u64, value: T) -> u32 {
        let r = &self.records[slot as usize];
        // Relaxed: the slot came through the reserve stack (Acquire), with its latest FREE word.
        let g = word::generation(r.word.load(Ordering::Relaxed));
        // SAFETY: this thread holds the slot (popped it from the reserve), `CELL` is clear (the
        // slot was FREE), so no other thread reads or writes the cell until the notice push.
        r.cell
            .with_mut(|p| unsafe { p.write(MaybeUninit::new(value)) });
        r.deadline.store(tick, Ordering::Relaxed);
        // Relaxed: published by the notice push that follows.
        r.word
            .store(word::pack(g, PENDING) | QUEUED | CELL, Ordering::Relaxed);
        g
    }

    /// Any thread: cancels arming `g` of `slot`. See [`Cancel`].
    pub fn cancel(&self, slot: u32, g: u32) -> Cancel {
        let Some(r) = self.records.get(slot as usize) else {
            return Cancel::Lost;
        };
        let mut w = r.word.load(Ordering::Relaxed);
        loop {
            if !word::is_pending(w, g) {
                return Cancel::Lost;
            }
            // Queue the slot unless it is queued already or a re-arm in flight will queue it.
            let queue = w & (QUEUED | RESETTING) == 0;
            let to = word::with_state(w, CANCELLED) | if queue { QUEUED } else { 0 };
            // Relaxed: the word's modification order decides the race; the notice push that
            // follows is what the owner synchronises with.
            match r
                .word
                .compare_exchange_weak(w, to, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Cancel::Won { queue },
                Err(now) => w = now,
            }
        }
    }

    /// Remote thread: re-arms arming `g` of `slot` to `tick`. See [`Rearm`] and the module doc.
    pub fn rearm(&self, slot: u32, g: u32, tick: u64) -> Rearm {
        let Some(r) = self.records.get(slot as usize) else {
            return Rearm::Lost;
        };
        let mut w = r.word.load(Ordering::Relaxed);
        loop {
            if !word::is_pending(w, g) {
                return Rearm::Lost;
            }
            if w & RESETTING != 0 {
                // Another re-arm is storing its deadline: ours is ordered just before it.
                return Rearm::Done { queue: false };
            }
            // Acquire: our deadline load below sees the latest deadline stored before the word
            // was last released (by the owner's arming or an earlier re-arm).
            match r.word.compare_exchange_weak(
                w,
                w | RESETTING,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        // RESETTING is ours: no other re-arm stores the deadline, and the slot cannot be freed.
        let old = r.deadline.load(Ordering::Relaxed);
        r.deadline.store(tick, Ordering::Relaxed);
        let mut w = w | RESETTING;
        loop {
            let pending = word::state(w) == PENDING;
            // Earlier than before: the owner's wheel entry may be too late, so queue a notice.
            // Cancelled meanwhile: the canceller left the queueing to us (see `cancel`).
            let queue = w & QUEUED == 0 && (!pending || tick < old);
            let mut to = (w & !RESETTING) | if queue { QUEUED } else { 0 };
            if pending {
                to = word::bump_seq(to);
            }
            // Release: an owner that loads the new word (Acquire, before firing) sees our deadline.
            match r
                .word
                .compare_exchange_weak(w, to, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return Rearm::Done { queue },
                Err(now) => w = now,
            }
        }
    }

    /// Owner, local re-arm of its own pending timer: stores the deadline. Returns the deadline it
    /// replaced, or `None` if `g` is not pending. A new deadline not earlier than the old one
    /// needs nothing more (the wheel entry is at or before the old deadline, or a notice is
    /// pending that moves it); an earlier one may need the entry moved.
    pub fn rearm_local(&self, slot: u32, g: u32, tick: u64) -> Option<u64> {
        let r = self.records.get(slot as usize)?;
        if !word::is_pending(r.word.load(Ordering::Relaxed), g) {
            return None;
        }
        // Relaxed: the owner reads it back itself; a remote re-arm racing with this load and store
        // is ordered by whichever store lands last, and each caller is told the timer was pending.
        let old = r.deadline.load(Ordering::Relaxed);
        r.deadline.store(tick, Ordering::Relaxed);
        Some(old)
    }

    /// Owner, for a wheel entry that came due at `now_tick`: fire, re-file or reclaim.
    pub fn take_due(&self, slot: u32, now_tick: u64) -> Due {
        let r = &self.records[slot as usize];
        // Acquire: pairs with a re-arm's Release, so the deadline read below is at least as new
        // as the word we base the CAS on.
        let mut w = r.word.load(Ordering::Acquire);
        loop {
            match word::state(w) {
                PENDING if w & RESETTING != 0 => return Due::Refile(now_tick.saturating_add(1)),
                PENDING => {
                    let deadline = r.deadline.load(Ordering::Relaxed);
                    if deadline > now_tick {
                        // The entry moves later, to the deadline just read (perhaps one the owner
                        // stored itself, which no RMW has published): see "Filing" in the module
                        // doc. A CAS that fails means a re-arm got in: look again.
                        match r
                            .word
                            .compare_exchange(w, w, Ordering::Release, Ordering::Acquire)
                        {
                            Ok(_) => return Due::Refile(deadline),
                            Err(now) => {
                                w = now;
                                continue;
                            }
                        }
                    }
                    let (to, freed) = retired(w);
                    // Acquire on failure: the retry reads the deadline of the newer word.
                    match r
                        .word
                        .compare_exchange(w, to, Ordering::Relaxed, Ordering::Acquire)
                    {
                        Ok(_) => return Due::Fire { freed, deadline },
                        Err(now) => w = now,
                    }
                }
                CANCELLED => {
                    debug_assert!(
                        w & FLAGS != 0,
                        "slot {slot}: cancelled, in the wheel, no notice"
                    );
                    return Due::Cancelled;
                }
                _ => unreachable!("slot {slot} in the wheel but free: {w:#x}"),
            }
        }
    }

    /// Owner, cancelling its own timer. True if it won; `freed` says the slot went straight to
    /// `FREE(g+1)` (else it is `CANCELLED` with flags, and its notice frees it).
    pub fn cancel_local(&self, slot: u32, g: u32) -> Option<bool> {
        let r = self.records.get(slot as usize)?;
        let mut w = r.word.load(Ordering::Relaxed);
        loop {
            if !word::is_pending(w, g) {
                return None;
            }
            let (to, freed) = retired(w);
            // Relaxed: as in `cancel`.
            match r
                .word
                .compare_exchange_weak(w, to, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(freed),
                Err(now) => w = now,
            }
        }
    }

    /// Whoever took `slot` off the notice stack: clears `QUEUED` and `CELL`. Returns the word as
    /// it was, flags included; with `CELL` in it, the caller now holds the payload a remote
    /// scheduler left in the cell ([`take_payload`](Self::take_payload)).
    pub(crate) fn take_notice(&self, slot: u32) -> u64 {
        let r = &self.records[slot as usize];
        // Acquire: the notice stack's take already made the cell and the deadline stored before
        // the push visible; a re-arm may have moved the deadline since (a queued slot gets no
        // second notice), and its Release CAS is what this RMW, reading the latest word, pairs
        // with. Release: the owner files the entry at the deadline it reads next, perhaps one it
        // stored itself; see "Filing" in the module doc. A re-arm still in flight (`RESETTING` in
        // the word returned) is the caller's to allow for.
        let w = r.word.fetch_and(!(QUEUED | CELL), Ordering::AcqRel);
        debug_assert!(
            w & QUEUED != 0,
            "slot {slot} on the notice stack but not queued"
        );
        w
    }

    /// Reads the payload out of `slot`'s cell.
    ///
    /// # Safety
    /// The caller holds the payload: it is the owner of a pending or just retired slot whose
    /// payload nobody has taken, or it cleared `CELL` ([`take_notice`](Self::take_notice)
    /// returned it set). The cell is uninitialised afterwards.
    pub(crate) unsafe fn take_payload(&self, slot: u32) -> T {
        // SAFETY: the caller holds the payload (above), so the cell is initialised and no other
        // thread touches it.
        self.records[slot as usize]
            .cell
            .with_mut(|p| unsafe { p.read().assume_init() })
    }

    /// Owner: `CANCELLED` with no flag → `FREE(g+1)`.
    pub fn free_cancelled(&self, slot: u32) {
        let r = &self.records[slot as usize];
        let w = r.word.load(Ordering::Relaxed);
        debug_assert_eq!(
            (word::state(w), w & FLAGS),
            (CANCELLED, 0),
            "freeing slot {slot}"
        );
        // Relaxed: nobody else writes a CANCELLED word without flags; the slot reaches its next
        // holder through a stack (Release/Acquire).
        r.word.store(
            word::pack(word::generation(w).wrapping_add(1), FREE),
            Ordering::Relaxed,
        );
    }

    /// Owner, when its base closes: every pending arming becomes `CANCELLED` (flags kept), so
    /// later cancels and re-arms of it report false.
    pub fn retire_pending(&self, below: u32) {
        for r in &self.records[..below as usize] {
            let mut w = r.word.load(Ordering::Relaxed);
            while word::state(w) == PENDING {
                // Relaxed: as in `cancel`.
                match r.word.compare_exchange_weak(
                    w,
                    word::with_state(w, CANCELLED),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => w = now,
                }
            }
        }
    }
}

/// The owner's view of its table as the wheel's link storage: the wheel links the records
/// themselves (`tickwheel::raw`), so a timer is one record and not a record plus a wheel entry.
///
/// Only the owning base's thread builds one, and only one at a time (the base lends it from
/// `&mut self`); that is what makes the filing fields, which no other thread touches, safe to
/// read and write through it.
pub(crate) struct Filing<'a, T> {
    slots: &'a SlotTable<T>,
    /// The base's clock, in ticks: a deadline at or before it is filed without publishing it.
    now_tick: u64,
}

impl<'a, T> Filing<'a, T> {
    /// The owner's filing of `slots`, its clock at `now_tick`.
    ///
    /// # Safety
    /// Called by the thread that owns the base of `slots`, with no other `Filing` of the same
    /// table alive.
    pub(crate) unsafe fn new(slots: &'a SlotTable<T>, now_tick: u64) -> Self {
        Self { slots, now_tick }
    }

    fn links(&self, slot: u32) -> WheelLinks {
        // SAFETY: this thread owns the base and holds the only `Filing` (see `new`); no other
        // thread touches a record's filing.
        self.slots.records[slot as usize]
            .filing
            .with(|p| unsafe { *p })
    }

    fn update(&mut self, slot: u32, f: impl FnOnce(&mut WheelLinks)) {
        // SAFETY: as in `links`; `&mut self` keeps this the only access in flight.
        self.slots.records[slot as usize]
            .filing
            .with_mut(|p| f(unsafe { &mut *p }));
    }

    /// True if `slot` is in the owner's wheel.
    pub(crate) fn is_filed(&self, slot: u32) -> bool {
        !matches!(self.links(slot).list, UNFILED | RETIRED_HERE)
    }

    /// Records that `slot` left the wheel (handed out by a poll, or unlinked), and whether the
    /// owner retired its arming with a flag set.
    pub(crate) fn set_unfiled(&mut self, slot: u32, retired_here: bool) {
        self.update(slot, |l| {
            l.list = if retired_here { RETIRED_HERE } else { UNFILED }
        });
    }

    /// True if the owner retired `slot`'s arming itself (see [`set_unfiled`](Self::set_unfiled)).
    pub(crate) fn retired_here(&self, slot: u32) -> bool {
        self.links(slot).list == RETIRED_HERE
    }

    /// Reads the payload of the owner's `slot` out of its cell: a timer that fired, or one of its
    /// own that it cancelled.
    ///
    /// # Safety
    /// The owner holds the payload (see [`SlotTable::take_payload`]).
    pub(crate) unsafe fn take_payload(&mut self, slot: u32) -> T {
        // SAFETY: forwarded.
        unsafe { self.slots.take_payload(slot) }
    }

    /// The tick to file `slot` at, from its deadline, keeping the rule of "Filing" in the module
    /// doc: a deadline at or before the clock is filed as it is (the entry comes due this turn or
    /// the next, and `take_due` decides then); a later one is read after a Release RMW on the
    /// word, so that a remote re-arm that starts after it sees that deadline or a newer one, and
    /// with a re-arm already in flight the entry is filed one tick ahead, to look again then.
    fn filing_tick(&self, slot: u32) -> u64 {
        let r = &self.slots.records[slot as usize];
        // Relaxed: the owner's own store, or a remote's that a later look corrects (above).
        let deadline = r.deadline.load(Ordering::Relaxed);
        if deadline <= self.now_tick {
            return deadline;
        }
        // Release: publishes the deadline stores this thread made before (see "Filing").
        // Acquire: a re-arm done before this RMW has its deadline seen by the load below.
        let w = r.word.fetch_or(0, Ordering::AcqRel);
        let deadline = r.deadline.load(Ordering::Relaxed);
        if w & RESETTING != 0 {
            deadline.min(self.now_tick.saturating_add(1))
        } else {
            deadline
        }
    }
}

impl<T> tickwheel::raw::Links for Filing<'_, T> {
    #[inline]
    fn next(&self, index: u32) -> u32 {
        self.links(index).next
    }

    #[inline]
    fn set_next(&mut self, index: u32, next: u32) {
        self.update(index, |l| l.next = next);
    }

    #[inline]
    fn prev(&self, index: u32) -> u32 {
        self.links(index).prev
    }

    #[inline]
    fn set_prev(&mut self, index: u32, prev: u32) {
        self.update(index, |l| l.prev = prev);
    }

    #[inline]
    fn list(&self, index: u32) -> u32 {
        self.links(index).list.wrapping_sub(1)
    }

    #[inline]
    fn set_list(&mut self, index: u32, list: u32) {
        self.update(index, |l| l.list = list.wrapping_add(1));
    }

    /// The deadline itself is the expiry: there is no filed tick to keep apart from it (a Coarse
    /// placement's rounding is the wheel's to recompute).
    #[inline]
    fn expiry(&self, index: u32) -> u64 {
        self.filing_tick(index)
    }

    #[inline]
    fn set_expiry(&mut self, _index: u32, _expiry: u64) {}

    #[inline]
    fn unlink_fields(&self, index: u32) -> (u32, u32, u32) {
        let l = self.links(index);
        (l.next, l.prev, l.list.wrapping_sub(1))
    }

    #[inline]
    fn set_head(&mut self, index: u32, next: u32, list: u32, _expiry: u64) {
        self.update(index, |l| {
            *l = WheelLinks {
                next,
                prev: tickwheel::raw::NIL,
                list: list.wrapping_add(1),
            }
        });
    }
}

impl<T> Drop for SlotTable<T> {
    fn drop(&mut self) {
        // Exclusive access: drop the payloads still in transit (schedules that raced a closing
        // base and were not drained). The owner's payloads went with its base.
        for r in self.records.iter_mut() {
            let w = r.word.load(Ordering::Relaxed);
            if w & CELL != 0 {
                // SAFETY: `CELL` set means the cell holds an initialised payload nobody took;
                // `&mut self` excludes every other access.
                r.cell.with_mut(|p| unsafe { p.read().assume_init_drop() });
            }
        }
    }
}

/// A table's records: in a mapping of their own when the table spans a huge page (2 MiB), so
/// that it can ask for huge pages (`sys::Mapping`), else in one allocation of the global
/// allocator. Either way zeroed when made: an untouched part of a large table costs no memory,
/// and all zeroes is a valid record (atomics at 0, an unfiled filing, a cell of `MaybeUninit`,
/// any bits). The slice is `start` and `len` in both cases, so reaching a record takes no branch
/// on where it lives; only the drop looks.
struct Records<T> {
    start: std::ptr::NonNull<Record<T>>,
    len: usize,
    /// The mapping the records live in; `None`: they are a `Box<[Record<T>]>`, taken apart.
    #[cfg(not(loom))]
    map: Option<crate::sys::Mapping>,
    _records: std::marker::PhantomData<Record<T>>,
}

/// Tables of at least this many bytes get a mapping of their own (one huge page).
#[cfg(not(loom))]
const MAPPED_BYTES: usize = 2 << 20;

impl<T> Records<T> {
    fn boxed(records: Box<[Record<T>]>) -> Self {
        let len = records.len();
        // `Box::into_raw` is never null (a dangling, aligned pointer for no records).
        let start = std::ptr::NonNull::new(Box::into_raw(records).cast::<Record<T>>()).unwrap();
        Records {
            start,
            len,
            #[cfg(not(loom))]
            map: None,
            _records: std::marker::PhantomData,
        }
    }

    fn is_mapped(&self) -> bool {
        #[cfg(not(loom))]
        return self.map.is_some();
        #[cfg(loom)]
        false
    }
}

impl<T> std::ops::Deref for Records<T> {
    type Target = [Record<T>];

    #[inline]
    fn deref(&self) -> &[Record<T>] {
        // SAFETY: `start` and `len` are the records this value owns: a box's, or `len` records'
        // bytes of its mapping, which starts on a huge page and holds only records aligned to
        // 4096 or less (`zeroed_records`), so it is aligned; zeroed or written as records since,
        // and alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for Records<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Record<T>] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

impl<T> Drop for Records<T> {
    fn drop(&mut self) {
        let records = std::ptr::slice_from_raw_parts_mut(self.start.as_ptr(), self.len);
        if self.is_mapped() {
            // SAFETY: the records are valid and dropped once, here, before the mapping (a field,
            // dropped after this) is unmapped.
            unsafe { std::ptr::drop_in_place(records) };
        } else {
            // SAFETY: `start` and `len` came from `Box::into_raw` of a `Box<[Record<T>]>`
            // (`boxed`), rebuilt once, here.
            drop(unsafe { Box::from_raw(records) });
        }
    }
}

/// `len` records of zero bytes (see [`Records`]).
#[cfg(not(loom))]
fn zeroed_records<T>(len: usize) -> Records<T> {
    use std::alloc::{Layout, alloc_zeroed, handle_alloc_error};
    if len == 0 || std::mem::size_of::<Record<T>>() == 0 {
        return Records::boxed((0..len).map(|_| Record::empty()).collect());
    }
    let layout = Layout::array::<Record<T>>(len).expect("slot table size overflows");
    if layout.size() >= MAPPED_BYTES
        && layout.align() <= 4096
        && let Some(map) = crate::sys::Mapping::zeroed(layout.size())
    {
        return Records {
            start: map.start().cast::<Record<T>>(),
            len,
            map: Some(map),
            _records: std::marker::PhantomData,
        };
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<Record<T>>();
    if ptr.is_null() {
        handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a fresh allocation of `len` records with the global allocator's layout for
    // `[Record<T>; len]`, and all-zero bytes are a valid `Record<T>` (see above), so it is an
    // initialised slice the box may own and free.
    Records::boxed(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) })
}

#[cfg(loom)]
fn zeroed_records<T>(len: usize) -> Records<T> {
    Records::boxed((0..len).map(|_| Record::empty()).collect())
}

impl<T> Record<T> {
    fn empty() -> Self {
        Self {
            word: AtomicU64::new(0),
            deadline: AtomicU64::new(0),
            link: AtomicU32::new(0),
            filing: UnsafeCell::new(WheelLinks::default()),
            cell: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::word::*;
    use super::*;

    #[test]
    fn a_record_is_40_bytes_with_a_u64_payload() {
        // Word, deadline, payload, stack link and the three wheel links: the timer's only record.
        assert_eq!(std::mem::size_of::<Record<u64>>(), 40);
    }

    #[test]
    fn word_fields_do_not_overlap() {
        let w = pack(u32::MAX, CANCELLED) | FLAGS;
        assert_eq!(generation(w), u32::MAX);
        assert_eq!(state(w), CANCELLED);
        let b = bump_seq(w);
        assert_eq!(
            (generation(b), state(b), b & FLAGS),
            (u32::MAX, CANCELLED, FLAGS)
        );
        assert_ne!(b, w);
        // seq wraps inside its field.
        let mut x = pack(7, PENDING);
        for _ in 0..(1u64 << 27) / 4096 {
            x = bump_seq(x);
        }
        assert_eq!((generation(x), state(x)), (7, PENDING));
    }

    #[test]
    fn cancel_then_fire_loses_fire() {
        let t = SlotTable::<u64>::new(4);
        let g = t.arm_local(2, 10, 0);
        assert_eq!(t.cancel(2, g), Cancel::Won { queue: true });
        assert_eq!(t.cancel(2, g), Cancel::Lost, "second cancel must lose");
        assert_eq!(t.take_due(2, 10), Due::Cancelled);
        assert_eq!(t.take_notice(2) & CELL, 0);
        t.free_cancelled(2);
        assert_eq!(t.load(2), pack(g + 1, FREE));
    }

    #[test]
    fn fire_then_cancel_loses_cancel_and_stale_handle_misses() {
        let t = SlotTable::<u64>::new(1);
        let g = t.arm_local(0, 5, 0);
        assert_eq!(t.take_due(0, 4), Due::Refile(5), "never early");
        assert_eq!(
            t.take_due(0, 5),
            Due::Fire {
                freed: true,
                deadline: 5
            }
        );
        assert_eq!(t.cancel(0, g), Cancel::Lost);
        let g2 = t.arm_local(0, 9, 0);
        assert_ne!(g, g2);
        assert_eq!(t.cancel(0, g), Cancel::Lost, "stale generation");
        assert_eq!(t.rearm(0, g, 50), Rearm::Lost, "stale generation");
        assert!(is_pending(t.load(0), g2));
    }

    #[test]
    fn later_rearm_sends_nothing_and_defers_the_fire() {
        let t = SlotTable::<u64>::new(1);
        let g = t.arm_local(0, 10, 0);
        assert_eq!(t.rearm(0, g, 30), Rearm::Done { queue: false });
        assert_eq!(t.take_due(0, 10), Due::Refile(30));
        assert_eq!(
            t.rearm(0, g, 20),
            Rearm::Done { queue: true },
            "earlier: notice"
        );
        assert_eq!(
            t.rearm(0, g, 5),
            Rearm::Done { queue: false },
            "already queued"
        );
        assert_eq!(
            t.take_due(0, 10),
            Due::Fire {
                freed: false,
                deadline: 5
            },
            "queued: left cancelled"
        );
        assert_eq!(t.take_notice(0) & STATE, CANCELLED);
        t.free_cancelled(0);
        assert_eq!(t.load(0), pack(g + 1, FREE));
    }

    #[test]
    fn remote_schedule_cell_is_taken_once() {
        let t = SlotTable::<String>::new(2);
        let g = t.arm_remote(1, 7, "x".to_string());
        assert_eq!(
            t.cancel(1, g),
            Cancel::Won { queue: false },
            "already queued"
        );
        let w = t.take_notice(1);
        assert_eq!(state(w), CANCELLED);
        assert_ne!(w & CELL, 0, "the payload is the taker's");
        // SAFETY: `take_notice` returned `CELL`: this thread holds the payload.
        assert_eq!(unsafe { t.take_payload(1) }, "x");
        assert_eq!(t.load(1) & CELL, 0);
        t.free_cancelled(1);
        drop(t); // no double drop of the taken payload
    }

    #[test]
    fn untaken_cell_is_dropped_with_the_table() {
        let marker = std::sync::Arc::new(());
        let t = SlotTable::new(3);
        t.arm_remote(2, 1, marker.clone());
        drop(t);
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }

    #[test]
    fn a_table_in_a_mapping_of_its_own_works_and_drops_its_payloads() {
        // 2^17 records of 40 bytes: past `MAPPED_BYTES`, so the records live in a mapping.
        let len = 1 << 17;
        assert!(len * std::mem::size_of::<Record<std::sync::Arc<()>>>() >= MAPPED_BYTES);
        let marker = std::sync::Arc::new(());
        let t = SlotTable::new(len);
        assert!(t.records.is_mapped(), "a mapping of its own");
        assert_eq!(t.len(), len);
        assert!(
            (0..len as u32).step_by(1001).all(|s| t.load(s) == 0),
            "zeroed"
        );
        for slot in [0, 1, len as u32 / 2, len as u32 - 1] {
            t.arm_remote(slot, 9, marker.clone());
        }
        let last = len as u32 - 1;
        assert_eq!(t.deadline(last), 9);
        assert_eq!(t.cancel(last + 1, 0), Cancel::Lost, "one past the end");
        drop(t);
        assert_eq!(
            std::sync::Arc::strong_count(&marker),
            1,
            "every payload dropped once"
        );
    }

    #[test]
    fn out_of_range_is_lost() {
        let t = SlotTable::<u8>::new(1);
        assert_eq!(t.cancel(5, 0), Cancel::Lost);
        assert_eq!(t.rearm(5, 0, 1), Rearm::Lost);
        assert_eq!(t.rearm_local(5, 0, 1), None);
        assert_eq!(t.cancel_local(5, 0), None);
    }

    #[test]
    fn generation_wraps() {
        let t = SlotTable::<u8>::new(1);
        t.records[0]
            .word
            .store(pack(u32::MAX, FREE), Ordering::Relaxed);
        let g = t.arm_local(0, 0, 0);
        assert_eq!(
            t.take_due(0, 0),
            Due::Fire {
                freed: true,
                deadline: 0
            }
        );
        assert_eq!(t.load(0), pack(g.wrapping_add(1), FREE));
        assert_eq!(generation(t.load(0)), 0);
    }
}

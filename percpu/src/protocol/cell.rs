//! Per-sleep shared cells of the async layer (`time`): one word (the cell's state beside the
//! waker handshake) and one waker slot per registered sleep, 24 bytes; the protocol between the
//! sleep and the thread that delivers its fire; and the stack of cells freed off the base's
//! thread. Free of tokio so the model checker runs it.
//!
//! A base's payload is a `u64` naming a cell and an arming (`cell | seq << 32`), so the wheel
//! holds no pointer and no allocation per timer; the cell is what the firing thread and the
//! sleeping task share.
//!
//! # State word
//! The cell's state is the value of its [`AtomicWaker`]'s word (the bits the waker handshake
//! leaves free; see `protocol::waker`), read with [`AtomicWaker::load`] and changed with
//! [`AtomicWaker::update`], which keep the handshake bits as they are, or with
//! [`AtomicWaker::store_exclusive`] where no other thread can reach the cell. `seq` (bits 0..32)
//! counts the cell's armings; `SLEEP` says a `Sleep` still holds the cell; `ARMINGS` (bits
//! 33..35) counts armings whose payload the base may still hand out; `FIRED` says the arming
//! `seq` has fired. Who changes what:
//!
//! | change                           | who                                                   |
//! |----------------------------------|-------------------------------------------------------|
//! | `seq+1`, `ARMINGS+1`, `FIRED=0`  | the `Sleep` (register, re-arm after a fire)           |
//! | `ARMINGS-1`, `FIRED=1` if seq    | the thread turning the base, delivering a payload     |
//! | `ARMINGS-1`                      | the `Sleep`, after a cancel that returned true        |
//! | `SLEEP=0`                        | the `Sleep`, when dropped                             |
//!
//! Each row is one method of [`Cell`]: [`Cell::start`] and [`Cell::arm`] (new armings),
//! `Cell::deliver` (through [`turn`]), [`Cell::release`] / [`Cell::release_held`] (the sleep lets go, cancelling a
//! pending arming through the closure it passes). [`Cell::poll`] is the sleep's check: FIRED,
//! then register the waker, then FIRED again (a delivery between the two found no waker to wake).
//!
//! The thread whose update leaves `ARMINGS == 0` and `SLEEP == 0` frees the cell: nobody else can
//! reach it then (the base hands out no payload naming it, and no `Sleep` holds it). A cell is
//! therefore freed exactly once, by whichever of the two sides lets go last.
//!
//! At most two armings are outstanding: a re-arm that finds the old arming firing (its cancel
//! failed) arms a new one while the turning thread still holds the old payload. The old payload
//! carries the old `seq`, so its delivery counts down but neither sets `FIRED` nor wakes. The
//! bound holds because the turning thread delivers each payload as the base hands it out, inside
//! `Base::turn` ([`turn`], [`deliver`]), and only defers the wake: a turn fires twice (before
//! and after it takes the notices), and a cross-core re-arm between the two makes an arming the
//! second fire hands out, so payloads delivered only after the turn would leave two fired
//! armings outstanding beside the third that a re-arm after the second fire makes.
//!
//! A sleep holding the base (its owner's thread) updates the word with plain loads and stores
//! ([`Cell::release_held`]) and takes its waker with no handshake: deliveries and a closing
//! base's [`Cell::take_waker`], the only other writers while the sleep holds the cell, run under
//! the base, and the base's hold orders them; the sleep's own registers cannot overlap its drop.
//! No handshake is in progress then, so the store, which writes the handshake bits as WAITING,
//! clobbers nothing, and nothing races it.
//!
//! # Returned cells
//! A cell freed by a thread that does not hold the base goes on [`Returned`], a lock-free stack
//! whose link is the free cell's state (index + 1; 0 ends it). The link is written with an
//! update, not a plain store: the delivery that counted the last arming down may still be in its
//! waker take on the same word (it runs under the base, so it is over before the holder reuses
//! the cell, but not before the push). Anyone pushes with a CAS; only the holder of the base
//! empties it, whole, with one swap, so no ABA can arise (a popped head is never pushed back
//! while a pusher still compares against it as "the head").
//!
//! # Storage
//! Cells live in chunks of [`CHUNK`] allocated by the thread holding the base (so at most one
//! allocation per 1,024 cells (2 under loom), and none once the population is steady) and never move, so a
//! `&Cell` stays valid while the [`Cells`] lives. Chunk pointers are published with a Release store
//! and read with an Acquire load.

use std::task::Waker;

use crate::Base;
use crate::protocol::waker::{self, AtomicWaker};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Cells per chunk.
pub const CHUNK: usize = 1 << CHUNK_SHIFT;
#[cfg(not(loom))]
const CHUNK_SHIFT: u32 = 10;
#[cfg(loom)]
const CHUNK_SHIFT: u32 = 1;
/// Most cells per base (16 Mi); the chunk table is 128 KiB, zeroed, so untouched chunks cost
/// nothing.
pub const MAX_CELLS: usize = 1 << 24;

const SEQ_MASK: u64 = 0xFFFF_FFFF;
const SLEEP: u64 = 1 << 32;
const ARMING_ONE: u64 = 1 << 33;
const ARMINGS_MASK: u64 = 0b11 << 33;
const FIRED: u64 = 1 << 35;
const _: () = assert!((SEQ_MASK | SLEEP | ARMINGS_MASK | FIRED) & !waker::VALUE == 0);

fn seq_of(state: u64) -> u32 {
    (state & SEQ_MASK) as u32
}

fn armings_of(state: u64) -> u64 {
    (state & ARMINGS_MASK) >> 33
}

fn fired(state: u64) -> bool {
    state & FIRED != 0
}

/// True if nobody holds the cell any more (the last one out frees it).
fn unheld(state: u64) -> bool {
    state & (SLEEP | ARMINGS_MASK) == 0
}

/// True if the current arming may still fire: counted, and not fired.
fn may_fire(state: u64) -> bool {
    armings_of(state) > 0 && !fired(state)
}

/// The state after a new arming: `seq + 1`, one more arming, not fired, still held by the sleep.
/// (Checked against the bound of two by the caller, on the state its update replaced: the
/// closure of an update may first see an older value.)
fn next_arming(state: u64) -> u64 {
    let seq = u64::from(seq_of(state).wrapping_add(1));
    ((state & !(SEQ_MASK | FIRED)) + ARMING_ONE) | seq | SLEEP
}

/// The state after the sleep lets go, `cancelled` saying whether it cancelled an arming.
fn let_go(state: u64, cancelled: bool) -> u64 {
    let less = if cancelled { ARMING_ONE } else { 0 };
    (state - less) & !SLEEP
}

/// A base payload: the cell and its arming.
pub fn payload(cell: u32, seq: u32) -> u64 {
    u64::from(cell) | u64::from(seq) << 32
}

/// The cell and arming a payload names.
pub fn split(payload: u64) -> (u32, u32) {
    (payload as u32, (payload >> 32) as u32)
}

/// One sleep's shared state: its waker slot, the state in the slot's word.
///
/// While the cell is free and on the [`Returned`] stack, the state holds the link to the next one
/// instead; a cell taken for a new sleep starts again from state 0 (no payload can name a free
/// cell, so its old `seq` is not needed).
pub struct Cell {
    waker: AtomicWaker,
}

impl Cell {
    fn new() -> Self {
        Self {
            waker: AtomicWaker::new(),
        }
    }

    /// The first arming of a cell just taken from a free list, by the thread holding the base
    /// (so nobody else can reach it yet; the base's synchronisation publishes what is written
    /// here to whoever delivers). Returns its `seq`.
    pub fn start(&self, waker: &Waker) -> u32 {
        let state = next_arming(0);
        // Relaxed: the cell is the caller's alone until its handle escapes (see above).
        self.waker.store_exclusive(state, Ordering::Relaxed);
        self.waker.set_exclusive(waker);
        seq_of(state)
    }

    /// True once the current arming has fired.
    pub fn is_fired(&self) -> bool {
        // Acquire: pairs with the delivering thread's AcqRel update that set FIRED.
        fired(self.waker.load(Ordering::Acquire))
    }

    /// The sleep's poll: true if its arming fired; else `waker` is registered, and a delivery
    /// after this call wakes it.
    pub fn poll(&self, waker: &Waker) -> bool {
        if self.is_fired() {
            return true;
        }
        self.waker.register(waker);
        // Checked again: a delivery between the load and the register took no waker.
        self.is_fired()
    }

    /// A new arming while the sleep holds the cell (a re-arm after its timer fired or is firing:
    /// the old payload, if still on its way, carries the old `seq` and is stale). Returns the new
    /// `seq`. At most two armings are outstanding at once.
    pub fn arm(&self) -> u32 {
        // AcqRel / Acquire: orders against the delivering thread's update of the same word.
        let prev = self
            .waker
            .update(Ordering::AcqRel, Ordering::Acquire, next_arming);
        debug_assert!(
            armings_of(prev) < 2,
            "a third outstanding arming: {prev:#x}"
        );
        seq_of(next_arming(prev))
    }

    /// Undoes [`Cell::arm`] when no timer carries the new arming (the base refused it).
    pub fn disarm(&self) {
        // AcqRel / Acquire: as in `arm`.
        self.waker
            .update(Ordering::AcqRel, Ordering::Acquire, |s| s - ARMING_ONE);
    }

    /// A payload of arming `seq` came out of the base: count the arming down, and if it is the
    /// current one, mark it fired. The caller wakes the task afterwards ([`Cell::wake`]) where
    /// told to; a re-arm between the two costs the task one spurious poll.
    fn deliver(&self, seq: u32) -> Delivered {
        let update = |s: u64| {
            let s = s - ARMING_ONE;
            if seq_of(s) == seq { s | FIRED } else { s }
        };
        // AcqRel: Release makes FIRED visible to the poll the wake causes; Acquire sees the
        // sleep side's last update (let go or re-armed).
        let prev = self
            .waker
            .update(Ordering::AcqRel, Ordering::Acquire, update);
        debug_assert!(armings_of(prev) > 0, "delivery with no arming: {prev:#x}");
        if unheld(update(prev)) {
            Delivered::Free
        } else if seq_of(prev) == seq {
            Delivered::Wake
        } else {
            Delivered::Stale
        }
    }

    /// Wakes the task registered on the cell, if any (taking its waker out).
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// The sleep lets go without holding the base: `cancel` is tried if the current arming may
    /// still fire, and must return true only if that arming will never be delivered. True if the
    /// caller must free the cell (nothing else holds it).
    pub fn release(&self, cancel: impl FnOnce() -> bool) -> bool {
        // Acquire: sees a delivery's update of this arming.
        let cancelled = may_fire(self.waker.load(Ordering::Acquire)) && cancel();
        if !cancelled {
            // A delivery may still be on its way: it must not wake a task that let go.
            drop(self.waker.take());
        }
        // AcqRel: the last of the two sides to let go sees the other's update and frees.
        let prev = self.waker.update(Ordering::AcqRel, Ordering::Acquire, |s| {
            let_go(s, cancelled)
        });
        unheld(let_go(prev, cancelled))
    }

    /// [`Cell::release`] by a thread holding the base, under which every delivery runs: the
    /// cell is the caller's alone meanwhile, so plain loads and stores do (the hold's Release
    /// publishes them to the next holder). True if the caller must free the cell; its waker
    /// slot is empty either way.
    pub fn release_held(&self, cancel: impl FnOnce() -> bool) -> bool {
        // Relaxed: exclusive while the base is held (see above).
        let state = self.waker.load(Ordering::Relaxed);
        let cancelled = may_fire(state) && cancel();
        let state = let_go(state, cancelled);
        // A delivery still on its way must not wake a task that let go.
        drop(self.waker.take_exclusive());
        if unheld(state) {
            return true;
        }
        // Relaxed: published by the hold's Release (see above); a plain store, since nothing
        // else touches the word meanwhile (see the module docs).
        self.waker.store_exclusive(state, Ordering::Relaxed);
        false
    }

    /// Takes out the waker registered on the cell, if any, without changing its state (the base
    /// is closing: the task's next poll finds out). The caller holds the base: a sleep dropped
    /// by the owner ([`Cell::release_held`]) touches the waker slot with no handshake.
    pub fn take_waker(&self) -> Option<Waker> {
        self.waker.take()
    }

    /// Empties the waker slot of a cell nobody holds any more, before it goes on a free list.
    pub fn clear(&self) {
        drop(self.waker.take());
    }
}

/// What a delivery leaves the turning thread to do.
#[derive(Debug, PartialEq, Eq)]
enum Delivered {
    /// An old arming's payload (the sleep re-armed since): counted down, nothing else.
    Stale,
    /// The current arming fired: wake the task.
    Wake,
    /// The sleep let go before: the cell is the caller's to free.
    Free,
}

/// Turns `base`, whose payloads name cells of `cells`, for a caller holding the base: each
/// payload is delivered as the base hands it out ([`deliver`]; see the module docs for why
/// inside the turn). The caller wakes the cells left in `woken` with [`Cell::wake`] once the turn
/// is over (so that a waker that polls inline cannot re-enter the base) and while it still holds
/// the base (so that a cell freed meanwhile is reused by no one). Returns how many fired.
pub fn turn(
    base: &mut Base<u64>,
    cells: &Cells,
    free: &mut Vec<u32>,
    woken: &mut Vec<u32>,
) -> usize {
    base.turn(|p| deliver(cells, p, free, woken))
}

/// Delivers payload `p` to its cell of `cells`: a cell nobody holds any more goes on `free` (its
/// waker slot emptied), a cell whose task to wake on `woken`.
pub fn deliver(cells: &Cells, p: u64, free: &mut Vec<u32>, woken: &mut Vec<u32>) {
    let (index, seq) = split(p);
    let cell = cells.get(index);
    match cell.deliver(seq) {
        Delivered::Stale => {}
        Delivered::Wake => woken.push(index),
        Delivered::Free => {
            cell.clear();
            free.push(index);
        }
    }
}

/// The chunked cell table of one base.
pub struct Cells {
    /// Chunk pointers (`*mut Cell` to `CHUNK` cells), 0 while not allocated.
    chunks: Box<[AtomicUsize]>,
}

impl Cells {
    /// A table for at most `max` cells (rounded up to whole chunks), none allocated yet.
    pub fn new(max: usize) -> Self {
        Self {
            chunks: (0..max.div_ceil(CHUNK))
                .map(|_| AtomicUsize::new(0))
                .collect(),
        }
    }

    /// Cells the table can hold.
    pub fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    /// The cell `index`, which must have been handed out (its chunk exists).
    pub fn get(&self, index: u32) -> &Cell {
        let index = index as usize;
        // Acquire: pairs with the Release store in `grow`, so the chunk's initialised cells are
        // visible (the index came from the thread that grew it, usually this one).
        let ptr = self.chunks[index >> CHUNK_SHIFT].load(Ordering::Acquire) as *const Cell;
        assert!(!ptr.is_null(), "cell {index} was never allocated");
        // SAFETY: a non-zero entry is a pointer from `Box::into_raw` of a `CHUNK`-long boxed
        // slice, freed only in `Drop` (which needs `&mut self`); `index & (CHUNK - 1) < CHUNK`.
        unsafe { &*ptr.add(index & (CHUNK - 1)) }
    }

    /// Allocates the chunk holding cell `index` (below [`Cells::capacity`]), if not yet there.
    /// Called only by the thread holding the base, which is the only one that hands out new
    /// indices.
    pub fn grow(&self, index: u32) {
        let chunk = &self.chunks[index as usize >> CHUNK_SHIFT];
        // Relaxed: only the holder of the base writes the table, and it wrote it itself.
        if chunk.load(Ordering::Relaxed) != 0 {
            return;
        }
        let cells: Box<[Cell]> = (0..CHUNK).map(|_| Cell::new()).collect();
        let ptr = Box::into_raw(cells) as *mut Cell;
        // Release: publishes the initialised cells to `get` on other threads.
        chunk.store(ptr as usize, Ordering::Release);
    }
}

impl Drop for Cells {
    fn drop(&mut self) {
        for chunk in self.chunks.iter() {
            // Relaxed: `&mut self`, no other thread can be using the table.
            let ptr = chunk.load(Ordering::Relaxed) as *mut Cell;
            if !ptr.is_null() {
                // SAFETY: made by `Box::into_raw` of a `CHUNK`-long boxed slice in `grow`, and
                // freed only here, once.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, CHUNK)) });
            }
        }
    }
}

/// Cells freed by threads not holding the base (see the module docs).
pub struct Returned {
    /// The top cell's index + 1; 0 when empty.
    head: AtomicU64,
}

impl Default for Returned {
    fn default() -> Self {
        Self::new()
    }
}

impl Returned {
    /// An empty stack.
    pub fn new() -> Self {
        Self {
            head: AtomicU64::new(0),
        }
    }

    /// Pushes `index`, a cell of `cells` that nobody holds any more (its waker slot emptied
    /// here), for the holder of the base to reuse.
    pub fn push(&self, cells: &Cells, index: u32) {
        let cell = cells.get(index);
        cell.clear();
        // Relaxed: the CAS below publishes.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS. An update, not a store (see the module docs).
            cell.waker
                .update(Ordering::Relaxed, Ordering::Relaxed, |_| head);
            // Release: the link and the cell's emptied state reach the holder's Acquire swap.
            match self.head.compare_exchange_weak(
                head,
                u64::from(index) + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Holder of the base only: moves every returned cell to `free`.
    pub fn take_all(&self, cells: &Cells, free: &mut Vec<u32>) {
        // Acquire: pairs with the Release CAS of each push.
        let mut head = self.head.swap(0, Ordering::Acquire);
        while head != 0 {
            let index = (head - 1) as u32;
            free.push(index);
            // Relaxed: written before the push that published this cell.
            head = cells.get(index).waker.load(Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cell").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Cells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cells")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Returned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Returned").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Cell>(), 24);
    }

    #[test]
    fn payload_round_trips() {
        assert_eq!(split(payload(7, 9)), (7, 9));
        assert_eq!(split(payload(u32::MAX, u32::MAX)), (u32::MAX, u32::MAX));
    }

    #[test]
    fn arming_bumps_seq_and_clears_fired() {
        let s = next_arming(0);
        assert_eq!((seq_of(s), armings_of(s)), (1, 1));
        assert!(s & SLEEP != 0 && !fired(s) && !unheld(s));
        let s = (s - ARMING_ONE) | FIRED;
        assert!(fired(s));
        let s = next_arming(s);
        assert_eq!((seq_of(s), armings_of(s)), (2, 1));
        assert!(!fired(s));
        assert!(unheld(let_go(s, true)));
    }

    #[test]
    fn cells_grow_by_chunk() {
        let cells = Cells::new(MAX_CELLS);
        assert_eq!(cells.capacity(), MAX_CELLS);
        cells.grow(0);
        cells.grow(CHUNK as u32 + 3);
        assert!(!cells.get(5).is_fired() && !cells.get(CHUNK as u32 + 3).is_fired());
    }

    #[test]
    fn stale_delivery_counts_down_without_firing() {
        let cells = Cells::new(CHUNK);
        cells.grow(0);
        let cell = cells.get(0);
        let old = cell.start(Waker::noop());
        let new = cell.arm();
        assert_eq!(cell.deliver(old), Delivered::Stale);
        assert!(!cell.is_fired(), "a stale payload fired the sleep");
        assert_eq!(cell.deliver(new), Delivered::Wake);
        assert!(cell.is_fired());
        assert!(cell.release(|| unreachable!("nothing left to cancel")));
    }

    #[test]
    fn returned_cells_come_back_once() {
        let cells = Cells::new(CHUNK);
        cells.grow(0);
        let returned = Returned::new();
        for i in [0, 3, 1] {
            returned.push(&cells, i);
        }
        let mut free = Vec::new();
        returned.take_all(&cells, &mut free);
        returned.take_all(&cells, &mut free);
        assert_eq!(free, [1, 3, 0]);
    }
}

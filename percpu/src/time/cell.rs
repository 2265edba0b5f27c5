//! Per-sleep shared cells: one state word and one waker slot per registered [`super::Sleep`].
//!
//! A base's payload is a `u64` naming a cell and an arming (`cell | seq << 32`), so the wheel
//! holds no pointer and no allocation per timer; the cell is what the firing thread and the
//! sleeping task share.
//!
//! # State word
//! `seq` (bits 0..32) counts the cell's armings; `SLEEP` says a `Sleep` still holds the cell;
//! `ARMINGS` (bits 33..35) counts armings whose payload the base may still hand out; `FIRED` says
//! the arming `seq` has fired. Who changes what:
//!
//! | change                           | who                                                   |
//! |----------------------------------|-------------------------------------------------------|
//! | `seq+1`, `ARMINGS+1`, `FIRED=0`  | the `Sleep` (register, re-arm after a fire)           |
//! | `ARMINGS-1`, `FIRED=1` if seq    | the thread turning the base, delivering a payload     |
//! | `ARMINGS-1`                      | the `Sleep`, after a cancel that returned true        |
//! | `SLEEP=0`                        | the `Sleep`, when dropped                             |
//!
//! The thread whose update leaves `ARMINGS == 0` and `SLEEP == 0` frees the cell: nobody else can
//! reach it then (the base hands out no payload naming it, and no `Sleep` holds it). A cell is
//! therefore freed exactly once, by whichever of the two sides lets go last.
//!
//! At most two armings are outstanding: a re-arm that finds the old arming firing (its cancel
//! failed) arms a new one while the turning thread still holds the old payload. The old payload
//! carries the old `seq`, so its delivery counts down but neither sets `FIRED` nor wakes.
//!
//! # Storage
//! Cells live in chunks of [`CHUNK`] allocated by the thread holding the base (so at most one
//! allocation per 1,024 cells, and none once the population is steady) and never move, so a
//! `&Cell` stays valid while the [`Cells`] lives. Chunk pointers are published with a Release store
//! and read with an Acquire load.

use crate::protocol::waker::AtomicWaker;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Cells per chunk.
pub(super) const CHUNK: usize = 1 << CHUNK_SHIFT;
const CHUNK_SHIFT: u32 = 10;
/// Most cells per base (16 Mi); the chunk table is 128 KiB, zeroed, so untouched chunks cost
/// nothing.
pub(super) const MAX_CELLS: usize = 1 << 24;

const SEQ_MASK: u64 = 0xFFFF_FFFF;
pub(super) const SLEEP: u64 = 1 << 32;
pub(super) const ARMING_ONE: u64 = 1 << 33;
const ARMINGS_MASK: u64 = 0b11 << 33;
pub(super) const FIRED: u64 = 1 << 35;

/// The `seq` field of a state word.
pub(super) fn seq_of(state: u64) -> u32 {
    (state & SEQ_MASK) as u32
}

/// Armings whose payload the base may still hand out.
pub(super) fn armings_of(state: u64) -> u64 {
    (state & ARMINGS_MASK) >> 33
}

/// True if the cell's current arming has fired (a delivery sets FIRED only for the current
/// `seq`, and a new arming clears it).
pub(super) fn fired(state: u64) -> bool {
    state & FIRED != 0
}

/// True if nobody holds the cell any more (the last one out frees it).
pub(super) fn unheld(state: u64) -> bool {
    state & (SLEEP | ARMINGS_MASK) == 0
}

/// The state after a new arming: `seq + 1`, one more arming, not fired, still held by the sleep.
pub(super) fn next_arming(state: u64) -> u64 {
    debug_assert!(
        armings_of(state) < 2,
        "a third outstanding arming: {state:#x}"
    );
    let seq = u64::from(seq_of(state).wrapping_add(1));
    ((state & !(SEQ_MASK | FIRED)) + ARMING_ONE) | seq | SLEEP
}

/// A base payload: the cell and its arming.
pub(super) fn payload(cell: u32, seq: u32) -> u64 {
    u64::from(cell) | u64::from(seq) << 32
}

/// The cell and arming a payload names.
pub(super) fn split(payload: u64) -> (u32, u32) {
    (payload as u32, (payload >> 32) as u32)
}

/// One sleep's shared state.
///
/// While the cell is free and on the stack of cells returned by other threads, `state` holds the
/// link to the next one instead (index + 1; 0 ends the stack); a cell taken for a new sleep
/// starts again from state 0 (no payload can name a free cell, so its old `seq` is not needed).
pub(super) struct Cell {
    pub(super) state: AtomicU64,
    pub(super) waker: AtomicWaker,
}

impl Cell {
    fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            waker: AtomicWaker::new(),
        }
    }
}

/// The chunked cell table of one base.
pub(super) struct Cells {
    /// Chunk pointers (`*mut Cell` to `CHUNK` cells), 0 while not allocated.
    chunks: Box<[AtomicUsize]>,
}

impl Cells {
    pub(super) fn new() -> Self {
        Self {
            chunks: (0..MAX_CELLS / CHUNK)
                .map(|_| AtomicUsize::new(0))
                .collect(),
        }
    }

    /// The cell `index`, which must have been handed out (its chunk exists).
    pub(super) fn get(&self, index: u32) -> &Cell {
        let index = index as usize;
        // Acquire: pairs with the Release store in `grow`, so the chunk's initialised cells are
        // visible (the index came from the thread that grew it, usually this one).
        let ptr = self.chunks[index >> CHUNK_SHIFT].load(Ordering::Acquire) as *const Cell;
        assert!(!ptr.is_null(), "cell {index} was never allocated");
        // SAFETY: a non-zero entry is a pointer from `Box::into_raw` of a `CHUNK`-long boxed
        // slice, freed only in `Drop` (which needs `&mut self`); `index & (CHUNK - 1) < CHUNK`.
        unsafe { &*ptr.add(index & (CHUNK - 1)) }
    }

    /// Allocates the chunk holding cell `index`, if not yet there. Called only by the thread
    /// holding the base, which is the only one that hands out new indices.
    pub(super) fn grow(&self, index: u32) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(unheld((s - ARMING_ONE) & !SLEEP));
    }

    #[test]
    fn cells_grow_by_chunk() {
        let cells = Cells::new();
        cells.grow(0);
        cells.grow(CHUNK as u32 + 3);
        cells.get(5).state.store(5, Ordering::Relaxed);
        assert_eq!(cells.get(5).state.load(Ordering::Relaxed), 5);
        assert_eq!(cells.get(CHUNK as u32 + 3).state.load(Ordering::Relaxed), 0);
    }
}

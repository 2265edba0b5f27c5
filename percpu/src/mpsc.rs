//! Bounded array queue with a sequence number per cell (after Dmitry Vyukov's bounded MPMC queue).
//!
//! # Model
//! `capacity` cells (rounded up to a power of two, at least 2) form a ring. Each cell carries `seq`, which says
//! whose turn it is: a producer holding position `pos` may write the cell when `seq == pos`; a
//! consumer holding `pos` may read it when `seq == pos + 1`. After the read the consumer sets
//! `seq = pos + capacity`, handing the cell to the producer one lap later. Producers claim a position
//! by a compare-and-swap on `tail`; consumers by a compare-and-swap on `head`.
//!
//! # Invariants
//! - A value is written by exactly one producer and read by exactly one consumer (the CAS on
//!   `tail`/`head` hands out each position once), so nothing is lost or doubled.
//! - Values come out in the order their positions were claimed.
//! - `push` on a full queue hands the value back; nothing is dropped.
//!
//! # Given up
//! - A consumer that finds the next cell claimed but not yet written reports empty, even if a later
//!   cell is complete (the queue is FIFO by claim). The producer that claimed it finishes in a
//!   bounded number of its own steps; the per-core base relies on every producer announcing its
//!   message *after* writing it (see `protocol::wake`), so no message is missed.
//! - Likewise `push` may report full while a consumer is between taking a value and releasing the
//!   cell.
//! - The base uses one consumer, but `pop` is safe for several (one CAS on `head`); the free-slot
//!   reserve (`Shared::reserve` in `remote.rs`), popped by remote schedulers and the owner, uses
//!   that.
//!
//! Every atomic comes from the crate's `sync` shim, so loom checks this queue.

use std::fmt;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

struct Cell<T> {
    /// Turn indicator, see the module doc.
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Bounded multi-producer queue; `push` hands the value back when full.
///
/// ```
/// use tickwheel_percpu::mpsc::Queue;
/// let q = Queue::new(2);
/// assert!(q.push(1).is_ok());
/// assert!(q.push(2).is_ok());
/// assert_eq!(q.push(3), Err(3));
/// assert_eq!(q.pop(), Some(1));
/// ```
pub struct Queue<T> {
    /// Next position a consumer takes.
    head: CachePadded<AtomicUsize>,
    /// Next position a producer takes.
    tail: CachePadded<AtomicUsize>,
    cells: Box<[Cell<T>]>,
    /// `cells.len() - 1`; `cells.len()` is a power of two.
    mask: usize,
}

// SAFETY: a value moves from one producer thread to one consumer thread, so `T: Send` suffices; the
// cells are only touched by the thread holding their position (see the module doc).
unsafe impl<T: Send> Send for Queue<T> {}
// SAFETY: as above; shared access only hands values across threads, never shares a `&T`.
unsafe impl<T: Send> Sync for Queue<T> {}

/// Signed distance `a - b` between two positions, correct across wrap-around.
fn lap_distance(a: usize, b: usize) -> isize {
    a.wrapping_sub(b) as isize
}

impl<T> Queue<T> {
    /// A queue holding at least `capacity` values (rounded up to a power of two, minimum 2).
    ///
    /// The minimum is 2 because with one cell "written, lap 0" and "free, lap 1" would both be
    /// `seq == pos + 1`, and a producer could overwrite an unread value.
    pub fn new(capacity: usize) -> Self {
        let len = capacity.max(2).next_power_of_two();
        let cells = (0..len)
            .map(|i| Cell {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            cells,
            mask: len - 1,
        }
    }

    /// How many values fit.
    pub fn capacity(&self) -> usize {
        self.cells.len()
    }

    /// Appends `value`, or hands it back if the queue is full.
    pub fn push(&self, value: T) -> Result<(), T> {
        // Relaxed: only a hint where to start; the CAS below and the cell's `seq` decide.
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            // Acquire: pairs with the consumer's Release store of `seq`, so our write below cannot
            // overtake its read of the previous lap's value.
            let seq = cell.seq.load(Ordering::Acquire);
            let dist = lap_distance(seq, pos);
            if dist == 0 {
                // Relaxed: the CAS only hands out the position; data is published through `seq`.
                match self.tail.compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` gives this thread the cell alone until
                        // it stores `seq = pos + 1`; the slot is empty (`seq == pos`).
                        cell.value
                            .with_mut(|p| unsafe { p.write(MaybeUninit::new(value)) });
                        // Release: publishes the value to the consumer's Acquire load of `seq`.
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if dist < 0 {
                // The cell still holds the value from one lap ago: full.
                return Err(value);
            } else {
                // Another producer took `pos`; start again from the current tail.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Removes the oldest value, or `None` if there is none ready.
    pub fn pop(&self) -> Option<T> {
        // Relaxed: a hint, as in `push`.
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            // Acquire: pairs with the producer's Release store, making its value visible.
            let seq = cell.seq.load(Ordering::Acquire);
            let dist = lap_distance(seq, pos.wrapping_add(1));
            if dist == 0 {
                // Relaxed: hands out the position only, as in `push`.
                match self.head.compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS gives this thread the cell alone; `seq == pos+1`
                        // means a producer wrote it and published with Release (Acquired above).
                        let value = cell.value.with_mut(|p| unsafe { p.read().assume_init() });
                        // Release: our read happens-before the next producer's write of this cell.
                        cell.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(value);
                    }
                    Err(now) => pos = now,
                }
            } else if dist < 0 {
                // Not written yet: empty (or a producer is mid-write).
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Values in the queue at some recent moment; exact only when no one else is active.
    pub fn len(&self) -> usize {
        // Relaxed: an estimate by contract.
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        tail.wrapping_sub(head).min(self.capacity())
    }

    /// True if `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lap_distance_wraps() {
        assert_eq!(lap_distance(0, usize::MAX), 1);
        assert_eq!(lap_distance(usize::MAX, 0), -1);
        assert_eq!(lap_distance(5, 5), 0);
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(Queue::<u8>::new(0).capacity(), 2);
        assert_eq!(Queue::<u8>::new(1).capacity(), 2);
        assert_eq!(Queue::<u8>::new(3).capacity(), 4);
        assert_eq!(Queue::<u8>::new(4096).capacity(), 4096);
    }

    #[test]
    fn fifo_against_vecdeque_over_many_laps() {
        let q = Queue::new(4);
        let mut model = std::collections::VecDeque::new();
        for i in 0..1000u32 {
            // A fixed pseudo-random mix of pushes and pops.
            if (i.wrapping_mul(2_654_435_761) >> 29) & 1 == 0 {
                let r = q.push(i);
                if model.len() < 4 {
                    model.push_back(i);
                    assert_eq!(r, Ok(()));
                } else {
                    assert_eq!(r, Err(i));
                }
            } else {
                assert_eq!(q.pop(), model.pop_front());
            }
            assert_eq!(q.len(), model.len());
        }
    }

    #[test]
    fn capacity_one_request_never_overwrites() {
        let q = Queue::new(1);
        assert_eq!(q.push(1), Ok(()));
        assert_eq!(q.push(2), Ok(()));
        assert_eq!(q.push(3), Err(3));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn drop_releases_values() {
        let marker = std::sync::Arc::new(());
        let q = Queue::new(8);
        for _ in 0..5 {
            q.push(marker.clone()).unwrap();
        }
        drop(q);
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }
}

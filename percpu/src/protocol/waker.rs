//! One waker slot shared by a polling task and the thread that fires its timer: the register /
//! wake handshake of the async layer (`time`), free of tokio so the model checker can run it.
//!
//! # Model
//! One 64-bit word and the slot. The word's top two bits are the handshake, WAITING (both clear)
//! / REGISTERING / WAKING (a bit that can be set on top of REGISTERING); the other 62 bits are
//! the *value*, which the handshake leaves to its user (the async cell keeps its state there, so
//! a cell is one word and one slot). A `register` takes REGISTERING by CAS, stores its waker, and
//! clears the bit; a `take` sets WAKING with one fetch_or and, if it found WAITING, takes the waker
//! and clears the bit. Exactly one thread touches the slot at a time: the one that moved the
//! handshake out of WAITING, until it is back to WAITING.
//!
//! # Sharing the word
//! Every write of the word is a read-modify-write that changes only its own bits: the handshake's
//! fetch_or / fetch_and touch the two handshake bits, a CAS keeps the value as it read it, and the
//! user's [`AtomicWaker::update`] keeps the handshake bits as it read them, so neither side can
//! clobber the other's. The one plain store, [`AtomicWaker::store_exclusive`], writes the whole
//! word with the handshake at WAITING, and is only for when no other thread can reach the word
//! (so no register or take is in progress and none can start); it debug-asserts WAITING. Orderings
//! are the caller's to choose for the value; the handshake's own are justified where used.
//!
//! # Invariants
//! - No wake is lost: a `take` that comes while a `register` holds the slot leaves WAKING set, and
//!   that register, finding WAKING as it clears REGISTERING, wakes the waker it stored itself; a
//!   `register` that finds WAKING wakes its own waker at once.
//! - The waker woken is the latest one registered before the take.
//! - The value changes only through the user's calls.
//!
//! # Given up
//! Two `register`s at the same time are a caller error (one `Sleep` is polled from one place at a
//! time through `&mut`); the second is ignored, with a debug assertion. A CAS that meets a change
//! of the value (or of the handshake, for an update) tries again.

use std::task::Waker;

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// The bits of the word left to the user: all but the handshake's two.
pub const VALUE: u64 = !HANDSHAKE;
const REGISTERING: u64 = 1 << 62;
const WAKING: u64 = 1 << 63;
const HANDSHAKE: u64 = REGISTERING | WAKING;

fn waiting(word: u64) -> bool {
    word & HANDSHAKE == 0
}

/// One waker slot shared by the polling task and the firing thread (the classic register/wake
/// handshake: a register that races a wake wakes the new waker itself, so no wake is lost and the
/// latest registered waker is the one woken), and 62 bits of the user's beside the handshake in
/// its word (see the module docs).
pub struct AtomicWaker {
    word: AtomicU64,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the waker slot is only touched by the thread that moved the handshake from WAITING to
// REGISTERING (register) or WAKING (take), and those transitions are exclusive.
unsafe impl Sync for AtomicWaker {}

impl AtomicWaker {
    /// An empty slot, its value 0.
    pub fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            waker: UnsafeCell::new(None),
        }
    }

    /// The value.
    pub fn load(&self, order: Ordering) -> u64 {
        self.word.load(order) & VALUE
    }

    /// Replaces the value `v` with `f(v)` (which must stay within [`VALUE`]) in one
    /// read-modify-write that keeps the handshake bits as it found them; returns the old value.
    /// `set` and `fetch` are `fetch_update`'s orderings.
    pub fn update(&self, set: Ordering, fetch: Ordering, mut f: impl FnMut(u64) -> u64) -> u64 {
        let prev = self
            .word
            .fetch_update(set, fetch, |w| {
                let v = f(w & VALUE);
                debug_assert_eq!(v & HANDSHAKE, 0, "value {v:#x} out of bounds");
                Some(v | (w & HANDSHAKE))
            })
            .unwrap_or_else(|w| w);
        prev & VALUE
    }

    /// Sets the value to `v` (within [`VALUE`]) with a plain store, when no other thread can
    /// reach the word (see the module docs).
    pub fn store_exclusive(&self, v: u64, order: Ordering) {
        // Relaxed: an assertion on the caller's own exclusive word.
        debug_assert!(waiting(self.word.load(Ordering::Relaxed)), "handshake busy");
        debug_assert_eq!(v & HANDSHAKE, 0, "value {v:#x} out of bounds");
        self.word.store(v, order);
    }

    /// Stores `waker` (unless the stored one would wake the same task); the next `take` returns it.
    pub fn register(&self, waker: &Waker) {
        // Acquire: sees the slot as the last `take` or `register` left it. The CAS keeps the
        // value as read (a racing update of it makes the CAS fail and try again).
        let taken = self
            .word
            .fetch_update(Ordering::Acquire, Ordering::Acquire, |w| {
                waiting(w).then_some(w | REGISTERING)
            });
        match taken {
            Ok(_) => {
                self.waker.with_mut(|slot| {
                    // SAFETY: REGISTERING is held by this thread only (see the Sync impl).
                    let slot = unsafe { &mut *slot };
                    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                        *slot = Some(waker.clone());
                    }
                });
                // AcqRel: Release publishes the new waker to `take`; Acquire sees the WAKING bit
                // a concurrent `take` set.
                let was = self.word.fetch_and(!REGISTERING, Ordering::AcqRel);
                if was & WAKING != 0 {
                    // A `take` ran while we registered and left the waking to us; the slot is
                    // still ours (WAKING keeps every other register and take out of it).
                    let woken = self.waker.with_mut(|slot| {
                        // SAFETY: WAKING, set by a take that did not touch the slot, and still
                        // ours (see above).
                        unsafe { (*slot).take() }
                    });
                    // AcqRel: ends our exclusive access for the next register or take.
                    self.word.fetch_and(!WAKING, Ordering::AcqRel);
                    if let Some(w) = woken {
                        w.wake();
                    }
                }
            }
            // A `take` is in progress: it may have missed this waker, so wake it now.
            Err(w) if w & HANDSHAKE == WAKING => waker.wake_by_ref(),
            // Another register at the same time: the same `Sleep` is polled from one place at a
            // time (`&mut`), so this cannot happen.
            Err(w) => debug_assert!(false, "concurrent register ({w:#x})"),
        }
    }

    /// Stores `waker` when no other thread can reach the cell (just taken from the free list by
    /// the thread holding the base): a plain write, no handshake.
    pub fn set_exclusive(&self, waker: &Waker) {
        // Relaxed: the caller's exclusive access is ordered by the base's hold.
        debug_assert!(waiting(self.word.load(Ordering::Relaxed)));
        self.waker.with_mut(|slot| {
            // SAFETY: the caller is the only thread that can reach this cell (see above), so no
            // `register` or `take` runs at the same time.
            let slot = unsafe { &mut *slot };
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        });
    }

    /// Takes the waker out when no other thread can reach the cell (the caller holds the base,
    /// under which all deliveries run, and owns the cell's only sleep).
    pub fn take_exclusive(&self) -> Option<Waker> {
        // Relaxed: as in `set_exclusive`.
        debug_assert!(waiting(self.word.load(Ordering::Relaxed)));
        self.waker.with_mut(|slot| {
            // SAFETY: as in `set_exclusive`: no `register` or `take` can run at the same time.
            unsafe { (*slot).take() }
        })
    }

    /// Takes the stored waker out, or leaves the wake to a register in progress.
    pub fn take(&self) -> Option<Waker> {
        // AcqRel: Acquire sees the waker a register stored; Release orders the caller's update
        // of the value (FIRED) before a racing register sees WAKING and wakes.
        let was = self.word.fetch_or(WAKING, Ordering::AcqRel);
        if !waiting(was) {
            return None;
        }
        let waker = self.waker.with_mut(|slot| {
            // SAFETY: the WAITING -> WAKING transition is exclusive.
            unsafe { (*slot).take() }
        });
        // Release: the emptied slot is visible to the next register.
        self.word.fetch_and(!WAKING, Ordering::Release);
        waker
    }

    /// Wakes the stored waker, if any.
    pub fn wake(&self) {
        if let Some(w) = self.take() {
            w.wake();
        }
    }
}

impl Default for AtomicWaker {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for AtomicWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicWaker").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn waker_register_then_take() {
        let w = AtomicWaker::new();
        assert!(w.take().is_none());
        w.register(std::task::Waker::noop());
        assert!(w.take().is_some());
        assert!(w.take().is_none());
    }

    #[test]
    fn the_handshake_leaves_the_value_alone() {
        let w = AtomicWaker::new();
        w.store_exclusive(VALUE, Ordering::Relaxed);
        w.register(std::task::Waker::noop());
        assert_eq!(w.load(Ordering::Relaxed), VALUE);
        assert!(w.take().is_some());
        assert_eq!(
            w.update(Ordering::Relaxed, Ordering::Relaxed, |v| v - 1),
            VALUE
        );
        assert_eq!(w.load(Ordering::Relaxed), VALUE - 1);
    }
}

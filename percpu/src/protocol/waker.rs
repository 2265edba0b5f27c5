//! One waker slot shared by a polling task and the thread that fires its timer: the register /
//! wake handshake of the async layer (`time`), free of tokio so the model checker can run it.
//!
//! # Model
//! One state word, WAITING / REGISTERING / WAKING (a bit that can be set on top of REGISTERING),
//! and the slot. A `register` takes REGISTERING by CAS, stores its waker, and gives the word back
//! by CAS; a `take` sets WAKING with one fetch_or and, if it found WAITING, takes the waker and
//! clears the bit. Exactly one thread touches the slot at a time: the one that moved the word out
//! of WAITING.
//!
//! # Invariants
//! - No wake is lost: a `take` that comes while a `register` holds the slot leaves WAKING set, and
//!   that register, failing to give the word back, wakes the waker it stored itself; a `register`
//!   that finds WAKING wakes its own waker at once.
//! - The waker woken is the latest one registered before the take.
//!
//! # Given up
//! Two `register`s at the same time are a caller error (one `Sleep` is polled from one place at a
//! time through `&mut`); the second is ignored, with a debug assertion.

use std::task::Waker;

use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

const WAITING: usize = 0;
const REGISTERING: usize = 1;
const WAKING: usize = 2;

/// One waker slot shared by the polling task and the firing thread (the classic register/wake
/// handshake: a register that races a wake wakes the new waker itself, so no wake is lost and the
/// latest registered waker is the one woken).
pub struct AtomicWaker {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the waker slot is only touched by the thread that moved `state` from WAITING to
// REGISTERING (register) or WAKING (take), and those transitions are exclusive.
unsafe impl Sync for AtomicWaker {}

impl AtomicWaker {
    /// An empty slot.
    pub fn new() -> Self {
        Self {
            state: AtomicUsize::new(WAITING),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` (unless the stored one would wake the same task); the next `take` returns it.
    pub fn register(&self, waker: &Waker) {
        // Acquire: sees the slot as the last `take` or `register` left it.
        match self.state.compare_exchange(
            WAITING,
            REGISTERING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                self.waker.with_mut(|slot| {
                    // SAFETY: REGISTERING is held by this thread only (see the Sync impl).
                    let slot = unsafe { &mut *slot };
                    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                        *slot = Some(waker.clone());
                    }
                });
                // AcqRel: Release publishes the new waker to `take`; Acquire (on failure) sees
                // the WAKING bit a concurrent `take` set.
                if let Err(_waking) = self.state.compare_exchange(
                    REGISTERING,
                    WAITING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // A `take` ran while we registered and left the waking to us.
                    let woken = self.waker.with_mut(|slot| {
                        // SAFETY: still REGISTERING (with WAKING): the taker did not touch it.
                        unsafe { (*slot).take() }
                    });
                    // AcqRel: ends our exclusive access for the next register or take.
                    self.state.swap(WAITING, Ordering::AcqRel);
                    if let Some(w) = woken {
                        w.wake();
                    }
                }
            }
            // A `take` is in progress: it may have missed this waker, so wake it now.
            Err(WAKING) => waker.wake_by_ref(),
            // Another register at the same time: the same `Sleep` is polled from one place at a
            // time (`&mut`), so this cannot happen.
            Err(state) => debug_assert!(false, "concurrent register ({state})"),
        }
    }

    /// Stores `waker` when no other thread can reach the cell (just taken from the free list by
    /// the thread holding the base): a plain write, no handshake.
    pub fn set_exclusive(&self, waker: &Waker) {
        // Relaxed: the caller's exclusive access is ordered by the base's hold.
        debug_assert_eq!(self.state.load(Ordering::Relaxed), WAITING);
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
        debug_assert_eq!(self.state.load(Ordering::Relaxed), WAITING);
        self.waker.with_mut(|slot| {
            // SAFETY: as in `set_exclusive`: no `register` or `take` can run at the same time.
            unsafe { (*slot).take() }
        })
    }

    /// Takes the stored waker out, or leaves the wake to a register in progress.
    pub fn take(&self) -> Option<Waker> {
        // AcqRel: Acquire sees the waker a register stored; Release orders the caller's state
        // update (FIRED) before a racing register sees WAKING and wakes.
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            WAITING => {
                let waker = self.waker.with_mut(|slot| {
                    // SAFETY: the WAITING -> WAKING transition is exclusive.
                    unsafe { (*slot).take() }
                });
                // Release: the emptied slot is visible to the next register.
                self.state.fetch_and(!WAKING, Ordering::Release);
                waker
            }
            _ => None,
        }
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
}

//! Waking a parked owner without a syscall per message.
//!
//! One word per base, three values: `EMPTY` (owner awake, nothing announced), `NOTIFIED` (a
//! producer announced a message since the owner last looked), `PARKED` (the owner drained its inbox
//! and may be blocked in the kernel).
//!
//! - Producer, after pushing its message: `swap(NOTIFIED)`. Only if it read `PARKED` does it kick
//!   the owner (writes the eventfd). Every later producer reads `NOTIFIED` and makes no syscall.
//! - Owner, at the start of a turn: `swap(EMPTY)`, then drain the inbox.
//! - Owner, before blocking: `CAS(EMPTY → PARKED)`. If it fails, a producer announced a message
//!   after the drain: do not block.
//!
//! Why no wake-up is lost: every operation is a read-modify-write of the same word, so they form
//! one total order and each reads the value just before it. Take a message pushed before its
//! producer's swap. If that swap comes before the owner's `swap(EMPTY)`, the owner's swap reads it
//! (or a later RMW in its release sequence) with Acquire, so the drain sees the message. If it
//! comes between `swap(EMPTY)` and the CAS, the CAS finds `NOTIFIED` and the owner does not block.
//! If it comes after the CAS, it reads `PARKED` and kicks. This is the Dekker pattern ("I set my
//! flag, then look at yours") done on a single location, which loom checks exactly; a version with
//! two locations would need SeqCst fences, which loom models only approximately.
//!
//! Cost: one uncontended RMW per turn for the owner; one RMW per message for producers; at most
//! one eventfd write per park.

use crate::sync::{AtomicUsize, Ordering};

const EMPTY: usize = 0;
const NOTIFIED: usize = 1;
const PARKED: usize = 2;

/// What the owner's `begin` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// No producer announced anything since the last turn.
    Quiet,
    /// At least one producer announced a message.
    Notified,
    /// The owner had parked and nobody announced anything.
    Parked,
}

/// The per-base wake word.
#[derive(Debug)]
pub struct Wake {
    state: AtomicUsize,
}

impl Default for Wake {
    fn default() -> Self {
        Self::new()
    }
}

impl Wake {
    /// Owner awake, nothing announced.
    pub fn new() -> Self {
        Self {
            state: AtomicUsize::new(EMPTY),
        }
    }

    /// Producer, after its message is in the queue. True if the caller must kick the owner.
    pub fn notify(&self) -> bool {
        // AcqRel: Release publishes the message pushed before this swap to the owner's Acquire
        // swap; Acquire orders the kick after seeing PARKED.
        self.state.swap(NOTIFIED, Ordering::AcqRel) == PARKED
    }

    /// Owner, before draining the inbox.
    pub fn begin(&self) -> Found {
        // AcqRel: Acquire makes every message announced before this swap visible to the drain.
        match self.state.swap(EMPTY, Ordering::AcqRel) {
            NOTIFIED => Found::Notified,
            PARKED => Found::Parked,
            _ => Found::Quiet,
        }
    }

    /// Owner, after draining: true if it may block (producers will kick); false if a message was
    /// announced since `begin` and it must turn again.
    pub fn park(&self) -> bool {
        // AcqRel: same single-word total order argument; on failure the next `begin` acquires.
        self.state
            .compare_exchange(EMPTY, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Owner: true if the word says parked (for assertions and stats).
    pub fn is_parked(&self) -> bool {
        // Relaxed: informational.
        self.state.load(Ordering::Relaxed) == PARKED
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_first_notify_after_park_kicks() {
        let w = Wake::new();
        assert_eq!(w.begin(), Found::Quiet);
        assert!(w.park());
        assert!(w.notify());
        assert!(!w.notify());
        assert_eq!(w.begin(), Found::Notified);
    }

    #[test]
    fn notify_between_drain_and_park_prevents_blocking() {
        let w = Wake::new();
        w.begin();
        assert!(!w.notify(), "owner awake: no kick");
        assert!(!w.park(), "must not block with an announced message");
        assert_eq!(w.begin(), Found::Notified);
        assert!(w.park());
        assert_eq!(w.begin(), Found::Parked);
    }
}

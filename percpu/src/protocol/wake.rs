//! Waking a parked owner without a syscall per message.
//!
//! One word per base, four values: `EMPTY` (owner awake, nothing announced), `NOTIFIED` (a
//! producer announced a notice since the owner last looked), `PARKED` (the owner took its notices
//! and may be blocked in the kernel), `CLOSED` (the base is gone; terminal).
//!
//! - Producer, after pushing its message: CAS the word to `NOTIFIED` (a loop that never leaves
//!   `CLOSED`). Only if it read `PARKED` does it kick the owner (writes the eventfd). Every later
//!   producer reads `NOTIFIED` and makes no syscall. If it reads `CLOSED`, the owner will never
//!   look again, and the producer must undo or drain what it pushed.
//! - Owner, when its base is dropped: `swap(CLOSED)`, then drain. A producer whose notify comes
//!   before the close in the word's order pushed before the owner's drain, which sees it; one
//!   whose notify comes after reads `CLOSED`.
//! - Owner, at the start of a turn: `swap(EMPTY)`, then take the notices.
//! - A base's word starts at `PARKED` ([`Wake::parked`]): its owner may block on the fd before
//!   its first turn (an outer loop that waits for readiness first), so the first message must
//!   kick. The owner's own record starts as "parked" too, so that kick is counted as owed.
//! - Owner, before blocking: `CAS(EMPTY → PARKED)`. If it fails, a producer announced a message
//!   after the drain: do not block.
//!
//! Why no wake-up is lost: every operation is a read-modify-write of the same word, so they form
//! one total order and each reads the value just before it. Take a notice pushed before its
//! producer's notify. If that notify comes before the owner's `swap(EMPTY)`, the owner's swap
//! reads it (or a later RMW in its release sequence) with Acquire, so the take sees the notice. If
//! it comes between `swap(EMPTY)` and the CAS, the CAS finds `NOTIFIED` and the owner does not
//! block. If it comes after the CAS, it reads `PARKED` and kicks. This is the Dekker pattern ("I
//! set my flag, then look at yours") done on a single location, which loom checks exactly; a
//! version with two locations would need SeqCst fences, which loom models only approximately.
//!
//! Batches: only the producer whose push found the notice stack empty notifies. A later push
//! found the stack non-empty, so it came before the owner's next take, which collects it; and the
//! producer that started the batch has notified, or will, after its own push, so that take
//! happens.
//!
//! Cost: one uncontended RMW per turn for the owner; one RMW per batch of notices for producers;
//! at most one eventfd write per park.

use crate::sync::{AtomicUsize, Ordering};

const EMPTY: usize = 0;
const NOTIFIED: usize = 1;
const PARKED: usize = 2;
const CLOSED: usize = 3;

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

/// What a producer's `notify` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// The owner is awake or already notified: nothing more to do.
    Done,
    /// The owner had parked: the caller must kick it (write its eventfd).
    Kick,
    /// The base is closed: nobody will take the message.
    Closed,
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

    /// Owner parked, nothing announced: the first producer kicks. A new base's word, since its
    /// owner may wait on the fd before it ever turned.
    pub fn parked() -> Self {
        Self {
            state: AtomicUsize::new(PARKED),
        }
    }

    /// Producer, after its message is in the queue. See [`Notify`].
    pub fn notify(&self) -> Notify {
        // Relaxed: a starting guess for the CAS.
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            if cur == CLOSED {
                return Notify::Closed;
            }
            // AcqRel: Release publishes the message pushed before this RMW to the owner's Acquire
            // swap; Acquire orders the kick (or the drain, on CLOSED) after what the owner did.
            match self.state.compare_exchange_weak(
                cur,
                NOTIFIED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(PARKED) => return Notify::Kick,
                Ok(_) => return Notify::Done,
                Err(now) => cur = now,
            }
        }
    }

    /// Owner, when the base goes away: no producer's message will be taken by the owner after
    /// this (producers that notify later read `CLOSED`).
    pub fn close(&self) {
        // AcqRel: Acquire makes every message announced before the close visible to the owner's
        // final drain; Release pairs with producers that read CLOSED.
        self.state.swap(CLOSED, Ordering::AcqRel);
    }

    /// Owner, before taking its notices.
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

    /// True once the base is closed (Relaxed: a hint for choosing an error; the definite answer
    /// is the one `notify` gives).
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Relaxed) == CLOSED
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
        assert_eq!(w.notify(), Notify::Kick);
        assert_eq!(w.notify(), Notify::Done);
        assert_eq!(w.begin(), Found::Notified);
    }

    #[test]
    fn notify_between_drain_and_park_prevents_blocking() {
        let w = Wake::new();
        w.begin();
        assert_eq!(w.notify(), Notify::Done, "owner awake: no kick");
        assert!(!w.park(), "must not block with an announced message");
        assert_eq!(w.begin(), Found::Notified);
        assert!(w.park());
        assert_eq!(w.begin(), Found::Parked);
    }

    #[test]
    fn a_new_base_word_kicks_before_the_first_turn() {
        let w = Wake::parked();
        assert_eq!(w.notify(), Notify::Kick);
        assert_eq!(w.notify(), Notify::Done);
        assert_eq!(w.begin(), Found::Notified);
    }

    #[test]
    fn closed_is_terminal_for_producers() {
        let w = Wake::new();
        assert!(w.park());
        w.close();
        assert_eq!(w.notify(), Notify::Closed);
        assert_eq!(w.notify(), Notify::Closed);
    }
}

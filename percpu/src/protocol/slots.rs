//! The shared slot table: who may change a timer's state, and how races are decided.
//!
//! Each slot is one `AtomicU64` word = `generation << 2 | state`. A [`crate::Handle`] carries the
//! generation it was issued with, so a handle only ever matches the one arming of the slot it was
//! made for: after the slot is freed the generation moves on and every old handle misses.
//!
//! | transition                      | by                          | operation              |
//! |---------------------------------|-----------------------------|------------------------|
//! | `FREE(g)` → `PENDING(g)`        | the thread holding the slot | store ([`SlotTable::arm`]) |
//! | `PENDING(g)` → `FREE(g)`        | same, before the handle escapes | store ([`SlotTable::unarm`]) |
//! | `PENDING(g)` → `CANCELLED(g)`   | any thread                  | CAS ([`SlotTable::cancel`]) |
//! | `PENDING(g)` → `FREE(g+1)`      | owner (fire, own cancel)    | CAS ([`SlotTable::retire`]) |
//! | `CANCELLED(g)` → `FREE(g+1)`    | owner                       | store ([`SlotTable::reclaim`]) |
//!
//! "Holding" a free slot means having taken it from the owner's private free list or from the
//! shared free ring: exactly one thread holds it, and nobody else writes a FREE word (a stale
//! cancel only ever compares against PENDING). CANCELLED is terminal for everyone but the owner.
//! So the only contested word is PENDING(g), and both contenders use a CAS: exactly one wins.
//!
//! Orderings: every access is Relaxed. The race is decided by the modification order of this one
//! word, and no other memory is published through it: the payload never leaves the owner, and a
//! slot's hand-over between threads goes through a queue, whose Release/Acquire carries the word's
//! latest value along.
//!
//! Given up: generations are 32 bits, so a handle kept across 2^32 re-uses of its slot could match
//! again. At one re-use per microsecond that is over an hour of one slot's life.

use crate::sync::{AtomicU64, Ordering};

/// The state part of a slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not armed; held by a free list or by the thread about to arm it.
    Free,
    /// Armed; will fire unless a cancel wins.
    Pending,
    /// A cancel won; the owner has yet to reclaim the slot.
    Cancelled,
}

const STATE_BITS: u32 = 2;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

fn state_code(state: State) -> u64 {
    match state {
        State::Free => 0,
        State::Pending => 1,
        State::Cancelled => 2,
    }
}

/// Packs a generation and a state into one word.
pub fn pack(generation: u32, state: State) -> u64 {
    (u64::from(generation) << STATE_BITS) | state_code(state)
}

/// Splits a word into (generation, state).
pub fn unpack(word: u64) -> (u32, State) {
    let state = match word & STATE_MASK {
        0 => State::Free,
        1 => State::Pending,
        2 => State::Cancelled,
        other => unreachable!("corrupt slot word {word:#x} (state {other})"),
    };
    ((word >> STATE_BITS) as u32, state)
}

/// One base's slot words.
#[derive(Debug)]
pub struct SlotTable {
    words: Box<[AtomicU64]>,
}

impl SlotTable {
    /// A table of `len` free slots, all at generation 0.
    pub fn new(len: usize) -> Self {
        Self {
            words: zeroed_words(len),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True if the table has no slots.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The slot's current (generation, state).
    pub fn load(&self, slot: u32) -> (u32, State) {
        // Relaxed: see the module doc; callers that need a fresh value use a CAS.
        unpack(self.words[slot as usize].load(Ordering::Relaxed))
    }

    /// Arms a slot the caller holds: `FREE(g)` → `PENDING(g)`; returns `g` for the handle.
    pub fn arm(&self, slot: u32) -> u32 {
        let word = &self.words[slot as usize];
        // Relaxed: the holder received the slot through a queue (Acquire) or freed it itself, so
        // it sees the latest FREE word; nobody else writes a FREE word.
        let (generation, state) = unpack(word.load(Ordering::Relaxed));
        debug_assert_eq!(state, State::Free, "arming slot {slot} in state {state:?}");
        // Relaxed: the handle reaches other threads only through a synchronising channel.
        word.store(pack(generation, State::Pending), Ordering::Relaxed);
        generation
    }

    /// Undoes [`SlotTable::arm`] before any handle escaped: `PENDING(g)` → `FREE(g)`.
    pub fn unarm(&self, slot: u32, generation: u32) {
        let word = &self.words[slot as usize];
        debug_assert_eq!(
            unpack(word.load(Ordering::Relaxed)),
            (generation, State::Pending)
        );
        // Relaxed: nobody else knows generation `g` yet, so nobody else can change this word.
        word.store(pack(generation, State::Free), Ordering::Relaxed);
    }

    /// Any thread: `PENDING(g)` → `CANCELLED(g)`. True iff this call won, i.e. the timer will
    /// never fire; false if it fired, is firing, was cancelled, or `g` is stale.
    pub fn cancel(&self, slot: u32, generation: u32) -> bool {
        let Some(word) = self.words.get(slot as usize) else {
            return false;
        };
        let from = pack(generation, State::Pending);
        let to = pack(generation, State::Cancelled);
        // Relaxed: the single word's modification order decides the race with fire.
        word.compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Owner only, for a slot in its wheel: `PENDING(g)` → `FREE(g+1)` (fire or own cancel).
    /// On failure returns the state found (CANCELLED(g) if a cancel won; the owner then reclaims).
    pub fn retire(&self, slot: u32, generation: u32) -> Result<(), State> {
        let from = pack(generation, State::Pending);
        let to = pack(generation.wrapping_add(1), State::Free);
        // Relaxed: as in `cancel`; the loser learns the winner from the value returned.
        self.words[slot as usize]
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|found| unpack(found).1)
    }

    /// Owner only: `CANCELLED(g)` → `FREE(g+1)` once the wheel entry (if any) is gone.
    pub fn reclaim(&self, slot: u32, generation: u32) {
        let word = &self.words[slot as usize];
        debug_assert_eq!(
            unpack(word.load(Ordering::Relaxed)),
            (generation, State::Cancelled),
            "reclaiming slot {slot}"
        );
        // Relaxed: CANCELLED is terminal for every thread but the owner, so a store cannot lose
        // an update; the slot reaches its next holder through a queue (Release/Acquire).
        word.store(
            pack(generation.wrapping_add(1), State::Free),
            Ordering::Relaxed,
        );
    }
}

/// `len` words of zero, allocated zeroed so an untouched part of a large table costs no memory.
#[cfg(not(loom))]
fn zeroed_words(len: usize) -> Box<[AtomicU64]> {
    const _: () = assert!(std::mem::align_of::<u64>() == std::mem::align_of::<AtomicU64>());
    let zeros: Box<[u64]> = vec![0u64; len].into_boxed_slice();
    // SAFETY: `AtomicU64` has the same size and bit validity as `u64` (std documents this), and
    // the assertion above makes their alignment equal, so the slice can be reinterpreted; the
    // allocation's layout is unchanged, so the box frees it correctly.
    unsafe { Box::from_raw(Box::into_raw(zeros) as *mut [AtomicU64]) }
}

#[cfg(loom)]
fn zeroed_words(len: usize) -> Box<[AtomicU64]> {
    (0..len).map(|_| AtomicU64::new(0)).collect()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips() {
        for g in [0, 1, 7, u32::MAX] {
            for s in [State::Free, State::Pending, State::Cancelled] {
                assert_eq!(unpack(pack(g, s)), (g, s));
            }
        }
    }

    #[test]
    fn cancel_then_fire_loses_fire() {
        let t = SlotTable::new(4);
        let g = t.arm(2);
        assert!(t.cancel(2, g));
        assert!(!t.cancel(2, g), "second cancel must lose");
        assert_eq!(t.retire(2, g), Err(State::Cancelled));
        t.reclaim(2, g);
        assert_eq!(t.load(2), (g + 1, State::Free));
    }

    #[test]
    fn fire_then_cancel_loses_cancel_and_stale_handle_misses() {
        let t = SlotTable::new(1);
        let g = t.arm(0);
        assert_eq!(t.retire(0, g), Ok(()));
        assert!(!t.cancel(0, g));
        let g2 = t.arm(0);
        assert_ne!(g, g2);
        assert!(
            !t.cancel(0, g),
            "stale generation must not cancel the new arming"
        );
        assert_eq!(t.load(0), (g2, State::Pending));
    }

    #[test]
    fn out_of_range_cancel_is_false() {
        assert!(!SlotTable::new(1).cancel(5, 0));
    }

    #[test]
    fn generation_wraps() {
        let t = SlotTable::new(1);
        t.words[0].store(pack(u32::MAX, State::Free), Ordering::Relaxed);
        let g = t.arm(0);
        assert_eq!(t.retire(0, g), Ok(()));
        assert_eq!(t.load(0), (0, State::Free));
    }
}

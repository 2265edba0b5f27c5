//! Timer handles: (set, base, slot, generation), 16 bytes, `Copy`.
//!
//! The generation makes a handle name one arming of a slot only (see `protocol::slots`). The set
//! tag tells handles of different [`crate::bases`] calls apart, so a foreign handle never
//! matches a timer of another set. Tags are 32 bits: a handle could match a timer of another set
//! only if the process made 2^32 sets (one `bases` call each) while it was kept, which at a
//! microsecond a call is over an hour of nothing else.
//!
//! Why not 8 bytes: slot and generation alone fill a word (a base holds up to [`crate::MAX_SLOTS`]
//! timers, and 32 generation bits keep a stale handle from matching until its slot has been
//! reused 2^32 times). Fitting the base index and the set in as well would cap a base's slots, or
//! shorten the generation, or make the foreign-handle check a matter of chance (a per-set random
//! generation offset). What it would buy was measured on the keepalive benchmark at 10^5 timers
//! (BENCHMARKS.md, the per-core section): the table of 16-byte handles costs 0.05 of an L2 miss a
//! refresh more than a table of 8-byte ids, against 0.76 for the timer's record itself.

use std::sync::atomic::{AtomicU32, Ordering};

/// Names one scheduled timer. Stale handles (fired, cancelled, slot reused) match nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) base: u16,
    pub(crate) set: u32,
}

impl Handle {
    /// Index of the base the timer lives on.
    pub fn base(&self) -> usize {
        usize::from(self.base)
    }
}

/// A fresh tag for a new set of bases.
pub(crate) fn next_set_tag() -> u32 {
    // A process-wide counter used once per `bases()` call, not part of any cross-core protocol,
    // hence std's atomic. Relaxed: only uniqueness matters.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn handle_is_small_and_tags_differ() {
        assert_eq!(std::mem::size_of::<Handle>(), 16);
        assert_ne!(next_set_tag(), next_set_tag());
    }
}

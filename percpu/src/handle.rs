//! Timer handles: (set, base, slot, generation), 16 bytes, `Copy`.
//!
//! The generation makes a handle name one arming of a slot only (see `protocol::slots`). The set
//! tag tells handles of different [`crate::bases`] calls apart, so a foreign handle never
//! matches a timer of another set. Tags are 32 bits: a handle could match a timer of another set
//! only if the process made 2^32 sets (one `bases` call each) while it was kept, which at a
//! microsecond a call is over an hour of nothing else.

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

//! Timer handles: (set, base, slot, generation), 12 bytes, `Copy`.
//!
//! The generation makes a handle name one arming of a slot only (see `protocol::slots`). The set
//! tag tells handles of different [`crate::bases`] calls apart, so a foreign handle never
//! matches a timer of another set (tags are 16 bits and wrap after 65,536 sets).

use std::sync::atomic::{AtomicU32, Ordering};

/// Names one scheduled timer. Stale handles (fired, cancelled, slot reused) match nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
    pub(crate) base: u16,
    pub(crate) set: u16,
}

impl Handle {
    /// Index of the base the timer lives on.
    pub fn base(&self) -> usize {
        usize::from(self.base)
    }
}

/// A fresh tag for a new set of bases.
pub(crate) fn next_set_tag() -> u16 {
    // A process-wide counter used once per `bases()` call, not part of any cross-core protocol,
    // hence std's atomic. Relaxed: only uniqueness matters.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) as u16
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn handle_is_small_and_tags_differ() {
        assert_eq!(std::mem::size_of::<Handle>(), 12);
        assert_ne!(next_set_tag(), next_set_tag());
    }
}

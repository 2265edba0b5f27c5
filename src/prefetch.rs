//! The crate's one `unsafe` operation: a hint that a timer's entry will be read soon.
//!
//! ## Model
//! When Exact mode starts handing out a tick's timers from the run (`batches.rs`), their indices
//! sit in an array, but each entry is a random line of the slab, and the hand-out reads one entry
//! after the other with a couple of hundred instructions between: the processor overlaps only the
//! few misses its reorder window reaches. Naming every entry of the tick before the first is
//! read lets those misses overlap. A list walk cannot do this (the next index is in the entry
//! that misses), which is why only the run prefetches.
//!
//! ## Invariants
//! - A prefetch is a hint: it reads nothing the program sees, writes nothing, and cannot fault,
//!   so it needs no invariant of the memory it names; it is given a live reference anyway.
//! - Behaviour never depends on it: off x86-64 it is nothing, and the tests pass either way.
//!
//! ## Given up
//! - A few instructions a fired timer (the second walk of the tick's chain, in the array), paid
//!   when the entries are already cached too.

/// Asks the processor to start loading the line that holds `value` into its caches.
#[inline(always)]
pub(crate) fn prefetch_read<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 processor has; it only hints the
    // cache, does not access memory architecturally and cannot fault, and `value` is live.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

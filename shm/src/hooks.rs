//! A kill or a stop at any store: every write the protocol makes to a set's shared words (a
//! store, a CAS or another read-modify-write, counted whether it succeeds or not) first passes a
//! numbered store point. With feature `test-hooks`, [`kill_before_store`] makes the calling
//! process `SIGKILL` itself at the `n`-th point it passes from then on, so a test can kill a
//! process before (equivalently, after the one before) every single shared write in turn, as
//! SQLite's and FoundationDB's crash tests do; [`stop_before_store`] makes it `SIGSTOP` itself
//! there instead, so a test can check what a stalled process holds up, then `SIGCONT` it. Without
//! the feature a store point is an empty inline function.
//!
//! The counter is process-wide (all threads count), in std atomics rather than the `sync` shim:
//! it is test instrumentation, not part of the protocol, and loom models never arm it.

#[cfg(feature = "test-hooks")]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "test-hooks")]
static PASSED: AtomicU64 = AtomicU64::new(0);
/// 0: disarmed.
#[cfg(feature = "test-hooks")]
static KILL_AT: AtomicU64 = AtomicU64::new(0);
/// 0: disarmed.
#[cfg(feature = "test-hooks")]
static STOP_AT: AtomicU64 = AtomicU64::new(0);

/// Passed before each write to the mapping.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn store_point() {}

/// Passed before each write to the mapping: counts it, and kills or stops the process at the
/// armed one.
#[cfg(feature = "test-hooks")]
#[inline]
pub(crate) fn store_point() {
    // Relaxed: a counter private to this process's tests; it orders nothing.
    let n = PASSED.fetch_add(1, Ordering::Relaxed) + 1;
    if n == KILL_AT.load(Ordering::Relaxed) {
        // SAFETY: signals this very process; SIGKILL cannot be caught, so nothing runs after.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    if n == STOP_AT.load(Ordering::Relaxed) {
        // SAFETY: signals this very process; SIGSTOP stops every thread of it until SIGCONT, and
        // the store then goes ahead.
        unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
    }
}

/// Restarts the count at zero and kills this process just before its `n`-th store to any set's
/// mapping from now on (`0`: never). A process made by `fork` inherits the count: arm it there.
#[cfg(feature = "test-hooks")]
pub fn kill_before_store(n: u64) {
    // Relaxed: as in `store_point`; the caller arms before the operations it means to stop.
    PASSED.store(0, Ordering::Relaxed);
    STOP_AT.store(0, Ordering::Relaxed);
    KILL_AT.store(n, Ordering::Relaxed);
}

/// Restarts the count at zero and stops this process (`SIGSTOP`) just before its `n`-th store to
/// any set's mapping from now on (`0`: never); after `SIGCONT` it makes that store and goes on.
#[cfg(feature = "test-hooks")]
pub fn stop_before_store(n: u64) {
    // Relaxed: as in `kill_before_store`.
    PASSED.store(0, Ordering::Relaxed);
    KILL_AT.store(0, Ordering::Relaxed);
    STOP_AT.store(n, Ordering::Relaxed);
}

/// Store points passed since the last [`kill_before_store`].
#[cfg(feature = "test-hooks")]
pub fn stores() -> u64 {
    // Relaxed: as in `store_point`.
    PASSED.load(Ordering::Relaxed)
}

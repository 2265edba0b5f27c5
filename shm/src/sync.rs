//! The one place concurrency primitives come from.
//!
//! Every word of a set is one of these atomics. A normal build gets `std`; a build with
//! `RUSTFLAGS="--cfg loom"` gets loom's instrumented twins, so the model checker sees every access
//! to the set's words. The switch is `cfg(loom)`, not `cfg(test)`, so the separate `loom-tests`
//! crate can build this crate under loom.

#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};

#[cfg(not(loom))]
pub(crate) use std::sync::Arc;
// `AtomicBool` is the owner's wake thread's stop flag; loom builds have no such thread.
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// Lets the thread that must move next run while this one waits for it: the OS scheduler's
/// `yield`, or under loom a switch the model checker explores.
#[cfg(loom)]
pub(crate) fn yield_now() {
    loom::thread::yield_now();
}

/// Lets the thread that must move next run while this one waits for it: the OS scheduler's
/// `yield`, or under loom a switch the model checker explores.
#[cfg(not(loom))]
pub(crate) fn yield_now() {
    std::thread::yield_now();
}

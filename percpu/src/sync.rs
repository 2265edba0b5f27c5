//! The one place concurrency primitives come from.
//!
//! Everything that crosses cores (slot words, queue cells, wake flag, shared counters) is built on
//! these names. A normal build gets `std`; a build with `RUSTFLAGS="--cfg loom"` gets loom's
//! instrumented twins, so the model checker sees every atomic access and every cell access. The
//! switch is `cfg(loom)`, not `cfg(test)`, so the separate `loom-tests` crate can build this crate
//! under loom.
//!
//! `UnsafeCell` follows loom's closure API (`with`, `with_mut`) in both worlds, so the code that
//! reads a queue cell is the same code the model checker runs.

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// `std::cell::UnsafeCell` with loom's closure-style accessors.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    #[allow(
        dead_code,
        reason = "loom-compatible API; the queue only writes through with_mut"
    )]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

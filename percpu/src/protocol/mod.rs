//! The cross-core protocol, free of syscalls so loom can run it.
//!
//! - [`slots`]: the shared slot table, one `AtomicU64` word per timer slot, packing (generation,
//!   state); its transitions decide every race between cancel and fire.
//! - [`wake`]: the owner's park flag and the producers' notify, which together guarantee that a
//!   message pushed while the owner is about to sleep wakes it, with no syscall while it is busy.
//! - The queues are [`crate::mpsc::Queue`].
//!
//! The ground rules are in the crate documentation. This module is public only for the model
//! checker and the benches; it is not part of the stable API.

pub mod slots;
pub mod wake;

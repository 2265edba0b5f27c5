//! The cross-core protocol, free of syscalls so loom can run it.
//!
//! - [`slots`]: the shared slot table, one record per timer slot whose word (generation, seq,
//!   flags, state) decides every race between cancel, re-arm and fire.
//! - [`stack`]: the reserve of free slots for remote schedulers and the notice stack through which
//!   the owner learns of remote schedules, cancels and earlier re-arms; neither can be full.
//! - [`wake`]: the owner's park flag and the producers' notify, which together guarantee that a
//!   notice pushed while the owner is about to sleep wakes it, with no syscall while it is busy.
//! - [`waker`]: the async layer's register / wake handshake between a polling task and the thread
//!   that fires its timer, in two bits of a word whose other bits are left to its user.
//! - [`cell`]: the async layer's per-sleep cells: deliver vs let go vs re-arm, each cell freed
//!   once by whichever side lets go last, and the stack of cells freed off the base's thread.
//!
//! The ground rules are in the crate documentation. This module is public only for the model
//! checker and the benches; it is not part of the stable API.

pub mod cell;
pub mod slots;
pub mod stack;
pub mod wake;
pub mod waker;

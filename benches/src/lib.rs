//! Side-by-side benchmarks of tickwheel against the timer structures people usually reach for.
//!
//! # Model
//! Every structure sits behind one trait, [`Timers`], whose clock is a `u64` tick (1 tick = 1 ms,
//! the resolution of tokio's `DelayQueue` and of Kompact's wheel). Every workload in [`workload`] is
//! generic over that trait and draws its inputs from one seeded [`rng::SplitMix64`], so each
//! structure sees the same deadlines, the same victims and the same clock steps. The value of a
//! timer is a `u64`; the workloads add up the fired and cancelled values into a checksum, and the
//! runner insists that every structure reports the same checksum for the same workload, so a
//! structure cannot look fast by doing less.
//!
//! # What was given up
//! Wall time on a shared two-core machine is noisy: the runner takes the median of several
//! repetitions and compares structures only as ratios taken in the same run. Adapters cost one
//! call through a generic trait, which the compiler inlines away in release builds.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod asynk;
pub mod calendar;
pub mod mem;
pub mod peers;
pub mod percore;
pub mod report;
pub mod rng;
pub mod shm;
pub mod workload;

pub use peers::{Kind, Timers};

/// The workspace README's examples, compiled and run as doc-tests (this crate depends on both
/// library crates) so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadmeDoctests;

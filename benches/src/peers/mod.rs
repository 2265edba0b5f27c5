//! One adapter per timer structure, all behind [`Timers`], so every workload runs unchanged on each.
//!
//! The trait is the smallest surface a keepalive-heavy server needs: arm, cancel, re-arm, move the
//! clock forward while collecting what fired, and ask when to wake next. Ids are whatever each
//! structure hands out; a re-arm may change the id (the heap and the ordered map key timers by
//! deadline), so [`Timers::reset`] takes it by `&mut`.

mod btree;
mod delay_queue;
mod heap;
mod kompact;
mod tick;
#[cfg(timeout_c)]
mod timeout_c;

pub use btree::BTreeTimers;
pub use delay_queue::TokioDelayQueue;
pub use heap::LazyHeap;
pub use kompact::KompactWheel;
pub use tick::TickWheel;
#[cfg(timeout_c)]
pub use timeout_c::TimeoutC;

pub use crate::calendar::CalendarQueue;

/// A timer structure driven by a `u64` tick clock that only moves forward.
pub trait Timers {
    /// Names one armed timer.
    type Id: Copy;

    /// Arms a timer that fires once the clock reaches `deadline` (which is later than now).
    fn insert(&mut self, deadline: u64, value: u64) -> Self::Id;

    /// Disarms `id`, handing back its value, or `None` if it already fired or was cancelled.
    fn cancel(&mut self, id: Self::Id) -> Option<u64>;

    /// Moves armed timer `id` to `deadline`; `false` if it is not armed. May rewrite `id`.
    fn reset(&mut self, id: &mut Self::Id, deadline: u64) -> bool;

    /// Moves the clock to `now` and passes the value of every timer due by then to `fired`.
    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64));

    /// A tick at or before the earliest pending expiry, later than the clock; `None` if empty.
    fn next_expiry(&mut self) -> Option<u64>;

    /// Number of armed timers.
    fn len(&self) -> usize;

    /// `true` when no timer is armed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Readies the structure for `n` timers before any clock starts, as far as its API lets a
    /// user who knows the load do so: C's `timeout.c` initialises the nodes its caller's objects
    /// hold (they exist before their timers), tickwheel creates its entries
    /// (`Wheel::reserve`), the lazy heap reserves its vectors (`Vec::reserve`: address space, its
    /// pages still touched as it arms). `BTreeMap`, `DelayQueue` and kompact's wheel have no
    /// such call and do nothing here.
    fn prepare(&mut self, n: usize) {
        let _ = n;
    }

    /// Runs `f` with whatever ambient context the structure needs (tokio's runtime for
    /// `DelayQueue`); entering it once per measured phase keeps that cost out of each operation.
    fn scope<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R
    where
        Self: Sized,
    {
        f(self)
    }
}

/// The structures compared, in the order the tables list them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// tickwheel, exact mode (cascading hierarchical wheel).
    TickExact,
    /// tickwheel, coarse mode (Linux timer_list style, no cascading).
    TickCoarse,
    /// tickwheel, exact mode, bounded (`Builder::capacity`), so its entries are one buffer.
    TickExactBounded,
    /// tickwheel, coarse mode, bounded.
    TickCoarseBounded,
    /// `std::collections::BinaryHeap` with a generation array for lazy cancel.
    LazyHeap,
    /// `std::collections::BTreeMap` keyed by (deadline, sequence), exact removal.
    BTree,
    /// Brown's calendar queue with resizing buckets.
    Calendar,
    /// tokio-util `DelayQueue` on a paused current-thread runtime.
    DelayQueue,
    /// `hierarchical_hash_wheel_timer`'s cancellable four-level wheel (Kompact).
    Kompact,
    /// C's `timeout.c`, its nodes in one array; only in [`Kind::ALL`] when built with
    /// `TICKWHEEL_TIMEOUT_C` (see `build.rs`).
    TimeoutC,
}

impl Kind {
    /// Every structure this build has, table order.
    pub const ALL: &'static [Kind] = &[
        Kind::TickExact,
        Kind::TickCoarse,
        Kind::TickExactBounded,
        Kind::TickCoarseBounded,
        Kind::LazyHeap,
        Kind::BTree,
        Kind::Calendar,
        Kind::DelayQueue,
        Kind::Kompact,
        #[cfg(timeout_c)]
        Kind::TimeoutC,
    ];

    /// Short stable name used in tables, CSV files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::TickExact => "tickwheel-exact",
            Kind::TickCoarse => "tickwheel-coarse",
            Kind::TickExactBounded => "tickwheel-exact-bounded",
            Kind::TickCoarseBounded => "tickwheel-coarse-bounded",
            Kind::LazyHeap => "lazy-heap",
            Kind::BTree => "btreemap",
            Kind::Calendar => "calendar",
            Kind::DelayQueue => "delayqueue",
            Kind::Kompact => "kompact-wheel",
            Kind::TimeoutC => "timeout-c",
        }
    }

    /// The kind named `name`, as printed by [`Kind::name`].
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// Runs `$body` with `$q` bound to a fresh, empty structure of kind `$kind`, monomorphised per
/// structure so no dynamic dispatch sits in the measured loops.
#[macro_export]
macro_rules! with_timers {
    ($kind:expr, |$q:ident| $body:expr) => {
        match $kind {
            $crate::Kind::TickExact => {
                let $q = || $crate::peers::TickWheel::new(tickwheel::Mode::Exact);
                $body
            }
            $crate::Kind::TickCoarse => {
                let $q = || $crate::peers::TickWheel::new(tickwheel::Mode::Coarse);
                $body
            }
            $crate::Kind::TickExactBounded => {
                let $q = || $crate::peers::TickWheel::bounded(tickwheel::Mode::Exact);
                $body
            }
            $crate::Kind::TickCoarseBounded => {
                let $q = || $crate::peers::TickWheel::bounded(tickwheel::Mode::Coarse);
                $body
            }
            $crate::Kind::LazyHeap => {
                let $q = $crate::peers::LazyHeap::new;
                $body
            }
            $crate::Kind::BTree => {
                let $q = $crate::peers::BTreeTimers::new;
                $body
            }
            $crate::Kind::Calendar => {
                let $q = $crate::peers::CalendarQueue::<u64>::new;
                $body
            }
            $crate::Kind::DelayQueue => {
                let $q = $crate::peers::TokioDelayQueue::new;
                $body
            }
            $crate::Kind::Kompact => {
                let $q = $crate::peers::KompactWheel::new;
                $body
            }
            #[cfg(timeout_c)]
            $crate::Kind::TimeoutC => {
                let $q = $crate::peers::TimeoutC::new;
                $body
            }
            #[cfg(not(timeout_c))]
            $crate::Kind::TimeoutC => {
                unreachable!("timeout-c is not in Kind::ALL without TICKWHEEL_TIMEOUT_C")
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::collections::BTreeMap;

    /// Drives one structure through random arms, cancels, re-arms and clock steps, checking every
    /// answer against a naive model (a map from a private key to deadline and value).
    fn check_against_model<Q: Timers>(mut q: Q, seed: u64, exact: bool, name: &str) {
        let mut rng = SplitMix64::new(seed);
        let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new(); // key -> (deadline, value)
        let mut ids: Vec<(u64, Q::Id)> = Vec::new();
        let mut now = 0u64;
        let mut next_key = 0u64;
        q.scope(|q| {
            for _ in 0..20_000 {
                match rng.below(10) {
                    0..=3 => {
                        let deadline = now + rng.between(1, 5_000);
                        let id = q.insert(deadline, next_key);
                        model.insert(next_key, (deadline, next_key));
                        ids.push((next_key, id));
                        next_key += 1;
                    }
                    4 | 5 if !ids.is_empty() => {
                        let at = rng.below(ids.len() as u64) as usize;
                        let (key, id) = ids.swap_remove(at);
                        assert_eq!(q.cancel(id), model.remove(&key).map(|(_, v)| v));
                    }
                    6 | 7 if !ids.is_empty() => {
                        let at = rng.below(ids.len() as u64) as usize;
                        let deadline = now + rng.between(1, 5_000);
                        let (key, id) = &mut ids[at];
                        assert!(q.reset(id, deadline));
                        model.get_mut(key).expect("armed in the model").0 = deadline;
                    }
                    _ => {
                        if let Some(next) = q.next_expiry() {
                            let earliest = model.values().map(|&(d, _)| d).min();
                            let earliest =
                                earliest.unwrap_or_else(|| panic!("{name}: expiry but empty"));
                            // A coarse wheel's expiry is its deadline rounded up, which the model
                            // does not know; exact structures must not sleep past a deadline.
                            assert!(
                                next > now && (!exact || next <= earliest),
                                "{name}: {next} vs {earliest}"
                            );
                        } else {
                            assert!(model.is_empty());
                        }
                        now += rng.between(1, 600);
                        let mut fired = Vec::new();
                        q.advance(now, &mut |v| fired.push(v));
                        fired.sort_unstable();
                        let mut due: Vec<u64> = model
                            .iter()
                            .filter(|(_, (d, _))| *d <= now)
                            .map(|(k, _)| *k)
                            .collect();
                        due.sort_unstable();
                        // A coarse wheel may fire later than the deadline, never earlier.
                        for v in &fired {
                            let (d, _) = model.remove(v).expect("fired a timer twice or unknown");
                            assert!(d <= now, "fired {v} at {now}, deadline {d}");
                        }
                        if exact {
                            assert_eq!(fired, due, "{name} at {now}");
                        } else if fired.len() < due.len() {
                            assert!(q.next_expiry().is_some());
                        }
                        ids.retain(|(k, _)| model.contains_key(k));
                    }
                }
                assert_eq!(q.len(), model.len(), "{name}");
            }
        });
    }

    #[test]
    fn every_peer_matches_the_model() {
        for &kind in Kind::ALL {
            with_timers!(kind, |make| check_against_model(
                make(),
                42,
                !matches!(kind, Kind::TickCoarse | Kind::TickCoarseBounded),
                kind.name()
            ));
        }
    }

    #[test]
    fn kind_names_round_trip() {
        for &kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::from_name("nope"), None);
    }
}

//! Whole-run workloads, generic over [`Timers`], each timing one phase on a fresh structure.
//!
//! Inputs (deadlines, victims, clock steps) are drawn before the clock starts, from a seed, so every
//! structure replays the same run; building the starting population and dropping the structure
//! are not timed. Each run returns a checksum of the values it saw fired or cancelled, which must
//! agree across structures.
//!
//! Ticks are milliseconds. Deadlines for insert, cancel, fire and catch-up are uniform over one
//! minute; keepalive timers sit 30 to 60 seconds out and are pushed 30 to 60 seconds past the
//! current tick on each refresh (four refreshes per timer), while the clock moves one tick per
//! [`RESETS_PER_TICK`] refreshes (more in long runs), so no keepalive timer fires during the
//! refresh phase.

use crate::Timers;
use crate::rng::SplitMix64;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Deadlines of the uniform population are drawn from `1..=SPAN` ticks.
pub const SPAN: u64 = 60_000;
/// Keepalive deadlines are `now + KEEP_MIN..=now + KEEP_MAX`.
pub const KEEP_MIN: u64 = 30_000;
/// See [`KEEP_MIN`].
pub const KEEP_MAX: u64 = 60_000;
/// The clock moves one tick per this many refreshes.
pub const RESETS_PER_TICK: usize = 64;
/// `next_expiry` is asked this many times.
pub const QUERIES: usize = 100_000;

/// One measured phase.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Arm `n` timers into an empty structure.
    Insert,
    /// Cancel all `n` armed timers in random order, their ids read in that order.
    Cancel,
    /// Re-arm random armed timers (of `n`) to 30-60 s out while the clock moves forward.
    Reset,
    /// The keepalive refresh: re-arm random armed timers to a fixed idle timeout past now.
    Refresh,
    /// Fire all `n` timers, waking at each `next_expiry` like an event loop.
    Fire,
    /// Ask `next_expiry` repeatedly with `n` armed.
    NextExpiry,
    /// Move the clock past all `n` deadlines in one jump and fire them.
    CatchUp,
}

impl Workload {
    /// Every workload, table order.
    pub const ALL: [Workload; 7] = [
        Workload::Insert,
        Workload::Cancel,
        Workload::Reset,
        Workload::Refresh,
        Workload::Fire,
        Workload::NextExpiry,
        Workload::CatchUp,
    ];

    /// Short stable name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Insert => "insert",
            Workload::Cancel => "cancel",
            Workload::Reset => "reset",
            Workload::Refresh => "refresh",
            Workload::Fire => "fire",
            Workload::NextExpiry => "next_expiry",
            Workload::CatchUp => "catch_up",
        }
    }

    /// What one operation is, for table headers.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::Insert => "ns per insert",
            Workload::Cancel => "ns per cancel",
            Workload::Reset => "ns per reset to 30-60 s out (clock moving)",
            Workload::Refresh => "ns per keepalive refresh to now + 30 s (clock moving)",
            Workload::Fire => "ns per fired timer (stepping)",
            Workload::NextExpiry => "ns per next_expiry",
            Workload::CatchUp => "ns per fired timer (one jump)",
        }
    }

    /// Runs this workload once on a fresh structure from `make`.
    pub fn run<Q: Timers>(self, make: impl Fn() -> Q, n: usize, seed: u64) -> Outcome {
        let make = || {
            let mut q = make();
            q.prepare(n);
            q
        };
        match self {
            Workload::Insert => insert(make(), n, seed),
            Workload::Cancel => cancel(make(), n, seed),
            Workload::Reset => reset(make(), n, seed),
            Workload::Refresh => refresh(make(), n, seed),
            Workload::Fire => fire(make(), n, seed),
            Workload::NextExpiry => next_expiry(make(), n, seed),
            Workload::CatchUp => catch_up(make(), n, seed),
        }
    }
}

/// Result of one timed phase.
#[derive(Copy, Clone, Debug)]
pub struct Outcome {
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// Operations in the phase.
    pub ops: u64,
    /// Wrapping sum of values fired or cancelled (or of answers), equal across structures.
    pub checksum: u64,
}

impl Outcome {
    /// Nanoseconds per operation.
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }
}

/// `n` deadlines uniform in `1..=SPAN`.
pub fn uniform_deadlines(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.between(1, SPAN)).collect()
}

/// `n` deadlines uniform in `KEEP_MIN..=KEEP_MAX`.
pub fn keepalive_deadlines(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.between(KEEP_MIN, KEEP_MAX)).collect()
}

/// Refreshes in a keepalive run over `n` timers: four per timer, so that deferred costs (a lazy
/// heap's dead entries and its rebuilds) are paid inside the run; at least 10^5 for a stable
/// figure, at most 2^22.
pub fn refresh_count(n: usize) -> usize {
    n.saturating_mul(4).clamp(100_000, 1 << 22)
}

/// Refreshes per clock tick for a run of `count`: [`RESETS_PER_TICK`], or more for long runs so
/// that the clock stays below [`KEEP_MIN`] (at most 16,384 ticks) and nothing fires.
pub fn resets_per_tick(count: usize) -> usize {
    count.div_ceil(16_384).max(RESETS_PER_TICK)
}

/// One keepalive refresh: which timer (index into the population) and its new delay.
#[derive(Copy, Clone, Debug)]
pub struct Refresh {
    /// Index of the timer to re-arm.
    pub victim: u32,
    /// New delay from the current tick.
    pub delay: u32,
}

/// A plan of `count` refreshes over `n` timers.
pub fn refresh_plan(n: usize, count: usize, seed: u64) -> Vec<Refresh> {
    let mut rng = SplitMix64::new(seed ^ 0x5eed);
    (0..count)
        .map(|_| Refresh {
            victim: rng.below(n as u64) as u32,
            delay: rng.between(KEEP_MIN, KEEP_MAX) as u32,
        })
        .collect()
}

/// Arms every deadline (value = index) and returns the ids, untimed.
pub fn populate<Q: Timers>(q: &mut Q, deadlines: &[u64]) -> Vec<Q::Id> {
    q.scope(|q| {
        deadlines
            .iter()
            .enumerate()
            .map(|(i, &d)| q.insert(d, i as u64))
            .collect()
    })
}

fn timed<Q: Timers, R>(q: &mut Q, f: impl FnOnce(&mut Q) -> R) -> (Duration, R) {
    q.scope(|q| {
        let start = Instant::now();
        let r = measured_phase(|| f(q));
        (start.elapsed(), r)
    })
}

/// The timed part of every workload, kept out of line so that instruction counts can be limited
/// to it: `valgrind --tool=callgrind --toggle-collect='*measured_phase*' tickwheel-benches ...`.
#[inline(never)]
pub fn measured_phase<R>(f: impl FnOnce() -> R) -> R {
    f()
}

fn insert<Q: Timers>(mut q: Q, n: usize, seed: u64) -> Outcome {
    let deadlines = uniform_deadlines(n, seed);
    let mut ids = Vec::with_capacity(n);
    // The ids' memory written before the clock starts, as a server's connection table is, so the
    // timed loop takes no page faults of the benchmark's own.
    for id in ids.spare_capacity_mut() {
        *id = std::mem::MaybeUninit::zeroed();
    }
    let (elapsed, ()) = timed(&mut q, |q| {
        for (i, &d) in deadlines.iter().enumerate() {
            ids.push(q.insert(d, i as u64));
        }
    });
    assert_eq!(q.len(), n);
    black_box(&ids);
    Outcome {
        elapsed,
        ops: n as u64,
        checksum: deadlines.len() as u64,
    }
}

fn cancel<Q: Timers>(mut q: Q, n: usize, seed: u64) -> Outcome {
    let deadlines = uniform_deadlines(n, seed);
    let ids = populate(&mut q, &deadlines);
    let mut order: Vec<u32> = (0..n as u32).collect();
    SplitMix64::new(seed ^ 0xcace1).shuffle(&mut order);
    // The victims' ids in cancel order, before the clock starts: a server cancels the timer of
    // the connection it is handling, whose id is at hand, so the timed loop reads ids in turn
    // and each cancel's miss is the structure's own (as in C's `timeout.c`, where the caller
    // holds the node). Reading them from the insert-ordered table at random would add a second,
    // dependent miss to every cancel, the same for every structure.
    let victims: Vec<Q::Id> = order.iter().map(|&i| ids[i as usize]).collect();
    drop(ids);
    let (elapsed, checksum) = timed(&mut q, |q| {
        let mut sum = 0u64;
        for &id in &victims {
            sum = sum.wrapping_add(q.cancel(id).expect("armed"));
        }
        sum
    });
    assert!(q.is_empty());
    Outcome {
        elapsed,
        ops: n as u64,
        checksum,
    }
}

fn reset<Q: Timers>(q: Q, n: usize, seed: u64) -> Outcome {
    let plan = refresh_plan(n, refresh_count(n), seed);
    refresh_run(q, &keepalive_deadlines(n, seed), &plan)
}

/// The keepalive refresh as a server does it: every connection's idle timer sits at its last
/// activity plus [`KEEP_MIN`] (activity spread over the last 10 s), and a request pushes it to
/// now plus the same timeout, so a refresh always moves a timer later.
fn refresh<Q: Timers>(q: Q, n: usize, seed: u64) -> Outcome {
    let mut rng = SplitMix64::new(seed);
    let deadlines: Vec<u64> = (0..n)
        .map(|_| rng.between(KEEP_MIN - 10_000, KEEP_MIN))
        .collect();
    let plan: Vec<Refresh> = refresh_plan(n, refresh_count(n), seed)
        .into_iter()
        .map(|r| Refresh {
            delay: KEEP_MIN as u32,
            ..r
        })
        .collect();
    refresh_run(q, &deadlines, &plan)
}

/// Arms `deadlines` (untimed), then times the keepalive phase of `plan`.
fn refresh_run<Q: Timers>(mut q: Q, deadlines: &[u64], plan: &[Refresh]) -> Outcome {
    let mut ids = populate(&mut q, deadlines);
    let (elapsed, checksum) = timed(&mut q, |q| {
        keepalive_phase(q, &mut ids, plan, resets_per_tick(plan.len()))
    });
    assert_eq!(q.len(), deadlines.len());
    Outcome {
        elapsed,
        ops: plan.len() as u64,
        checksum,
    }
}

/// Applies `plan` from tick 0, moving the clock one tick per `per_tick` refreshes; the plan must
/// end before [`KEEP_MIN`] ticks, so that nothing fires.
pub fn keepalive_phase<Q: Timers>(
    q: &mut Q,
    ids: &mut [Q::Id],
    plan: &[Refresh],
    per_tick: usize,
) -> u64 {
    assert!(
        (plan.len().div_ceil(per_tick) as u64) < KEEP_MIN,
        "plan too long for its clock"
    );
    let mut fired = 0u64;
    let mut now = 0u64;
    for chunk in plan.chunks(per_tick) {
        now += 1;
        q.advance(now, &mut |_| fired += 1);
        for r in chunk {
            let ok = q.reset(&mut ids[r.victim as usize], now + u64::from(r.delay));
            debug_assert!(ok, "keepalive timers stay armed");
        }
    }
    assert_eq!(fired, 0, "a keepalive timer fired during the refresh phase");
    fired
}

fn fire<Q: Timers>(mut q: Q, n: usize, seed: u64) -> Outcome {
    let deadlines = uniform_deadlines(n, seed);
    populate(&mut q, &deadlines);
    let (elapsed, checksum) = timed(&mut q, |q| {
        let mut sum = 0u64;
        let mut now = 0u64;
        while let Some(next) = q.next_expiry() {
            now = next.max(now + 1);
            q.advance(now, &mut |v| sum = sum.wrapping_add(v));
        }
        sum
    });
    assert!(q.is_empty(), "{} timers left with no next expiry", q.len());
    Outcome {
        elapsed,
        ops: n as u64,
        checksum,
    }
}

fn catch_up<Q: Timers>(mut q: Q, n: usize, seed: u64) -> Outcome {
    let deadlines = uniform_deadlines(n, seed);
    populate(&mut q, &deadlines);
    let (elapsed, checksum) = timed(&mut q, |q| {
        let mut sum = 0u64;
        // Past every deadline, with room for a coarse wheel's rounding.
        q.advance(2 * SPAN, &mut |v| sum = sum.wrapping_add(v));
        sum
    });
    assert!(q.is_empty(), "{} timers left after the jump", q.len());
    Outcome {
        elapsed,
        ops: n as u64,
        checksum,
    }
}

fn next_expiry<Q: Timers>(mut q: Q, n: usize, seed: u64) -> Outcome {
    let deadlines = uniform_deadlines(n, seed);
    populate(&mut q, &deadlines);
    let (elapsed, seen) = timed(&mut q, |q| {
        let mut seen = 0u64;
        for _ in 0..QUERIES {
            seen += u64::from(black_box(q.next_expiry()).is_some());
        }
        seen
    });
    Outcome {
        elapsed,
        ops: QUERIES as u64,
        checksum: seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, with_timers};

    #[test]
    fn every_structure_agrees_on_every_workload() {
        for w in Workload::ALL {
            let mut sums = Vec::new();
            for &kind in Kind::ALL {
                let out = with_timers!(kind, |make| w.run(make, 2_000, 9));
                sums.push((kind, out.checksum));
            }
            assert!(
                sums.windows(2).all(|p| p[0].1 == p[1].1),
                "{}: {sums:?}",
                w.name()
            );
        }
    }

    #[test]
    fn refresh_plan_keeps_the_clock_before_the_first_keepalive_deadline() {
        let count = refresh_count(usize::MAX);
        let ticks = count.div_ceil(resets_per_tick(count)) as u64;
        assert!(ticks < KEEP_MIN, "{ticks} ticks");
        let plan = refresh_plan(1_000, 500, 3);
        assert_eq!(plan.len(), 500);
        assert!(
            plan.iter()
                .all(|r| r.victim < 1_000 && u64::from(r.delay) >= KEEP_MIN)
        );
    }
}

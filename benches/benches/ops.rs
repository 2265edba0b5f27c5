//! Nanoseconds per operation at a steady live population, with criterion.
//!
//! Each benchmark builds one structure holding `n` keepalive timers (untimed), then times a batch
//! of single operations against it: arm (the extra timers are cancelled afterwards, untimed),
//! cancel (of timers armed untimed just before), re-arm of a random live timer with the clock
//! moving a tick per 64, fire (batches of at most n/8 timers due within 64 ticks, the clock
//! stepping tick by tick, beside a population a day or more out), and
//! `next_expiry`. Sample counts and times are small so `cargo bench` ends in a few minutes on two
//! cores; the `tickwheel-benches` binary gives the whole-run figures and the tables.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tickwheel_benches::rng::SplitMix64;
use tickwheel_benches::workload::{self, RESETS_PER_TICK};
use tickwheel_benches::{Kind, Timers, with_timers};

const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];

/// A structure holding `n` keepalive timers, its ids, and the clock it has reached.
struct Steady<Q: Timers> {
    q: Q,
    ids: Vec<Q::Id>,
    now: u64,
    rng: SplitMix64,
}

impl<Q: Timers> Steady<Q> {
    fn new(mut q: Q, n: usize, far: bool) -> Self {
        let mut deadlines = workload::keepalive_deadlines(n, 11);
        if far {
            // A day or two out: nothing in this population fires however long the bench runs.
            deadlines.iter_mut().for_each(|d| *d *= 3_000);
        }
        let ids = workload::populate(&mut q, &deadlines);
        Self {
            q,
            ids,
            now: 0,
            rng: SplitMix64::new(12),
        }
    }

    /// Times `iters` arms of short timers, then cancels them untimed.
    fn insert(&mut self, iters: u64) -> Duration {
        let deadlines: Vec<u64> = (0..iters)
            .map(|_| self.now + self.rng.between(1, workload::KEEP_MIN))
            .collect();
        let mut extra = Vec::with_capacity(iters as usize);
        let elapsed = self.q.scope(|q| {
            let start = Instant::now();
            for (i, &d) in deadlines.iter().enumerate() {
                extra.push(q.insert(d, i as u64));
            }
            start.elapsed()
        });
        self.q.scope(|q| {
            for id in extra {
                q.cancel(id);
            }
        });
        elapsed
    }

    /// Arms `iters` short timers untimed, then times cancelling them in random order.
    fn cancel(&mut self, iters: u64) -> Duration {
        let now = self.now;
        let rng = &mut self.rng;
        let mut extra: Vec<Q::Id> = self.q.scope(|q| {
            (0..iters)
                .map(|i| q.insert(now + rng.between(1, workload::KEEP_MIN), i))
                .collect()
        });
        self.rng.shuffle(&mut extra);
        self.q.scope(|q| {
            let start = Instant::now();
            for id in extra {
                black_box(q.cancel(id));
            }
            start.elapsed()
        })
    }

    /// Times `iters` keepalive refreshes, the clock moving a tick per [`RESETS_PER_TICK`]; a
    /// timer left idle long enough to expire is armed afresh, as a new connection would be.
    fn reset(&mut self, iters: u64) -> Duration {
        let n = self.ids.len() as u64;
        let plan: Vec<(usize, u64)> = (0..iters)
            .map(|_| {
                let delay = self.rng.between(workload::KEEP_MIN, workload::KEEP_MAX);
                (self.rng.below(n) as usize, delay)
            })
            .collect();
        let Self { q, ids, now, .. } = self;
        let mut expired = Vec::new();
        q.scope(|q| {
            let start = Instant::now();
            for chunk in plan.chunks(RESETS_PER_TICK) {
                *now += 1;
                q.advance(*now, &mut |v| expired.push(v));
                for v in expired.drain(..) {
                    ids[v as usize] = q.insert(*now + workload::KEEP_MAX, v);
                }
                for &(victim, delay) in chunk {
                    q.reset(&mut ids[victim], *now + delay);
                }
            }
            start.elapsed()
        })
    }

    /// Fires `iters` timers in windows of 64 ticks: each window arms at most `n / 8` (and at
    /// least 64) timers due inside it, untimed, then times moving the clock through its ticks one
    /// by one (an event loop with a 1 ms tick; no `next_expiry`, whose cost is measured on its
    /// own and which `DelayQueue` answers by walking a whole wheel slot).
    fn fire(&mut self, iters: u64) -> Duration {
        let per_window = (self.ids.len() as u64 / 8).max(64);
        let mut left = iters;
        let mut elapsed = Duration::ZERO;
        while left > 0 {
            let batch = left.min(per_window);
            left -= batch;
            let now = self.now;
            let rng = &mut self.rng;
            self.q.scope(|q| {
                for i in 0..batch {
                    q.insert(now + rng.between(1, 64), i);
                }
            });
            let end = now + 64;
            elapsed += self.q.scope(|q| {
                let start = Instant::now();
                for t in now + 1..=end {
                    q.advance(t, &mut |v| {
                        black_box(v);
                    });
                }
                start.elapsed()
            });
            self.now = end;
        }
        elapsed
    }

    /// Times `iters` calls of `next_expiry`.
    fn next_expiry(&mut self, iters: u64) -> Duration {
        self.q.scope(|q| {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(q.next_expiry());
            }
            start.elapsed()
        })
    }
}

fn ops(c: &mut Criterion) {
    for op in ["insert", "cancel", "reset", "fire", "next_expiry"] {
        let mut group = c.benchmark_group(op);
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(200));
        group.measurement_time(Duration::from_millis(500));
        group.throughput(Throughput::Elements(1));
        for n in SIZES {
            for kind in Kind::ALL {
                with_timers!(kind, |make| {
                    let mut s = Steady::new(make(), n, op == "fire");
                    group.bench_function(BenchmarkId::new(kind.name(), n), |b| {
                        b.iter_custom(|iters| match op {
                            "insert" => s.insert(iters),
                            "cancel" => s.cancel(iters),
                            "reset" => s.reset(iters),
                            "fire" => s.fire(iters),
                            _ => s.next_expiry(iters),
                        })
                    });
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, ops);
criterion_main!(benches);

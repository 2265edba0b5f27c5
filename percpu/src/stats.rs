//! Per-base counters and the lateness histogram.
//!
//! Lateness is fire time minus deadline, where the fire time is the clock reading of the turn that
//! fired the timer and the deadline is the timer's deadline tick (the requested deadline rounded
//! up to a tick, so lateness never counts the rounding). It is kept in log2 buckets of
//! microseconds: bucket 0 holds `< 1 µs`, bucket `k` holds `[2^(k-1), 2^k)` µs. A percentile is
//! reported as its bucket's upper bound, so it is at most 2x pessimistic; the maximum is exact.

use std::time::Duration;

const BUCKETS: usize = 48;

/// Bucket of a lateness in nanoseconds.
fn bucket_of_ns(ns: u64) -> usize {
    let us = ns / 1_000;
    // 0 µs -> 0; [1,2) -> 1; [2,4) -> 2; ...
    ((u64::BITS - us.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// Exclusive upper bound of a bucket in nanoseconds.
fn bucket_upper_ns(bucket: usize) -> u64 {
    1_000u64.saturating_mul(1u64 << bucket.min(62))
}

/// Log2 histogram of lateness.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
            total: 0,
            max_ns: 0,
        }
    }
}

impl Histogram {
    pub(crate) fn record(&mut self, late_ns: u64) {
        self.counts[bucket_of_ns(late_ns)] += 1;
        self.total += 1;
        self.max_ns = self.max_ns.max(late_ns);
    }

    /// Upper bound of the bucket holding the `q`-quantile (`q` in parts per thousand).
    fn quantile_ns(&self, per_mille: u64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = (self.total * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_upper_ns(bucket).min(self.max_ns.max(1));
            }
        }
        self.max_ns
    }

    pub(crate) fn summary(&self) -> Lateness {
        Lateness {
            count: self.total,
            p50: Duration::from_nanos(self.quantile_ns(500)),
            p99: Duration::from_nanos(self.quantile_ns(990)),
            max: Duration::from_nanos(self.max_ns),
        }
    }
}

/// Lateness summary: how long after its deadline tick each timer fired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Timers measured.
    pub count: u64,
    /// Median (upper bound of its log2 bucket, capped by `max`).
    pub p50: Duration,
    /// 99th percentile (upper bound of its log2 bucket, capped by `max`).
    pub p99: Duration,
    /// Largest seen (exact).
    pub max: Duration,
}

/// A snapshot of one base's counters.
///
/// Once a base is quiet (no timer pending, a turn taken since the last remote operation),
/// `scheduled == fired + cancelled_local + cancelled_remote`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BaseStats {
    /// Timers armed on this base (locally, or filed from another thread's schedule).
    pub scheduled: u64,
    /// Payloads handed to the caller of `turn`.
    pub fired: u64,
    /// Cancels that won, made by the owning thread.
    pub cancelled_local: u64,
    /// Cancels that won, made by other threads (counted when the owner frees the slot).
    pub cancelled_remote: u64,
    /// Schedules from other threads refused because the base's reserve of free slots was empty
    /// (each refusal once, however often the caller retries).
    pub inbox_full: u64,
    /// Wheel entries that came due for a timer pushed later, and were filed again.
    pub refiled: u64,
    /// Cascades done by the wheel (always 0 in Coarse mode).
    pub cascades: u64,
    /// Fire time minus deadline.
    pub lateness: Lateness,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log2_of_microseconds() {
        assert_eq!(bucket_of_ns(0), 0);
        assert_eq!(bucket_of_ns(999), 0);
        assert_eq!(bucket_of_ns(1_000), 1);
        assert_eq!(bucket_of_ns(1_999), 1);
        assert_eq!(bucket_of_ns(2_000), 2);
        assert_eq!(bucket_of_ns(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_upper_ns(0), 1_000);
        assert_eq!(bucket_upper_ns(2), 4_000);
    }

    #[test]
    fn quantiles_against_sorted_samples() {
        let mut h = Histogram::default();
        let samples: Vec<u64> = (0..1000u64).map(|i| i * 37 % 5_000_000).collect();
        for &s in &samples {
            h.record(s);
        }
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let s = h.summary();
        for (q, got) in [(500, s.p50), (990, s.p99)] {
            let exact = sorted[(1000 * q / 1000 - 1) as usize];
            let got = got.as_nanos() as u64;
            assert!(
                got >= exact && got <= exact.max(1_000) * 2 + 1_000,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(s.max, Duration::from_nanos(*sorted.last().unwrap()));
        assert_eq!(s.count, 1000);
    }

    #[test]
    fn empty_histogram_is_zero() {
        assert_eq!(Histogram::default().summary(), Lateness::default());
    }
}

//! Per-base counters and the lateness histogram.
//!
//! Lateness is fire time minus deadline, where the fire time is the clock reading of the turn that
//! fired the timer and the deadline is the timer's deadline tick (the requested deadline rounded
//! up to a tick, so lateness never counts the rounding). It is kept in a log-linear histogram of
//! nanoseconds, as HdrHistogram does: values below 16 ns have a bucket each, and every power of
//! two above is split into 16 equal sub-buckets. A percentile is reported as the largest value its
//! bucket can hold (capped by the maximum), so it is never below the true percentile and at most
//! 1/16 (6.25%) above it; the maximum is exact. Given up for that precision: 61 x 16 counters
//! (7.6 KiB) a base instead of 48.

use std::time::Duration;

/// Sub-buckets per power of two: `2^SUB_BITS`.
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Buckets `0..SUB` hold `0..SUB` ns exactly; then `SUB` buckets for each exponent `SUB_BITS..64`.
const BUCKETS: usize = SUB * (u64::BITS - SUB_BITS + 1) as usize;

/// Bucket of a lateness in nanoseconds.
fn bucket_of_ns(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = u64::BITS - 1 - ns.leading_zeros(); // SUB_BITS..=63
    let shift = exp - SUB_BITS;
    let sub = ((ns >> shift) as usize) & (SUB - 1); // the bits below the leading one
    (shift as usize + 1) * SUB + sub
}

/// Largest value (inclusive, in nanoseconds) that a bucket holds.
fn bucket_max_ns(bucket: usize) -> u64 {
    if bucket < SUB {
        return bucket as u64;
    }
    let shift = (bucket / SUB - 1) as u32;
    let low = ((SUB + bucket % SUB) as u64) << shift;
    low + ((1u64 << shift) - 1)
}

/// Log-linear histogram of lateness.
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

    /// Largest value of the bucket holding the quantile (in parts per thousand), capped by the
    /// maximum.
    fn quantile_ns(&self, per_mille: u64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = (self.total * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_max_ns(bucket).min(self.max_ns);
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
    /// Median: never below the true median, at most 6.25% above it.
    pub p50: Duration,
    /// 99th percentile: never below the true one, at most 6.25% above it.
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
    pub reserve_empty: u64,
    /// Timers whose wheel placement came due after they were pushed later, and were filed again.
    pub refiled: u64,
    /// Timers the wheel moved down a level (Exact mode) or off its overflow list (either mode:
    /// deadlines beyond the top level). Coarse mode never cascades otherwise.
    pub cascades: u64,
    /// Fire time minus deadline.
    pub lateness: Lateness,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_linear() {
        for ns in 0..16 {
            assert_eq!(bucket_of_ns(ns), ns as usize);
            assert_eq!(bucket_max_ns(ns as usize), ns);
        }
        assert_eq!(bucket_of_ns(16), 16);
        assert_eq!(bucket_of_ns(32), 32);
        assert_eq!(bucket_of_ns(33), 32, "[32, 34) is one bucket");
        assert_eq!(bucket_of_ns(34), 33);
        assert_eq!(bucket_of_ns(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_max_ns(BUCKETS - 1), u64::MAX);
        // Every bucket's range starts right after the previous one's, and is at most 1/16 of
        // its lower end wide.
        for b in 1..BUCKETS {
            let low = bucket_max_ns(b - 1) + 1;
            assert_eq!(bucket_of_ns(low), b);
            assert_eq!(bucket_of_ns(bucket_max_ns(b)), b);
            assert!((bucket_max_ns(b) - low) * 16 < low.max(16), "bucket {b}");
        }
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
                got >= exact && (got - exact) * 16 <= exact,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(s.max, Duration::from_nanos(*sorted.last().unwrap()));
        assert_eq!(s.count, 1000);
    }

    #[test]
    fn percentiles_within_ten_percent_of_exact() {
        // Latenesses spread over six decades (1 µs to 1 s), as a loaded loop produces.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let samples: Vec<u64> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let decade = 10u64.pow((x % 6) as u32 + 3);
                decade + (x >> 8) % (9 * decade)
            })
            .collect();
        let mut h = Histogram::default();
        for &s in &samples {
            h.record(s);
        }
        let mut sorted = samples;
        sorted.sort_unstable();
        for per_mille in [100, 250, 500, 750, 900, 990, 999] {
            let rank = (sorted.len() as u64 * per_mille).div_ceil(1000) as usize;
            let exact = sorted[rank - 1];
            let got = h.quantile_ns(per_mille);
            assert!(
                got >= exact && (got - exact) * 10 <= exact,
                "p{per_mille}: reported {got} ns, exact {exact} ns"
            );
        }
    }

    #[test]
    fn empty_histogram_is_zero() {
        assert_eq!(Histogram::default().summary(), Lateness::default());
    }
}

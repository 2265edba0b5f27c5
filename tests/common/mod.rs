//! Helpers shared by the integration tests.
// Each test crate uses a part of these, so the rest is dead code there.
#![allow(dead_code)]

/// splitmix64: small, seedable, good enough to drive a model test.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// In `lo..hi` (`lo` if empty).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Below `2^b` for a random `b < bits`: small values as often as huge ones.
    pub(crate) fn spread(&mut self, bits: u64) -> u64 {
        let b = self.below(bits);
        self.below(1 << b)
    }
}

/// Ticks one bucket of levels 0, 1 and 2 spans at the default geometry (64 slots a level).
pub(crate) const L1: u64 = 64;
pub(crate) const L2: u64 = 64 * 64;
pub(crate) const L3: u64 = 64 * 64 * 64;

/// The first tick of the next multiple of `unit` after `t` (saturating).
pub(crate) fn next_multiple(t: u64, unit: u64) -> u64 {
    (t / unit).saturating_add(1).saturating_mul(unit)
}

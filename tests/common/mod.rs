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

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Below `2^b` for a random `b < bits`: small values as often as huge ones.
    pub(crate) fn spread(&mut self, bits: u64) -> u64 {
        let b = self.below(bits);
        self.below(1 << b)
    }
}

//! A tiny deterministic generator, so every structure gets the same inputs from the same seed.
//!
//! SplitMix64 (Steele, Lea, Flood 2014): one add and two multiply-xorshift rounds per output.
//! Not for cryptography; it only has to be fast, repeatable and well spread.

/// SplitMix64 state.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose outputs are fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (Lemire's multiply-shift; the bias is below 2^-32 for our bounds).
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0, "below(0) has no value to return");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// A value in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi, "between({lo}, {hi}) is an empty range");
        lo + self.below(hi - lo + 1)
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SplitMix64::new(7).next_u64(), SplitMix64::new(8).next_u64());
    }

    #[test]
    fn between_stays_in_range_and_reaches_both_ends() {
        let mut r = SplitMix64::new(1);
        let (mut saw_lo, mut saw_hi) = (false, false);
        for _ in 0..10_000 {
            let v = r.between(3, 9);
            assert!((3..=9).contains(&v), "{v} out of 3..=9");
            saw_lo |= v == 3;
            saw_hi |= v == 9;
        }
        assert!(saw_lo && saw_hi);
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..1000).collect();
        SplitMix64::new(3).shuffle(&mut v);
        assert_ne!(v, (0..1000).collect::<Vec<_>>());
        v.sort_unstable();
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }
}

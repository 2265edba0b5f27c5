//! Where a timer goes: the pure arithmetic of both wheel modes.
//!
//! Every function here is a total function on `u64` ticks: no state, no overflow (shifts are
//! checked or bounded by construction, rounding saturates at `u64::MAX`), and each one has a unit
//! test at the bottom of the file. The wheel (`wheel.rs`) only strings these together.
//!
//! Both modes have 64 slots per level (`SLOT_BITS` = 6). They differ in how coarse each level is:
//!
//! | mode   | level granularity | level chosen by                          | slot index          |
//! |--------|-------------------|------------------------------------------|---------------------|
//! | Exact  | 64^n ticks        | highest differing 6-bit digit of now^deadline | digit n of deadline |
//! | Coarse | 8^n ticks         | delay = deadline - now, level n holds delay < 63 * 8^n | (ceil(deadline / 8^n)) mod 64 |

/// Slots (Exact) or buckets (Coarse) per level, as a power of two.
pub(crate) const SLOT_BITS: u32 = 6;
/// Slots or buckets per level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;
/// Mask of a slot index.
pub(crate) const SLOT_MASK: u64 = (SLOTS as u64) - 1;

/// Exact mode: each level is 64x coarser than the one below.
pub(crate) const EXACT_LEVEL_BITS: u32 = SLOT_BITS;
/// Exact mode: 11 levels of 6 bits cover all 64 bits of a tick; more would be empty.
pub(crate) const EXACT_MAX_LEVELS: usize = 11;
/// Exact mode default: 6 levels, 2^36 ticks (about 2.2 years at 1 ms) before the overflow list.
pub(crate) const EXACT_DEFAULT_LEVELS: usize = 6;

/// Coarse mode: each level is 8x coarser than the one below (Linux `LVL_CLK_SHIFT`).
pub(crate) const COARSE_LEVEL_BITS: u32 = 3;
/// Coarse mode: a level holds delays below `COARSE_LEVEL_SPAN << (3 * n)` (Linux `LVL_START`).
pub(crate) const COARSE_LEVEL_SPAN: u64 = SLOTS as u64 - 1;
/// Coarse mode: at 20 levels the top level's granularity is 2^57 and its span just fits in a u64.
pub(crate) const COARSE_MAX_LEVELS: usize = 20;
/// Coarse mode default: 9 levels, as Linux with HZ > 100 (about 12 days at 1 ms).
pub(crate) const COARSE_DEFAULT_LEVELS: usize = 9;

/// Highest number of levels either mode supports.
pub(crate) const MAX_LEVELS: usize = if COARSE_MAX_LEVELS > EXACT_MAX_LEVELS {
    COARSE_MAX_LEVELS
} else {
    EXACT_MAX_LEVELS
};

/// Exact mode: the level a deadline belongs to, seen from `now`.
///
/// It is the index of the highest 6-bit digit in which `now` and `deadline` differ; a deadline
/// equal to `now` is level 0. The result can be `>= levels` (the caller's overflow case).
#[inline]
pub(crate) fn level_for(now: u64, deadline: u64) -> usize {
    // OR-ing in SLOT_MASK makes the lowest digit "differ", so equal ticks land on level 0.
    let differing = (now ^ deadline) | SLOT_MASK;
    let highest_bit = 63 - differing.leading_zeros();
    (highest_bit / EXACT_LEVEL_BITS) as usize
}

/// Exact mode: the slot of `deadline` on `level`, i.e. its 6-bit digit number `level`.
#[inline]
pub(crate) fn slot_for(deadline: u64, level: usize) -> usize {
    ((deadline >> (level as u32 * EXACT_LEVEL_BITS)) & SLOT_MASK) as usize
}

/// Exact mode: the first tick of `slot` on `level` within the level above that holds `now`.
///
/// This is when the slot's timers are due to be fired (level 0) or cascaded (higher levels).
#[inline]
pub(crate) fn slot_start(now: u64, level: usize, slot: usize) -> u64 {
    let shift = level as u32 * EXACT_LEVEL_BITS;
    let above = shift + EXACT_LEVEL_BITS;
    let high = now
        .checked_shr(above)
        .map_or(0, |h| h.checked_shl(above).unwrap_or(0));
    high | ((slot as u64) << shift)
}

/// Exact mode: the first tick of the top-level block holding `tick`; the overflow list is swept
/// there.
#[inline]
pub(crate) fn top_block_start(tick: u64, levels: usize) -> u64 {
    let bits = levels as u32 * EXACT_LEVEL_BITS;
    tick.checked_shr(bits).map_or(0, |h| h << bits)
}

/// Coarse mode: log2 of the granularity of `level` (8^level ticks).
#[inline]
pub(crate) fn granularity_shift(level: usize) -> u32 {
    level as u32 * COARSE_LEVEL_BITS
}

/// Coarse mode: the level for a timer `delay_ticks` away, as Linux `calc_wheel_index` picks it:
/// the lowest `n` with `delay_ticks < 63 * 8^n`. The result can be `>= levels` (overflow).
#[inline]
pub(crate) fn level_for_delay(delay_ticks: u64) -> usize {
    // With `b` the delay's bit length, `n0 = floor((b - 4) / 3)` is the lowest level whose span
    // (`63 * 8^n`, just below `2^(3n + 6)`) can reach `2^b`, and no lower level holds the delay
    // (`63 * 8^(n0 - 1) < 2^(3 * n0 + 3) <= 2^(b - 1)`); as `2^b <= 2^(3 * n0 + 6)`, the level is
    // `n0`, or `n0 + 1` for a delay in the top 1/64 of that power of two. No division.
    let bit_length = 64 - delay_ticks.leading_zeros();
    let level = (bit_length.saturating_sub(4) / COARSE_LEVEL_BITS) as usize;
    level + usize::from(delay_ticks > COARSE_LEVEL_LAST[level])
}

/// Coarse mode: whether `expiry`, rounded up to a granule of `level`, is placed on `level` or
/// below at every clock from `clock` on, so that placing it again gives it back (a finer
/// granule divides it). Not so when the rounding carried it past the level's span: placed
/// again, it would go up a level and be rounded up once more.
#[inline]
pub(crate) fn coarse_expiry_stays(clock: u64, level: usize, expiry: u64) -> bool {
    // `delay <= 63 * 8^level - 1`, that is `delay / 8^level < 63` (`COARSE_LEVEL_LAST`).
    expiry.saturating_sub(clock) >> granularity_shift(level) < COARSE_LEVEL_SPAN
}

/// Coarse mode: the largest delay level `n` holds, `63 * 8^n - 1`; `u64::MAX` for level 20,
/// whose span does not fit in a `u64`.
const COARSE_LEVEL_LAST: [u64; COARSE_MAX_LEVELS + 1] = {
    let mut last = [u64::MAX; COARSE_MAX_LEVELS + 1];
    let mut level = 0;
    while level < COARSE_MAX_LEVELS {
        last[level] = (COARSE_LEVEL_SPAN << (level as u32 * COARSE_LEVEL_BITS)) - 1;
        level += 1;
    }
    last
};

/// Coarse mode: the largest delay `level` holds, plus one (Linux `LVL_START(level + 1)`).
#[inline]
pub(crate) fn level_span_ticks(level: usize) -> u64 {
    COARSE_LEVEL_SPAN << granularity_shift(level)
}

/// `tick / 2^shift`, rounded up, for a `tick` of at least 1 (a deadline after the clock). Never
/// overflows; two instructions fewer than [`granules_ceil`].
#[inline]
pub(crate) fn granules_ceil_positive(tick: u64, shift: u32) -> u64 {
    debug_assert!(tick > 0, "tick 0 has no granule above it");
    ((tick - 1) >> shift) + 1
}

/// Coarse mode: the tick of `slot` on `level`, the one granule of the window
/// `ceil(clock / 8^level)..+64` that the slot stands for (saturating at `u64::MAX`).
#[inline]
pub(crate) fn coarse_slot_tick(clock: u64, level: usize, slot: usize) -> u64 {
    let shift = granularity_shift(level);
    let first = granules_ceil(clock, shift);
    let lap = (slot as u64).wrapping_sub(first) & (SLOTS as u64 - 1);
    granules_to_tick(first.saturating_add(lap), shift)
}

/// `tick / 2^shift`, rounded up. Never overflows.
#[inline]
pub(crate) fn granules_ceil(tick: u64, shift: u32) -> u64 {
    let mask = (1u64 << shift) - 1;
    (tick >> shift) + u64::from(tick & mask != 0)
}

/// `granules * 2^shift`, saturating at `u64::MAX`.
#[inline]
pub(crate) fn granules_to_tick(granules: u64, shift: u32) -> u64 {
    if granules > (u64::MAX >> shift) {
        u64::MAX
    } else {
        granules << shift
    }
}

/// Coarse mode: `deadline` rounded up to a multiple of 2^shift; saturates at `u64::MAX`, which is
/// still never early because nothing is later than `u64::MAX`.
#[inline]
pub(crate) fn round_up(deadline: u64, shift: u32) -> u64 {
    granules_to_tick(granules_ceil(deadline, shift), shift)
}

/// Coarse mode: the slot a granule number falls in (granules wrap around the 64 slots).
#[inline]
pub(crate) fn slot_of_granule(granule: u64) -> usize {
    (granule & SLOT_MASK) as usize
}

#[cfg(any(test, feature = "test-hooks"))]
/// Coarse mode: the bucket within its level of a timer that expires at `expiry` (already rounded).
#[inline]
pub(crate) fn bucket_for(expiry: u64, level: usize) -> usize {
    slot_of_granule(granules_ceil(expiry, granularity_shift(level)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_level_is_highest_differing_digit() {
        assert_eq!(level_for(0, 0), 0);
        assert_eq!(level_for(0, 63), 0);
        assert_eq!(level_for(0, 64), 1);
        assert_eq!(level_for(63, 64), 1);
        assert_eq!(level_for(64, 127), 0);
        assert_eq!(level_for(0, 4095), 1);
        assert_eq!(level_for(0, 4096), 2);
        assert_eq!(level_for(0, u64::MAX), 10);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
    }

    #[test]
    fn exact_slot_is_the_levels_digit() {
        assert_eq!(slot_for(0b101_000011, 0), 3);
        assert_eq!(slot_for(0b101_000011, 1), 5);
        assert_eq!(slot_for(u64::MAX, 10), 15);
    }

    #[test]
    fn exact_slot_start_keeps_higher_digits() {
        assert_eq!(slot_start(0, 0, 5), 5);
        assert_eq!(slot_start(70, 0, 10), 74);
        assert_eq!(slot_start(70, 1, 3), 192);
        assert_eq!(slot_start(5000, 1, 20), 4096 + 20 * 64);
        assert_eq!(slot_start(u64::MAX, 10, 15), 15 << 60);
    }

    #[test]
    fn exact_top_block() {
        assert_eq!(top_block_start(100, 1), 64);
        assert_eq!(top_block_start(u64::MAX, 11), 0);
        assert_eq!(top_block_start(u64::MAX, 6), !((1 << 36) - 1));
    }

    #[test]
    fn coarse_level_matches_linux_starts() {
        assert_eq!(level_for_delay(0), 0);
        assert_eq!(level_for_delay(62), 0);
        assert_eq!(level_for_delay(63), 1);
        assert_eq!(level_for_delay(503), 1);
        assert_eq!(level_for_delay(504), 2);
        assert_eq!(level_for_delay(63 * 64 - 1), 2);
        assert_eq!(level_for_delay(63 * 64), 3);
        assert_eq!(level_for_delay(u64::MAX), 20);
        for level in 0..COARSE_MAX_LEVELS {
            let span = level_span_ticks(level);
            assert_eq!(level_for_delay(span - 1), level, "level {level}");
            assert_eq!(level_for_delay(span), level + 1, "level {level}");
        }
        // Against the definition (`delay / 63 < 8^n`), around every power of two.
        let by_division = |delay: u64| (64 - (delay / 63).leading_zeros()).div_ceil(3) as usize;
        for bit in 0..64 {
            for delay in [
                1u64 << bit,
                (1 << bit) - 1,
                (1 << bit) + 1,
                (1 << bit) / 64 * 63,
            ] {
                assert_eq!(level_for_delay(delay), by_division(delay), "delay {delay}");
            }
        }
    }

    #[test]
    fn a_coarse_expiry_stays_unless_rounding_carried_it_past_its_level() {
        // Clock 15, deadline 518: delay 503 is level 1 (granule 8), rounded to 520, whose delay
        // 505 is past level 1's last (503): placed again, it would be rounded to 576.
        assert_eq!(level_for_delay(518 - 15), 1);
        assert_eq!(round_up(518, granularity_shift(1)), 520);
        assert!(!coarse_expiry_stays(15, 1, 520));
        assert_eq!(level_for_delay(520 - 16), 2);
        // One granule earlier it stays, at this clock and every later one.
        assert!(coarse_expiry_stays(15, 1, 512));
        for clock in 15..=512 {
            let level = level_for_delay(512 - clock);
            assert!(level <= 1);
            assert_eq!(round_up(512, granularity_shift(level)), 512);
        }
        // An expiry at or before the clock stays (it is due).
        assert!(coarse_expiry_stays(600, 3, 520));
    }

    #[test]
    fn rounding_never_goes_down_or_overflows() {
        assert_eq!(granules_ceil(0, 3), 0);
        assert_eq!(granules_ceil(1, 3), 1);
        assert_eq!(granules_ceil(8, 3), 1);
        assert_eq!(granules_ceil(9, 3), 2);
        assert_eq!(round_up(9, 3), 16);
        for tick in [1, 7, 8, 9, 16, 17, u64::MAX - 8, u64::MAX - 7, u64::MAX] {
            for shift in [0, 3, 57] {
                assert_eq!(
                    granules_ceil_positive(tick, shift),
                    granules_ceil(tick, shift)
                );
            }
        }
        assert_eq!(round_up(16, 3), 16);
        assert_eq!(round_up(u64::MAX, 3), u64::MAX);
        assert_eq!(round_up(u64::MAX - 7, 3), u64::MAX - 7);
        assert_eq!(granules_to_tick(1 << 61, 3), u64::MAX);
        assert_eq!(bucket_for(64 * 8, 1), 0);
        assert_eq!(bucket_for(65 * 8, 1), 1);
    }
}

//! Where each shared word lives, and the header that says so.
//!
//! A set is one flat array of `u64` words (all accessed as atomics):
//!
//! | words                          | what                                                        |
//! |--------------------------------|-------------------------------------------------------------|
//! | line 0                         | magic, version, geometry, tick, capacity, size, set id      |
//! | line 1                         | free-stack head (tag, index), bump index (never-used slots) |
//! | line 2                         | owner word (pid, start time) of the advancing process       |
//! | line 3                         | wake counter (futex word), advancer's published next wake   |
//! | line 4                         | manual clock (tick)                                         |
//! | line 5                         | counter stripe 0: scheduled, cancelled, full                |
//! | line 6                         | counters written by the owner: fired, reclaimed, takeovers, interrupted |
//! | `REGISTRY` words               | one record (pid, start time) per attached process           |
//! | `STRIPES - 1` lines            | counter stripes 1 and up                                    |
//! | 4 words a slot                 | state, deadline, payload, free-stack link                   |
//! | dirty bitmap, leaf level first | one bit a slot, then one bit per word of the level below    |
//!
//! A line is 16 words (128 bytes, the unit the adjacent-line prefetcher moves) so that words
//! written by different processes never share one. Under `cfg(loom)` lines shrink to 8 words,
//! the registry to 4 records and the stripes to 2: the model checker then tracks a few dozen
//! atomics, and such a layout is never written to a file.
//!
//! The counters every process writes are striped: a client counts in the stripe of its registry
//! record (record modulo `STRIPES`), so processes that attached one after another count on lines
//! of their own, and the two counts of every schedule-and-cancel stay on the process's own core.
//! On one shared line those two read-modify-writes moved the line between the cores at every
//! operation; striped, two processes do 1.13x the schedule-and-cancel pairs a second
//! (BENCHMARKS.md, "Shared memory"). A stripe can be shared (more than `STRIPES` clients, threads
//! sharing a client, or a client of the owner's, which has no record), so counting stays an
//! atomic add; the totals are the sums over the stripes, and a record given up or reclaimed
//! leaves its counts where they are.
//!
//! Memory: `HEADER_BYTES` (17,152 bytes) + 32 bytes a slot + about 1/8 byte a slot of bitmap.
//! 2^24 timers take 512 MiB + 2.1 MiB. Pages of slots never used are never touched.

use std::time::Duration;

use tickwheel::Mode;

/// Words per line: 128 bytes apart, so two hot words never share a cache line or its prefetch pair.
#[cfg(not(loom))]
pub(crate) const LINE: usize = 16;
#[cfg(loom)]
pub(crate) const LINE: usize = 8;

/// Records in the process registry.
#[cfg(not(loom))]
pub(crate) const REGISTRY: usize = 1024;
#[cfg(loom)]
pub(crate) const REGISTRY: usize = 4;

/// Lines of the counters every process writes (see the module doc).
#[cfg(not(loom))]
pub(crate) const STRIPES: usize = 64;
#[cfg(loom)]
pub(crate) const STRIPES: usize = 2;

/// `b"TICKWHL\x01"` read as a little-endian word.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"TICKWHL\x01");
/// Bumped whenever the layout or the meaning of a word changes (2: cancels free their slots, no
/// `CANCELLED` state; 3: the counters every process writes are striped).
pub(crate) const VERSION: u64 = 3;

// Line 0: the header proper. Written once by the creator; the magic last.
pub(crate) const W_MAGIC: usize = 0;
pub(crate) const W_VERSION: usize = 1;
pub(crate) const W_GEOMETRY: usize = 2;
pub(crate) const W_TICK_NS: usize = 3;
pub(crate) const W_CAPACITY: usize = 4;
pub(crate) const W_SIZE: usize = 5;
pub(crate) const W_SET: usize = 6;
// Line 1: allocation.
pub(crate) const W_FREE_HEAD: usize = LINE;
pub(crate) const W_BUMP: usize = LINE + 1;
// Line 2: ownership of advancing.
pub(crate) const W_OWNER: usize = 2 * LINE;
// Line 3: waking the advancer.
pub(crate) const W_WAKE: usize = 3 * LINE;
pub(crate) const W_NEXT_WAKE: usize = 3 * LINE + 1;
// Line 4: the manual clock.
pub(crate) const W_CLOCK: usize = 4 * LINE;
// Line 5: counter stripe 0; the words of a counter in a stripe (see `counter`).
const W_STRIPE_0: usize = 5 * LINE;
pub(crate) const C_SCHEDULED: usize = 0;
pub(crate) const C_CANCELLED: usize = 1;
pub(crate) const C_FULL: usize = 2;
// Line 6: counters the owner writes.
pub(crate) const W_FIRED: usize = 6 * LINE;
pub(crate) const W_RECLAIMED: usize = 6 * LINE + 1;
pub(crate) const W_TAKEOVERS: usize = 6 * LINE + 2;
pub(crate) const W_INTERRUPTED: usize = 6 * LINE + 3;
pub(crate) const W_REGISTRY: usize = 7 * LINE;
/// Stripes 1 and up, a line each, after the registry.
const W_STRIPES: usize = round_up(W_REGISTRY + REGISTRY, LINE);

// The header's lines are in order and disjoint, and the registry ends before the slots.
const _: () = {
    assert!(W_SET < W_FREE_HEAD && W_BUMP < W_OWNER && W_OWNER < W_WAKE);
    assert!(W_NEXT_WAKE < W_CLOCK && W_CLOCK < W_STRIPE_0 && W_STRIPE_0 + C_FULL < W_FIRED);
    assert!(W_INTERRUPTED < W_REGISTRY && W_REGISTRY + REGISTRY <= W_STRIPES);
    assert!(HEADER_WORDS.is_multiple_of(LINE) && C_FULL < LINE);
};

/// Words before the first slot.
pub(crate) const HEADER_WORDS: usize = W_STRIPES + (STRIPES - 1) * LINE;

/// The word of counter `c` (`C_SCHEDULED`, ...) in `stripe` (below `STRIPES`).
pub(crate) const fn counter(stripe: usize, c: usize) -> usize {
    let line = match stripe {
        0 => W_STRIPE_0,
        k => W_STRIPES + (k - 1) * LINE,
    };
    line + c
}
/// Bytes before the first slot.
pub const HEADER_BYTES: usize = HEADER_WORDS * 8;
/// Words in one slot record.
pub(crate) const SLOT_WORDS: usize = 4;
/// Bytes of shared memory per timer, bitmap aside.
pub const SLOT_BYTES: usize = SLOT_WORDS * 8;
/// The largest capacity: slot indices are 32-bit with `u32::MAX` as the list end, and a stack
/// head packs a 32-bit index.
pub const MAX_CAPACITY: usize = 1 << 31;
/// Slots (or words of the level below) per bitmap word. Under loom, 2: a model with 5 slots
/// then has three levels, and the model checker sees every level's race with a few slots.
#[cfg(not(loom))]
pub(crate) const MARK_BITS: usize = 64;
#[cfg(loom)]
pub(crate) const MARK_BITS: usize = 2;

/// The bitmap stops adding levels once a level fits in this many words (one line). Under loom,
/// one word.
#[cfg(not(loom))]
const TOP_WORDS: usize = 8;
#[cfg(loom)]
const TOP_WORDS: usize = 1;

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Mode and levels of the wheel, tick and capacity: fixed when a set is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Geometry {
    /// Wheel mode of the advancing process's index.
    pub mode: Mode,
    /// Wheel levels.
    pub levels: usize,
    /// Tick length; `None` for a set driven by a manual clock (ticks set by the advancer).
    pub tick: Option<Duration>,
    /// Most timers pending at once.
    pub capacity: usize,
}

/// Why a geometry or header is out of range.
pub(crate) fn check_geometry(g: &Geometry) -> Result<(), &'static str> {
    if g.capacity == 0 || g.capacity > MAX_CAPACITY {
        return Err("capacity must be in 1..=2^31");
    }
    let max = match g.mode {
        Mode::Exact => 11,
        Mode::Coarse => 20,
    };
    if g.levels == 0 || g.levels > max {
        return Err("levels out of range for the mode (Exact 1..=11, Coarse 1..=20)");
    }
    if let Some(t) = g.tick
        && (t.is_zero() || t.as_nanos() > u128::from(u64::MAX))
    {
        return Err("tick must be at least 1 ns");
    }
    Ok(())
}

/// The geometry word: mode in the low byte (1 Exact, 2 Coarse), levels in the next.
pub(crate) fn geometry_word(g: &Geometry) -> u64 {
    let mode = match g.mode {
        Mode::Exact => 1,
        Mode::Coarse => 2,
    };
    mode | (g.levels as u64) << 8
}

/// The geometry back from the header words; `Err` if any field is out of range.
pub(crate) fn geometry_from(
    word: u64,
    tick_ns: u64,
    capacity: u64,
) -> Result<Geometry, &'static str> {
    let mode = match word & 0xff {
        1 => Mode::Exact,
        2 => Mode::Coarse,
        _ => return Err("unknown wheel mode in the header"),
    };
    let g = Geometry {
        mode,
        levels: ((word >> 8) & 0xff) as usize,
        tick: (tick_ns != 0).then(|| Duration::from_nanos(tick_ns)),
        capacity: usize::try_from(capacity).map_err(|_| "capacity does not fit")?,
    };
    check_geometry(&g)?;
    if word >> 16 != 0 {
        return Err("unknown bits in the geometry word");
    }
    Ok(g)
}

/// Word offsets of everything that depends on the capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) capacity: usize,
    /// `(first word, words)` of each bitmap level, leaf first.
    pub(crate) levels: Vec<(usize, usize)>,
    pub(crate) total_words: usize,
}

impl Layout {
    pub(crate) fn new(capacity: usize) -> Layout {
        let mut at = HEADER_WORDS + capacity * SLOT_WORDS;
        let mut levels = Vec::new();
        let mut words = capacity.div_ceil(MARK_BITS);
        loop {
            levels.push((at, words));
            at += words;
            if words <= TOP_WORDS {
                break;
            }
            words = words.div_ceil(MARK_BITS);
        }
        Layout {
            capacity,
            levels,
            total_words: round_up(at, LINE),
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.total_words * 8
    }

    /// Word of slot `s`'s field `field` (0 state, 1 deadline, 2 payload, 3 link).
    #[inline]
    pub(crate) fn slot(&self, s: u32, field: usize) -> usize {
        debug_assert!((s as usize) < self.capacity && field < SLOT_WORDS);
        HEADER_WORDS + s as usize * SLOT_WORDS + field
    }
}

/// Shared bytes for a set of `capacity` timers (header, slots and bitmap).
pub fn bytes_for(capacity: usize) -> usize {
    Layout::new(capacity).bytes()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn header_size_is_the_documented_one() {
        assert_eq!(HEADER_BYTES, 17_152);
    }

    #[test]
    fn counter_stripes_are_lines_of_their_own() {
        let mut lines: Vec<usize> = (0..STRIPES)
            .map(|k| counter(k, C_SCHEDULED) / LINE)
            .collect();
        assert!((0..STRIPES).all(|k| counter(k, C_FULL) / LINE == lines[k]));
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines.len(), STRIPES);
        let registry = W_REGISTRY / LINE..(W_REGISTRY + REGISTRY).div_ceil(LINE);
        let taken = [W_FREE_HEAD, W_OWNER, W_WAKE, W_CLOCK, W_FIRED].map(|w| w / LINE);
        assert!(
            lines
                .iter()
                .all(|l| !registry.contains(l) && !taken.contains(l))
        );
        assert!(lines.iter().all(|&l| l < HEADER_WORDS / LINE));
    }

    #[test]
    fn bitmap_levels_cover_the_level_below() {
        for cap in [1, 63, 64, 65, 4096, 4097, 1 << 20, 1 << 24] {
            let l = Layout::new(cap);
            assert!(l.levels[0].1 * 64 >= cap);
            for pair in l.levels.windows(2) {
                assert!(pair[1].1 * 64 >= pair[0].1);
                assert_eq!(pair[0].0 + pair[0].1, pair[1].0);
            }
            assert!(l.levels.last().unwrap().1 <= TOP_WORDS);
            assert!(l.total_words * 8 >= HEADER_BYTES + cap * SLOT_BYTES);
        }
    }

    #[test]
    fn stated_bytes_per_timer() {
        let cap = 1 << 24;
        let extra = bytes_for(cap) - HEADER_BYTES - cap * SLOT_BYTES;
        assert!(extra < cap / 8 + cap / 400, "bitmap {extra} bytes");
    }

    #[test]
    fn geometry_round_trips_and_rejects() {
        let g = Geometry {
            mode: Mode::Exact,
            levels: 6,
            tick: Some(Duration::from_millis(1)),
            capacity: 1000,
        };
        assert_eq!(geometry_from(geometry_word(&g), 1_000_000, 1000), Ok(g));
        assert!(geometry_from(3, 1, 10).is_err());
        assert!(geometry_from(geometry_word(&g), 1, 0).is_err());
        assert!(geometry_from(1 | 12 << 8, 1, 10).is_err());
        assert!(geometry_from(geometry_word(&g) | 1 << 20, 1, 10).is_err());
    }
}

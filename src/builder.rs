//! Choosing a wheel's geometry: levels, capacity and the starting tick.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::geometry::{
    COARSE_DEFAULT_LEVELS, COARSE_MAX_LEVELS, EXACT_DEFAULT_LEVELS, EXACT_MAX_LEVELS,
};
use crate::raw::RawWheel;
use crate::{Mode, Wheel};

/// Builds a [`Wheel`] with other than the default geometry.
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// let mut wheel: Wheel<char> = Wheel::builder(Mode::Exact).levels(4).capacity(2).start(1_000).build().unwrap();
/// assert_eq!(wheel.now(), 1_000);
/// wheel.insert(1_001, 'a').unwrap();
/// wheel.insert(1_002, 'b').unwrap();
/// assert_eq!(wheel.insert(1_003, 'c').unwrap_err().into_inner(), 'c');
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    mode: Mode,
    levels: Option<usize>,
    capacity: Option<usize>,
    start: u64,
}

impl Builder {
    /// A builder for a wheel in `mode` with the default geometry; same as [`Wheel::builder`].
    pub fn new(mode: Mode) -> Self {
        Builder {
            mode,
            levels: None,
            capacity: None,
            start: 0,
        }
    }

    /// Levels below the overflow list: 1 to 11 in Exact mode (default 6), 1 to 20 in Coarse mode
    /// (default 9).
    pub fn levels(mut self, levels: usize) -> Self {
        self.levels = Some(levels);
        self
    }

    /// Bounds the wheel to `capacity` pending timers; an insert beyond it fails with
    /// [`Full`](crate::Full), which hands the value back. 1 to `2^32 - 2048`:
    /// [`build`](Self::build) refuses 0, a wheel that would refuse every insert.
    ///
    /// A bounded wheel reserves address space for all its entries at once (32 bytes a timer for a
    /// `u64` payload; memory is touched only as entries are first used, or by
    /// [`Wheel::reserve`](crate::Wheel::reserve)), so finding an entry
    /// takes no chunk table and the entries never move. If the allocator refuses that
    /// reservation, the wheel keeps its entries in chunks that grow, as an unbounded one does.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// The tick the clock starts at (default 0).
    pub fn start(mut self, tick: u64) -> Self {
        self.start = tick;
        self
    }

    /// The wheel, or why the geometry is out of range.
    pub fn build<T>(self) -> Result<Wheel<T>, BuildError> {
        let levels = self.checked_levels()?;
        if let Some(capacity) = self.capacity {
            if capacity == 0 || capacity > MAX_CAPACITY {
                return Err(BuildError::Capacity {
                    capacity,
                    max: MAX_CAPACITY,
                });
            }
        }
        let seed = RandomState::new().hash_one(self.start) as u32;
        Ok(Wheel::from_parts(
            self.mode,
            levels,
            self.capacity,
            self.start,
            seed,
        ))
    }

    /// A [`RawWheel`] (a wheel over the caller's own storage) with this mode, levels and start,
    /// or why the levels are out of range. The capacity is the caller's storage's, so it is not
    /// used.
    pub fn build_raw(self) -> Result<RawWheel, BuildError> {
        let levels = self.checked_levels()?;
        Ok(RawWheel::from_parts(self.mode, levels, self.start))
    }

    /// The levels asked for, or the mode's default, if in range.
    fn checked_levels(&self) -> Result<usize, BuildError> {
        let (default, max) = match self.mode {
            Mode::Exact => (EXACT_DEFAULT_LEVELS, EXACT_MAX_LEVELS),
            Mode::Coarse => (COARSE_DEFAULT_LEVELS, COARSE_MAX_LEVELS),
        };
        let levels = self.levels.unwrap_or(default);
        if levels == 0 || levels > max {
            return Err(BuildError::Levels {
                mode: self.mode,
                levels,
                max,
            });
        }
        Ok(levels)
    }
}

/// Timers are indexed by `u32` (`u32::MAX` marks the end of a list), in chunks of 2048.
const MAX_CAPACITY: usize = crate::slab::MAX_ENTRIES;

/// Why [`Builder::build`] refused a geometry.
///
/// More reasons may be added, so the enum is `#[non_exhaustive]`; the predicates
/// ([`is_levels`](Self::is_levels), [`is_capacity`](Self::is_capacity)) keep working as it grows.
///
/// ```
/// use tickwheel::{Mode, Wheel};
///
/// let err = Wheel::builder(Mode::Exact).levels(12).build::<()>().unwrap_err();
/// assert!(err.is_levels());
/// assert_eq!(err.to_string(), "Exact wheel needs 1 to 11 levels, not 12");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The number of levels is zero or above what the mode supports.
    Levels {
        /// The mode asked for.
        mode: Mode,
        /// The levels asked for.
        levels: usize,
        /// The most the mode supports.
        max: usize,
    },
    /// The capacity is zero or does not fit the `u32` slab index.
    Capacity {
        /// The capacity asked for.
        capacity: usize,
        /// The largest capacity supported (the smallest is 1).
        max: usize,
    },
}

impl BuildError {
    /// True if the number of levels was refused.
    pub fn is_levels(&self) -> bool {
        matches!(self, BuildError::Levels { .. })
    }

    /// True if the capacity was refused.
    pub fn is_capacity(&self) -> bool {
        matches!(self, BuildError::Capacity { .. })
    }
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::Levels { mode, levels, max } => {
                write!(f, "{mode:?} wheel needs 1 to {max} levels, not {levels}")
            }
            BuildError::Capacity { capacity, max } => {
                write!(f, "capacity must be 1 to {max}, not {capacity}")
            }
        }
    }
}

impl std::error::Error for BuildError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_checked() {
        assert!(
            Builder::new(Mode::Exact)
                .levels(0)
                .build::<()>()
                .unwrap_err()
                .is_levels()
        );
        assert!(
            Builder::new(Mode::Exact)
                .levels(12)
                .build::<()>()
                .unwrap_err()
                .is_levels()
        );
        assert!(
            Builder::new(Mode::Coarse)
                .levels(21)
                .build::<()>()
                .unwrap_err()
                .is_levels()
        );
        assert!(Builder::new(Mode::Coarse).levels(20).build::<()>().is_ok());
        assert!(Builder::new(Mode::Exact).levels(11).build::<()>().is_ok());
        let err = Builder::new(Mode::Exact)
            .capacity(usize::MAX)
            .build::<()>()
            .unwrap_err();
        assert!(err.is_capacity());
        assert_eq!(Wheel::<()>::new(Mode::Coarse).levels(), 9);
    }

    #[test]
    fn zero_capacity_is_refused() {
        // A wheel bounded to no timers would refuse every insert: refuse it when it is built.
        let err = Builder::new(Mode::Coarse)
            .capacity(0)
            .build::<()>()
            .expect_err("capacity 0 must be refused");
        assert!(err.is_capacity());
        assert_eq!(
            err.to_string(),
            format!("capacity must be 1 to {MAX_CAPACITY}, not 0")
        );
        assert!(Builder::new(Mode::Coarse).capacity(1).build::<()>().is_ok());
        assert_eq!(Wheel::<()>::new(Mode::Exact).levels(), 6);
    }
}

//! [`Instant`]: the time module's clock reading, a newtype over [`std::time::Instant`] with the
//! methods of `tokio::time::Instant`, so code written for tokio compiles unchanged.
//!
//! It is `std::time::Instant::now`; with the `test-util` feature it is tokio's clock, that of the
//! runtime the thread is in (paused, advanced or resumed as tokio's test clock; while no runtime
//! was ever paused, std's plus one load). A `std::time::Instant` converts both ways (`From`,
//! [`Instant::from_std`], [`Instant::into_std`]), and so does `tokio::time::Instant` through it; a
//! paused or advanced clock is the only case where `now` disagrees with std's.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

use crate::clock::time_now;

/// A measurement of the time module's monotonic clock (see the [module](super) docs and
/// [`super::pause`]).
///
/// ```
/// use tickwheel_percpu::time::{Duration, Instant};
/// let start = Instant::now();
/// let later = start + Duration::from_millis(5);
/// assert_eq!(later - start, Duration::from_millis(5));
/// assert_eq!(later.into_std(), std::time::Instant::from(later));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    std: std::time::Instant,
}

impl Instant {
    /// The current time (under `test-util`, the runtime's clock: the frozen time while paused).
    pub fn now() -> Instant {
        Instant { std: time_now() }
    }

    /// An `Instant` from a `std::time::Instant`.
    pub fn from_std(std: std::time::Instant) -> Instant {
        Instant { std }
    }

    /// The `std::time::Instant` this is.
    pub fn into_std(self) -> std::time::Instant {
        self.std
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// Time from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(&self, earlier: Instant) -> Option<Duration> {
        self.std.checked_duration_since(earlier.std)
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// Time since `self`, by [`Instant::now`].
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(*self)
    }

    /// `self + duration`, or `None` on overflow.
    pub fn checked_add(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_add(duration).map(Instant::from_std)
    }

    /// `self - duration`, or `None` on overflow.
    pub fn checked_sub(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_sub(duration).map(Instant::from_std)
    }
}

impl From<std::time::Instant> for Instant {
    fn from(std: std::time::Instant) -> Instant {
        Instant::from_std(std)
    }
}

impl From<Instant> for std::time::Instant {
    fn from(value: Instant) -> std::time::Instant {
        value.into_std()
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Panics on overflow, like `std::time::Instant`'s.
    #[track_caller]
    fn add(self, other: Duration) -> Instant {
        Instant::from_std(self.std + other)
    }
}

impl AddAssign<Duration> for Instant {
    #[track_caller]
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// Zero if `rhs` is later (as `tokio::time::Instant`'s).
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    /// Panics on overflow, like `std::time::Instant`'s.
    #[track_caller]
    fn sub(self, rhs: Duration) -> Instant {
        Instant::from_std(self.std - rhs)
    }
}

impl SubAssign<Duration> for Instant {
    #[track_caller]
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.std.fmt(f)
    }
}

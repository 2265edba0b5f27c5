//! Errors that hand the value back, and the error that names a refused configuration field.

use std::error::Error;
use std::fmt;
use std::io;

/// Why [`bases`](crate::bases), [`base`](crate::base) or [`Runtime::start`](crate::Runtime::start)
/// refused its configuration: the field and the range it must be in. It arrives as the source of
/// an `io::Error` of kind `InvalidInput`; find it with `err.get_ref()` and `downcast_ref`.
///
/// ```
/// use tickwheel_percpu::{Config, ConfigError, base};
///
/// let err = base::<u32>(Config::default().reserve_capacity(0)).unwrap_err();
/// let config = err.get_ref().and_then(|e| e.downcast_ref::<ConfigError>()).unwrap();
/// assert_eq!(config.field(), "reserve_capacity");
/// assert_eq!(err.to_string(), "reserve_capacity must be in 1..=2^20");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    field: &'static str,
    expected: &'static str,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, expected: &'static str) -> Self {
        ConfigError { field, expected }
    }

    /// The refused field of [`Config`](crate::Config) (`"tick"`, `"wheel_capacity"`,
    /// `"reserve_capacity"`), or `"n"` for the number of bases.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What the field must be, for instance `"in 1..=2^20"`.
    pub fn expected(&self) -> &'static str {
        self.expected
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} must be {}", self.field, self.expected)
    }
}

impl Error for ConfigError {}

impl From<ConfigError> for io::Error {
    fn from(e: ConfigError) -> Self {
        io::Error::new(io::ErrorKind::InvalidInput, e)
    }
}

/// A schedule that did not happen; the payload comes back inside.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError<T> {
    /// A schedule from another thread found the target base's reserve of free slots empty; its
    /// owner refills it (to `Config::reserve_capacity` slots) at every turn. Retry after that turn
    /// or shed load.
    ReserveEmpty(T),
    /// The base has no free slot: `Config::wheel_capacity` (or the default table size) is in use.
    Full(T),
    /// No base with that index in this set (or the calling thread runs no base of this payload
    /// type).
    NoSuchBase(T),
    /// The base was dropped (for instance its runtime was shut down): nothing will fire there.
    Closed(T),
}

impl<T> ScheduleError<T> {
    /// The payload that was not scheduled.
    pub fn into_inner(self) -> T {
        match self {
            Self::ReserveEmpty(v) | Self::Full(v) | Self::NoSuchBase(v) | Self::Closed(v) => v,
        }
    }

    /// True for [`ScheduleError::ReserveEmpty`].
    pub fn is_reserve_empty(&self) -> bool {
        matches!(self, Self::ReserveEmpty(_))
    }

    /// True for [`ScheduleError::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, Self::Full(_))
    }

    /// True for [`ScheduleError::NoSuchBase`].
    pub fn is_no_such_base(&self) -> bool {
        matches!(self, Self::NoSuchBase(_))
    }

    /// True for [`ScheduleError::Closed`].
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Closed(_))
    }

    fn describe(&self) -> &'static str {
        match self {
            Self::ReserveEmpty(_) => {
                "the target base has no slot set aside for other threads until its owner turns"
            }
            Self::Full(_) => "the base has no free timer slot",
            Self::NoSuchBase(_) => "no such base",
            Self::Closed(_) => "the base is closed",
        }
    }
}

impl<T> fmt::Debug for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::ReserveEmpty(_) => "ReserveEmpty",
            Self::Full(_) => "Full",
            Self::NoSuchBase(_) => "NoSuchBase",
            Self::Closed(_) => "Closed",
        };
        f.debug_tuple(name).finish_non_exhaustive()
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

impl<T> Error for ScheduleError<T> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn predicates_and_value_back() {
        let e = ScheduleError::ReserveEmpty(7);
        assert!(e.is_reserve_empty() && !e.is_full() && !e.is_no_such_base());
        assert_eq!(e.into_inner(), 7);
        let e = ScheduleError::NoSuchBase("x");
        assert!(e.is_no_such_base());
        assert_eq!(e.to_string(), "no such base");
        assert_eq!(ScheduleError::Full(1).into_inner(), 1);
    }
}

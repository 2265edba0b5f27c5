//! What can go wrong creating, opening and using a shared set.

use std::fmt;
use std::io;

/// Why a set could not be created, opened or advanced.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is out of range (says which part).
    InvalidConfig(&'static str),
    /// The file does not start with the timer-set magic: not a timer set (or one whose creator
    /// has not finished writing the header).
    NotATimerSet,
    /// A timer set of a layout version this build does not read.
    Version {
        /// Version in the file.
        found: u64,
        /// Version this build reads.
        supported: u64,
    },
    /// The file is shorter than its header says.
    Truncated {
        /// Bytes the header says the set takes.
        expected: u64,
        /// Bytes in the file.
        actual: u64,
    },
    /// The header's size disagrees with the file's size or with its own geometry.
    SizeMismatch {
        /// Bytes the header says (or, for a header that contradicts itself, its geometry needs).
        expected: u64,
        /// Bytes found.
        actual: u64,
    },
    /// A header field is out of range (says which).
    BadHeader(&'static str),
    /// Another live process advances this set.
    Busy {
        /// That process.
        owner_pid: u32,
    },
    /// Every record of the process registry is taken (1024 records; the owner clears the records
    /// of dead processes when it looks for them, every 100 ms while it turns).
    RegistryFull,
    /// A shared word holds a value no correct process writes (says which): the set's memory was
    /// overwritten.
    Corrupt(&'static str),
    /// A system call failed.
    Io(io::Error),
}

impl Error {
    /// True for every way a file can fail to be a readable set of this version.
    pub fn is_bad_file(&self) -> bool {
        matches!(
            self,
            Error::NotATimerSet
                | Error::Version { .. }
                | Error::Truncated { .. }
                | Error::SizeMismatch { .. }
                | Error::BadHeader(_)
                | Error::Corrupt(_)
        )
    }

    /// True for [`Error::Busy`].
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(why) => write!(f, "invalid shared timer set configuration: {why}"),
            Error::NotATimerSet => f.write_str("not a tickwheel shared timer set (bad magic)"),
            Error::Version { found, supported } => write!(
                f,
                "shared timer set of layout version {found}; this build reads version {supported}"
            ),
            Error::Truncated { expected, actual } => write!(
                f,
                "shared timer set truncated: header says {expected} bytes, file has {actual}"
            ),
            Error::SizeMismatch { expected, actual } => write!(
                f,
                "shared timer set size mismatch: expected {expected} bytes, found {actual}"
            ),
            Error::BadHeader(why) => write!(f, "shared timer set header is invalid: {why}"),
            Error::Busy { owner_pid } => {
                write!(f, "process {owner_pid} is advancing this timer set")
            }
            Error::RegistryFull => f.write_str("the timer set's process registry is full"),
            Error::Corrupt(what) => write!(f, "shared timer set is corrupt: {what}"),
            Error::Io(e) => write!(f, "shared timer set: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// A schedule that did not happen; the payload comes back inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// Every slot was in use.
    Full(u64),
    /// The free stack holds links no correct process writes (the set's memory was overwritten):
    /// nothing was scheduled. The owner's next recovery cuts the stack and re-issues its slots.
    Corrupt(u64),
}

impl ScheduleError {
    /// The payload that was not scheduled.
    pub fn into_inner(self) -> u64 {
        match self {
            ScheduleError::Full(p) | ScheduleError::Corrupt(p) => p,
        }
    }

    /// True if every slot was in use.
    pub fn is_full(&self) -> bool {
        matches!(self, ScheduleError::Full(_))
    }

    /// True if the set was found overwritten.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, ScheduleError::Corrupt(_))
    }
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Full(_) => "every slot of the shared timer set is in use",
            ScheduleError::Corrupt(_) => "the shared timer set's free stack is corrupt",
        })
    }
}

impl std::error::Error for ScheduleError {}

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

/// A schedule that found every slot in use; the payload comes back inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full(pub u64);

impl Full {
    /// The payload that was not scheduled.
    pub fn into_inner(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("every slot of the shared timer set is in use")
    }
}

impl std::error::Error for Full {}

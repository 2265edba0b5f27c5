//! The `Date` response header (RFC 9110 §6.6.1: an origin server with a clock sends one).
//!
//! Model: each core keeps a [`DateCache`] holding the current second formatted as an
//! IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, by httpdate); the loop refreshes it once per
//! turn, which formats only when the second has changed, into a fixed buffer (no allocation).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use httpdate::HttpDate;

/// Length of an IMF-fixdate.
pub(crate) const DATE_LEN: usize = 29;

/// Formats `unix_secs` as an IMF-fixdate.
fn http_date(unix_secs: u64) -> [u8; DATE_LEN] {
    let mut out = [0u8; DATE_LEN];
    let date = HttpDate::from(UNIX_EPOCH + Duration::from_secs(unix_secs));
    write!(&mut out[..], "{date}").expect("an IMF-fixdate is 29 bytes");
    out
}

/// The current second, formatted; refreshed by its core's loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DateCache {
    unix_secs: u64,
    text: [u8; DATE_LEN],
}

impl DateCache {
    /// A cache holding the current time.
    pub(crate) fn new() -> Self {
        let unix_secs = unix_now();
        DateCache {
            unix_secs,
            text: http_date(unix_secs),
        }
    }

    /// Re-reads the wall clock; formats again only when the second changed.
    pub(crate) fn refresh(&mut self) {
        let now = unix_now();
        if now != self.unix_secs {
            self.unix_secs = now;
            self.text = http_date(now);
        }
    }

    /// The formatted date.
    pub(crate) fn text(&self) -> &[u8; DATE_LEN] {
        &self.text
    }
}

/// Seconds since the Unix epoch (0 if the wall clock is set before it).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_dates() {
        let date = |secs| String::from_utf8(http_date(secs).to_vec()).unwrap();
        assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT"); // RFC 9110's example
        assert_eq!(date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT"); // leap day, century
        assert_eq!(date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
    }
}

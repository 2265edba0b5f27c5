//! The `Date` response header (RFC 9110 §6.6.1: an origin server with a clock sends one).
//!
//! Model: each core keeps a [`DateCache`] holding the current second formatted as an
//! IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`); the loop refreshes it once per turn, which
//! formats only when the second has changed. Formatting is plain civil-calendar arithmetic on the
//! Unix time (proleptic Gregorian, days counted from 1970-01-01), no time-zone data needed.

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate.
pub(crate) const DATE_LEN: usize = 29;

const DAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const SECS_PER_DAY: u64 = 86_400;

/// (year, month 1-12, day 1-31) of `days` since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes `n` as exactly `out.len()` decimal digits (zero-padded; higher digits dropped).
fn put_digits(out: &mut [u8], mut n: u64) {
    for byte in out.iter_mut().rev() {
        *byte = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Formats `unix_secs` as an IMF-fixdate.
pub(crate) fn http_date(unix_secs: u64) -> [u8; DATE_LEN] {
    let days = unix_secs / SECS_PER_DAY;
    let second_of_day = unix_secs % SECS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[0..3].copy_from_slice(DAYS[((days + 4) % 7) as usize]); // 1970-01-01 was a Thursday
    put_digits(&mut out[5..7], day);
    out[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    put_digits(&mut out[12..16], year);
    put_digits(&mut out[17..19], second_of_day / 3600);
    put_digits(&mut out[20..22], second_of_day / 60 % 60);
    put_digits(&mut out[23..25], second_of_day % 60);
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

    fn date(secs: u64) -> String {
        String::from_utf8(http_date(secs).to_vec()).unwrap()
    }

    #[test]
    fn formats_known_dates() {
        assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT"); // RFC 9110's example
        assert_eq!(date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT"); // leap day, century
        assert_eq!(date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
    }

    #[test]
    fn civil_days_round_trip_over_four_centuries() {
        // Consecutive days must advance the date by exactly one calendar day.
        let mut previous = civil_from_days(0);
        for days in 1..146_097 {
            let (y, m, d) = civil_from_days(days);
            let (py, pm, pd) = previous;
            let next_day = (y, m) == (py, pm) && d == pd + 1;
            let next_month = y == py && m == pm + 1 && d == 1;
            let next_year = y == py + 1 && (m, d) == (1, 1) && (pm, pd) == (12, 31);
            assert!(
                next_day || next_month || next_year,
                "{previous:?} -> {:?}",
                (y, m, d)
            );
            previous = (y, m, d);
        }
    }

    #[test]
    fn cache_holds_a_well_formed_date() {
        let mut cache = DateCache::new();
        cache.refresh();
        let text = cache.text();
        assert_eq!(&text[3..5], b", ");
        assert_eq!(&text[26..], b"GMT");
    }
}

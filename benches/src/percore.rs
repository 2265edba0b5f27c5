//! Multi-core figures: per-core scaling of the keepalive load against lock-based designs, and how
//! late the timerfd driver fires next to a bare timerfd.
//!
//! # Model
//! Every thread is pinned to its own core with `core_affinity`; a pin that fails is an error, not
//! a silent fallback, because an unpinned run measures the scheduler. All threads start together
//! (each keeps turning its base while it waits for the others) and each times its own phase.
//!
//! - Scaling ([`keepalive`]): each thread holds `per_core` keepalive timers (30 to 60 s out) and
//!   refreshes random ones; a share of its connections have their timer on the next core. The
//!   same load runs on the percpu bases (a remote refresh goes through the `Remote`), on a wheel
//!   per core behind a `std` or `parking_lot` mutex, on one wheel behind one global mutex, and
//!   (one thread) on a bare wheel. Every 64 refreshes a thread does its core's timer work. Ideal
//!   scaling is N times the single-core rate.
//! - Timeliness: timers one to ten milliseconds out, one at a time, on a pinned thread that parks
//!   on the base's fd; lateness is the wall time from the deadline to the handler. The floor is a
//!   `timerfd` armed (absolute, `CLOCK_MONOTONIC`) at each deadline and read from the same thread.
//!
//! # What was given up
//! Two cores is all this machine has, so scaling is measured at one and two threads; other
//! processes share those cores, so the figures carry their noise.

use crate::rng::SplitMix64;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tickwheel_percpu::{Config, Mode};

pub mod keepalive;
pub mod pingpong;

pub use keepalive::{CoreRun, Design, Load};

/// The cores this process may run on, read once: `core_affinity` reads the calling thread's
/// mask, which shrinks to one core as soon as that thread is pinned.
fn cores() -> &'static [core_affinity::CoreId] {
    static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// Pins the calling thread to core `index` of the enumerated cores.
pub fn pin(index: usize) -> Result<(), String> {
    let cores = cores();
    let core = *cores
        .get(index)
        .ok_or(format!("no core #{index} (have {})", cores.len()))?;
    if core_affinity::set_for_current(core) {
        Ok(())
    } else {
        Err(format!("pinning to core {} failed", core.id))
    }
}

/// Number of cores threads can be pinned to. Call it once before pinning any thread.
pub fn available_cores() -> usize {
    cores().len()
}

/// Percentiles of a set of lateness samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatenessSummary {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

/// Exact percentiles (nearest rank) of `samples`.
pub fn summarize(samples: &mut [Duration]) -> Option<LatenessSummary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank =
        |p: f64| samples[((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    Some(LatenessSummary {
        count: samples.len(),
        p50: rank(0.50),
        p99: rank(0.99),
        max: samples[samples.len() - 1],
    })
}

/// Delays of the timeliness runs: one to ten milliseconds.
fn timeliness_delays(timers: usize, seed: u64) -> Vec<Duration> {
    let mut rng = SplitMix64::new(seed);
    (0..timers)
        .map(|_| Duration::from_micros(rng.between(1_000, 10_000)))
        .collect()
}

/// Lateness of the per-core timerfd driver: one base, one timer at a time, parked on its fd.
/// Also returns the base's own lateness statistics.
pub fn driver_lateness(
    mode: Mode,
    tick: Duration,
    timers: usize,
    seed: u64,
) -> Result<(LatenessSummary, tickwheel_percpu::Lateness), String> {
    pin(0)?;
    let config = Config::default().mode(mode).tick(tick);
    let (mut bases, _remote) =
        tickwheel_percpu::bases::<u64>(1, config).map_err(|e| e.to_string())?;
    let mut base = bases.pop().ok_or("no base")?;
    let mut samples = Vec::with_capacity(timers);
    for (i, delay) in timeliness_delays(timers, seed).into_iter().enumerate() {
        let deadline = Instant::now() + delay;
        base.schedule_after(delay, i as u64)
            .map_err(|e| format!("schedule: {e}"))?;
        let mut fired = false;
        while !fired {
            base.park(Some(Duration::from_millis(100)))
                .map_err(|e| format!("park: {e}"))?;
            base.turn(|_| {
                samples.push(Instant::now().saturating_duration_since(deadline));
                fired = true;
            });
        }
    }
    let own = base.stats().lateness;
    Ok((summarize(&mut samples).ok_or("no samples")?, own))
}

/// Lateness of a bare `timerfd` armed at each deadline: the floor on this machine.
pub fn timerfd_floor(timers: usize, seed: u64) -> Result<LatenessSummary, String> {
    pin(0)?;
    let fd = raw::TimerFd::new().map_err(|e| format!("timerfd: {e}"))?;
    let mut samples = Vec::with_capacity(timers);
    for delay in timeliness_delays(timers, seed) {
        let (now, now_ns) = raw::now_pair().map_err(|e| format!("clock: {e}"))?;
        let deadline = now + delay;
        fd.arm_at_ns(now_ns + delay.as_nanos() as u64)
            .map_err(|e| format!("arm: {e}"))?;
        fd.wait().map_err(|e| format!("read: {e}"))?;
        samples.push(Instant::now().saturating_duration_since(deadline));
    }
    summarize(&mut samples).ok_or_else(|| "no samples".into())
}

/// The three syscalls the floor needs, each wrapped once.
mod raw {
    use std::io;
    use std::time::Instant;

    fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(ret)
        }
    }

    /// `CLOCK_MONOTONIC` in nanoseconds, with the `Instant` read just before it (std's `Instant`
    /// is the same clock on Linux; the two reads are tens of nanoseconds apart).
    pub(super) fn now_pair() -> io::Result<(Instant, u64)> {
        let instant = Instant::now();
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        check(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) })?;
        Ok((
            instant,
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        ))
    }

    /// An owned `timerfd` on `CLOCK_MONOTONIC`.
    pub(super) struct TimerFd(libc::c_int);

    impl TimerFd {
        pub(super) fn new() -> io::Result<Self> {
            // SAFETY: plain syscall with constant flags; the result is checked.
            let fd =
                check(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) })?;
            Ok(TimerFd(fd))
        }

        /// Arms a one-shot expiry at absolute `CLOCK_MONOTONIC` nanoseconds.
        pub(super) fn arm_at_ns(&self, at_ns: u64) -> io::Result<()> {
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                    tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
                },
            };
            // SAFETY: `self.0` is an open timerfd we own; `spec` is valid for reading and the old
            // value pointer may be null.
            check(unsafe {
                libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
            })?;
            Ok(())
        }

        /// Blocks until the timer has expired.
        pub(super) fn wait(&self) -> io::Result<()> {
            let mut expirations = 0u64;
            loop {
                // SAFETY: `self.0` is an open timerfd; the buffer is 8 writable bytes, the size a
                // timerfd read returns.
                let n = unsafe { libc::read(self.0, (&mut expirations as *mut u64).cast(), 8) };
                if n == 8 {
                    return Ok(());
                }
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }

    impl Drop for TimerFd {
        fn drop(&mut self) {
            // SAFETY: we own the descriptor and close it once.
            unsafe { libc::close(self.0) };
        }
    }
}

/// What keeps the timers in the memory comparison of the per-core section.
pub const MEMORY_DESIGNS: [&str; 2] = ["percpu", "mutex-wheel"];

/// Bytes per pending timer with a `u64` payload, `n` of them 30-60 s out, as resident memory
/// growth across the scheduling: on one per-core base (`percpu`) or on a `tickwheel::Wheel`
/// behind a `std::sync::Mutex` (`mutex-wheel`). Run in a fresh process (the runner re-executes
/// itself), so earlier sections' memory does not count. Both are built before the first reading,
/// so only what the timers themselves take is measured.
pub fn bytes_per_pending_timer(design: &str, n: usize) -> Result<f64, String> {
    use crate::mem::rss_bytes;
    let mut rng = SplitMix64::new(0x5EED);
    let delay = |rng: &mut SplitMix64| Duration::from_millis(30_000 + rng.below(30_000));
    let rss = || rss_bytes().ok_or("no VmRSS");
    match design {
        "percpu" => {
            let mut base = tickwheel_percpu::base::<u64>(Config::default())
                .map_err(|e| format!("base: {e}"))?;
            let before = rss()?;
            for i in 0..n as u64 {
                base.schedule_after(delay(&mut rng), i)
                    .map_err(|e| format!("schedule {i}: {e:?}"))?;
            }
            let after = rss()?;
            std::hint::black_box(&base);
            Ok(after.saturating_sub(before) as f64 / n as f64)
        }
        "mutex-wheel" => {
            let wheel = std::sync::Mutex::new(tickwheel::Wheel::<u64>::new(Mode::Coarse));
            let start = Instant::now();
            let before = rss()?;
            for i in 0..n as u64 {
                let at = start.elapsed() + delay(&mut rng);
                let tick = at.as_millis() as u64;
                wheel
                    .lock()
                    .map_err(|_| "poisoned")?
                    .insert(tick, i)
                    .map_err(|_| format!("insert {i}: full"))?;
            }
            let after = rss()?;
            std::hint::black_box(&wheel);
            Ok(after.saturating_sub(before) as f64 / n as f64)
        }
        other => Err(format!("no per-core memory design named {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let s = summarize(&mut v).expect("samples");
        assert_eq!(s.p50, Duration::from_micros(50));
        assert_eq!(s.p99, Duration::from_micros(99));
        assert_eq!(s.max, Duration::from_micros(100));
        assert_eq!(summarize(&mut []), None);
    }

    #[test]
    fn timerfd_floor_measures_every_timer() {
        let s = timerfd_floor(3, 1).expect("timerfd works here");
        assert_eq!(s.count, 3);
    }
}

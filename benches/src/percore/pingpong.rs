//! The machine's floor for a cross-core operation: one cache line bounced between two pinned
//! threads.
//!
//! # Model
//! Thread A (core 0) stores an odd counter value in a shared, cache-padded word and spins until
//! thread B (core 1) answers with the next even value; B spins for each odd value and answers.
//! Every store must travel to the other core's cache before the other thread can see it, so a
//! round trip is two one-way transfers of the line, and `elapsed / (2 * round trips)` is the
//! one-way latency a remote timer operation cannot beat. The keepalive scaling section reports a
//! remote refresh as a multiple of this figure, measured in the same run.
//!
//! # Given up
//! The figure includes the spin loop's own exit (a load and a compare) on each side; against a
//! transfer of 100-300 ns that is noise.

use std::hint::spin_loop;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::pin;

/// Set by the asker to make the answerer stop (its own pin failed).
const STOP: u64 = u64::MAX;

/// One-way cache-line transfer between cores `a` and `b` (indices into the enumerated cores),
/// averaged over `round_trips` round trips. Errors: a pin failed.
pub fn one_way(a: usize, b: usize, round_trips: u64) -> Result<Duration, String> {
    let line = Arc::new(CachePadded::new(AtomicU64::new(0)));
    // 0: the answerer is pinning; 1: pinned; 2: its pin failed.
    let ready = Arc::new(AtomicU8::new(0));
    let (theirs, their_ready) = (line.clone(), ready.clone());
    let answerer = std::thread::spawn(move || -> Result<(), String> {
        let pinned = pin(b);
        their_ready.store(if pinned.is_ok() { 1 } else { 2 }, Ordering::Release);
        pinned?;
        for i in 0..round_trips {
            let ask = 2 * i + 1;
            // Acquire/Release cost nothing on x86 and keep the exchange honest elsewhere: each
            // side acts on the other's value only once it has travelled.
            loop {
                match theirs.load(Ordering::Acquire) {
                    v if v == ask => break,
                    STOP => return Ok(()),
                    _ => spin_loop(),
                }
            }
            theirs.store(ask + 1, Ordering::Release);
        }
        Ok(())
    });
    let asked = pin(a).and_then(|()| {
        let answerer_ready = loop {
            match ready.load(Ordering::Acquire) {
                0 => spin_loop(),
                r => break r == 1,
            }
        };
        if !answerer_ready {
            return Err("the answering thread could not pin".to_string());
        }
        let start = Instant::now();
        for i in 0..round_trips {
            let ask = 2 * i + 1;
            line.store(ask, Ordering::Release);
            while line.load(Ordering::Acquire) != ask + 1 {
                spin_loop();
            }
        }
        Ok(start.elapsed())
    });
    if asked.is_err() {
        line.store(STOP, Ordering::Release);
    }
    let answered = answerer
        .join()
        .map_err(|_| "ping-pong thread panicked".to_string())?;
    let elapsed = asked?;
    answered?;
    Ok(elapsed / (2 * round_trips.max(1)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_something_between_two_cores() {
        if super::super::available_cores() < 2 {
            return;
        }
        let d = one_way(0, 1, 2_000).expect("two cores pin");
        assert!(d > Duration::ZERO, "{d:?}");
        assert!(
            one_way(0, 99_999, 10).is_err(),
            "a core that does not exist is an error"
        );
    }
}

//! A sleep reset again and again from another thread than its base's while the base turns: the
//! first drain fires its arming, a reset files a new one through the cross-core path, the turn's
//! notices file it and the second drain fires it too. A cell never has a third arming
//! outstanding (a debug build asserted in the resetting task when the turn counted its payloads
//! down only after it returned).

#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use tickwheel_percpu::time::{self, Duration, Instant, Sleep, Timers};

/// Polls a future once with a waker that does nothing.
fn poll_once(sleep: &mut Sleep) -> Poll<()> {
    std::pin::Pin::new(sleep).poll(&mut Context::from_waker(Waker::noop()))
}

use std::future::Future;

#[test]
fn resets_during_one_turn_never_make_a_third_arming() {
    let timers = Timers::new(1).unwrap();
    let _on_base = timers.enter(0).unwrap();
    time::pause();
    for _round in 0..5 {
        let start = Instant::now();
        // The first to fire, then many others, so both drains and the deliveries take a while.
        let mut moved = time::sleep_until(start + Duration::from_millis(1));
        assert!(poll_once(&mut moved).is_pending());
        let mut crowd: Vec<Sleep> = (0..20_000)
            .map(|_| time::sleep_until(start + Duration::from_millis(2)))
            .collect();
        for s in &mut crowd {
            assert!(poll_once(s).is_pending());
        }
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let resetter = std::thread::spawn(move || {
            // Relaxed: a stop flag; the join orders the rest.
            while !stop.load(Ordering::Relaxed) {
                moved.reset(Instant::now());
            }
            moved
        });
        std::thread::sleep(std::time::Duration::from_millis(1));
        drop(time::advance(Duration::from_millis(3)));
        // Relaxed: see above.
        done.store(true, Ordering::Relaxed);
        let moved = resetter.join().expect("the resetting thread panicked");
        drop(moved);
        drop(crowd);
        // Everything left fires and is freed.
        drop(time::advance(Duration::from_millis(3)));
        assert_eq!(timers.occupancy(0), Some((0, 0)));
    }
}

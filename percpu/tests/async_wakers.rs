//! Wakers replaced between polls: the latest one is woken, once; earlier ones never.
#![cfg(feature = "tokio")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};

#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count::default());
    (c.clone(), Waker::from(c))
}

fn poll_with(s: &mut time::Sleep, w: &Waker) -> Poll<()> {
    Pin::new(s).poll(&mut Context::from_waker(w))
}

#[test]
fn the_latest_waker_is_woken_once() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let (a, wa) = counting();
            let (b, wb) = counting();
            let (c, wc) = counting();
            let mut s = time::sleep(Duration::from_millis(3));
            assert!(poll_with(&mut s, &wa).is_pending());
            assert!(poll_with(&mut s, &wb).is_pending());
            // Same task twice: no second wake.
            assert!(poll_with(&mut s, &wc).is_pending());
            assert!(poll_with(&mut s, &wc).is_pending());
            time::sleep(Duration::from_millis(20)).await;
            assert_eq!(a.0.load(Ordering::SeqCst), 0);
            assert_eq!(b.0.load(Ordering::SeqCst), 0);
            assert_eq!(c.0.load(Ordering::SeqCst), 1);
            assert!(s.is_elapsed());
            assert!(poll_with(&mut s, &wa).is_ready());
            // After a reset the next fire wakes the waker of the poll after the reset.
            s.reset(Instant::now() + Duration::from_millis(2));
            assert!(!s.is_elapsed());
            assert!(poll_with(&mut s, &wb).is_pending());
            time::sleep(Duration::from_millis(20)).await;
            assert_eq!(b.0.load(Ordering::SeqCst), 1);
            assert_eq!(c.0.load(Ordering::SeqCst), 1);
            assert_eq!(a.0.load(Ordering::SeqCst), 0);
            assert!(poll_with(&mut s, &wb).is_ready());
        })
        .unwrap();
}

#[test]
fn a_dropped_sleep_wakes_nobody() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let (a, wa) = counting();
            let mut s = time::sleep(Duration::from_millis(2));
            assert!(poll_with(&mut s, &wa).is_pending());
            drop(s);
            time::sleep(Duration::from_millis(10)).await;
            assert_eq!(a.0.load(Ordering::SeqCst), 0);
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn reset_moves_the_deadline_both_ways() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let start = Instant::now();
            let mut s = time::sleep(Duration::from_millis(1));
            let (_a, wa) = counting();
            assert!(poll_with(&mut s, &wa).is_pending());
            // Later: must not fire at the old deadline.
            let later = start + Duration::from_millis(15);
            s.reset(later);
            (&mut s).await;
            assert!(Instant::now() >= later);
            // Earlier than the pending one.
            s.reset(Instant::now() + Duration::from_secs(60));
            assert!(poll_with(&mut s, &wa).is_pending());
            let sooner = Instant::now() + Duration::from_millis(2);
            s.reset(sooner);
            (&mut s).await;
            assert!(Instant::now() >= sooner);
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn a_sleep_pushed_later_is_woken_at_the_old_deadline_and_completes_only_at_the_new_one() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let (a, wa) = counting();
            let mut s = time::sleep(Duration::from_millis(2));
            assert!(poll_with(&mut s, &wa).is_pending());
            // Pushed later three times before the filed deadline: only stored.
            for ms in [10, 20, 30] {
                s.reset(Instant::now() + Duration::from_millis(ms));
                assert!(poll_with(&mut s, &wa).is_pending());
            }
            let deadline = s.deadline();
            // The filed arming fires at about 2 ms: one wake, and the poll it causes files the
            // sleep again instead of completing.
            time::sleep(Duration::from_millis(8)).await;
            assert_eq!(a.0.load(Ordering::SeqCst), 1);
            assert!(!s.is_elapsed(), "elapsed at its old deadline");
            if Instant::now() < deadline {
                assert!(poll_with(&mut s, &wa).is_pending(), "completed early");
            }
            // Lost re-arm: the guard's own timer ends the wait.
            assert!(time::timeout(Duration::from_secs(5), &mut s).await.is_ok());
            assert!(Instant::now() >= deadline, "completed early");
            assert!(s.is_elapsed());
            assert!(
                poll_with(&mut s, &wa).is_ready(),
                "once complete, always ready"
            );

            // Pushed later after it fired: pending again until the new deadline.
            let deadline = Instant::now() + Duration::from_millis(5);
            s.reset(deadline);
            assert!(!s.is_elapsed());
            assert!(poll_with(&mut s, &wa).is_pending());
            assert!(time::timeout(Duration::from_secs(5), &mut s).await.is_ok());
            assert!(Instant::now() >= deadline, "completed early");

            // Pushed later, then back to before the filed deadline: the earlier one is moved
            // in, not left waiting for the filed one.
            let start = Instant::now();
            let mut s = time::sleep(Duration::from_secs(2));
            assert!(poll_with(&mut s, &wa).is_pending());
            s.reset(start + Duration::from_secs(4));
            let deadline = start + Duration::from_millis(5);
            s.reset(deadline);
            assert!(time::timeout(Duration::from_secs(1), &mut s).await.is_ok());
            assert!(Instant::now() >= deadline, "completed early");

            // Pushed later, then earlier but still after the filed deadline.
            let start = Instant::now();
            let mut s = time::sleep(Duration::from_millis(2));
            assert!(poll_with(&mut s, &wa).is_pending());
            s.reset(start + Duration::from_secs(60));
            let deadline = start + Duration::from_millis(12);
            s.reset(deadline);
            assert!(time::timeout(Duration::from_secs(5), &mut s).await.is_ok());
            assert!(Instant::now() >= deadline, "completed early");
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

//! The test clock: `pause`, `advance`, `resume`, on the fallback and on `Timers`. Each runtime has
//! a clock of its own, so these tests run in parallel.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tickwheel_percpu::time::{self, Duration, Instant, MissedTickBehavior, Timers};

/// Real time a woken task gets to run (generous: a loaded machine).
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Yields until `done` reaches `want` or `GRACE` of real time passes.
async fn until(done: &AtomicU32, want: u32) -> bool {
    let give_up = std::time::Instant::now() + GRACE;
    while done.load(Ordering::SeqCst) < want {
        if std::time::Instant::now() > give_up {
            return false;
        }
        tokio::task::yield_now().await;
    }
    true
}

/// Sleeps of 10 ms and an hour, a timeout and an interval, moved only by `advance`.
async fn advance_fires_what_comes_due() {
    time::pause();
    let start = Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(Instant::now(), start, "a paused clock moved");
    let done = Arc::new(AtomicU32::new(0));
    let (d1, d2) = (done.clone(), done.clone());
    let short = tokio::spawn(async move {
        time::sleep(Duration::from_millis(10)).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(10));
        d1.fetch_add(1, Ordering::SeqCst);
    });
    let long = tokio::spawn(async move {
        let never = std::future::pending::<()>();
        let out = time::timeout(Duration::from_secs(3600), never).await;
        assert!(out.is_err());
        assert_eq!(Instant::now() - start, Duration::from_secs(3600));
        d2.fetch_add(1, Ordering::SeqCst);
    });
    // Both filed, neither due.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(done.load(Ordering::SeqCst), 0, "fired on a paused clock");
    time::advance(Duration::from_millis(9)).await;
    tokio::task::yield_now().await;
    assert_eq!(done.load(Ordering::SeqCst), 0, "fired early");
    time::advance(Duration::from_millis(1)).await;
    assert!(until(&done, 1).await, "the 10 ms sleep did not fire");
    short.await.unwrap();
    time::advance(Duration::from_secs(3600) - Duration::from_millis(10)).await;
    assert!(until(&done, 2).await, "the hour timeout did not fire");
    long.await.unwrap();

    // An interval ticks once per advance of its period, on schedule.
    let mut every = time::interval(Duration::from_millis(20));
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let first = every.tick().await;
    for k in 1..=5u32 {
        time::advance(Duration::from_millis(20)).await;
        let due = time::timeout(Duration::from_secs(1), every.tick()).await;
        assert_eq!(due, Ok(first + Duration::from_millis(20) * k), "tick {k}");
    }

    time::resume();
    let resumed = Instant::now();
    assert!(resumed >= start + Duration::from_secs(3600) + Duration::from_millis(100));
    // Running again: a real sleep completes by the real clock.
    let real = std::time::Instant::now();
    time::sleep(Duration::from_millis(5)).await;
    assert!(real.elapsed() >= std::time::Duration::from_millis(5));
    assert!(Instant::now() >= resumed + Duration::from_millis(5));
}

#[test]
fn on_the_fallback() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(advance_fires_what_comes_due());
}

#[test]
fn on_timers() {
    let timers = Timers::new(1).unwrap();
    // A paused runtime needs tokio's time driver, as tokio's own timers do.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    timers
        .block_on(0, &rt, advance_fires_what_comes_due())
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

/// Where `f` panicked (file), or `None` if it did not.
fn panic_file(f: impl FnOnce()) -> Option<String> {
    let caught = Arc::new(Mutex::new(None));
    let hook_caught = caught.clone();
    let old = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *hook_caught.lock().unwrap() = info.location().map(|l| l.file().to_owned());
    }));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(old);
    outcome.err()?;
    caught.lock().unwrap().clone()
}

#[test]
fn misuse_panics_at_the_caller() {
    let here = file!();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _in = rt.enter();
    let resume = panic_file(|| {
        time::resume();
    });
    assert_eq!(resume.as_deref(), Some(here), "resume without a pause");
    time::pause();
    let twice = panic_file(|| {
        time::pause();
    });
    time::resume();
    assert_eq!(twice.as_deref(), Some(here), "a second pause");
    let zero = panic_file(|| {
        let _ = time::interval(Duration::ZERO);
    });
    assert_eq!(zero.as_deref(), Some(here), "a zero period");
}

//! The fallback base and `Timers` under hostile use, through the public API only: 10^5 sleeps in
//! flight, resets from other threads while a task waits, drops on other threads and in thread
//! exit, runtimes and `Timers` dropped with sleeps pending, a panicking task and a waker that
//! panics. Every completion is checked against a `std::time::Instant` taken before the call
//! (never early) and a generous lateness bound (a loaded 2-core machine, debug build).
#![cfg(feature = "tokio")]
#![allow(
    clippy::async_yields_async,
    reason = "sleeps are filed inside a runtime and handed out of it"
)]

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant as StdInstant;
use tickwheel_percpu::time::{self, Duration, Instant, Sleep, Timers};

/// Most a wake-up may come after its deadline (never before).
const LATE: Duration = Duration::from_millis(500);

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

fn poll_noop(s: &mut Sleep) -> Poll<()> {
    Pin::new(s).poll(&mut Context::from_waker(Waker::noop()))
}

/// Spawns `n` tasks, task `i` sleeping `1 + i % 200` ms; returns the worst lateness, or the
/// first early completion as an error.
async fn many(n: usize) -> Result<Duration, String> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let delay = Duration::from_millis(1 + (i % 200) as u64);
        set.spawn(async move {
            let before = StdInstant::now();
            time::sleep(delay).await;
            let took = before.elapsed();
            if took < delay {
                return Err(format!("sleep {i} of {delay:?} done after {took:?}"));
            }
            Ok(took - delay)
        });
    }
    let mut worst = Duration::ZERO;
    while let Some(r) = set.join_next().await {
        worst = worst.max(r.unwrap()?);
    }
    Ok(worst)
}

/// Lateness allowed for 10^5 tasks at once: spawning and running them in a debug build on two
/// loaded cores takes seconds by itself, so the bound is the wall time of the whole run.
fn within_run(worst: Duration, run: Duration) {
    assert!(
        worst <= run + LATE,
        "worst lateness {worst:?} in a run of {run:?}"
    );
}

#[test]
fn a_hundred_thousand_sleeps_on_the_fallback() {
    let rt = multi_thread();
    let start = StdInstant::now();
    let worst = rt.block_on(many(100_000)).unwrap();
    within_run(worst, start.elapsed());
    // Still serving after the crowd left.
    let before = StdInstant::now();
    rt.block_on(time::sleep(Duration::from_millis(3)));
    let took = before.elapsed();
    assert!(took >= Duration::from_millis(3) && took < Duration::from_millis(3) + LATE);
}

#[test]
fn a_hundred_thousand_sleeps_on_timers() {
    let timers = Timers::new(1).unwrap();
    let rt = current_thread();
    let start = StdInstant::now();
    let worst = timers.block_on(0, &rt, many(100_000)).unwrap().unwrap();
    within_run(worst, start.elapsed());
    drop(rt);
    assert_eq!(
        timers.occupancy(0),
        Some((0, 0)),
        "cells or timers left behind"
    );
}

/// A sleep shared between a waiting task and a thread that resets it.
type Shared = Arc<Mutex<Sleep>>;

async fn wait(s: Shared) -> StdInstant {
    poll_fn(|cx| Pin::new(&mut *s.lock().unwrap()).poll(cx)).await;
    StdInstant::now()
}

/// Waits on a far sleep, and from a plain thread: moves it earlier (it must complete at the new
/// deadline), later (it must not complete at the old one), to the past (at once).
async fn resets_from_a_plain_thread() {
    let s: Shared = Arc::new(Mutex::new(time::sleep(Duration::from_secs(3600))));
    let waiting = tokio::spawn(wait(s.clone()));
    tokio::task::yield_now().await;
    let deadline = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            let at = StdInstant::now() + Duration::from_millis(20);
            s.lock().unwrap().reset(at.into());
            at
        })
        .join()
        .unwrap()
    };
    let done = waiting.await.unwrap();
    assert!(done >= deadline, "early by {:?}", deadline - done);
    assert!(done - deadline < LATE, "late by {:?}", done - deadline);

    // Near, then pushed back from another thread before it fires.
    s.lock()
        .unwrap()
        .reset(Instant::now() + Duration::from_millis(150));
    let waiting = tokio::spawn(wait(s.clone()));
    tokio::task::yield_now().await;
    {
        let s = s.clone();
        std::thread::spawn(move || {
            s.lock()
                .unwrap()
                .reset(Instant::now() + Duration::from_secs(3600))
        })
        .join()
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "completed at the deadline it was moved away from"
    );

    // To the past, from another thread: completes promptly.
    let before = StdInstant::now();
    {
        let s = s.clone();
        std::thread::spawn(move || {
            s.lock()
                .unwrap()
                .reset(Instant::now() - Duration::from_secs(1))
        })
        .join()
        .unwrap();
    }
    let done = tokio::time::timeout(LATE, waiting).await;
    assert!(
        done.is_ok(),
        "reset to the past from another thread did not complete within {LATE:?} (since {:?})",
        before.elapsed()
    );
}

#[test]
fn resets_from_a_plain_thread_on_the_fallback() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(resets_from_a_plain_thread());
}

#[test]
fn resets_from_a_plain_thread_on_timers() {
    let timers = Timers::new(1).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    timers
        .block_on(0, &rt, resets_from_a_plain_thread())
        .unwrap();
    drop(rt);
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

/// Turns base 0 once by sleeping on it briefly (so cancels sent from other threads are taken).
fn turn(timers: &Timers) {
    let rt = current_thread();
    timers
        .block_on(0, &rt, time::sleep(Duration::from_millis(3)))
        .unwrap();
}

#[test]
fn sleeps_dropped_on_other_threads_and_at_thread_exit_leave_nothing() {
    let timers = Timers::new(1).unwrap();
    let rt = current_thread();
    let sleeps: Vec<Sleep> = timers
        .block_on(0, &rt, async {
            (0..1000)
                .map(|i| {
                    let mut s = time::sleep(Duration::from_secs(60 + i));
                    assert!(poll_noop(&mut s).is_pending());
                    s
                })
                .collect()
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((1000, 1000)));
    std::thread::spawn(move || drop(sleeps)).join().unwrap();

    // Sleeps filed by a thread on its own base, kept in a thread-local and dropped by the
    // thread's exit (while its thread-locals are being torn down).
    thread_local! {
        static KEPT: std::cell::RefCell<Vec<Sleep>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let t = timers.clone();
    std::thread::spawn(move || {
        let _on_base = t.enter(0).unwrap();
        KEPT.with(|k| {
            for i in 0..100 {
                let mut s = time::sleep(Duration::from_secs(60 + i));
                assert!(poll_noop(&mut s).is_pending());
                k.borrow_mut().push(s);
            }
        });
    })
    .join()
    .unwrap();
    turn(&timers);
    assert_eq!(timers.occupancy(0), Some((0, 0)), "left behind");
}

#[test]
fn a_sleep_outlives_the_runtime_that_filed_it_on_the_fallback() {
    let rt = current_thread();
    let deadline = StdInstant::now() + Duration::from_millis(30);
    let mut s = rt.block_on(async move {
        let mut s = time::sleep_until(deadline.into());
        assert!(poll_noop(&mut s).is_pending());
        // Tasks left pending when the runtime goes.
        for _ in 0..100 {
            tokio::spawn(time::sleep(Duration::from_secs(10)));
        }
        tokio::task::yield_now().await;
        s
    });
    drop(rt);
    // The documented deviation: a runtime's shutdown does not stop fallback timers.
    let other = multi_thread();
    other.block_on(&mut s);
    let now = StdInstant::now();
    assert!(now >= deadline && now - deadline < LATE);
}

#[test]
fn reset_of_a_sleep_whose_timers_are_gone_refiles_it_here() {
    let timers = Timers::new(1).unwrap();
    let rt = current_thread();
    let mut s = timers
        .block_on(0, &rt, async {
            let mut s = time::sleep(Duration::from_secs(3600));
            assert!(poll_noop(&mut s).is_pending());
            s
        })
        .unwrap();
    drop((rt, timers));
    let deadline = StdInstant::now() + Duration::from_millis(10);
    s.reset(deadline.into());
    // Polled on a thread with no base: the fallback.
    multi_thread().block_on(&mut s);
    let now = StdInstant::now();
    assert!(now >= deadline && now - deadline < LATE);
    assert!(s.is_elapsed());
}

#[test]
fn a_panicking_task_leaves_its_base_clean_and_turning() {
    let timers = Timers::new(2).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(timers.on_thread_start())
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        timers.spawn_drivers().unwrap();
        let mut jobs = Vec::new();
        for i in 0..50u64 {
            jobs.push(tokio::spawn(async move {
                let mut s = time::sleep(Duration::from_secs(60));
                poll_fn(|cx| {
                    let _ = Pin::new(&mut s).poll(cx);
                    Poll::Ready(())
                })
                .await;
                time::sleep(Duration::from_millis(i % 5)).await;
                panic!("task {i} panics holding a filed sleep");
            }));
        }
        for j in jobs {
            assert!(j.await.unwrap_err().is_panic());
        }
        let before = StdInstant::now();
        tokio::spawn(time::sleep(Duration::from_millis(5)))
            .await
            .unwrap();
        assert!(before.elapsed() >= Duration::from_millis(5));
    });
    drop(rt);
    // Drivers gone with the runtime; a turn on this thread takes the last cancels.
    for i in 0..2 {
        let rt = current_thread();
        timers
            .block_on(i, &rt, time::sleep(Duration::from_millis(2)))
            .unwrap();
        assert_eq!(timers.occupancy(i), Some((0, 0)), "base {i}");
    }
}

/// A waker whose `wake` panics when the timer thread calls it (a buggy executor elsewhere in
/// the process). A wake on the polling thread itself, inside `poll`, is allowed (the sleep asks
/// to be polled again, say while the fallback's turn holds its base) and only recorded.
struct Panics(std::thread::ThreadId, AtomicBool);

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if std::thread::current().id() == self.0 {
            self.1.store(true, Ordering::Relaxed);
        } else {
            panic!("this waker panics");
        }
    }
}

/// Records a wake from another thread and unparks its thread; records a wake on its own
/// thread (inside `poll`) apart.
struct Counted(std::thread::Thread, AtomicBool, AtomicBool);

impl Wake for Counted {
    fn wake(self: Arc<Self>) {
        if std::thread::current().id() == self.0.id() {
            self.2.store(true, Ordering::Relaxed);
        } else {
            self.1.store(true, Ordering::Release);
            self.0.unpark();
        }
    }
}

/// Polls `s` until it pends without waking its waker inline: it is then filed with that
/// waker. An inline wake (the base was busy) is what an executor would answer with a re-poll.
fn file_with(s: &mut Sleep, waker: &Waker, woken_inline: impl Fn() -> bool) {
    loop {
        assert!(
            Pin::new(&mut *s)
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
        if !woken_inline() {
            return;
        }
    }
}

/// Files 32 well-behaved sleeps on the fallback, all due at one instant, each followed by
/// `bad` sleeps due then too whose waker panics (so whatever order a turn delivers them in,
/// well-behaved ones come after panicking ones); every well-behaved one must fire and be woken.
fn with_panicking_wakers(bad: usize) {
    let deadline = Instant::now() + Duration::from_millis(50);
    let me = std::thread::current();
    let panics = Arc::new(Panics(me.id(), AtomicBool::new(false)));
    let panics_waker = Waker::from(panics.clone());
    let mut bad_sleeps = Vec::new();
    let mut good: Vec<(Arc<Counted>, Sleep)> = Vec::new();
    for _ in 0..32 {
        let w = Arc::new(Counted(
            me.clone(),
            AtomicBool::new(false),
            AtomicBool::new(false),
        ));
        let mut s = time::sleep_until(deadline);
        let waker = Waker::from(w.clone());
        file_with(&mut s, &waker, || w.2.swap(false, Ordering::Relaxed));
        good.push((w, s));
        for _ in 0..bad {
            let mut s = time::sleep_until(deadline);
            file_with(&mut s, &panics_waker, || {
                panics.1.swap(false, Ordering::Relaxed)
            });
            bad_sleeps.push(s);
        }
    }
    let give_up = StdInstant::now() + Duration::from_secs(3);
    // A sleep is marked fired inside the turn and woken after it: wait for both.
    let (mut fired, mut woken) = (0, 0);
    while StdInstant::now() < give_up && (fired, woken) != (good.len(), good.len()) {
        std::thread::park_timeout(Duration::from_millis(10));
        fired = good.iter().filter(|(_, s)| s.is_elapsed()).count();
        woken = good
            .iter()
            .filter(|(w, _)| w.1.load(Ordering::Acquire))
            .count();
    }
    drop(bad_sleeps);
    assert_eq!(
        (fired, woken),
        (good.len(), good.len()),
        "of {} sleeps due with panicking ones, {fired} fired and {woken} were woken within 3 s",
        good.len()
    );
    // The timer thread still serves.
    let before = StdInstant::now();
    multi_thread().block_on(time::sleep(Duration::from_millis(3)));
    assert!(before.elapsed() < Duration::from_millis(3) + LATE);
}

#[test]
fn thirty_two_sleeps_due_at_once_fire_and_wake() {
    with_panicking_wakers(0);
}

#[test]
fn a_panicking_waker_costs_no_other_sleep_its_fire() {
    with_panicking_wakers(32);
}

//! Sleeps used away from their base's thread: moved, polled, reset and dropped elsewhere, and
//! tasks migrating on a multi-thread runtime. Never early, never lost, nothing left behind.
#![cfg(feature = "tokio")]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};

struct Unpark(std::thread::Thread, AtomicUsize);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.unpark();
    }
}

/// Polls `s` to completion on this (driverless) thread, parking between polls.
fn wait_here(s: &mut time::Sleep) -> usize {
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicUsize::new(0)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    while Pin::new(&mut *s).poll(&mut cx).is_pending() {
        std::thread::park_timeout(Duration::from_secs(5));
    }
    unpark.1.load(Ordering::SeqCst)
}

fn noop_poll(s: &mut time::Sleep) -> Poll<()> {
    Pin::new(s).poll(&mut Context::from_waker(Waker::noop()))
}

/// Work to run on the base's thread, inside its runtime.
type Request = Box<dyn FnOnce() + Send>;

/// Base 0 on a current-thread runtime on its own thread, filing sleeps on request (a sleep is
/// filed on the thread that first polls it) and handing them back, until the sender drops.
struct BaseThread {
    requests: Option<tokio::sync::mpsc::UnboundedSender<Request>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BaseThread {
    fn start(timers: &Timers) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Request>();
        let timers = timers.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .unwrap();
            let serve = async move {
                while let Some(work) = rx.recv().await {
                    work();
                }
            };
            timers.block_on(0, &rt, serve).unwrap();
        });
        Self {
            requests: Some(tx),
            thread: Some(thread),
        }
    }

    /// A sleep filed on base 0 by its own thread.
    fn filed(&self, deadline: Instant) -> time::Sleep {
        self.on_base(move || {
            let mut s = time::sleep_until(deadline);
            assert!(noop_poll(&mut s).is_pending());
            s
        })
    }

    /// Runs `f` on the base's thread and returns its result.
    fn on_base<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        let work: Request = Box::new(move || tx.send(f()).unwrap());
        self.requests.as_ref().unwrap().send(work).unwrap();
        rx.recv().unwrap()
    }

    fn stop(mut self) {
        self.requests.take();
        self.thread.take().unwrap().join().unwrap();
    }
}

#[test]
fn moved_and_polled_on_another_thread() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    for ms in [1u64, 4, 9] {
        let deadline = Instant::now() + Duration::from_millis(ms);
        let mut s = base.filed(deadline);
        let wakes = wait_here(&mut s);
        assert!(Instant::now() >= deadline, "early");
        assert!(wakes <= 1, "woken {wakes} times");
        assert!(s.is_elapsed());
    }
    base.stop();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn moved_and_dropped_on_another_thread() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    // The first deadline is far enough out that filing 200 sleeps through the base's thread (a
    // round trip each, slow in a debug build on a loaded machine) ends before it.
    let first = Instant::now() + Duration::from_millis(1000);
    let sleeps: Vec<_> = (0..200)
        .map(|i| base.filed(first + Duration::from_millis(i)))
        .collect();
    drop(sleeps); // cross-core cancels
    assert!(
        Instant::now() < first,
        "filing outlasted the first deadline: no verdict"
    );
    // Let the base turn past every deadline and fire whatever was not cancelled (nothing should be).
    std::thread::sleep(first + Duration::from_millis(300) - Instant::now());
    base.stop();
    let stats = timers.base_stats(0).unwrap();
    assert_eq!(stats.fired, 0, "a dropped sleep fired");
    assert_eq!(stats.cancelled_remote, 200);
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn reset_on_another_thread_is_never_early() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    for i in 0..20u64 {
        let mut s = base.filed(Instant::now() + Duration::from_millis(2));
        // Sometimes before the fire, sometimes after: both must end at the new deadline.
        std::thread::sleep(Duration::from_millis(i % 4));
        let deadline = Instant::now() + Duration::from_millis(3 + i % 3);
        s.reset(deadline);
        wait_here(&mut s);
        assert!(Instant::now() >= deadline, "early after a remote reset");
    }
    base.stop();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn reset_away_then_at_home() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    for i in 0..20u64 {
        let mut s = base.filed(Instant::now() + Duration::from_secs(60));
        // Away: the cross-core re-arm, in place ...
        s.reset(Instant::now() + Duration::from_secs(30));
        // ... then at home, earlier, in place.
        let deadline = Instant::now() + Duration::from_millis(2 + i % 3);
        let mut s = base.on_base(move || {
            s.reset(deadline);
            s
        });
        wait_here(&mut s);
        assert!(Instant::now() >= deadline, "early");
    }
    // Nothing left behind: no timer of an earlier arming is left to fire in 30 s.
    std::thread::sleep(Duration::from_millis(50));
    base.stop();
    assert_eq!(timers.occupancy(0).map(|o| o.1), Some(0));
    assert_eq!(timers.base_stats(0).unwrap().fired, 20);
}

#[test]
fn pushed_later_at_home_then_waited_for_away() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    for i in 0..20u64 {
        let mut s = base.filed(Instant::now() + Duration::from_millis(2));
        // At home, later: only stored; the filed arming fires at about 2 ms ...
        let deadline = Instant::now() + Duration::from_millis(6 + i % 3);
        let mut s = base.on_base(move || {
            s.reset(deadline);
            s
        });
        // ... and the poll here (before or after that fire) files it again from away.
        std::thread::sleep(Duration::from_millis(i % 4));
        wait_here(&mut s);
        assert!(Instant::now() >= deadline, "early after a reset to later");
    }
    std::thread::sleep(Duration::from_millis(50));
    base.stop();
    assert_eq!(timers.occupancy(0).map(|o| o.1), Some(0));
}

#[test]
fn tasks_migrating_on_a_multi_thread_runtime() {
    let timers = Timers::new(2).unwrap();
    let rt = common::multi_thread(&timers, 2);
    let early = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        timers.spawn_drivers().unwrap();
        let mut jobs = Vec::new();
        for i in 0..400u64 {
            let early = early.clone();
            jobs.push(tokio::spawn(async move {
                let mut s = time::sleep(Duration::from_millis(1 + i % 7));
                for round in 0..3 {
                    // Yield so the task may move between workers between polls and resets.
                    tokio::task::yield_now().await;
                    let deadline = Instant::now() + Duration::from_millis(1 + (i + round) % 5);
                    s.reset(deadline);
                    (&mut s).await;
                    if Instant::now() < deadline {
                        early.fetch_add(1, Ordering::SeqCst);
                    }
                    let t = time::timeout(Duration::from_millis(2), std::future::pending::<()>());
                    assert!(t.await.is_err());
                    // A timeout that wins and one dropped while pending.
                    let _ = time::timeout(Duration::from_secs(9), tokio::task::yield_now()).await;
                }
            }));
        }
        for j in jobs {
            j.await.unwrap();
        }
    });
    drop(rt);
    assert_eq!(early.load(Ordering::SeqCst), 0, "a sleep completed early");
    for i in 0..2 {
        // Timers cancelled from another worker may still sit in the wheel until a turn reads
        // their notices (none comes after the runtime is gone), but no cell is held.
        assert_eq!(timers.occupancy(i).unwrap().1, 0, "base {i}");
    }
}

/// Waits (up to 5 s) until `done` holds, polling every few milliseconds; true if it did.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < give_up {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done()
}

/// Old deadline of the sleeps reset from elsewhere below: a reset that is not seen completes at
/// it, far beyond the generous bound the tests allow.
const OLD: Duration = Duration::from_secs(4);
/// How long a sleep reset to 20 ms may take here: a loaded machine, but well under `OLD`.
const BOUND: Duration = Duration::from_millis(2000);

/// Resets `s` (filed on a base that has not turned yet) to 20 ms from now from this thread and
/// waits for it here.
fn reset_to_20ms_and_wait(s: &mut time::Sleep) {
    let start = Instant::now();
    let deadline = start + Duration::from_millis(20);
    s.reset(deadline);
    wait_here(s);
    assert!(Instant::now() >= deadline, "early after a remote reset");
    let took = start.elapsed();
    assert!(took < BOUND, "the remote reset was not seen: took {took:?}");
}

#[test]
fn remote_reset_and_drop_on_a_base_that_never_turned() {
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    let mut s = base.filed(Instant::now() + OLD);
    reset_to_20ms_and_wait(&mut s);
    drop(s);
    base.stop();

    // A fresh base again: a sleep dropped here is cancelled on the base at once, not when some
    // other timer of it fires.
    let timers = Timers::new(1).unwrap();
    let base = BaseThread::start(&timers);
    drop(base.filed(Instant::now() + Duration::from_secs(3600)));
    assert!(
        eventually(|| timers.occupancy(0) == Some((0, 0))),
        "a sleep dropped on another thread is still on its base: {:?}",
        timers.occupancy(0)
    );
    base.stop();
}

#[test]
fn remote_reset_and_drop_on_a_fresh_multi_thread_runtime() {
    let timers = Timers::new(2).unwrap();
    let rt = common::multi_thread(&timers, 2);
    let (mut s, idle) = rt.block_on(async {
        timers.spawn_drivers().unwrap();
        tokio::spawn(async {
            let mut s = time::sleep(OLD);
            let mut idle = time::sleep(Duration::from_secs(3600));
            assert!(noop_poll(&mut s).is_pending() && noop_poll(&mut idle).is_pending());
            (s, idle)
        })
        .await
        .unwrap()
    });
    // The runtime's workers keep running its drivers; this thread is none of them.
    reset_to_20ms_and_wait(&mut s);
    drop((s, idle));
    assert!(
        eventually(|| (0..2).all(|i| timers.occupancy(i) == Some((0, 0)))),
        "sleeps dropped on another thread are still on their base: {:?}",
        (0..2).map(|i| timers.occupancy(i)).collect::<Vec<_>>()
    );
    drop(rt);
}

//! The test clock under hostile use: a sleep filed before the pause, a thousand deadlines passed
//! in one `advance`, `advance` by zero, `advance` from another thread than the sleeper's (a plain
//! thread on the fallback, a `Timers` base on another thread's runtime), a timeout and a skipping
//! interval on the paused clock, and `resume` into real time. The clock is process-wide, so this
//! binary's tests take turns (`SERIAL`) and each leaves the clock running.
#![cfg(feature = "tokio")]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant as StdInstant;
use tickwheel_percpu::time::{self, Duration, Instant, MissedTickBehavior, Timers};

static SERIAL: Mutex<()> = Mutex::new(());

/// Real time a woken task gets to run, and most a real sleep may be late (a loaded machine).
const GRACE: Duration = Duration::from_secs(5);

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rt() -> tokio::runtime::Runtime {
    // Time enabled for tokio's own `timeout`, the real-time guard on each wait.
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap()
}

/// Resumes the clock when dropped, so that a failed test leaves it running for the next.
struct Resume;

impl Drop for Resume {
    fn drop(&mut self) {
        time::resume();
    }
}

fn paused() -> Resume {
    time::pause();
    Resume
}

#[test]
fn a_sleep_filed_before_the_pause_waits_for_advance() {
    let _serial = serial();
    rt().block_on(async {
        let s = tokio::spawn(time::sleep(Duration::from_millis(100)));
        tokio::task::yield_now().await;
        let _resume = paused();
        // Past its real deadline, well past.
        std::thread::sleep(Duration::from_millis(250));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!s.is_finished(), "fired by real time while paused");
        time::advance(Duration::from_millis(100)).await;
        tokio::time::timeout(GRACE, s).await.unwrap().unwrap();
    });
}

#[test]
fn one_advance_past_a_thousand_deadlines_fires_them_all() {
    let _serial = serial();
    rt().block_on(async {
        let _resume = paused();
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut jobs = Vec::new();
        for i in 0..1000u64 {
            // Filed out of deadline order.
            let ms = 1 + (i * 7919) % 1000;
            let order = order.clone();
            // Made here: the clock is read at the call.
            let s = time::sleep(Duration::from_millis(ms));
            jobs.push(tokio::spawn(async move {
                s.await;
                order.lock().unwrap().push(ms);
                Instant::now() - start
            }));
        }
        // Every task polled (its sleep filed): a current-thread runtime runs 61 tasks a round.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(order.lock().unwrap().is_empty(), "fired on a paused clock");
        time::advance(Duration::from_millis(2000)).await;
        for j in jobs {
            let at = tokio::time::timeout(GRACE, j)
                .await
                .expect("not fired")
                .unwrap();
            assert_eq!(at, Duration::from_millis(2000));
        }
        let order = order.lock().unwrap();
        assert_eq!(order.len(), 1000);
        // More than tokio promises for sleeps passed by one jump (any order): deadline order.
        let out_of_order = order.windows(2).filter(|w| w[0] > w[1]).count();
        assert_eq!(out_of_order, 0, "completions out of deadline order");
    });
}

#[test]
fn advance_by_zero_fires_only_what_is_due() {
    let _serial = serial();
    rt().block_on(async {
        let _resume = paused();
        let now = Instant::now();
        time::sleep_until(now).await;
        time::sleep(Duration::ZERO).await;
        let ms = tokio::spawn(time::sleep(Duration::from_millis(1)));
        let ns = tokio::spawn(time::sleep(Duration::from_nanos(1)));
        tokio::task::yield_now().await;
        time::advance(Duration::ZERO).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(Instant::now(), now);
        assert!(
            !ms.is_finished() && !ns.is_finished(),
            "fired by advance(0)"
        );
        // The base's tick is 1 ms, as tokio's: a 1 ns sleep may wait for the whole tick.
        time::advance(Duration::from_nanos(1)).await;
        tokio::task::yield_now().await;
        assert!(!ms.is_finished(), "a 1 ms sleep fired 1 ns in");
        time::advance(Duration::from_nanos(999_999)).await;
        tokio::time::timeout(GRACE, ns).await.unwrap().unwrap();
        tokio::time::timeout(GRACE, ms).await.unwrap().unwrap();
    });
}

struct Unpark(std::thread::Thread, AtomicBool);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.store(true, Ordering::Release);
        self.0.unpark();
    }
}

#[test]
fn advance_on_one_thread_wakes_sleepers_on_others() {
    let _serial = serial();
    let _resume = paused();
    let start = Instant::now();
    let (filed_tx, filed) = std::sync::mpsc::channel();
    // A plain thread on the fallback, with its own waker.
    let plain = std::thread::spawn({
        let filed_tx = filed_tx.clone();
        move || {
            let w = Arc::new(Unpark(std::thread::current(), AtomicBool::new(false)));
            let waker = Waker::from(w.clone());
            let mut s = time::sleep(Duration::from_secs(3600));
            let mut cx = Context::from_waker(&waker);
            assert!(Pin::new(&mut s).poll(&mut cx).is_pending());
            filed_tx.send(()).unwrap();
            let give_up = StdInstant::now() + GRACE;
            while Pin::new(&mut s).poll(&mut cx).is_pending() {
                assert!(
                    StdInstant::now() < give_up,
                    "not woken by advance on another thread"
                );
                std::thread::park_timeout(Duration::from_millis(50));
            }
            (w.1.load(Ordering::Acquire), Instant::now() - start)
        }
    });
    // A Timers base turned by another thread's runtime.
    let timers = Timers::new(1).unwrap();
    let on_base = std::thread::spawn({
        let timers = timers.clone();
        move || {
            let rt = rt();
            timers
                .block_on(0, &rt, async move {
                    let s = time::sleep(Duration::from_secs(3600));
                    tokio::pin!(s);
                    assert!(futures_poll(s.as_mut()).await.is_pending());
                    filed_tx.send(()).unwrap();
                    tokio::time::timeout(GRACE, s)
                        .await
                        .expect("a Timers sleep not woken by advance on another thread");
                    Instant::now() - start
                })
                .unwrap()
        }
    });
    filed.recv().unwrap();
    filed.recv().unwrap();
    rt().block_on(time::advance(Duration::from_secs(3600)));
    let (woken, at) = plain.join().unwrap();
    assert!(woken, "the plain thread's waker was not woken");
    assert_eq!(at, Duration::from_secs(3600));
    assert_eq!(on_base.join().unwrap(), Duration::from_secs(3600));
}

/// Polls `f` once.
async fn futures_poll<F: Future + Unpin>(mut f: F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await
}

#[test]
fn a_timeout_and_a_skipping_interval_on_the_paused_clock() {
    let _serial = serial();
    rt().block_on(async {
        let _resume = paused();
        let start = Instant::now();
        let limited = tokio::spawn(time::timeout(
            Duration::from_secs(1),
            std::future::pending::<()>(),
        ));
        let mut every = time::interval(Duration::from_millis(10));
        every.set_missed_tick_behavior(MissedTickBehavior::Skip);
        assert_eq!(every.tick().await, start);
        tokio::task::yield_now().await;
        time::advance(Duration::from_millis(999)).await;
        assert!(!limited.is_finished(), "timed out early");
        // The interval's tick was due at 10 ms, seen at 999 ms: late, so the next skips to the
        // next multiple of the period, 1000 ms.
        assert_eq!(every.tick().await - start, Duration::from_millis(10));
        time::advance(Duration::from_millis(1)).await;
        let out = tokio::time::timeout(GRACE, limited).await.unwrap().unwrap();
        assert!(out.is_err());
        assert_eq!(every.tick().await - start, Duration::from_millis(1000));
        let next = tokio::spawn(async move { every.tick().await - start });
        tokio::task::yield_now().await;
        time::advance(Duration::from_millis(9)).await;
        assert!(!next.is_finished(), "ticked early");
        time::advance(Duration::from_millis(1)).await;
        let at = tokio::time::timeout(GRACE, next).await.unwrap().unwrap();
        assert_eq!(at, Duration::from_millis(1010));
    });
}

#[test]
fn resume_runs_on_in_real_time_from_where_the_clock_stands() {
    let _serial = serial();
    rt().block_on(async {
        time::pause();
        let start = Instant::now();
        let far = tokio::spawn(time::sleep(Duration::from_secs(7200)));
        tokio::task::yield_now().await;
        time::advance(Duration::from_secs(3600)).await;
        time::resume();
        let before = StdInstant::now();
        time::sleep(Duration::from_millis(30)).await;
        let took = before.elapsed();
        assert!(
            took >= Duration::from_millis(30) && took < Duration::from_millis(30) + GRACE,
            "a 30 ms sleep after resume took {took:?}"
        );
        let since = Instant::now() - start;
        assert!(since >= Duration::from_secs(3600) + Duration::from_millis(30));
        assert!(since < Duration::from_secs(3600) + GRACE);
        // The hour still left on `far` is real time now.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!far.is_finished());
        far.abort();
    });
}

//! The test clock under hostile use: a thousand deadlines passed in one `advance`, `advance` by
//! zero, two runtimes on two threads pausing and advancing at once, a timeout and a skipping
//! interval on the paused clock, and `resume` into real time. Each runtime has a clock of its
//! own, so these tests run in parallel.

use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant as StdInstant;
use tickwheel_percpu::time::{self, Duration, Instant, MissedTickBehavior};

/// Real time a woken task gets to run, and most a real sleep may be late (a loaded machine).
const GRACE: Duration = Duration::from_secs(5);

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
fn one_advance_past_a_thousand_deadlines_fires_them_all() {
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
        // A paused runtime's base fires a deadline when the clock reaches it, not before.
        time::advance(Duration::from_nanos(1)).await;
        tokio::task::yield_now().await;
        assert!(!ms.is_finished(), "a 1 ms sleep fired 1 ns in");
        time::advance(Duration::from_nanos(999_999)).await;
        tokio::time::timeout(GRACE, ns).await.unwrap().unwrap();
        tokio::time::timeout(GRACE, ms).await.unwrap().unwrap();
    });
}

#[test]
fn a_timeout_and_a_skipping_interval_on_the_paused_clock() {
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

/// Yields until `job` has finished, a few rounds at most (a woken task runs at the next one).
async fn finished<T>(job: &tokio::task::JoinHandle<T>) -> bool {
    for _ in 0..10 {
        if job.is_finished() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    job.is_finished()
}

/// One of two runtimes on threads of their own: pauses, files an hour and a two-hour sleep, and
/// in `steps` taken with the other, advances by an hour (the first) or two (the second), checking
/// that the other's advance moved neither its clock nor its sleeps. A failed check is reported
/// at the end, so that the other thread is never left waiting at a step.
fn one_of_two(steps: Arc<Barrier>, first: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let failed = rt().block_on(async move {
            let mut failed = Vec::new();
            let mut check = |ok: bool, what: &'static str| {
                if !ok {
                    failed.push(what);
                }
            };
            time::pause();
            let start = Instant::now();
            let hour = tokio::spawn(time::sleep(Duration::from_secs(3600)));
            let two = tokio::spawn(time::sleep(Duration::from_secs(7200)));
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            steps.wait();
            if first {
                time::advance(Duration::from_secs(3600)).await;
                check(finished(&hour).await, "the hour sleep did not fire");
                check(!two.is_finished(), "the two-hour sleep fired early");
            }
            steps.wait();
            if !first {
                check(
                    !finished(&hour).await,
                    "the other's advance fired a sleep here",
                );
                check(
                    Instant::now() == start,
                    "the other's advance moved this clock",
                );
                time::advance(Duration::from_secs(7200)).await;
                check(finished(&hour).await, "the hour sleep did not fire");
                check(finished(&two).await, "the two-hour sleep did not fire");
            }
            steps.wait();
            if first {
                check(
                    !finished(&two).await,
                    "the other's advance fired a sleep here",
                );
                check(
                    Instant::now() - start == Duration::from_secs(3600),
                    "clock not at 1 h",
                );
            }
            failed
        });
        assert!(
            failed.is_empty(),
            "runtime {}: {failed:?}",
            if first { 1 } else { 2 }
        );
    })
}

#[test]
fn two_paused_runtimes_keep_their_own_time() {
    let steps = Arc::new(Barrier::new(2));
    let first = one_of_two(steps.clone(), true);
    let second = one_of_two(steps, false);
    first.join().unwrap();
    second.join().unwrap();
}

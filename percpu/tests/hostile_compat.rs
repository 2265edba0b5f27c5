//! Edge cases run side by side: one body compiled with `use tokio::time::*` and once with
//! `use tickwheel_percpu::time::*` (on the fallback, no setup), each describing what it saw as
//! a list of lines; ours must give tokio's lines. Covers zero, past and far (`Duration::MAX`,
//! centuries away) limits, a future ready at its first poll, `Sleep::reset` before, during and
//! after the wait (earlier, later, past), the `deadline` a sleep reports, an interval whose
//! start is long past, and an interval with a period of `Duration::MAX`.
#![cfg(feature = "tokio")]

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Most a wake-up may come after its deadline on a loaded machine (never before).
const LATE: std::time::Duration = std::time::Duration::from_millis(500);

/// A thousand years.
const CENTURIES: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 1000);

/// Runs `f` on a fresh current-thread runtime with every driver enabled; a panic becomes the
/// line `panicked: <message>` so that both sides can be compared.
fn run<F: std::future::Future<Output = Vec<String>>>(f: impl FnOnce() -> F) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match catch_unwind(AssertUnwindSafe(|| rt.block_on(f()))) {
        Ok(lines) => lines,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            vec![format!("panicked: {msg}")]
        }
    }
}

macro_rules! scenarios {
    ($module:ident, $($time:ident)::+) => {
        pub(crate) mod $module {
            use std::future::{Future, pending};
            use $($time)::+::*;
            use super::{CENTURIES, LATE, run};

            fn on_time(before: std::time::Instant, deadline: std::time::Instant) -> String {
                let now = std::time::Instant::now();
                if now < deadline {
                    return format!("early by {:?}", deadline - now);
                }
                if now - deadline > LATE + (deadline - before) {
                    return format!("late by {:?}", now - deadline);
                }
                "on time".to_owned()
            }

            pub(crate) fn limits() -> Vec<String> {
                run(|| async {
                    let mut out = Vec::new();
                    let past = Instant::now() - Duration::from_secs(1);
                    out.push(format!("zero, ready: {:?}", timeout(Duration::ZERO, async { 1 }).await));
                    out.push(format!("zero, pending: {:?}", timeout(Duration::ZERO, pending::<()>()).await));
                    out.push(format!("past, ready: {:?}", timeout_at(past, async { 2 }).await));
                    out.push(format!("past, pending: {:?}", timeout_at(past, pending::<()>()).await));
                    out.push(format!("max, ready: {:?}", timeout(Duration::MAX, async { 3 }).await));
                    let before = std::time::Instant::now();
                    let s = timeout(Duration::MAX, sleep(Duration::from_millis(5))).await;
                    let on = on_time(before, before + Duration::from_millis(5));
                    out.push(format!("max, inner sleeps: {s:?} {on}"));
                    let far = Instant::now() + CENTURIES;
                    let s = timeout_at(far, sleep(Duration::from_millis(5))).await;
                    out.push(format!("centuries, inner sleeps: {s:?}"));
                    let s = timeout(Duration::from_millis(5), sleep_until(far)).await;
                    out.push(format!("sleep for centuries, limit 5 ms: {s:?}"));
                    let s = timeout(Duration::from_millis(5), sleep(Duration::MAX)).await;
                    out.push(format!("sleep Duration::MAX, limit 5 ms: {s:?}"));
                    let before = std::time::Instant::now();
                    let e = timeout(Duration::from_millis(7), pending::<()>()).await;
                    out.push(format!("7 ms: {e:?} {}", on_time(before, before + Duration::from_millis(7))));
                    sleep(Duration::ZERO).await;
                    sleep_until(past).await;
                    out.push("zero and past sleeps complete".to_owned());
                    out
                })
            }

            pub(crate) fn deadlines() -> Vec<String> {
                run(|| async {
                    let mut out = Vec::new();
                    let now = Instant::now();
                    for (what, at) in [
                        ("10 s ago", now - Duration::from_secs(10)),
                        ("now", now),
                        ("in 1 s", now + Duration::from_secs(1)),
                        ("in a thousand years", now + CENTURIES),
                    ] {
                        let s = sleep_until(at);
                        tokio::pin!(s);
                        let kept = s.deadline() == at;
                        let polled = timeout(Duration::from_millis(2), s.as_mut()).await.is_ok();
                        out.push(format!("{what}: deadline kept {kept}, after a poll {}, done {polled}",
                            s.deadline() == at));
                    }
                    let s = sleep(Duration::MAX);
                    let years = (s.deadline() - now).as_secs() / (86_400 * 365);
                    out.push(format!("sleep(Duration::MAX) is {years} years away"));
                    out
                })
            }

            pub(crate) fn resets() -> Vec<String> {
                run(|| async {
                    let mut out = Vec::new();
                    let s = sleep(Duration::from_secs(3600));
                    tokio::pin!(s);
                    out.push(format!("fresh: elapsed {}", s.is_elapsed()));
                    // Earlier, before the first poll.
                    let before = std::time::Instant::now();
                    s.as_mut().reset(Instant::now() + Duration::from_millis(5));
                    s.as_mut().await;
                    out.push(format!("earlier before polling: {} elapsed {}",
                        on_time(before, before + Duration::from_millis(5)), s.is_elapsed()));
                    // Later, after completion: pending again.
                    s.as_mut().reset(Instant::now() + Duration::from_secs(3600));
                    out.push(format!("reset after completion: elapsed {}", s.is_elapsed()));
                    let t = timeout(Duration::from_millis(5), s.as_mut()).await;
                    out.push(format!("later: {t:?}"));
                    // While waited on (filed): earlier.
                    let before = std::time::Instant::now();
                    s.as_mut().reset(Instant::now() + Duration::from_millis(8));
                    s.as_mut().await;
                    out.push(format!("earlier while filed: {}", on_time(before, before + Duration::from_millis(8))));
                    // To the past, after completion.
                    s.as_mut().reset(Instant::now() - Duration::from_secs(5));
                    let t = timeout(Duration::from_millis(200), s.as_mut()).await;
                    out.push(format!("past after completion: {t:?} elapsed {}", s.is_elapsed()));
                    // To the past while filed far away.
                    s.as_mut().reset(Instant::now() + Duration::from_secs(3600));
                    assert!(timeout(Duration::from_millis(1), s.as_mut()).await.is_err());
                    s.as_mut().reset(Instant::now() - Duration::from_secs(5));
                    let t = timeout(Duration::from_millis(200), s.as_mut()).await;
                    out.push(format!("past while filed: {t:?}"));
                    // Later, while filed near: must not fire at the old deadline.
                    s.as_mut().reset(Instant::now() + Duration::from_millis(100));
                    let first = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(s.as_mut().poll(cx).is_pending())
                    })
                    .await;
                    assert!(first, "a 100 ms sleep was done at its first poll");
                    s.as_mut().reset(Instant::now() + Duration::from_secs(3600));
                    let t = timeout(Duration::from_millis(200), s.as_mut()).await;
                    out.push(format!("later while filed near: {t:?}"));
                    // Far away, then Duration::MAX-ish.
                    s.as_mut().reset(Instant::now() + CENTURIES);
                    let t = timeout(Duration::from_millis(3), s.as_mut()).await;
                    out.push(format!("centuries: {t:?}"));
                    out
                })
            }

            pub(crate) fn interval_from_the_past() -> Vec<String> {
                run(|| async {
                    let start = Instant::now() - Duration::from_secs(10);
                    let mut every = interval_at(start, Duration::from_secs(1));
                    let mut out = Vec::new();
                    for _ in 0..3 {
                        let due = every.tick().await;
                        out.push(format!("due at start + {} ms", (due - start).as_millis()));
                    }
                    out
                })
            }

            pub(crate) fn interval_of_max_period() -> Vec<String> {
                run(|| async {
                    let mut every = interval(Duration::MAX);
                    let mut out = Vec::new();
                    let start = Instant::now();
                    let first = every.tick().await;
                    out.push(format!("first tick at once: {}", first - start < LATE));
                    let second = timeout(Duration::from_millis(5), every.tick()).await;
                    out.push(format!("second: {:?}", second.map(|_| ())));
                    out
                })
            }
        }
    };
}

scenarios!(with_tokio, tokio::time);
scenarios!(with_tickwheel, tickwheel_percpu::time);

macro_rules! both {
    ($($(#[$attr:meta])* $run:ident),* $(,)?) => {$(
        #[test]
        $(#[$attr])*
        fn $run() {
            let tokio = with_tokio::$run();
            let ours = with_tickwheel::$run();
            assert_eq!(ours, tokio, "tickwheel_percpu::time (left) against tokio::time (right)");
        }
    )*};
}

both!(
    limits,
    resets,
    deadlines,
    interval_from_the_past,
    interval_of_max_period,
);

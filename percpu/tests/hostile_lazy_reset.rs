//! `Sleep::reset` to a later deadline under hostile use, through the public API only: a later
//! reset only stores the deadline, the arming filed earlier fires at the old one, and the poll
//! it wakes files the sleep again. What must hold whatever the interleaving: never complete
//! before the deadline last given (`Instant::now() >= deadline` at completion, `is_elapsed`
//! false before it), never lost (complete soon after it), complete once, and `deadline` report
//! the last reset. Each scenario runs on the fallback (no setup) and on `Timers` bases, on
//! current-thread and multi-thread runtimes; the interval and sleep scripts on the paused clock
//! are compared line by line with `tokio::time`'s.
#![cfg(feature = "tokio")]

mod common;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use tickwheel_percpu::time::{self, Duration, Instant, Sleep, Timers};

/// Most a completion may come after its deadline on a loaded 2-core machine (never before).
const LATE: Duration = Duration::from_millis(50);

type Body = fn() -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Asserts that a sleep due at `deadline` completing now is neither early nor lost.
#[track_caller]
fn on_time(deadline: Instant, what: &str) {
    let now = Instant::now();
    assert!(now >= deadline, "{what}: {:?} early", deadline - now);
    assert!(now - deadline < LATE, "{what}: {:?} late", now - deadline);
}

/// `is_elapsed` may say true only once the deadline has passed.
#[track_caller]
fn not_elapsed_early(s: &Sleep, what: &str) {
    let elapsed = s.is_elapsed();
    let now = Instant::now();
    assert!(
        !elapsed || now >= s.deadline(),
        "{what}: is_elapsed {:?} before the deadline",
        s.deadline() - now
    );
}

/// Polls `s` once with the task's waker (files it); it must pend.
async fn file(s: &mut Sleep) {
    poll_fn(|cx| {
        assert!(Pin::new(&mut *s).poll(cx).is_pending(), "ready at once");
        Poll::Ready(())
    })
    .await;
}

/// Spins (the thread stays busy) until `t`.
fn spin_until(t: Instant) {
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

fn fallback_current_thread(body: Body) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(body());
}

fn fallback_multi_thread(body: Body) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { tokio::spawn(body()).await.unwrap() });
}

fn timers_current_thread(body: Body) {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers.block_on(0, &rt, body()).unwrap();
}

fn timers_multi_thread(body: Body) {
    let timers = Timers::new(2).unwrap();
    let rt = common::multi_thread(&timers, 2);
    rt.block_on(async {
        let drivers = timers.spawn_drivers().unwrap();
        tokio::spawn(body()).await.unwrap();
        for d in drivers {
            d.abort();
        }
    });
}

type Setup = fn(Body);

const SETUPS: [(&str, Setup); 4] = [
    ("fallback, current thread", fallback_current_thread),
    ("fallback, two workers", fallback_multi_thread),
    ("Timers, current thread", timers_current_thread),
    ("Timers, two workers", timers_multi_thread),
];

fn every_setup(body: Body) {
    for (name, setup) in SETUPS {
        eprintln!("setup: {name}");
        setup(body);
    }
}

// ---------------------------------------------------------------------------------------------
// Many later resets in a row, then an earlier one.

async fn later_resets_then_earlier() {
    let start = Instant::now();
    let mut s = time::sleep(Duration::from_millis(8));
    file(&mut s).await;
    // Fifty pushes later, past the filed arming's 8 ms, each checked at once.
    let mut last = s.deadline();
    for i in 1..=50u64 {
        let d = start + Duration::from_millis(20) + Duration::from_micros(i * 500);
        s.reset(d);
        assert_eq!(s.deadline(), d, "deadline after later reset {i}");
        assert!(d >= last);
        last = d;
        not_elapsed_early(&s, "after a later reset");
    }
    // The filed arming (8 ms) fires while the task waits elsewhere; the sleep is not polled.
    time::sleep(Duration::from_millis(12)).await;
    not_elapsed_early(&s, "old arming fired, not polled");
    assert!(!s.is_elapsed(), "elapsed at its old deadline");
    // Then earlier than the last (45 ms), later than now: moved at once.
    let earlier = Instant::now() + Duration::from_millis(6);
    assert!(earlier < last);
    s.reset(earlier);
    assert_eq!(s.deadline(), earlier);
    (&mut s).await;
    on_time(earlier, "earlier after fifty later");
    assert!(s.is_elapsed());

    // The same, the earlier one before the filed arming's deadline.
    let mut s = time::sleep(Duration::from_millis(30));
    file(&mut s).await;
    for i in 1..=20u64 {
        s.reset(Instant::now() + Duration::from_millis(30 + i));
    }
    let earlier = Instant::now() + Duration::from_millis(4);
    s.reset(earlier);
    (&mut s).await;
    on_time(earlier, "earlier than the filed arming");

    // Later resets only: completes at the last one, not at the filed one.
    let mut s = time::sleep(Duration::from_millis(3));
    file(&mut s).await;
    let mut last = s.deadline();
    for _ in 0..30 {
        last += Duration::from_micros(700);
        s.reset(last);
    }
    (&mut s).await;
    on_time(last, "thirty later resets");
    assert_eq!(s.deadline(), last);
}

#[test]
fn many_later_resets_then_an_earlier_one() {
    every_setup(|| Box::pin(later_resets_then_earlier()));
}

// ---------------------------------------------------------------------------------------------
// A later reset after the old arming fired but before the sleep was polled, and resets after
// completion.

async fn reset_after_fire_before_poll() {
    for round in 0..10u64 {
        let mut s = time::sleep(Duration::from_millis(2));
        file(&mut s).await;
        // Past the filed deadline: its arming has fired (the task is woken, `s` not polled).
        time::sleep(Duration::from_millis(4)).await;
        let d = Instant::now() + Duration::from_millis(3 + round % 3);
        s.reset(d);
        assert!(!s.is_elapsed() || Instant::now() >= d, "elapsed at once");
        assert_eq!(s.deadline(), d);
        // Polled before the new deadline: pends.
        poll_fn(|cx| {
            let p = Pin::new(&mut s).poll(cx);
            assert!(
                p.is_pending() || Instant::now() >= d,
                "ready before the new deadline"
            );
            Poll::Ready(())
        })
        .await;
        not_elapsed_early(&s, "polled once after the push");
        (&mut s).await;
        on_time(d, "pushed after its old fire");
        assert!(s.is_elapsed());
        // Completed, then pushed later again: pends again, completes at the new deadline.
        let d = Instant::now() + Duration::from_millis(2);
        s.reset(d);
        assert!(
            !s.is_elapsed() || Instant::now() >= d,
            "still elapsed after a reset"
        );
        (&mut s).await;
        on_time(d, "pushed after completion");
        // To the deadline it already has (equal counts as later): completes at once.
        s.reset(d);
        (&mut s).await;
        assert!(Instant::now() >= d);
    }
}

#[test]
fn later_reset_after_the_old_fire_before_the_poll() {
    every_setup(|| Box::pin(reset_after_fire_before_poll()));
}

// ---------------------------------------------------------------------------------------------
// A later reset racing the old deadline's fire, on two workers, the task moving.

async fn racing_the_old_fire() {
    let done = Arc::new(AtomicUsize::new(0));
    for round in 0..24u64 {
        let mut jobs = Vec::new();
        for j in 0..2u64 {
            let done = done.clone();
            jobs.push(tokio::spawn(async move {
                let old = Instant::now() + Duration::from_millis(2);
                let mut s = time::sleep_until(old);
                file(&mut s).await;
                tokio::task::yield_now().await;
                // From 400 µs before the old deadline to 300 µs after it, in 100 µs steps.
                let offset = ((round * 2 + j) % 8) * 100;
                spin_until(old - Duration::from_micros(400) + Duration::from_micros(offset));
                let new = old + Duration::from_millis(3);
                // Reset, and awaited, in a task of its own (either worker).
                let waited = tokio::spawn(async move {
                    s.reset(new);
                    assert_eq!(s.deadline(), new);
                    not_elapsed_early(&s, "racing reset");
                    tokio::task::yield_now().await;
                    not_elapsed_early(&s, "racing reset, after a yield");
                    (&mut s).await;
                    on_time(new, "reset racing the old fire");
                    s.is_elapsed()
                });
                assert!(waited.await.unwrap(), "not elapsed once completed");
                done.fetch_add(1, Ordering::Relaxed);
            }));
        }
        for j in jobs {
            j.await.unwrap();
        }
    }
    assert_eq!(done.load(Ordering::Relaxed), 48);
}

#[test]
fn later_reset_while_the_old_deadline_fires_on_two_workers() {
    fallback_multi_thread(|| Box::pin(racing_the_old_fire()));
    timers_multi_thread(|| Box::pin(racing_the_old_fire()));
}

// ---------------------------------------------------------------------------------------------
// Reset on another thread than the one that filed it.

async fn reset_elsewhere() {
    for round in 0..6u64 {
        let mut s = time::sleep(Duration::from_millis(3));
        file(&mut s).await;
        // On a plain thread, later: only stored there; awaited back here.
        let d = Instant::now() + Duration::from_millis(8 + round % 2);
        let mut s = std::thread::spawn(move || {
            s.reset(d);
            not_elapsed_early(&s, "reset on a plain thread");
            s
        })
        .join()
        .unwrap();
        assert_eq!(s.deadline(), d);
        (&mut s).await;
        on_time(d, "reset on a plain thread, awaited at home");

        // Pushed later here, then reset and awaited on a runtime of another thread while this
        // one keeps running (and turning its base).
        let mut s = time::sleep(Duration::from_millis(3));
        file(&mut s).await;
        s.reset(Instant::now() + Duration::from_millis(20));
        let later_still = round % 2 == 0;
        let at = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let d = if later_still {
                    s.deadline() + Duration::from_millis(2)
                } else {
                    // Earlier than the last reset, still later than the filed arming.
                    Instant::now() + Duration::from_millis(5)
                };
                s.reset(d);
                (&mut s).await;
                on_time(d, "reset and awaited on another runtime");
                d
            })
        })
        .await
        .unwrap();
        assert!(Instant::now() >= at);

        // Sent to another task, pushed later there and awaited there, the home task idle.
        let mut s = time::sleep(Duration::from_millis(2));
        file(&mut s).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let mut s: Sleep = rx.await.unwrap();
            let d = s.deadline() + Duration::from_millis(4);
            s.reset(d);
            (&mut s).await;
            on_time(d, "pushed later in another task");
        });
        tx.send(s).unwrap();
        waiter.await.unwrap();
    }
}

#[test]
fn reset_from_another_thread_than_the_one_that_filed_it() {
    every_setup(|| Box::pin(reset_elsewhere()));
}

// ---------------------------------------------------------------------------------------------
// `tokio::select!` with a pushed-later sleep: the keepalive loop of one connection.

async fn select_keepalive() {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<u32>(4);
    let sender = tokio::spawn(async move {
        for i in 0..8 {
            time::sleep(Duration::from_millis(3)).await;
            tx.send(i).await.unwrap();
        }
        // Keeps the channel open past the idle limit, so only the sleep can end the loop.
        time::sleep(Duration::from_millis(200)).await;
    });
    let idle = time::sleep(Duration::from_millis(15));
    tokio::pin!(idle);
    let mut requests = 0;
    let mut fired = 0;
    let mut last_deadline = idle.deadline();
    loop {
        tokio::select! {
            () = &mut idle => {
                on_time(last_deadline, "idle limit after the last request");
                fired += 1;
                break;
            }
            Some(_) = rx.recv() => {
                requests += 1;
                last_deadline = Instant::now() + Duration::from_millis(15);
                idle.as_mut().reset(last_deadline);
                assert_eq!(idle.deadline(), last_deadline);
            }
        }
    }
    assert_eq!((requests, fired), (8, 1));
    sender.abort();

    // `biased`, the other branch always ready first for a while: the sleep pushed each time.
    let mut s = time::sleep(Duration::from_millis(5));
    let mut pushes = 0;
    let mut last = s.deadline();
    loop {
        tokio::select! {
            biased;
            () = std::future::ready(()), if pushes < 200 => {
                pushes += 1;
                last = Instant::now() + Duration::from_millis(5);
                s.reset(last);
                tokio::task::yield_now().await;
            }
            () = &mut s => {
                on_time(last, "biased select");
                break;
            }
        }
    }
    assert_eq!(pushes, 200);
}

#[test]
fn select_with_a_pushed_later_sleep() {
    every_setup(|| Box::pin(select_keepalive()));
}

// ---------------------------------------------------------------------------------------------
// Keepalive: a thousand connections, each idle sleep pushed later on each request, then idle.

async fn thousand_connections() {
    let fired = Arc::new(AtomicUsize::new(0));
    let worst = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let mut conns = Vec::new();
    for c in 0..1000u64 {
        let fired = fired.clone();
        let worst = worst.clone();
        conns.push(tokio::spawn(async move {
            let mut idle = time::sleep(Duration::from_millis(10));
            file(&mut idle).await;
            for r in 0..5u64 {
                // A request arrives (spread over the connections) ...
                time::sleep(Duration::from_millis(1 + (c + r) % 3)).await;
                // ... and pushes the idle limit back.
                idle.reset(Instant::now() + Duration::from_millis(10 + c % 7));
            }
            let last = idle.deadline();
            (&mut idle).await;
            let now = Instant::now();
            assert!(
                now >= last,
                "connection {c}: idle fired {:?} early",
                last - now
            );
            let mut w = worst.lock().unwrap();
            *w = (*w).max(now - last);
            fired.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for c in conns {
        c.await.unwrap();
    }
    assert_eq!(fired.load(Ordering::Relaxed), 1000);
    let worst = *worst.lock().unwrap();
    assert!(
        worst < LATE * 2,
        "a thousand idle limits, worst {worst:?} late"
    );
}

#[test]
fn a_thousand_keepalive_sleeps_each_fire_once_at_the_last_deadline() {
    every_setup(|| Box::pin(thousand_connections()));
}

// ---------------------------------------------------------------------------------------------
// `Interval` resets in real time.

async fn interval_resets() {
    use time::MissedTickBehavior::{Burst, Delay, Skip};
    for behavior in [Burst, Delay, Skip] {
        let period = Duration::from_millis(6);
        let mut every = time::interval(period);
        every.set_missed_tick_behavior(behavior);
        every.tick().await;
        let due = every.tick().await;
        on_time(due, "second tick");
        // Pushed later twice, then ticked: at the last push.
        every.reset_after(Duration::from_millis(9));
        let at = Instant::now() + Duration::from_millis(12);
        every.reset_at(at);
        assert_eq!(every.tick().await, at);
        on_time(at, "reset_at later");
        // `reset`: one period from now (later than the pending tick).
        let from = Instant::now();
        every.reset();
        let due = every.tick().await;
        assert!(due >= from + period, "{behavior:?}: reset ticked early");
        on_time(due, "reset");
        // Later, then earlier than that, then `reset_immediately`.
        every.reset_after(Duration::from_millis(30));
        let now = Instant::now();
        every.reset_immediately();
        let due = every.tick().await;
        assert!(due >= now && Instant::now() >= due);
        assert!(due - now < LATE, "reset_immediately after a push");
        // Back on the period from there.
        let due2 = every.tick().await;
        on_time(due2, "tick after reset_immediately");
        assert!(due2 >= due + period);
    }
}

#[test]
fn interval_resets_in_real_time() {
    every_setup(|| Box::pin(interval_resets()));
}

// ---------------------------------------------------------------------------------------------
// Side by side with tokio on the paused clock: the same script, the same lines.

#[cfg(feature = "test-util")]
macro_rules! paused_scripts {
    ($module:ident, $($time:ident)::+) => {
        mod $module {
            use std::future::{Future, poll_fn};
            use std::task::Poll;
            use $($time)::+::*;

            fn paused_rt() -> tokio::runtime::Runtime {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .unwrap()
            }

            /// Ticks, resets and missed ticks of one interval (offsets from the start, in ms).
            pub(crate) fn interval_script(behavior: MissedTickBehavior) -> Vec<String> {
                paused_rt().block_on(async move {
                    let start = Instant::now();
                    let ms = move |t: Instant| (t - start).as_millis();
                    let mut out = Vec::new();
                    let mut every = interval(Duration::from_millis(10));
                    every.set_missed_tick_behavior(behavior);
                    macro_rules! tick {
                        ($what:expr) => {{
                            let due = every.tick().await;
                            out.push(format!("{}: tick {} at {}", $what, ms(due), ms(Instant::now())));
                        }};
                    }
                    tick!("first");
                    tick!("second");
                    every.reset();
                    tick!("after reset (equal)");
                    advance(Duration::from_millis(3)).await;
                    every.reset_after(Duration::from_millis(25));
                    tick!("after reset_after");
                    tick!("period");
                    every.reset_at(start + Duration::from_millis(100));
                    every.reset_at(start + Duration::from_millis(130));
                    tick!("two later reset_at");
                    every.reset_at(start + Duration::from_millis(200));
                    every.reset_at(start + Duration::from_millis(150));
                    tick!("later then earlier");
                    // Missed: 37 ms pass with nobody polling (the 160 ms tick's timer fires).
                    advance(Duration::from_millis(37)).await;
                    tick!("late");
                    tick!("after late");
                    tick!("after late 2");
                    // Pushed later, then missed again.
                    every.reset_after(Duration::from_millis(20));
                    advance(Duration::from_millis(48)).await;
                    tick!("late after reset_after");
                    tick!("next");
                    // Pushed later, its old tick passes unpolled, pushed later again.
                    every.reset_after(Duration::from_millis(15));
                    advance(Duration::from_millis(12)).await;
                    every.reset_after(Duration::from_millis(10));
                    tick!("pushed twice around the old tick");
                    every.reset_immediately();
                    tick!("immediately");
                    tick!("after immediately");
                    out
                })
            }

            /// A sleep pushed later around its fire, polled only when awaited.
            pub(crate) fn sleep_script() -> Vec<String> {
                paused_rt().block_on(async {
                    let start = Instant::now();
                    let ms = move |t: Instant| (t - start).as_millis();
                    let mut out = Vec::new();
                    let mut s = Box::pin(sleep(Duration::from_millis(10)));
                    poll_fn(|cx| {
                        out.push(format!("first poll pending: {}", s.as_mut().poll(cx).is_pending()));
                        Poll::Ready(())
                    }).await;
                    s.as_mut().reset(start + Duration::from_millis(30));
                    advance(Duration::from_millis(15)).await;
                    out.push(format!("15: elapsed {}, deadline {}", s.is_elapsed(), ms(s.deadline())));
                    s.as_mut().reset(start + Duration::from_millis(40));
                    poll_fn(|cx| {
                        out.push(format!("15: poll pending {}", s.as_mut().poll(cx).is_pending()));
                        Poll::Ready(())
                    }).await;
                    s.as_mut().await;
                    out.push(format!("completed at {}, elapsed {}", ms(Instant::now()), s.is_elapsed()));
                    // Completed, pushed later: pends until then.
                    s.as_mut().reset(start + Duration::from_millis(55));
                    out.push(format!("pushed after completion: elapsed {}", s.is_elapsed()));
                    s.as_mut().await;
                    out.push(format!("completed at {}", ms(Instant::now())));
                    // Many later resets, then an earlier one.
                    let mut s = Box::pin(sleep(Duration::from_millis(10)));
                    poll_fn(|cx| {
                        let _ = s.as_mut().poll(cx);
                        Poll::Ready(())
                    }).await;
                    for i in 1..=20u64 {
                        s.as_mut().reset(start + Duration::from_millis(100 + i));
                    }
                    s.as_mut().reset(start + Duration::from_millis(90));
                    s.as_mut().await;
                    out.push(format!("earlier after twenty later: completed at {}", ms(Instant::now())));
                    out
                })
            }

            /// A sleep pushed later, waited past its new deadline without being polled.
            pub(crate) fn elapsed_without_poll_script() -> Vec<String> {
                paused_rt().block_on(async {
                    let mut out = Vec::new();
                    let mut s = Box::pin(sleep(Duration::from_millis(10)));
                    poll_fn(|cx| {
                        let _ = s.as_mut().poll(cx);
                        Poll::Ready(())
                    }).await;
                    s.as_mut().reset(Instant::now() + Duration::from_millis(20));
                    advance(Duration::from_millis(30)).await;
                    out.push(format!("30, pushed to 20: elapsed {}", s.is_elapsed()));
                    // The same without a reset, for reference.
                    let mut s = Box::pin(sleep(Duration::from_millis(10)));
                    poll_fn(|cx| {
                        let _ = s.as_mut().poll(cx);
                        Poll::Ready(())
                    }).await;
                    advance(Duration::from_millis(20)).await;
                    out.push(format!("20, not reset: elapsed {}", s.is_elapsed()));
                    out
                })
            }
        }
    };
}

#[cfg(feature = "test-util")]
paused_scripts!(with_tokio, tokio::time);
#[cfg(feature = "test-util")]
paused_scripts!(with_tickwheel, tickwheel_percpu::time);

#[cfg(feature = "test-util")]
#[test]
fn interval_resets_match_tokio_on_the_paused_clock() {
    use time::MissedTickBehavior::{Burst, Delay, Skip};
    for (ours, theirs) in [
        (Burst, tokio::time::MissedTickBehavior::Burst),
        (Delay, tokio::time::MissedTickBehavior::Delay),
        (Skip, tokio::time::MissedTickBehavior::Skip),
    ] {
        assert_eq!(
            with_tickwheel::interval_script(ours),
            with_tokio::interval_script(theirs),
            "{ours:?}"
        );
    }
}

#[cfg(feature = "test-util")]
#[test]
fn sleep_resets_match_tokio_on_the_paused_clock() {
    assert_eq!(with_tickwheel::sleep_script(), with_tokio::sleep_script());
}

/// tokio's driver fires a pushed-later sleep at its new deadline, so `is_elapsed` says true
/// without a poll; here the old arming's fire only wakes the task and nothing is filed at the
/// new deadline until the sleep is polled, so `is_elapsed` reads the clock once that fire came.
#[cfg(feature = "test-util")]
#[test]
fn pushed_later_and_passed_unpolled_is_elapsed_as_tokio() {
    assert_eq!(
        with_tickwheel::elapsed_without_poll_script(),
        with_tokio::elapsed_without_poll_script()
    );
}

// ---------------------------------------------------------------------------------------------
// hyper's timer.

#[cfg(feature = "hyper")]
#[test]
fn hyper_timer_pushed_later_in_place() {
    use hyper::rt::Timer;
    use tickwheel_percpu::time::HyperTimer;
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            let timer = HyperTimer::new();
            for round in 0..5u32 {
                let mut s = timer.sleep(Duration::from_millis(3));
                poll_fn(|cx| {
                    assert!(s.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                let mut last = std::time::Instant::now();
                for i in 0..10u32 {
                    last = std::time::Instant::now() + Duration::from_millis(6 + u64::from(i));
                    timer.reset(&mut s, last);
                }
                if round % 2 == 1 {
                    // The old arming fires before the wait.
                    time::sleep(Duration::from_millis(5)).await;
                }
                s.as_mut().await;
                on_time(last.into(), "hyper sleep pushed later");
            }
        })
        .unwrap();
}

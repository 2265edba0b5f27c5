//! One body of tokio-style code, compiled twice: once with `use tokio::time::*` and once with
//! `use tickwheel_percpu::time::*`, and run under each way a tokio program runs async code
//! (`#[tokio::main]` in both flavors, `#[tokio::test]`, `Runtime::block_on` on a multi-thread
//! runtime, `spawn_blocking`, a plain thread), with no other setup. Both must give the same
//! outcome: completion order, never early, lateness within a generous bound (a loaded 2-core
//! machine), `Elapsed` errors and `?` into `io::Error`, interval ticks and missed ticks.
#![cfg(feature = "tokio")]

/// What a run of the body saw; equal for both implementations.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    order: Vec<usize>,
    errors: Vec<String>,
    /// Interval ticks, as offsets from the first, per missed-tick behaviour.
    ticks: Vec<(String, Vec<u128>)>,
}

/// Most a wake-up may come after its deadline on a loaded CI machine (never before).
const LATE: std::time::Duration = std::time::Duration::from_millis(500);

macro_rules! tokio_style {
    ($module:ident, $($time:ident)::+) => {
        mod $module {
            use std::sync::{Arc, Mutex};
            use $($time)::+::*;
            use super::{LATE, Outcome};

            fn on_time(deadline: Instant, what: &str) {
                let now = Instant::now();
                assert!(now >= deadline, "{what}: early by {:?}", deadline - now);
                assert!(now - deadline <= LATE, "{what}: late by {:?}", now - deadline);
            }

            async fn read_with_limit() -> std::io::Result<u32> {
                let v = timeout(Duration::from_millis(5), std::future::pending::<u32>()).await?;
                Ok(v)
            }

            fn describe(b: MissedTickBehavior) -> &'static str {
                // Exhaustive: compiles only if the enum is not `#[non_exhaustive]`.
                match b {
                    MissedTickBehavior::Burst => "burst",
                    MissedTickBehavior::Delay => "delay",
                    MissedTickBehavior::Skip => "skip",
                }
            }

            async fn ticks(behavior: MissedTickBehavior) -> (String, Vec<u128>) {
                const P: Duration = Duration::from_millis(20);
                let mut every: Interval = interval(P);
                every.set_missed_tick_behavior(behavior);
                let first = every.tick().await;
                let seen = every.tick().await;
                on_time(seen, "tick");
                // Busy past three and a half periods: ticks are missed.
                std::thread::sleep(P * 7 / 2);
                let mut dues = vec![seen - first];
                for _ in 0..3 {
                    let due = every.tick().await;
                    assert!(Instant::now() >= due, "early tick");
                    dues.push(due - first);
                }
                let ms: Vec<u128> = match behavior {
                    // Where the schedule restarts from depends on when the task ran: a tick
                    // delivered over 5 ms late already counts as missed, for tokio's timer as
                    // for ours, and restarts the schedule from then, so even the second tick
                    // (20 ms, or later after a hiccup of the machine) is not compared. What is
                    // checked is that each tick came at least a period after the one before.
                    MissedTickBehavior::Delay => {
                        assert!(dues[0] >= P, "the second tick a period after the first");
                        assert!(dues[3] - dues[2] >= P && dues[2] - dues[1] >= P);
                        assert!(dues[1] - dues[0] >= P);
                        Vec::new()
                    }
                    _ => dues.iter().map(|d| d.as_millis()).collect(),
                };
                (describe(behavior).to_owned(), ms)
            }

            pub(crate) async fn body() -> Outcome {
                // Completion order: five tasks, deadlines 25 ms apart, spawned shuffled.
                let order = Arc::new(Mutex::new(Vec::new()));
                let start = Instant::now();
                let tasks: Vec<_> = [2usize, 0, 4, 1, 3]
                    .into_iter()
                    .map(|i| {
                        let order = order.clone();
                        let deadline = start + Duration::from_millis(25 * (i as u64 + 1));
                        tokio::spawn(async move {
                            sleep_until(deadline).await;
                            on_time(deadline, "sleep_until");
                            order.lock().unwrap().push(i);
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                let order = order.lock().unwrap().clone();

                // Timeouts: the inner value, `Elapsed`, `?` into io::Error.
                let mut errors = Vec::new();
                assert_eq!(timeout(Duration::from_secs(5), async { 7 }).await, Ok(7));
                let limited: Timeout<_> = timeout(Duration::from_millis(10), sleep(Duration::from_secs(5)));
                let called = Instant::now();
                let e: error::Elapsed = limited.await.unwrap_err();
                on_time(called + Duration::from_millis(10), "timeout");
                errors.push(e.to_string());
                let deadline = Instant::now() + Duration::from_millis(10);
                let e = timeout_at(deadline, std::future::pending::<()>()).await.unwrap_err();
                on_time(deadline, "timeout_at");
                errors.push(format!("{e:?}"));
                errors.push(format!("{:?}", read_with_limit().await.unwrap_err().kind()));

                // A sleep reset in place, pinned as tokio code pins it.
                let s: Sleep = sleep(Duration::from_secs(60));
                tokio::pin!(s);
                let deadline = Instant::now() + Duration::from_millis(10);
                s.as_mut().reset(deadline);
                assert_eq!(s.deadline(), deadline);
                s.as_mut().await;
                on_time(deadline, "reset");
                assert!(s.is_elapsed());

                // `interval_at`: the first tick at `start`, then one per period.
                let at = Instant::now() + Duration::from_millis(10);
                let mut every = interval_at(at, Duration::from_millis(10));
                assert_eq!(every.tick().await, at);
                assert_eq!(every.tick().await, at + Duration::from_millis(10));
                on_time(at + Duration::from_millis(10), "interval_at");

                let mut ticks_seen = Vec::new();
                for b in [MissedTickBehavior::Burst, MissedTickBehavior::Delay, MissedTickBehavior::Skip] {
                    ticks_seen.push(ticks(b).await);
                }
                Outcome { order, errors, ticks: ticks_seen }
            }

            #[tokio::main(flavor = "current_thread")]
            pub(crate) async fn main_current_thread() -> Outcome {
                body().await
            }

            #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
            pub(crate) async fn main_multi_thread() -> Outcome {
                body().await
            }

            pub(crate) fn block_on_multi_thread() -> Outcome {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(body())
            }

            pub(crate) fn in_spawn_blocking() -> Outcome {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    tokio::task::spawn_blocking(|| tokio::runtime::Handle::current().block_on(body()))
                        .await
                        .unwrap()
                })
            }

            pub(crate) fn on_a_plain_thread() -> Outcome {
                std::thread::spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(body())
                })
                .join()
                .unwrap()
            }

            #[tokio::test]
            async fn under_tokio_test() {
                assert_eq!(body().await, super::expected());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn under_tokio_test_multi_thread() {
                assert_eq!(body().await, super::expected());
            }
        }
    };
}

tokio_style!(with_tokio, tokio::time);
tokio_style!(with_tickwheel, tickwheel_percpu::time);

/// The outcome tokio's timer gives (and so ours must).
fn expected() -> Outcome {
    Outcome {
        order: vec![0, 1, 2, 3, 4],
        errors: vec![
            "deadline has elapsed".to_owned(),
            "Elapsed(())".to_owned(),
            "TimedOut".to_owned(),
        ],
        ticks: vec![
            ("burst".to_owned(), vec![20, 40, 60, 80]),
            ("delay".to_owned(), vec![]),
            ("skip".to_owned(), vec![20, 40, 100, 120]),
        ],
    }
}

macro_rules! both {
    ($($run:ident),*) => {$(
        #[test]
        fn $run() {
            let tokio = with_tokio::$run();
            let ours = with_tickwheel::$run();
            assert_eq!(tokio, expected(), "tokio::time");
            assert_eq!(ours, tokio, "tickwheel_percpu::time against tokio::time");
        }
    )*};
}

both!(
    main_current_thread,
    main_multi_thread,
    block_on_multi_thread,
    in_spawn_blocking,
    on_a_plain_thread
);

//! `Interval`: the first tick at once, then one per period, and the three missed-tick behaviours.
#![cfg(feature = "tokio")]

use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, MissedTickBehavior, Timers};

fn run<F: std::future::Future>(f: impl FnOnce() -> F) -> F::Output {
    let timers = Timers::new(1).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    timers.block_on(0, &rt, f()).unwrap()
}

const P: Duration = Duration::from_millis(10);

#[test]
fn ticks_once_per_period_never_early() {
    run(|| async {
        let start = Instant::now();
        let mut every = time::interval(P);
        let first = every.tick().await;
        assert!(first.elapsed() < P, "first tick not at once");
        for k in 1..5u32 {
            let due = every.tick().await;
            assert_eq!(due, first + P * k);
            assert!(Instant::now() >= due, "early tick");
        }
        assert!(start.elapsed() >= P * 4);
    });
}

/// Ticks once, stalls the thread for 3.5 periods, then returns the next three due instants and
/// when they were seen.
async fn after_a_stall(behavior: MissedTickBehavior) -> (Instant, Vec<(Instant, Instant)>) {
    let mut every = time::interval(P);
    every.set_missed_tick_behavior(behavior);
    let first = every.tick().await;
    std::thread::sleep(P * 7 / 2);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let due = every.tick().await;
        seen.push((due, Instant::now()));
    }
    (first, seen)
}

#[test]
fn burst_catches_up_on_the_original_schedule() {
    run(|| async {
        let (first, seen) = after_a_stall(MissedTickBehavior::Burst).await;
        let dues: Vec<_> = seen.iter().map(|(d, _)| *d).collect();
        assert_eq!(dues, [first + P, first + P * 2, first + P * 3]);
    });
}

#[test]
fn delay_restarts_from_the_late_tick() {
    run(|| async {
        let (first, seen) = after_a_stall(MissedTickBehavior::Delay).await;
        let (late_due, late_seen) = seen[0];
        assert_eq!(late_due, first + P);
        // The next one is a period after the late tick was handed out, not on the old grid.
        assert!(seen[1].0 >= first + P * 9 / 2 && seen[1].0 <= late_seen + P);
        // A period after the tick was handed out, which a loaded machine may make later than
        // the tick's own due time.
        assert!(seen[2].0 >= seen[1].0 + P && seen[2].0 <= seen[1].1 + P);
        assert!(seen[1].1 >= seen[1].0);
    });
}

#[test]
fn skip_keeps_the_phase() {
    run(|| async {
        let (first, seen) = after_a_stall(MissedTickBehavior::Skip).await;
        assert_eq!(seen[0].0, first + P);
        let since = seen[1].0 - first;
        assert_eq!(
            since.as_nanos() % P.as_nanos(),
            0,
            "off the grid: {since:?}"
        );
        assert!(seen[1].0 >= first + P * 4, "a skipped tick came back");
    });
}

/// A `Delay` interval at 20 ms, as a tokio user writes it: ticks that come in time keep the
/// schedule. A timer that fires more than 5 ms late counts as a missed tick and shifts it, so
/// this fails on a base that is routinely that late (Coarse slack).
async fn delay_interval_keeps_its_schedule() {
    const PERIOD: Duration = Duration::from_millis(20);
    let mut every = time::interval(PERIOD);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = every.tick().await;
    let mut on_schedule = 0;
    for _ in 0..7 {
        let due = every.tick().await;
        assert!(Instant::now() >= due, "early tick");
        if due - last == PERIOD {
            on_schedule += 1;
        }
        last = due;
    }
    // A loaded machine may delay a tick or two past 5 ms; a late timer delays every one.
    assert!(on_schedule >= 4, "{on_schedule} of 7 ticks on schedule");
}

#[test]
fn a_20ms_delay_interval_keeps_its_schedule_on_timers() {
    run(delay_interval_keeps_its_schedule);
}

#[test]
fn a_20ms_delay_interval_keeps_its_schedule_on_the_fallback() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(delay_interval_keeps_its_schedule());
}

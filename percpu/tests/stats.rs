//! Per-base counters and the lateness histogram.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, bases};

#[test]
fn counters_add_up() {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()));
    let (mut all, remote) = bases::<u32>(2, config).unwrap();
    let a = all[0].schedule_after(Duration::from_millis(1), 1).unwrap();
    let _b = all[0].schedule_after(Duration::from_millis(1), 2).unwrap();
    let c = remote
        .schedule_after(0, Duration::from_millis(1), 3)
        .unwrap();
    let _d = remote
        .schedule_after(0, Duration::from_millis(1), 4)
        .unwrap();
    assert!(all[0].cancel(a));
    assert!(all[1].cancel(c), "another base's handle: a remote cancel");
    clock.advance(Duration::from_millis(1));
    assert_eq!(all[0].turn(|_| {}), 2);
    let s = all[0].stats();
    assert_eq!(s.scheduled, 4);
    assert_eq!(s.fired, 2);
    assert_eq!(s.cancelled_local, 1);
    assert_eq!(s.cancelled_remote, 1);
    assert_eq!(s.reserve_empty, 0);
    assert_eq!(
        s.scheduled,
        s.fired + s.cancelled_local + s.cancelled_remote
    );
    assert_eq!(all[1].stats(), Default::default());
}

/// One Exact base on a manual clock.
fn exact_manual_base() -> (ManualClock, Vec<tickwheel_percpu::Base<u32>>) {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()));
    let (all, _) = bases::<u32>(1, config).unwrap();
    (clock, all)
}

#[test]
fn lateness_is_fire_time_minus_deadline_tick() {
    let (clock, mut all) = exact_manual_base();
    let base = &mut all[0];
    base.schedule_after(Duration::from_millis(1), 1).unwrap();
    base.schedule_after(Duration::from_millis(2), 2).unwrap();
    clock.advance(Duration::from_millis(5)); // 4 ms and 3 ms late
    base.turn(|_| {});
    let l = base.stats().lateness;
    assert_eq!(l.count, 2);
    assert_eq!(l.max, Duration::from_millis(4));
    // Log2 buckets of microseconds: 3 ms lies in [2.048, 4.096) ms, reported as its upper bound.
    assert!(
        l.p50 >= Duration::from_millis(3) && l.p50 <= Duration::from_millis(4),
        "{l:?}"
    );
    assert_eq!(l.p99, Duration::from_millis(4), "capped at the exact max");
}

#[test]
fn exact_mode_counts_cascades() {
    let (clock, mut all) = exact_manual_base();
    let base = &mut all[0];
    // Far enough to sit on a higher level and cascade down before firing.
    base.schedule_after(Duration::from_secs(100), 1).unwrap();
    for _ in 0..200 {
        clock.advance(Duration::from_millis(500));
        base.turn(|_| {});
    }
    assert_eq!(base.stats().fired, 1);
    assert!(base.stats().cascades > 0);
}

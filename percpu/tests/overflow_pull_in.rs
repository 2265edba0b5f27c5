//! A timer on the overflow list that another thread re-arms to now, after the clock passed the
//! overflow sweep's tick but not the list's bound: the owner's next schedule must not hand it out
//! while bringing its wheel's clock forward (a debug build asserted, and the base's drop then
//! aborted on the record left half-linked); it fires at the next turn, once.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode};

/// Files a timer `far` ms out, moves the clock `passed` ms, re-arms the timer to now from another
/// thread, schedules another timer on the owner, and checks the first fires at the next turn.
fn pulled_in(mode: Mode, far: u64, passed: u64) {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(mode)
        .clock(ClockSource::Manual(clock.clone()));
    let (mut bases, remote) = tickwheel_percpu::bases::<u32>(1, config).unwrap();
    let base = &mut bases[0];
    let far_one = base.schedule_after(Duration::from_millis(far), 1).unwrap();
    clock.advance(Duration::from_millis(passed));
    let r = remote.clone();
    let now = base.now() + Duration::from_millis(passed);
    assert!(
        std::thread::spawn(move || r.reset_at(far_one, now))
            .join()
            .unwrap()
    );
    // Before the next turn: the schedule brings the wheel's clock forward.
    base.schedule_after(Duration::from_secs(1), 2).unwrap();
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    assert_eq!(
        fired,
        [1],
        "{mode:?}: the re-armed timer fires at the next turn"
    );
    // Coarse: up to 12.5% late.
    clock.advance(Duration::from_secs(2));
    base.turn(|v| fired.push(v));
    assert_eq!(fired, [1, 2], "{mode:?}");
    assert!(base.is_empty());
}

#[test]
fn exact_overflow_timer_pulled_in_before_its_bound() {
    let far = (1 << 36) + 5;
    pulled_in(Mode::Exact, far, far - 2);
}

#[test]
fn coarse_overflow_timer_pulled_in_before_its_bound() {
    let far = 1 << 31;
    pulled_in(Mode::Coarse, far, far - 2);
}

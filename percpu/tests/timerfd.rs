//! The real driver: timerfd with absolute deadlines, eventfd wake-ups, the nested epoll fd.

use std::time::{Duration, Instant};

use tickwheel_percpu::{Config, Mode, bases};

mod support;
use support::poll_readable;

#[test]
fn timer_at_plus_5ms_fires_not_early_and_in_time() {
    let (mut all, _) = bases::<Instant>(1, Config::default().mode(Mode::Exact)).unwrap();
    let base = &mut all[0];
    let deadline = Instant::now() + Duration::from_millis(5);
    base.schedule_at(deadline, deadline).unwrap();
    let mut fired_at = None;
    let give_up = Instant::now() + Duration::from_secs(5);
    while fired_at.is_none() && Instant::now() < give_up {
        base.park(Some(Duration::from_secs(1))).unwrap();
        base.turn(|d| fired_at = Some((d, Instant::now())));
    }
    let (d, at) = fired_at.expect("did not fire within 5 s");
    assert!(at >= d, "fired {:?} early", d - at);
    // Generous: a loaded 2-core machine can delay a thread; 5 ms of slack would be flaky.
    assert!(
        at - d < Duration::from_millis(500),
        "fired {:?} late",
        at - d
    );
    assert!(base.stats().lateness.max < Duration::from_millis(500));
}

#[test]
fn fd_is_readable_only_when_due() {
    let (mut all, _) = bases::<u32>(1, Config::default()).unwrap();
    let base = &mut all[0];
    base.turn(|_| {});
    assert!(
        !poll_readable(base.fd(), 0),
        "idle base must not be readable"
    );
    base.schedule_after(Duration::from_millis(20), 1).unwrap();
    assert!(!poll_readable(base.fd(), 0));
    assert!(
        poll_readable(base.fd(), 2_000),
        "timerfd did not make the fd readable"
    );
    assert_eq!(base.turn(|v| assert_eq!(v, 1)), 1);
    assert!(!poll_readable(base.fd(), 0), "turn must clear readiness");
}

#[test]
fn remote_schedule_wakes_a_parked_owner() {
    let (mut all, remote) = bases::<u32>(1, Config::default()).unwrap();
    let mut base = all.pop().unwrap();
    base.schedule_after(Duration::from_secs(60), 0).unwrap(); // the owner waits for this one
    base.turn(|_| {});
    let owner = std::thread::spawn(move || {
        let start = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && start.elapsed() < Duration::from_secs(10) {
            base.park(None).unwrap();
            base.turn(|v| got.push(v));
        }
        (got, start.elapsed(), base)
    });
    std::thread::sleep(Duration::from_millis(20));
    remote
        .schedule_after(0, Duration::from_millis(1), 7)
        .unwrap();
    let (got, waited, base) = owner.join().unwrap();
    assert_eq!(got, [7]);
    assert!(waited < Duration::from_secs(5), "woken late: {waited:?}");
    drop(base);
}

#[test]
fn no_kick_while_the_owner_is_busy() {
    // Many remote schedules between two turns leave the fd readable (one kick), and one turn
    // applies them all and clears it.
    let (mut all, remote) = bases::<u32>(1, Config::default()).unwrap();
    let base = &mut all[0];
    base.turn(|_| {});
    for v in 0..100 {
        remote
            .schedule_after(0, Duration::from_secs(10), v)
            .unwrap();
    }
    assert!(poll_readable(base.fd(), 0));
    base.turn(|_| {});
    assert_eq!(base.len(), 100);
    assert!(!poll_readable(base.fd(), 0), "kick not consumed");
}

#[test]
fn boottime_clock_works() {
    let config = Config::default().clock(tickwheel_percpu::ClockSource::Boottime);
    let (mut all, _) = bases::<u32>(1, config).unwrap();
    let base = &mut all[0];
    base.schedule_after(Duration::from_millis(2), 1).unwrap();
    assert!(poll_readable(base.fd(), 2_000));
    assert_eq!(base.turn(|_| {}), 1);
}

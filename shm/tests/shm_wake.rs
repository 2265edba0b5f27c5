//! The owner's fd on `CLOCK_MONOTONIC`: a schedule from another process (a thread standing in)
//! wakes a sleeping owner through the futex word, and the timerfd wakes it at the deadline.

#![cfg(not(loom))]

use std::time::{Duration, Instant};

use tickwheel_shm::{Config, Segment};

#[test]
fn a_schedule_wakes_the_owner_and_the_deadline_fires_on_time() {
    let segment = Segment::anonymous(&Config::new(64).tick(Duration::from_millis(1))).unwrap();
    let owner = segment.attach().unwrap();
    let mut adv = owner.advancer().unwrap();
    adv.fd().unwrap();
    adv.turn(|_| {});
    let other = segment.attach_as(4_000_000).unwrap();
    let start = Instant::now();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        let at = Instant::now();
        other.schedule_after(Duration::from_millis(20), 9).unwrap();
        at
    });
    let mut fired = Vec::new();
    let mut turns = 0;
    let mut woken = None;
    while fired.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5), "never fired");
        adv.wait(-1).unwrap();
        turns += 1;
        adv.turn(|p| fired.push((p, Instant::now())));
        if woken.is_none() && (adv.indexed() > 0 || !fired.is_empty()) {
            woken = Some(Instant::now());
        }
    }
    let scheduled_at = t.join().unwrap();
    let (p, when) = fired[0];
    assert_eq!(p, 9);
    let late = when.duration_since(scheduled_at);
    assert!(late >= Duration::from_millis(20), "early: {late:?}");
    assert!(late < Duration::from_millis(1_000), "late: {late:?}");
    // Without the futex wake the owner would only look at the 100 ms liveness timer, ~90 ms on.
    let wake = woken.unwrap().duration_since(scheduled_at);
    assert!(
        wake < Duration::from_millis(50),
        "woken {wake:?} after the schedule"
    );
    // Sleeping, waking for the schedule, waking at the deadline: a handful of turns, not a spin.
    assert!(turns < 20, "{turns} turns");
}

#[test]
fn a_later_schedule_does_not_wake_the_owner() {
    let segment = Segment::anonymous(&Config::new(64)).unwrap();
    let owner = segment.attach().unwrap();
    let mut adv = owner.advancer().unwrap();
    owner.schedule_after(Duration::from_millis(200), 1).unwrap();
    adv.fd().unwrap();
    adv.turn(|_| {});
    // Later than the owner's next expiry: no futex wake, so the fd stays quiet.
    owner.schedule_after(Duration::from_millis(400), 2).unwrap();
    let t = Instant::now();
    adv.wait(50).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(45), "woken early");
}

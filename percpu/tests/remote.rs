//! Cross-core schedule, cancel and re-arm through `Remote`, on the manual clock.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, RescheduleError, bases};

fn config(clock: &ManualClock) -> Config {
    Config {
        mode: Mode::Exact,
        clock: ClockSource::Manual(clock.clone()),
        ..Config::default()
    }
}

#[test]
fn schedule_from_another_thread_fires_on_owner() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<String>(2, config(&clock)).unwrap();
    let r = remote.clone();
    let h = std::thread::spawn(move || {
        r.schedule_after(1, Duration::from_millis(3), "hi".to_string())
            .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(h.base(), 1);
    clock.advance(Duration::from_millis(2));
    assert_eq!(all[1].turn(|_| panic!("early")), 0);
    assert_eq!(all[1].len(), 1, "applied from the inbox into the wheel");
    clock.advance(Duration::from_millis(1));
    let mut got = Vec::new();
    all[1].turn(|v| got.push(v));
    assert_eq!(got, ["hi"]);
    assert_eq!(all[0].turn(|_| panic!("wrong base")), 0);
}

#[test]
fn cancel_from_another_thread_before_and_after_apply() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(1, config(&clock)).unwrap();
    let base = &mut all[0];
    // Cancelled while still in the inbox: reclaimed when applied.
    let a = remote
        .schedule_after(0, Duration::from_millis(1), 1)
        .unwrap();
    let r = remote.clone();
    assert!(std::thread::spawn(move || r.cancel(a)).join().unwrap());
    // Cancelled once in the wheel: the notice removes it at the next turn.
    let b = base.schedule_after(Duration::from_millis(1), 2).unwrap();
    let r = remote.clone();
    assert!(std::thread::spawn(move || r.cancel(b)).join().unwrap());
    assert!(!remote.cancel(b), "second cancel loses");
    base.turn(|_| panic!("cancelled"));
    assert!(base.is_empty());
    assert_eq!(base.free_slots(), base.slot_capacity());
    clock.advance(Duration::from_millis(5));
    assert_eq!(base.turn(|_| panic!("cancelled")), 0);
    let s = base.stats();
    assert_eq!((s.scheduled, s.cancelled_remote, s.fired), (2, 2, 0));
}

#[test]
fn owner_cancels_a_remote_schedule_still_in_flight() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(1, config(&clock)).unwrap();
    let h = remote
        .schedule_after(0, Duration::from_millis(1), 1)
        .unwrap();
    assert!(all[0].cancel(h));
    assert!(!all[0].cancel(h));
    clock.advance(Duration::from_millis(2));
    assert_eq!(all[0].turn(|_| panic!("cancelled")), 0);
    assert_eq!(all[0].free_slots(), all[0].slot_capacity());
    assert_eq!(all[0].stats().cancelled_local, 1);
}

#[test]
fn reschedule_is_cancel_plus_schedule() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(2, config(&clock)).unwrap();
    let h = all[1].schedule_after(Duration::from_millis(1), 1).unwrap();
    let h2 = remote
        .reschedule_after(h, Duration::from_millis(10), 2)
        .unwrap();
    assert_eq!(h2.base(), 1);
    clock.advance(Duration::from_millis(5));
    assert_eq!(all[1].turn(|_| panic!("old payload fired")), 0);
    clock.advance(Duration::from_millis(5));
    let mut got = Vec::new();
    all[1].turn(|v| got.push(v));
    assert_eq!(got, [2]);
    match remote.reschedule_after(h2, Duration::from_millis(1), 3) {
        Err(RescheduleError::NotPending(3)) => {}
        other => panic!("expected NotPending(3), got {other:?}"),
    }
}

#[test]
fn own_base_remote_cancel_through_base() {
    // Base::cancel routes another base's handle through the remote path.
    let clock = ManualClock::new();
    let (mut all, _remote) = bases::<u32>(2, config(&clock)).unwrap();
    let h = all[1].schedule_after(Duration::from_millis(1), 1).unwrap();
    assert!(all[0].cancel(h));
    assert!(
        !all[0].reset_after(h, Duration::from_millis(1)),
        "reset only for own handles"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(all[1].turn(|_| panic!("cancelled")), 0);
    assert_eq!(all[1].stats().cancelled_remote, 1);
}

//! Cross-core schedule, cancel and re-arm through `Remote`, on the manual clock.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, bases};

fn config(clock: &ManualClock) -> Config {
    Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
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
    assert_eq!(all[1].len(), 1, "filed from the notice into the wheel");
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
    // Cancelled before the owner filed it: reclaimed when its notice is taken.
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
fn remote_reset_later_keeps_the_handle_and_never_fires_early() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(2, config(&clock)).unwrap();
    let h = all[1].schedule_after(Duration::from_millis(2), 1).unwrap();
    assert!(remote.reset_after(h, Duration::from_millis(10)));
    for _ in 0..9 {
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            all[1].turn(|_| panic!("fired before the re-armed deadline")),
            0
        );
    }
    assert_eq!(all[1].len(), 1, "re-filed, still one entry");
    clock.advance(Duration::from_millis(1));
    let mut got = Vec::new();
    all[1].turn(|v| got.push(v));
    assert_eq!(got, [1]);
    assert!(
        !remote.reset_after(h, Duration::from_millis(1)),
        "fired: stale"
    );
    assert!(!remote.cancel(h));
    assert!(all[1].stats().refiled >= 1);
}

#[test]
fn remote_reset_earlier_moves_the_timer_at_the_next_turn() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(2, config(&clock)).unwrap();
    let h = all[1].schedule_after(Duration::from_secs(60), 5).unwrap();
    assert!(remote.reset_after(h, Duration::from_millis(3)));
    clock.advance(Duration::from_millis(2));
    assert_eq!(all[1].turn(|_| panic!("early")), 0);
    clock.advance(Duration::from_millis(1));
    let mut got = Vec::new();
    all[1].turn(|v| got.push(v));
    assert_eq!(got, [5], "moved earlier by the notice");
    assert_eq!(all[1].free_slots(), all[1].slot_capacity());
}

#[test]
fn remote_reset_of_a_remote_schedule_before_it_is_filed() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(1, config(&clock)).unwrap();
    let h = remote
        .schedule_after(0, Duration::from_millis(1), 4)
        .unwrap();
    assert!(remote.reset_after(h, Duration::from_millis(5)));
    assert!(
        all[0].reset_after(h, Duration::from_millis(6)),
        "owner: not yet filed, still pending"
    );
    clock.advance(Duration::from_millis(5));
    assert_eq!(all[0].turn(|_| panic!("early")), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(all[0].turn(|v| assert_eq!(v, 4)), 1);
}

#[test]
fn cancel_after_remote_reset_wins_and_frees_the_slot() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<u32>(2, config(&clock)).unwrap();
    let h = all[0].schedule_after(Duration::from_millis(1), 1).unwrap();
    assert!(remote.reset_after(h, Duration::from_millis(30)));
    assert!(remote.cancel(h));
    assert!(!remote.reset_after(h, Duration::from_millis(1)));
    all[0].turn(|_| panic!("cancelled"));
    assert_eq!(
        all[0].len(),
        0,
        "the notice took it out of the wheel at once"
    );
    assert_eq!(all[0].free_slots(), all[0].slot_capacity());
    assert_eq!(all[0].stats().cancelled_remote, 1);
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
        "cancelled: another base's handle is re-armed through the remote path, and fails"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(all[1].turn(|_| panic!("cancelled")), 0);
    assert_eq!(all[1].stats().cancelled_remote, 1);
}

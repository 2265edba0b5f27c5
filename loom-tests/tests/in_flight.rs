//! Model 10: the owner cancelling a remote schedule it has not filed yet, against a remote
//! cancel of the same handle; and the owner taking slots from the reserve while remote
//! schedulers take them too.

use std::time::Duration;

use tickwheel_loom_tests::sync::{spawn, yield_now};
use tickwheel_loom_tests::{assert_quiet_and_balanced, check, check_bounded, one_base};

#[test]
fn owner_and_remote_cancel_an_in_flight_schedule() {
    // Under ten executions covers it: the only shared steps are the remote's one CAS on the word
    // and the owner's one CAS (the notice was pushed before the spawn), and loom tries both
    // orders with every placement of the remote's load.
    check("in_flight_cancel_race", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = remote.schedule_after(0, Duration::ZERO, 4).unwrap();
        let canceller = spawn(move || remote.cancel(h));
        let mine = base.cancel(h);
        let theirs = canceller.join().unwrap();
        assert!(
            mine != theirs,
            "exactly one cancel wins: owner={mine} remote={theirs}"
        );
        clock.advance(Duration::from_millis(1));
        base.turn(|_| panic!("cancelled timer fired"));
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
        let s = base.stats();
        assert_eq!(s.scheduled, s.cancelled_local + s.cancelled_remote);
    });
}

#[test]
fn owner_and_remote_share_the_reserve() {
    // Two slots, both in the reserve: the owner's local schedule and a remote schedule compete
    // for them; with a third schedule one of the three must be refused, and nothing is lost.
    check("reserve_shared", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let r2 = remote.clone();
        let a = spawn(move || r2.schedule_after(0, Duration::ZERO, 1).is_ok());
        let b = spawn(move || remote.schedule_after(0, Duration::ZERO, 2).is_ok());
        let mine = base.schedule_after(Duration::ZERO, 3).is_ok();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let accepted = [a, b, mine].iter().filter(|&&x| x).count();
        assert_eq!(accepted, 2, "two slots: a={a} b={b} mine={mine}");
        clock.advance(Duration::from_millis(1));
        let mut fired = 0;
        while fired < accepted {
            fired += base.turn(|_| {});
            yield_now();
        }
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

#[test]
fn remote_schedule_rearmed_and_cancelled_while_the_owner_turns() {
    check_bounded("in_flight_rearm_cancel", 2, || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = remote
            .schedule_after(0, Duration::from_millis(50), 6)
            .unwrap();
        let r2 = remote.clone();
        let a = spawn(move || remote.reset_after(h, Duration::ZERO));
        let c = spawn(move || r2.cancel(h));
        clock.advance(Duration::from_millis(1));
        let mut fired = 0;
        base.turn(|_| fired += 1);
        let _ = a.join().unwrap();
        let cancelled = c.join().unwrap();
        clock.advance(Duration::from_millis(100));
        base.turn(|_| fired += 1);
        assert!(fired <= 1);
        assert!(
            (fired == 1) != cancelled,
            "fired={fired} cancelled={cancelled}"
        );
        assert_quiet_and_balanced(&mut base);
    });
}

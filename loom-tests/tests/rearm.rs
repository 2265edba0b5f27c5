//! Model 8: remote re-arms (`Remote::reset_after`) against fire, cancel and the owner's reset.
//!
//! A re-arm that returns true must win over a fire at the old deadline (the timer then fires at
//! the new one, never before), one that returns false must have lost to a fire or a cancel, and
//! every payload fires or is cancelled exactly once with its slot freed afterwards.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn};
use tickwheel_loom_tests::{assert_quiet_and_balanced, check, one_base, sleep_on};

#[test]
fn later_rearm_races_fire() {
    // Few executions, all of them: the re-arm's two CASes around its deadline store against the
    // owner's Acquire load, deadline load and CAS in `take_due`. loom places the re-arm before,
    // inside (RESETTING seen: re-filed a tick later) and after the owner's look, including between
    // its load and its CAS, the case the `seq` bump exists for.
    check("rearm_later_vs_fire", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 7).unwrap();
        clock.advance(Duration::from_millis(1));
        let rearmer = spawn(move || remote.reset_after(h, Duration::from_millis(9)));
        let mut fired_early = false;
        base.turn(|_| fired_early = true);
        let rearmed = rearmer.join().unwrap();
        assert!(
            fired_early != rearmed,
            "fired={fired_early} re-armed={rearmed}"
        );
        if rearmed {
            // The new deadline is 10 ms: nothing at 9, the payload at 10.
            clock.advance(Duration::from_millis(8));
            assert_eq!(base.turn(|_| panic!("fired before the new deadline")), 0);
            clock.advance(Duration::from_millis(1));
            assert_eq!(base.turn(|v| assert_eq!(v, 7)), 1);
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn earlier_rearm_wakes_the_owner() {
    // A timer a minute out is pulled in to "now" from another thread: the owner, sleeping on its
    // fd between turns, must learn of it (notice + wake-up) and fire it.
    check("rearm_earlier_wakes", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_secs(60), 3).unwrap();
        clock.advance(Duration::from_millis(1));
        let rearmer = spawn(move || assert!(remote.reset_after(h, Duration::ZERO)));
        let mut fired = false;
        loop {
            base.turn(|v| {
                assert_eq!(v, 3);
                fired = true;
            });
            if fired {
                break;
            }
            sleep_on(base.fd());
        }
        rearmer.join().unwrap();
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn rearm_races_cancel_and_fire() {
    check("rearm_vs_cancel_vs_fire", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 5).unwrap();
        clock.advance(Duration::from_millis(1));
        let r2 = remote.clone();
        let rearmer = spawn(move || r2.reset_after(h, Duration::from_millis(4)));
        let canceller = spawn(move || remote.cancel(h));
        let fired = Arc::new(AtomicBool::new(false));
        let mut count = 0;
        base.turn(|_| count += 1);
        let rearmed = rearmer.join().unwrap();
        let cancelled = canceller.join().unwrap();
        clock.advance(Duration::from_millis(10));
        base.turn(|_| count += 1);
        // Relaxed: single-threaded from here.
        fired.store(count > 0, Ordering::Relaxed);
        assert!(count <= 1, "fired {count} times");
        assert!(
            (count == 1) != cancelled,
            "fired={count} cancelled={cancelled} re-armed={rearmed}"
        );
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn owner_reset_races_remote_cancel() {
    check("owner_reset_vs_remote_cancel", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(5), 9).unwrap();
        clock.advance(Duration::from_millis(1));
        let canceller = spawn(move || remote.cancel(h));
        // Pulled in to "now", then a turn that may fire it, unless the cancel wins first.
        let reset = base.reset_after(h, Duration::ZERO);
        let fired = base.turn(|_| {});
        let cancelled = canceller.join().unwrap();
        assert!(
            (fired == 1) != cancelled,
            "fired={fired} cancelled={cancelled} reset={reset}"
        );
        assert!(
            reset || cancelled,
            "a failed reset means the cancel came first"
        );
        clock.advance(Duration::from_millis(5));
        assert_eq!(base.turn(|_| panic!("fired twice or after its cancel")), 0);
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn two_later_rearms_race_fire() {
    // A fire at the old deadline means both re-arms lost; otherwise the later deadline holds.
    check("two_rearms_vs_fire", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 7).unwrap();
        clock.advance(Duration::from_millis(1));
        let r2 = remote.clone();
        let a = spawn(move || remote.reset_after(h, Duration::from_millis(9)));
        let b = spawn(move || r2.reset_after(h, Duration::from_millis(9)));
        let mut n = 0;
        base.turn(|_| n += 1);
        let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
        if n == 1 {
            assert!(!ra && !rb, "fired at the old deadline but a={ra} b={rb}");
        } else {
            assert!(ra || rb);
            clock.advance(Duration::from_millis(8));
            assert_eq!(base.turn(|_| panic!("early")), 0);
            clock.advance(Duration::from_millis(2));
            assert_eq!(base.turn(|_| {}), 1);
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn owner_cancel_races_remote_rearm() {
    // A dozen executions are every order of the re-arm's two CASes against the owner's one CAS,
    // and of the re-arm's notice push against the turn that takes it.
    check("owner_cancel_vs_rearm", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 1).unwrap();
        clock.advance(Duration::from_millis(1));
        let a = spawn(move || remote.reset_after(h, Duration::ZERO));
        assert!(base.cancel(h), "only the owner cancels");
        base.turn(|_| panic!("cancelled timer fired"));
        let _ = a.join().unwrap();
        clock.advance(Duration::from_millis(10));
        // The slot comes free once the re-arm (if it was in flight) has queued it.
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn earlier_remote_rearm_races_the_owners_later_rearm_and_refile() {
    // The owner keeps working after it shared the handle: it pushes its own timer later (a plain
    // store of the deadline) and its turn re-files the old entry at that later deadline, while a
    // remote thread pulls the timer in. Whatever order the two re-arms land in, the owner's entry
    // must never be later than the slot's deadline: a last re-arm, ordered after both, to a
    // deadline between the two must fire on time.
    check("earlier_rearm_vs_owner_later_rearm", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let t0 = base.now();
        let ms = Duration::from_millis;
        let h = base.schedule_at(t0 + ms(1), 4).unwrap();
        let r = remote.clone();
        let rearmer = spawn(move || r.reset_at(h, t0 + ms(5)));
        assert!(
            base.reset_at(h, t0 + ms(10)),
            "pending: the owner's re-arm succeeds"
        );
        clock.advance(ms(1));
        assert_eq!(base.turn(|_| panic!("fired before either new deadline")), 0);
        assert!(
            rearmer.join().unwrap(),
            "pending: the remote re-arm succeeds"
        );
        // Ordered after both: the timer's deadline is now 7 ms.
        assert!(remote.reset_at(h, t0 + ms(7)));
        clock.advance(ms(5));
        assert_eq!(base.turn(|_| panic!("fired before 7 ms")), 0);
        clock.advance(ms(1));
        assert_eq!(
            base.turn(|v| assert_eq!(v, 4)),
            1,
            "not fired at its deadline of 7 ms"
        );
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn earlier_remote_rearm_races_the_owners_rearm_of_an_unfiled_remote_schedule() {
    // A remote schedule the owner has not filed yet is pushed later by the owner (a plain store),
    // then filed by the owner's turn from the notice, while another thread pulls it in.
    check("earlier_rearm_vs_owner_rearm_unfiled", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let t0 = base.now();
        let ms = Duration::from_millis;
        let h = remote.schedule_at(0, t0 + ms(1), 6).unwrap();
        let r = remote.clone();
        let rearmer = spawn(move || r.reset_at(h, t0 + ms(5)));
        assert!(base.reset_at(h, t0 + ms(10)));
        assert_eq!(base.turn(|_| panic!("fired before either new deadline")), 0);
        assert!(rearmer.join().unwrap());
        assert!(remote.reset_at(h, t0 + ms(7)));
        clock.advance(ms(6));
        assert_eq!(base.turn(|_| panic!("fired before 7 ms")), 0);
        clock.advance(ms(1));
        assert_eq!(
            base.turn(|v| assert_eq!(v, 6)),
            1,
            "not fired at its deadline of 7 ms"
        );
        assert_quiet_and_balanced(&mut base);
    });
}

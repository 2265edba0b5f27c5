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

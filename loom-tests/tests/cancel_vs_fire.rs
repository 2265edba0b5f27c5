//! Model 1: a remote cancel racing the owner's fire. Exactly one of "handler ran" and "cancel
//! returned true"; afterwards the slot is free again.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn};
use tickwheel_loom_tests::{assert_quiet_and_balanced, check, one_base};

#[test]
fn remote_cancel_races_fire() {
    check("cancel_vs_fire", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 7).unwrap();
        clock.advance(Duration::from_millis(1));

        let canceller = spawn(move || remote.cancel(h));
        let ran = Arc::new(AtomicBool::new(false));
        let ran2 = ran.clone();
        let owner = spawn(move || {
            base.turn(|v| {
                assert_eq!(v, 7);
                // Relaxed: read after join.
                ran2.store(true, Ordering::Relaxed);
            });
            base
        });
        let cancelled = canceller.join().unwrap();
        let mut base = owner.join().unwrap();
        let fired = ran.load(Ordering::Relaxed);
        assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");

        // Whoever won, the next turn leaves nothing behind.
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn remote_cancel_races_apply_and_fire_of_a_remote_schedule() {
    // The timer comes through the notice stack, so the cancel can land before the owner files
    // it, between filing and fire, or after the fire.
    check("cancel_vs_fire_remote_scheduled", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = remote.schedule_after(0, Duration::ZERO, 7).unwrap();
        clock.advance(Duration::from_millis(1));
        let canceller = spawn(move || remote.cancel(h));
        let mut fired = false;
        base.turn(|_| fired = true);
        let cancelled = canceller.join().unwrap();
        assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
        base.turn(|_| panic!("fired twice"));
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

#[test]
fn two_cancellers_race_fire() {
    check("cancel_vs_fire_two_cancellers", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::ZERO, 7).unwrap();
        clock.advance(Duration::from_millis(1));
        let r1 = remote.clone();
        let c1 = spawn(move || r1.cancel(h));
        let c2 = spawn(move || remote.cancel(h));
        let mut fired = false;
        base.turn(|_| fired = true);
        let (a, b) = (c1.join().unwrap(), c2.join().unwrap());
        assert_eq!(
            u8::from(fired) + u8::from(a) + u8::from(b),
            1,
            "fired={fired} a={a} b={b}"
        );
        base.turn(|_| panic!("fired twice"));
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

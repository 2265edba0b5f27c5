//! Shared timer sets, model 3: a cancel from another process races the owner's fire. Exactly
//! one of "fired" and "cancel returned true"; the slot is free again either way.

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Config, Segment};

#[test]
fn cancel_races_fire() {
    // Few executions, and all of them: the canceller's one CAS on the slot word (then its push of
    // the slot) against the owner's one fire CAS; loom places the cancel before, between and after
    // the owner's load and CAS.
    check("shm_cancel_vs_fire", || {
        let seg = Segment::anonymous(&Config::new(1).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let h = owner.schedule_at(1, 7).unwrap();
        adv.turn(|_| {});
        adv.advance_to(1);
        let other = seg.attach_as(2).unwrap();
        let canceller = spawn(move || other.cancel(h));
        let mut fired = false;
        adv.turn(|p| {
            assert_eq!(p, 7);
            fired = true;
        });
        let cancelled = canceller.join().unwrap();
        assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
        adv.turn(|_| panic!("fired twice"));
        // The one slot is free again.
        owner.schedule_at(2, 8).unwrap();
    });
}

#[test]
fn cancel_races_apply_and_fire_of_another_process_schedule() {
    // The owner has not applied the schedule yet: the cancel can land before the apply, between
    // apply and fire, or after the fire.
    // Under 50 executions: the cancel is one CAS and a push, and the owner's apply and fire are
    // one CAS each on the same word; that is every order of them.
    check("shm_cancel_vs_apply_and_fire", || {
        let seg = Segment::anonymous(&Config::new(1).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let other = seg.attach_as(2).unwrap();
        let h = other.schedule_at(0, 7).unwrap();
        let canceller = spawn(move || other.cancel(h));
        let mut fired = false;
        adv.turn(|_| fired = true);
        let cancelled = canceller.join().unwrap();
        assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
        adv.turn(|_| panic!("fired twice"));
        owner.schedule_at(2, 8).unwrap();
    });
}

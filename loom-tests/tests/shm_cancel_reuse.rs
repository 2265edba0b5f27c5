//! Shared timer sets, model 6: a cancel frees its own slot. The canceller's push races the
//! owner's fire CAS of the same arming and another process's pop of that very slot, so the owner
//! may still hold an index entry of the cancelled arming while the slot is armed again. Exactly
//! one of "fired" and "cancel returned true"; the new timer fires once, never at the old
//! deadline; one slot, never handed out twice. A second model runs the owner's recovery against
//! a live canceller's push and the re-use of its slot.

use std::sync::Arc as StdArc;

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Config, Segment};

/// One slot; the owner has indexed timer 7 (deadline 1) and its clock is at 1. Another process
/// cancels it while a third schedules 8 at `new_deadline` and the owner turns.
fn cancel_fire_and_reuse(name: &str, new_deadline: u64) {
    check(name, move || {
        let seg = Segment::anonymous(&Config::new(1).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let h = owner.schedule_at(1, 7).unwrap();
        adv.turn(|p| panic!("{p} fired early"));
        adv.advance_to(1);
        let (c, s) = (seg.attach_as(2).unwrap(), seg.attach_as(3).unwrap());
        let canceller = spawn(move || c.cancel(h));
        let scheduler = spawn(move || s.schedule_at(new_deadline, 8).is_ok());
        let mut fired = Vec::new();
        adv.turn(|p| fired.push((p, 1)));
        let cancelled = canceller.join().unwrap();
        let rescheduled = scheduler.join().unwrap();
        // The owner's stale entry of 7 (if the cancel won) must not fire 8 at tick 1 when 8 is
        // due later; and 8 needs a free slot, which only the end of 7's arming makes.
        adv.turn(|p| fired.push((p, 1)));
        adv.advance_to(5);
        adv.turn(|p| fired.push((p, 5)));
        let sevens = fired.iter().filter(|f| f.0 == 7).count();
        let eights: Vec<u64> = fired.iter().filter(|f| f.0 == 8).map(|f| f.1).collect();
        assert_eq!(
            sevens + usize::from(cancelled),
            1,
            "fired {fired:?}, cancelled {cancelled}"
        );
        assert_eq!(
            eights.len(),
            usize::from(rescheduled),
            "fired {fired:?}, rescheduled {rescheduled}"
        );
        assert!(
            eights.iter().all(|&at| at >= new_deadline),
            "8 (due {new_deadline}) fired early: {fired:?}"
        );
        // The one slot is free again, once.
        let last = owner.schedule_at(9, 9).unwrap();
        assert!(
            owner.schedule_at(9, 10).is_err(),
            "one slot handed out twice"
        );
        assert!(owner.cancel(last));
    });
}

#[test]
fn cancel_frees_the_slot_against_fire_and_a_later_reuse() {
    cancel_fire_and_reuse("shm_cancel_reuse_later", 5);
}

#[test]
fn cancel_frees_the_slot_against_fire_and_a_reuse_at_the_same_deadline() {
    cancel_fire_and_reuse("shm_cancel_reuse_same", 1);
}

#[test]
fn recovery_races_a_live_cancellers_push_and_the_reuse_of_its_slot() {
    // Everyone alive: recovery must leave the canceller's half-freed slot alone, may re-issue a
    // slot the live scheduler popped (its claim then fails and it pops again), and must never
    // put the slot on the stack twice.
    check("shm_recovery_vs_cancel_reuse", || {
        let seg = Segment::anonymous(&Config::new(1).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(|_| true));
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let h = owner.schedule_at(5, 7).unwrap();
        adv.turn(|_| {});
        let (c, s) = (seg.attach_as(2).unwrap(), seg.attach_as(3).unwrap());
        let canceller = spawn(move || c.cancel(h));
        let scheduler = spawn(move || s.schedule_at(5, 8).is_ok());
        adv.recover();
        assert!(canceller.join().unwrap(), "nothing else ends 7's arming");
        let rescheduled = scheduler.join().unwrap();
        adv.recover();
        // Exactly one slot: taken by 8, or free once.
        let extra = owner.schedule_at(6, 9);
        assert_eq!(
            extra.is_ok(),
            !rescheduled,
            "rescheduled {rescheduled}, the slot free again: {:?}",
            extra.is_ok()
        );
        assert!(
            owner.schedule_at(6, 10).is_err(),
            "one slot handed out twice"
        );
        adv.advance_to(6);
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        fired.sort_unstable();
        let want: Vec<u64> = if rescheduled { vec![8] } else { vec![9] };
        assert_eq!(fired, want);
    });
}

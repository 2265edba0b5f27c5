//! Shared timer sets, model 5: a scheduler died mid-operation; the owner's recovery runs while a
//! live scheduler pops and claims. Recovery may re-issue the very slot the live one popped; its
//! claim then fails and it pops again. Every payload of the live one fires once; nothing leaks.

use std::sync::Arc as StdArc;

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Config, CrashPoint, Segment};

/// Under 50 executions each: the dead scheduler's steps are done before the spawn, so what races
/// is the live scheduler's pop and claim (two CASes) against the recovery's scan and re-issue of
/// the dead one's slot; loom tries the pop before, inside and after the recovery's walk.
fn died_at(point: CrashPoint, name: &str) {
    check(name, move || {
        let seg = Segment::anonymous(&Config::new(2).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(|pid| pid != 2));
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let victim = seg.attach_as(2).unwrap();
        let armed = victim.schedule_crashing(point, 0, 20).is_some();
        victim.crash();

        let live = seg.attach_as(3).unwrap();
        let t = spawn(move || {
            live.schedule_at(0, 30).unwrap();
        });
        adv.recover();
        t.join().unwrap();
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        fired.sort_unstable();
        let expect: &[u64] = if armed { &[20, 30] } else { &[30] };
        assert_eq!(fired, expect, "{point:?}");
        // Both slots are free again.
        owner.schedule_at(5, 1).unwrap();
        owner.schedule_at(5, 2).unwrap();
        assert!(owner.schedule_at(5, 3).is_err());
    });
}

#[test]
fn died_after_pop() {
    died_at(CrashPoint::AfterPop, "shm_recovery_after_pop");
}

#[test]
fn died_after_claim() {
    died_at(CrashPoint::AfterClaim, "shm_recovery_after_claim");
}

#[test]
fn died_after_arm() {
    died_at(CrashPoint::AfterArm, "shm_recovery_after_arm");
}

#[test]
fn recovery_races_a_live_cancellers_push() {
    // A canceller died between its CAS and its push; recovery re-issues that slot while a live
    // canceller pushes another one. Neither slot is lost or put on the stack twice.
    // 44 executions: the live canceller's push (a CAS on the stack head) and its clearing CAS
    // against the recovery's scan, walk and re-issue; every placement of the two CASes.
    check("shm_recovery_vs_push", || {
        let seg = Segment::anonymous(&Config::new(2).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(|pid| pid != 2));
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let (h0, h1) = (
            owner.schedule_at(5, 10).unwrap(),
            owner.schedule_at(5, 11).unwrap(),
        );
        let victim = seg.attach_as(2).unwrap();
        assert!(victim.cancel_crashing(h0));
        victim.crash();
        let live = seg.attach_as(3).unwrap();
        let t = spawn(move || assert!(live.cancel(h1)));
        adv.recover();
        t.join().unwrap();
        adv.advance_to(5);
        adv.turn(|p| panic!("cancelled {p} fired"));
        adv.recover();
        // Both slots are free again, each once.
        let a = owner.schedule_at(9, 1).unwrap();
        let b = owner.schedule_at(9, 2).unwrap();
        assert_ne!(a, b);
        assert!(owner.schedule_at(9, 3).is_err());
    });
}

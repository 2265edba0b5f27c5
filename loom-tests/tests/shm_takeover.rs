//! Shared timer sets, model 4: the owner died; two processes race to take advancing over while a
//! third schedules. One CAS picks the new owner, whose rebuild loses no timer.

use std::sync::Arc as StdArc;

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::{spawn, yield_now};
use tickwheel_shm::{Config, Segment};

#[test]
fn two_heirs_race_for_a_dead_owners_set() {
    check("shm_takeover", || {
        let seg = Segment::anonymous(&Config::new(3).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(|pid| pid != 1));
        let dead = seg.attach_as(1).unwrap();
        let adv = dead.advancer().unwrap();
        dead.schedule_at(1, 10).unwrap();
        let mut adv = adv;
        adv.turn(|_| {});
        dead.schedule_at(1, 11).unwrap(); // marked, never applied by the dead owner
        // Killed: the owner word and the registry record still name process 1.
        adv.crash();
        dead.crash();

        let (a, b, s) = (
            seg.attach_as(2).unwrap(),
            seg.attach_as(3).unwrap(),
            seg.attach_as(4).unwrap(),
        );
        let ta = spawn(move || a.advancer().ok());
        let tb = spawn(move || b.advancer().ok());
        let ts = spawn(move || {
            s.schedule_at(1, 12).unwrap();
        });
        let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
        ts.join().unwrap();
        assert!(ra.is_some() != rb.is_some(), "exactly one heir");
        let mut adv = ra.or(rb).unwrap();
        adv.advance_to(1);
        let mut fired = Vec::new();
        while fired.len() < 3 {
            adv.turn(|p| fired.push(p));
            yield_now();
        }
        fired.sort_unstable();
        assert_eq!(fired, [10, 11, 12]);
        assert_eq!(adv.client().stats().takeovers, 1);
    });
}

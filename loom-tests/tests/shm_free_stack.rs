//! Shared timer sets, model 1: two processes pop the tagged free stack while a third cancels a
//! timer, which pushes its slot onto the stack. No slot is handed out twice, and every payload
//! fires exactly once.

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Config, Handle, Segment};

fn slot(h: Handle) -> u32 {
    (h.to_u128() >> 32) as u32
}

#[test]
fn two_pops_race_a_cancels_push() {
    check("shm_pop_vs_push", || {
        let seg = Segment::anonymous(&Config::new(3).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        // Slots 0 and 1 fire and go on the free stack; slot 2 is cancelled by a third process
        // while the two pops run, and that cancel pushes it.
        owner.schedule_at(0, 10).unwrap();
        owner.schedule_at(0, 11).unwrap();
        let h = owner.schedule_at(5, 12).unwrap();
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        assert_eq!(fired.len(), 2);

        let (a, b, c) = (
            seg.attach_as(2).unwrap(),
            seg.attach_as(3).unwrap(),
            seg.attach_as(4).unwrap(),
        );
        let ta = spawn(move || a.schedule_at(1, 20).unwrap());
        let tb = spawn(move || b.schedule_at(1, 21).unwrap());
        let tc = spawn(move || assert!(c.cancel(h)));
        let (ha, hb) = (ta.join().unwrap(), tb.join().unwrap());
        tc.join().unwrap();
        adv.turn(|p| panic!("{p} fired early"));
        assert_ne!(slot(ha), slot(hb), "one slot handed out twice");

        adv.advance_to(1);
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        fired.sort_unstable();
        assert_eq!(fired, [20, 21]);
        // Nothing leaked: three slots, three schedules.
        for p in 0..3 {
            owner.schedule_at(9, p).unwrap();
        }
        assert!(owner.schedule_at(9, 3).is_err());
    });
}

//! Shared timer sets, model 6: the owner publishes the tick it sleeps until and then looks at
//! the marks; a scheduler marks and then reads that tick. Either the scheduler wakes the owner
//! or the owner sees the mark before sleeping: the owner "sleeps" by spinning until the wake
//! counter moves, so a lost wake-up spins forever and fails the model.

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::{spawn, yield_now};
use tickwheel_shm::{Config, Segment};

#[test]
fn a_schedule_is_never_missed_by_a_sleeping_owner() {
    check("shm_wake", || {
        let seg = Segment::anonymous(&Config::new(2).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let other = seg.attach_as(2).unwrap();
        let t = spawn(move || {
            other.schedule_at(0, 5).unwrap();
        });
        let mut fired = false;
        loop {
            let woken = seg.wake_count();
            adv.turn(|_| fired = true);
            if fired {
                break;
            }
            if !adv.marks_before_sleep() {
                // Asleep until a scheduler moves the futex word.
                while seg.wake_count() == woken {
                    yield_now();
                }
            }
        }
        t.join().unwrap();
    });
}

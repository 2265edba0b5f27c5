//! Shared timer sets, model 10: the owner's far set. A timer due past the owner's horizon is
//! kept out of its wheel (one bit a slot) until a turn at the horizon looks at it. Here that
//! turn's look races a cancel of the far timer and the re-use of its slot for a timer due before
//! the new horizon (filed in the wheel by whoever sees it first: the look or the mark) or after it
//! (left in the far set). The cancelled timer never fires; the new one fires once, in the first
//! turn at or after its deadline, never earlier; the one slot is handed out once.

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Config, Segment};

/// The horizon of a fresh owner at clock 0 (`shm/src/index.rs`, `SPAN`).
const HORIZON: u64 = 4096;

/// Timer 7 due at `HORIZON + 10` sits in the far set of a one-slot set; the clock moves to the
/// horizon. Then, while the owner turns, another process cancels 7 and schedules 8 at
/// `new_deadline` (through one client, which keeps the slot, or two, the second popping it).
fn far_cancel_and_reuse(name: &str, new_deadline: u64, one_client: bool) {
    check(name, move || {
        let seg = Segment::anonymous(&Config::new(1).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let h = owner.schedule_at(HORIZON + 10, 7).unwrap();
        adv.turn(|p| panic!("{p} fired early"));
        assert_eq!(
            adv.next_expiry(),
            Some(HORIZON),
            "a far timer waits for the horizon"
        );
        adv.advance_to(HORIZON);
        let c = seg.attach_as(2).unwrap();
        let (cancelled, rescheduled) = if one_client {
            let t = spawn(move || {
                let cancelled = c.cancel(h);
                (cancelled, c.schedule_at(new_deadline, 8).is_ok())
            });
            adv.turn(|p| panic!("{p} fired at the horizon"));
            t.join().unwrap()
        } else {
            let s = seg.attach_as(3).unwrap();
            let canceller = spawn(move || c.cancel(h));
            let scheduler = spawn(move || s.schedule_at(new_deadline, 8).is_ok());
            adv.turn(|p| panic!("{p} fired at the horizon"));
            (canceller.join().unwrap(), scheduler.join().unwrap())
        };
        assert!(cancelled, "nothing fired 7: its cancel must win");
        let mut fired = Vec::new();
        let mut ticks = [
            HORIZON,
            new_deadline - 1,
            new_deadline,
            HORIZON + 10,
            3 * HORIZON,
        ];
        ticks.sort_unstable();
        for at in ticks {
            adv.advance_to(at);
            adv.turn(|p| fired.push((p, at)));
        }
        assert!(
            fired.iter().all(|f| f.0 != 7),
            "7 fired after its cancel: {fired:?}"
        );
        if rescheduled {
            assert_eq!(
                fired,
                [(8, new_deadline)],
                "8 (due {new_deadline}) must fire once, on time"
            );
        } else {
            assert!(fired.is_empty(), "fired {fired:?} with nothing scheduled");
        }
        // The one slot is free again, once.
        let last = owner.schedule_at(3 * HORIZON + 1, 9).unwrap();
        assert!(
            owner.schedule_at(3 * HORIZON + 1, 10).is_err(),
            "one slot handed out twice"
        );
        assert!(owner.cancel(last));
    });
}

#[test]
fn far_timer_cancelled_and_slot_reused_near_by_its_canceller() {
    far_cancel_and_reuse("shm_far_reuse_near_kept", HORIZON + 5, true);
}

#[test]
fn far_timer_cancelled_and_slot_reused_far_by_its_canceller() {
    far_cancel_and_reuse("shm_far_reuse_far_kept", 2 * HORIZON + 5, true);
}

#[test]
fn far_timer_cancelled_and_slot_reused_near_by_another_process() {
    far_cancel_and_reuse("shm_far_reuse_near_popped", HORIZON + 5, false);
}

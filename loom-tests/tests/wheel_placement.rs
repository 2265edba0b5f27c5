//! Model 14: the base's wheel files a record by the deadline it reads from the record itself (there
//! is no filed tick kept apart), when it cascades a slot and when a bucket that came due holds a
//! record pushed later. Those reads race a remote re-arm of the same timer, and a remote re-arm
//! sends a notice only if its deadline is earlier than the one it reads: so the wheel must never
//! file a record later than a deadline a racing re-arm could have read (the "Filing" rule of
//! `protocol::slots`, which the wheel's read keeps with an RMW on the word).
//!
//! Each model pushes the timer later with the owner's plain store while a remote re-arm races the
//! turn that reads it, then lets one last re-arm from another thread, ordered after everything
//! else, decide the deadline: the timer must fire at exactly that tick (`Exact`, 1 ms ticks),
//! never before, never later. A record the wheel filed later than the deadline the last re-arm
//! read would fire late.

use std::time::Duration;

use tickwheel_loom_tests::sync::spawn;
use tickwheel_loom_tests::{assert_quiet_and_balanced, check, last_rearm_decides, one_base};

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_cascade_reads_the_deadline_while_a_remote_rearms() {
    // Scheduled at 70 ms: level 1 in Exact mode (slots of 64 ticks), cascaded at 64 ms by the
    // deadline read then. The owner pushes it to 100 ms (a plain store) while a remote re-arms it
    // to 80 ms; the cascade at 64 ms races the remote.
    check("cascade_vs_remote_rearm", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let t0 = base.now();
        let h = base.schedule_at(t0 + 70 * MS, 1).unwrap();
        let r = remote.clone();
        let pusher = spawn(move || r.reset_at(h, t0 + 80 * MS));
        assert!(base.reset_at(h, t0 + 100 * MS), "pending");
        clock.advance(64 * MS);
        assert_eq!(base.turn(|_| panic!("fired at 64 ms")), 0);
        assert!(pusher.join().unwrap(), "pending when re-armed");
        last_rearm_decides(&mut base, &remote, &clock, t0, (h, 1), 64..90);
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn a_due_bucket_places_again_while_a_remote_rearms() {
    // Scheduled at 3 ms (level 0); the owner pushes it to 40 ms while a remote re-arms it to
    // 20 ms; at 3 ms the bucket comes due and the wheel places the record again by the deadline it
    // reads then, racing the remote.
    check("place_again_vs_remote_rearm", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let t0 = base.now();
        let h = base.schedule_at(t0 + 3 * MS, 1).unwrap();
        let r = remote.clone();
        let pusher = spawn(move || r.reset_at(h, t0 + 20 * MS));
        assert!(base.reset_at(h, t0 + 40 * MS), "pending");
        clock.advance(3 * MS);
        assert_eq!(base.turn(|_| panic!("fired at 3 ms")), 0);
        assert!(pusher.join().unwrap(), "pending when re-armed");
        last_rearm_decides(&mut base, &remote, &clock, t0, (h, 1), 3..30);
        assert_quiet_and_balanced(&mut base);
    });
}

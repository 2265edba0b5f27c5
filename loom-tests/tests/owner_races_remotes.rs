//! Model 13: the owner's own operations on a shared timer, in and out of its handlers, racing
//! remote re-arms and cancels of the same timer.
//!
//! Each model ends with a check against the naive model of a timer: a re-arm from another thread,
//! ordered after every other operation (the racing threads are joined first), decides the
//! deadline, and the timer must then fire at exactly that tick (`Exact` mode, 1 ms ticks), never
//! before and never later, or not at all if a cancel won. Before that final re-arm, whichever of
//! the racing stores landed last is the deadline, so a fire during the race is checked against the
//! deadlines that could have been in force.

use std::time::Duration;

use tickwheel_loom_tests::sync::spawn;
use tickwheel_loom_tests::{
    assert_quiet_and_balanced, check, check_bounded, last_rearm_decides, one_base,
};

const MS: Duration = Duration::from_millis(1);

#[test]
fn owner_pulls_in_while_a_remote_pushes_out() {
    // The owner moves its entry earlier (a local re-arm to 2 ms) while a remote pushes the timer
    // to 9 ms with a plain later re-arm that sends nothing. At 2 ms it fires only if the owner's
    // store landed last; otherwise the remote's deadline holds, and a last re-arm to 6 ms decides.
    check("owner_earlier_vs_remote_later", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let t0 = base.now();
        let h = base.schedule_at(t0 + 5 * MS, 1).unwrap();
        let r = remote.clone();
        let pusher = spawn(move || r.reset_at(h, t0 + 9 * MS));
        assert!(base.reset_at(h, t0 + 2 * MS), "pending");
        clock.advance(2 * MS);
        let fired = base.turn(|v| assert_eq!(v, 1));
        let pushed = pusher.join().unwrap();
        if fired == 0 {
            assert!(pushed, "still pending, so the re-arm found it pending");
            last_rearm_decides(&mut base, &remote, &clock, t0, (h, 1), 2..6);
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn handler_pulls_in_while_a_remote_pushes_out() {
    // As above, from a handler: `a`'s handler pulls `b` in to now (it then fires in the same
    // turn, if that store landed last) while a remote pushes `b` out to 9 ms.
    check("handler_earlier_vs_remote_later", || {
        let (mut base, remote, clock) = one_base::<u32>(3, 1);
        let t0 = base.now();
        base.schedule_at(t0 + MS, 1).unwrap();
        let b = base.schedule_at(t0 + 5 * MS, 2).unwrap();
        let r = remote.clone();
        let pusher = spawn(move || r.reset_at(b, t0 + 9 * MS));
        clock.advance(MS);
        let mut fired = Vec::new();
        base.turn_with(|base, v| {
            fired.push(v);
            if v == 1 {
                assert!(base.reset_at(b, t0 + MS), "b pending");
            }
        });
        let pushed = pusher.join().unwrap();
        match fired[..] {
            [1, 2] => {}
            [1] => {
                assert!(pushed, "b still pending, so the re-arm found it pending");
                last_rearm_decides(&mut base, &remote, &clock, t0, (b, 2), 1..4);
            }
            _ => panic!("fired {fired:?}"),
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn handler_cancels_while_remotes_pull_in_and_cancel() {
    // `a` (1 ms) fires first and its handler cancels `b` (2 ms), due later in the same loop,
    // while one remote pulls `b` in to 1 ms (a notice) and another cancels it. `b` never fires,
    // exactly one of the two cancels wins, and the slot comes free once every flag is gone.
    check("handler_cancel_vs_remote_rearm_and_cancel", || {
        let (mut base, remote, clock) = one_base::<u32>(3, 1);
        let t0 = base.now();
        base.schedule_at(t0 + MS, 1).unwrap();
        let b = base.schedule_at(t0 + 2 * MS, 2).unwrap();
        let (r1, r2) = (remote.clone(), remote.clone());
        let puller = spawn(move || r1.reset_at(b, t0 + MS));
        let canceller = spawn(move || r2.cancel(b));
        clock.advance(2 * MS);
        let mut mine = None;
        let fired = base.turn_with(|base, v| {
            assert_eq!(v, 1, "b fired");
            mine = Some(base.cancel(b));
        });
        assert_eq!(fired, 1);
        let _ = puller.join().unwrap();
        let theirs = canceller.join().unwrap();
        assert!(
            mine == Some(!theirs),
            "exactly one cancel wins: handler={mine:?} remote={theirs}"
        );
        clock.advance(5 * MS);
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn handler_pushes_out_a_remote_schedule_as_it_is_filed() {
    // A remote schedule of `b` at 2 ms that the owner has not filed: `a`'s handler pushes `b` out
    // to 10 ms (a plain store) in the turn that then files `b` from its notice, while another
    // remote pulls `b` in to 5 ms. A last re-arm to 7 ms decides.
    check("handler_later_vs_remote_earlier_unfiled", || {
        let (mut base, remote, clock) = one_base::<u32>(3, 2);
        let t0 = base.now();
        base.schedule_at(t0 + MS, 1).unwrap();
        let b = remote.schedule_at(0, t0 + 2 * MS, 2).unwrap();
        let r = remote.clone();
        let puller = spawn(move || r.reset_at(b, t0 + 5 * MS));
        clock.advance(MS);
        let fired = base.turn_with(|base, v| {
            assert_eq!(v, 1, "b fired before any of its deadlines");
            assert!(base.reset_at(b, t0 + 10 * MS), "b pending");
        });
        assert_eq!(fired, 1);
        assert!(puller.join().unwrap(), "b pending when it re-armed");
        last_rearm_decides(&mut base, &remote, &clock, t0, (b, 2), 1..7);
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn two_remotes_and_the_owner_move_one_timer() {
    // One timer, three writers: a remote pushes it out to 6 ms, another pulls it in to 2 ms (a
    // notice), the owner pushes it out to 8 ms, and the owner turns at 1 and 2 ms. It may fire at
    // 2 ms only if the pull-in landed last; otherwise a last re-arm to 5 ms decides. Three threads:
    // capped at 2 preemptions (about 11,000 executions; about 100,000 at 3).
    check_bounded("two_remotes_and_owner_rearm", 2, || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let t0 = base.now();
        let h = base.schedule_at(t0 + 3 * MS, 1).unwrap();
        let (r1, r2) = (remote.clone(), remote.clone());
        let pusher = spawn(move || r1.reset_at(h, t0 + 6 * MS));
        let puller = spawn(move || r2.reset_at(h, t0 + 2 * MS));
        assert!(base.reset_at(h, t0 + 8 * MS), "pending");
        clock.advance(MS);
        assert_eq!(base.turn(|_| panic!("fired at 1 ms")), 0);
        clock.advance(MS);
        let fired = base.turn(|v| assert_eq!(v, 1));
        let (pushed, pulled) = (pusher.join().unwrap(), puller.join().unwrap());
        // A fire at 2 ms needs the pull-in's deadline; the push-out may have come after it.
        assert!(pulled, "the pull-in found it pending");
        if fired == 0 {
            assert!(pushed, "still pending, so the push-out found it pending");
            last_rearm_decides(&mut base, &remote, &clock, t0, (h, 1), 2..5);
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn owner_cancels_and_reuses_the_slot_under_a_remote_rearm() {
    // A remote pulls `h` in (a notice) while the owner cancels it and at once schedules `c`,
    // which takes `h`'s slot if the cancel could free it. The stale re-arm must not touch `c`:
    // `c` fires at its own 3 ms, once, and `h` never fires.
    check("owner_cancel_reuse_vs_remote_rearm", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let t0 = base.now();
        let h = base.schedule_at(t0 + 5 * MS, 1).unwrap();
        let r = remote.clone();
        let puller = spawn(move || r.reset_at(h, t0 + MS));
        assert!(base.cancel(h), "only the owner cancels");
        let c = base.schedule_at(t0 + 3 * MS, 2).unwrap();
        assert_ne!(c, h);
        for t in 0..3 {
            assert_eq!(base.turn(|v| panic!("{v} fired at {t} ms")), 0);
            clock.advance(MS);
        }
        let _ = puller.join().unwrap();
        assert_eq!(base.turn(|v| assert_eq!(v, 2)), 1, "c not fired at 3 ms");
        assert_quiet_and_balanced(&mut base);
    });
}

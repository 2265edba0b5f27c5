//! Model 3: two threads cancel the same handle; exactly one gets `true`. Run with the owner as one
//! of the cancellers (its CAS frees the slot directly) and with two remote cancellers.

use std::time::Duration;

use tickwheel_loom_tests::sync::spawn;
use tickwheel_loom_tests::{check, one_base};

#[test]
fn owner_and_remote_cancel_same_handle() {
    // About 30 executions, and that is all of them: each side makes one CAS on the slot word
    // (the remote's then pushes a notice), so loom only has to place the remote's CAS and push
    // before, between and after the owner's load and CAS.
    check("double_cancel_owner_remote", || {
        let (mut base, remote, _clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 1).unwrap();
        let other = spawn(move || remote.cancel(h));
        let owner = spawn(move || {
            let won = base.cancel(h);
            (won, base)
        });
        let remote_won = other.join().unwrap();
        let (owner_won, mut base) = owner.join().unwrap();
        assert!(
            owner_won ^ remote_won,
            "owner={owner_won} remote={remote_won}"
        );
        base.turn(|_| panic!("cancelled timer fired"));
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

#[test]
fn two_remotes_cancel_same_handle() {
    check("double_cancel_remotes", || {
        let (mut base, remote, _clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 1).unwrap();
        let r1 = remote.clone();
        let a = spawn(move || r1.cancel(h));
        let b = spawn(move || remote.cancel(h));
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(a ^ b, "a={a} b={b}");
        base.turn(|_| panic!("cancelled timer fired"));
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

//! Model 1: a remote cancel racing the owner's fire. Exactly one of "handler ran" and "cancel
//! returned true"; afterwards the slot is free again.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn};
use tickwheel_loom_tests::{check, one_base};

#[test]
fn remote_cancel_races_fire() {
    check("cancel_vs_fire", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let h = base.schedule_after(Duration::from_millis(1), 7).unwrap();
        clock.advance(Duration::from_millis(1));

        let canceller = spawn(move || remote.cancel(h));
        let ran = Arc::new(AtomicBool::new(false));
        let ran2 = ran.clone();
        let owner = spawn(move || {
            base.turn(|v| {
                assert_eq!(v, 7);
                // Relaxed: read after join.
                ran2.store(true, Ordering::Relaxed);
            });
            base
        });
        let cancelled = canceller.join().unwrap();
        let mut base = owner.join().unwrap();
        let fired = ran.load(Ordering::Relaxed);
        assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");

        // Whoever won, the next turn leaves nothing behind.
        base.turn(|_| panic!("fired twice"));
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
        let s = base.stats();
        assert_eq!(
            s.scheduled,
            s.fired + s.cancelled_local + s.cancelled_remote
        );
    });
}

//! Model 2: a remote schedule, then a remote cancel, while the owner keeps turning: the owner may
//! apply the schedule before or after the cancel lands (the deadline is not reached until the
//! producer is done). The cancel returns true, the timer never fires even once time passes its
//! deadline, and the slot comes back.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn, yield_now};
use tickwheel_loom_tests::{check, one_base};

#[test]
fn remote_schedule_then_cancel_never_fires() {
    check("schedule_then_cancel", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 2);
        let done = Arc::new(AtomicBool::new(false));
        let done2 = done.clone();
        let producer = spawn(move || {
            let h = remote
                .schedule_after(0, Duration::from_millis(1), 1)
                .unwrap();
            let cancelled = remote.cancel(h);
            // Release: everything the producer did happens-before the owner's Acquire below.
            done2.store(true, Ordering::Release);
            cancelled
        });
        loop {
            base.turn(|_| panic!("a cancelled timer fired"));
            // Acquire: pairs with the producer's Release; one more turn then sees all its messages.
            if done.load(Ordering::Acquire) {
                clock.advance(Duration::from_millis(5));
                base.turn(|_| panic!("a cancelled timer fired"));
                break;
            }
            yield_now();
        }
        assert!(producer.join().unwrap(), "cancel before any fire must win");
        assert!(base.is_empty());
        assert_eq!(base.free_slots(), base.slot_capacity());
        assert_eq!(base.stats().cancelled_remote, 1);
    });
}

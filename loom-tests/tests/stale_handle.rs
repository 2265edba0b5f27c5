//! Model 4: a stale handle after slot reuse. With one slot, the owner fires timer A and re-uses
//! the slot for timer B while another thread cancels A's handle. Whatever the interleaving: the
//! cancel never touches B (B fires), and A either fired or was cancelled, never both.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicUsize, Ordering, spawn, yield_now};
use tickwheel_loom_tests::{check, one_base};

#[test]
fn stale_cancel_does_not_hit_reused_slot() {
    check("stale_handle", || {
        let (mut base, remote, clock) = one_base::<u32>(1, 1);
        let a = base.schedule_after(Duration::ZERO, 1).unwrap();
        let canceller = spawn(move || remote.cancel(a));
        let fired = Arc::new(AtomicUsize::new(0)); // bit 0: A fired, bit 1: B fired
        let f2 = fired.clone();
        let owner = spawn(move || {
            let mark = |v: u32| {
                // Relaxed: read after join.
                f2.fetch_or(v as usize, Ordering::Relaxed);
            };
            base.turn(mark);
            // A's slot comes free (fired, or freed by the turn that takes a winning cancel's
            // notice): B takes it.
            while base.free_slots() == 0 {
                yield_now();
                base.turn(mark);
            }
            let b = base.schedule_after(Duration::ZERO, 2).unwrap();
            assert_eq!(b.base(), a.base());
            clock.advance(Duration::from_millis(1));
            base.turn(mark);
            base
        });
        let a_cancelled = canceller.join().unwrap();
        let mut base = owner.join().unwrap();
        let bits = fired.load(Ordering::Relaxed);
        assert_eq!(bits & 2, 2, "B must fire whatever happened to A's handle");
        assert!(
            (bits & 1 == 1) != a_cancelled,
            "A fired={} cancelled={a_cancelled}",
            bits & 1
        );
        base.turn(|_| panic!("nothing left"));
        assert_eq!(base.free_slots(), 1);
    });
}

//! Model 12: the async layer's waker handshake (`protocol::waker`) and the value that shares its
//! word. A task registers its waker (twice, as a task polled again with a new waker does), updates
//! the value between the two (as a sleep re-arms its cell) and then looks at a "fired" bit of the
//! value; the firing thread sets that bit with its own update and wakes whatever waker is stored.
//! Whatever the interleaving, the task either sees the bit after registering or its latest waker
//! is woken: no wake-up is lost, and the stale first waker is never the only one woken. Neither
//! user of the word clobbers the other: both updates of the value survive every handshake step,
//! and the handshake ends back at WAITING.

use tickwheel_loom_tests::sync::{Arc, Ordering, spawn};
use tickwheel_loom_tests::{check, counting};
use tickwheel_percpu::protocol::waker::AtomicWaker;

/// The firing thread's bit of the value.
const FIRED: u64 = 1;
/// The task's own change of the value (a count above the fired bit).
const ARMED: u64 = 2;

#[test]
fn register_races_take() {
    // About 470 executions, and all of them: two registers (a CAS in, a fetch_and out) and an
    // update against an update and a take (a fetch_or, then a fetch_and), all on one word.
    check("waker_register_vs_take", || {
        let slot = Arc::new(AtomicWaker::new());
        let (first, first_woken) = counting();
        let (latest, latest_woken) = counting();
        let s2 = slot.clone();
        let firer = spawn(move || {
            // Relaxed update: `take`'s AcqRel publishes it to a register that sees WAKING.
            s2.update(Ordering::Relaxed, Ordering::Relaxed, |v| v | FIRED);
            s2.wake();
        });
        slot.register(&first);
        // Relaxed: only the survival of the change is checked (after the join).
        slot.update(Ordering::Relaxed, Ordering::Relaxed, |v| v + ARMED);
        slot.register(&latest);
        // Acquire: pairs with the waker handshake's Release (the poll after registering).
        let saw_fired = slot.load(Ordering::Acquire) & FIRED != 0;
        firer.join().unwrap();
        // Acquire: pairs with the counting wakers' Release.
        let latest_n = latest_woken.load(Ordering::Acquire);
        let first_n = first_woken.load(Ordering::Acquire);
        assert!(
            saw_fired || latest_n >= 1,
            "lost wake-up: flag unseen and the latest waker not woken (first woken {first_n})"
        );
        assert!(
            latest_n + first_n <= 2,
            "woken {latest_n} + {first_n} times"
        );
        // Relaxed: after the join.
        let value = slot.load(Ordering::Relaxed);
        assert_eq!(value, FIRED | ARMED, "an update of the value was clobbered");
        // Back at WAITING: a register stores its waker (it would wake it at once on a stuck
        // WAKING) and the next take hands it back.
        let (last, _) = counting();
        slot.register(&last);
        assert!(
            slot.take().is_some(),
            "the handshake did not end at WAITING"
        );
    });
}

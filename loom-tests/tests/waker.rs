//! Model 12: the async layer's waker handshake (`protocol::waker`). A task registers its waker
//! (twice, as a task polled again with a new waker does) and then looks at a "fired" flag; the
//! firing thread sets the flag and wakes whatever waker is stored. Whatever the interleaving, the
//! task either sees the flag after registering or its latest waker is woken: no wake-up is lost,
//! and the stale first waker is never the only one woken.

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn};
use tickwheel_loom_tests::{check, counting};
use tickwheel_percpu::protocol::waker::AtomicWaker;

#[test]
fn register_races_take() {
    // About 50 executions, and all of them: two registers (each a CAS in and a CAS out) against
    // one take (a fetch_or, then a fetch_and), on one word.
    check("waker_register_vs_take", || {
        let slot = Arc::new(AtomicWaker::new());
        let fired = Arc::new(AtomicBool::new(false));
        let (first, first_woken) = counting();
        let (latest, latest_woken) = counting();
        let (s2, f2) = (slot.clone(), fired.clone());
        let firer = spawn(move || {
            // Relaxed store: `take`'s AcqRel publishes it to a register that sees WAKING.
            f2.store(true, Ordering::Relaxed);
            s2.wake();
        });
        slot.register(&first);
        slot.register(&latest);
        // Acquire: pairs with the waker handshake's Release (the poll after registering).
        let saw_fired = fired.load(Ordering::Acquire);
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
    });
}

//! Model 7: a runtime worker always sees `shutdown`.
//!
//! The worker runs the runtime's real loop (`runtime::run_until_stopped`): turn, then sleep until
//! the base's fd is readable. The main thread does what `Runtime::shutdown` does: set the stop
//! flag, wake the base, join. If the loop could consume the wake-up without seeing the flag, the
//! worker would sleep forever on an fd nobody makes readable, and the model checker reports it.

use tickwheel_loom_tests::sync::{Arc, AtomicBool, Ordering, spawn};
use tickwheel_loom_tests::{check, one_base, sleep_on};
use tickwheel_percpu::runtime::run_until_stopped;

#[test]
fn shutdown_is_never_missed() {
    check("runtime_stop", || {
        let (mut base, remote, _clock) = one_base::<u32>(2, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let seen = stop.clone();
        let worker = spawn(move || {
            run_until_stopped(&mut base, &seen, |_| {}, |b| sleep_on(b.fd()));
        });
        // Release: as in `Runtime::shutdown`.
        stop.store(true, Ordering::Release);
        remote.wake(0);
        worker.join().unwrap();
    });
}

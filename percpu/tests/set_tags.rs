//! Handles of different sets never match: a handle from one `bases` call is foreign to every
//! other set, however many sets the process has made.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, bases};

#[test]
fn a_foreign_handle_never_cancels_a_timer_of_another_set() {
    // Alone in its binary, so no other test makes sets in between. With 16-bit tags set B got
    // set A's tag and `ha` named B's timer.
    let config = || {
        Config::default()
            .mode(Mode::Exact)
            .clock(ClockSource::Manual(ManualClock::new()))
            .wheel_capacity(1)
            .reserve_capacity(1)
    };
    let (mut a, _remote_a) = bases::<u32>(1, config()).unwrap();
    let ha = a[0].schedule_after(Duration::from_secs(1), 1).unwrap();
    for _ in 0..(1 << 16) - 1 {
        drop(bases::<u32>(1, config()).unwrap());
    }
    let (mut b, remote_b) = bases::<u32>(1, config()).unwrap();
    let hb = b[0].schedule_after(Duration::from_secs(1), 2).unwrap();
    let cancelled = remote_b.cancel(ha);
    assert!(
        !cancelled,
        "a handle of set A ({ha:?}) cancelled set B's timer ({hb:?})"
    );
    assert_ne!(ha, hb, "handles of two live sets compare equal");
}

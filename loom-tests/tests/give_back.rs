//! Model 11: remote schedules on a base whose reserve is tiny, while another thread's cancels
//! load the owner with notices and the owner refills the reserve between turns.
//!
//! This is the interleaving in which an earlier design spun without bound: a remote that took a
//! reserve slot and then found the reserve empty had to give the slot back to a ring that other
//! remotes and the owner's refills had filled meanwhile. Here every schedule must return (with a
//! handle, or with `ReserveEmpty` and its value), every accepted payload fires exactly once, and every
//! winning cancel keeps its timer from firing.

use std::time::Duration;

use tickwheel_loom_tests::sync::spawn;
use tickwheel_loom_tests::{check_bounded, one_base};

#[test]
fn remote_schedules_always_return() {
    // Four threads: 2 preemptions.
    check_bounded("give_back", 2, || {
        let (mut base, remote, clock) = one_base::<u32>(4, 1);
        let a = base.schedule_after(Duration::from_millis(5), 10).unwrap();
        let b = base.schedule_after(Duration::from_millis(5), 11).unwrap();
        let schedulers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let r = remote.clone();
                spawn(move || match r.schedule_after(0, Duration::ZERO, v) {
                    Ok(_) => true,
                    Err(e) => {
                        assert!(e.is_reserve_empty(), "unexpected {e:?}");
                        assert_eq!(e.into_inner(), v, "value handed back");
                        false
                    }
                })
            })
            .collect();
        let canceller = spawn(move || (remote.cancel(a), remote.cancel(b)));
        // Two turns while the others run: each refills the reserve, which is what filled the
        // old design's give-back ring. (No spinning needed: nothing here waits for the owner.)
        let mut fired = Vec::new();
        for _ in 0..2 {
            base.turn(|v| fired.push(v));
        }
        let accepted: Vec<bool> = schedulers.into_iter().map(|s| s.join().unwrap()).collect();
        assert_eq!(
            canceller.join().unwrap(),
            (true, true),
            "nothing else touches a or b"
        );
        clock.advance(Duration::from_millis(10));
        base.turn(|v| fired.push(v));
        fired.sort_unstable();
        let expect: Vec<u32> = [1u32, 2]
            .into_iter()
            .zip(&accepted)
            .filter_map(|(v, &ok)| ok.then_some(v))
            .collect();
        assert_eq!(fired, expect, "accepted={accepted:?}");
        tickwheel_loom_tests::assert_quiet_and_balanced(&mut base);
    });
}

//! Model 5: several producers and the draining owner. Every remote schedule is filed exactly
//! once: each payload fires once, none is lost, none doubled, while the owner refills the reserve
//! the producers pop from. (Refusals when the reserve runs dry are model 10's `reserve_shared`.)

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicUsize, Ordering, spawn, yield_now};
use tickwheel_loom_tests::{check_bounded, one_base};

fn produce(remote: &tickwheel_percpu::Remote<u32>, mut value: u32) {
    loop {
        match remote.schedule_after(0, Duration::ZERO, value) {
            Ok(_) => return,
            Err(e) => {
                assert!(e.is_reserve_empty(), "unexpected {e:?}");
                value = e.into_inner();
                yield_now();
            }
        }
    }
}

#[test]
fn every_message_applied_once() {
    // Two producers and an owner that turns until it has seen both: bounded at 2 preemptions
    // (about 130,000 executions; 3 takes too long for CI).
    check_bounded("producers", 2, || {
        let (mut base, remote, _clock) = one_base::<u32>(4, 2);
        let sent = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let r = remote.clone();
                let sent = sent.clone();
                spawn(move || {
                    produce(&r, v);
                    // Relaxed: a progress count only; the messages carry their own ordering.
                    sent.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        drop(remote);
        let mut seen = 0u32;
        while seen != 0b110 {
            base.turn(|v| {
                assert_eq!(seen & (1 << v), 0, "payload {v} fired twice");
                seen |= 1 << v;
            });
            yield_now();
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(sent.load(Ordering::Relaxed), 2);
        base.turn(|v| panic!("payload {v} fired again"));
        assert_eq!(base.stats().fired, 2);
        assert_eq!(base.free_slots(), base.slot_capacity());
    });
}

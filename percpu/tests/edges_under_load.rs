//! The edges of a base under concurrent load, on real threads: the reserve serves every slot it
//! holds to racing remote schedulers before it refuses one, and a base dropped while remote
//! threads schedule, re-arm and cancel on it hands back or drops every payload exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, Handle, ManualClock, Mode, bases};

mod support;

/// A payload that counts its drops in a shared table.
struct Tracked {
    id: usize,
    drops: Arc<Vec<AtomicU32>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // Relaxed: read after every thread is joined.
        self.drops[self.id].fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn racing_schedulers_take_every_reserved_slot_before_a_refusal() {
    // After a turn the reserve holds `RESERVE` slots. Four threads schedule at once, more than that
    // in all, with the owner idle: exactly `RESERVE` are accepted, every refusal is `ReserveEmpty` with
    // the value handed back, and the owner's next turn fires every accepted one once.
    const RESERVE: usize = 64;
    const THREADS: usize = 4;
    const EACH: usize = RESERVE / THREADS + 6;
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(4 * RESERVE)
        .reserve_capacity(RESERVE);
    let (mut all, remote) = bases::<usize>(1, config).unwrap();
    let base = &mut all[0];
    for round in 0..50 {
        base.turn(|v| panic!("round {round}: {v} fired between rounds"));
        let accepted: Vec<usize> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let remote = &remote;
                    s.spawn(move || {
                        let mut ok = Vec::new();
                        for k in 0..EACH {
                            let id = t * EACH + k;
                            match remote.schedule_after(0, Duration::ZERO, id) {
                                Ok(_) => ok.push(id),
                                Err(e) => {
                                    assert!(e.is_reserve_empty(), "round {round}: {e:?}");
                                    assert_eq!(e.into_inner(), id, "value handed back");
                                }
                            }
                        }
                        ok
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect()
        });
        assert_eq!(
            accepted.len(),
            RESERVE,
            "round {round}: refused while the reserve still held slots, or took more than it held"
        );
        let mut fired = Vec::new();
        base.turn(|v| fired.push(v));
        fired.sort_unstable();
        let mut want = accepted;
        want.sort_unstable();
        assert_eq!(fired, want, "round {round}");
    }
    assert_eq!(base.free_slots(), base.slot_capacity());
}

#[test]
fn a_base_dropped_under_remote_traffic_loses_no_payload() {
    // Three threads schedule, re-arm and cancel on base 0 until they are refused with `Closed`,
    // while its owner turns a while and then drops it. Every payload is dropped exactly once: by a
    // handler, by a refusal handing it back, or with the base; and once the drop is over, every
    // schedule is refused with its value.
    const THREADS: usize = 3;
    const IDS: usize = 100_000;
    for round in 0..20u64 {
        let clock = ManualClock::new();
        let config = Config::default()
            .mode(Mode::Exact)
            .clock(ClockSource::Manual(clock.clone()))
            .wheel_capacity(512)
            .reserve_capacity(16);
        let (mut all, remote) = bases::<Tracked>(1, config).unwrap();
        let mut base = all.pop().unwrap();
        let drops: Arc<Vec<AtomicU32>> = Arc::new((0..IDS).map(|_| AtomicU32::new(0)).collect());
        let next = Arc::new(AtomicUsize::new(0));
        let remotes: Vec<_> = (0..THREADS)
            .map(|t| {
                let (remote, drops, next) = (remote.clone(), drops.clone(), next.clone());
                std::thread::spawn(move || {
                    let mut rng = support::Rng(round * 31 + t as u64 + 1);
                    let mut handles: Vec<Handle> = Vec::new();
                    loop {
                        // Relaxed: only unique ids matter.
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        assert!(id < IDS, "the base was never dropped");
                        let value = Tracked {
                            id,
                            drops: drops.clone(),
                        };
                        let delay = Duration::from_millis(rng.below(4));
                        match remote.schedule_after(0, delay, value) {
                            Ok(h) => handles.push(h),
                            Err(e) if e.is_closed() => {
                                assert_eq!(e.into_inner().id, id, "value handed back");
                                return handles.len();
                            }
                            Err(e) => {
                                assert!(e.is_reserve_empty(), "{e:?}");
                                assert_eq!(e.into_inner().id, id, "value handed back");
                                std::thread::yield_now();
                            }
                        }
                        if !handles.is_empty() {
                            let h = handles[rng.below(handles.len() as u64) as usize];
                            if rng.below(2) == 0 {
                                remote.cancel(h);
                            } else {
                                remote.reset_after(h, Duration::from_millis(rng.below(4)));
                            }
                        }
                    }
                })
            })
            .collect();
        let turns = 50 + 10 * round;
        for _ in 0..turns {
            clock.advance(Duration::from_millis(1));
            base.turn(drop);
            std::thread::yield_now();
        }
        drop(base);
        let scheduled: usize = remotes.into_iter().map(|t| t.join().unwrap()).sum();
        // After the drop: refused, value back.
        let late = Tracked {
            id: next.fetch_add(1, Ordering::Relaxed),
            drops: drops.clone(),
        };
        let e = remote.schedule_after(0, Duration::ZERO, late).unwrap_err();
        assert!(e.is_closed(), "{e:?}");
        drop(e);
        drop(remote);
        let used = next.load(Ordering::Relaxed);
        for (id, d) in drops[..used].iter().enumerate() {
            assert_eq!(
                d.load(Ordering::Relaxed),
                1,
                "round {round}: payload {id} dropped the wrong number of times ({scheduled} accepted)"
            );
        }
    }
}

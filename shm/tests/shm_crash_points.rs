//! Each point at which a killed process can stop, set up exactly (threads of this process stand
//! in for processes, with their own pids and a liveness probe), then what the survivors see.

#![cfg(not(loom))]

mod shm_util;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use shm_util::world::{World, fire_all};
use tickwheel_shm::{Advancer, CrashPoint, Error};

const OWNER: u32 = 100;
const VICTIM: u32 = 200;
const HEIR: u32 = 300;

/// Every slot can be scheduled again, then everything is cancelled: nothing leaked.
fn assert_no_leak(world: &World, adv: &mut Advancer) {
    let client = adv.client();
    let cap = world.segment.geometry().capacity;
    let t = client.now() + 1_000;
    let hs: Vec<_> = (0..cap)
        .map(|i| {
            client
                .schedule_at(t, i as u64)
                .unwrap_or_else(|_| panic!("leak: {i} of {cap}"))
        })
        .collect();
    assert!(client.schedule_at(t, 0).is_err());
    for h in hs {
        assert!(client.cancel(h));
    }
    adv.turn(|p| panic!("cancelled {p} fired"));
}

#[test]
fn scheduler_killed_at_each_point() {
    for (point, fires) in [
        (CrashPoint::AfterPop, false),
        (CrashPoint::AfterClaim, false),
        (CrashPoint::AfterArm, true),
        (CrashPoint::AfterLeafMark, true),
    ] {
        let w = World::new(8);
        let owner = w.attach(OWNER);
        let mut adv = owner.advancer().unwrap();
        // Some slots go through the free stack first, so both pop paths are crossed.
        for p in 0..3 {
            owner.schedule_at(1, 1000 + p).unwrap();
        }
        assert_eq!(fire_all(&mut adv, 1), [1000, 1001, 1002]);
        let victim = w.attach(VICTIM);
        victim.schedule_crashing(point, 5, 42);
        w.kill(VICTIM, victim);
        let r = adv.recover();
        let expect: &[u64] = if fires { &[42] } else { &[] };
        assert_eq!(fire_all(&mut adv, 10), expect, "{point:?}: {r:?}");
        assert_eq!(r.reclaimed, usize::from(!fires), "{point:?}");
        assert_no_leak(&w, &mut adv);
    }
}

#[test]
fn a_leaf_left_marked_by_a_dead_process_hides_no_later_mark() {
    // 8192 slots: two bitmap levels, so a crash between them leaves the leaf word marked with
    // nothing above it.
    let w = World::new(8192);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let victim = w.attach(VICTIM);
    victim.schedule_crashing(CrashPoint::AfterLeafMark, 5, 1);
    w.kill(VICTIM, victim);
    // The next slot shares the leaf word; its mark finds the level above clear and sets it, so
    // the owner takes the whole word: the dead process's armed timer comes along.
    owner.schedule_at(5, 2).unwrap();
    assert_eq!(fire_all(&mut adv, 10), [1, 2]);
    let r = adv.recover();
    assert_eq!(r.indexed, 0);
    owner.schedule_at(12, 3).unwrap();
    assert_eq!(fire_all(&mut adv, 12), [3]);
}

#[test]
fn canceller_killed_after_its_cas() {
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let h = owner.schedule_at(5, 42).unwrap();
    adv.turn(|_| {});
    let victim = w.attach(VICTIM);
    assert!(victim.cancel_crashing(h));
    w.kill(VICTIM, victim);
    assert!(!owner.cancel(h), "the dead process's cancel won");
    // The fire CAS fails: the word is FREE, named for the dead canceller, on no stack.
    assert_eq!(fire_all(&mut adv, 10), [] as [u64; 0]);
    // Recovery re-issues it once that process is dead.
    assert_eq!(adv.recover().reclaimed, 1);
    assert_no_leak(&w, &mut adv);
}

#[test]
fn owner_killed_in_its_handler_then_taken_over() {
    let w = World::new(16);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    for p in 0..5 {
        owner.schedule_at(p + 1, p).unwrap();
    }
    let cancelled = owner.schedule_at(3, 99).unwrap();
    adv.advance_to(3);
    let r = catch_unwind(AssertUnwindSafe(|| {
        adv.turn(|p| {
            if p == 1 {
                panic!("killed while handling 1");
            }
        })
    }));
    assert!(r.is_err());
    adv.crash();
    w.kill(OWNER, owner);

    let heir = w.attach(HEIR);
    assert!(heir.cancel(cancelled), "cancel works with no owner");
    let mut adv = heir.advancer().expect("takeover");
    assert_eq!(adv.take_interrupted(), [1]);
    // 0 fired before the crash; 2 is due; 3 and 4 later.
    assert_eq!(fire_all(&mut adv, 3), [2]);
    assert_eq!(fire_all(&mut adv, 10), [3, 4]);
    let st = heir.stats();
    assert_eq!((st.takeovers, st.interrupted), (1, 1), "{st:?}");
    assert_no_leak(&w, &mut adv);
}

#[test]
fn a_live_owner_is_never_displaced() {
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let adv = owner.advancer().unwrap();
    let other = w.attach(HEIR);
    match other.advancer() {
        Err(Error::Busy { owner_pid }) => assert_eq!(owner_pid, OWNER),
        r => panic!("{r:?}"),
    }
    drop(adv);
    other.advancer().expect("free after the owner let go");
}

#[test]
fn owner_notices_a_dead_process_by_itself() {
    let w = World::new(8);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let victim = w.attach(VICTIM);
    victim.schedule_crashing(CrashPoint::AfterClaim, 5, 1);
    victim.schedule_crashing(CrashPoint::AfterArm, 5, 2);
    w.kill(VICTIM, victim);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(fire_all(&mut adv, 10), [2]);
    assert_eq!(owner.stats().reclaimed, 1);
    assert_no_leak(&w, &mut adv);
}

#[test]
fn handles_of_another_set_are_rejected() {
    let a = World::new(4);
    let b = World::new(4);
    let ca = a.attach(OWNER);
    let cb = b.attach(OWNER);
    let ha = ca.schedule_at(5, 1).unwrap();
    let hb = cb.schedule_at(5, 2).unwrap();
    // Same slot and generation in both sets; only the set id tells them apart.
    assert_eq!(ha.to_u128() as u64, hb.to_u128() as u64);
    assert!(!cb.cancel(ha));
    assert!(!ca.cancel(hb));
    let mut adv = cb.advancer().unwrap();
    assert_eq!(fire_all(&mut adv, 5), [2]);
    assert!(ca.cancel(tickwheel_shm::Handle::from_u128(ha.to_u128())));
}

#[test]
fn cancel_races_fire_across_threads() {
    // Threads stand in for processes: exactly one of "fired" and "cancel returned true".
    for round in 0..200u64 {
        let w = World::new(64);
        let owner = w.attach(OWNER);
        let mut adv = owner.advancer().unwrap();
        let hs: Vec<_> = (0..32).map(|p| owner.schedule_at(1, p).unwrap()).collect();
        adv.turn(|_| {});
        let canceller = w.attach(VICTIM + round as u32);
        let t = std::thread::spawn(move || {
            hs.iter()
                .enumerate()
                .filter(|(_, h)| canceller.cancel(**h))
                .map(|(p, _)| p as u64)
                .collect::<Vec<_>>()
        });
        let mut fired = fire_all(&mut adv, 1);
        let cancelled = t.join().unwrap();
        fired.extend(cancelled);
        fired.sort_unstable();
        assert_eq!(fired, (0..32).collect::<Vec<_>>());
        adv.turn(|p| panic!("{p} fired twice"));
        assert_no_leak(&w, &mut adv);
    }
}

const THIRD: u32 = 400;

#[test]
fn an_interrupted_payload_survives_an_heir_killed_before_taking_it() {
    let w = World::new(8);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    owner.schedule_at(1, 7).unwrap();
    adv.advance_to(1);
    let r = catch_unwind(AssertUnwindSafe(|| {
        adv.turn(|_| panic!("killed in the handler"))
    }));
    assert!(r.is_err());
    adv.crash();
    w.kill(OWNER, owner);
    // The heir takes over and is killed before it calls `take_interrupted`.
    let heir = w.attach(HEIR);
    heir.advancer().expect("takeover").crash();
    w.kill(HEIR, heir);
    let third = w.attach(THIRD);
    let mut adv = third.advancer().expect("second takeover");
    assert_eq!(
        adv.take_interrupted(),
        [7],
        "the interrupted payload vanished"
    );
    assert_eq!(adv.take_interrupted(), [] as [u64; 0], "handed over once");
    let st = third.stats();
    assert_eq!((st.takeovers, st.interrupted), (2, 1), "{st:?}");
    assert_no_leak(&w, &mut adv);
}

#[test]
fn a_panicking_handler_leaks_no_slot() {
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    for p in 0..4 {
        owner.schedule_at(1, p).unwrap();
    }
    adv.advance_to(1);
    let mut handled = Vec::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        adv.turn(|p| {
            if handled.len() == 1 {
                panic!("handler bug");
            }
            handled.push(p);
        })
    }));
    assert!(r.is_err());
    // The same owner goes on, with no recovery: the panicking fire is interrupted, the rest due.
    let interrupted = adv.take_interrupted();
    assert_eq!(interrupted.len(), 1, "the panicking fire was not kept");
    let rest = fire_all(&mut adv, 1);
    let mut all: Vec<u64> = handled
        .iter()
        .chain(&interrupted)
        .chain(&rest)
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(all, [0, 1, 2, 3]);
    assert_no_leak(&w, &mut adv);
}

//! Shared timer sets, model 8: a client keeps the slot of its last winning cancel for its own
//! next schedule. Its cancel races the owner's fire, its schedule of the kept slot races another
//! process's pops; a kept slot given back as its client is dropped races pops, the owner's turn
//! (whose batch push meets the give-back's push) and recovery; a killed client's kept slot is
//! left alone by a recovery while it lives and re-issued, once, once it is seen dead. No slot is
//! ever in use twice, every timer fires once or is cancelled, nothing leaks and nothing is put on
//! the free stack twice (a fresh client schedules every slot once, then finds the set full, never
//! corrupt).

use std::sync::Arc as StdArc;
use std::sync::atomic::{AtomicBool as StdBool, Ordering::SeqCst};

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::spawn;
use tickwheel_shm::{Client, Config, Handle, ScheduleError, Segment};

fn slot(h: Handle) -> u32 {
    (h.to_u128() >> 32) as u32
}

/// Every one of the set's slots can be scheduled once by `fresh` (a client keeping nothing), at a
/// slot of its own; one more finds the set full.
fn every_slot_once(fresh: &Client) {
    let cap = fresh.segment().geometry().capacity;
    let hs: Vec<Handle> = (0..cap)
        .map(|i| {
            fresh
                .schedule_at(100, 50 + i as u64)
                .unwrap_or_else(|e| panic!("leak: schedule {i} of {cap}: {e:?}"))
        })
        .collect();
    for (i, &a) in hs.iter().enumerate() {
        assert!(
            hs[..i].iter().all(|&b| slot(b) != slot(a)),
            "slot {} twice",
            slot(a)
        );
    }
    match fresh.schedule_at(100, 99) {
        Err(ScheduleError::Full(_)) => {}
        r => panic!("{cap} slots and one more: {r:?}"),
    }
}

#[test]
fn a_kept_slot_is_never_in_use_twice() {
    // Catches: a kept slot handed out while still armed or to two schedules, a keep that
    // overwrites the kept slot without pushing the old one (A keeps slot 0, then slot 1's cancel
    // must push: otherwise the final check finds a leak), a schedule of the kept slot after the
    // fire won (the cancel's CAS lost: nothing to keep), and a cancel that both keeps and
    // pushes (a slot twice).
    check("shm_kept_never_twice", || {
        let seg = Segment::anonymous(&Config::new(3).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let a = seg.attach_as(2).unwrap();
        let due = a.schedule_at(1, 7).unwrap();
        let far = a.schedule_at(9, 8).unwrap();
        adv.turn(|_| {});
        adv.advance_to(1);
        let b = seg.attach_as(3).unwrap();
        // A cancels 7 (racing its fire) and 8, then schedules 10: the slot it kept. B schedules
        // 11 from the stack or the never-used slot.
        let ta = spawn(move || {
            let c = a.cancel(due);
            assert!(a.cancel(far), "nothing else ends 8");
            let h = a.schedule_at(5, 10).ok();
            (a, c, h)
        });
        let tb = spawn(move || {
            let h = b.schedule_at(5, 11).ok();
            (b, h)
        });
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        let (a, cancelled, ha) = ta.join().unwrap();
        let (b, hb) = tb.join().unwrap();
        // Both always succeed: A keeps the slot of whichever cancel of its own won first (7's,
        // or 8's if the fire won), and B finds slot 2 never used or a slot A pushed.
        let (Some(x), Some(y)) = (ha, hb) else {
            panic!("cancelled {cancelled}: {ha:?} {hb:?}");
        };
        assert_ne!(slot(x), slot(y), "one slot handed to two schedules");
        adv.turn(|p| fired.push(p));
        adv.advance_to(9);
        adv.turn(|p| fired.push(p));
        fired.sort_unstable();
        let mut want = Vec::new();
        if !cancelled {
            want.push(7);
        }
        if ha.is_some() {
            want.push(10);
        }
        if hb.is_some() {
            want.push(11);
        }
        assert_eq!(fired, want, "cancelled {cancelled}, {ha:?} {hb:?}");
        drop((a, b));
        every_slot_once(&owner);
    });
}

#[test]
fn a_give_back_on_drop_races_pops_a_turn_and_recovery() {
    // Catches: a give-back that pushes a slot without claiming it or without moving it to the
    // next generation while held (a recovery or a stale pop then frees or claims it a second
    // time: one slot twice, or on the stack twice, `Corrupt`), one that pushes nothing (a leak),
    // and a recovery that re-issues a live client's half-given-back slot.
    check("shm_kept_give_back", || {
        let seg = Segment::anonymous(&Config::new(2).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(|_| true));
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        // K keeps slot 0; the owner's 7 (slot 1) is due, so the owner's turn frees and pushes
        // slot 1 while K's drop pushes slot 0.
        let k = seg.attach_as(2).unwrap();
        let h = k.schedule_at(9, 1).unwrap();
        assert!(k.cancel(h));
        owner.schedule_at(1, 7).unwrap();
        adv.turn(|_| {});
        adv.advance_to(1);
        let b = seg.attach_as(3).unwrap();
        let tk = spawn(move || drop(k));
        let tb = spawn(move || {
            let got: Vec<Handle> = (0..2)
                .filter_map(|p| b.schedule_at(9, 10 + p).ok())
                .collect();
            (b, got)
        });
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        adv.recover();
        tk.join().unwrap();
        let (b, got) = tb.join().unwrap();
        assert_eq!(fired, [7]);
        if let [x, y] = got[..] {
            assert_ne!(slot(x), slot(y), "one slot handed out twice");
        }
        for h in got {
            assert!(b.cancel(h));
        }
        drop(b);
        adv.recover();
        every_slot_once(&owner);
    });
}

#[test]
fn a_killed_clients_kept_slot_waits_for_its_death() {
    // Catches: a recovery that re-issues a live client's kept slot (B would get two slots while
    // the keeper lives), a `crash` that gives the kept slot back as a drop would (the same), a
    // recovery that never re-issues a dead one's (a leak), and one that re-issues it twice or
    // while a live scheduler pops (a slot twice).
    check("shm_kept_killed", || {
        let dead = StdArc::new(StdBool::new(false));
        let d = dead.clone();
        let seg = Segment::anonymous(&Config::new(2).manual_clock())
            .unwrap()
            .with_liveness_probe(StdArc::new(move |pid| pid != 2 || !d.load(SeqCst)));
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        let victim = seg.attach_as(2).unwrap();
        let h = victim.schedule_at(9, 1).unwrap();
        assert!(victim.cancel(h));
        // While the victim lives, B gets the one other slot and no more, recovery or not.
        let b = seg.attach_as(3).unwrap();
        let tb = spawn(move || {
            let first = b.schedule_at(9, 10);
            let second = b.schedule_at(9, 11);
            (b, first, second)
        });
        // It may re-issue the slot B popped and has yet to claim (B then pops it again), never
        // the victim's.
        adv.recover();
        let (b, first, second) = tb.join().unwrap();
        let first = first.expect("the never-used slot");
        assert_ne!(slot(first), slot(h), "a live client's kept slot re-issued");
        assert!(
            matches!(second, Err(ScheduleError::Full(_))),
            "the victim keeps its slot: {second:?}"
        );
        // The victim is killed and seen dead: recovery re-issues its kept slot, while B pops.
        // The recovery reads the probe on this thread only.
        victim.crash();
        dead.store(true, SeqCst);
        let tb = spawn(move || {
            let got = b.schedule_at(9, 12);
            (b, got)
        });
        assert_eq!(adv.recover().reclaimed, 1);
        let (b, got) = tb.join().unwrap();
        let got = match got {
            Ok(h) => h,
            // Popped before the recovery pushed the re-issued slot.
            Err(ScheduleError::Full(_)) => b.schedule_at(9, 12).expect("re-issued"),
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(slot(got), slot(h));
        assert!(
            matches!(b.schedule_at(9, 13), Err(ScheduleError::Full(_))),
            "re-issued twice"
        );
        assert_eq!(adv.recover().reclaimed, 0);
        adv.advance_to(9);
        let mut fired = Vec::new();
        adv.turn(|p| fired.push(p));
        fired.sort_unstable();
        assert_eq!(fired, [10, 12]);
        drop(b);
        every_slot_once(&owner);
    });
}

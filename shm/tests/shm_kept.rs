//! A client keeps the slot of its last winning cancel for its own next schedule, attacked from
//! the public API: the kept slot serves only its client (and the advancer made from it) until the
//! client is dropped, which gives it back; threads sharing one client, or many clients, churning
//! against the owner's turns never hand one slot to two live timers, and every timer fires once
//! or is cancelled; give-backs racing pops, turns and recovery leak nothing and put nothing on the
//! free stack twice; a killed client's kept slot is re-issued once it is seen dead, never while it
//! lives; a `fork` child using its parent's client copy takes the kept slot at most once and its
//! drop gives nothing back. Threads stand in for processes (their own pids, a liveness probe),
//! except in the `fork` tests.
//!
//! Every test here takes one lock, so the `fork` tests fork a process whose other test threads
//! are parked on it.

#![cfg(not(loom))]

mod shm_util;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shm_util::world::{World, fire_all};
use tickwheel_shm::{Advancer, Client, Config, Handle, ScheduleError, Segment};

const OWNER: u32 = 100;
const VICTIM: u32 = 200;
const OTHER: u32 = 300;
const FRESH: u32 = 900;
/// A deadline no test's manual clock reaches until the test fires everything.
const FAR: u64 = 1 << 40;

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time (see the module doc).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn slot(h: Handle) -> u32 {
    (h.to_u128() >> 32) as u32
}

fn generation(h: Handle) -> u32 {
    h.to_u128() as u32
}

fn assert_full(r: Result<Handle, ScheduleError>, what: &str) {
    match r {
        Err(ScheduleError::Full(_)) => {}
        r => panic!("{what}: expected a full set, got {r:?}"),
    }
}

/// Every slot can be scheduled exactly once by `fresh` (a client that keeps nothing), each at a
/// slot of its own, and one more schedule finds the set full, never corrupt; then all are
/// cancelled and nothing fires.
fn assert_every_slot_once(fresh: &Client, adv: &mut Advancer) {
    let cap = fresh.segment().geometry().capacity;
    let t = fresh.now() + 1_000;
    let mut slots = HashSet::new();
    let hs: Vec<Handle> = (0..cap)
        .map(|i| {
            let h = fresh
                .schedule_at(t, i as u64)
                .unwrap_or_else(|e| panic!("leak: schedule {i} of {cap}: {e:?}"));
            assert!(slots.insert(slot(h)), "slot {} handed out twice", slot(h));
            h
        })
        .collect();
    assert_full(fresh.schedule_at(t, u64::MAX), "every slot scheduled");
    for h in hs {
        assert!(fresh.cancel(h));
    }
    adv.turn(|p| panic!("cancelled {p} fired"));
}

#[test]
fn a_kept_slot_serves_only_its_client_until_it_is_dropped() {
    // Catches: a cancel's slot not kept (B would find a free slot), a schedule that ignores the
    // kept slot (A full), a kept slot handed to another client, and a drop that does not give the
    // kept slot back (B full after A is gone), or gives it back twice (B gets two).
    let _s = serial();
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let a = w.attach(VICTIM);
    let b = w.attach(OTHER);
    let hs: Vec<Handle> = (0..4).map(|p| a.schedule_at(FAR, p).unwrap()).collect();
    adv.turn(|_| {});
    assert!(a.cancel(hs[1]));
    // Documented ("Full"): a schedule can find the set full while another client keeps one slot.
    assert_full(b.schedule_at(FAR, 10), "A keeps the one free slot");
    assert_full(owner.schedule_at(FAR, 11), "A keeps the one free slot");
    adv.recover();
    assert_full(
        b.schedule_at(FAR, 12),
        "recovery re-issued a live client's kept slot",
    );
    let again = a.schedule_at(FAR, 13).expect("A's kept slot");
    assert_eq!(slot(again), slot(hs[1]));
    assert_eq!(generation(again), generation(hs[1]).wrapping_add(1));
    assert_full(a.schedule_at(FAR, 14), "A took its one kept slot");
    assert!(a.cancel(again));
    assert_full(b.schedule_at(FAR, 15), "A keeps it again");
    drop(a);
    let got = b
        .schedule_at(FAR, 16)
        .expect("A's kept slot given back on drop");
    assert_eq!(slot(got), slot(hs[1]));
    assert_full(b.schedule_at(FAR, 17), "given back once");
    for h in [hs[0], hs[2], hs[3], got] {
        assert!(b.cancel(h));
    }
    drop(b);
    assert_eq!(fire_all(&mut adv, FAR + 1), [] as [u64; 0]);
    let st = owner.stats();
    assert_eq!((st.scheduled, st.cancelled, st.fired), (6, 6, 0), "{st:?}");
    assert_every_slot_once(&w.attach(FRESH), &mut adv);
}

#[test]
fn an_advancer_shares_its_clients_kept_slot() {
    // Catches: `share` not sharing the kept word (the advancer's client would not see C's kept
    // slot), a kept slot served twice through the two clients, and a drop of either the client or
    // the advancer that leaves the shared kept slot behind (B full afterwards).
    let _s = serial();
    let w = World::new(3);
    let c = w.attach(OWNER);
    let mut adv = c.advancer().unwrap();
    let b = w.attach(OTHER);
    let hs: Vec<Handle> = (0..3).map(|p| c.schedule_at(FAR, p).unwrap()).collect();
    adv.turn(|_| {});
    assert!(c.cancel(hs[0]));
    assert_full(b.schedule_at(FAR, 10), "C keeps the one free slot");
    let via_adv = adv.client().schedule_at(FAR, 11).expect("C's kept slot");
    assert_eq!(slot(via_adv), slot(hs[0]));
    assert_full(
        c.schedule_at(FAR, 12),
        "the advancer's client took the shared kept slot",
    );
    assert!(adv.client().cancel(via_adv));
    let via_c = c
        .schedule_at(FAR, 13)
        .expect("the advancer's client's kept slot");
    assert_eq!(slot(via_c), slot(hs[0]));
    assert_full(adv.client().schedule_at(FAR, 14), "C took it");
    assert!(c.cancel(via_c));
    // C leaves; the advancer, made from it, goes on. C's drop gives the shared kept slot back.
    drop(c);
    let got = b
        .schedule_at(FAR, 15)
        .expect("given back when C was dropped");
    assert_full(b.schedule_at(FAR, 16), "given back once");
    // The advancer's client keeps a slot of its own cancel; dropping the advancer gives it back.
    assert!(adv.client().cancel(hs[1]));
    assert_full(b.schedule_at(FAR, 17), "the advancer's client keeps it");
    adv.recover();
    assert_full(
        b.schedule_at(FAR, 18),
        "recovery re-issued a live client's kept slot",
    );
    drop(adv);
    let got2 = b
        .schedule_at(FAR, 19)
        .expect("given back when the advancer was dropped");
    assert_eq!(slot(got2), slot(hs[1]));
    assert_full(b.schedule_at(FAR, 20), "given back once");
    for h in [hs[2], got, got2] {
        assert!(b.cancel(h));
    }
    drop(b);
    let owner = w.attach(OWNER + 1);
    let mut adv = owner.advancer().unwrap();
    assert_eq!(fire_all(&mut adv, FAR + 1), [] as [u64; 0]);
    assert_every_slot_once(&w.attach(FRESH), &mut adv);
}

/// Who does what in [`churn`]: each worker thread uses client `clients[t]` (several threads may
/// share one).
struct Churn {
    capacity: usize,
    clients: &'static [usize],
    ops: u64,
    seed: u64,
}

/// Workers schedule far timers (which only their cancel ends), due timers (which the owner
/// fires, some cancelled at once, racing the fire) and cancel their far ones, while the owner
/// turns, advances its clock and now and then recovers. A far timer's slot is recorded from its
/// schedule to just before its cancel: no two live far timers may name one slot. At the end every
/// payload fired once or was cancelled (true: never fired), and every slot comes back once.
fn churn(spec: &Churn) {
    let w = World::new(spec.capacity);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let n_clients = spec.clients.iter().max().unwrap() + 1;
    let clients: Vec<Arc<Client>> = (0..n_clients)
        .map(|i| Arc::new(w.attach(VICTIM + i as u32)))
        .collect();
    let threads = spec.clients.len();
    let payloads = threads * spec.ops as usize;
    let fired: Arc<Vec<AtomicU32>> = Arc::new((0..payloads).map(|_| AtomicU32::new(0)).collect());
    let in_use: Arc<Vec<AtomicU64>> =
        Arc::new((0..spec.capacity).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(std::sync::Barrier::new(spec.clients.len() + 1));
    let workers: Vec<_> = spec
        .clients
        .iter()
        .enumerate()
        .map(|(t, &ci)| {
            let client = clients[ci].clone();
            let in_use = in_use.clone();
            let ops = spec.ops;
            let started = started.clone();
            let mut rng = spec.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            std::thread::spawn(move || {
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                // (payload, handle) of this thread's live far timers.
                let mut far: Vec<(u64, Handle)> = Vec::new();
                // payload -> cancel's answer, for every payload scheduled.
                let mut outcome: HashMap<u64, bool> = HashMap::new();
                let cancel_far =
                    |far: &mut Vec<(u64, Handle)>, outcome: &mut HashMap<u64, bool>, pick: u64| {
                        let (fp, h) = far.swap_remove(pick as usize % far.len());
                        // Cleared before the cancel frees the slot.
                        assert_eq!(in_use[slot(h) as usize].swap(0, SeqCst), fp + 1);
                        assert!(client.cancel(h), "a far timer ended by someone else");
                        assert!(!client.cancel(h), "cancelled twice");
                        outcome.insert(fp, true);
                    };
                started.wait();
                for i in 0..ops {
                    let p = t as u64 * ops + i;
                    let roll = next() % 100;
                    if roll < 35 && !far.is_empty() {
                        cancel_far(&mut far, &mut outcome, next());
                        continue;
                    }
                    let due = roll >= 70;
                    let deadline = if due { client.now() + roll % 2 } else { FAR };
                    let mut tries = 0;
                    let got = loop {
                        match client.schedule_at(deadline, p) {
                            // Make room: end a far timer of ours, or let the owner fire.
                            Err(ScheduleError::Full(_)) if !far.is_empty() => {
                                cancel_far(&mut far, &mut outcome, next());
                            }
                            Err(ScheduleError::Full(_)) if tries < 100 => {
                                tries += 1;
                                std::thread::yield_now();
                            }
                            r => break r,
                        }
                    };
                    match got {
                        Ok(h) => {
                            if due {
                                let cancel_now = next() % 2 == 0;
                                outcome.insert(p, cancel_now && client.cancel(h));
                            } else {
                                let was = in_use[slot(h) as usize].swap(p + 1, SeqCst);
                                assert_eq!(
                                    was,
                                    0,
                                    "slot {} of live timer {} handed to {p}",
                                    slot(h),
                                    was.wrapping_sub(1)
                                );
                                far.push((p, h));
                                outcome.insert(p, false);
                            }
                        }
                        Err(ScheduleError::Full(_)) => {}
                        Err(e) => panic!("schedule: {e:?}"),
                    }
                }
                // Leave one far timer armed (the final fire must fire it once), so that threads
                // still running find room.
                while far.len() > 1 {
                    cancel_far(&mut far, &mut outcome, next());
                }
                for (fp, h) in far {
                    assert_eq!(in_use[slot(h) as usize].swap(0, SeqCst), fp + 1);
                }
                outcome
            })
        })
        .collect();
    let turner = {
        let fired = fired.clone();
        let stop = stop.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            started.wait();
            let mut turns = 0u64;
            while !stop.load(SeqCst) {
                let now = adv.client().now();
                adv.advance_to(now + 1);
                adv.turn(|p| {
                    fired[p as usize].fetch_add(1, SeqCst);
                });
                turns += 1;
                if turns.is_multiple_of(64) {
                    adv.recover();
                }
            }
            adv
        })
    };
    let mut outcome = HashMap::new();
    for t in workers {
        outcome.extend(t.join().unwrap());
    }
    stop.store(true, SeqCst);
    let mut adv = turner.join().unwrap();
    drop(clients);
    adv.advance_to(FAR + 1);
    adv.turn(|p| {
        fired[p as usize].fetch_add(1, SeqCst);
    });
    adv.recover();
    adv.turn(|p| panic!("{p} fired after everything had"));
    for p in 0..payloads as u64 {
        let f = fired[p as usize].load(SeqCst);
        match outcome.get(&p) {
            None => assert_eq!(f, 0, "{p} was never scheduled yet fired"),
            Some(true) => assert_eq!(f, 0, "{p}: cancel returned true, yet it fired"),
            Some(false) => assert_eq!(f, 1, "{p}: neither cancelled nor fired once"),
        }
    }
    let st = owner.stats();
    assert_eq!(st.scheduled, outcome.len() as u64, "{st:?}");
    assert_eq!(st.scheduled, st.cancelled + st.fired, "{st:?}");
    assert_every_slot_once(&w.attach(FRESH), &mut adv);
}

#[test]
fn clients_cancelling_into_their_kept_slot_never_share_a_slot() {
    // Two clients on two threads, the owner turning on a third. Catches: a kept slot handed
    // out twice (two live far timers naming one slot: the `in_use` swap), a schedule of the kept
    // slot that does not claim it against the owner's stale entry or a recovery, a cancel that
    // keeps a slot it also pushes, a lost kept slot (the final every-slot check), and a timer lost
    // to an overwritten arming (fired or cancelled exactly once).
    let _s = serial();
    for seed in 1..=6 {
        churn(&Churn {
            capacity: 6,
            clients: &[0, 1],
            ops: 10_000,
            seed,
        });
    }
}

#[test]
fn threads_sharing_one_client_never_share_its_kept_slot() {
    // Two threads through one client (one kept word), and a third client. Catches: two threads
    // both taking the one kept slot (a load and store instead of the swap), a keep that
    // overwrites the kept slot without pushing the old one (the slot leaks: the final
    // every-slot check), and the faults of the test above.
    let _s = serial();
    for seed in 11..=16 {
        churn(&Churn {
            capacity: 5,
            clients: &[0, 0, 1],
            ops: 8_000,
            seed,
        });
    }
}

#[test]
fn give_backs_on_drop_race_pops_turns_and_recovery() {
    // Keepers, each keeping one cancelled slot, are dropped on one thread while a scheduler on
    // another takes every slot it can and the owner turns and recovers (everyone alive). Catches:
    // a give-back that pushes a slot already on the stack or taken (`Corrupt`, or one slot handed
    // out twice), one that pushes nothing (a leak), and a recovery that re-issues a live
    // client's kept or half-given-back slot (a slot on the stack twice).
    let _s = serial();
    const CAP: usize = 6;
    for round in 0..400u32 {
        let w = World::new(CAP);
        let owner = w.attach(OWNER);
        let mut adv = owner.advancer().unwrap();
        // Three keepers: each schedules two and cancels both (keeps one, pushes one); one
        // more timer (the owner's) fires during the race.
        let keepers: Vec<Client> = (0..3).map(|k| w.attach(VICTIM + k)).collect();
        for (k, c) in keepers.iter().enumerate() {
            let h0 = c.schedule_at(FAR, k as u64).unwrap();
            let h1 = c.schedule_at(FAR, 10 + k as u64).unwrap();
            if (round as usize + k).is_multiple_of(2) {
                assert!(c.cancel(h0));
                assert!(c.cancel(h1));
            } else {
                assert!(c.cancel(h1));
                assert!(c.cancel(h0));
            }
        }
        owner.schedule_at(1, 99).unwrap();
        adv.turn(|_| {});
        let dropper = std::thread::spawn(move || drop(keepers));
        let s = w.attach(OTHER);
        let scheduler = std::thread::spawn(move || {
            let mut got = Vec::new();
            for i in 0..2 * CAP as u64 {
                match s.schedule_at(FAR, 1000 + i) {
                    Ok(h) => got.push(h),
                    Err(ScheduleError::Full(_)) => std::thread::yield_now(),
                    Err(e) => panic!("round {round}: {e:?}"),
                }
            }
            (s, got)
        });
        adv.advance_to(1);
        let mut fired = Vec::new();
        for i in 0..4 {
            adv.turn(|p| fired.push(p));
            if i % 2 == (round as usize) % 2 {
                adv.recover();
            }
        }
        dropper.join().unwrap();
        let (s, got) = scheduler.join().unwrap();
        adv.turn(|p| fired.push(p));
        assert_eq!(fired, [99], "round {round}");
        let slots: HashSet<u32> = got.iter().map(|&h| slot(h)).collect();
        assert_eq!(
            slots.len(),
            got.len(),
            "round {round}: a slot handed out twice"
        );
        assert!(got.len() <= CAP);
        for h in got {
            assert!(s.cancel(h));
        }
        drop(s);
        adv.recover();
        assert_every_slot_once(&w.attach(FRESH), &mut adv);
    }
}

#[test]
fn a_killed_clients_kept_slot_is_reissued_once_it_is_seen_dead() {
    // Catches: recovery re-issuing a live client's kept slot (`reclaimed` 1 while it lives),
    // recovery never re-issuing a dead one's (a leak), a `crash` that gives the kept slot back as
    // a drop would (B gets it before the death is seen, `reclaimed` 0), and a slot re-issued twice.
    let _s = serial();
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let victim = w.attach(VICTIM);
    let h = victim.schedule_at(FAR, 1).unwrap();
    adv.turn(|_| {});
    assert!(victim.cancel(h));
    let b = w.attach(OTHER);
    let hs: Vec<Handle> = (0..3)
        .map(|p| b.schedule_at(FAR, 10 + p).unwrap())
        .collect();
    assert_full(b.schedule_at(FAR, 20), "the victim keeps the fourth slot");
    assert_eq!(
        adv.recover().reclaimed,
        0,
        "a live client's kept slot re-issued"
    );
    // The owner's own liveness look, too, leaves it alone while the victim lives.
    std::thread::sleep(Duration::from_millis(120));
    adv.turn(|_| {});
    assert_full(
        b.schedule_at(FAR, 21),
        "the victim lives and keeps its slot",
    );
    w.kill(VICTIM, victim);
    assert_full(
        b.schedule_at(FAR, 22),
        "a killed process gives nothing back",
    );
    let r = adv.recover();
    assert_eq!(r.reclaimed, 1, "{r:?}");
    let got = b
        .schedule_at(FAR, 23)
        .expect("the dead client's kept slot, re-issued");
    assert_eq!(slot(got), slot(h));
    assert_full(b.schedule_at(FAR, 24), "re-issued once");
    assert_eq!(adv.recover().reclaimed, 0);
    for h in hs.into_iter().chain([got]) {
        assert!(b.cancel(h));
    }
    drop(b);
    assert_eq!(owner.stats().reclaimed, 1);
    assert_every_slot_once(&w.attach(FRESH), &mut adv);
}

#[test]
fn the_owner_reissues_a_killed_clients_kept_slot_by_itself() {
    // As above, the death found by the owner's own liveness look during a turn, while another
    // client keeps a slot of its own and lives. Catches: re-issuing every named FREE slot when
    // one process dies (the live keeper's slot too), and missing the dead one's.
    let _s = serial();
    let w = World::new(4);
    let owner = w.attach(OWNER);
    let mut adv = owner.advancer().unwrap();
    let victim = w.attach(VICTIM);
    let live = w.attach(VICTIM + 1);
    let hv = victim.schedule_at(FAR, 1).unwrap();
    let hl = live.schedule_at(FAR, 2).unwrap();
    assert!(victim.cancel(hv));
    assert!(live.cancel(hl));
    let b = w.attach(OTHER);
    let hs: Vec<Handle> = (0..2)
        .map(|p| b.schedule_at(FAR, 10 + p).unwrap())
        .collect();
    assert_full(b.schedule_at(FAR, 20), "two clients keep a slot each");
    w.kill(VICTIM, victim);
    std::thread::sleep(Duration::from_millis(120));
    adv.turn(|_| {});
    assert_eq!(owner.stats().reclaimed, 1, "{:?}", owner.stats());
    let got = b.schedule_at(FAR, 21).expect("the dead client's kept slot");
    assert_eq!(slot(got), slot(hv));
    assert_full(b.schedule_at(FAR, 22), "the live keeper's slot stays kept");
    let mine = live
        .schedule_at(FAR, 23)
        .expect("the live keeper's own slot");
    assert_eq!(slot(mine), slot(hl));
    for h in hs.into_iter().chain([got, mine]) {
        assert!(b.cancel(h));
    }
    drop((b, live));
    assert_every_slot_once(&w.attach(FRESH), &mut adv);
}

/// Runs `child` in a process made by `fork`, once the parent has run `first`; the child writes
/// its handles (as `u128`) to a pipe. Returns them once the child has exited with status 0.
fn in_fork_child(first: impl FnOnce(), child: impl FnOnce() -> Vec<Handle>) -> Vec<Handle> {
    let mut fds = [0; 2];
    let mut go = [0; 2];
    // SAFETY: two writable ints for each pipe's fds.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
    // SAFETY: every other thread of this test binary is parked on `SERIAL` (or idle in the
    // harness), holding no lock the child needs; the child touches the set and the pipe, then
    // `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut byte = 0u8;
            // SAFETY: reads one byte into a live buffer: the parent's go-ahead.
            assert_eq!(unsafe { libc::read(go[0], (&raw mut byte).cast(), 1) }, 1);
            for h in child() {
                let bytes = h.to_u128().to_ne_bytes();
                // SAFETY: writes 16 bytes from a live buffer to our pipe's write end.
                let n = unsafe { libc::write(fds[1], bytes.as_ptr().cast(), bytes.len()) };
                assert_eq!(n, 16);
            }
        }))
        .map_or(1, |()| 0);
        // SAFETY: ends the child without running the parent's harness or destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closes our copy of the write end, which we own.
    unsafe { libc::close(fds[1]) };
    first();
    // SAFETY: writes one byte from a live buffer to the go-ahead pipe, then closes both its
    // ends, which we own.
    unsafe {
        assert_eq!(libc::write(go[1], [1u8].as_ptr().cast(), 1), 1);
        libc::close(go[0]);
        libc::close(go[1]);
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is writable.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status}"
    );
    let mut out = Vec::new();
    loop {
        let mut bytes = [0u8; 16];
        // SAFETY: reads up to 16 bytes into a live buffer from the pipe's read end.
        let n = unsafe { libc::read(fds[0], bytes.as_mut_ptr().cast(), 16) };
        if n <= 0 {
            break;
        }
        assert_eq!(n, 16);
        out.push(Handle::from_u128(u128::from_ne_bytes(bytes)));
    }
    // SAFETY: closes the read end, which we own.
    unsafe { libc::close(fds[0]) };
    out
}

#[test]
fn a_fork_child_using_its_parents_clients_takes_each_kept_slot_at_most_once() {
    // Three parent clients keep a slot each (K1, K2, K3); a forked child schedules through its
    // copies of the first two and drops its copy of the third. Catches: a schedule that uses its
    // kept slot without claiming it (the parent's K1 schedule would name the child's slot and
    // overwrite its timer), a give-back that does not claim first (the parent's drop of K2 would
    // free the child's armed slot: its timer lost, the slot pushed twice), and a drop in the child
    // that gives the parent's slot back (K3's next schedule would come from the stack, one
    // generation on, and the slot would be free for other clients meanwhile).
    let _s = serial();
    let segment = Segment::anonymous(&Config::new(8).manual_clock()).unwrap();
    let owner = segment.attach().unwrap();
    let mut adv = owner.advancer().unwrap();
    let keepers: Vec<Client> = (0..3).map(|_| segment.attach().unwrap()).collect();
    let mut kept = Vec::new();
    for (k, c) in keepers.iter().enumerate() {
        let h = c.schedule_at(FAR, k as u64).unwrap();
        assert!(c.cancel(h));
        kept.push(h);
    }
    adv.turn(|_| {});
    let child = in_fork_child(
        || {},
        || {
            // The wrong use the crate doc warns of: the parent's client copies, in the child.
            let a = keepers[0].schedule_at(5, 77).expect("child via K1's copy");
            let b = keepers[1].schedule_at(5, 78).expect("child via K2's copy");
            // The child drops what it inherited: nothing changes in the parent.
            // SAFETY: in the child, which `_exit`s without dropping the originals.
            drop(unsafe { inherited(&keepers) });
            vec![a, b]
        },
    );
    assert_eq!(child.len(), 2);
    assert_eq!(
        slot(child[0]),
        slot(kept[0]),
        "the child took K1's kept slot"
    );
    assert_eq!(
        slot(child[1]),
        slot(kept[1]),
        "the child took K2's kept slot"
    );
    let mut keepers = keepers.into_iter();
    let (k1, k2, k3) = (
        keepers.next().unwrap(),
        keepers.next().unwrap(),
        keepers.next().unwrap(),
    );
    let p = k1.schedule_at(5, 88).unwrap();
    assert_ne!(
        slot(p),
        slot(child[0]),
        "K1 reused the slot the child armed"
    );
    assert_ne!(slot(p), slot(child[1]));
    // K2 still thinks it keeps the slot the child armed: its drop must leave that slot alone.
    drop(k2);
    // K3's kept slot is untouched by the child's drop: its schedule gets it at the generation its
    // cancel left (one from the stack would be a generation further on).
    let q = k3.schedule_at(5, 89).unwrap();
    assert_eq!(
        (slot(q), generation(q)),
        (slot(kept[2]), generation(kept[2]).wrapping_add(1)),
        "K3's kept slot was given back by the child"
    );
    assert_eq!(fire_all(&mut adv, 5), [77, 78, 88, 89]);
    adv.turn(|p| panic!("{p} fired twice"));
    drop((k1, k3));
    adv.recover();
    assert_every_slot_once(&segment.attach().unwrap(), &mut adv);
}

/// Bitwise copies of the parent's clients, for a `fork` child to drop as it would drop the values
/// it inherited.
///
/// # Safety
///
/// Only in a `fork` child that never drops the originals (it `_exit`s), so that each value is
/// dropped once in that process's memory.
unsafe fn inherited(clients: &[Client]) -> Vec<Client> {
    // SAFETY: see the function's contract.
    clients
        .iter()
        .map(|c| unsafe { std::ptr::read(c) })
        .collect()
}

#[test]
fn a_fork_childs_copy_of_a_slot_given_back_claims_nothing() {
    // The child inherits K's kept slot; the parent drops K (gives it back) before the child
    // schedules through its copy. Catches a give-back that does not move the slot to the next
    // generation: the child's copy then claims the slot while it is also on the free stack, and
    // when its timer fires the owner pushes it a second time (the stack loops: a slot twice or
    // `Corrupt`).
    let _s = serial();
    let segment = Segment::anonymous(&Config::new(4).manual_clock()).unwrap();
    let owner = segment.attach().unwrap();
    let mut adv = owner.advancer().unwrap();
    let k = segment.attach().unwrap();
    let h = k.schedule_at(FAR, 1).unwrap();
    assert!(k.cancel(h));
    let k = std::cell::RefCell::new(Some(k));
    let child = in_fork_child(
        || drop(k.borrow_mut().take()),
        || {
            let copy = k.borrow();
            let copy = copy.as_ref().expect("the child's copy");
            vec![copy.schedule_at(5, 77).expect("via the copy")]
        },
    );
    // The child got the slot from the stack, where the parent's give-back had put it.
    assert_eq!(
        (slot(child[0]), generation(child[0])),
        (slot(h), generation(h).wrapping_add(2)),
        "the child's stale copy claimed the slot given back"
    );
    assert_eq!(fire_all(&mut adv, 5), [77]);
    adv.recover();
    assert_every_slot_once(&segment.attach().unwrap(), &mut adv);
}

#[test]
fn a_fork_childs_cancel_through_its_parents_client_leaks_no_slot() {
    // A cancel through a client copy that a fork child inherited must push the slot, not keep it:
    // kept in the child's memory, named for the parent and on no stack, it would leave with the
    // child (whose drop returns early), and recovery leaves a FREE slot named by a live process
    // alone, so it would be lost while the parent lives. Catches that leak (the final
    // every-slot check); it failed so before clients counted forks.
    let _s = serial();
    let segment = Segment::anonymous(&Config::new(4).manual_clock()).unwrap();
    let owner = segment.attach().unwrap();
    let mut adv = owner.advancer().unwrap();
    let parent = segment.attach().unwrap();
    let h = parent.schedule_at(FAR, 1).unwrap();
    assert!(parent.cancel(h));
    let child = in_fork_child(
        || {},
        || {
            let h = parent
                .schedule_at(5, 77)
                .expect("the kept slot, via the copy");
            assert!(parent.cancel(h));
            // SAFETY: in the child, which `_exit`s without dropping the original.
            drop(unsafe { inherited(std::slice::from_ref(&parent)) });
            vec![h]
        },
    );
    assert_eq!(slot(child[0]), slot(h));
    drop(parent);
    adv.recover();
    assert_eq!(fire_all(&mut adv, 5), [] as [u64; 0]);
    assert_every_slot_once(&segment.attach().unwrap(), &mut adv);
}

//! Three processes cancel the same timers at the instant the owner fires them, round after round,
//! and each winning canceller at once schedules a new timer, due two ticks later, into the slot
//! its cancel just freed, while the owner may still hold its index entry of the cancelled one.
//! Checks, per timer: it fired or exactly one cancel returned true, never both; no cancel that
//! began after the fire (by one shared sequence counter) returned true; each new timer fired
//! once, never at the old deadline. One test in this binary, so nothing else runs while it forks.

#![cfg(not(loom))]

mod shm_util;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use shm_util::{Rng, anonymous_words};
use tickwheel_shm::{Config, Handle, Segment};

const CANCELLERS: usize = 3;
const K: usize = 32;
const ROUNDS: u64 = 150;
const CAPACITY: usize = 4 * K;

/// Shared words: see the `W_*` offsets.
const W_ROUND: usize = 0;
const W_SEQ: usize = 1;
const W_SET: usize = 2;
const W_ACK: usize = 3; // CANCELLERS words: the last round each finished
const W_HANDLE: usize = W_ACK + CANCELLERS; // K words: slot << 32 | generation
const W_FIRE_AT: usize = W_HANDLE + K; // K words: sequence number of the fire, 0 none
const W_RESULT: usize = W_FIRE_AT + K; // CANCELLERS * K: (seq << 2) | 1 true / 2 false
const W_NEW: usize = W_RESULT + CANCELLERS * K; // CANCELLERS * K: 1 if a new timer was scheduled
const WORDS: usize = W_NEW + CANCELLERS * K;

/// The cancellers, killed if the test fails first (they would spin forever).
struct Kids(Vec<i32>);

impl Drop for Kids {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: our own children, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn new_payload(round: u64, c: usize, i: usize) -> u64 {
    1 << 40 | round << 16 | (c as u64) << 8 | i as u64
}

fn canceller(segment: &Segment, w: &[AtomicU64], c: usize) {
    let me = segment.attach().unwrap();
    let set = w[W_SET].load(SeqCst);
    let mut order: Vec<usize> = (0..K).collect();
    let mut rng = Rng::new((c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for round in 1..=ROUNDS {
        while w[W_ROUND].load(SeqCst) < round {
            std::thread::yield_now();
        }
        // A different order each round and canceller.
        for j in (1..K).rev() {
            order.swap(j, rng.below(j as u64 + 1) as usize);
        }
        let deadline = me.now() + 2;
        for &i in &order {
            let bits = w[W_HANDLE + i].load(SeqCst);
            let h = Handle::from_u128(u128::from(set) << 64 | u128::from(bits));
            let seq = w[W_SEQ].fetch_add(1, SeqCst) + 1;
            let won = me.cancel(h);
            w[W_RESULT + c * K + i].store(seq << 2 | if won { 1 } else { 2 }, SeqCst);
            if won {
                // The slot is free at once: take it again, due later than the old timer.
                let ok = me.schedule_at(deadline, new_payload(round, c, i)).is_ok();
                w[W_NEW + c * K + i].store(u64::from(ok), SeqCst);
            }
        }
        w[W_ACK + c].store(round, SeqCst);
    }
}

#[test]
fn cancels_from_many_processes_race_the_fire_and_reuse_the_slot() {
    let segment = Segment::anonymous(&Config::new(CAPACITY).manual_clock()).unwrap();
    let w = anonymous_words(WORDS);
    let parent = segment.attach().unwrap();
    let probe = parent.schedule_at(u64::MAX, 0).unwrap();
    assert!(parent.cancel(probe));
    w[W_SET].store((probe.to_u128() >> 64) as u64, SeqCst);
    let mut adv = parent.advancer().unwrap();
    let mut kids = Kids(
        (0..CANCELLERS)
            .map(|c| {
                // SAFETY: the only test of this binary; the child uses the set and the shared
                // words, then `_exit`s.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0);
                if pid == 0 {
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        canceller(&segment, w, c)
                    }))
                    .is_ok();
                    // SAFETY: ends the child without the harness's teardown.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) };
                }
                pid
            })
            .collect(),
    );

    let limit = Instant::now() + Duration::from_secs(60);
    let (mut fired_total, mut won_total, mut new_total) = (0, 0, 0);
    for round in 1..=ROUNDS {
        let t = parent.now();
        for i in 0..K {
            let h = parent.schedule_at(t + 1, i as u64).unwrap();
            w[W_HANDLE + i].store(h.to_u128() as u64, SeqCst);
            w[W_FIRE_AT + i].store(0, SeqCst);
            for c in 0..CANCELLERS {
                w[W_RESULT + c * K + i].store(0, SeqCst);
                w[W_NEW + c * K + i].store(0, SeqCst);
            }
        }
        // Index them, so a cancel that wins leaves the owner a stale entry due at t + 1.
        adv.turn(|p| panic!("{p} fired early"));
        adv.advance_to(t + 1);
        w[W_ROUND].store(round, SeqCst);
        if round % 3 != 0 {
            std::thread::sleep(Duration::from_micros(round * 7 % 150));
        }
        let mut fired: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut handler = |p: u64, at: u64| {
            if p < K as u64 {
                let seq = w[W_SEQ].fetch_add(1, SeqCst) + 1;
                w[W_FIRE_AT + p as usize].store(seq, SeqCst);
            }
            fired.entry(p).or_default().push(at);
        };
        adv.turn(|p| handler(p, t + 1));
        while (0..CANCELLERS).any(|c| w[W_ACK + c].load(SeqCst) < round) {
            assert!(Instant::now() < limit, "cancellers stuck");
            for (c, &pid) in kids.0.iter().enumerate() {
                let mut st = 0;
                // SAFETY: our own child; WNOHANG never blocks. A canceller done with its last
                // round may have exited: its status is then collected here and not below.
                let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
                assert!(
                    r == 0 || w[W_ACK + c].load(SeqCst) == ROUNDS && st == 0,
                    "canceller {c} ended early ({st:#x})"
                );
            }
            adv.turn(|p| handler(p, t + 1));
            std::thread::yield_now();
        }
        adv.turn(|p| handler(p, t + 1));
        adv.advance_to(t + 2);
        adv.turn(|p| handler(p, t + 2));
        adv.advance_to(t + 4);
        adv.turn(|p| handler(p, t + 4));

        for i in 0..K {
            let fire = w[W_FIRE_AT + i].load(SeqCst);
            let times = fired.get(&(i as u64)).map_or(0, Vec::len);
            let results: Vec<u64> = (0..CANCELLERS)
                .map(|c| w[W_RESULT + c * K + i].load(SeqCst))
                .collect();
            let wins = results.iter().filter(|&&r| r & 3 == 1).count();
            assert!(
                times + wins == 1,
                "round {round} timer {i}: fired {times} times, {wins} cancels won ({results:?})"
            );
            for &r in &results {
                assert!(
                    !(fire != 0 && r >> 2 > fire && r & 3 == 1),
                    "round {round} timer {i}: a cancel begun after the fire returned true"
                );
            }
            fired_total += times;
            won_total += wins;
            for c in 0..CANCELLERS {
                if w[W_NEW + c * K + i].load(SeqCst) == 1 {
                    new_total += 1;
                    let p = new_payload(round, c, i);
                    let at = fired.remove(&p).unwrap_or_default();
                    assert_eq!(
                        at.len(),
                        1,
                        "round {round}: new timer {p:#x} fired at {at:?}"
                    );
                    // Scheduled at the clock t + 1, so due at t + 3: the turn at t + 4 fires it.
                    assert_eq!(
                        at[0],
                        t + 4,
                        "round {round}: new timer {p:#x} due at {}",
                        t + 3
                    );
                }
            }
            fired.remove(&(i as u64));
        }
        assert!(
            fired.is_empty(),
            "round {round}: unexpected fires {fired:?}"
        );
    }
    for pid in std::mem::take(&mut kids.0) {
        let mut st = 0;
        // SAFETY: our own child (already reaped above if it exited during the last round).
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            r == -1 || libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "canceller failed"
        );
    }
    eprintln!(
        "storm: {} timers, {fired_total} fired, {won_total} cancelled, {new_total} re-used slots; {:?}",
        ROUNDS as usize * K,
        parent.stats()
    );
    assert!(
        fired_total > 0 && won_total > 0,
        "no race: {fired_total} / {won_total}"
    );
    // Nothing lost: every slot free.
    let hs: Vec<Handle> = (0..CAPACITY)
        .map(|i| {
            parent
                .schedule_at(u64::MAX, i as u64)
                .expect("a slot leaked")
        })
        .collect();
    for h in hs {
        assert!(parent.cancel(h));
    }
}

//! Cancellers killed inside their cancel, at each of its store points in turn (before the CAS,
//! between the CAS and the free-stack push, between the push and clearing their name, before the
//! count), while two other processes churn schedules and cancels through the same small set and
//! the owner turns and recovers. Checks: a slot is never handed out twice (every successful
//! schedule gets its own (slot, generation)), every payload fires or is cancelled exactly once, a
//! victim's timer fires only if its cancel died before the CAS, the set never reports full while
//! most of it is free, and after a last recovery no slot is lost. A canceller killed after its
//! push must cost nothing at all: its slot is taken again without any recovery.
//! One test in this binary, so nothing else runs while it forks.

#![cfg(not(loom))]

mod shm_util;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use shm_util::{Rng, anonymous_words};
use tickwheel_shm::{Client, Config, Handle, ScheduleError, Segment, hooks};

const CAPACITY: usize = 128;
const CHURNERS: u64 = 2;
/// Payloads of churner `c`: `c * STRIDE + seq`; victims' timers: `CHURNERS * STRIDE + i`.
const STRIDE: u64 = 1 << 15;
const VICTIMS: u64 = 240;
const PAYLOADS: usize = ((CHURNERS + 1) * STRIDE) as usize;
/// Live timers one churner keeps at most.
const CHURN_LIVE: usize = 24;

const INTENT: u64 = 1;
const SCHEDULED: u64 = 2;
const CANCELLING: u64 = 3;
const CANCELLED: u64 = 4;
const NOT_CANCELLED: u64 = 5;
const FULL: u64 = 6;

struct Log {
    state: &'static [AtomicU64],
    /// `slot << 32 | generation`, plus 1, of each successful schedule.
    handed: &'static [AtomicU64],
    fired: &'static [AtomicU64],
    /// Word 0: churners stop when non-zero.
    control: &'static [AtomicU64],
}

fn slot_gen(h: Handle) -> u64 {
    (h.to_u128() as u64) + 1
}

fn fork(body: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the only test of this binary; the child uses the set and the shared words only,
    // then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: ends the child without the harness's teardown.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// `waitpid`: `Some(status)` once the child has ended.
fn reap(pid: i32, block: bool) -> Option<i32> {
    let mut status = 0;
    // SAFETY: our own child; `status` is writable.
    let r = unsafe { libc::waitpid(pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
    assert!(r == pid || (r == 0 && !block), "waitpid {r}");
    (r == pid).then_some(status)
}

fn churn(segment: &Segment, log: &Log, c: u64) -> i32 {
    let me = segment.attach().unwrap();
    let mut rng = Rng::new(c.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut next = move |n: u64| rng.below(n);
    let mut live: Vec<(u64, Handle)> = Vec::new();
    for seq in 0..STRIDE {
        if log.control[0].load(SeqCst) != 0 {
            break;
        }
        let p = c * STRIDE + seq;
        log.state[p as usize].store(INTENT, SeqCst);
        match me.schedule_at(me.now() + 1 + next(20), p) {
            Ok(h) => {
                log.handed[p as usize].store(slot_gen(h), SeqCst);
                log.state[p as usize].store(SCHEDULED, SeqCst);
                live.push((p, h));
            }
            Err(ScheduleError::Full(back)) => {
                assert_eq!(back, p);
                log.state[p as usize].store(FULL, SeqCst);
            }
            Err(e) => panic!("{e}"),
        }
        while live.len() > CHURN_LIVE || (!live.is_empty() && next(2) == 0) {
            let (p, h) = live.swap_remove(next(live.len() as u64) as usize);
            log.state[p as usize].store(CANCELLING, SeqCst);
            let won = me.cancel(h);
            log.state[p as usize].store(if won { CANCELLED } else { NOT_CANCELLED }, SeqCst);
        }
        if seq % 16 == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    0
}

/// Schedules nothing; arms the kill and cancels `h`. Exit 0: it survived the whole cancel.
fn victim(segment: &Segment, h: Handle, kill_at: u64) -> i32 {
    let me = segment.attach().unwrap();
    hooks::kill_before_store(kill_at);
    assert!(me.cancel(h));
    0
}

/// Fills every free slot without a turn or a recovery, then cancels them all again: how many
/// it got.
fn room_without_recovery(client: &Client) -> usize {
    let mut hs = Vec::new();
    while let Ok(h) = client.schedule_at(1 << 40, u64::MAX) {
        hs.push(h);
    }
    let n = hs.len();
    for h in hs {
        assert!(client.cancel(h));
    }
    n
}

#[test]
fn cancellers_killed_inside_their_cancel_under_churn() {
    let segment = Segment::anonymous(&Config::new(CAPACITY).manual_clock()).unwrap();
    let log = Log {
        state: anonymous_words(PAYLOADS),
        handed: anonymous_words(PAYLOADS),
        fired: anonymous_words(PAYLOADS),
        control: anonymous_words(1),
    };
    let parent = segment.attach().unwrap();
    let mut adv = parent.advancer().unwrap();

    // First, alone: a canceller killed before each of its store points, one after another. The
    // number of store points a cancel passes is found by running one that survives.
    let mut points: usize = 0;
    let mut rooms = Vec::new();
    for n in 1.. {
        let h = parent.schedule_at(1 << 40, 7).unwrap();
        adv.turn(|p| panic!("{p} fired early"));
        let pid = fork(|| victim(&segment, h, n));
        let st = reap(pid, true).unwrap();
        let killed = libc::WIFSIGNALED(st);
        if !killed {
            assert_eq!(libc::WEXITSTATUS(st), 0, "victim failed at n = {n}");
        }
        let room = room_without_recovery(&parent);
        rooms.push(room);
        // Before the CAS (n = 1) the timer holds its slot; from the CAS to the push the slot is
        // on no stack until a recovery; from the push on, it is free as if nothing happened.
        let cancelled = n > 1;
        if cancelled {
            assert!(
                !parent.cancel(h),
                "n = {n}: the dead canceller's CAS did not hold"
            );
            assert!(room >= CAPACITY - 1, "n = {n}: {room} of {CAPACITY} free");
        } else {
            assert_eq!(room, CAPACITY - 1, "n = {n}");
        }
        adv.recover();
        assert_eq!(
            room_without_recovery(&parent),
            CAPACITY - usize::from(!cancelled),
            "n = {n}: after recovery"
        );
        if !cancelled {
            assert!(parent.cancel(h));
        }
        adv.advance_to(adv.client().now() + 1);
        adv.turn(|p| panic!("{p} fired (n = {n})"));
        if !killed {
            points = n as usize - 1;
            break;
        }
    }
    assert!(points >= 5, "a cancel passes only {points} store points");
    eprintln!("free slots without recovery after a kill before cancel store 1..: {rooms:?}");
    // The last two store points (clearing the name, the count) come after the push: a canceller
    // killed there left its slot on the stack, taken again with no recovery.
    assert_eq!(rooms[points - 2..points], [CAPACITY, CAPACITY], "{rooms:?}");

    // Then under churn: victims killed at random points while two churners work.
    let churners: Vec<i32> = (0..CHURNERS)
        .map(|c| fork(|| churn(&segment, &log, c)))
        .collect();
    let mut victims = 0u64;
    let mut current: Option<(i32, u64, u64)> = None;
    let mut rng = Rng::new(0x1234_5678_9abc_def1);
    let mut rand = move |n: u64| rng.below(n);
    let handler = |p: u64| {
        log.fired[p as usize].fetch_add(1, SeqCst);
    };
    let mut killed_at = vec![0u64; VICTIMS as usize];
    let limit = Instant::now() + Duration::from_secs(30);
    let mut done = vec![false; churners.len()];
    let mut turns = 0u64;
    while done.iter().any(|d| !d) {
        assert!(Instant::now() < limit, "churners did not finish");
        turns += 1;
        adv.advance_to(parent.now() + 1);
        adv.turn(handler);
        match current {
            None if victims < VICTIMS && turns.is_multiple_of(3) => {
                let p = CHURNERS * STRIDE + victims;
                let h = parent.schedule_at(parent.now() + 1_000_000, p).unwrap();
                log.state[p as usize].store(SCHEDULED, SeqCst);
                log.handed[p as usize].store(slot_gen(h), SeqCst);
                let n = 1 + rand(points as u64);
                let pid = fork(|| victim(&segment, h, n));
                current = Some((pid, p, n));
                killed_at[victims as usize] = n;
                victims += 1;
            }
            Some((pid, p, n)) => {
                if let Some(st) = reap(pid, false) {
                    assert!(libc::WIFSIGNALED(st), "victim {p} was not killed at {n}");
                    log.state[p as usize].store(if n > 1 { CANCELLED } else { SCHEDULED }, SeqCst);
                    // As the docs ask: recover after reaping a child you killed.
                    adv.recover();
                    current = None;
                }
            }
            None => {}
        }
        if victims >= VICTIMS && current.is_none() {
            log.control[0].store(1, SeqCst);
        }
        for (i, &pid) in churners.iter().enumerate() {
            if !done[i]
                && let Some(st) = reap(pid, false)
            {
                assert!(
                    libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
                    "churner {i} failed: {st:#x}"
                );
                done[i] = true;
            }
        }
    }
    if let Some((pid, p, n)) = current {
        // The churners finished first: this victim's outcome is settled the same way.
        let st = reap(pid, true).unwrap();
        assert!(libc::WIFSIGNALED(st), "victim {p} was not killed at {n}");
        log.state[p as usize].store(if n > 1 { CANCELLED } else { SCHEDULED }, SeqCst);
    }
    adv.recover();
    adv.advance_to(parent.now() + 2_000_000);
    adv.turn(handler);

    // Every (slot, generation) handed out once.
    let mut seen = std::collections::HashMap::new();
    for p in 0..PAYLOADS {
        let sg = log.handed[p].load(SeqCst);
        if sg != 0
            && let Some(q) = seen.insert(sg, p)
        {
            panic!(
                "slot {} generation {} handed to payloads {q} and {p}",
                (sg - 1) >> 32,
                (sg - 1) as u32
            );
        }
    }
    // Exactly once; no Full.
    let (mut fired, mut cancelled, mut full) = (0, 0, 0);
    for p in 0..PAYLOADS {
        let st = log.state[p].load(SeqCst);
        let f = log.fired[p].load(SeqCst);
        match st {
            0 => assert_eq!(f, 0, "payload {p} never scheduled, fired"),
            SCHEDULED | NOT_CANCELLED => assert_eq!(f, 1, "payload {p} ({st}) fired {f} times"),
            CANCELLED => assert_eq!(f, 0, "cancelled payload {p} fired"),
            FULL => full += 1,
            other => panic!("payload {p} left in state {other}"),
        }
        fired += usize::from(f == 1);
        cancelled += usize::from(st == CANCELLED);
    }
    let by_point: Vec<usize> = (1..=points)
        .map(|n| killed_at.iter().filter(|&&k| k == n as u64).count())
        .collect();
    eprintln!(
        "churn: {turns} turns, {victims} victims killed at points {by_point:?}, {fired} fired, \
         {cancelled} cancelled; {:?}",
        parent.stats()
    );
    assert_eq!(
        full, 0,
        "the set reported full {full} times with at most 60 of {CAPACITY} slots in use"
    );
    assert_eq!(room_without_recovery(&parent), CAPACITY, "a slot was lost");
}

//! A process killed before each store it makes to the mapping, one number after another (the
//! `test-hooks` store points): a scheduler-and-canceller, and an owner in the middle of a turn.
//! After each kill the parent takes over and checks that every payload fired or was cancelled
//! exactly once (the one operation the kill interrupted may go either way) and that no slot
//! leaked. One test in this binary, so nothing else runs while it forks.

#![cfg(not(loom))]

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use tickwheel_percpu::shm::{Advancer, Client, Config, Segment, hooks};

const CAPACITY: usize = 8;
/// Payloads 0..4 are the scheduler's; 10..15 the owner's.
const PAYLOADS: usize = 16;
const INTENT: u32 = 1;
const SCHEDULED: u32 = 2;
const CANCELLING: u32 = 3;
const CANCELLED: u32 = 4;
const NOT_CANCELLED: u32 = 5;

/// `state[p]` and `fired[p]` in anonymous shared memory, inherited by the forked child.
struct Log(&'static [AtomicU32]);

impl Log {
    fn new() -> Log {
        let len = 2 * PAYLOADS * 4;
        // SAFETY: a fresh anonymous shared mapping, zero-filled; only accessed as atomics, and
        // never unmapped (the test process ends soon after), hence 'static.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: `len` bytes of zeroed, page-aligned memory are valid AtomicU32s.
        Log(unsafe { std::slice::from_raw_parts(ptr.cast(), 2 * PAYLOADS) })
    }
    fn state(&self, p: u64) -> &AtomicU32 {
        &self.0[p as usize]
    }
    fn fired(&self, p: u64) -> &AtomicU32 {
        &self.0[PAYLOADS + p as usize]
    }
}

#[derive(Clone, Copy, Debug)]
enum Role {
    /// Schedules 0..4 and cancels 1 and 3.
    Scheduler,
    /// Owns the set and fires 10..15 (scheduled by the parent, 12 cancelled before the turn).
    Owner,
}

fn child(role: Role, segment: &Segment, log: &Log) {
    let me = segment.attach().unwrap();
    match role {
        Role::Scheduler => {
            let mut handles = Vec::new();
            for p in 0..4 {
                log.state(p).store(INTENT, SeqCst);
                let h = me.schedule_at(me.now() + 1 + p, p).unwrap();
                log.state(p).store(SCHEDULED, SeqCst);
                handles.push(h);
            }
            for p in [1, 3] {
                log.state(p).store(CANCELLING, SeqCst);
                let won = me.cancel(handles[p as usize]);
                log.state(p)
                    .store(if won { CANCELLED } else { NOT_CANCELLED }, SeqCst);
            }
        }
        Role::Owner => {
            let mut adv = me.advancer().unwrap();
            adv.advance_to(3);
            adv.turn(|p| {
                log.fired(p).fetch_add(1, SeqCst);
            });
            for p in adv.take_interrupted() {
                log.fired(p).fetch_add(1, SeqCst);
            }
        }
    }
}

/// Runs `role` in a child killed before its `n`-th store; true if it was killed (false: it
/// finished, so `n` is past its last store).
fn run(role: Role, n: u64, segment: &Segment, log: &Log) -> bool {
    // SAFETY: one test in this binary; the child only uses the set and the log, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        hooks::kill_before_store(n);
        let ok =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(role, segment, log)))
                .is_ok();
        // SAFETY: ends the child without the test harness's teardown.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: our own child; `status` is writable.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        return true;
    }
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "{role:?}: the child failed (n = {n})"
    );
    false
}

fn turn(adv: &mut Advancer, log: &Log, to: u64) {
    adv.advance_to(to);
    adv.turn(|p| {
        log.fired(p).fetch_add(1, SeqCst);
    });
}

/// Every slot can be scheduled again, then everything is cancelled.
fn assert_no_leak(client: &Client, adv: &mut Advancer, what: &str) {
    let t = client.now() + 1_000;
    let hs: Vec<_> = (0..CAPACITY)
        .map(|i| {
            client
                .schedule_at(t, 1000 + i as u64)
                .unwrap_or_else(|_| panic!("{what}: leak, only {i} of {CAPACITY} slots free"))
        })
        .collect();
    for h in hs {
        assert!(client.cancel(h), "{what}");
    }
    adv.turn(|p| panic!("{what}: cancelled {p} fired"));
}

/// Kills `role` before store 1, 2, ... until it runs to the end; returns how many store points
/// its run has.
fn every_store(role: Role) -> u64 {
    for n in 1.. {
        let what = format!("{role:?} killed before store {n}");
        let segment = Segment::anonymous(&Config::new(CAPACITY).manual_clock()).unwrap();
        let log = Log::new();
        let parent = segment.attach().unwrap();
        if let Role::Owner = role {
            let hs: Vec<_> = (10..15)
                .map(|p| parent.schedule_at(1 + p % 3, p).unwrap())
                .collect();
            assert!(parent.cancel(hs[2]));
        }
        let killed = run(role, n, &segment, &log);
        let mut adv = parent.advancer().expect("takeover after the child's death");
        adv.recover();
        for p in adv.take_interrupted() {
            // The dead owner won the fire CAS; its handler may not have logged the payload.
            if log.fired(p).load(SeqCst) == 0 {
                log.fired(p).fetch_add(1, SeqCst);
            }
        }
        turn(&mut adv, &log, 100);
        let mut in_doubt = 0;
        for p in 0..PAYLOADS as u64 {
            let fired = log.fired(p).load(SeqCst);
            let ok = match (role, p) {
                (Role::Owner, 12) => fired == 0,
                (Role::Owner, 10..15) => fired == 1,
                (Role::Owner, _) => fired == 0,
                (Role::Scheduler, _) => match log.state(p).load(SeqCst) {
                    0 | CANCELLED => fired == 0,
                    SCHEDULED | NOT_CANCELLED => fired == 1,
                    _ => {
                        in_doubt += 1;
                        fired <= 1
                    }
                },
            };
            assert!(ok, "{what}: payload {p} fired {fired} times");
        }
        assert!(in_doubt <= 1, "{what}: {in_doubt} payloads in doubt");
        assert_no_leak(&parent, &mut adv, &what);
        if !killed {
            return n - 1;
        }
    }
    unreachable!()
}

#[test]
fn a_kill_before_any_store_loses_nothing() {
    let scheduler = every_store(Role::Scheduler);
    let owner = every_store(Role::Owner);
    eprintln!("store points: scheduler {scheduler}, owner {owner}");
    // Far more than the named crash points: every claim, arm, mark, cancel, fire and free.
    assert!(scheduler >= 20 && owner >= 15, "{scheduler} / {owner}");
}

//! The small scenario the store-point tests (`shm_every_store`, `shm_stopped`) run in a forked
//! child, stopped or killed before one numbered store after another: a scheduler-and-canceller
//! (payloads 0..4) or an owner in the middle of a turn (payloads 10..15), with a log in anonymous
//! shared memory that says what the child did and what fired.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use tickwheel_shm::{Advancer, Client, Segment};

use super::{CANCELLED, CANCELLING, INTENT, NOT_CANCELLED, SCHEDULED};

/// Payloads 0..4 are the scheduler's; 10..15 the owner's.
pub const PAYLOADS: usize = 16;

/// `state[p]` and `fired[p]` in anonymous shared memory, inherited by forked children.
pub struct ForkLog(&'static [AtomicU32]);

impl ForkLog {
    pub fn new() -> ForkLog {
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
        ForkLog(unsafe { std::slice::from_raw_parts(ptr.cast(), 2 * PAYLOADS) })
    }
    pub fn state(&self, p: u64) -> &AtomicU32 {
        &self.0[p as usize]
    }
    pub fn fired(&self, p: u64) -> &AtomicU32 {
        &self.0[PAYLOADS + p as usize]
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Role {
    /// Schedules 0..4 and cancels 1 and 3.
    Scheduler,
    /// Owns the set and fires 10..15 (scheduled by the parent, 12 cancelled before the turn).
    Owner,
}

/// What the parent schedules before an owner child runs: 10..15 due at ticks 1..3, 12 cancelled.
pub fn prepare_owner_run(parent: &Client) {
    let hs: Vec<_> = (10..15)
        .map(|p| parent.schedule_at(1 + p % 3, p).unwrap())
        .collect();
    assert!(parent.cancel(hs[2]));
}

/// The child's part.
pub fn child(role: Role, segment: &Segment, log: &ForkLog) {
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

/// Forks a child that arms its store-point hook with `arm` and runs `role`, then `_exit`s (0 if
/// the role ran to its end).
pub fn fork_child(role: Role, segment: &Segment, log: &ForkLog, arm: impl FnOnce()) -> i32 {
    // SAFETY: one test in each binary that calls this; the child only uses the set and the log,
    // then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        arm();
        let ok =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(role, segment, log)))
                .is_ok();
        // SAFETY: ends the child without the test harness's teardown.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

/// `waitpid(pid, flags)`: the status.
pub fn wait(pid: i32, flags: i32) -> i32 {
    let mut status = 0;
    // SAFETY: our own child; `status` is writable.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, flags) }, pid);
    status
}

/// Logs what an advancer fires.
pub fn turn(adv: &mut Advancer, log: &ForkLog, to: u64) {
    adv.advance_to(to);
    adv.turn(|p| {
        log.fired(p).fetch_add(1, SeqCst);
    });
}

/// After the child is gone and the parent advances: takes what a dead owner left interrupted,
/// fires everything, and checks that each payload fired or was cancelled exactly once (the one
/// operation an interruption can leave in doubt may go either way).
pub fn assert_exactly_once(role: Role, adv: &mut Advancer, log: &ForkLog, what: &str) {
    for p in adv.take_interrupted() {
        // The dead owner won the fire CAS; its handler may not have logged the payload.
        if log.fired(p).load(SeqCst) == 0 {
            log.fired(p).fetch_add(1, SeqCst);
        }
    }
    turn(adv, log, 100);
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
}

/// Every slot can be scheduled again, then everything is cancelled.
pub fn assert_no_leak(client: &Client, adv: &mut Advancer, capacity: usize, what: &str) {
    let t = client.now() + 1_000;
    let hs: Vec<_> = (0..capacity)
        .map(|i| {
            client
                .schedule_at(t, 1000 + i as u64)
                .unwrap_or_else(|_| panic!("{what}: leak, only {i} of {capacity} slots free"))
        })
        .collect();
    for h in hs {
        assert!(client.cancel(h), "{what}");
    }
    adv.turn(|p| panic!("{what}: cancelled {p} fired"));
}

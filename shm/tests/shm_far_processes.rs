//! The owner's far set (`shm/src/index.rs`) against real processes: `fork`ed owners killed
//! (`SIGKILL`) and stopped (`SIGSTOP`, `SIGCONT`) about a spread look at more than 2^14 far
//! timers, and schedulers in other processes that cancel and re-arm far timers while the owner
//! turns about its horizon. Everything goes through the public API on a manual clock that only
//! the owner moves, so each turn's clock is known.
//!
//! The horizon is predicted from the outside: an owner that claims a set at clock 0 has its first
//! horizon at `SPAN` (4096), and an owner that turns at every tick of its lead, or at the horizon
//! itself, moves it `SPAN` on. With `WHOLE` (2^14) far timers or more the look at them is spread
//! over the `LEAD` (2048) ticks before the horizon; the owner's `next_expiry` says so (no later
//! than `H - LEAD` before the lead, no later than one `STEP` (32 ticks) on in it), and every
//! scenario checks that it does, so a change of those constants shows up here first.
//!
//! Every process logs to an anonymous shared mapping made before the forks: per payload its
//! deadline, what its scheduler did (about to schedule, scheduled, about to cancel, cancel won,
//! cancel lost), how many times it fired, in which turn and at which clock, and the number of
//! turns begun when its schedule returned; per turn its clock and whether it ran to its end.
//! Whoever owns the set logs its turns the same way, so the checker ([`check`]) holds every
//! payload to:
//!
//! 1. exactly once: scheduled (or its cancel lost) fires once, cancel won never fires, and a
//!    scheduler killed mid-operation leaves at most its one payload in doubt (fired at most once);
//!    a fire a dead owner began and `take_interrupted` handed over counts once;
//! 2. never early: every fire's clock is at or after its deadline (checked in the handler too);
//! 3. never late: the first turn that began after the schedule returned and ran to its end at a
//!    clock at or past the deadline (Coarse: past the deadline plus 511, the largest rounding of a
//!    filing within `SPAN + LEAD` of the wheel's clock) fired it, or an earlier one did (turns
//!    are numbered: a second turn at the same clock is too late). A far timer filed a horizon too
//!    late, or left far until a later look, fails this even when a last turn at the end of time
//!    would fire it;
//! 4. a cancel of a timer that fired or was cancelled returns false.
//!
//! Seeds are fixed. The processes' interleaving is not (two cores, real scheduling), but every
//! promise above holds for every interleaving. Tests take one lock, so only one of them forks at
//! a time; children never print and leave by `_exit`.

#![cfg(not(loom))]

mod shm_util;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst, fence};
use std::time::{Duration, Instant};

use shm_util::Rng;
use tickwheel_shm::{Advancer, Client, Config, Handle, Mode, Segment};

/// `shm/src/index.rs`: a look moves the horizon this far past its clock.
const SPAN: u64 = 1 << 12;
/// `shm/src/index.rs`: a look at a large far set begins this many ticks before the horizon.
const LEAD: u64 = SPAN / 2;
/// `shm/src/index.rs`: during a spread look the owner wakes at least this often.
const STEP: u64 = LEAD / 64;
/// `shm/src/index.rs`: a far set of this many bits or more is looked at over the lead.
const WHOLE: usize = 1 << 14;
/// The first horizon of an owner that claims the set at clock 0.
const H: u64 = SPAN;
/// Coarse: the most a timer filed within `SPAN + LEAD` of the wheel's clock is rounded up.
const COARSE_SLACK: u64 = 511;
/// Past every deadline any test schedules.
const THE_END: u64 = 4_000_000;

const CAPACITY: usize = 1 << 15;
/// Far timers the parent arms before the lead, and the owner child through its own client: with
/// both, more than `WHOLE` by a margin that the cancels and re-arms before the lead cannot eat.
const PARENT_FAR: u64 = WHOLE as u64 + 1_500;
const OWNER_FAR: u64 = 300;
/// Near timers the parent arms before the lead (due before the first horizon).
const PARENT_NEAR: u64 = 800;

/// Payload ranges: the owner child's own timers, the parent's, the scheduler children's.
const OWNER_P: Range<u64> = 1..2_000;
const PARENT_P: Range<u64> = 2_000..70_000;
const CHILD_P: [Range<u64>; 2] = [70_000..165_000, 165_000..260_000];

/// What a process did with a payload (`state`).
const INTENT: u64 = 1;
const SCHEDULED: u64 = 2;
const CANCELLING: u64 = 3;
const CANCELLED: u64 = 4;
const NOT_CANCELLED: u64 = 5;

// ---- the shared log ----

const CTL: usize = 32;
const TURNS_MAX: usize = 1 << 15;
const PAYLOADS: usize = 1 << 18;
const WORDS: usize = CTL + 2 * TURNS_MAX + 6 * PAYLOADS;

/// Control words.
/// Requests the parent made of a driven owner child (it turns towards `REQ_CLOCK`, `REQ_STEP`
/// ticks a turn, or one turn if 0), and the last one it finished.
const REQ: usize = 0;
const REQ_CLOCK: usize = 1;
const REQ_STEP: usize = 2;
const DONE: usize = 3;
/// Turns begun, by whichever process owned the set.
const TURNS: usize = 4;
/// Children that are set up; children told to stop.
const READY: usize = 5;
const QUIT: usize = 6;
/// A payload whose handler kills (`SIGKILL`) or stops (`SIGSTOP`) its own process, once.
const KILL_ON: usize = 7;
const STOP_ON: usize = 8;
/// Fires before the deadline, seen by the handler; the last such payload.
const EARLY: usize = 9;
const EARLY_P: usize = 10;
/// Broken promises a child saw (a schedule refused, a cancel of a done timer that won, a payload
/// out of range) and the last payload concerned.
const BAD: usize = 11;
const BAD_P: usize = 12;
/// The owner's `next_expiry` (`u64::MAX`: none) and `indexed` after its last turn.
const NEXT_EXPIRY: usize = 13;
const INDEXED: usize = 14;

/// Per-payload arrays.
const DEADLINE: usize = 0;
const STATE: usize = 1;
const FIRED: usize = 2;
const FIRED_AT: usize = 3;
/// Turns begun when the schedule returned: the turn of that number is the last that may apply it.
const APPLY: usize = 4;
/// The number of the turn that fired it.
const FIRED_TURN: usize = 5;

/// The log: words in anonymous shared memory, inherited by the forked children.
struct Log {
    ptr: *mut AtomicU64,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Sync for Log {}

impl Log {
    fn new() -> Log {
        // SAFETY: a fresh anonymous shared mapping, zero-filled, accessed only as atomics and
        // unmapped by `drop` only.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WORDS * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Log { ptr: ptr.cast() }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < WORDS);
        // SAFETY: in bounds of the live mapping; zeroed, page-aligned memory is valid AtomicU64s.
        unsafe { &*self.ptr.add(i) }
    }

    fn ctl(&self, c: usize) -> &AtomicU64 {
        self.word(c)
    }

    fn get(&self, c: usize) -> u64 {
        self.ctl(c).load(SeqCst)
    }

    fn turn_clock(&self, k: usize) -> &AtomicU64 {
        assert!(k < TURNS_MAX, "more than {TURNS_MAX} turns");
        self.word(CTL + k)
    }

    fn turn_done(&self, k: usize) -> &AtomicU64 {
        assert!(k < TURNS_MAX, "more than {TURNS_MAX} turns");
        self.word(CTL + TURNS_MAX + k)
    }

    fn p(&self, array: usize, p: u64) -> &AtomicU64 {
        assert!((p as usize) < PAYLOADS);
        self.word(CTL + 2 * TURNS_MAX + array * PAYLOADS + p as usize)
    }

    fn of(&self, array: usize, p: u64) -> u64 {
        self.p(array, p).load(SeqCst)
    }

    fn bad(&self, p: u64) {
        self.ctl(BAD_P).store(p, SeqCst);
        self.ctl(BAD).fetch_add(1, SeqCst);
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), WORDS * 8) };
    }
}

// ---- processes ----

/// Only one test forks at a time: a child of a multi-threaded process inherits only its forking
/// thread, so nothing else of this binary should be running then.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A forked child; killed and reaped when dropped unless it was reaped already.
struct Kid {
    pid: i32,
    gone: bool,
}

impl Kid {
    fn fork(body: impl FnOnce() -> i32) -> Kid {
        // SAFETY: the child runs `body` (the set, the log and its own allocations only), then
        // `_exit`s without the harness's teardown.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // The harness captures this thread's output in memory the child cannot hand back: a
            // child's panic goes to the real stderr instead.
            std::panic::set_hook(Box::new(|info| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "child {}: {info}", std::process::id());
            }));
            let code = catch_unwind(AssertUnwindSafe(body)).unwrap_or(101);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        Kid { pid, gone: false }
    }

    fn waitpid(&self, flags: i32) -> Option<i32> {
        let mut status = 0;
        // SAFETY: our own child; `status` is writable.
        let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        assert!(
            r == self.pid || (r == 0 && flags & libc::WNOHANG != 0),
            "waitpid: {r}"
        );
        (r == self.pid).then_some(status)
    }

    /// The exit status if the child has ended (a stop is not reported).
    fn poll(&mut self) -> Option<i32> {
        let status = self.waitpid(libc::WNOHANG)?;
        self.gone = true;
        Some(status)
    }

    fn signal(&self, sig: i32) {
        // SAFETY: our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.pid, sig) }, 0);
    }

    /// `SIGKILL`, then reaped.
    fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let status = self.waitpid(0).unwrap();
        self.gone = true;
        assert!(libc::WIFSIGNALED(status) || libc::WIFEXITED(status));
    }

    /// `SIGSTOP`, and waits until it is stopped.
    fn stop(&mut self) {
        self.signal(libc::SIGSTOP);
        self.wait_stopped(|| false);
    }

    /// Waits until the child is stopped (it may stop itself); panics if `missed` says it went
    /// past the point where it should have stopped.
    fn wait_stopped(&mut self, missed: impl Fn() -> bool) {
        let limit = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                !missed(),
                "the child went past the point where it was to stop"
            );
            if let Some(status) = self.waitpid(libc::WNOHANG | libc::WUNTRACED) {
                if libc::WIFSTOPPED(status) {
                    return;
                }
                self.gone = true;
                panic!("the child ended (status {status:#x}) instead of stopping");
            }
            assert!(Instant::now() < limit, "the child never stopped");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Waits for the child to end: its exit code, or `None` if a signal ended it.
    fn join(&mut self) -> Option<i32> {
        let status = self.waitpid(0).unwrap();
        self.gone = true;
        libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
    }

    /// Waits until `cond` holds; panics if the child ends first or a minute passes.
    fn wait_for(&mut self, what: &str, mut cond: impl FnMut() -> bool) {
        let limit = Instant::now() + Duration::from_secs(60);
        while !cond() {
            if let Some(status) = self.poll() {
                panic!("{what}: the child ended (status {status:#x})");
            }
            assert!(Instant::now() < limit, "{what}: timed out");
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if !self.gone {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let _ = self.waitpid(0);
        }
    }
}

// ---- scheduling and firing, logged ----

/// One process's timers: its payload range and the handles of those it has not seen end.
struct Book {
    next: u64,
    end: u64,
    live: Vec<(u64, Handle)>,
    /// Handles of timers this process cancelled (won or lost): a cancel of each must lose.
    done: Vec<Handle>,
}

impl Book {
    fn new(range: Range<u64>) -> Book {
        Book {
            next: range.start,
            end: range.end,
            live: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Schedules the next payload at `deadline`, logged before and after.
    fn schedule(&mut self, log: &Log, client: &Client, deadline: u64) -> Option<u64> {
        if self.next == self.end {
            return None;
        }
        let p = self.next;
        self.next += 1;
        log.p(DEADLINE, p).store(deadline, SeqCst);
        log.p(STATE, p).store(INTENT, SeqCst);
        match client.schedule_at(deadline, p) {
            Ok(h) => {
                // With the fence after the owner's count of a turn begun: if this load reads
                // `k`, the turn numbered `k` takes this schedule's mark.
                fence(SeqCst);
                log.p(APPLY, p).store(log.get(TURNS), SeqCst);
                log.p(STATE, p).store(SCHEDULED, SeqCst);
                self.live.push((p, h));
                Some(p)
            }
            Err(_) => {
                log.p(STATE, p).store(0, SeqCst);
                log.bad(p);
                None
            }
        }
    }

    /// Cancels live timer `i`: true if the cancel won.
    fn cancel_at(&mut self, log: &Log, client: &Client, i: usize) -> bool {
        let (p, h) = self.live.swap_remove(i);
        let fired = log.of(FIRED, p) > 0;
        log.p(STATE, p).store(CANCELLING, SeqCst);
        let won = client.cancel(h);
        log.p(STATE, p)
            .store(if won { CANCELLED } else { NOT_CANCELLED }, SeqCst);
        if won && fired {
            // It fired before the cancel began.
            log.bad(p);
        }
        self.done.push(h);
        won
    }

    /// A live timer whose deadline satisfies `pred`, if a few random draws find one.
    fn pick(&self, log: &Log, rng: &mut Rng, pred: impl Fn(u64, Handle) -> bool) -> Option<usize> {
        if self.live.is_empty() {
            return None;
        }
        (0..32).find_map(|_| {
            let i = rng.below(self.live.len() as u64) as usize;
            let (p, h) = self.live[i];
            pred(log.of(DEADLINE, p), h).then_some(i)
        })
    }

    /// Cancels a timer that ended already: must lose.
    fn cancel_done(&self, log: &Log, client: &Client, rng: &mut Rng) {
        if self.done.is_empty() {
            return;
        }
        let h = self.done[rng.below(self.done.len() as u64) as usize];
        if client.cancel(h) {
            log.bad(u64::MAX);
        }
    }
}

fn slot(h: Handle) -> u32 {
    (h.to_u128() >> 32) as u32
}

/// A deadline at or after the horizon `hz` (the clock `c`): at it, about the horizon the look
/// moves to (`hz + SPAN`), a `SPAN` past the clock, anywhere in the three spans after it, or up
/// to 10^6 ticks on.
fn far_deadline(rng: &mut Rng, c: u64, hz: u64) -> u64 {
    match rng.below(32) {
        0 | 1 => hz,
        2 => hz + 1,
        3 => hz + SPAN - 1,
        4 => hz + SPAN,
        5 => hz + SPAN + 1,
        6 => hz + 2 * SPAN,
        7 => c + 100_000 + rng.below(900_000),
        8 | 9 => hz + SPAN + rng.below(SPAN),
        10 => (c + SPAN).max(hz),
        _ => hz + rng.below(3 * SPAN),
    }
}

/// A deadline after the clock `c` and before the horizon `hz` (the clock's next tick if none).
fn near_deadline(rng: &mut Rng, c: u64, hz: u64) -> u64 {
    match rng.below(8) {
        0 => c + 1,
        1 => hz.saturating_sub(1).max(c + 1),
        _ => c + 1 + rng.below(hz.saturating_sub(c + 1).max(1)),
    }
}

/// `n` operations of a process other than the owner on its own timers, at clock `c` with the
/// owner's horizon at `hz`: cancels of far and near timers, re-arms of a slot near to far and
/// far to near (a cancel, then a schedule that takes the slot the cancel kept), new schedules
/// (some already due), and cancels that must lose.
fn churn(book: &mut Book, log: &Log, client: &Client, rng: &mut Rng, n: usize, c: u64, hz: u64) {
    for _ in 0..n {
        match rng.below(10) {
            0..=2 => {
                if let Some(i) = book.pick(log, rng, |d, _| d >= hz) {
                    book.cancel_at(log, client, i);
                }
            }
            3 => {
                if let Some(i) = book.pick(log, rng, |d, _| d < hz) {
                    book.cancel_at(log, client, i);
                }
            }
            4..=6 => {
                if let Some(i) = book.pick(log, rng, |_, _| true) {
                    let was_far = log.of(DEADLINE, book.live[i].0) >= hz;
                    if book.cancel_at(log, client, i) {
                        let d = if was_far && rng.below(3) != 0 {
                            near_deadline(rng, c, hz)
                        } else {
                            far_deadline(rng, c, hz)
                        };
                        book.schedule(log, client, d);
                    }
                }
            }
            7 => {
                let d = far_deadline(rng, c, hz);
                book.schedule(log, client, d);
            }
            8 => {
                let d = if rng.below(2) == 0 {
                    c.saturating_sub(rng.below(40)).max(1)
                } else {
                    near_deadline(rng, c, hz)
                };
                book.schedule(log, client, d);
            }
            _ => book.cancel_done(log, client, rng),
        }
    }
}

/// The handler of every owner: logs the fire of `p` in turn `k` at clock `now`, and kills or
/// stops this process if `p` is the payload named for it.
fn on_fire(log: &Log, p: u64, now: u64, k: u64) {
    if p == 0 || p as usize >= PAYLOADS {
        log.bad(p);
        return;
    }
    if now < log.of(DEADLINE, p) {
        log.ctl(EARLY_P).store(p, SeqCst);
        log.ctl(EARLY).fetch_add(1, SeqCst);
    }
    if log.of(FIRED, p) == 0 {
        log.p(FIRED_AT, p).store(now, SeqCst);
        log.p(FIRED_TURN, p).store(k, SeqCst);
    }
    log.p(FIRED, p).fetch_add(1, SeqCst);
    if log
        .ctl(KILL_ON)
        .compare_exchange(p, 0, SeqCst, SeqCst)
        .is_ok()
    {
        // SAFETY: signals this very process; nothing runs after.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    if log
        .ctl(STOP_ON)
        .compare_exchange(p, 0, SeqCst, SeqCst)
        .is_ok()
    {
        // SAFETY: signals this very process; it goes on from here once continued.
        unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
    }
}

/// One turn of the owner at clock `t` (or the clock, if later), logged.
fn logged_turn(log: &Log, adv: &mut Advancer, t: u64) -> u64 {
    let now = adv.client().now().max(t);
    assert!(adv.advance_to(now));
    let k = log.ctl(TURNS).fetch_add(1, SeqCst) as usize;
    log.turn_clock(k).store(now, SeqCst);
    // See `Book::schedule`.
    fence(SeqCst);
    adv.turn(|p| on_fire(log, p, now, k as u64));
    log.turn_done(k).store(1, SeqCst);
    log.ctl(NEXT_EXPIRY)
        .store(adv.next_expiry().unwrap_or(u64::MAX), SeqCst);
    log.ctl(INDEXED).store(adv.indexed() as u64, SeqCst);
    now
}

/// After a takeover: what the dead owner began firing counts as fired (its handler may have
/// logged it already), as if by the next turn.
fn take_interrupted(log: &Log, adv: &mut Advancer) -> usize {
    let now = adv.client().now();
    let next = log.get(TURNS);
    let payloads = adv.take_interrupted();
    for &p in &payloads {
        if now < log.of(DEADLINE, p) {
            log.ctl(EARLY_P).store(p, SeqCst);
            log.ctl(EARLY).fetch_add(1, SeqCst);
        }
        if log.of(FIRED, p) == 0 {
            log.p(FIRED_AT, p).store(now, SeqCst);
            log.p(FIRED_TURN, p).store(next, SeqCst);
            log.p(FIRED, p).fetch_add(1, SeqCst);
        }
    }
    payloads.len()
}

/// An owner child: claims the set (at clock 0, so its first horizon is `H`), arms `OWNER_FAR`
/// far timers through its own client, then turns as the parent requests until told to quit.
fn driven_owner(segment: &Segment, log: &Log, seed: u64) -> i32 {
    let me = segment.attach().unwrap();
    let mut adv = me.advancer().unwrap();
    let mut rng = Rng::new(seed ^ 0x0abc_d0e5);
    let mut book = Book::new(OWNER_P);
    for _ in 0..OWNER_FAR {
        book.schedule(log, &me, far_deadline(&mut rng, 0, H));
    }
    log.ctl(READY).fetch_add(1, SeqCst);
    let mut seen = 0;
    loop {
        let req = log.get(REQ);
        if req == seen {
            if log.get(QUIT) != 0 {
                return 0;
            }
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        let to = log.get(REQ_CLOCK);
        let step = log.get(REQ_STEP);
        let mut t = me.now();
        loop {
            t = if step == 0 { to } else { (t + step).min(to) };
            logged_turn(log, &mut adv, t);
            if t >= to {
                break;
            }
        }
        seen = req;
        log.ctl(DONE).store(req, SeqCst);
    }
}

/// Asks the owner child to turn towards `to` (`step` ticks a turn; 0: one turn); the request's
/// number.
fn request(log: &Log, to: u64, step: u64) -> u64 {
    log.ctl(REQ_CLOCK).store(to, SeqCst);
    log.ctl(REQ_STEP).store(step, SeqCst);
    log.ctl(REQ).fetch_add(1, SeqCst) + 1
}

/// Has the owner child turn towards `to` and waits until it has.
fn drive(log: &Log, owner: &mut Kid, to: u64, step: u64) {
    let r = request(log, to, step);
    owner.wait_for("the owner's turns", || log.get(DONE) == r);
}

/// Has the owner child turn at `to`, where a handler kills it: waits for its death.
fn drive_to_death(log: &Log, owner: &mut Kid, to: u64) {
    let r = request(log, to, 0);
    let limit = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = owner.poll() {
            break status;
        }
        assert!(
            log.get(DONE) != r,
            "the turn at {to} ended, its handler did not kill it"
        );
        assert!(Instant::now() < limit, "the owner never died");
        std::thread::sleep(Duration::from_micros(50));
    };
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "the owner ended with status {status:#x}"
    );
    assert_ne!(log.get(DONE), r);
}

/// The owner child's index after its last turn, which was at `t`, shows the look the module doc
/// says: before the lead, `WHOLE` entries and far bits or more and a `next_expiry` no later than
/// the lead's start; in it, a `next_expiry` no later than a `STEP` on.
fn assert_spread_look(log: &Log, t: u64, what: &str) {
    let ne = log.get(NEXT_EXPIRY);
    if t < H - LEAD {
        // The far set is large enough for a spread look (its cancelled timers' bits count until
        // a look clears them).
        let indexed = log.get(INDEXED);
        assert!(
            indexed >= WHOLE as u64,
            "{what}: only {indexed} entries and far bits at {t}"
        );
        assert!(
            ne <= H - LEAD,
            "{what}: next_expiry {ne} after a turn at {t}"
        );
    } else if t < H {
        assert!(
            ne <= t + STEP,
            "{what}: next_expiry {ne} after a turn at {t} (lead)"
        );
    }
}

// ---- the checker ----

#[derive(Debug, Default)]
struct Summary {
    fired: u64,
    /// Fired, due at or after the first horizon.
    far_fired: u64,
    cancelled: u64,
    in_doubt: u64,
    turns: usize,
}

/// Checks every payload of the log (see the module doc); `what` names the scenario.
fn check(log: &Log, mode: Mode, what: &str) -> Summary {
    let slack = if mode == Mode::Exact { 0 } else { COARSE_SLACK };
    let turns = log.get(TURNS) as usize;
    // Turns that ran to their end, in order, with their clocks (never going back).
    let done: Vec<(u64, u64)> = (0..turns)
        .filter(|&k| log.turn_done(k).load(SeqCst) == 1)
        .map(|k| (k as u64, log.turn_clock(k).load(SeqCst)))
        .collect();
    assert!(
        done.windows(2).all(|w| w[0].1 <= w[1].1),
        "{what}: turn clocks went back"
    );
    let mut errors = Vec::new();
    let mut s = Summary {
        turns,
        ..Summary::default()
    };
    for p in 1..PAYLOADS as u64 {
        let st = log.of(STATE, p);
        let fired = log.of(FIRED, p);
        let d = log.of(DEADLINE, p);
        let at = log.of(FIRED_AT, p);
        if fired > 0 && at < d {
            errors.push(format!("{p} fired early: due {d}, fired at {at}"));
        }
        match st {
            0 => {
                if fired != 0 {
                    errors.push(format!("{p}, never scheduled, fired {fired} times"));
                }
            }
            SCHEDULED | NOT_CANCELLED => {
                if fired != 1 {
                    errors.push(format!(
                        "{p} (due {d}, state {st}, applied by turn {}) fired {fired} times",
                        log.of(APPLY, p)
                    ));
                    continue;
                }
                s.fired += 1;
                if d >= H {
                    s.far_fired += 1;
                }
                // The first turn that began after the schedule, ran to its end, and reached the
                // deadline (plus the Coarse rounding) fired it, or an earlier one did.
                let k = log.of(APPLY, p);
                let from = done.partition_point(|&(j, _)| j < k);
                let need = d.saturating_add(slack);
                let rest = &done[from..];
                let fired_turn = log.of(FIRED_TURN, p);
                if let Some(&(j, c)) = rest.get(rest.partition_point(|&(_, c)| c < need))
                    && fired_turn > j
                {
                    errors.push(format!(
                        "{p} late: due {d}, applied by turn {k}, turn {j} at {c} passed it, \
                         fired in turn {fired_turn} at {at}"
                    ));
                }
            }
            CANCELLED => {
                s.cancelled += 1;
                if fired != 0 {
                    errors.push(format!("{p} (due {d}) fired after its cancel won"));
                }
            }
            INTENT | CANCELLING => {
                s.in_doubt += 1;
                if fired > 1 {
                    errors.push(format!("{p} (in doubt) fired {fired} times"));
                }
            }
            other => errors.push(format!("{p}: bad state {other}")),
        }
    }
    if log.get(EARLY) != 0 {
        errors.push(format!(
            "{} fires before the deadline seen by the handler, the last of {}",
            log.get(EARLY),
            log.get(EARLY_P)
        ));
    }
    if log.get(BAD) != 0 {
        errors.push(format!(
            "{} broken promises seen by a process (a schedule refused, a done timer's cancel \
             won, a payload out of range), the last about {:#x}",
            log.get(BAD),
            log.get(BAD_P)
        ));
    }
    assert!(
        errors.is_empty(),
        "{what}: {} errors, the first:\n{}",
        errors.len(),
        errors[..errors.len().min(12)].join("\n")
    );
    eprintln!(
        "{what}: {} fired ({} due at or past the first horizon), {} cancelled, {} in doubt, \
         {} turns",
        s.fired, s.far_fired, s.cancelled, s.in_doubt, s.turns
    );
    s
}

// ---- scenarios ----

/// A set whose owner child claimed it at clock 0 and armed its own far timers, and the parent's
/// far and near timers, applied by a first turn, some cancelled and re-armed before the lead.
struct Stage {
    what: String,
    mode: Mode,
    rng: Rng,
    log: Log,
    // Field order: the owner child is killed (if a check failed) before this client detaches.
    owner: Kid,
    client: Client,
    book: Book,
    /// The parent's far timer due at `H` in its highest slot: filed in the wheel by nothing but
    /// the turn that ends the look. Kept out of `book`, so no churn cancels it.
    last_far: u64,
    /// The parent's far timers due at `H` in the top quarter of the slots, alive before the lead:
    /// in words a half lead does not look at.
    unlooked: Vec<u64>,
}

impl Stage {
    fn new(what: String, mode: Mode, seed: u64) -> Stage {
        let mut rng = Rng::new(seed);
        let segment = Segment::anonymous(&Config::new(CAPACITY).mode(mode).manual_clock()).unwrap();
        let log = Log::new();
        let client = segment.attach().unwrap();
        let mut owner = Kid::fork(|| driven_owner(&segment, &log, seed));
        owner.wait_for("the owner's claim", || log.get(READY) == 1);
        let mut book = Book::new(PARENT_P);
        for _ in 0..PARENT_FAR {
            book.schedule(&log, &client, far_deadline(&mut rng, 0, H));
        }
        for _ in 0..PARENT_NEAR {
            book.schedule(&log, &client, 1 + rng.below(H - 1));
        }
        // Scheduled last, before any cancel frees a slot: the highest slot.
        let last_far = book.schedule(&log, &client, H).unwrap();
        let (_, top) = book.live.pop().unwrap();
        assert!(
            book.live.iter().all(|&(_, h)| slot(h) < slot(top)),
            "{what}: the last schedule did not get the highest slot"
        );
        let mut stage = Stage {
            what,
            mode,
            rng,
            log,
            owner,
            client,
            book,
            last_far,
            unlooked: Vec::new(),
        };
        // Applied, then some cancelled and re-armed (by this process, not the owner).
        stage.drive(100, 0);
        stage.churn(1_500, H);
        stage.drive(H - LEAD - 1, 64);
        stage.churn(1_000, H);
        stage.drive(H - LEAD - 1, 0);
        assert_spread_look(&stage.log, H - LEAD - 1, &stage.what);
        let top = slot(top);
        stage.unlooked = stage
            .book
            .live
            .iter()
            .filter(|&&(p, h)| slot(h) >= top / 4 * 3 && stage.log.of(DEADLINE, p) == H)
            .map(|&(p, _)| p)
            .collect();
        stage
    }

    fn now(&self) -> u64 {
        self.client.now()
    }

    fn drive(&mut self, to: u64, step: u64) {
        drive(&self.log, &mut self.owner, to, step);
    }

    fn churn(&mut self, n: usize, hz: u64) {
        let c = self.now();
        churn(
            &mut self.book,
            &self.log,
            &self.client,
            &mut self.rng,
            n,
            c,
            hz,
        );
    }

    /// Turns through the first half of the lead, `STEP` ticks a turn, with cancels and re-arms
    /// every few turns; checks that the look is spread.
    fn half_lead(&mut self) {
        let mut t = H - LEAD;
        while t <= H - LEAD / 2 {
            self.drive(t, 0);
            assert_spread_look(&self.log, t, &self.what);
            if (t / STEP).is_multiple_of(4) {
                self.churn(60, H);
            }
            t += STEP;
        }
    }

    /// Whoever owns the set now turns it, `step` ticks a turn, through three spans, with cancels
    /// and re-arms every 32 turns about its horizon, predicted at `hz0` and every `SPAN` on;
    /// then at the end of time; then everything is checked. `turn(log, owner child, t)` turns.
    /// First the far set is topped up to more than `WHOLE`, so that the next look is spread.
    fn finish_with(&mut self, hz0: u64, mut turn: impl FnMut(&Log, &mut Kid, u64)) -> Summary {
        let step = 16;
        let from = self.now();
        // Tops the far set up (many of the first far timers came due or were cancelled), so
        // that this owner's next look is spread as well while this process re-arms.
        let far = self
            .book
            .live
            .iter()
            .filter(|&&(p, _)| self.log.of(DEADLINE, p) >= hz0)
            .count();
        for _ in far..WHOLE + 1_000 {
            let d = far_deadline(&mut self.rng, from, hz0);
            self.book.schedule(&self.log, &self.client, d);
        }
        turn(&self.log, &mut self.owner, from);
        if from < hz0 - LEAD {
            let (ne, indexed) = (self.log.get(NEXT_EXPIRY), self.log.get(INDEXED));
            assert!(
                indexed >= WHOLE as u64 && ne <= hz0 - LEAD,
                "{}: {indexed} indexed, next_expiry {ne}, the horizon not at {hz0}?",
                self.what
            );
        }
        let mut t = from;
        let mut n = 0u64;
        while t < from + 3 * SPAN {
            t += step;
            turn(&self.log, &mut self.owner, t);
            n += 1;
            if n.is_multiple_of(32) {
                let hz = if t < hz0 {
                    hz0
                } else {
                    hz0 + ((t - hz0) / SPAN + 1) * SPAN
                };
                self.churn(80, hz);
            }
        }
        turn(&self.log, &mut self.owner, THE_END);
        turn(&self.log, &mut self.owner, THE_END + 1);
        check(&self.log, self.mode, &self.what)
    }

    /// A near timer due at `H`, made while a look is under way (so it goes to the wheel and
    /// fires in the first poll of the turn at `H`), named in control word `on`; kept out of
    /// `book`.
    fn near_trigger_at_h(&mut self, on: usize) -> u64 {
        // The turn at the start of the lead begins the look, moving the horizon to `H + SPAN`.
        self.drive(H - LEAD, 0);
        let trigger = self.book.schedule(&self.log, &self.client, H).unwrap();
        self.book.live.pop();
        self.log.ctl(on).store(trigger, SeqCst);
        self.drive(H - LEAD, 0);
        trigger
    }
}

/// Where the owner child dies.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// Killed by the parent between its turns, just before the lead.
    BeforeLead,
    /// Killed by the parent between its turns half-way through a spread look.
    MidLead,
    /// Kills itself in the turn at `H`, in the handler of a near timer due at `H`: the first
    /// poll, before the turn ends the look (half of the far set not looked at).
    FirstPollAtHorizon,
    /// Kills itself in the turn at `H`, in the handler of the far timer due at `H` in the
    /// highest slot: the second poll, after the look ended.
    SecondPollAtHorizon,
    /// Killed by the parent at a random instant while it turns through the lead by itself,
    /// `STEP / 2` ticks a turn.
    RandomInLead,
    /// Slept through the lead: killed at a random instant of its turn at `H`, which looks at
    /// the whole far set.
    RandomInWholeLook,
}

/// An owner with more than `WHOLE` far timers killed at `kill`; the parent takes over and turns
/// on, while it and the dead owner's timers are cancelled and re-armed before and after.
fn owner_killed(kill: KillAt, mode: Mode, seed: u64) {
    let _serial = serial();
    let what = format!("owner killed {kill:?} ({mode:?}, seed {seed:#x})");
    let mut s = Stage::new(what.clone(), mode, seed);
    match kill {
        KillAt::BeforeLead => s.owner.kill(),
        KillAt::MidLead => {
            s.half_lead();
            s.owner.kill();
        }
        KillAt::FirstPollAtHorizon => {
            let trigger = s.near_trigger_at_h(KILL_ON);
            s.half_lead();
            assert!(s.unlooked.len() >= 5, "{what}: {:?}", s.unlooked);
            drive_to_death(&s.log, &mut s.owner, H);
            assert_eq!(s.log.of(FIRED, trigger), 1);
            // The look had not ended: none of the far timers not yet looked at fired.
            for &p in &s.unlooked {
                assert_eq!(
                    s.log.of(FIRED, p),
                    0,
                    "{what}: {p}, due at H in a word not yet looked at, fired before the look"
                );
            }
        }
        KillAt::SecondPollAtHorizon => {
            s.log.ctl(KILL_ON).store(s.last_far, SeqCst);
            s.half_lead();
            assert_eq!(s.log.of(FIRED, s.last_far), 0);
            drive_to_death(&s.log, &mut s.owner, H);
            assert_eq!(s.log.of(FIRED, s.last_far), 1);
        }
        KillAt::RandomInLead => {
            // In the first three quarters of the lead, give or take the few turns the owner makes
            // (about 30 us each) between this process's looks at the clock.
            let at = H - LEAD + s.rng.below(LEAD / 4 * 3);
            let pause = s.rng.below(300);
            let r = request(&s.log, H + LEAD, STEP / 2);
            loop {
                let k = s.log.get(TURNS) as usize;
                if s.log.turn_clock(k - 1).load(SeqCst) >= at || s.log.get(DONE) == r {
                    break;
                }
                assert!(s.owner.poll().is_none(), "{what}: the owner died");
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_micros(pause));
            s.owner.kill();
            let k = s.log.get(TURNS) as usize - 1;
            eprintln!(
                "{what}: killed {pause} us after a turn at {at} or later, in turn {k} at {} \
                 ({})",
                s.log.turn_clock(k).load(SeqCst),
                if s.log.turn_done(k).load(SeqCst) == 1 {
                    "ended"
                } else {
                    "not ended"
                }
            );
        }
        KillAt::RandomInWholeLook => {
            // The turn takes a few ms in a debug build, most of them the look.
            let pause = s.rng.below(3_000);
            let before = s.log.get(TURNS);
            let log = &s.log;
            request(log, H, 0);
            s.owner
                .wait_for("the turn at H", || log.get(TURNS) > before);
            std::thread::sleep(Duration::from_micros(pause));
            s.owner.kill();
            let k = before as usize;
            eprintln!(
                "{what}: killed {pause} us into the turn at H, which {}",
                if s.log.turn_done(k).load(SeqCst) == 1 {
                    "had ended"
                } else {
                    "had not ended"
                }
            );
        }
    }
    // Nobody owns the set: cancels and re-arms go on.
    let c = s.now();
    let hz = if c < H { H } else { H + SPAN };
    s.churn(300, hz);
    let mut adv = s
        .client
        .advancer()
        .unwrap_or_else(|e| panic!("{what}: no takeover: {e}"));
    let interrupted = take_interrupted(&s.log, &mut adv);
    assert_eq!(s.client.stats().takeovers, 1, "{what}");
    if matches!(
        kill,
        KillAt::FirstPollAtHorizon | KillAt::SecondPollAtHorizon
    ) {
        assert_eq!(interrupted, 1, "{what}: the trigger's fire was cut short");
    }
    let hz0 = s.now() + SPAN;
    let sum = s.finish_with(hz0, |log, _, t| {
        logged_turn(log, &mut adv, t);
    });
    assert_eq!(sum.in_doubt, 0, "{what}");
    assert!(sum.far_fired > 5_000, "{what}: {sum:?}");
}

#[test]
fn owner_killed_before_the_lead() {
    owner_killed(KillAt::BeforeLead, Mode::Coarse, 0x5eed_0100);
}

#[test]
fn owner_killed_half_way_through_a_spread_look() {
    owner_killed(KillAt::MidLead, Mode::Exact, 0x5eed_0200);
    owner_killed(KillAt::MidLead, Mode::Coarse, 0x5eed_0300);
}

#[test]
fn owner_killed_in_the_turn_at_the_horizon_before_its_look_ends() {
    owner_killed(KillAt::FirstPollAtHorizon, Mode::Exact, 0x5eed_0400);
}

#[test]
fn owner_killed_in_the_turn_at_the_horizon_after_its_look() {
    owner_killed(KillAt::SecondPollAtHorizon, Mode::Coarse, 0x5eed_0500);
}

#[test]
fn owner_killed_at_random_instants_of_a_spread_look() {
    owner_killed(KillAt::RandomInLead, Mode::Exact, 0x5eed_0600);
    owner_killed(KillAt::RandomInLead, Mode::Coarse, 0x5eed_0700);
}

#[test]
fn owner_killed_during_a_whole_look_at_the_horizon() {
    owner_killed(KillAt::RandomInWholeLook, Mode::Exact, 0x5eed_0800);
    owner_killed(KillAt::RandomInWholeLook, Mode::Exact, 0x5eed_0900);
}

/// Where the owner child is stopped.
#[derive(Clone, Copy, Debug)]
enum StopAt {
    /// Stopped by the parent between its turns, just before the lead (no look begun).
    BeforeLead,
    /// Stopped by the parent between its turns half-way through a spread look.
    MidLead,
    /// Stops itself in the turn at `H`, in the handler of a near timer due at `H`: before the
    /// turn ends the look.
    FirstPollAtHorizon,
    /// Stops itself in the turn at `H`, in the handler of the far timer due at `H` in the
    /// highest slot: after the look ended.
    SecondPollAtHorizon,
}

/// An owner with more than `WHOLE` far timers stopped at `stop` while this process cancels,
/// re-arms (some to deadlines the clock will have passed when it goes on) and schedules; then
/// continued, with its next turn at `cont` (for a stop between turns), and turned on.
fn owner_stopped(stop: StopAt, cont: u64, mode: Mode, seed: u64) {
    let _serial = serial();
    let what = format!("owner stopped {stop:?}, continued at {cont} ({mode:?}, seed {seed:#x})");
    let mut s = Stage::new(what.clone(), mode, seed);
    let mut r = None;
    match stop {
        StopAt::BeforeLead => s.owner.stop(),
        StopAt::MidLead => {
            s.half_lead();
            s.owner.stop();
        }
        StopAt::FirstPollAtHorizon => {
            s.near_trigger_at_h(STOP_ON);
            s.half_lead();
            let req = request(&s.log, H, 0);
            let log = &s.log;
            s.owner.wait_stopped(|| log.get(DONE) == req);
            r = Some(req);
            // The look had not ended: none of the far timers not yet looked at fired.
            assert!(s.unlooked.len() >= 5, "{what}: {:?}", s.unlooked);
            for &p in &s.unlooked {
                assert_eq!(s.log.of(FIRED, p), 0, "{what}: {p} fired before the look");
            }
        }
        StopAt::SecondPollAtHorizon => {
            s.log.ctl(STOP_ON).store(s.last_far, SeqCst);
            s.half_lead();
            let req = request(&s.log, H, 0);
            let log = &s.log;
            s.owner.wait_stopped(|| log.get(DONE) == req);
            r = Some(req);
            assert_eq!(s.log.of(FIRED, s.last_far), 1);
        }
    }
    let fired_then: u64 = (1..PAYLOADS as u64).map(|p| s.log.of(FIRED, p)).sum();
    // While it is stopped: cancels and re-arms about the horizon, and re-arms and schedules due
    // by the time it goes on (far ones among them: due at or after the horizon, yet overdue).
    let c = s.now();
    s.churn(600, H);
    for i in 0..400u64 {
        let d = if cont > c {
            c + 1 + s.rng.below(cont - c)
        } else {
            c.saturating_sub(s.rng.below(50))
        };
        if i.is_multiple_of(4) {
            s.book.schedule(&s.log, &s.client, d);
        } else if let Some(i) = s.book.pick(&s.log, &mut s.rng, |_, _| true)
            && s.book.cancel_at(&s.log, &s.client, i)
        {
            s.book.schedule(&s.log, &s.client, d);
        }
    }
    let fired_now: u64 = (1..PAYLOADS as u64).map(|p| s.log.of(FIRED, p)).sum();
    assert_eq!(
        fired_then, fired_now,
        "{what}: fires while the owner was stopped"
    );
    let r = r.unwrap_or_else(|| request(&s.log, cont, 0));
    s.owner.signal(libc::SIGCONT);
    let log = &s.log;
    s.owner
        .wait_for("the owner's turn once continued", || log.get(DONE) == r);
    // Where the owner's horizon is now: the look it began in the lead moves it to `H + SPAN`,
    // unless the clock passed that; a look begun after the lead moves it a `SPAN` past its clock.
    let hz0 = match stop {
        StopAt::BeforeLead => cont + SPAN,
        StopAt::MidLead if cont < H + SPAN => H + SPAN,
        StopAt::MidLead => cont + SPAN,
        _ => H + SPAN,
    };
    let sum = s.finish_with(hz0, |log, owner, t| drive(log, owner, t, 0));
    s.log.ctl(QUIT).store(1, SeqCst);
    assert_eq!(s.owner.join(), Some(0), "{what}: the owner child failed");
    let st = s.client.stats();
    assert_eq!(st.scheduled, st.fired + st.cancelled, "{what}: {st:?}");
    assert_eq!((st.takeovers, st.interrupted), (0, 0), "{what}: {st:?}");
    assert_eq!(sum.in_doubt, 0, "{what}");
    assert!(sum.far_fired > 5_000, "{what}: {sum:?}");
}

#[test]
fn owner_stopped_through_the_lead_continued_past_the_horizon() {
    owner_stopped(StopAt::BeforeLead, H, Mode::Exact, 0x5eed_0a00);
    owner_stopped(StopAt::BeforeLead, H + SPAN + 5, Mode::Coarse, 0x5eed_0b00);
}

#[test]
fn owner_stopped_half_way_through_a_spread_look_continued_past_the_horizon() {
    owner_stopped(StopAt::MidLead, H + 1, Mode::Exact, 0x5eed_0c00);
    owner_stopped(StopAt::MidLead, H + SPAN - 1, Mode::Exact, 0x5eed_0d00);
    owner_stopped(StopAt::MidLead, H + SPAN, Mode::Exact, 0x5eed_0e00);
    owner_stopped(StopAt::MidLead, H + 3 * SPAN + 7, Mode::Coarse, 0x5eed_0f00);
}

#[test]
fn owner_stopped_in_the_turn_at_the_horizon() {
    owner_stopped(StopAt::FirstPollAtHorizon, H, Mode::Exact, 0x5eed_1000);
    owner_stopped(StopAt::SecondPollAtHorizon, H, Mode::Exact, 0x5eed_1100);
}

/// Far timers each scheduler child arms before the owner's first turn.
const CHILD_FAR: u64 = 12_000;
/// Operations a scheduler child makes at most per tick of the owner's clock: paced by the clock,
/// not by time, so that a slow owner never finds the set full of near timers it has yet to fire.
const OPS_PER_TICK: u64 = 3;

/// A scheduler child: arms `CHILD_FAR` far timers and some near ones, then until told to quit
/// (`OPS_PER_TICK` operations a tick of the clock at most) cancels and re-arms them about the
/// owner's horizon, predicted from the clock (the owner claimed the set at 0 and turns at every
/// tick): far to far and far to near, near to far (each a cancel, then a schedule that takes the
/// slot the cancel kept), new far and near timers (some already due), cancels of far and near
/// timers, and cancels that must lose. Returns 0.
fn scheduler(segment: &Segment, log: &Log, c: usize, seed: u64) -> i32 {
    let me = segment.attach().unwrap();
    let mut rng = Rng::new(seed.wrapping_add(c as u64 * 0x9e37_79b9));
    let mut book = Book::new(CHILD_P[c].clone());
    for _ in 0..CHILD_FAR {
        let d = match rng.below(4) {
            0 => far_deadline(&mut rng, 0, H),
            _ => H + rng.below(6 * SPAN),
        };
        book.schedule(log, &me, d);
    }
    for _ in 0..300 {
        book.schedule(log, &me, 1 + rng.below(H - 1));
    }
    log.ctl(READY).fetch_add(1, SeqCst);
    let mut ops = 0u64;
    while log.get(QUIT) == 0 {
        let now = me.now();
        if ops >= (now + 1) * OPS_PER_TICK {
            std::thread::sleep(Duration::from_micros(30));
            continue;
        }
        ops += 1;
        let hz = (now / SPAN + 1) * SPAN;
        let far = |d: u64, _| d >= hz;
        let near = |d: u64, _| d < hz;
        match rng.below(20) {
            0..=5 => {
                if let Some(i) = book.pick(log, &mut rng, far)
                    && book.cancel_at(log, &me, i)
                {
                    book.schedule(log, &me, far_deadline(&mut rng, now, hz));
                }
            }
            6..=8 => {
                if let Some(i) = book.pick(log, &mut rng, far)
                    && book.cancel_at(log, &me, i)
                {
                    book.schedule(log, &me, near_deadline(&mut rng, now, hz));
                }
            }
            9..=11 => {
                if let Some(i) = book.pick(log, &mut rng, near)
                    && book.cancel_at(log, &me, i)
                {
                    book.schedule(log, &me, far_deadline(&mut rng, now, hz));
                }
            }
            12 | 13 => {
                if let Some(i) = book.pick(log, &mut rng, far) {
                    book.cancel_at(log, &me, i);
                }
            }
            14 | 15 => {
                book.schedule(log, &me, far_deadline(&mut rng, now, hz));
            }
            16 | 17 => {
                let d = if rng.below(2) == 0 {
                    now.saturating_sub(rng.below(40)).max(1)
                } else {
                    near_deadline(&mut rng, now, hz)
                };
                book.schedule(log, &me, d);
            }
            18 => {
                if let Some(i) = book.pick(log, &mut rng, near) {
                    book.cancel_at(log, &me, i);
                }
            }
            _ => book.cancel_done(log, &me, &mut rng),
        }
    }
    0
}

#[test]
fn schedulers_cancel_and_re_arm_far_timers_while_the_owner_turns_about_the_horizon() {
    schedulers_race_the_owner(Mode::Exact, 0x5eed_1200);
    schedulers_race_the_owner(Mode::Coarse, 0x5eed_1300);
}

/// Two scheduler children (see [`scheduler`]) while this process owns the set and turns at every
/// tick through three horizons and a half; one of them is killed half-way through the second
/// lead.
fn schedulers_race_the_owner(mode: Mode, seed: u64) {
    let _serial = serial();
    let what = format!("racing schedulers ({mode:?}, seed {seed:#x})");
    let segment = Segment::anonymous(&Config::new(CAPACITY).mode(mode).manual_clock()).unwrap();
    let log = Log::new();
    let client = segment.attach().unwrap();
    // Claimed at clock 0 and turned at every tick: its horizons are the multiples of `SPAN`.
    let mut adv = client.advancer().unwrap();
    let mut kids: Vec<Kid> = (0..2)
        .map(|c| Kid::fork(|| scheduler(&segment, &log, c, seed)))
        .collect();
    for kid in &mut kids {
        kid.wait_for("the schedulers' first timers", || log.get(READY) == 2);
    }
    let end = 3 * SPAN + LEAD / 2;
    // Half-way through the second lead, one scheduler is killed in whatever it is doing; the
    // owner's look for dead processes recovers what it held, while its look is under way.
    let kill_at = 2 * SPAN - LEAD / 2;
    for t in 1..=end {
        logged_turn(&log, &mut adv, t);
        if t == H - LEAD - 1 {
            assert!(adv.indexed() >= WHOLE, "{what}: {} indexed", adv.indexed());
            assert!(adv.next_expiry().is_some_and(|ne| ne <= H - LEAD));
        }
        if t == kill_at {
            kids[1].kill();
        }
        if t.is_multiple_of(512) {
            for kid in kids.iter_mut().filter(|k| !k.gone) {
                assert!(kid.poll().is_none(), "{what}: a scheduler ended at {t}");
            }
        }
        std::thread::sleep(Duration::from_micros(10));
    }
    log.ctl(QUIT).store(1, SeqCst);
    assert_eq!(kids[0].join(), Some(0), "{what}: a scheduler failed");
    adv.recover();
    let mut t = end;
    while t < end + 4 * SPAN {
        t += 64;
        logged_turn(&log, &mut adv, t);
    }
    logged_turn(&log, &mut adv, THE_END);
    logged_turn(&log, &mut adv, THE_END + 1);
    let sum = check(&log, mode, &what);
    assert!(sum.in_doubt <= 1, "{what}: {sum:?}");
    assert!(
        sum.far_fired > 10_000 && sum.cancelled > 5_000,
        "{what}: {sum:?}"
    );
}

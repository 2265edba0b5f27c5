//! A timer's record, attacked from the public API: who owns the payload at every step of a
//! timer's life, and whether the deadline the base files it by is the one the last write left.
//!
//! Every payload here counts its own drops (and a handler counts what it was handed), so each
//! test can say, after each phase and after everything is dropped, that every payload was handed
//! to a handler, handed back in an error, or dropped, exactly once: never twice, never leaked,
//! never dropped while its timer is still pending. The states a timer passes through are built
//! one by one (local and remote schedule, cancel before and after the owner filed it, re-arm
//! earlier and later, fire, a handler working on its own base, refusals, a panicking handler, a
//! base dropped with timers pending in each state), then at random on real threads against a
//! naive model in both modes, then at scale with later-moving deadlines and big clock jumps, and
//! at the ends of time (deadlines in the past, past the wheel's top level, at `Duration::MAX`).
//!
//! Lateness in Coarse mode: a timer placed `d` ticks ahead lands on the level that holds `d`
//! (level `n` holds delays below `63 * 8^n`, 9 levels, beyond them the overflow list at the top
//! level's granularity) rounded up to that level's granularity `8^n`, so it fires at most
//! `8^n - 1` ticks after its deadline. A re-arm to a later deadline only stores it (the entry is
//! placed again when its old place comes due), and one to an earlier deadline may leave the entry
//! where an earlier filing put it, so the models here allow a timer the slack of the longest delay
//! it was armed with since it was scheduled (measured from the clock reading before each write,
//! which the wheel's clock is never ahead of), not only the slack of its last write.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tickwheel_percpu::{
    Base, BaseStats, ClockSource, Config, Handle, ManualClock, Mode, Remote, ScheduleError, bases,
};

mod support;
use support::Rng;

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);
const MODES: [Mode; 2] = [Mode::Exact, Mode::Coarse];

// ---- payloads that count their drops ----

/// Per payload id: how often it was dropped, handed to a handler, and cancelled by a winning
/// cancel. Ids are handed out in order by [`Ledger::make`].
struct Ledger {
    drops: Vec<AtomicU32>,
    fired: Vec<AtomicU32>,
    won: Vec<AtomicU32>,
    next: AtomicUsize,
}

/// A payload: its id, and the ledger its drop is counted in. The ledger is leaked rather than
/// shared by `Arc`, so that a payload dropped twice shows as a count of 2, not as a freed ledger.
struct P {
    id: usize,
    ledger: &'static Ledger,
}

impl Drop for P {
    fn drop(&mut self) {
        // Relaxed: the counts are read on the dropping thread or after it is joined.
        self.ledger.drops[self.id].fetch_add(1, Ordering::Relaxed);
    }
}

fn counters(n: usize) -> Vec<AtomicU32> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

impl Ledger {
    fn new(ids: usize) -> &'static Self {
        Box::leak(Box::new(Self {
            drops: counters(ids),
            fired: counters(ids),
            won: counters(ids),
            next: AtomicUsize::new(0),
        }))
    }

    fn make(&'static self) -> P {
        // Relaxed: only uniqueness matters.
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        assert!(id < self.drops.len(), "ledger too small");
        P { id, ledger: self }
    }

    /// What a handler does with a payload: counts it as handed over, then drops it.
    fn deliver(&self, p: P) -> usize {
        // Relaxed: as in `drop`.
        self.fired[p.id].fetch_add(1, Ordering::Relaxed);
        p.id
    }

    fn won(&self, id: usize) {
        // Relaxed: as in `drop`.
        self.won[id].fetch_add(1, Ordering::Relaxed);
    }

    /// (drops, deliveries) of `id`.
    fn seen(&self, id: usize) -> (u32, u32) {
        // Relaxed: as in `drop`.
        (
            self.drops[id].load(Ordering::Relaxed),
            self.fired[id].load(Ordering::Relaxed),
        )
    }

    /// `id` is pending (or held by the caller): not dropped, not delivered.
    fn alive(&self, id: usize, what: &str) {
        assert_eq!(self.seen(id), (0, 0), "{what}: payload {id} (drops, fires)");
    }

    /// `id` was dropped once, never delivered.
    fn dropped(&self, id: usize, what: &str) {
        assert_eq!(self.seen(id), (1, 0), "{what}: payload {id} (drops, fires)");
    }

    /// `id` was delivered once, and dropped once (by the handler).
    fn delivered(&self, id: usize, what: &str) {
        assert_eq!(self.seen(id), (1, 1), "{what}: payload {id} (drops, fires)");
    }

    /// Every payload made so far was dropped exactly once and delivered at most once, and none
    /// was both delivered and cancelled by a cancel that returned true.
    fn all_once(&self, what: &str) {
        // Relaxed: as in `drop`.
        for id in 0..self.next.load(Ordering::Relaxed) {
            let (drops, fires) = self.seen(id);
            let won = self.won[id].load(Ordering::Relaxed);
            assert!(
                drops == 1 && fires + won <= 1,
                "{what}: payload {id} dropped {drops} times, fired {fires}, cancelled {won}"
            );
        }
    }
}

/// Checks a refused schedule: the error is the expected kind and hands back the very payload,
/// still alive; then drops it.
fn handed_back(
    ledger: &Ledger,
    e: ScheduleError<P>,
    id: usize,
    kind: fn(&ScheduleError<P>) -> bool,
) {
    assert!(kind(&e), "payload {id} refused with {e:?}");
    let p = e.into_inner();
    assert_eq!(p.id, id, "the refused payload comes back");
    ledger.alive(id, "handed back");
    drop(p);
    ledger.dropped(id, "handed back, then dropped by its owner");
}

// ---- small tools ----

fn manual(mode: Mode, clock: &ManualClock) -> Config {
    Config::default()
        .mode(mode)
        .clock(ClockSource::Manual(clock.clone()))
}

fn tick_of(clock: &ManualClock) -> u64 {
    clock.elapsed().as_millis() as u64
}

/// Runs `f` on a thread of its own and returns what it returns.
fn on_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// A local schedule of a fresh payload; (id, handle).
fn local(base: &mut Base<P>, ledger: &'static Ledger, delay: Duration) -> (usize, Handle) {
    let p = ledger.make();
    let id = p.id;
    let h = base
        .schedule_after(delay, p)
        .unwrap_or_else(|e| panic!("local schedule of {id}: {e:?}"));
    (id, h)
}

/// A schedule of a fresh payload through `remote`; (id, handle).
fn remote_at(
    remote: &Remote<P>,
    base: usize,
    ledger: &'static Ledger,
    delay: Duration,
) -> (usize, Handle) {
    let p = ledger.make();
    let id = p.id;
    let h = remote
        .schedule_after(base, delay, p)
        .unwrap_or_else(|e| panic!("remote schedule of {id}: {e:?}"));
    (id, h)
}

/// One turn; the ids it handed over, sorted.
fn fire(base: &mut Base<P>, ledger: &Ledger) -> Vec<usize> {
    let mut got = Vec::new();
    base.turn(|p| got.push(ledger.deliver(p)));
    got.sort_unstable();
    got
}

/// Moves the clock one tick at a time up to `end` (a tick), turning at each, and checks that
/// exactly the `(id, deadline tick)` pairs of `expect` fire, each at its deadline tick, and that
/// their payloads were handed over and dropped once.
fn run_until(
    base: &mut Base<P>,
    clock: &ManualClock,
    ledger: &Ledger,
    end: u64,
    expect: &[(usize, u64)],
) {
    let mut left: Vec<(usize, u64)> = expect.to_vec();
    while tick_of(clock) < end {
        clock.advance(MS);
        let now = tick_of(clock);
        for id in fire(base, ledger) {
            let k = left
                .iter()
                .position(|&(i, _)| i == id)
                .unwrap_or_else(|| panic!("payload {id} fired at tick {now}, not expected"));
            let (_, due) = left.swap_remove(k);
            assert_eq!(now, due, "payload {id} fired at tick {now}, deadline {due}");
        }
    }
    assert!(left.is_empty(), "never fired by tick {end}: {left:?}");
    for &(id, _) in expect {
        ledger.delivered(id, "fired on its tick");
    }
}

/// `after - before`, field by field, for the counters the phases check.
fn delta(after: BaseStats, before: BaseStats) -> [u64; 4] {
    [
        after.scheduled - before.scheduled,
        after.fired - before.fired,
        after.cancelled_local - before.cancelled_local,
        after.cancelled_remote - before.cancelled_remote,
    ]
}

/// A base with nothing left: no timer, every slot free, the counters balanced. Returns them.
fn quiet(base: &Base<P>, what: &str) -> BaseStats {
    assert!(base.is_empty(), "{what}: {} timers left", base.len());
    assert_eq!(
        base.free_slots(),
        base.slot_capacity(),
        "{what}: slots leaked"
    );
    let s = base.stats();
    assert_eq!(
        s.scheduled,
        s.fired + s.cancelled_local + s.cancelled_remote,
        "{what}: {s:?}"
    );
    s
}

/// How late a timer placed `delay` ticks ahead may fire (see the module doc).
fn slack(mode: Mode, delay: u64) -> u64 {
    if mode == Mode::Exact {
        return 0;
    }
    let mut level = 0;
    while level < 8 && delay >= 63u64 << (3 * level) {
        level += 1;
    }
    (1u64 << (3 * level)) - 1
}

// ---- 1. every path a payload can take, one by one ----

/// Would catch: a payload dropped twice or never (a cell read out and also dropped with the
/// table, a cell overwritten on reuse without a drop, a wheel entry and a cell both owning it), a
/// payload dropped while its timer is still pending (a cancel or re-arm acting on the wrong
/// arming of a reused slot), a cancelled payload kept until its deadline or until the base goes, a
/// refused schedule that keeps or drops its value, a firing handle that can still cancel or re-arm
/// itself, a remote or earlier re-arm lost in either mode, and the counters' attribution of
/// cancels to the owner or to other threads (the record of who retired a slot).
#[test]
fn every_payload_is_handed_over_or_dropped_exactly_once() {
    for mode in MODES {
        exactly_once(mode);
    }
}

fn exactly_once(mode: Mode) {
    let clock = ManualClock::new();
    // A small table and reserve, so that slots are reused in every phase.
    let config = manual(mode, &clock).wheel_capacity(64).reserve_capacity(8);
    let (mut all, remote) = bases::<P>(2, config).unwrap();
    let mut b1 = all.pop().unwrap();
    let mut b0 = all.pop().unwrap();
    let ledger = Ledger::new(1024);
    let l = ledger;

    // Local: schedule, cancel, re-arm earlier, later, later then earlier, into the past, one
    // tick later, later then cancelled, and a cancel through another base of the set.
    let start = b0.stats();
    let (a0, h0) = local(&mut b0, l, 5 * MS);
    let (a1, h1) = local(&mut b0, l, 5 * MS);
    assert!(b0.cancel(h1));
    assert!(
        !b0.cancel(h1) && !b0.reset_after(h1, MS),
        "a cancelled handle is stale"
    );
    let (a2, h2) = local(&mut b0, l, 50 * MS);
    assert!(b0.reset_after(h2, 3 * MS));
    let (a3, h3) = local(&mut b0, l, 3 * MS);
    assert!(b0.reset_after(h3, 40 * MS));
    let (a4, h4) = local(&mut b0, l, 10 * MS);
    assert!(b0.reset_after(h4, 100 * MS) && b0.reset_after(h4, 8 * MS));
    let (a5, h5) = local(&mut b0, l, 20 * MS);
    assert!(b0.reset_after(h5, Duration::ZERO));
    let (a6, h6) = local(&mut b0, l, 5 * MS);
    let (a7, h7) = local(&mut b0, l, 5 * MS);
    assert!(b0.reset_after(h7, 6 * MS), "pushed one tick later");
    let (a8, h8) = local(&mut b0, l, 5 * MS);
    assert!(
        b0.reset_after(h8, 30 * MS) && b0.cancel(h8),
        "pushed later, then cancelled"
    );
    assert!(
        b1.cancel(h6),
        "a cancel through another base goes the remote way"
    );
    for id in [a0, a2, a3, a4, a5] {
        ledger.alive(id, "local, pending");
    }
    assert_eq!(fire(&mut b0, l), [a5]);
    ledger.dropped(a1, "local cancel, after a turn");
    ledger.dropped(a8, "pushed later, then cancelled, after a turn");
    ledger.dropped(a6, "cancel from another base, after the owner's turn");
    run_until(
        &mut b0,
        &clock,
        l,
        40,
        &[(a2, 3), (a0, 5), (a7, 6), (a4, 8), (a3, 40)],
    );
    ledger.delivered(a5, "re-armed into the past");
    assert_eq!(
        delta(b0.stats(), start),
        [9, 6, 2, 1],
        "local phase counters"
    );

    // Stale handles on reused slots (the table has 64): the handles of the timers above touch
    // nothing, on any path, and the new timers fire as they were set.
    let t = tick_of(&clock);
    let fresh: Vec<(usize, Handle)> = (0..9).map(|_| local(&mut b0, l, 2 * MS)).collect();
    let stale = [h0, h1, h2, h3, h4, h5, h6, h7, h8];
    for h in stale {
        assert!(!b0.cancel(h) && !b0.reset_after(h, HOUR), "stale: {h:?}");
    }
    on_thread(|| {
        for h in stale {
            assert!(
                !remote.cancel(h) && !remote.reset_after(h, MS),
                "stale: {h:?}"
            );
        }
    });
    let expect: Vec<(usize, u64)> = fresh.iter().map(|&(id, _)| (id, t + 2)).collect();
    run_until(&mut b0, &clock, l, t + 2, &expect);

    // Notices the owner takes only after the deadline passed: a filed timer cancelled from
    // another thread (the owner meets its wheel place first), and one pulled in from another
    // thread (the owner fires it, then takes the notice: its own retirement, not a cancel).
    let start = b0.stats();
    let (x, hx) = local(&mut b0, l, 2 * MS);
    let (y, hy) = local(&mut b0, l, 2 * MS);
    on_thread(|| assert!(remote.cancel(hx) && remote.reset_after(hy, MS)));
    clock.advance(2 * MS);
    assert_eq!(fire(&mut b0, l), [y]);
    ledger.dropped(x, "cancelled from afar, found due");
    ledger.delivered(y, "pulled in from afar, fired before its notice was taken");
    assert_eq!(
        delta(b0.stats(), start),
        [2, 1, 0, 1],
        "notices after the deadline"
    );

    // Remote, from other threads: schedules (one refused for want of reserve, one for want of a
    // base), then cancels and re-arms before the owner filed them, then after.
    let start = b0.stats();
    let t = tick_of(&clock);
    let r = on_thread(|| {
        let r: Vec<(usize, Handle)> = [5, 5, 50, 3, 10, 10, 60, 5]
            .into_iter()
            .map(|ms| remote_at(&remote, 0, l, ms * MS))
            .collect();
        let extra = ledger.make();
        let id = extra.id;
        let e = remote.schedule_after(0, MS, extra).unwrap_err();
        handed_back(l, e, id, ScheduleError::is_reserve_empty);
        let none = ledger.make();
        let id = none.id;
        let e = remote.schedule_after(2, MS, none).unwrap_err();
        handed_back(l, e, id, ScheduleError::is_no_such_base);
        // Not filed yet: a cancel, an earlier and a later re-arm.
        assert!(remote.cancel(r[1].1));
        assert!(remote.reset_after(r[2].1, 2 * MS));
        assert!(remote.reset_after(r[3].1, 30 * MS));
        r
    });
    let id = |k: usize| r[k].0;
    assert!(
        b0.cancel(r[7].1),
        "the owner cancels a remote schedule it has not filed"
    );
    for k in [0, 2, 3, 4, 5, 6] {
        ledger.alive(id(k), "remote, pending");
    }
    assert_eq!(fire(&mut b0, l), Vec::<usize>::new());
    ledger.dropped(id(1), "remote cancel before filing, after a turn");
    ledger.dropped(id(7), "owner's cancel before filing, after a turn");
    on_thread(|| {
        // Filed now: a cancel, an earlier and a later re-arm, one pushed later then cancelled
        // (a re-arm and a cancel after that lose).
        assert!(remote.cancel(r[4].1));
        assert!(remote.reset_after(r[5].1, MS));
        assert!(remote.reset_after(r[0].1, 20 * MS));
        assert!(remote.reset_after(r[6].1, HOUR) && remote.cancel(r[6].1));
        assert!(!remote.reset_after(r[6].1, MS) && !remote.cancel(r[6].1));
    });
    assert_eq!(fire(&mut b0, l), Vec::<usize>::new());
    ledger.dropped(id(4), "remote cancel after filing, after a turn");
    ledger.dropped(id(6), "remote cancel after filing, after a turn");
    let expect = [
        (id(5), t + 1),
        (id(2), t + 2),
        (id(0), t + 20),
        (id(3), t + 30),
    ];
    run_until(&mut b0, &clock, l, t + 30, &expect);
    assert_eq!(
        delta(b0.stats(), start),
        [8, 4, 1, 3],
        "remote phase counters"
    );

    // The owner re-arms remote schedules it has not filed yet, earlier and later.
    let t = tick_of(&clock);
    let [(u0, hu0), (u1, hu1)] = on_thread(|| [0, 1].map(|_| remote_at(&remote, 0, l, 20 * MS)));
    assert!(b0.reset_after(hu0, MS) && b0.reset_after(hu1, 30 * MS));
    assert_eq!(fire(&mut b0, l), Vec::<usize>::new());
    run_until(&mut b0, &clock, l, t + 30, &[(u0, t + 1), (u1, t + 30)]);

    // A handler working on its own base: cancels a timer due in the same turn, pulls one in to
    // now, pushes one out, cancels one, cancels a timer of the other base, schedules one due now
    // (which fires in this same turn and schedules another), schedules and cancels one at the end
    // of time, and finds its own handle stale.
    let start = b0.stats();
    let t = tick_of(&clock);
    let (c0, hc0) = local(&mut b0, l, 5 * MS);
    let (c1, hc1) = local(&mut b0, l, 5 * MS);
    let (c2, hc2) = local(&mut b0, l, 30 * MS);
    let (c3, hc3) = local(&mut b0, l, 30 * MS);
    let (c4, hc4) = local(&mut b0, l, 30 * MS);
    let (c8, hc8) = local(&mut b1, l, 30 * MS);
    clock.advance(5 * MS);
    let (mut cancel_c1, mut c5, mut c6, mut c7) = (None, None, None, None);
    let mut got = Vec::new();
    b0.turn_with(|base, p| {
        let id = ledger.deliver(p);
        got.push(id);
        if id == c0 {
            cancel_c1 = Some(base.cancel(hc1));
            assert!(
                !base.cancel(hc0) && !base.reset_after(hc0, MS),
                "firing: stale"
            );
            assert!(base.reset_after(hc2, Duration::ZERO));
            assert!(base.reset_after(hc3, 40 * MS));
            assert!(base.cancel(hc4));
            assert!(base.cancel(hc8));
            c5 = Some(local(base, l, Duration::ZERO).0);
            let (id7, h7) = local(base, l, Duration::MAX);
            assert!(base.cancel(h7));
            c7 = Some(id7);
        } else if Some(id) == c5 {
            c6 = Some(local(base, l, 10 * MS).0);
        }
    });
    let (c5, c6, c7) = (
        c5.unwrap(),
        c6.expect("c5 fired in the turn that scheduled it"),
        c7.unwrap(),
    );
    let cancel_c1 = cancel_c1.unwrap();
    // Timers due at the same tick fire in no particular order: c1 either fired before c0's
    // handler ran (its cancel lost) or never.
    assert_eq!(
        got.contains(&c1),
        !cancel_c1,
        "c1 fired iff its cancel lost: {got:?}"
    );
    assert!(
        got.contains(&c0) && got.contains(&c5) && !got.contains(&c3),
        "{got:?}"
    );
    got.extend(fire(&mut b0, l));
    assert!(
        got.contains(&c2),
        "pulled in to now by a handler: fires at that time"
    );
    ledger.dropped(c4, "cancelled by a handler");
    ledger.dropped(c7, "scheduled and cancelled by a handler");
    if cancel_c1 {
        ledger.dropped(c1, "cancelled by a handler");
    } else {
        ledger.delivered(c1, "fired before the handler that cancelled it");
    }
    assert_eq!(fire(&mut b1, l), Vec::<usize>::new());
    ledger.dropped(c8, "cancelled by a handler of another base");
    run_until(&mut b0, &clock, l, t + 45, &[(c6, t + 15), (c3, t + 45)]);
    for id in [c0, c2, c5] {
        ledger.delivered(id, "handler phase");
    }
    let (fired, local_cancels) = if cancel_c1 { (5, 3) } else { (6, 2) };
    assert_eq!(
        delta(b0.stats(), start),
        [8, fired, local_cancels, 0],
        "handler phase counters"
    );
    assert_eq!(b1.stats().cancelled_remote, 1);

    // Refusals: the table full (the owner takes the reserve too), then a remote schedule refused,
    // first for want of reserve, then (after a turn finds nothing to refill with) for want of a
    // slot. Every value comes back; cancelling everything frees every slot.
    assert_eq!(b0.free_slots(), b0.slot_capacity());
    let mut held = Vec::new();
    loop {
        let p = ledger.make();
        let id = p.id;
        match b0.schedule_after(HOUR, p) {
            Ok(h) => held.push((id, h)),
            Err(e) => {
                handed_back(l, e, id, ScheduleError::is_full);
                break;
            }
        }
    }
    assert_eq!((held.len(), b0.free_slots()), (b0.slot_capacity(), 0));
    let refuse = |kind: fn(&ScheduleError<P>) -> bool| {
        on_thread(|| {
            let p = ledger.make();
            let id = p.id;
            let e = remote.schedule_after(0, MS, p).unwrap_err();
            handed_back(l, e, id, kind);
        });
    };
    refuse(|e| e.is_reserve_empty() || e.is_full());
    assert_eq!(fire(&mut b0, l), Vec::<usize>::new());
    refuse(ScheduleError::is_full);
    let (mine, theirs) = held.split_at(held.len() / 2);
    for &(_, h) in mine {
        assert!(b0.cancel(h));
    }
    on_thread(|| {
        for &(_, h) in theirs {
            assert!(remote.cancel(h));
        }
    });
    assert_eq!(fire(&mut b0, l), Vec::<usize>::new());
    for &(id, _) in &held {
        ledger.dropped(id, "full table, cancelled");
    }
    let s = quiet(&b0, "after the refusals");
    assert_eq!(s.lateness.count, s.fired);
    assert_eq!(
        s.lateness.max, MS,
        "every fire above on its tick, but the one pulled in to a tick the turns skipped"
    );

    // Dropping a base with a timer in every state: filed, pushed later, pulled earlier, at the end
    // of time, due but not yet turned, a remote schedule not taken, one cancelled before it was
    // taken, one re-armed before it was taken, one the owner cancelled before it was taken, a
    // filed timer cancelled, pulled earlier or pushed later by another thread with the notice
    // not yet taken, and a local cancel. Every payload goes with the base, exactly once.
    let (e0, he0) = local(&mut b0, l, HOUR);
    let (e1, he1) = local(&mut b0, l, 60 * MS);
    assert!(b0.reset_after(he1, 2 * HOUR));
    let (e2, he2) = local(&mut b0, l, HOUR);
    assert!(b0.reset_after(he2, 60 * MS));
    let (e3, he3) = local(&mut b0, l, Duration::MAX);
    let (e4, he4) = local(&mut b0, l, Duration::ZERO);
    let (e7, he7) = local(&mut b0, l, HOUR);
    let (e8, he8) = local(&mut b0, l, HOUR);
    let (e10, he10) = local(&mut b0, l, 60 * MS);
    let (e12, he12) = local(&mut b0, l, 60 * MS);
    assert!(b0.cancel(he12));
    let (f0, _) = local(&mut b1, l, HOUR);
    let [(e5, he5), (e6, he6), (e9, he9), (e11, he11), (f1, _)] = on_thread(|| {
        let e = [
            remote_at(&remote, 0, l, HOUR),
            remote_at(&remote, 0, l, HOUR),
            remote_at(&remote, 0, l, 60 * MS),
            remote_at(&remote, 0, l, HOUR),
            remote_at(&remote, 1, l, HOUR),
        ];
        assert!(remote.cancel(e[1].1));
        assert!(remote.reset_after(e[2].1, 2 * HOUR));
        assert!(remote.cancel(he7));
        assert!(remote.reset_after(he8, MS));
        assert!(remote.reset_after(he10, 2 * HOUR));
        e
    });
    assert!(b0.cancel(he11));
    let pending = [e0, e1, e2, e3, e4, e5, e8, e9, e10, f0, f1];
    for id in pending {
        ledger.alive(id, "pending when its base is dropped");
    }
    drop(b0);
    let gone = [e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12];
    for id in gone {
        ledger.dropped(id, "dropped with its base");
    }
    ledger.alive(f0, "on the other base");
    ledger.alive(f1, "on the other base");
    let handles = [
        he0, he1, he2, he3, he4, he5, he6, he7, he8, he9, he10, he11, he12,
    ];
    on_thread(|| {
        for h in handles {
            assert!(
                !remote.cancel(h) && !remote.reset_after(h, MS),
                "base gone: {h:?}"
            );
        }
        let p = ledger.make();
        let id = p.id;
        let e = remote.schedule_after(0, MS, p).unwrap_err();
        handed_back(l, e, id, ScheduleError::is_closed);
    });
    drop(b1);
    ledger.dropped(f0, "dropped with its base");
    ledger.dropped(f1, "dropped with its base");
    drop(remote);
    ledger.all_once("everything dropped");
}

// ---- 2. a handler that panics ----

/// Would catch: a payload that is still counted as the record's while its handler runs (read out
/// of a cell that is not marked empty, or a wheel entry not yet unlinked), which a panic then
/// drops twice (by the unwind and again with the base) or a later turn hands over again; and a
/// base left unable to fire what was due after the panic (a turn that loses the rest of its
/// batch, or the notices it had not yet taken).
#[test]
fn a_panicking_handler_loses_nothing_and_drops_nothing_twice() {
    for mode in MODES {
        let clock = ManualClock::new();
        let config = manual(mode, &clock).wheel_capacity(64).reserve_capacity(4);
        let (mut all, remote) = bases::<P>(1, config).unwrap();
        let mut base = all.pop().unwrap();
        let ledger = Ledger::new(256);
        let l = ledger;
        let due: Vec<(usize, Handle)> = (0..10)
            .map(|k| local(&mut base, l, (1 + k % 3) * MS))
            .collect();
        let (later, _) = local(&mut base, l, HOUR);
        let (from_afar, cancelled_afar) = on_thread(|| {
            let a = remote_at(&remote, 0, l, MS).0;
            let (b, hb) = remote_at(&remote, 0, l, MS);
            assert!(remote.cancel(hb));
            (a, b)
        });
        clock.advance(5 * MS);
        // The third payload handed over panics, after its handler scheduled a due timer and
        // cancelled one of the batch.
        let mut handed = Vec::new();
        let (mut victim, mut extra, mut cancel) = (None, None, None);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            base.turn_with(|base, p| {
                if handed.len() < 2 {
                    handed.push(ledger.deliver(p));
                    return;
                }
                victim = Some(p.id);
                extra = Some(local(base, l, Duration::ZERO).0);
                let (id, h) = *due
                    .iter()
                    .rev()
                    .find(|&&(id, _)| !handed.contains(&id) && id != p.id)
                    .unwrap();
                cancel = Some((id, base.cancel(h)));
                // No panic hook: the test's output stays quiet.
                resume_unwind(Box::new("a handler fails"));
            })
        }));
        assert!(unwound.is_err(), "the panic reaches the caller of turn");
        let victim = victim.expect("the third handler ran");
        ledger.dropped(victim, "its handler panicked: dropped by the unwind, once");
        let (cancelled, won) = cancel.unwrap();
        // The next turn, at the same time, fires the rest of the batch, the notices and the timer
        // the failed handler scheduled.
        handed.extend(fire(&mut base, l));
        handed.sort_unstable();
        let mut expect: Vec<usize> = due
            .iter()
            .map(|&(id, _)| id)
            .filter(|&id| id != victim && !(won && id == cancelled))
            .chain([from_afar, extra.unwrap()])
            .collect();
        expect.sort_unstable();
        assert_eq!(handed, expect, "{mode:?}: after the panic");
        for &id in &expect {
            ledger.delivered(id, "after a panic");
        }
        if won {
            ledger.dropped(cancelled, "cancelled by the handler that panicked");
        }
        ledger.dropped(cancelled_afar, "cancelled from afar");
        ledger.alive(later, "pending");
        assert_eq!(
            fire(&mut base, l),
            Vec::<usize>::new(),
            "nothing fires twice"
        );
        assert_eq!(
            base.free_slots(),
            base.slot_capacity() - 1,
            "{mode:?}: every slot but the pending timer's is free again"
        );
        drop(base);
        ledger.dropped(later, "dropped with its base");
        drop(remote);
        ledger.all_once("after a panic");
    }
}

// ---- 3. all of it at once, on real threads, across a base's drop ----

/// What the threads of one race share: the handles published so far, by payload id.
struct Race {
    ledger: &'static Ledger,
    handles: Vec<OnceLock<Handle>>,
    stop: AtomicBool,
}

impl Race {
    /// A random published handle among the latest, most of them still pending, with its
    /// payload's id; now and then an older one, most likely stale.
    fn pick(&self, rng: &mut Rng) -> Option<(usize, Handle)> {
        // Relaxed: any id handed out so far will do.
        let made = self.ledger.next.load(Ordering::Relaxed);
        let back = if rng.below(8) == 0 {
            made
        } else {
            made.min(32)
        };
        let start = made.checked_sub(1 + rng.below(back.max(1) as u64) as usize)?;
        (0..start + 1)
            .take(8)
            .map(|k| start - k)
            .find_map(|id| self.handles[id].get().map(|h| (id, *h)))
    }

    /// A random cancel or re-arm of a published timer, through a base or a remote, counting a
    /// winning cancel.
    fn poke(&self, rng: &mut Rng, through: &mut impl Arms) {
        let Some((id, h)) = self.pick(rng) else {
            return;
        };
        if rng.below(3) == 0 {
            if through.cancel_h(h) {
                self.ledger.won(id);
            }
        } else {
            through.reset_h(h, rng.below(30) as u32 * MS);
        }
    }

    /// Schedules a fresh payload through `schedule`, publishing its handle or checking the
    /// refusal hands it back. Once the ledger is nearly used up (a machine so loaded that the
    /// owners hardly run), schedules nothing.
    fn schedule(&self, schedule: impl FnOnce(P) -> Result<Handle, ScheduleError<P>>) {
        // Relaxed: a bound, not a count (a few threads may pass it at once).
        if self.ledger.next.load(Ordering::Relaxed) + 64 > self.handles.len() {
            return;
        }
        let p = self.ledger.make();
        let id = p.id;
        match schedule(p) {
            Ok(h) => self.handles[id].set(h).unwrap(),
            Err(e) => {
                assert!(!e.is_no_such_base(), "{e:?}");
                let p = e.into_inner();
                assert_eq!(p.id, id, "the refused payload comes back");
                drop(p);
            }
        }
    }
}

/// Cancel and re-arm, as a base and a remote both offer them.
trait Arms {
    fn cancel_h(&mut self, h: Handle) -> bool;
    fn reset_h(&mut self, h: Handle, delay: Duration) -> bool;
}

impl Arms for Base<P> {
    fn cancel_h(&mut self, h: Handle) -> bool {
        self.cancel(h)
    }
    fn reset_h(&mut self, h: Handle, delay: Duration) -> bool {
        self.reset_after(h, delay)
    }
}

impl Arms for Remote<P> {
    fn cancel_h(&mut self, h: Handle) -> bool {
        self.cancel(h)
    }
    fn reset_h(&mut self, h: Handle, delay: Duration) -> bool {
        self.reset_after(h, delay)
    }
}

/// Sets its flag when dropped, so that the workers stop even if the thread holding it panics
/// (they would otherwise keep the scope waiting).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Release: the workers' Acquire loads see the race over.
        self.0.store(true, Ordering::Release);
    }
}

fn remote_worker(race: &Race, mut remote: Remote<P>, seed: u64) {
    let mut rng = Rng(seed);
    // Acquire: pairs with the Release store that ends the race.
    while !race.stop.load(Ordering::Acquire) {
        match rng.below(8) {
            0..=2 => {
                let (base, delay) = (rng.below(2) as usize, rng.below(30) as u32 * MS);
                race.schedule(|p| remote.schedule_after(base, delay, p));
            }
            3..=6 => race.poke(&mut rng, &mut remote),
            _ => remote.wake(rng.below(2) as usize),
        }
        if rng.below(4) == 0 {
            std::thread::yield_now();
        }
    }
}

/// One turn of an owner whose handlers schedule, cancel and re-arm on their base.
fn owner_turn(base: &mut Base<P>, race: &Race, rng: &mut Rng) {
    base.turn_with(|base, p| {
        race.ledger.deliver(p);
        match rng.below(4) {
            0 => {
                let delay = rng.below(30) as u32 * MS;
                race.schedule(|p| base.schedule_after(delay, p));
            }
            1 | 2 => race.poke(rng, base),
            _ => {}
        }
    });
}

/// Would catch: a payload lost or dropped twice when remote schedules, cancels and re-arms race
/// the owner's fires, its handlers' own operations and, on one base, its drop (a cell drained by
/// both the closing owner and a late pusher, or by neither; a record freed while another thread
/// still writes it); a timer that fires after a cancel that returned true; and a timer on the
/// surviving base that neither fires nor is cancelled.
#[test]
fn racing_threads_and_a_dropped_base_keep_every_payload_once() {
    const REMOTES: usize = 3;
    for (round, mode) in MODES.into_iter().cycle().take(10).enumerate() {
        let clock = ManualClock::new();
        let config = manual(mode, &clock)
            .wheel_capacity(256)
            .reserve_capacity(16);
        let (mut all, remote) = bases::<P>(2, config).unwrap();
        let mut b1 = all.pop().unwrap();
        let b0 = all.pop().unwrap();
        let ids = 200_000;
        let race = Race {
            ledger: Ledger::new(ids),
            handles: (0..ids).map(|_| OnceLock::new()).collect(),
            stop: AtomicBool::new(false),
        };
        let seed = round as u64 * 7919 + 1;
        std::thread::scope(|s| {
            let remotes: Vec<_> = (0..REMOTES)
                .map(|r| {
                    let (race, remote) = (&race, remote.clone());
                    s.spawn(move || remote_worker(race, remote, seed + r as u64 + 1))
                })
                .collect();
            let race = &race;
            let stop = StopOnDrop(&race.stop);
            let owner0 = s.spawn(move || {
                let mut b0 = b0;
                let mut rng = Rng(seed + 100);
                for _ in 0..1000 {
                    owner_turn(&mut b0, race, &mut rng);
                    std::thread::yield_now();
                }
                // Some long timers for the others to work on, then the base is dropped while they
                // keep going.
                for _ in 0..20 {
                    race.schedule(|p| b0.schedule_after(HOUR, p));
                    owner_turn(&mut b0, race, &mut rng);
                }
                drop(b0);
            });
            // Base 1's owner turns until base 0 is gone, and 300 turns more.
            let mut rng = Rng(seed + 200);
            let mut after = 0;
            while after < 300 {
                owner_turn(&mut b1, race, &mut rng);
                clock.advance(MS);
                after += usize::from(owner0.is_finished());
                std::thread::yield_now();
            }
            drop(stop);
            owner0.join().unwrap();
            for r in remotes {
                r.join().unwrap();
            }
        });
        // Quiet now: everything left on base 1 fires (re-arms reach at most 30 ms ahead).
        for _ in 0..10 {
            clock.advance(10 * MS);
            b1.turn(|p| {
                race.ledger.deliver(p);
            });
        }
        quiet(&b1, &format!("{mode:?}, round {round}"));
        let ledger = race.ledger;
        for (id, h) in race.handles.iter().enumerate() {
            if let Some(h) = h.get().filter(|h| h.base() == 1) {
                let (_, fires) = ledger.seen(id);
                // Relaxed: the threads are joined.
                let won = ledger.won[id].load(Ordering::Relaxed);
                assert_eq!(
                    fires + won,
                    1,
                    "{mode:?}: payload {id} on {h:?}: fired {fires}, cancelled {won}"
                );
            }
        }
        drop(b1);
        drop(remote);
        ledger.all_once(&format!("{mode:?}, round {round}"));
    }
}

// ---- 4. a naive model, in both modes, on real threads ----

/// One operation as the thread that made it saw it: a schedule (`new`) or a re-arm to `tick`,
/// made when the clock read `from`; a cancel; a fire.
#[derive(Clone, Copy, Debug)]
enum Ev {
    Write {
        id: usize,
        tick: u64,
        from: u64,
        new: bool,
        ok: bool,
    },
    Cancel {
        id: usize,
        ok: bool,
    },
    Fire {
        id: usize,
        tick: u64,
    },
}

/// What the threads of one round of the model share.
struct ModelRound {
    clock: ManualClock,
    epoch: Instant,
    ledger: &'static Ledger,
    /// The first payload id of the round; `handles[id - first]`.
    first: usize,
    handles: Vec<OnceLock<Handle>>,
}

impl ModelRound {
    fn now(&self) -> u64 {
        tick_of(&self.clock)
    }

    fn at(&self, tick: u64) -> Instant {
        self.epoch + Duration::from_millis(tick)
    }

    fn publish(&self, id: usize, h: Handle) {
        self.handles[id - self.first].set(h).unwrap();
    }

    fn pick(&self, rng: &mut Rng) -> Option<(usize, Handle)> {
        let n = self.handles.len();
        let start = rng.below(n as u64) as usize;
        (0..n)
            .map(|k| (start + k) % n)
            .find_map(|i| self.handles[i].get().map(|h| (self.first + i, *h)))
    }

    /// A deadline seen from tick `from`: mostly on the lowest levels, some on the middle ones
    /// (where Coarse rounds by 8 to 512 ticks), some in the past, some past both wheels' top
    /// level (Exact's 2^36 ticks, Coarse's `63 * 8^8`).
    fn deadline(rng: &mut Rng, from: u64) -> u64 {
        match rng.below(20) {
            0..=7 => from + rng.below(8),
            8..=12 => from + 8 + rng.below(500),
            13..=16 => from + 500 + rng.below(5_000),
            17 => from.saturating_sub(1 + rng.below(100)),
            _ => from + (1 << 36) + rng.below(1 << 30),
        }
    }
}

/// The operations a base and a remote share, by deadline `Instant`.
trait Model {
    fn schedule(&mut self, deadline: Instant, p: P) -> Result<Handle, ScheduleError<P>>;
    fn rearm(&mut self, h: Handle, deadline: Instant) -> bool;
    fn cancel(&mut self, h: Handle) -> bool;
}

impl Model for Base<P> {
    fn schedule(&mut self, deadline: Instant, p: P) -> Result<Handle, ScheduleError<P>> {
        self.schedule_at(deadline, p)
    }
    fn rearm(&mut self, h: Handle, deadline: Instant) -> bool {
        self.reset_at(h, deadline)
    }
    fn cancel(&mut self, h: Handle) -> bool {
        Base::cancel(self, h)
    }
}

impl Model for Remote<P> {
    fn schedule(&mut self, deadline: Instant, p: P) -> Result<Handle, ScheduleError<P>> {
        self.schedule_at(0, deadline, p)
    }
    fn rearm(&mut self, h: Handle, deadline: Instant) -> bool {
        self.reset_at(h, deadline)
    }
    fn cancel(&mut self, h: Handle) -> bool {
        Remote::cancel(self, h)
    }
}

/// Remote threads of a round of the model, and operations each makes.
const MODEL_REMOTES: usize = 3;
const REMOTE_OPS: usize = 40;

/// One random operation through `on`, logged.
fn model_op(on: &mut impl Model, round: &ModelRound, rng: &mut Rng, log: &mut Vec<Ev>) {
    let from = round.now();
    let tick = ModelRound::deadline(rng, from);
    // The owner may loop long while the remote threads wait for a core: it schedules only while
    // the round has room for every schedule the remote threads may still make.
    let room = round.ledger.next.load(Ordering::Relaxed) - round.first + REMOTE_OPS * MODEL_REMOTES;
    let write = |id, new, ok| Ev::Write {
        id,
        tick,
        from,
        new,
        ok,
    };
    match rng.below(10) {
        0..=2 if room < round.handles.len() => {
            let p = round.ledger.make();
            let id = p.id;
            let ok = match on.schedule(round.at(tick), p) {
                Ok(h) => {
                    round.publish(id, h);
                    true
                }
                Err(e) => {
                    handed_back(round.ledger, e, id, ScheduleError::is_reserve_empty);
                    false
                }
            };
            log.push(write(id, true, ok));
        }
        3..=7 => {
            if let Some((id, h)) = round.pick(rng) {
                let ok = on.rearm(h, round.at(tick));
                log.push(write(id, false, ok));
            }
        }
        8 => {
            if let Some((id, h)) = round.pick(rng) {
                let ok = on.cancel(h);
                log.push(Ev::Cancel { id, ok });
            }
        }
        _ => {}
    }
}

/// The deadline of the last successful schedule or re-arm of `id` in `log`.
fn last_write(log: &[Ev], id: usize) -> Option<u64> {
    log.iter().rev().find_map(|e| match *e {
        Ev::Write {
            id: i,
            tick,
            ok: true,
            ..
        } if i == id => Some(tick),
        _ => None,
    })
}

/// Would catch, in Coarse mode as in Exact: a timer that fires before the deadline its writers
/// left, or twice, or after a cancel that returned true, or never; a remote or local re-arm to an
/// earlier deadline that the base loses (the timer then fires at its old place, later than the
/// longest delay it was armed with allows); a later re-arm that the base loses (it fires early);
/// a cancelled or fired payload that is not dropped by the end of the round; a slot leaked; and a
/// wake-up left pending on the fd. The clock jumps by up to 2,000 ticks, across the Coarse levels
/// and the Exact cascades, and some deadlines lie past both wheels' top level.
#[test]
fn racing_threads_agree_with_a_naive_model_in_both_modes() {
    const ROUNDS: usize = 500;
    for mode in MODES {
        let clock = ManualClock::new();
        let config = manual(mode, &clock)
            .wheel_capacity(1024)
            .reserve_capacity(8);
        let (mut all, remote) = bases::<P>(1, config).unwrap();
        let mut base = all.pop().unwrap();
        let epoch = base.now() - clock.elapsed();
        let ledger = Ledger::new(ROUNDS * 512);
        for n in 0..ROUNDS {
            // Relaxed: this thread made every id so far, or joined the threads that did.
            let first = ledger.next.load(Ordering::Relaxed);
            let round = ModelRound {
                clock: clock.clone(),
                epoch,
                ledger,
                first,
                handles: (0..512).map(|_| OnceLock::new()).collect(),
            };
            let seed = (n as u64 + 1) * 0x9E37_79B9 + mode as u64;
            let mut rng = Rng(seed);
            let mut owner = Vec::new();
            let remotes: Vec<Vec<Ev>> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..MODEL_REMOTES)
                    .map(|r| {
                        let (round, mut remote) = (&round, remote.clone());
                        s.spawn(move || {
                            let mut rng = Rng(seed ^ ((r as u64 + 1) << 40));
                            let mut log = Vec::new();
                            for _ in 0..REMOTE_OPS {
                                model_op(&mut remote, round, &mut rng, &mut log);
                                if rng.below(4) == 0 {
                                    std::thread::yield_now();
                                }
                            }
                            log
                        })
                    })
                    .collect();
                // Until every remote thread is done (or has panicked: the join says so).
                while !threads.iter().all(|t| t.is_finished()) {
                    let mut log = std::mem::take(&mut owner);
                    base.turn_with(|base, p| {
                        log.push(Ev::Fire {
                            id: round.ledger.deliver(p),
                            tick: round.now(),
                        });
                        for _ in 0..rng.below(3) {
                            model_op(base, &round, &mut rng, &mut log);
                        }
                    });
                    owner = log;
                    model_op(&mut base, &round, &mut rng, &mut owner);
                    let jump = match rng.below(10) {
                        0..=3 => 0,
                        4..=6 => 1,
                        7..=8 => 2 + rng.below(62),
                        _ => 64 + rng.below(2_000),
                    };
                    clock.advance(jump as u32 * MS);
                    std::thread::yield_now();
                }
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            check_model_round(mode, n, &round, &mut base, &remote, &owner, &remotes);
        }
        drop(base);
        drop(remote);
        ledger.all_once(&format!("{mode:?} model"));
    }
}

/// Checks the racing part of a round against its logs, then re-arms every timer still pending
/// from another thread (an operation ordered after all others) and runs them out, checking that
/// each fires no earlier than that last deadline and no later than the slack allows.
fn check_model_round(
    mode: Mode,
    n: usize,
    round: &ModelRound,
    base: &mut Base<P>,
    remote: &Remote<P>,
    owner: &[Ev],
    remotes: &[Vec<Ev>],
) {
    let ids = round.handles.len();
    let ix = |id: usize| id - round.first;
    let mut accepted = vec![false; ids];
    let mut cancels = vec![0u32; ids];
    let mut fires = vec![0u32; ids];
    // The most a timer may fire late: the slack of the longest delay it was ever armed with.
    let mut allow = vec![0u64; ids];
    for e in owner.iter().chain(remotes.iter().flatten()) {
        match *e {
            Ev::Write {
                id,
                tick,
                from,
                new,
                ok,
            } => {
                if new {
                    accepted[ix(id)] = ok;
                }
                if ok {
                    allow[ix(id)] = allow[ix(id)].max(slack(mode, tick.saturating_sub(from)));
                }
            }
            Ev::Cancel { id, ok: true } => cancels[ix(id)] += 1,
            _ => {}
        }
    }
    for (k, e) in owner.iter().enumerate() {
        let Ev::Fire { id, tick } = *e else { continue };
        fires[ix(id)] += 1;
        let floor = remotes
            .iter()
            .filter_map(|log| last_write(log, id))
            .chain(last_write(&owner[..k], id))
            .min()
            .unwrap_or_else(|| panic!("{mode:?} round {n}: {id} fired unscheduled"));
        assert!(
            tick >= floor,
            "{mode:?} round {n}: {id} fired at {tick}, before every deadline left for it ({floor})"
        );
    }
    // The last word on every timer still pending, from another thread.
    let now = round.now();
    let finals: Vec<Option<u64>> = (0..ids)
        .map(|i| (accepted[i] && fires[i] + cancels[i] == 0).then(|| now + 1 + (i % 7) as u64))
        .collect();
    on_thread(|| {
        for (i, tick) in finals.iter().enumerate() {
            if let Some(tick) = *tick {
                let h = *round.handles[i].get().unwrap();
                assert!(
                    remote.reset_at(h, round.at(tick)),
                    "{mode:?} round {n}: pending"
                );
            }
        }
    });
    // Run them out: a turn at every tick up to the last final deadline, then one at each bound.
    let mut turns: Vec<u64> = (now..=now + 8).collect();
    let mut bounds: Vec<u64> = finals
        .iter()
        .zip(&allow)
        .filter_map(|(d, a)| d.map(|d| d + a))
        .filter(|&b| b > now + 8)
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    turns.extend(bounds);
    for t in turns {
        round.clock.set(Duration::from_millis(t));
        for id in fire(base, round.ledger) {
            let i = ix(id);
            let due = finals[i]
                .unwrap_or_else(|| panic!("{mode:?} round {n}: {id} fired after the round"));
            fires[i] += 1;
            assert!(
                fires[i] == 1 && t >= due,
                "{mode:?} round {n}: {id} (re-armed to {due}) fired at {t}"
            );
        }
        for (i, d) in finals.iter().enumerate() {
            if let Some(d) = *d {
                assert!(
                    fires[i] == 1 || d + allow[i] > t,
                    "{mode:?} round {n}: {} re-armed to {d} (slack {}) not fired at {t}",
                    round.first + i,
                    allow[i]
                );
            }
        }
    }
    for i in 0..ids {
        let id = round.first + i;
        if accepted[i] {
            assert_eq!(
                fires[i] + cancels[i],
                1,
                "{mode:?} round {n}: {id} fired {} cancelled {}",
                fires[i],
                cancels[i]
            );
        }
    }
    // Relaxed: every thread of the round is joined.
    for id in round.first..round.ledger.next.load(Ordering::Relaxed) {
        let (drops, fired) = round.ledger.seen(id);
        assert_eq!(
            (drops, fired),
            (1, fires[ix(id)]),
            "{mode:?} round {n}: {id} (drops, fires)"
        );
    }
    quiet(base, &format!("{mode:?} round {n}"));
    assert!(
        !support::poll_readable(base.fd(), 0),
        "{mode:?} round {n}: fd readable"
    );
}

// ---- 5. churn at scale ----

/// The model of one timer of the churn.
struct Churned {
    id: usize,
    h: Handle,
    deadline: u64,
    allow: u64,
    live: bool,
}

/// What the churn does to one timer in a cycle.
#[derive(Clone, Copy)]
enum Churn {
    Later(u64),
    Earlier(u64),
    Cancel,
}

/// Would catch: a timer lost or fired early when its deadline keeps moving later (the entry found
/// at its old place and not placed again, or placed again by a stale deadline), an earlier
/// re-arm lost among thousands of notices, a timer lost in a cascade or on the overflow list
/// when the clock jumps by up to 2^17 ticks, a cancelled payload not dropped, a leaked slot; at
/// 10^5 timers, with both local and remote re-arms.
#[test]
fn a_hundred_thousand_timers_churned_fire_exactly_as_modelled() {
    for mode in MODES {
        churn(mode);
    }
}

fn churn(mode: Mode) {
    const N: usize = 100_000;
    const CYCLES: usize = 16;
    let clock = ManualClock::new();
    let config = manual(mode, &clock).wheel_capacity(1 << 17);
    let (mut all, remote) = bases::<P>(1, config).unwrap();
    let mut base = all.pop().unwrap();
    let epoch = base.now() - clock.elapsed();
    let at = |tick: u64| epoch + Duration::from_millis(tick);
    let ledger = Ledger::new(N);
    let mut rng = Rng(0xC0FF_EE00 + mode as u64);
    let mut timers: Vec<Churned> = (0..N)
        .map(|_| {
            let deadline = if rng.below(50) == 0 {
                (1 << 36) + rng.below(1 << 30)
            } else {
                1 + rng.below(1 << 20)
            };
            let p = ledger.make();
            let id = p.id;
            let h = base.schedule_at(at(deadline), p).unwrap();
            Churned {
                id,
                h,
                deadline,
                allow: slack(mode, deadline),
                live: true,
            }
        })
        .collect();
    let check = |base: &mut Base<P>, timers: &mut [Churned], now: u64| {
        for id in fire(base, ledger) {
            let t = &mut timers[id];
            assert!(
                t.live && t.deadline <= now,
                "{mode:?}: {id} (deadline {}, live {}) fired at {now}",
                t.deadline,
                t.live
            );
            t.live = false;
        }
        for t in timers.iter().filter(|t| t.live) {
            assert!(
                t.deadline + t.allow > now,
                "{mode:?}: {} (deadline {}, slack {}) not fired at {now}",
                t.id,
                t.deadline,
                t.allow
            );
        }
    };
    for cycle in 0..CYCLES {
        let now = tick_of(&clock);
        let mut plan: Vec<(usize, Churn)> = Vec::new();
        for t in timers.iter().filter(|t| t.live) {
            let op = match rng.below(40) {
                0..=19 => Churn::Later(t.deadline.max(now) + 1 + rng.below(1 << 16)),
                20 | 21 if t.deadline > now => {
                    Churn::Earlier(now + rng.below((t.deadline - now) / 2 + 1))
                }
                22 => Churn::Cancel,
                _ => continue,
            };
            plan.push((t.id, op));
        }
        // The odd ids through another thread, the even ones by the owner.
        let (theirs, mine): (Vec<_>, Vec<_>) = plan.iter().partition(|(id, _)| id % 2 == 1);
        let apply = |on: &mut dyn FnMut(Handle, Option<u64>) -> bool, ops: &[&(usize, Churn)]| {
            for &&(id, op) in ops {
                let h = timers[id].h;
                let ok = match op {
                    Churn::Later(d) | Churn::Earlier(d) => on(h, Some(d)),
                    Churn::Cancel => on(h, None),
                };
                assert!(ok, "{mode:?} cycle {cycle}: {id} pending");
            }
        };
        apply(
            &mut |h, d| match d {
                Some(d) => base.reset_at(h, at(d)),
                None => base.cancel(h),
            },
            &mine,
        );
        on_thread(|| {
            apply(
                &mut |h, d| match d {
                    Some(d) => remote.reset_at(h, at(d)),
                    None => remote.cancel(h),
                },
                &theirs,
            )
        });
        for &(id, op) in &plan {
            let t = &mut timers[id];
            match op {
                Churn::Later(d) | Churn::Earlier(d) => {
                    t.deadline = d;
                    t.allow = t.allow.max(slack(mode, d - now));
                }
                Churn::Cancel => {
                    t.live = false;
                    ledger.won(id);
                }
            }
        }
        clock.advance((1024 + rng.below(1 << 17)) as u32 * MS);
        check(&mut base, &mut timers, tick_of(&clock));
    }
    // Half of what is left cancelled, then the rest run out, far ones included.
    let now = tick_of(&clock);
    for t in timers.iter_mut().filter(|t| t.live && t.id % 2 == 0) {
        assert!(base.cancel(t.h), "{mode:?}: {} pending", t.id);
        t.live = false;
        ledger.won(t.id);
    }
    check(&mut base, &mut timers, now);
    let end = timers
        .iter()
        .filter(|t| t.live)
        .map(|t| t.deadline + t.allow)
        .max()
        .unwrap();
    for step in [1 << 20, 1 << 30, end] {
        clock.set(Duration::from_millis(step.max(tick_of(&clock))));
        check(&mut base, &mut timers, tick_of(&clock));
    }
    assert!(timers.iter().all(|t| !t.live));
    quiet(&base, &format!("{mode:?} churn"));
    drop(base);
    drop(remote);
    ledger.all_once(&format!("{mode:?} churn"));
}

// ---- 6. the ends of time ----

/// Turns once with the clock at `tick`; the ids fired.
fn fire_at(base: &mut Base<P>, clock: &ManualClock, ledger: &Ledger, tick: Duration) -> Vec<usize> {
    clock.set(tick);
    fire(base, ledger)
}

/// Would catch: a deadline past the wheels' top levels (Coarse's 12 days, Exact's 2.2 years, an
/// `Instant` a century away, `Duration::MAX`) lost, clamped early or wrapped when it is filed, when
/// another thread pulls it in to a near deadline (the move must take it off the overflow list),
/// or when the clock jumps to it; a timer pushed out to the end of time and back; deadlines in the
/// past (local and remote, scheduled or re-armed there) that do not fire at the next turn.
#[test]
fn deadlines_far_away_and_in_the_past() {
    for mode in MODES {
        let clock = ManualClock::new();
        let (mut all, remote) = bases::<P>(1, manual(mode, &clock).wheel_capacity(64)).unwrap();
        let mut base = all.pop().unwrap();
        let ledger = Ledger::new(64);
        let l = ledger;
        clock.advance(HOUR);
        assert_eq!(fire(&mut base, l), Vec::<usize>::new());
        let now = base.now();
        let days = |n: u64| Duration::from_secs(n * 86_400);
        let century = now + days(36_525);
        // Each far delay twice: one kept, one pulled in from another thread.
        let far = [days(13), days(3 * 365), days(40_000), Duration::MAX];
        let kept: Vec<(usize, Handle)> = far.iter().map(|&d| local(&mut base, l, d)).collect();
        let pulled: Vec<(usize, Handle)> = far.iter().map(|&d| local(&mut base, l, d)).collect();
        let (in_a_century, hc) = {
            let p = ledger.make();
            (p.id, base.schedule_at(century, p).unwrap())
        };
        let (out, h_out) = local(&mut base, l, 5 * MS);
        let (back, h_back) = local(&mut base, l, 5 * MS);
        let (past_local, _) = {
            let p = ledger.make();
            let past = now.checked_sub(2 * HOUR).unwrap_or(now - HOUR);
            (p.id, base.schedule_at(past, p).unwrap())
        };
        let (q_local, hq_local) = local(&mut base, l, HOUR);
        let (q_remote, hq_remote) = local(&mut base, l, HOUR);
        assert!(
            base.reset_at(hq_local, now - HOUR),
            "re-armed into the past"
        );
        let (past_remote, end_remote) = on_thread(|| {
            for (k, &(_, h)) in pulled.iter().enumerate() {
                assert!(
                    remote.reset_after(h, (5 + k as u32) * MS),
                    "far timer pending"
                );
            }
            assert!(remote.reset_after(h_out, Duration::MAX));
            assert!(remote.reset_after(h_back, Duration::MAX));
            assert!(remote.reset_after(h_back, 9 * MS));
            assert!(remote.reset_at(hq_remote, now - HOUR / 2));
            let past = remote_at(&remote, 0, l, Duration::ZERO).0;
            let p = ledger.make();
            let end = (p.id, remote.schedule_at(0, now + days(50_000), p).unwrap());
            (past, end)
        });
        let mut due_now = vec![past_local, q_local, q_remote, past_remote];
        due_now.sort_unstable();
        assert_eq!(
            fire(&mut base, l),
            due_now,
            "{mode:?}: deadlines in the past fire at the next turn"
        );
        let t = tick_of(&clock);
        let expect: Vec<(usize, u64)> = pulled
            .iter()
            .enumerate()
            .map(|(k, &(id, _))| (id, t + 5 + k as u64))
            .chain([(back, t + 9)])
            .collect();
        run_until(&mut base, &clock, l, t + 9, &expect);
        // The kept ones, in deadline order, as the clock jumps to each: not a tick early, and
        // within the slack of its delay (from the hour the clock read when they were armed).
        let hour = HOUR.as_millis() as u64;
        let mut kept: Vec<(usize, Handle, u64)> = kept
            .iter()
            .zip(far)
            .map(|(&(id, h), d)| (id, h, d.as_millis().min(u128::from(u64::MAX)) as u64))
            .chain([
                (in_a_century, hc, (century - now).as_millis() as u64),
                (end_remote.0, end_remote.1, days(50_000).as_millis() as u64),
            ])
            .collect();
        kept.sort_by_key(|&(_, _, delay)| delay);
        let at_end = kept.pop().unwrap();
        for (id, h, delay) in kept {
            let d = hour + delay;
            let early = fire_at(&mut base, &clock, l, Duration::from_millis(d - 1));
            assert_eq!(
                early,
                Vec::<usize>::new(),
                "{mode:?}: a tick before {id}'s deadline"
            );
            let on_time = fire_at(
                &mut base,
                &clock,
                l,
                Duration::from_millis(d + slack(mode, delay)),
            );
            assert_eq!(
                on_time,
                [id],
                "{mode:?}: {id}, {delay} ms ahead, within its slack"
            );
            assert!(
                !base.cancel(h) && !remote.reset_after(h, MS),
                "fired: stale"
            );
        }
        // The end of the clock: the ones at `Duration::MAX` (kept, and pushed out there by
        // another thread) fire at the end at the earliest, or stay pending.
        let end_of_clock = Duration::from_nanos(u64::MAX);
        assert_eq!(
            fire_at(&mut base, &clock, l, end_of_clock - MS),
            Vec::<usize>::new()
        );
        let last = fire_at(&mut base, &clock, l, end_of_clock);
        for (id, h) in [(at_end.0, at_end.1), (out, h_out)] {
            assert_eq!(
                base.cancel(h),
                !last.contains(&id),
                "{mode:?}: {id} fired or pending, not both"
            );
        }
        assert_eq!(fire(&mut base, l), Vec::<usize>::new());
        quiet(&base, &format!("{mode:?}, far and past"));
        drop(base);
        drop(remote);
        ledger.all_once(&format!("{mode:?}, far and past"));
    }
}

/// Would catch: arithmetic that overflows or wraps near the top of `u64` ticks (a 1 ns tick,
/// the clock a microsecond from its end): a deadline saturated to `u64::MAX` that never fires or
/// fires at once, a delay added past the end that wraps to the start, a remote re-arm from the end
/// of time to a near deadline lost, and the first turn's jump of the wheel from 0 to the end.
#[test]
fn one_nanosecond_ticks_at_the_end_of_the_clock() {
    for mode in MODES {
        let clock = ManualClock::new();
        let config = manual(mode, &clock)
            .tick(Duration::from_nanos(1))
            .wheel_capacity(64);
        let (mut all, remote) = bases::<P>(1, config).unwrap();
        let mut base = all.pop().unwrap();
        let ledger = Ledger::new(64);
        let l = ledger;
        let (at_end, _) = local(&mut base, l, Duration::MAX);
        let (pulled, h_pulled) = local(&mut base, l, Duration::MAX);
        let start = u64::MAX - 1000;
        assert_eq!(
            fire_at(&mut base, &clock, l, Duration::from_nanos(start)),
            Vec::<usize>::new()
        );
        let (near, _) = local(&mut base, l, Duration::from_nanos(500));
        let (past_end, _) = local(&mut base, l, Duration::from_nanos(2000));
        let (soon, _) = on_thread(|| {
            assert!(remote.reset_after(h_pulled, Duration::from_nanos(100)));
            remote_at(&remote, 0, l, Duration::from_nanos(40))
        });
        // (id, deadline, slack from the tick it was written at)
        let expect = [
            (pulled, start + 100, slack(mode, 100)),
            (soon, start + 40, slack(mode, 40)),
            (near, start + 500, slack(mode, 500)),
            (past_end, u64::MAX, 0),
            (at_end, u64::MAX, 0),
        ];
        let mut fired_at = vec![None; ledger.next.load(Ordering::Relaxed)];
        for t in start..=u64::MAX {
            for id in fire_at(&mut base, &clock, l, Duration::from_nanos(t)) {
                assert!(
                    fired_at[id].replace(t).is_none(),
                    "{mode:?}: {id} fired twice"
                );
            }
        }
        for (id, deadline, allow) in expect {
            let t = fired_at[id].unwrap_or_else(|| panic!("{mode:?}: {id} never fired"));
            assert!(
                (deadline..=deadline.saturating_add(allow)).contains(&t),
                "{mode:?}: {id} with deadline {deadline} fired at {t}"
            );
        }
        quiet(&base, &format!("{mode:?}, end of the clock"));
        drop(base);
        drop(remote);
        ledger.all_once(&format!("{mode:?}, end of the clock"));
    }
}

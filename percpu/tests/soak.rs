//! Soak: two owner threads (pinned when the machine names two cores), each turning its own base
//! and scheduling, cancelling and re-arming on both, on the manual clock and on the real clock.
//!
//! Checked: fired + cancelled == scheduled (per payload and in the stats), no payload fires twice
//! or after a winning cancel, none fires before its deadline, and at the end every base is back
//! to zero timers and all slots free.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tickwheel_percpu::{Base, ClockSource, Config, Handle, ManualClock, Mode, Remote, bases};

mod support;
use support::Rng;

const THREADS: usize = 2;
const OPS_PER_THREAD: usize = 500_000;
const UNSET: u8 = 0;
const PENDING: u8 = 1;
const FIRED: u8 = 2;
const CANCELLED: u8 = 3;

/// Payload ids are `thread * OPS_PER_THREAD + n`; one state and one deadline per id.
struct Ledger {
    state: Vec<AtomicU8>,
    deadline: Vec<AtomicU64>,
    resolved: AtomicUsize,
    scheduled: AtomicUsize,
    crossing: AtomicUsize,
    ops: AtomicUsize,
    done: AtomicUsize,
}

impl Ledger {
    fn new() -> Self {
        let n = THREADS * OPS_PER_THREAD;
        Self {
            state: (0..n).map(|_| AtomicU8::new(UNSET)).collect(),
            deadline: (0..n).map(|_| AtomicU64::new(0)).collect(),
            resolved: AtomicUsize::new(0),
            scheduled: AtomicUsize::new(0),
            crossing: AtomicUsize::new(0),
            ops: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    fn transition(&self, id: usize, to: u8) {
        let from =
            self.state[id].compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire);
        assert_eq!(
            from,
            Ok(PENDING),
            "payload {id}: to {to} from {from:?} (fired twice or after cancel)"
        );
        self.resolved.fetch_add(1, Ordering::AcqRel);
    }
}

enum Clock {
    Manual(ManualClock),
    Real,
}

struct Soak {
    ledger: Ledger,
    clock: Clock,
    epoch: Instant,
    max_delay_us: u64,
    stop_scheduling: AtomicBool,
}

impl Soak {
    /// Nanoseconds since the bases' epoch, as the bases will read it at or after this moment.
    fn now_ns(&self) -> u64 {
        match &self.clock {
            Clock::Manual(c) => c.elapsed().as_nanos() as u64,
            Clock::Real => Instant::now()
                .saturating_duration_since(self.epoch)
                .as_nanos() as u64,
        }
    }

    fn at(&self, ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }
}

fn turn_and_check(base: &mut Base<usize>, soak: &Soak) -> usize {
    let mut fired = Vec::new();
    base.turn(|id| fired.push(id));
    let now = base.now();
    for &id in &fired {
        let deadline = soak.at(soak.ledger.deadline[id].load(Ordering::Acquire));
        assert!(
            now >= deadline,
            "payload {id} fired {:?} early",
            deadline - now
        );
        soak.ledger.transition(id, FIRED);
    }
    fired.len()
}

fn worker(
    me: usize,
    mut base: Base<usize>,
    remote: Remote<usize>,
    soak: &Soak,
    start: &Barrier,
) -> Base<usize> {
    if let Some(ids) = core_affinity::get_core_ids()
        && ids.len() >= THREADS
    {
        assert!(
            core_affinity::set_for_current(ids[me]),
            "could not pin to core {}",
            ids[me].id
        );
    }
    let ledger = &soak.ledger;
    let other = (me + 1) % THREADS;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (me as u64 + 1));
    let mut own: Vec<(Handle, usize)> = Vec::new();
    let mut foreign: Vec<(Handle, usize)> = Vec::new();
    let mut next_id = me * OPS_PER_THREAD;
    let mut crossing = 0;
    start.wait();
    for op in 0..OPS_PER_THREAD {
        let roll = rng.below(100);
        if roll < 40 || (roll < 60 && own.len() + foreign.len() < 64) {
            // Schedule: remote on the other base for the first 40%, local otherwise.
            let id = next_id;
            next_id += 1;
            let deadline_ns = soak.now_ns() + rng.below(soak.max_delay_us) * 1_000;
            ledger.deadline[id].store(deadline_ns, Ordering::Release);
            ledger.state[id].store(PENDING, Ordering::Release);
            let at = soak.at(deadline_ns);
            let result = if roll < 40 {
                remote.schedule_at(other, at, id).map(|h| {
                    crossing += 1;
                    foreign.push((h, id));
                })
            } else {
                base.schedule_at(at, id).map(|h| own.push((h, id)))
            };
            match result {
                Ok(()) => {
                    ledger.scheduled.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    assert!(e.is_reserve_empty(), "unexpected {e:?}");
                    assert_eq!(e.into_inner(), id);
                    ledger.state[id].store(UNSET, Ordering::Release);
                    // Back-pressure: the other owner is behind (descheduled); let it catch up.
                    std::thread::yield_now();
                }
            }
        } else if roll < 75 && !own.is_empty() {
            let (h, id) = own.swap_remove(rng.below(own.len() as u64) as usize);
            if base.cancel(h) {
                ledger.transition(id, CANCELLED);
            } else {
                // A local handle's timer can only have fired in one of our own turns.
                assert_eq!(
                    ledger.state[id].load(Ordering::Acquire),
                    FIRED,
                    "local cancel lost to nothing"
                );
            }
        } else if roll < 90 && !foreign.is_empty() {
            crossing += 1;
            let (h, id) = foreign.swap_remove(rng.below(foreign.len() as u64) as usize);
            if base.cancel(h) {
                ledger.transition(id, CANCELLED);
            }
        } else if !own.is_empty() {
            let (h, id) = own[rng.below(own.len() as u64) as usize];
            let deadline_ns = soak.now_ns() + rng.below(soak.max_delay_us) * 1_000;
            let old = ledger.deadline[id].swap(deadline_ns, Ordering::AcqRel);
            if !base.reset_at(h, soak.at(deadline_ns)) {
                ledger.deadline[id].store(old, Ordering::Release);
            }
        }
        if op % 16 == 15 {
            if let Clock::Manual(c) = &soak.clock {
                c.advance(Duration::from_micros(20 + rng.below(40)));
            }
            turn_and_check(&mut base, soak);
        }
        // Bound the held lists so old handles (mostly fired) do not pile up.
        if own.len() > 4096 {
            own.drain(..2048);
        }
        if foreign.len() > 4096 {
            foreign.drain(..2048);
        }
    }
    ledger.crossing.fetch_add(crossing, Ordering::AcqRel);
    ledger.ops.fetch_add(OPS_PER_THREAD, Ordering::AcqRel);
    soak.stop_scheduling.store(true, Ordering::Release);
    ledger.done.fetch_add(1, Ordering::AcqRel);
    // Drain: keep turning until every scheduled payload is resolved and both threads are done.
    let give_up = Instant::now() + Duration::from_secs(60);
    while ledger.done.load(Ordering::Acquire) < THREADS
        || ledger.resolved.load(Ordering::Acquire) < ledger.scheduled.load(Ordering::Acquire)
    {
        match &soak.clock {
            Clock::Manual(c) => c.advance(Duration::from_millis(1)),
            Clock::Real => {
                base.park(Some(Duration::from_millis(1))).unwrap();
            }
        }
        turn_and_check(&mut base, soak);
        assert!(Instant::now() < give_up, "drain did not finish");
        std::thread::yield_now();
    }
    base
}

fn soak(clock: ClockSource, max_delay_us: u64) {
    let config = Config::default()
        .mode(Mode::Coarse)
        .tick(Duration::from_micros(100))
        .clock(clock.clone())
        .wheel_capacity(1 << 16);
    let (all, remote) = bases::<usize>(THREADS, config).unwrap();
    let epoch = all[0].now();
    let soak = Arc::new(Soak {
        ledger: Ledger::new(),
        clock: match clock {
            ClockSource::Manual(c) => Clock::Manual(c),
            _ => Clock::Real,
        },
        epoch,
        max_delay_us,
        stop_scheduling: AtomicBool::new(false),
    });
    let start = Arc::new(Barrier::new(THREADS));
    let began = Instant::now();
    let threads: Vec<_> = all
        .into_iter()
        .enumerate()
        .map(|(me, base)| {
            let (soak, remote, start) = (soak.clone(), remote.clone(), start.clone());
            std::thread::spawn(move || worker(me, base, remote, &soak, &start))
        })
        .collect();
    let mut finished: Vec<Base<usize>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    // One last turn each: cancel notices and reclaimed slots settle.
    for base in &mut finished {
        base.turn(|id| panic!("payload {id} fired after the drain"));
    }
    let ledger = &soak.ledger;
    let ops = ledger.ops.load(Ordering::Relaxed);
    let crossing = ledger.crossing.load(Ordering::Relaxed);
    let scheduled = ledger.scheduled.load(Ordering::Relaxed);
    let (mut fired, mut cancelled, mut stats_scheduled) = (0, 0, 0);
    for base in &finished {
        let s = base.stats();
        fired += s.fired;
        cancelled += s.cancelled_local + s.cancelled_remote;
        stats_scheduled += s.scheduled;
        assert_eq!(base.len(), 0, "base {} still holds timers", base.index());
        assert_eq!(
            base.free_slots(),
            base.slot_capacity(),
            "base {} leaked slots",
            base.index()
        );
        eprintln!("base {}: {s:?}", base.index());
    }
    eprintln!(
        "soak: {ops} ops, {crossing} crossing ({:.0}%), {scheduled} scheduled, {fired} fired, {cancelled} cancelled, {:?}",
        100.0 * crossing as f64 / ops as f64,
        began.elapsed()
    );
    assert!(ops >= 1_000_000);
    assert!(
        crossing * 10 >= ops * 3,
        "only {crossing} of {ops} ops crossed cores"
    );
    assert_eq!(stats_scheduled as usize, scheduled);
    assert_eq!((fired + cancelled) as usize, scheduled);
    for (id, s) in ledger.state.iter().enumerate() {
        let s = s.load(Ordering::Relaxed);
        assert!(
            s == UNSET || s == FIRED || s == CANCELLED,
            "payload {id} unresolved ({s})"
        );
    }
    assert!(soak.stop_scheduling.load(Ordering::Relaxed));
}

#[test]
fn soak_manual_clock() {
    soak(ClockSource::Manual(ManualClock::new()), 5_000);
}

#[test]
fn soak_real_clock() {
    soak(ClockSource::Monotonic, 2_000);
}

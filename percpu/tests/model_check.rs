//! Real threads against a naive model: three remote threads schedule, re-arm and cancel at random
//! on one base while its owner turns on a manual clock it moves, re-arming, cancelling and
//! scheduling on its own base from inside its handlers and between turns. Every operation is
//! logged by the thread that made it, and each round is checked against the logs:
//!
//! - every accepted timer fires or is cancelled exactly once, a cancel that returned true is never
//!   followed by a fire, and a refused schedule hands its value back and never fires;
//! - never early: a timer fires no earlier than the earliest of the deadlines its writers left
//!   (each thread's last successful schedule or re-arm before the fire; one of them is the
//!   deadline in force, whichever landed last);
//! - never late: after the round every timer still pending is re-armed from another thread, an
//!   operation ordered after all others, and must then fire at exactly that tick (`Exact` mode),
//!   so an owner's wheel entry left later than its slot's deadline by the races shows up here;
//! - at the end of each round the base holds nothing, every slot is free, the counters balance,
//!   and its fd is not readable (no kick left over).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tickwheel_percpu::{Base, ClockSource, Config, Handle, ManualClock, Mode, Remote, bases};

mod support;
use support::{Rng, poll_readable};

const REMOTES: usize = 3;
const ROUNDS: usize = 500;
const OPS_PER_REMOTE: usize = 40;
/// Timers the owner schedules before the round's threads start.
const PRESET: usize = 8;
/// Ids per round: the preset, then a range per remote thread, then the owner's.
const RANGE: usize = 64;
const IDS: usize = PRESET + (REMOTES + 1) * RANGE;
const MS: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug)]
enum Ev {
    Schedule { id: usize, tick: u64, ok: bool },
    Rearm { id: usize, tick: u64, ok: bool },
    Cancel { id: usize, ok: bool },
    Fire { id: usize, tick: u64 },
}

/// What the threads of one round share: the clock, the epoch and the handles published so far.
struct Round {
    clock: ManualClock,
    epoch: Instant,
    handles: Vec<OnceLock<Handle>>,
    remotes_done: AtomicUsize,
}

impl Round {
    fn now_tick(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }
    fn at(&self, tick: u64) -> Instant {
        self.epoch + Duration::from_millis(tick)
    }
    /// A random published handle.
    fn pick(&self, rng: &mut Rng) -> Option<(usize, Handle)> {
        let start = rng.below(IDS as u64) as usize;
        (0..IDS)
            .map(|k| (start + k) % IDS)
            .find_map(|id| self.handles[id].get().map(|h| (id, *h)))
    }
}

fn remote_thread(r: usize, round: &Round, remote: &Remote<usize>, seed: u64) -> Vec<Ev> {
    let mut rng = Rng(seed);
    let mut log = Vec::new();
    let mut next_id = PRESET + r * RANGE;
    for _ in 0..OPS_PER_REMOTE {
        let tick = round.now_tick() + rng.below(7);
        match rng.below(10) {
            0..=2 if next_id < PRESET + (r + 1) * RANGE => {
                let id = next_id;
                next_id += 1;
                match remote.schedule_at(0, round.at(tick), id) {
                    Ok(h) => {
                        log.push(Ev::Schedule { id, tick, ok: true });
                        round.handles[id].set(h).unwrap();
                    }
                    Err(e) => {
                        assert!(e.is_reserve_empty(), "unexpected {e:?}");
                        assert_eq!(e.into_inner(), id, "value handed back");
                        log.push(Ev::Schedule {
                            id,
                            tick,
                            ok: false,
                        });
                    }
                }
            }
            3..=7 => {
                if let Some((id, h)) = round.pick(&mut rng) {
                    let ok = remote.reset_at(h, round.at(tick));
                    log.push(Ev::Rearm { id, tick, ok });
                }
            }
            8 => {
                if let Some((id, h)) = round.pick(&mut rng) {
                    let ok = remote.cancel(h);
                    log.push(Ev::Cancel { id, ok });
                }
            }
            _ => remote.wake(0),
        }
        if rng.below(4) == 0 {
            std::thread::yield_now();
        }
    }
    // Release: the owner's Acquire load sees the round's last operations done.
    round.remotes_done.fetch_add(1, Ordering::Release);
    log
}

/// One local operation of the owner's (inside a handler or between turns).
fn owner_op(
    base: &mut Base<usize>,
    round: &Round,
    rng: &mut Rng,
    next_id: &mut usize,
    log: &mut Vec<Ev>,
) {
    let tick = round.now_tick() + rng.below(7);
    match rng.below(8) {
        0 if *next_id < IDS => {
            let id = *next_id;
            *next_id += 1;
            let h = base
                .schedule_at(round.at(tick), id)
                .expect("room on the base");
            log.push(Ev::Schedule { id, tick, ok: true });
            round.handles[id].set(h).unwrap();
        }
        1..=5 => {
            if let Some((id, h)) = round.pick(rng) {
                let ok = base.reset_at(h, round.at(tick));
                log.push(Ev::Rearm { id, tick, ok });
            }
        }
        6 => {
            if let Some((id, h)) = round.pick(rng) {
                let ok = base.cancel(h);
                log.push(Ev::Cancel { id, ok });
            }
        }
        _ => {}
    }
}

/// The deadline of the last successful schedule or re-arm of `id` in `log[..end]`.
fn last_deadline(log: &[Ev], id: usize) -> Option<u64> {
    log.iter().rev().find_map(|e| match *e {
        Ev::Schedule {
            id: i,
            tick,
            ok: true,
        }
        | Ev::Rearm {
            id: i,
            tick,
            ok: true,
        } if i == id => Some(tick),
        _ => None,
    })
}

fn check_round(
    n: usize,
    owner: &[Ev],
    remotes: &[Vec<Ev>],
    finals: &[Option<u64>],
    phase_b: &[Ev],
) {
    let mut accepted = vec![false; IDS];
    let mut cancels = vec![0u32; IDS];
    let mut fires = vec![0u32; IDS];
    for e in owner.iter().chain(remotes.iter().flatten()) {
        match *e {
            Ev::Schedule { id, ok, .. } => accepted[id] = ok,
            Ev::Cancel { id, ok: true } => cancels[id] += 1,
            _ => {}
        }
    }
    // Never early, in the racing part of the round.
    for (k, e) in owner.iter().enumerate() {
        let Ev::Fire { id, tick } = *e else { continue };
        fires[id] += 1;
        let mine = last_deadline(&owner[..k], id);
        let floor = remotes
            .iter()
            .filter_map(|log| last_deadline(log, id))
            .chain(mine)
            .min()
            .unwrap_or_else(|| panic!("round {n}: id {id} fired with no schedule"));
        assert!(
            tick >= floor,
            "round {n}: id {id} fired at tick {tick}, before every deadline left for it (earliest {floor})"
        );
    }
    // Never late, once the races are over.
    for e in phase_b {
        let Ev::Fire { id, tick } = *e else { continue };
        fires[id] += 1;
        assert_eq!(
            Some(tick),
            finals[id],
            "round {n}: id {id} re-armed last to {:?} fired at tick {tick}",
            finals[id]
        );
    }
    for id in 0..IDS {
        if !accepted[id] {
            assert_eq!(
                (fires[id], cancels[id]),
                (0, 0),
                "round {n}: id {id} never scheduled"
            );
            continue;
        }
        assert!(
            fires[id] + cancels[id] == 1,
            "round {n}: id {id} fired {} times, cancelled {} times",
            fires[id],
            cancels[id]
        );
        if cancels[id] == 1 {
            assert!(
                finals[id].is_none(),
                "round {n}: id {id} cancelled but re-armed at the end"
            );
        }
    }
}

#[test]
fn racing_threads_agree_with_a_naive_model() {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(512)
        .reserve_capacity(8);
    let (mut all, remote) = bases::<usize>(1, config).unwrap();
    let mut base = all.pop().unwrap();
    let epoch = base.now() - clock.elapsed();
    let began = Instant::now();
    for n in 0..ROUNDS {
        let round = Round {
            clock: clock.clone(),
            epoch,
            handles: (0..IDS).map(|_| OnceLock::new()).collect(),
            remotes_done: AtomicUsize::new(0),
        };
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (n as u64 + 1));
        let mut owner = Vec::new();
        let mut next_id = PRESET + REMOTES * RANGE;
        for id in 0..PRESET {
            let tick = round.now_tick() + 1 + rng.below(6);
            let h = base.schedule_at(round.at(tick), id).unwrap();
            owner.push(Ev::Schedule { id, tick, ok: true });
            round.handles[id].set(h).unwrap();
        }
        let remotes: Vec<Vec<Ev>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..REMOTES)
                .map(|r| {
                    let (round, remote) = (&round, &remote);
                    let seed = (n * REMOTES + r) as u64 * 0x1234_5678 + 99;
                    s.spawn(move || remote_thread(r, round, remote, seed))
                })
                .collect();
            // Acquire: pairs with the remote threads' Release.
            while round.remotes_done.load(Ordering::Acquire) < REMOTES {
                let mut log = std::mem::take(&mut owner);
                base.turn_with(|base, id| {
                    log.push(Ev::Fire {
                        id,
                        tick: round.now_tick(),
                    });
                    for _ in 0..rng.below(3) {
                        owner_op(base, &round, &mut rng, &mut next_id, &mut log);
                    }
                });
                owner = log;
                owner_op(&mut base, &round, &mut rng, &mut next_id, &mut owner);
                if rng.below(3) == 0 {
                    clock.advance(MS);
                }
                std::thread::yield_now();
            }
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // Which timers are still pending, from the logs alone.
        let mut pending = vec![false; IDS];
        let mut resolved = vec![false; IDS];
        for e in owner.iter().chain(remotes.iter().flatten()) {
            match *e {
                Ev::Schedule { id, ok: true, .. } => pending[id] = true,
                Ev::Cancel { id, ok: true } | Ev::Fire { id, .. } => resolved[id] = true,
                _ => {}
            }
        }
        for (p, r) in pending.iter_mut().zip(&resolved) {
            *p &= !r;
        }
        // The last word on every pending timer, from another thread: ordered after all others.
        let now = round.now_tick();
        let finals: Vec<Option<u64>> = (0..IDS)
            .map(|id| pending[id].then(|| now + 1 + (id % 5) as u64))
            .collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                for (id, tick) in finals.iter().enumerate() {
                    if let Some(tick) = *tick {
                        let h = *round.handles[id].get().unwrap();
                        assert!(
                            remote.reset_at(h, round.at(tick)),
                            "round {n}: id {id} pending"
                        );
                    }
                }
            });
        });
        let mut phase_b = Vec::new();
        let t = round.now_tick();
        base.turn(|id| phase_b.push(Ev::Fire { id, tick: t }));
        for _ in 0..6 {
            clock.advance(MS);
            let t = round.now_tick();
            base.turn(|id| phase_b.push(Ev::Fire { id, tick: t }));
        }
        check_round(n, &owner, &remotes, &finals, &phase_b);
        base.turn(|id| panic!("round {n}: id {id} fired after the round"));
        assert!(
            base.is_empty(),
            "round {n}: {} left in the wheel",
            base.len()
        );
        assert_eq!(
            base.free_slots(),
            base.slot_capacity(),
            "round {n}: slots leaked"
        );
        let s = base.stats();
        assert_eq!(
            s.scheduled,
            s.fired + s.cancelled_local + s.cancelled_remote,
            "round {n}: {s:?}"
        );
        assert!(
            !poll_readable(base.fd(), 0),
            "round {n}: fd readable with nothing to do"
        );
    }
    let s = base.stats();
    eprintln!("{ROUNDS} rounds in {:?}: {s:?}", began.elapsed());
    assert!(s.fired > 0 && s.cancelled_remote > 0 && s.cancelled_local > 0 && s.refiled > 0);
}

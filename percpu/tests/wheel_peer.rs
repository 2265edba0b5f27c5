//! One random workload run side by side on a base and on a plain `Mutex<tickwheel::Wheel>` peer
//! (Exact mode, 1 ms ticks, a manual clock), with every operation compared.
//!
//! The operations come from the owner (local schedule, re-arm, cancel, and the same from inside
//! handlers) and from three worker threads (remote schedule, re-arm, cancel), one at a time: each
//! finishes before the next starts, handed over by channels, so the base's cross-thread paths run
//! (notices, the reserve, the wake word, re-arms that send nothing) with no race left to decide
//! an outcome. With nothing racing, the two must agree on everything: each call's answer, and
//! which timers fire at which tick.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tickwheel::{TimerId, Wheel};
use tickwheel_percpu::{Base, ClockSource, Config, Handle, ManualClock, Mode, Remote, bases};

mod support;
use support::Rng;

const WORKERS: usize = 3;
const OPS: usize = 20_000;
const MS: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug)]
enum Op {
    Schedule { id: usize, tick: u64 },
    Rearm { h: Handle, tick: u64 },
    Cancel { h: Handle },
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Scheduled(Option<Handle>),
    Done(bool),
}

impl Answer {
    /// The handle a schedule was given.
    fn handle(&self) -> Option<Handle> {
        match *self {
            Self::Scheduled(h) => h,
            Self::Done(_) => None,
        }
    }
}

/// The peer: one wheel behind a lock, and the maps from the base's handles and payloads to its
/// ids.
#[derive(Default)]
struct Peer {
    wheel: Mutex<Wheel<usize>>,
    ids: Mutex<HashMap<Handle, TimerId>>,
    by_payload: Mutex<HashMap<usize, TimerId>>,
}

impl Peer {
    fn id_of(&self, h: Handle) -> TimerId {
        self.ids.lock().unwrap()[&h]
    }

    /// The base fired `payload` at `now`: it must be pending and due on the peer, which fires it
    /// too.
    fn fired(&self, payload: usize, now: u64) {
        let t = self.by_payload.lock().unwrap()[&payload];
        let mut wheel = self.wheel.lock().unwrap();
        let expiry = wheel.expiry(t);
        assert!(
            expiry.is_some_and(|e| e <= now),
            "{payload} fired at tick {now}; on the peer its expiry is {expiry:?}"
        );
        wheel.cancel(t);
    }

    /// After a turn at `now`, nothing may be due on the peer.
    fn nothing_due(&self, now: u64) {
        let left = self.wheel.lock().unwrap().poll(now);
        assert!(
            left.is_none(),
            "{left:?} due at tick {now} but not fired by the base"
        );
    }

    /// The peer's answer to `op`; `handle` is the base's handle for a schedule.
    fn apply(&self, op: Op, handle: Option<Handle>) -> Answer {
        match op {
            Op::Schedule { id, tick } => {
                let t = self.wheel.lock().unwrap().insert(tick, id).unwrap();
                let h = handle.expect("the peer never refuses: the base must not either");
                self.ids.lock().unwrap().insert(h, t);
                self.by_payload.lock().unwrap().insert(id, t);
                Answer::Scheduled(Some(h))
            }
            Op::Rearm { h, tick } => {
                let t = self.id_of(h);
                Answer::Done(self.wheel.lock().unwrap().reset(t, tick))
            }
            Op::Cancel { h } => {
                let t = self.id_of(h);
                Answer::Done(self.wheel.lock().unwrap().cancel(t).is_some())
            }
        }
    }
}

fn on_remote(remote: &Remote<usize>, epoch: Instant, op: Op) -> Answer {
    let at = |tick: u64| epoch + Duration::from_millis(tick);
    match op {
        Op::Schedule { id, tick } => Answer::Scheduled(remote.schedule_at(0, at(tick), id).ok()),
        Op::Rearm { h, tick } => Answer::Done(remote.reset_at(h, at(tick))),
        Op::Cancel { h } => Answer::Done(remote.cancel(h)),
    }
}

fn on_base(base: &mut Base<usize>, epoch: Instant, op: Op) -> Answer {
    let at = |tick: u64| epoch + Duration::from_millis(tick);
    match op {
        Op::Schedule { id, tick } => Answer::Scheduled(base.schedule_at(at(tick), id).ok()),
        Op::Rearm { h, tick } => Answer::Done(base.reset_at(h, at(tick))),
        Op::Cancel { h } => Answer::Done(base.cancel(h)),
    }
}

/// A random operation: a new timer now and then, else a re-arm or cancel of a known handle
/// (often one that has fired or been cancelled: a stale handle must be answered alike).
fn random_op(rng: &mut Rng, now: u64, next_id: &mut usize, known: &[Handle]) -> Op {
    let tick = now + rng.below(8);
    // Mostly recent handles (often still pending), sometimes any (mostly stale).
    let pick = |rng: &mut Rng| {
        let from = if rng.below(4) == 0 {
            0
        } else {
            known.len().saturating_sub(24)
        };
        known[from + rng.below((known.len() - from) as u64) as usize]
    };
    match rng.below(10) {
        _ if known.is_empty() => {}
        0..=4 => return Op::Rearm { h: pick(rng), tick },
        5..=6 => return Op::Cancel { h: pick(rng) },
        _ => {}
    }
    *next_id += 1;
    Op::Schedule {
        id: *next_id - 1,
        tick,
    }
}

#[test]
fn base_and_locked_wheel_agree_op_for_op() {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(4096)
        .reserve_capacity(64);
    let (mut all, remote) = bases::<usize>(1, config).unwrap();
    let mut base = all.pop().unwrap();
    let epoch = base.now();
    let peer = Peer {
        wheel: Mutex::new(Wheel::new(tickwheel::Mode::Exact)),
        ..Peer::default()
    };
    let mut rng = Rng(0xC0FF_EE00_D15E_A5E5);
    let mut next_id = 0;
    let mut known: Vec<Handle> = Vec::new();
    let mut fired_total = 0;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (op_tx, op_rx) = mpsc::channel::<Op>();
                let (answer_tx, answer_rx) = mpsc::channel::<Answer>();
                let remote = remote.clone();
                s.spawn(move || {
                    for op in op_rx {
                        answer_tx.send(on_remote(&remote, epoch, op)).unwrap();
                    }
                });
                (op_tx, answer_rx)
            })
            .collect();
        for n in 0..OPS {
            let now = clock.elapsed().as_millis() as u64;
            let op = random_op(&mut rng, now, &mut next_id, &known);
            let who = rng.below(WORKERS as u64 + 1) as usize;
            let answer = if who == WORKERS {
                on_base(&mut base, epoch, op)
            } else {
                workers[who].0.send(op).unwrap();
                workers[who].1.recv().unwrap()
            };
            let handle = answer.handle();
            let want = peer.apply(op, handle);
            assert_eq!(answer, want, "op {n}: {op:?} by {who}");
            known.extend(handle);
            if rng.below(3) == 0 {
                if rng.below(2) == 0 {
                    clock.advance(MS);
                }
                let now = clock.elapsed().as_millis() as u64;
                // Handlers act too: each fire may re-arm or cancel a known timer, or schedule
                // one; the peer fires the same timer and does the same operation at that point.
                fired_total += base.turn_with(|base, id| {
                    peer.fired(id, now);
                    if rng.below(2) == 0 {
                        let op = random_op(&mut rng, now, &mut next_id, &known);
                        let answer = on_base(base, epoch, op);
                        let handle = answer.handle();
                        assert_eq!(answer, peer.apply(op, handle), "op {n}: handler's {op:?}");
                        known.extend(handle);
                    }
                });
                peer.nothing_due(now);
            }
        }
        drop(workers);
    });
    // Drain both.
    for _ in 0..10 {
        clock.advance(MS);
        let now = clock.elapsed().as_millis() as u64;
        fired_total += base.turn(|id| peer.fired(id, now));
        peer.nothing_due(now);
    }
    assert!(base.is_empty() && peer.wheel.lock().unwrap().is_empty());
    assert_eq!(base.free_slots(), base.slot_capacity());
    eprintln!(
        "{OPS} ops, {next_id} timers, {fired_total} fired: {:?}",
        base.stats()
    );
}

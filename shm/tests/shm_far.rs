//! The owner's far set (`shm/src/index.rs`) attacked from the public API, against a naive model
//! of the pending timers. An arming due at or after the owner's *horizon* (the clock plus
//! `SPAN` ticks at the horizon's last move) is kept out of the wheel, one bit a slot, until a
//! turn at or past the horizon moves it and files the far armings now due before it. Every test
//! here drives a set on a manual clock through a [`Harness`] that checks, at every turn:
//!
//! 1. never early: a payload fires only in a turn whose clock is at or after its deadline;
//! 2. never late: in Exact mode every pending timer due at or before the clock fires in the
//!    first turn made at that clock (unless cancelled first). A Coarse wheel rounds an arming up
//!    to a granule of the delay it is filed with (`tickwheel`'s "Coarse" doc), so there the
//!    harness holds each timer to its granule from the wheel's clock when the model says the
//!    owner filed it: at the turn that applied it (from the last turn's clock), or at the turn
//!    that moved the horizon past it (from that turn's clock), or at a takeover. Every filing is
//!    within `SPAN` of the wheel's clock, so no timer is ever more than 511 ticks late;
//! 3. exactly once, never after a cancel that returned true; a cancel of a fired or cancelled
//!    timer returns false, and so does a cancel of the timer being fired, from its handler;
//! 4. nothing lost across clock steps of every size (0, 1, to the horizon, one before and one
//!    after it, `SPAN - 1`, `SPAN`, `SPAN + 1`, 10^6, to near and to `u64::MAX`), deadlines in the
//!    past, near, at the horizon, far (up to 10^6 ahead) and near `u64::MAX`, slots reused with a
//!    new generation (near then far, far then near, through the slot a cancelling client keeps),
//!    tens of thousands of timers, an owner killed and taken over mid-way (between a clock move
//!    and its turn too), schedulers killed, and `recover()` at random points;
//! 5. `next_expiry()` is never later than the earliest pending deadline (in Coarse, than the
//!    tick the model holds that timer to) after any turn, takeover or recovery.
//!
//! Randomized tests use a fixed list of seeds (a splitmix64 generator); a failure prints its
//! seed, and `SHM_FAR_SEED=<seed>` runs that one alone. Threads stand in for processes:
//! `attach_as` pids, judged alive by a probe the test controls (the crate's `test-hooks`, which
//! its dev-dependency on itself turns on for every test target).

#![cfg(not(loom))]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};

use tickwheel_shm::{Advancer, Client, Config, Handle, Mode, Segment};

/// `shm/src/index.rs`'s `SPAN`: a turn at or past the horizon moves it this far past its clock.
const SPAN: u64 = 1 << 12;
/// How late a Coarse timer may fire at most: every arming is filed within `SPAN` ticks of the
/// wheel's clock, where a Coarse granule is at most 512 ticks.
const COARSE_SLACK: u64 = 511;
const MAX: u64 = u64::MAX;
/// Pids: owners count up from here (one more at each takeover), other processes from `CLIENTS`.
const OWNERS: u32 = 1_000;
const CLIENTS: u32 = 100_000;

/// The fixed seeds, or the one `SHM_FAR_SEED` names.
fn seeds() -> Vec<u64> {
    match std::env::var("SHM_FAR_SEED") {
        Ok(s) => {
            let s = s.trim();
            let seed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            vec![seed.expect("SHM_FAR_SEED: a number")]
        }
        Err(_) => vec![0x5eed_0001, 0xdead_beef_cafe_f00d, 42],
    }
}

/// Runs `f(seed)` for each seed; names the seed of a failure.
fn for_each_seed(name: &str, f: impl Fn(u64)) {
    for seed in seeds() {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(seed))) {
            eprintln!("{name}: FAILED with seed {seed:#x} (rerun with SHM_FAR_SEED={seed:#x})");
            resume_unwind(e);
        }
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `lo..=hi` (`hi - lo` below `u64::MAX`).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn slot(h: Handle) -> u32 {
    (h.to_u128() >> 32) as u32
}

fn generation(h: Handle) -> u32 {
    h.to_u128() as u32
}

/// A Coarse wheel's granule for a timer `delay` ticks after its clock: `8^n` for the lowest
/// level `n` with `delay < 63 * 8^n`.
fn granule(delay: u64) -> u64 {
    let mut g = 1u64;
    while delay >= 63 * g {
        g *= 8;
    }
    g
}

/// Where the model says the owner holds a pending timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Scheduled between turns, its mark not yet taken.
    Unapplied,
    /// Scheduled from a handler during a turn: applied by a later turn (or by this turn's look at
    /// the far set, if its slot had a far bit); not yet held to any tick.
    MidTurn,
    /// In the far set: due at or after the horizon.
    Far,
    /// In the wheel.
    Filed,
}

#[derive(Clone, Copy, Debug)]
struct Timer {
    deadline: u64,
    /// The clock at or after which a turn must have fired it (Exact: its deadline).
    must_by: u64,
    handle: Handle,
    state: State,
    /// Its index in `Model::order`.
    pos: usize,
}

/// The naive model: every pending timer, and what the owner's index should look like.
struct Model {
    seed: u64,
    exact: bool,
    clock: u64,
    /// The clock of the owner's last turn (its wheel's clock), or of its claim.
    wheel_clock: u64,
    horizon: u64,
    timers: HashMap<u64, Timer>,
    /// Payloads of the pending timers, for picking one at random.
    order: Vec<u64>,
    /// `(must_by, payload)` of the pending timers the owner has applied (`Far` or `Filed`).
    by_must: BTreeSet<(u64, u64)>,
    /// `(deadline, payload)` of the `Far` timers.
    far: BTreeSet<(u64, u64)>,
    unapplied: Vec<u64>,
    mid_turn: Vec<u64>,
    /// Fired or cancelled timers and their handles.
    done: HashMap<u64, Handle>,
    done_list: Vec<u64>,
    /// The latest generation handed out for each slot.
    slot_gen: HashMap<u32, u32>,
    /// The pending timer in each slot.
    live_slot: HashMap<u32, u64>,
    /// The slot each client keeps from its last winning cancel: `(slot, generation)`; client 0
    /// is the owner's (its advancer's client shares it).
    kept: Vec<Option<(u32, u32)>>,
    next_payload: u64,
    scheduled: u64,
    cancelled: u64,
    fired: u64,
    /// What the handler of the turn in progress fired.
    fired_this_turn: usize,
    turns: u64,
    /// Horizon moves, far armings the model filed at one and left pending, and far armings
    /// fired at once by the move.
    moves: u64,
    far_filed: u64,
    far_due_at_move: u64,
    /// No schedule since the owner last applied the marks (a turn's start, a recovery).
    all_applied: bool,
}

impl Model {
    fn new(seed: u64, mode: Mode, clients: usize) -> Model {
        Model {
            seed,
            exact: mode == Mode::Exact,
            clock: 0,
            wheel_clock: 0,
            horizon: SPAN,
            timers: HashMap::new(),
            order: Vec::new(),
            by_must: BTreeSet::new(),
            far: BTreeSet::new(),
            unapplied: Vec::new(),
            mid_turn: Vec::new(),
            done: HashMap::new(),
            done_list: Vec::new(),
            slot_gen: HashMap::new(),
            live_slot: HashMap::new(),
            kept: vec![None; clients + 1],
            next_payload: 1,
            scheduled: 0,
            cancelled: 0,
            fired: 0,
            fired_this_turn: 0,
            turns: 0,
            moves: 0,
            far_filed: 0,
            far_due_at_move: 0,
            all_applied: true,
        }
    }

    fn ctx(&self) -> String {
        format!(
            "seed {:#x}, {} mode, turn {}, clock {}, horizon {}, {} pending",
            self.seed,
            if self.exact { "Exact" } else { "Coarse" },
            self.turns,
            self.clock,
            self.horizon,
            self.timers.len()
        )
    }

    /// The tick a timer due at `deadline`, filed in the wheel while its clock reads `at`, must
    /// have fired by.
    fn must_by(&self, deadline: u64, at: u64) -> u64 {
        if self.exact || deadline <= at {
            return deadline;
        }
        let g = granule(deadline - at);
        assert!(
            g <= COARSE_SLACK + 1,
            "{}: a filing {} ticks ahead",
            self.ctx(),
            deadline - at
        );
        deadline.saturating_add(g - 1)
    }

    /// The owner applies pending timer `p` with its wheel's clock at `at`: far if due at or
    /// after the horizon (none is far at a horizon of `u64::MAX`), otherwise in the wheel.
    fn file(&mut self, p: u64, at: u64) {
        let t = self.timers[&p];
        if matches!(t.state, State::Far | State::Filed) {
            self.by_must.remove(&(t.must_by, p));
            self.far.remove(&(t.deadline, p));
        }
        let (state, must_by) = if self.horizon != MAX && t.deadline >= self.horizon {
            self.far.insert((t.deadline, p));
            (State::Far, t.deadline)
        } else {
            (State::Filed, self.must_by(t.deadline, at))
        };
        self.by_must.insert((must_by, p));
        let t = self.timers.get_mut(&p).unwrap();
        t.state = state;
        t.must_by = must_by;
    }

    /// The owner takes the marks (a turn's start, a recovery).
    fn apply_unapplied(&mut self) {
        for p in std::mem::take(&mut self.unapplied) {
            if self
                .timers
                .get(&p)
                .is_some_and(|t| t.state == State::Unapplied)
            {
                self.file(p, self.wheel_clock);
            }
        }
        self.all_applied = true;
    }

    /// Schedules through `client` (model client `ci`) and checks the handle: a slot kept by the
    /// client comes back, at the generation after its cancelled arming; a slot's generations
    /// only grow; no slot holds two pending timers.
    fn schedule(&mut self, client: &Client, ci: usize, deadline: u64, state: State) -> u64 {
        let p = self.next_payload;
        self.next_payload += 1;
        let h = client
            .schedule_at(deadline, p)
            .unwrap_or_else(|e| panic!("{}: schedule of {p} at {deadline}: {e:?}", self.ctx()));
        let (s, g) = (slot(h), generation(h));
        if let Some(kept) = self.kept[ci].take() {
            assert_eq!(
                (s, g),
                kept,
                "{}: client {ci} kept slot {kept:?} from its cancel, its schedule got {h:?}",
                self.ctx()
            );
        }
        if let Some(prev) = self.slot_gen.insert(s, g) {
            assert!(
                g > prev,
                "{}: slot {s} handed out at generation {g} after {prev}",
                self.ctx()
            );
        }
        if let Some(other) = self.live_slot.insert(s, p) {
            panic!(
                "{}: slot {s} handed to {p} while {other} is pending in it",
                self.ctx()
            );
        }
        self.timers.insert(
            p,
            Timer {
                deadline,
                must_by: deadline,
                handle: h,
                state,
                pos: self.order.len(),
            },
        );
        self.order.push(p);
        match state {
            State::Unapplied => {
                self.unapplied.push(p);
                self.all_applied = false;
            }
            State::MidTurn => self.mid_turn.push(p),
            State::Far | State::Filed => unreachable!(),
        }
        self.scheduled += 1;
        p
    }

    fn remove_pending(&mut self, p: u64) -> Timer {
        let t = self.timers.remove(&p).unwrap();
        let last = self.order.pop().unwrap();
        if last != p {
            self.order[t.pos] = last;
            self.timers.get_mut(&last).unwrap().pos = t.pos;
        }
        if matches!(t.state, State::Far | State::Filed) {
            self.by_must.remove(&(t.must_by, p));
            self.far.remove(&(t.deadline, p));
        }
        self.live_slot.remove(&slot(t.handle));
        self.done.insert(p, t.handle);
        self.done_list.push(p);
        t
    }

    /// Cancels pending `p` through `client` (model client `ci`): it must win.
    fn cancel(&mut self, client: &Client, ci: usize, p: u64) {
        let h = self.timers[&p].handle;
        assert!(
            client.cancel(h),
            "{}: cancel of pending {p} ({:?}) by client {ci} returned false",
            self.ctx(),
            self.timers[&p]
        );
        self.remove_pending(p);
        self.cancelled += 1;
        if self.kept[ci].is_none() {
            self.kept[ci] = Some((slot(h), generation(h).wrapping_add(1)));
        }
    }

    /// Cancels `p`, fired or cancelled already: it must lose.
    fn cancel_done(&self, client: &Client, p: u64) {
        let h = self.done[&p];
        assert!(
            !client.cancel(h),
            "{}: cancel of {p} ({h:?}), fired or cancelled already, returned true",
            self.ctx()
        );
    }

    fn random_pending(&self, rng: &mut Rng) -> Option<u64> {
        (!self.order.is_empty()).then(|| self.order[rng.below(self.order.len() as u64) as usize])
    }

    fn random_done(&self, rng: &mut Rng) -> Option<u64> {
        (!self.done_list.is_empty())
            .then(|| self.done_list[rng.below(self.done_list.len() as u64) as usize])
    }

    /// A deadline from every region: the past, the clock, near, about the horizon, about
    /// `SPAN` ahead, far, near `u64::MAX`.
    fn pick_deadline(&self, rng: &mut Rng) -> u64 {
        let (c, h) = (self.clock, self.horizon);
        match rng.below(22) {
            0 => c.saturating_sub(rng.below(3_000)),
            1 => c,
            2..=5 => c.saturating_add(rng.range(1, SPAN - 1)),
            6 => h.saturating_sub(1),
            7 => h,
            8 => h.saturating_add(1),
            9 => c.saturating_add(SPAN - 1),
            10 => c.saturating_add(SPAN),
            11 => c.saturating_add(SPAN + 1),
            12..=14 => c.saturating_add(rng.range(SPAN, 1_000_000)),
            15 => c.saturating_add(rng.range(1, 3 * SPAN)),
            16 => MAX - rng.below(3),
            17 => MAX - rng.below(3 * SPAN),
            18 => c.saturating_add(2 * SPAN),
            19 => h.saturating_add(SPAN),
            20 => h.saturating_add(rng.below(SPAN)),
            _ => c.saturating_add(rng.range(1, 64)),
        }
    }

    /// A near deadline (filed in the wheel when applied) or a far one.
    fn pick_near_or_far(&self, rng: &mut Rng, far: bool) -> u64 {
        let c = self.clock;
        if far {
            match rng.below(4) {
                0 => self.horizon.max(c.saturating_add(SPAN)),
                1 => MAX - rng.below(2),
                _ => c.saturating_add(rng.range(SPAN, 1_000_000)),
            }
        } else {
            c.saturating_add(rng.below(self.horizon.saturating_sub(c).clamp(1, SPAN)))
        }
    }

    /// The handler of a turn at `self.clock` got `p`.
    fn on_fire(&mut self, p: u64) -> Timer {
        let c = self.clock;
        let Some(&t) = self.timers.get(&p) else {
            match self.done.get(&p) {
                Some(h) => panic!(
                    "{}: {p} ({h:?}) fired after it fired or was cancelled",
                    self.ctx()
                ),
                None => panic!("{}: {p} fired, never scheduled", self.ctx()),
            }
        };
        assert!(
            t.deadline <= c,
            "{}: {p} fired early: due {}, {t:?}",
            self.ctx(),
            t.deadline
        );
        assert!(
            t.state != State::Unapplied,
            "{}: {p} fired before its turn took its mark",
            self.ctx()
        );
        self.remove_pending(p);
        self.fired += 1;
        self.fired_this_turn += 1;
        if t.state == State::Far {
            self.far_due_at_move += 1;
        }
        t
    }

    /// After the owner's turn at `self.clock` (which fired `fired`): moves the model's horizon
    /// as the turn did, then checks that nothing applied is overdue, that the owner's
    /// `next_expiry` is no later than the earliest pending timer, and that the index holds at
    /// least every applied timer.
    fn after_turn(&mut self, adv: &Advancer, fired: usize) {
        let c = self.clock;
        assert_eq!(
            fired,
            self.fired_this_turn,
            "{}: turn() returned {fired}, its handler ran {} times",
            self.ctx(),
            self.fired_this_turn
        );
        self.fired_this_turn = 0;
        if c >= self.horizon {
            self.horizon = c.saturating_add(SPAN);
            let now_due: Vec<u64> = if self.horizon == MAX {
                self.far.iter().map(|&(_, p)| p).collect()
            } else {
                self.far
                    .range(..(self.horizon, 0))
                    .map(|&(_, p)| p)
                    .collect()
            };
            self.moves += 1;
            for p in now_due {
                self.far_filed += 1;
                self.file(p, c);
            }
        }
        self.wheel_clock = c;
        self.check_nothing_overdue();
        self.check_next_expiry(adv, "a turn");
        assert!(
            adv.indexed() >= self.by_must.len(),
            "{}: the index holds {} entries and far bits, {} applied timers are pending",
            self.ctx(),
            adv.indexed(),
            self.by_must.len()
        );
        assert!(
            adv.indexed() <= self.slot_gen.len(),
            "{}: the index holds {} entries and far bits, more than the {} slots ever used",
            self.ctx(),
            adv.indexed(),
            self.slot_gen.len()
        );
        let mid = !self.mid_turn.is_empty();
        for p in std::mem::take(&mut self.mid_turn) {
            if self
                .timers
                .get(&p)
                .is_some_and(|t| t.state == State::MidTurn)
            {
                self.file(p, c);
            }
        }
        self.all_applied = !mid;
        self.turns += 1;
    }

    fn check_nothing_overdue(&self) {
        if let Some(&(must_by, p)) = self.by_must.first() {
            let t = self.timers[&p];
            assert!(
                must_by > self.clock,
                "{}: {p} still pending after the turn at {}: late (due {}, owed by {must_by}, \
                 {t:?})",
                self.ctx(),
                self.clock,
                t.deadline
            );
        }
    }

    /// `next_expiry` is no later than the earliest applied pending timer's tick. After a turn
    /// that is a deadline after the clock; after a recovery or a takeover, which may index a
    /// timer whose deadline the clock has passed, the wheel names no tick before its own clock
    /// (the timer is due at once), so there the bound is the later of the two.
    fn check_next_expiry(&self, adv: &Advancer, after: &str) {
        let ne = adv.next_expiry();
        if let Some(&(must_by, p)) = self.by_must.first() {
            let t = self.timers[&p];
            let bound = if after == "a turn" {
                must_by
            } else {
                must_by.max(self.wheel_clock)
            };
            assert!(
                ne.is_some_and(|ne| ne <= bound),
                "{}: after {after}, next_expiry {ne:?} is later than pending {p} (due {}, owed by \
                 {must_by}, {t:?})",
                self.ctx(),
                t.deadline
            );
        }
    }

    /// A new owner took over at the clock: a fresh index, every pending timer filed from it.
    fn take_over(&mut self) {
        self.horizon = self.clock.saturating_add(SPAN);
        self.wheel_clock = self.clock;
        self.unapplied.clear();
        for p in self.order.clone() {
            self.file(p, self.clock);
        }
        self.all_applied = true;
        // The dead owner's kept slot waits for recovery (the takeover's), not for its schedule.
        self.kept[0] = None;
    }
}

/// A set on a manual clock, its owner, its other processes, and the model, checked at every
/// step.
struct Harness {
    rng: Rng,
    segment: Segment,
    dead: Arc<Mutex<HashSet<u32>>>,
    next_pid: u32,
    owner: Option<(u32, Client)>,
    adv: Option<Advancer>,
    clients: Vec<(u32, Client)>,
    m: Model,
    capacity: usize,
    /// Processes killed (each may leave a kept slot until a recovery).
    kills: usize,
    killed_since_recovery: bool,
}

fn client_of<'a>(adv: &'a Option<Advancer>, clients: &'a [(u32, Client)], ci: usize) -> &'a Client {
    match ci {
        0 => adv.as_ref().unwrap().client(),
        i => &clients[i - 1].1,
    }
}

impl Harness {
    /// A set of `capacity` slots in `mode` with an owner and `clients` other processes.
    fn new(seed: u64, mode: Mode, capacity: usize, clients: usize) -> Harness {
        let dead = Arc::new(Mutex::new(HashSet::new()));
        let d = dead.clone();
        let segment = Segment::anonymous(&Config::new(capacity).mode(mode).manual_clock())
            .unwrap()
            .with_liveness_probe(Arc::new(move |pid| !d.lock().unwrap().contains(&pid)));
        let owner = segment.attach_as(OWNERS).unwrap();
        let adv = owner.advancer().unwrap();
        let clients: Vec<(u32, Client)> = (0..clients as u32)
            .map(|i| (CLIENTS + i, segment.attach_as(CLIENTS + i).unwrap()))
            .collect();
        let m = Model::new(seed, mode, clients.len());
        Harness {
            rng: Rng(seed),
            segment,
            dead,
            next_pid: CLIENTS + 10_000,
            owner: Some((OWNERS, owner)),
            adv: Some(adv),
            clients,
            m,
            capacity,
            kills: 0,
            killed_since_recovery: false,
        }
    }

    fn adv(&mut self) -> &mut Advancer {
        self.adv.as_mut().unwrap()
    }

    fn client_count(&self) -> usize {
        self.clients.len() + 1
    }

    fn schedule(&mut self, ci: usize, deadline: u64) -> u64 {
        let c = client_of(&self.adv, &self.clients, ci);
        self.m.schedule(c, ci, deadline, State::Unapplied)
    }

    fn cancel(&mut self, ci: usize, p: u64) {
        let c = client_of(&self.adv, &self.clients, ci);
        self.m.cancel(c, ci, p);
    }

    fn cancel_done(&self, ci: usize, p: u64) {
        self.m
            .cancel_done(client_of(&self.adv, &self.clients, ci), p);
    }

    fn advance_to(&mut self, tick: u64) {
        assert!(self.adv().advance_to(tick));
        self.m.clock = self.m.clock.max(tick);
        assert_eq!(self.adv().client().now(), self.m.clock);
    }

    /// One turn, checked. With `ops`, the handler also cancels the timer it is handed (which
    /// must fail), cancels other pending timers (which must never fire) and schedules new ones,
    /// through the other processes.
    fn turn(&mut self, ops: bool) {
        self.turn_with(|m, clients, rng, p, t| {
            if !ops || clients.is_empty() {
                return;
            }
            let ci = 1 + rng.below(clients.len() as u64) as usize;
            let client = &clients[ci - 1].1;
            if rng.one_in(4) {
                assert!(
                    !client.cancel(t.handle),
                    "{}: {p}'s cancel from its own handler returned true",
                    m.ctx()
                );
            }
            if rng.one_in(3)
                && let Some(q) = m.random_pending(rng)
            {
                m.cancel(client, ci, q);
            }
            if rng.one_in(3) {
                let d = m.pick_deadline(rng);
                m.schedule(client, ci, d, State::MidTurn);
            }
        });
    }

    /// One turn, checked, with `f(model, clients, rng, payload, timer)` run in the handler after
    /// the model has taken each fire (schedules there are `State::MidTurn`).
    fn turn_with(&mut self, mut f: impl FnMut(&mut Model, &[(u32, Client)], &mut Rng, u64, Timer)) {
        self.m.apply_unapplied();
        let Harness {
            rng,
            adv,
            clients,
            m,
            ..
        } = self;
        let adv = adv.as_mut().unwrap();
        let fired = adv.turn(|p| {
            let t = m.on_fire(p);
            f(m, clients, rng, p, t);
        });
        let adv = self.adv.as_ref().unwrap();
        self.m.after_turn(adv, fired);
    }

    fn advance_and_turn(&mut self, tick: u64) {
        self.advance_to(tick);
        self.turn(false);
    }

    /// `recover()`: indexes nothing new right after a turn with no schedule since, reclaims
    /// nothing while nobody died, finds no fire begun.
    fn recover(&mut self) {
        let all_applied = self.m.all_applied;
        let r = self.adv().recover();
        self.m.apply_unapplied();
        let ctx = self.m.ctx();
        if all_applied {
            assert_eq!(
                r.indexed, 0,
                "{ctx}: recovery found unindexed armed slots: {r:?}"
            );
        }
        if !self.killed_since_recovery {
            assert_eq!(
                r.reclaimed, 0,
                "{ctx}: recovery reclaimed with nobody dead: {r:?}"
            );
        }
        assert_eq!(r.interrupted, 0, "{ctx}: {r:?}");
        self.killed_since_recovery = false;
        self.m
            .check_next_expiry(self.adv.as_ref().unwrap(), "a recovery");
    }

    fn fresh_pid(&mut self) -> u32 {
        self.next_pid += 1;
        self.next_pid
    }

    /// The owner is killed (its advancer and its client dropped as a killed process leaves
    /// them) and a new process takes advancing over.
    fn take_over(&mut self) {
        self.adv.take().unwrap().crash();
        let (pid, owner) = self.owner.take().unwrap();
        owner.crash();
        self.dead.lock().unwrap().insert(pid);
        self.kills += 1;
        let pid = self.fresh_pid();
        let owner = self.segment.attach_as(pid).unwrap();
        let adv = owner
            .advancer()
            .unwrap_or_else(|e| panic!("{}: take over from a dead owner: {e:?}", self.m.ctx()));
        self.m.take_over();
        self.m.check_next_expiry(&adv, "a takeover");
        self.adv = Some(adv);
        self.owner = Some((pid, owner));
        // Its recovery ran.
        self.killed_since_recovery = false;
    }

    /// Client `i` (of `clients`) is killed; a fresh process takes its place.
    fn kill_client(&mut self, i: usize) {
        let pid = self.fresh_pid();
        let fresh = self.segment.attach_as(pid).unwrap();
        let (old_pid, old) = std::mem::replace(&mut self.clients[i], (pid, fresh));
        old.crash();
        self.dead.lock().unwrap().insert(old_pid);
        self.m.kept[i + 1] = None;
        self.kills += 1;
        self.killed_since_recovery = true;
    }

    /// A clock at or after the current one: steps of every size, and (`late`) jumps to near
    /// `u64::MAX`.
    fn pick_clock(&mut self, late: bool, small: bool) -> u64 {
        let (c, h) = (self.m.clock, self.m.horizon);
        let to_h = h.saturating_sub(c);
        let step = match self.rng.below(18) {
            10 | 11 if small => self.rng.range(SPAN, 3 * SPAN),
            0 => 0,
            1 | 2 => 1,
            3 => to_h,
            4 => to_h.saturating_sub(1),
            5 => to_h.saturating_add(1),
            6 => SPAN,
            7 => SPAN + 1,
            8 => SPAN - 1,
            9 => self.rng.range(2, SPAN),
            10 => self.rng.range(SPAN, 100_000),
            11 => 1_000_000,
            12 => self.rng.range(1, 64),
            13 => self.rng.range(64, 600),
            14 => 2 * SPAN,
            15 if late && self.rng.one_in(6) => {
                let back = [3 * SPAN, 2 * SPAN + 1, SPAN + 1, SPAN, SPAN - 1, 2, 1, 0];
                let at = MAX - back[self.rng.below(back.len() as u64) as usize];
                return at.max(c);
            }
            _ => self.rng.range(1, 5_000),
        };
        c.saturating_add(step)
    }

    /// One random step: schedules, a cancel and re-schedule through one client (its kept slot,
    /// near then far or far then near), cancels of pending timers and of fired or cancelled
    /// ones, maybe a recovery, a killed scheduler, a takeover (before or after the clock moves),
    /// then a clock move and a turn.
    fn random_step(&mut self, takeovers: bool, late: bool, small: bool) {
        let n = self.client_count() as u64;
        for _ in 0..self.rng.below(5) {
            let ci = self.rng.below(n) as usize;
            let d = self.m.pick_deadline(&mut self.rng);
            self.schedule(ci, d);
        }
        if self.rng.one_in(3)
            && let Some(p) = self.m.random_pending(&mut self.rng)
        {
            let ci = self.rng.below(n) as usize;
            let was_far = self.m.timers[&p].deadline >= self.m.clock.saturating_add(SPAN);
            self.cancel(ci, p);
            let d = self.m.pick_near_or_far(&mut self.rng, !was_far);
            self.schedule(ci, d);
        }
        for _ in 0..self.rng.below(3) {
            if let Some(p) = self.m.random_pending(&mut self.rng) {
                let ci = self.rng.below(n) as usize;
                self.cancel(ci, p);
            }
        }
        if self.rng.one_in(4)
            && let Some(p) = self.m.random_done(&mut self.rng)
        {
            let ci = self.rng.below(n) as usize;
            self.cancel_done(ci, p);
        }
        if self.rng.one_in(20) {
            self.recover();
        }
        if !self.clients.is_empty() && self.rng.one_in(60) {
            let i = self.rng.below(self.clients.len() as u64) as usize;
            self.kill_client(i);
        }
        if takeovers && self.rng.one_in(150) {
            self.take_over();
        }
        let t = self.pick_clock(late, small);
        self.advance_to(t);
        if takeovers && self.rng.one_in(150) {
            self.take_over();
        }
        if self.rng.one_in(30) {
            // Between the clock's move and its turn.
            self.recover();
        }
        let ops = self.rng.one_in(3);
        self.turn(ops);
    }

    /// Walks the clock to `u64::MAX` through the ticks about the saturated horizon, scheduling
    /// at each stop, then checks that everything fired and that the counters agree.
    fn finish(&mut self) {
        let stops = [
            MAX - 3 * SPAN,
            MAX - 2 * SPAN - 1,
            MAX - SPAN - 2,
            MAX - SPAN - 1,
            MAX - SPAN,
            MAX - SPAN + 1,
            MAX - 3,
            MAX - 2,
            MAX - 1,
            MAX,
        ];
        for at in stops {
            if at <= self.m.clock {
                continue;
            }
            // Room for them whatever the clients keep or the dead left.
            let room = self.m.timers.len() + 2 * self.client_count() + self.kills + 8;
            if room < self.capacity {
                for d in [
                    at,
                    at.saturating_add(1),
                    at.saturating_add(SPAN),
                    MAX - 1,
                    MAX,
                ] {
                    let ci = self.rng.below(self.client_count() as u64) as usize;
                    self.schedule(ci, d);
                }
            }
            self.advance_and_turn(at);
        }
        self.advance_and_turn(MAX);
        self.turn(false);
        let ctx = self.m.ctx();
        assert!(
            self.m.timers.is_empty(),
            "{ctx}: pending at u64::MAX: {:?}",
            self.m.timers.iter().take(5).collect::<Vec<_>>()
        );
        // Every entry's deadline has passed and the turn at u64::MAX looked at every far bit:
        // the owner holds nothing and names no tick to wake at.
        let adv = self.adv.as_ref().unwrap();
        assert_eq!(
            (adv.indexed(), adv.next_expiry()),
            (0, None),
            "{ctx}: an idle owner at u64::MAX"
        );
        let st = self.adv.as_ref().unwrap().client().stats();
        assert_eq!(
            (st.scheduled, st.cancelled, st.fired),
            (self.m.scheduled, self.m.cancelled, self.m.fired),
            "{ctx}: counters {st:?}"
        );
        assert_eq!(st.interrupted, 0, "{ctx}: {st:?}");
        eprintln!(
            "{ctx}: {} scheduled, {} cancelled, {} fired; {} horizon moves filed {} far armings \
             and fired {} at once; {} processes killed",
            self.m.scheduled,
            self.m.cancelled,
            self.m.fired,
            self.m.moves,
            self.m.far_filed,
            self.m.far_due_at_move,
            self.kills
        );
    }
}

/// The randomized run from clock `start`: `steps` random steps (the last tenth may jump to near
/// `u64::MAX`; `small`: clock steps of at most `3 * SPAN`), then [`Harness::finish`].
fn fuzz(seed: u64, mode: Mode, start: u64, steps: u64, small: bool) {
    let mut h = Harness::new(seed, mode, 8_192, 3);
    if start > 0 {
        h.advance_and_turn(start);
    }
    for step in 0..steps {
        h.random_step(true, step >= steps - steps / 10, small);
    }
    h.finish();
}

#[test]
fn random_exact_against_the_model() {
    // Catches (on index.rs): a horizon that never files its far armings, a horizon not moved
    // when the clock lands on it, a look that skips the last word of far bits, a next_expiry
    // that forgets the far set, a timer at u64::MAX kept far forever.
    for_each_seed("random_exact_against_the_model", |seed| {
        fuzz(seed, Mode::Exact, 0, 4_000, false)
    });
}

#[test]
fn random_coarse_against_the_model() {
    // As the Exact run, each timer held to its Coarse granule; also catches far armings filed
    // from the clock they were applied at rather than the horizon turn's (a timer due at the
    // horizon filed in the wheel, rounded up past it).
    for_each_seed("random_coarse_against_the_model", |seed| {
        fuzz(seed ^ 0xc0a5e, Mode::Coarse, 0, 4_000, false)
    });
}

#[test]
fn random_runs_near_u64_max() {
    // The clock starts 300 horizons below u64::MAX and moves in steps of at most 3 * SPAN: the
    // horizon saturates late in the run, deadlines 10^6 ahead saturate at u64::MAX.
    for_each_seed("random_runs_near_u64_max", |seed| {
        fuzz(seed ^ 0x11, Mode::Exact, MAX - 300 * SPAN, 800, true);
        fuzz(seed ^ 0x22, Mode::Coarse, MAX - 300 * SPAN, 800, true);
    });
}

#[test]
fn every_tick_about_three_horizons_fires_on_its_tick() {
    // The clock steps one tick at a time over the first horizons, and timers sit on every
    // interesting tick about them (scheduled from 0, and again at each horizon move).
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut h = Harness::new(1, mode, 512, 1);
        let ticks = |base: u64| {
            [
                base,
                base + 1,
                base + 62,
                base + 63,
                base + SPAN - 2,
                base + SPAN - 1,
                base + SPAN,
                base + SPAN + 1,
                base + 2 * SPAN - 1,
                base + 2 * SPAN,
                base + 2 * SPAN + 1,
                base + 3 * SPAN,
                base + 1_000_000,
            ]
        };
        for d in ticks(0) {
            h.schedule(0, d);
            h.schedule(1, d);
        }
        h.turn(false);
        let mut last_h = h.m.horizon;
        for t in 1..=3 * SPAN + 20 {
            h.advance_and_turn(t);
            if h.m.horizon != last_h {
                // A move: timers about the new horizon, and one due right now.
                last_h = h.m.horizon;
                for d in ticks(t) {
                    h.schedule(1, d);
                }
                h.schedule(0, last_h);
            }
        }
        h.finish();
    }
}

#[test]
fn clock_steps_of_every_size_about_the_horizon() {
    // Deterministic: timers at the clock, the horizon and about them, SPAN about, 10^6 ahead and
    // at u64::MAX; the clock moves by each size in turn (to one before the horizon, onto it, one
    // past it, SPAN - 1, SPAN, SPAN + 1, 0, 1, 10^6).
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut h = Harness::new(2, mode, 4_096, 2);
        for round in 0..150u64 {
            let (c, hz) = (h.m.clock, h.m.horizon);
            for d in [
                c,
                c + 1,
                hz - 1,
                hz,
                hz + 1,
                c + SPAN - 1,
                c + SPAN,
                c + SPAN + 1,
                c + 2 * SPAN,
                c + 1_000_000,
                MAX - 1,
                MAX,
            ] {
                let ci = (d % 3) as usize;
                h.schedule(ci, d);
            }
            if round % 4 == 0 {
                // Some are applied before the clock moves, some in the turn that moves it.
                h.turn(false);
            }
            let to_h = h.m.horizon - h.m.clock;
            let step = match round % 9 {
                0 => to_h - 1,
                1 => to_h,
                2 => to_h + 1,
                3 => SPAN - 1,
                4 => SPAN,
                5 => SPAN + 1,
                6 => 0,
                7 => 1,
                _ => 1_000_000,
            };
            let t = h.m.clock + step;
            h.advance_and_turn(t);
            if round % 7 == 3 {
                h.recover();
            }
        }
        h.finish();
    }
}

#[test]
fn a_slot_reused_near_then_far_and_far_then_near() {
    // One slot, one client: each cancel keeps the slot for the client's next schedule, which
    // gets it back at the next generation, near after far and far after near, with and without
    // a turn between (so the owner sees the cancelled arming in its wheel or far set, or never),
    // and the clock run past every cancelled deadline and several horizons: only the last
    // arming of each round fires, once, on time.
    for mode in [Mode::Exact, Mode::Coarse] {
        for pattern in 0..8u64 {
            let mut h = Harness::new(3, mode, 1, 1);
            for round in 0..40u64 {
                let c = h.m.clock;
                let far = |k: u64| c + SPAN + k * 997 % 1_000_000;
                let near = |k: u64| c + 1 + k * 131 % (SPAN - 1);
                let (first, second) = match (pattern + round) % 4 {
                    0 => (far(round), near(round)),
                    1 => (near(round), far(round)),
                    2 => (far(round), far(round + 7)),
                    _ => (near(round), near(round + 5)),
                };
                let p = h.schedule(1, first);
                if pattern & 1 != 0 {
                    h.turn(false);
                }
                h.cancel(1, p);
                if pattern & 2 != 0 {
                    h.turn(false);
                }
                let q = h.schedule(1, second);
                let (hp, hq) = (h.m.done[&p], h.m.timers[&q].handle);
                assert_eq!(slot(hp), slot(hq));
                assert_eq!(generation(hq), generation(hp) + 1);
                h.cancel_done(1, p);
                if pattern & 4 != 0 {
                    h.recover();
                }
                // Past both deadlines, through the horizons between, in a few strides.
                let end = first.max(second) + 1 + COARSE_SLACK;
                while h.m.clock < end {
                    let t = (h.m.clock + SPAN - 1 + round % 3).min(end);
                    h.advance_and_turn(t);
                }
                assert!(h.m.done.contains_key(&q), "round {round}: {q} never fired");
                h.cancel_done(1, q);
            }
            // A far arming, cancelled, the slot re-armed at u64::MAX, then near again.
            let p = h.schedule(1, MAX);
            h.turn(false);
            h.cancel(1, p);
            let q = h.schedule(1, h.m.clock + 5);
            h.advance_and_turn(h.m.clock + 5);
            assert!(h.m.done.contains_key(&q));
            h.finish();
        }
    }
}

#[test]
fn deadlines_and_clocks_at_u64_max() {
    for mode in [Mode::Exact, Mode::Coarse] {
        // From a low clock: far timers at and near u64::MAX wait through ordinary horizons,
        // then the clock walks up to u64::MAX over the saturated horizon.
        let mut h = Harness::new(4, mode, 256, 1);
        let near_max = [
            MAX,
            MAX - 1,
            MAX - 2,
            MAX - SPAN + 1,
            MAX - SPAN,
            MAX - SPAN - 1,
            MAX - 2 * SPAN,
            MAX - 1_000_000,
        ];
        for d in near_max {
            h.schedule(0, d);
            h.schedule(1, d);
        }
        h.turn(false);
        for t in [1, SPAN, 3 * SPAN, 1_000_000] {
            h.advance_and_turn(t);
        }
        for at in [
            MAX - 1_000_001,
            MAX - 1_000_000,
            MAX - 2 * SPAN - 1,
            MAX - 2 * SPAN,
            MAX - SPAN - 2,
            MAX - SPAN - 1,
            MAX - SPAN,
            MAX - SPAN + 1,
            MAX - 3,
            MAX - 2,
            MAX - 1,
        ] {
            // At each stop: a timer due now, one at the next tick, one at MAX.
            h.schedule(1, at);
            h.schedule(1, at + 1);
            h.schedule(0, MAX);
            h.advance_and_turn(at);
            h.turn(false);
        }
        h.advance_and_turn(MAX);
        // At u64::MAX: due at once, from the past or at MAX itself.
        h.schedule(1, MAX);
        h.schedule(1, 0);
        h.turn(false);
        h.finish();

        // One jump from a low clock straight to u64::MAX - 1, then to MAX: everything due fires
        // in the jump's turn, the timers at MAX in the next.
        let mut h = Harness::new(5, mode, 256, 1);
        for d in [
            5,
            SPAN,
            SPAN + 1,
            1_000_000,
            MAX - SPAN,
            MAX - 2,
            MAX - 1,
            MAX,
        ] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX - 1);
        for d in [MAX - 1, MAX, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX);
        h.finish();

        // The horizon saturates: moves onto MAX - SPAN - 1 (horizon MAX - 1, with timers at
        // MAX - 1 and MAX far), then at MAX - 1 (horizon u64::MAX: nothing is far any more).
        let mut h = Harness::new(6, mode, 256, 1);
        h.advance_and_turn(MAX - 2 * SPAN - 1);
        assert_eq!(h.m.horizon, MAX - SPAN - 1);
        for d in [MAX - SPAN - 1, MAX - SPAN, MAX - 1, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX - SPAN - 1);
        assert_eq!(h.m.horizon, MAX - 1);
        for d in [MAX - 1, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX - SPAN);
        h.advance_and_turn(MAX - 2);
        h.advance_and_turn(MAX - 1);
        assert_eq!(h.m.horizon, MAX);
        for d in [MAX - 1, MAX, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX);
        h.finish();

        // A move at exactly u64::MAX - SPAN puts the horizon at exactly u64::MAX.
        let mut h = Harness::new(7, mode, 256, 1);
        h.advance_and_turn(MAX - 2 * SPAN);
        for d in [MAX - SPAN, MAX - SPAN + 1, MAX - 1, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.advance_and_turn(MAX - SPAN);
        assert_eq!(h.m.horizon, MAX);
        for d in [MAX - SPAN + 1, MAX - 1, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        for t in [MAX - SPAN + 1, MAX - 2, MAX - 1] {
            h.advance_and_turn(t);
            h.schedule(1, MAX);
        }
        h.advance_and_turn(MAX);
        h.finish();
    }
}

#[test]
fn tens_of_thousands_of_timers() {
    // 40,000 timers near, far (up to 10^6 ahead) and near u64::MAX, a third cancelled, some
    // slots reused, an owner taken over mid-way, the clock moved in uneven strides over 10^6
    // ticks, then to u64::MAX.
    for_each_seed("tens_of_thousands_of_timers", |seed| {
        let mut h = Harness::new(seed, Mode::Exact, 1 << 16, 3);
        let n = h.client_count() as u64;
        for batch in 0..10 {
            let mut mine = Vec::new();
            for _ in 0..4_000 {
                let c = h.m.clock;
                let d = match h.rng.below(20) {
                    0 => MAX - h.rng.below(3 * SPAN),
                    1..=6 => c + h.rng.below(SPAN),
                    7 => h.m.horizon,
                    _ => c + h.rng.range(SPAN, 1_000_000),
                };
                let ci = h.rng.below(n) as usize;
                mine.push(h.schedule(ci, d));
            }
            for p in mine {
                if h.rng.one_in(3) && h.m.timers.contains_key(&p) {
                    let ci = h.rng.below(n) as usize;
                    h.cancel(ci, p);
                    if h.rng.one_in(2) {
                        let far = h.rng.one_in(2);
                        let d = h.m.pick_near_or_far(&mut h.rng, far);
                        h.schedule(ci, d);
                    }
                }
            }
            let step = [1, SPAN - 1, SPAN, SPAN + 1, 10_000, 30_000][batch % 6];
            let t = h.m.clock + step;
            h.advance_to(t);
            if batch == 6 {
                h.take_over();
            }
            h.turn(false);
            if batch % 3 == 1 {
                h.recover();
            }
        }
        while h.m.clock < 1_200_000 {
            let step = match h.rng.below(5) {
                0 => h.m.horizon - h.m.clock,
                1 => 1,
                _ => h.rng.range(1, 20_000),
            };
            let t = h.m.clock + step;
            h.advance_to(t);
            let ops = h.rng.one_in(4);
            h.turn(ops);
        }
        h.finish();
    });
}

#[test]
fn an_owner_taken_over_at_every_point_about_the_horizon() {
    // The owner is killed after turns before, at and past the horizon, and between a clock move
    // and its turn (the new owner's first turn at that clock must fire what is due), with far
    // armings cancelled and their slots re-armed near while no owner is alive.
    for mode in [Mode::Exact, Mode::Coarse] {
        for kill_at in 0..6u64 {
            let mut h = Harness::new(7 + kill_at, mode, 1_024, 2);
            let mut far_ps = Vec::new();
            for k in 0..200u64 {
                let hz = h.m.horizon;
                let d = match k % 5 {
                    0 => hz + k,
                    1 => hz - 1 - k % 50,
                    2 => SPAN * (2 + k % 4) + k,
                    3 => 1_000_000 - k,
                    _ => MAX - k % 3,
                };
                far_ps.push(h.schedule((k % 3) as usize, d));
            }
            h.turn(false);
            for round in 0..12u64 {
                let hz = h.m.horizon;
                let target = match round % 4 {
                    0 => hz - 1,
                    1 => hz,
                    2 => hz + 1 + round,
                    _ => hz + SPAN + 1,
                };
                if round % 6 == kill_at {
                    h.take_over();
                }
                h.advance_to(target);
                if (round + 1) % 6 == kill_at {
                    // Killed between the clock move and its turn.
                    h.take_over();
                    // While the new owner has not turned yet: a far arming cancelled and its
                    // slot re-armed due now, through the kept slot.
                    if let Some(&p) = far_ps.iter().find(|p| h.m.timers.contains_key(p)) {
                        h.cancel(2, p);
                        let now = h.m.clock;
                        h.schedule(2, now);
                    }
                }
                h.turn(round % 2 == 0);
                if round % 5 == 2 {
                    h.recover();
                }
            }
            h.advance_and_turn(1_000_001);
            h.take_over();
            h.finish();
        }
    }
}

#[test]
fn a_coarse_timer_due_at_the_horizon_fires_in_the_turn_that_reaches_it() {
    // Coarse: a timer due exactly at the horizon is far (due at or after it), so the turn that
    // reaches the horizon files it from its own clock and fires it. Filed in the wheel instead
    // (from the clock it was applied at, SPAN before), a Coarse wheel would round it up to a
    // 512-tick granule past its deadline.
    let mut h = Harness::new(8, Mode::Coarse, 16, 1);
    // The first move of the horizon, at 100 past it: the new one is 100 past a multiple of 512.
    h.advance_and_turn(SPAN + 100);
    let hz = h.m.horizon;
    assert_eq!(hz, 2 * SPAN + 100);
    assert_ne!(
        hz % 512,
        0,
        "a deadline on a granule boundary would hide the rounding"
    );
    let p = h.schedule(1, hz);
    h.turn(false);
    assert_eq!(
        h.adv().next_expiry(),
        Some(hz),
        "a far timer waits for the horizon"
    );
    h.advance_and_turn(hz - 1);
    h.advance_to(hz);
    let mut fired = Vec::new();
    h.adv().turn(|q| fired.push(q));
    assert_eq!(
        fired,
        [p],
        "the timer due at the horizon, {hz}, in the turn at {hz}"
    );
}

#[test]
fn a_handler_re_arms_a_far_slot_in_the_turn_that_moves_the_horizon() {
    // In the turn that moves the horizon, the handler of a near timer (fired before the turn
    // looks at the far set) cancels two far timers, one of them due in this very turn, and
    // re-arms the other's slot (kept by its canceller) due in the past, now, later before the
    // new horizon, or past it. The look then finds that slot's far bit naming the new arming and
    // the other's naming a cancelled one: the cancelled ones never fire, the new one fires once,
    // never early, and by the next turn at or after its deadline.
    for mode in [Mode::Exact, Mode::Coarse] {
        for (variant, new_deadline) in [3, SPAN + 4, SPAN + 200, 3 * SPAN].into_iter().enumerate() {
            let mut h = Harness::new(10 + variant as u64, mode, 8, 2);
            let a = h.schedule(0, 10);
            let f = h.schedule(1, SPAN + 900);
            let g = h.schedule(2, SPAN + 4);
            h.turn(false);
            assert_eq!(h.m.timers[&f].state, State::Far);
            assert_eq!(h.m.timers[&g].state, State::Far);
            h.advance_to(SPAN + 4);
            let mut q = None;
            h.turn_with(|m, clients, _, p, _| {
                if p != a {
                    return;
                }
                let hf = m.timers[&f].handle;
                m.cancel(&clients[0].1, 1, f);
                m.cancel(&clients[1].1, 2, g);
                let r = m.schedule(&clients[0].1, 1, new_deadline, State::MidTurn);
                let hr = m.timers[&r].handle;
                assert_eq!((slot(hr), generation(hr)), (slot(hf), generation(hf) + 1));
                q = Some(r);
            });
            let q = q.expect("a fired in the horizon turn");
            // The same clock again: a re-arming due by now has fired, in the turn or in this.
            h.turn(false);
            let end = new_deadline.max(SPAN + 900) + SPAN + COARSE_SLACK;
            while h.m.clock < end {
                let t = h.m.clock + 97;
                h.advance_and_turn(t);
            }
            assert!(
                h.m.done.contains_key(&q),
                "variant {variant}: {q} never fired"
            );
            h.finish();
        }
    }
}

#[test]
fn cancelled_far_timers_leave_nothing_behind_after_the_next_horizon() {
    // A cancel leaves its far bit (index.rs: "a stale bit is cleared ... when it is looked at"):
    // the owner may wake once more, at the horizon, and then holds nothing and names no tick.
    // Kept forever, stale bits would wake an idle owner at every horizon.
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut h = Harness::new(20, mode, 256, 1);
        let ps: Vec<u64> = (0..100u64)
            .map(|k| {
                let d = match k % 3 {
                    0 => SPAN + k,
                    1 => 1_000_000 + k,
                    _ => MAX - k,
                };
                h.schedule(1, d)
            })
            .collect();
        h.turn(false);
        for p in ps {
            h.cancel(1, p);
        }
        h.turn(false);
        let hz = h.m.horizon;
        assert!(
            h.adv().next_expiry().is_none_or(|ne| ne <= hz),
            "stale far bits wake the owner at the horizon at the latest"
        );
        h.advance_and_turn(hz);
        let adv = h.adv();
        assert_eq!(
            (adv.indexed(), adv.next_expiry()),
            (0, None),
            "{mode:?}: after the look at the horizon"
        );
        // And the slots serve near and far timers again.
        for d in [hz + 1, hz + SPAN, MAX] {
            h.schedule(1, d);
        }
        h.turn(false);
        h.finish();
    }
}

#[test]
fn a_slot_in_the_last_partial_word_of_far_bits() {
    // 70 slots: the far bits take two words, the second one partly. Every slot armed far (the
    // set full), then all fire on their ticks; then the slots of the second word are cancelled
    // and re-armed far again, and fire.
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut h = Harness::new(21, mode, 70, 1);
        let ps: Vec<u64> = (0..70u64)
            .map(|k| h.schedule(1, 2 * SPAN + 3 * k))
            .collect();
        let extra = h.segment.attach_as(h.next_pid + 1).unwrap();
        assert!(extra.schedule_at(SPAN, 0).is_err(), "71 timers in 70 slots");
        drop(extra);
        assert!(ps.iter().any(|p| slot(h.m.timers[p].handle) == 69));
        h.turn(false);
        h.advance_and_turn(SPAN - 1);
        h.advance_and_turn(SPAN);
        let mut t = SPAN;
        while !h.m.timers.is_empty() {
            t += 1;
            h.advance_and_turn(t);
        }
        let ps: Vec<u64> = (0..70u64)
            .map(|k| h.schedule(1, t + 2 * SPAN + k))
            .collect();
        h.turn(false);
        for &p in &ps {
            if slot(h.m.timers[&p].handle) >= 64 {
                h.cancel(1, p);
                let d = h.m.clock + 3 * SPAN;
                h.schedule(1, d);
            }
        }
        h.turn(false);
        let end = h.m.clock + 3 * SPAN + COARSE_SLACK + 1;
        while h.m.clock < end {
            let t = h.m.clock + 501;
            h.advance_and_turn(t);
        }
        assert!(h.m.timers.is_empty());
        h.finish();
    }
}

/// What a worker thread did, for the checks after the run.
#[derive(Default)]
struct WorkerLog {
    /// `(payload, deadline, handle, seq)`: a schedule that returned, `seq` taken after.
    scheduled: Vec<(u64, u64, Handle, u64)>,
    /// `(payload, won)`.
    cancelled: Vec<(u64, bool)>,
}

#[test]
fn schedulers_and_cancellers_racing_the_turns() {
    // Threads (standing in for processes) schedule near, far, at-the-horizon and near-MAX
    // timers, cancel their own and re-arm the slots, while the owner moves the clock (onto the
    // horizon, about it, in big jumps) and turns. Every schedule that returned before a turn
    // began (ordered by a SeqCst counter) is due in that turn if the clock reached its deadline:
    // it must have fired by then, unless a cancel of it won. Each payload fires at most once,
    // never early, never after its cancel won, and every one fires or is cancelled; a lost
    // cancel means it fired; no (slot, generation) is handed out twice.
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    for_each_seed("schedulers_and_cancellers_racing_the_turns", |seed| {
        let segment = Segment::anonymous(&Config::new(1 << 14).mode(Mode::Exact).manual_clock())
            .unwrap()
            .with_liveness_probe(Arc::new(|_| true));
        let owner = segment.attach_as(OWNERS).unwrap();
        let mut adv = owner.advancer().unwrap();
        let seq = Arc::new(AtomicU64::new(1));
        let horizon = Arc::new(AtomicU64::new(SPAN));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3u64)
            .map(|w| {
                let client = segment.attach_as(CLIENTS + w as u32).unwrap();
                let (seq, horizon, stop) = (seq.clone(), horizon.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x1234_5678_9abc));
                    let mut log = WorkerLog::default();
                    let mut mine: Vec<(u64, Handle)> = Vec::new();
                    let mut next = 0u64;
                    // Until the owner has turned enough, or this many operations.
                    for _ in 0..40_000 {
                        if stop.load(SeqCst) {
                            break;
                        }
                        if rng.one_in(8) {
                            std::thread::yield_now();
                        }
                        let now = client.now();
                        let hz = horizon.load(SeqCst);
                        if mine.len() > 300 || (!mine.is_empty() && rng.one_in(3)) {
                            let i = rng.below(mine.len() as u64) as usize;
                            let (p, h) = mine.swap_remove(i);
                            let won = client.cancel(h);
                            log.cancelled.push((p, won));
                            if !won || !rng.one_in(2) {
                                continue;
                            }
                        }
                        let d = match rng.below(10) {
                            0 => now,
                            1 | 2 => now + rng.below(SPAN),
                            3 => hz.max(now),
                            4 => hz.max(now) + 1,
                            5 => hz.max(now).saturating_sub(1),
                            6 | 7 => now.saturating_add(rng.range(SPAN, 1_000_000)),
                            8 => MAX - rng.below(2),
                            _ => now + SPAN,
                        };
                        let p = w << 40 | next;
                        next += 1;
                        let h = client.schedule_at(d, p).expect("room for every timer");
                        let s = seq.fetch_add(1, SeqCst);
                        log.scheduled.push((p, d, h, s));
                        mine.push((p, h));
                    }
                    log
                })
            })
            .collect();
        // The owner: (turn, clock, seq at its start) and what fired in each turn.
        let mut rng = Rng(seed);
        let mut turns: Vec<(u64, u64)> = Vec::new();
        let mut fired: HashMap<u64, (usize, u64)> = HashMap::new();
        let mut h = SPAN;
        let mut run_turn = |adv: &mut Advancer, turns: &mut Vec<(u64, u64)>, h: &mut u64| {
            let clock = adv.client().now();
            let start = seq.fetch_add(1, SeqCst);
            let t = turns.len();
            turns.push((clock, start));
            adv.turn(|p| {
                if let Some(prev) = fired.insert(p, (t, clock)) {
                    panic!("seed {seed:#x}: {p} fired twice: {prev:?} and turn {t} at {clock}");
                }
            });
            if clock >= *h {
                *h = clock.saturating_add(SPAN);
                horizon.store(*h, SeqCst);
            }
        };
        let mut spins = 0u64;
        // The owner stops the workers once it has turned enough and they have scheduled enough
        // (`seq` counts schedules and turns): on a loaded machine the owner can make its turns
        // before the workers have scheduled anything, and then too few fires are checked.
        while !workers.iter().all(|w| w.is_finished()) {
            if turns.len() >= 3_000 && seq.load(SeqCst) >= turns.len() as u64 + 8_000 {
                stop.store(true, SeqCst);
            }
            let c = adv.client().now();
            let step = match rng.below(8) {
                0 => 0,
                1 => h - c,
                2 => (h - c).saturating_sub(1),
                3 => h - c + 1,
                4 => rng.range(1, 64),
                5 => 1_000_000,
                _ => rng.range(1, SPAN),
            };
            // The clock moves slowly enough that the schedulers' deadlines come due.
            if spins.is_multiple_of(4) {
                adv.advance_to(c + step);
            }
            spins += 1;
            run_turn(&mut adv, &mut turns, &mut h);
        }
        let logs: Vec<WorkerLog> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let c = adv.client().now();
        adv.advance_to(c + 1_000_001);
        run_turn(&mut adv, &mut turns, &mut h);
        adv.advance_to(MAX);
        run_turn(&mut adv, &mut turns, &mut h);
        run_turn(&mut adv, &mut turns, &mut h);
        assert_eq!(adv.next_expiry(), None, "seed {seed:#x}: idle at MAX");
        // The checks.
        let won: HashSet<u64> = logs
            .iter()
            .flat_map(|l| l.cancelled.iter().filter(|c| c.1).map(|c| c.0))
            .collect();
        let mut armings = HashSet::new();
        let mut late_checked = 0u64;
        for l in &logs {
            for &(p, won_cancel) in &l.cancelled {
                if !won_cancel {
                    assert!(
                        fired.contains_key(&p),
                        "seed {seed:#x}: {p}'s cancel lost, never fired"
                    );
                }
            }
            for &(p, d, hd, s) in &l.scheduled {
                assert!(
                    armings.insert((slot(hd), generation(hd))),
                    "seed {seed:#x}: {hd:?} handed out twice"
                );
                match fired.get(&p) {
                    Some(&(t, clock)) => {
                        assert!(
                            !won.contains(&p),
                            "seed {seed:#x}: {p} fired after its cancel won"
                        );
                        assert!(
                            d <= clock,
                            "seed {seed:#x}: {p} due {d} fired early at {clock}"
                        );
                        // The first turn begun after the schedule returned whose clock reached
                        // the deadline.
                        let owed = turns.iter().position(|&(c, st)| st > s && c >= d);
                        let owed = owed.expect("the last turns are at MAX");
                        assert!(
                            t <= owed,
                            "seed {seed:#x}: {p} due {d} fired in turn {t} at {clock}, owed in turn \
                             {owed} at {}",
                            turns[owed].0
                        );
                        late_checked += 1;
                    }
                    None => assert!(won.contains(&p), "seed {seed:#x}: {p} due {d} lost"),
                }
            }
        }
        let st = owner.stats();
        assert_eq!(st.fired as usize, fired.len(), "seed {seed:#x}: {st:?}");
        assert!(
            late_checked > 500,
            "seed {seed:#x}: only {late_checked} fires checked"
        );
        eprintln!(
            "seed {seed:#x}: {} turns, {} fired ({late_checked} checked on time), {} cancels won",
            turns.len(),
            fired.len(),
            won.len()
        );
    });
}

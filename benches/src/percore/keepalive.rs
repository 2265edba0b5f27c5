//! The per-core keepalive load, run on `tickwheel-percpu` and on the designs a user would write
//! instead: a `tickwheel::Wheel` per core behind a lock, one wheel behind one global lock, and
//! (on one thread) a bare wheel with no lock at all.
//!
//! # Model
//! Each of `threads` pinned threads holds `per_core` connections, each with one keepalive timer
//! 30 to 60 s out. A share of its connections (`remote_share`) have their timer on the next
//! thread's core ("remote"); the others on its own ("local"). The timed phase refreshes random
//! connections to a fresh 30-60 s delay, and every 64 refreshes the thread "turns": it does its
//! core's timer work (percpu: [`tickwheel_percpu::Base::turn`]; a wheel behind a lock: lock the
//! own wheel and poll it to now). Every design draws the same random stream from the same seed in
//! the same order, reads the same clock (`CLOCK_MONOTONIC`, 1 ms ticks, deadlines rounded up) and
//! uses the same Coarse wheel, so they do the same work and differ only in how a timer on another
//! core is reached:
//!
//! | design | local refresh | remote refresh | turn |
//! |---|---|---|---|
//! | [`Design::Percpu`] | `Base::reset_after` | `Remote` call ([`refresh_remote_percpu`]) | `Base::turn` |
//! | [`Design::StdMutexPerCore`] | lock own `Mutex<Wheel>`, reset | lock the other core's, reset | lock own, poll |
//! | [`Design::ParkingLotPerCore`] | the same with `parking_lot::Mutex` | | |
//! | [`Design::GlobalMutex`] | lock the one `Mutex<Wheel>`, reset | the same | lock, poll |
//! | [`Design::BareWheel`] | `Wheel::reset`, no lock (one thread only) | – | poll |
//!
//! After the timed phase every thread cancels each of its connections' timers (untimed, turning
//! every 64); the payloads handed back, plus anything a turn fired (nothing should: the run is far
//! shorter than 30 s), make the run's [`Checksum`]. A design that lost, doubled or misplaced a
//! timer gives a different checksum from the others, and the runner refuses to report it.
//!
//! Phases are separated by spinning barriers during which a percpu thread keeps turning its base
//! about every microsecond (a base that stopped turning would leave remote schedulers without
//! reserve slots); the lock-based designs need nothing from an idle thread and just spin. The
//! `ReserveEmpty` count is the bases' own counter
//! ([`tickwheel_percpu::BaseStats`]) read just before and just after the timed phase, so setup is
//! not counted; the [`Stalls`] are the runner's own count of remote schedules that had to wait
//! for a reserve slot, and for how long (a remote refresh cannot be refused).
//!
//! # What was given up
//! - The lock-based wheels are allocated by the spawning thread, as the percpu bases are; on this
//!   one-socket machine first-touch placement does not matter.
//! - A thread's rate is its own refreshes over its own timed phase; the aggregate is the sum of
//!   the threads' rates. A thread that finishes first keeps idling (and, for percpu, turning)
//!   while the others finish, as a server's core would.
//! - Remote timers live on the next core only (a ring), so each core's timers have at most two
//!   users; destinations spread over many cores are left to the projection in BENCHMARKS.md.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use tickwheel::{Mode, TimerId, Wheel};
use tickwheel_percpu::{Config, Handle, ScheduleError};

use super::{available_cores, pin};
use crate::rng::SplitMix64;

/// Refreshes between two turns of a thread's timer work.
pub const TURN_EVERY: u64 = 64;

/// Pause instructions between two turns of an idle percpu thread.
const IDLE_SPINS: u32 = 64;

/// The wheel tick of every design (the percpu default).
const TICK: Duration = Duration::from_millis(1);

/// How a thread-per-core server keeps its timers, for the keepalive scaling load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Design {
    /// `tickwheel-percpu`: one lock-free base per core, cross-core calls through its `Remote`.
    Percpu,
    /// One `tickwheel::Wheel` per core behind a `std::sync::Mutex`.
    StdMutexPerCore,
    /// One `tickwheel::Wheel` per core behind a `parking_lot::Mutex`.
    ParkingLotPerCore,
    /// One `tickwheel::Wheel` for all threads behind one `std::sync::Mutex`.
    GlobalMutex,
    /// A bare `tickwheel::Wheel`, no lock: one thread and no remote timers only.
    BareWheel,
}

impl Design {
    /// Every design, in table order.
    pub const ALL: [Design; 5] = [
        Design::Percpu,
        Design::StdMutexPerCore,
        Design::ParkingLotPerCore,
        Design::GlobalMutex,
        Design::BareWheel,
    ];

    /// Name in tables and CSV.
    pub fn name(self) -> &'static str {
        match self {
            Design::Percpu => "percpu",
            Design::StdMutexPerCore => "wheel per core + std Mutex",
            Design::ParkingLotPerCore => "wheel per core + parking_lot Mutex",
            Design::GlobalMutex => "global std Mutex<Wheel>",
            Design::BareWheel => "bare Wheel",
        }
    }

    /// Short name for the command line.
    pub fn key(self) -> &'static str {
        match self {
            Design::Percpu => "percpu",
            Design::StdMutexPerCore => "std-mutex",
            Design::ParkingLotPerCore => "parking-lot",
            Design::GlobalMutex => "global-mutex",
            Design::BareWheel => "bare-wheel",
        }
    }

    /// The design whose [`key`](Self::key) is `key`.
    pub fn from_key(key: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.key() == key)
    }

    /// Whether the design can run `load` (the bare wheel has no lock, so one thread only).
    pub fn supports(self, load: &Load) -> bool {
        self != Design::BareWheel || (load.threads == 1 && load.remote_share == 0.0)
    }
}

/// One scaling run's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// Pinned threads, one per core, from core 0 up.
    pub threads: usize,
    /// Share of each thread's connections whose timer lives on the next core, in `0.0..=1.0`.
    pub remote_share: f64,
    /// Connections (timers) per thread.
    pub per_core: usize,
    /// Refreshes each thread makes in the timed phase.
    pub ops_per_thread: u64,
    /// Seed of every thread's random stream.
    pub seed: u64,
}

/// One thread's part of a scaling run.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CoreRun {
    /// Refreshes done.
    pub ops: u64,
    /// Of those, refreshes of a timer on another core.
    pub remote_ops: u64,
    /// Time they took.
    pub elapsed: Duration,
    /// Remote schedules (percpu) that found the reserve empty, in the timed phase.
    pub stalls: Stalls,
}

impl CoreRun {
    /// Refreshes per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Nanoseconds per refresh, turns included.
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }
}

/// Remote schedules that found the target's reserve empty (percpu only), in the timed phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stalls {
    /// Refused attempts that were retried.
    pub retries: u64,
    /// Refreshes that had to retry at least once.
    pub stalls: u64,
    /// Time those refreshes spent retrying.
    pub stalled: Duration,
}

/// What a run did to its timers; equal across designs for the same [`Load`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checksum {
    /// Refreshes that found their timer pending.
    pub refreshed: u64,
    /// Timers handed back by the final cancels.
    pub cancelled: u64,
    /// Sum of the payloads handed back (cancelled or fired), wrapping.
    pub payload_sum: u64,
}

impl Checksum {
    fn add(&mut self, other: Checksum) {
        self.refreshed += other.refreshed;
        self.cancelled += other.cancelled;
        self.payload_sum = self.payload_sum.wrapping_add(other.payload_sum);
    }
}

/// Cross-core trouble counters of the timed phase, summed over the percpu bases (zero for the
/// lock-based designs, which have no reserve).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backpressure {
    /// `BaseStats::reserve_empty`: remote schedules refused because the reserve was empty.
    pub reserve_empty: u64,
}

impl Backpressure {
    fn since(self, before: Backpressure) -> Backpressure {
        Backpressure {
            reserve_empty: self.reserve_empty - before.reserve_empty,
        }
    }
}

/// A whole scaling run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Run {
    /// The design measured.
    pub design: Design,
    /// Each thread's figures, by core.
    pub cores: Vec<CoreRun>,
    /// What happened to the timers.
    pub checksum: Checksum,
    /// Cross-core refusals and drops during the timed phase.
    pub backpressure: Backpressure,
}

impl Run {
    /// Refreshes per second of all threads together (sum of the threads' rates).
    pub fn aggregate_ops_per_sec(&self) -> f64 {
        self.cores.iter().map(CoreRun::ops_per_sec).sum()
    }

    /// Mean over threads of nanoseconds per refresh.
    pub fn ns_per_op(&self) -> f64 {
        self.cores.iter().map(CoreRun::ns_per_op).sum::<f64>() / self.cores.len().max(1) as f64
    }

    /// Retried remote schedules, all threads.
    pub fn reserve_empty_retries(&self) -> u64 {
        self.cores.iter().map(|c| c.stalls.retries).sum()
    }

    /// Time all threads together spent retrying remote schedules.
    pub fn stalled(&self) -> Duration {
        self.cores.iter().map(|c| c.stalls.stalled).sum()
    }
}

/// Runs `load` on `design`.
pub fn keepalive_scaling(design: Design, load: &Load) -> Result<Run, String> {
    if load.threads == 0 || load.threads > available_cores() {
        return Err(format!(
            "{} threads on {} cores",
            load.threads,
            available_cores()
        ));
    }
    if !(0.0..=1.0).contains(&load.remote_share) {
        return Err(format!(
            "remote share {} is not in 0..=1",
            load.remote_share
        ));
    }
    if load.per_core == 0 || load.per_core > u32::MAX as usize {
        return Err(format!("{} timers per core", load.per_core));
    }
    if !design.supports(load) {
        return Err(format!(
            "{} runs one thread with no remote timers",
            design.name()
        ));
    }
    let clock = TickClock::new();
    let outs = match design {
        Design::Percpu => {
            let config = Config::default().mode(Mode::Coarse).tick(TICK);
            let (bases, remote) = tickwheel_percpu::bases::<u64>(load.threads, config)
                .map_err(|e| format!("bases: {e}"))?;
            let workers = bases
                .into_iter()
                .map(|base| PercpuWorker {
                    base,
                    remote: remote.clone(),
                })
                .collect();
            drive(workers, load)?
        }
        Design::StdMutexPerCore => {
            let wheels = wheels::<std::sync::Mutex<Wheel<u64>>>(load.threads);
            drive(per_core_workers(&wheels, &clock), load)?
        }
        Design::ParkingLotPerCore => {
            let wheels = wheels::<parking_lot::Mutex<Wheel<u64>>>(load.threads);
            drive(per_core_workers(&wheels, &clock), load)?
        }
        Design::GlobalMutex => {
            let wheel = std::sync::Mutex::new(Wheel::new(Mode::Coarse));
            let workers = (0..load.threads)
                .map(|me| GlobalWorker {
                    me,
                    wheel: &wheel,
                    clock: &clock,
                })
                .collect();
            drive(workers, load)?
        }
        Design::BareWheel => drive(
            vec![BareWorker {
                wheel: Wheel::new(Mode::Coarse),
                clock: &clock,
            }],
            load,
        )?,
    };
    let mut run = Run {
        design,
        cores: Vec::with_capacity(outs.len()),
        checksum: Checksum::default(),
        backpressure: Backpressure::default(),
    };
    for out in outs {
        run.cores.push(out.core);
        run.checksum.add(out.checksum);
        run.backpressure.reserve_empty += out.backpressure.reserve_empty;
    }
    Ok(run)
}

// ---- the driver every design shares ----

/// One thread's side of a design: its timer work and the ways it reaches a timer.
trait Worker: Send {
    /// Names a timer; knows which core it lives on.
    type Handle: Copy;

    /// The core `h`'s timer lives on.
    fn home(h: &Self::Handle) -> usize;

    /// Arms `value` on core `target`, `delay` from now. `stalls` counts refused attempts.
    fn schedule(
        &mut self,
        target: usize,
        delay: Duration,
        value: u64,
        stalls: &mut Stalls,
    ) -> Result<Self::Handle, String>;

    /// Re-arms a timer on this thread's own core; false if it was not pending.
    fn refresh_local(&mut self, h: Self::Handle, delay: Duration) -> bool;

    /// Re-arms a timer on another core; the handle that names it afterwards.
    fn refresh_remote(
        &mut self,
        h: Self::Handle,
        delay: Duration,
        value: u64,
        stalls: &mut Stalls,
    ) -> Result<Self::Handle, String>;

    /// The core's periodic timer work; adds what fired to `fired`.
    fn turn(&mut self, fired: &mut Checksum);

    /// What a thread does while it waits for the others.
    fn idle(&mut self);

    /// Cancels the timer `h` names (its payload is `value`); the payload handed back.
    fn cancel(&mut self, h: Self::Handle, value: u64) -> Option<u64>;

    /// Cross-core counters so far (of this thread's own core).
    fn backpressure(&self) -> Backpressure;
}

/// What one thread hands back.
struct ThreadOut {
    core: CoreRun,
    checksum: Checksum,
    backpressure: Backpressure,
}

/// The refresh delay of a keepalive timer.
fn keepalive_delay(rng: &mut SplitMix64) -> Duration {
    Duration::from_millis(rng.between(30_000, 60_000))
}

/// The payload of thread `t`'s connection `i`: unique over the run.
fn payload(t: usize, i: usize) -> u64 {
    ((t as u64) << 32) | i as u64
}

/// Counts this thread in at `arrived` and waits for all `threads`, idling meanwhile.
fn arrive<W: Worker>(worker: &mut W, arrived: &AtomicUsize, threads: usize) {
    // Release/Acquire: what a thread did before arriving is visible to those that see the count.
    arrived.fetch_add(1, Ordering::Release);
    while arrived.load(Ordering::Acquire) < threads {
        worker.idle();
        std::hint::spin_loop();
    }
}

/// Runs `load` with one worker per thread (worker `t` on core `t`).
fn drive<W: Worker>(workers: Vec<W>, load: &Load) -> Result<Vec<ThreadOut>, String> {
    debug_assert_eq!(workers.len(), load.threads, "one worker per thread");
    // One counter per barrier: populated, counted, refreshed, cancelled.
    let barriers: [AtomicUsize; 4] = Default::default();
    std::thread::scope(|s| {
        let spawned: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(t, worker)| {
                let barriers = &barriers;
                s.spawn(move || one_thread(t, worker, load, barriers))
            })
            .collect();
        spawned
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "a scaling thread panicked".to_string())?
            })
            .collect()
    })
}

/// Thread `t`'s whole run. Every barrier is reached even after an error, so no thread waits
/// forever for one that failed.
fn one_thread<W: Worker>(
    t: usize,
    mut worker: W,
    load: &Load,
    barriers: &[AtomicUsize; 4],
) -> Result<ThreadOut, String> {
    let threads = load.threads;
    let pinned = pin(t);
    let mut rng = SplitMix64::new(load.seed ^ (t as u64 + 1).wrapping_mul(0x9E37));
    let next = (t + 1) % threads;
    let mut checksum = Checksum::default();
    let mut setup_stalls = Stalls::default();
    let mut handles = Vec::with_capacity(load.per_core);
    let setup = pinned.and_then(|()| {
        for i in 0..load.per_core {
            let delay = keepalive_delay(&mut rng);
            let away =
                threads > 1 && (rng.below(1 << 20) as f64) < load.remote_share * f64::from(1 << 20);
            let target = if away { next } else { t };
            handles.push(worker.schedule(target, delay, payload(t, i), &mut setup_stalls)?);
            if i % TURN_EVERY as usize == 0 {
                worker.turn(&mut checksum);
            }
        }
        Ok(())
    });
    arrive(&mut worker, &barriers[0], threads);
    let before = worker.backpressure();
    arrive(&mut worker, &barriers[1], threads);

    let mut phase = Phase::default();
    let start = Instant::now();
    let refreshed = setup.and_then(|()| {
        measured_refreshes(t, &mut worker, &mut rng, &mut handles, load, &mut phase)
    });
    let elapsed = start.elapsed();
    arrive(&mut worker, &barriers[2], threads);
    worker.turn(&mut checksum);
    let backpressure = worker.backpressure().since(before);

    let cancelled = refreshed.and_then(|()| {
        checksum.refreshed = load.ops_per_thread;
        for (i, &h) in handles.iter().enumerate() {
            let value = payload(t, i);
            match worker.cancel(h, value) {
                Some(v) if v == value => {
                    checksum.cancelled += 1;
                    checksum.payload_sum = checksum.payload_sum.wrapping_add(v);
                }
                Some(v) => return Err(format!("core {t}: timer {i} held {v}, not {value}")),
                None => return Err(format!("core {t}: timer {i} was lost before the end")),
            }
            if i % TURN_EVERY as usize == 0 {
                worker.turn(&mut checksum);
            }
        }
        Ok(())
    });
    arrive(&mut worker, &barriers[3], threads);
    worker.turn(&mut checksum);
    cancelled?;
    Ok(ThreadOut {
        core: CoreRun {
            ops: load.ops_per_thread,
            remote_ops: phase.remote_ops,
            elapsed,
            stalls: phase.stalls,
        },
        checksum: {
            let mut c = checksum;
            c.add(phase.fired);
            c
        },
        backpressure,
    })
}

/// What the timed phase counts besides time.
#[derive(Default)]
struct Phase {
    remote_ops: u64,
    stalls: Stalls,
    fired: Checksum,
}

/// The timed phase of thread `t`: `ops_per_thread` refreshes of random connections, a turn every
/// [`TURN_EVERY`]. Not inlined, so an instruction count can be taken of it alone
/// (`valgrind --tool=callgrind --toggle-collect='*measured_refreshes*'`).
#[inline(never)]
fn measured_refreshes<W: Worker>(
    t: usize,
    worker: &mut W,
    rng: &mut SplitMix64,
    handles: &mut [W::Handle],
    load: &Load,
    phase: &mut Phase,
) -> Result<(), String> {
    for op in 0..load.ops_per_thread {
        let i = rng.below(load.per_core as u64) as usize;
        let delay = keepalive_delay(rng);
        let h = handles[i];
        if W::home(&h) == t {
            if !worker.refresh_local(h, delay) {
                return Err(format!("core {t}: own timer {i} was not pending"));
            }
        } else {
            phase.remote_ops += 1;
            handles[i] = worker.refresh_remote(h, delay, payload(t, i), &mut phase.stalls)?;
        }
        if op % TURN_EVERY == TURN_EVERY - 1 {
            worker.turn(&mut phase.fired);
        }
    }
    Ok(())
}

// ---- percpu ----

/// A thread's percpu base and the set's `Remote`.
struct PercpuWorker {
    base: tickwheel_percpu::Base<u64>,
    remote: tickwheel_percpu::Remote<u64>,
}

/// Schedules `value` on base `target` through `remote`, turning `base` while that base's reserve
/// is empty.
fn schedule_remote(
    base: &mut tickwheel_percpu::Base<u64>,
    remote: &tickwheel_percpu::Remote<u64>,
    target: usize,
    delay: Duration,
    mut value: u64,
    stalls: &mut Stalls,
) -> Result<Handle, String> {
    let mut since: Option<Instant> = None;
    loop {
        match remote.schedule_after(target, delay, value) {
            Ok(h) => {
                if let Some(t) = since {
                    stalls.stalls += 1;
                    stalls.stalled += t.elapsed();
                }
                return Ok(h);
            }
            Err(ScheduleError::ReserveEmpty(v)) => {
                value = v;
                since.get_or_insert_with(Instant::now);
                stalls.retries += 1;
                base.turn(|_| {});
                std::hint::spin_loop();
            }
            Err(e) => return Err(format!("remote schedule failed: {e}")),
        }
    }
}

/// The cross-core keepalive refresh of the percpu design: `Remote::reset_after`, in place (the
/// handle stays valid). It cannot be refused, so it never stalls; `value` and `stalls` stay in
/// the signature the other designs share.
pub fn refresh_remote_percpu(
    base: &mut tickwheel_percpu::Base<u64>,
    remote: &tickwheel_percpu::Remote<u64>,
    h: Handle,
    delay: Duration,
    value: u64,
    stalls: &mut Stalls,
) -> Result<Handle, String> {
    // The remote refresh: the one call site. In place, same handle; a later deadline sends the
    // owner nothing, so nothing here can stall.
    let _ = (value, stalls);
    let me = base.index();
    remote
        .reset_after(h, delay)
        .then_some(h)
        .ok_or_else(|| format!("core {me}: remote timer on base {} lost", h.base()))
}

impl Worker for PercpuWorker {
    type Handle = Handle;

    fn home(h: &Handle) -> usize {
        h.base()
    }

    fn schedule(
        &mut self,
        target: usize,
        delay: Duration,
        value: u64,
        stalls: &mut Stalls,
    ) -> Result<Handle, String> {
        if target == self.base.index() {
            self.base
                .schedule_after(delay, value)
                .map_err(|e| format!("schedule: {e}"))
        } else {
            schedule_remote(&mut self.base, &self.remote, target, delay, value, stalls)
        }
    }

    fn refresh_local(&mut self, h: Handle, delay: Duration) -> bool {
        self.base.reset_after(h, delay)
    }

    fn refresh_remote(
        &mut self,
        h: Handle,
        delay: Duration,
        value: u64,
        stalls: &mut Stalls,
    ) -> Result<Handle, String> {
        refresh_remote_percpu(&mut self.base, &self.remote, h, delay, value, stalls)
    }

    fn turn(&mut self, fired: &mut Checksum) {
        self.base.turn(|v| {
            fired.payload_sum = fired.payload_sum.wrapping_add(v);
        });
    }

    fn idle(&mut self) {
        // A turn about every microsecond refills the reserve far faster than a sender empties it
        // (4096 slots at tens of nanoseconds a schedule) without keeping the shared lines of this
        // base bouncing while the other threads are still measuring.
        self.base.turn(|_| {});
        for _ in 0..IDLE_SPINS {
            std::hint::spin_loop();
        }
    }

    fn cancel(&mut self, h: Handle, value: u64) -> Option<u64> {
        // `Base::cancel` takes any handle of the set: its own timers directly, others through
        // the set's shared state. It does not hand the payload back; the owner drops it.
        self.base.cancel(h).then_some(value)
    }

    fn backpressure(&self) -> Backpressure {
        let stats = self.base.stats();
        Backpressure {
            reserve_empty: stats.reserve_empty,
        }
    }
}

// ---- wheels behind locks ----

/// The shared clock of the lock-based designs: `CLOCK_MONOTONIC` (what `Instant` reads on Linux,
/// and what the percpu bases read) in 1 ms ticks since the run began.
struct TickClock {
    epoch: Instant,
}

impl TickClock {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The current tick (rounded down, as a base's turn does).
    fn now_tick(&self) -> u64 {
        self.now_ns() / TICK.as_nanos() as u64
    }

    /// The deadline tick `delay` from now (rounded up, so nothing fires early).
    fn deadline(&self, delay: Duration) -> u64 {
        (self.now_ns() + delay.as_nanos() as u64).div_ceil(TICK.as_nanos() as u64)
    }
}

/// A wheel behind some lock.
trait Lock: Sync {
    fn new(wheel: Wheel<u64>) -> Self;
    fn with<R>(&self, f: impl FnOnce(&mut Wheel<u64>) -> R) -> R;
}

impl Lock for std::sync::Mutex<Wheel<u64>> {
    fn new(wheel: Wheel<u64>) -> Self {
        std::sync::Mutex::new(wheel)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Wheel<u64>) -> R) -> R {
        // A poisoned lock only means another thread panicked; that thread's error is reported.
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl Lock for parking_lot::Mutex<Wheel<u64>> {
    fn new(wheel: Wheel<u64>) -> Self {
        parking_lot::Mutex::new(wheel)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Wheel<u64>) -> R) -> R {
        f(&mut self.lock())
    }
}

/// A wheel timer and the core it lives on (12 bytes, like a percpu handle).
#[derive(Clone, Copy, Debug)]
struct Placed {
    id: TimerId,
    home: u32,
}

/// Polls `wheel` to `now`, adding what fired to `fired`.
fn poll_into(wheel: &mut Wheel<u64>, now: u64, fired: &mut Checksum) {
    while let Some((_, v)) = wheel.poll(now) {
        fired.payload_sum = fired.payload_sum.wrapping_add(v);
    }
}

/// One Coarse wheel per core, each behind its own lock on its own cache lines.
fn wheels<L: Lock>(threads: usize) -> Vec<CachePadded<L>> {
    (0..threads)
        .map(|_| CachePadded::new(L::new(Wheel::new(Mode::Coarse))))
        .collect()
}

/// A thread of the wheel-per-core-behind-a-lock design.
struct PerCoreWorker<'a, L> {
    me: usize,
    wheels: &'a [CachePadded<L>],
    clock: &'a TickClock,
}

fn per_core_workers<'a, L: Lock>(
    wheels: &'a [CachePadded<L>],
    clock: &'a TickClock,
) -> Vec<PerCoreWorker<'a, L>> {
    (0..wheels.len())
        .map(|me| PerCoreWorker { me, wheels, clock })
        .collect()
}

/// Inserts `value` into `wheel` at `deadline`, naming core `home`.
fn insert_placed(
    wheel: &mut Wheel<u64>,
    deadline: u64,
    value: u64,
    home: usize,
) -> Result<Placed, String> {
    let id = wheel
        .insert(deadline, value)
        .map_err(|_| "an unbounded wheel refused a timer".to_string())?;
    Ok(Placed {
        id,
        home: home as u32,
    })
}

/// Takes the timer `h` names out of `wheel`.
fn cancel_placed(wheel: &mut Wheel<u64>, h: Placed) -> Option<u64> {
    wheel.cancel(h.id)
}

impl<L: Lock> Worker for PerCoreWorker<'_, L> {
    type Handle = Placed;

    fn home(h: &Placed) -> usize {
        h.home as usize
    }

    fn schedule(
        &mut self,
        target: usize,
        delay: Duration,
        value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        let deadline = self.clock.deadline(delay);
        self.wheels[target].with(|w| insert_placed(w, deadline, value, target))
    }

    fn refresh_local(&mut self, h: Placed, delay: Duration) -> bool {
        let deadline = self.clock.deadline(delay);
        self.wheels[self.me].with(|w| w.reset(h.id, deadline))
    }

    fn refresh_remote(
        &mut self,
        h: Placed,
        delay: Duration,
        _value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        let deadline = self.clock.deadline(delay);
        if self.wheels[h.home as usize].with(|w| w.reset(h.id, deadline)) {
            Ok(h)
        } else {
            Err(format!(
                "core {}: remote timer on core {} lost",
                self.me, h.home
            ))
        }
    }

    fn turn(&mut self, fired: &mut Checksum) {
        let now = self.clock.now_tick();
        self.wheels[self.me].with(|w| poll_into(w, now, fired));
    }

    fn idle(&mut self) {}

    fn cancel(&mut self, h: Placed, _value: u64) -> Option<u64> {
        self.wheels[h.home as usize].with(|w| cancel_placed(w, h))
    }

    fn backpressure(&self) -> Backpressure {
        Backpressure::default()
    }
}

/// A thread of the one-wheel-behind-one-lock design. Timers still belong to a core (the same op
/// mix as the other designs), but every operation takes the same lock.
struct GlobalWorker<'a> {
    me: usize,
    wheel: &'a std::sync::Mutex<Wheel<u64>>,
    clock: &'a TickClock,
}

impl Worker for GlobalWorker<'_> {
    type Handle = Placed;

    fn home(h: &Placed) -> usize {
        h.home as usize
    }

    fn schedule(
        &mut self,
        target: usize,
        delay: Duration,
        value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        let deadline = self.clock.deadline(delay);
        self.wheel
            .with(|w| insert_placed(w, deadline, value, target))
    }

    fn refresh_local(&mut self, h: Placed, delay: Duration) -> bool {
        let deadline = self.clock.deadline(delay);
        self.wheel.with(|w| w.reset(h.id, deadline))
    }

    fn refresh_remote(
        &mut self,
        h: Placed,
        delay: Duration,
        _value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        if self.refresh_local(h, delay) {
            Ok(h)
        } else {
            Err(format!("core {}: timer of core {} lost", self.me, h.home))
        }
    }

    fn turn(&mut self, fired: &mut Checksum) {
        let now = self.clock.now_tick();
        self.wheel.with(|w| poll_into(w, now, fired));
    }

    fn idle(&mut self) {}

    fn cancel(&mut self, h: Placed, _value: u64) -> Option<u64> {
        self.wheel.with(|w| cancel_placed(w, h))
    }

    fn backpressure(&self) -> Backpressure {
        Backpressure::default()
    }
}

/// The one thread of the bare-wheel design: the same calls with no lock.
struct BareWorker<'a> {
    wheel: Wheel<u64>,
    clock: &'a TickClock,
}

impl Worker for BareWorker<'_> {
    type Handle = Placed;

    fn home(h: &Placed) -> usize {
        h.home as usize
    }

    fn schedule(
        &mut self,
        target: usize,
        delay: Duration,
        value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        let deadline = self.clock.deadline(delay);
        insert_placed(&mut self.wheel, deadline, value, target)
    }

    fn refresh_local(&mut self, h: Placed, delay: Duration) -> bool {
        let deadline = self.clock.deadline(delay);
        self.wheel.reset(h.id, deadline)
    }

    fn refresh_remote(
        &mut self,
        h: Placed,
        _delay: Duration,
        _value: u64,
        _stalls: &mut Stalls,
    ) -> Result<Placed, String> {
        // `Design::supports` keeps the bare wheel to one thread with no remote timers.
        Err(format!("bare wheel: a timer on core {}", h.home))
    }

    fn turn(&mut self, fired: &mut Checksum) {
        let now = self.clock.now_tick();
        poll_into(&mut self.wheel, now, fired);
    }

    fn idle(&mut self) {}

    fn cancel(&mut self, h: Placed, _value: u64) -> Option<u64> {
        cancel_placed(&mut self.wheel, h)
    }

    fn backpressure(&self) -> Backpressure {
        Backpressure::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(threads: usize, remote_share: f64) -> Load {
        Load {
            threads,
            remote_share,
            per_core: 300,
            ops_per_thread: 500,
            seed: 0x5eed,
        }
    }

    /// The naive model of a run: every connection refreshed when the stream says so, every timer
    /// cancelled at the end, nothing fired.
    fn expected(load: &Load) -> Checksum {
        let mut sum = 0u64;
        for t in 0..load.threads {
            for i in 0..load.per_core {
                sum = sum.wrapping_add(payload(t, i));
            }
        }
        Checksum {
            refreshed: load.ops_per_thread * load.threads as u64,
            cancelled: (load.per_core * load.threads) as u64,
            payload_sum: sum,
        }
    }

    fn check_all_designs(load: &Load) {
        let want = expected(load);
        let mut ran = 0;
        for design in Design::ALL {
            if !design.supports(load) {
                assert!(keepalive_scaling(design, load).is_err(), "{design:?}");
                continue;
            }
            let run = keepalive_scaling(design, load).unwrap_or_else(|e| panic!("{design:?}: {e}"));
            assert_eq!(run.checksum, want, "{design:?} at {load:?}");
            assert_eq!(run.cores.len(), load.threads);
            let ops: u64 = run.cores.iter().map(|c| c.ops).sum();
            assert_eq!(ops, want.refreshed);
            if load.remote_share == 0.0 {
                assert!(run.cores.iter().all(|c| c.remote_ops == 0));
            }
            if design != Design::Percpu {
                assert_eq!(run.backpressure, Backpressure::default());
            }
            ran += 1;
        }
        assert!(ran >= 4, "only {ran} designs ran");
    }

    #[test]
    fn every_design_agrees_on_one_thread() {
        check_all_designs(&load(1, 0.0));
    }

    #[test]
    fn every_design_agrees_across_cores() {
        if available_cores() < 2 {
            eprintln!("one core: no cross-core run");
            return;
        }
        for share in [0.1, 0.5, 1.0] {
            let load = load(2, share);
            check_all_designs(&load);
            let run = keepalive_scaling(Design::StdMutexPerCore, &load).expect("runs");
            let remote: u64 = run.cores.iter().map(|c| c.remote_ops).sum();
            assert!(remote > 0, "no remote refresh at {share}");
            if share == 1.0 {
                assert_eq!(remote, load.ops_per_thread * 2);
            }
        }
    }

    #[test]
    fn keys_name_each_design_once() {
        for d in Design::ALL {
            assert_eq!(Design::from_key(d.key()), Some(d));
        }
        assert_eq!(Design::from_key("percpu-mutex"), None);
    }

    #[test]
    fn bad_loads_are_refused() {
        let mut l = load(1, 0.0);
        l.remote_share = 1.5;
        assert!(keepalive_scaling(Design::Percpu, &l).is_err());
        let mut l = load(1, 0.0);
        l.per_core = 0;
        assert!(keepalive_scaling(Design::StdMutexPerCore, &l).is_err());
        let l = load(available_cores() + 1, 0.0);
        assert!(keepalive_scaling(Design::GlobalMutex, &l).is_err());
    }

    #[test]
    fn clock_rounds_deadlines_up_and_now_down() {
        let clock = TickClock::new();
        let now = clock.now_tick();
        let d = clock.deadline(Duration::from_micros(1));
        assert!(d > now, "{d} <= {now}");
        assert!(clock.deadline(Duration::from_secs(30)) >= now + 30_000);
    }
}

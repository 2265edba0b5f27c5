//! Async timers: tickwheel-percpu's `time` module against `tokio::time` (tokio's default timer
//! and its per-worker one) and pingora-timeout, on the same runtimes, in the same run.
//!
//! # Model
//! Each timer API is one column: an [`Api`] impl, listed in `columns()`. One runtime of each
//! flavour (current-thread, or multi-thread with two workers) has tokio's default time driver
//! and a set of tickwheel bases (one per runtime thread, turned by their `AsyncFd` tasks);
//! tokio, pingora-timeout and tickwheel run on it. tokio's per-worker timer is a property of a
//! whole runtime (`Builder::enable_alt_timer`, multi-thread only, behind `--cfg tokio_unstable`),
//! so under that cfg the multi-thread flavour has a second runtime, with it, for the `tokio-alt`
//! column; on the current-thread flavour that column is n/a. Each workload is written once,
//! generic over [`Api`], and runs for every column in rotating order, repeated; the table reports
//! medians with the range of the repetitions, and every peer's median over each of tickwheel's.
//!
//! The cost is CPU time, not wall time: sleeps that fire spend most of their wall time waiting,
//! which no timer can shorten. It is the process's CPU time: the runtime thread (or both workers,
//! their idle spinning included) and pingora-timeout's timer thread, which fires its sleeps off
//! the runtime; that thread wakes every 10 ms whichever API runs, and idle workers park.
//!
//! Workloads (ns per operation):
//! - `timeout_ready`: `timeout(30 s, ready)` created, awaited and dropped; the per-request
//!   pattern where the request completes at once.
//! - `timeout_wait1`: the same around a future that is pending once (so the timer is filed and
//!   then cancelled); both polls happen inside one poll of the task, so the runtime's wake-up
//!   round trip (identical for all APIs, and larger than any timer) is not in the figure.
//! - `fire`: `n` sleeps 1-4 ms out are filed, then all awaited; per sleep fired.
//! - `reset`: 10^4 filed sleeps, each re-armed in turn to now + 30 s (clock read per reset);
//!   n/a for pingora-timeout, whose sleep cannot be re-armed.
//! - `live`: `n` sleeps (30 s out) filed at once, then dropped; per sleep, at populations 10^3
//!   to 10^6.
//!
//! Every run counts its outcomes ([`Tally`]): sleeps completed before their deadline (`early`),
//! and timeouts that elapsed, 30 s sleeps found ready, or operations missing (`wrong`).
//!
//! Lateness (`lateness`): 10^5 tasks each sleep until their own deadline, spread evenly over
//! 500 ms from 400 ms after the start (so all are in flight before the first comes due; sleeps
//! filed later are counted), and record how late they woke: p50, p99 and max per API, medians
//! over the repetitions. With the bases in Coarse mode tickwheel's figure includes Coarse's
//! slack (up to 1/8 of each delay, by design).
//!
//! The bases run in Exact mode with a 1 ms tick, the `time` module's default (`Timers::new`), or
//! in Coarse with `TICKWHEEL_ASYNC_MODE=coarse`. The `tickwheel-fallback` column runs on a
//! runtime of the same flavour with no per-core setup, where the module uses its process-wide
//! base.
//!
//! Regimes: every workload runs as one spawned task (the handler filing and cancelling its own
//! timeouts between awaits, nothing else timing at once: the uncontended cost), and on the
//! multi-thread runtime also as one task per worker at once (two; tokio's default timer then
//! takes its one wheel lock from both workers). On the current-thread runtime one task per
//! worker is one task, so it has the first line only. On the multi-thread runtime each task
//! yields every 64 operations, so tasks move between the two workers between operations.
//! [`run_one`] runs one workload of one API in one task, for an instruction counter
//! (`tickwheel-benches async-one`).
//!
//! # Given up
//! Sleeps are stored inline in a `Vec` for every API (tokio's are `!Unpin`, pinned in place), so
//! none pays a `Box` per sleep; a server keeps them inside task futures, which is the same.
//! pingora-timeout's `fast_sleep` takes a duration, not a deadline: it gets the deadline less a
//! clock reading the workload already took, so it reads no clock more than its own; its
//! `fast_timeout` boxes its timer at the first pending poll, which is its own cost.
//! pingora-timeout truncates a deadline to whole milliseconds before rounding it up to its
//! 10 ms buckets, so one of its sleeps can complete up to 1 ms early: its early count is
//! reported, not required to be 0.

use std::future::{Future, poll_fn};
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tickwheel_percpu::Config;
use tickwheel_percpu::time::{self, Timers};

use crate::percore::{LatenessSummary, summarize};

/// The API has no way to move a pending sleep's deadline (the `reset` cell reads "n/a").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported;

/// A sleep as the workloads use it.
pub trait BenchSleep: Future<Output = ()> + Send + 'static {
    /// Moves the deadline in place, or says the API cannot.
    fn reset(self: Pin<&mut Self>, t: Instant) -> Result<(), Unsupported>;
}

/// Which of the bench's runtimes a column runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// The runtime with tokio's default timer and the tickwheel bases (both flavours).
    Shared,
    /// A runtime of the same flavour with no tickwheel setup at all (no `Timers`, no driver on
    /// any thread): `tickwheel_percpu::time` falls back to its process-wide base there.
    Bare,
    /// A multi-thread runtime built with `Builder::enable_alt_timer` (tokio's per-worker
    /// timer); needs `--cfg tokio_unstable`, and has no current-thread form.
    #[cfg(tokio_unstable)]
    AltTimer,
}

/// A timer API as a workload uses it: one column of the table.
pub trait Api: Copy + Send + Sync + 'static {
    /// Column name.
    fn name(self) -> &'static str;
    /// Whether this is one of tickwheel's own columns (the ratios are every peer against each).
    fn ours(self) -> bool {
        false
    }
    /// The runtime it runs on.
    fn runtime(self) -> Runtime {
        Runtime::Shared
    }
    /// A sleep until `deadline`. `now` is a clock reading the workload took at most as long ago
    /// as the sleep is made, for APIs that take a duration instead of a deadline: they get
    /// `deadline - now`, which is never shorter than the time left, so they read no clock more.
    fn sleep(self, deadline: Instant, now: Instant) -> impl BenchSleep;
    /// `timeout(d, f)`, the error mapped to `()`.
    fn timeout<F: Future + Send>(
        self,
        d: Duration,
        f: F,
    ) -> impl Future<Output = Result<F::Output, ()>> + Send;
}

impl BenchSleep for tokio::time::Sleep {
    fn reset(self: Pin<&mut Self>, t: Instant) -> Result<(), Unsupported> {
        tokio::time::Sleep::reset(self, t.into());
        Ok(())
    }
}

/// `tokio::time`, on tokio's default timer or (with `--cfg tokio_unstable`) its per-worker one.
#[derive(Clone, Copy, Debug)]
pub struct Tokio(pub Runtime);

impl Api for Tokio {
    fn name(self) -> &'static str {
        match self.0 {
            Runtime::Shared | Runtime::Bare => "tokio",
            #[cfg(tokio_unstable)]
            Runtime::AltTimer => "tokio-alt",
        }
    }
    fn runtime(self) -> Runtime {
        self.0
    }
    fn sleep(self, deadline: Instant, _now: Instant) -> impl BenchSleep {
        tokio::time::sleep_until(deadline.into())
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        tokio::time::timeout(d, f).await.map_err(|_| ())
    }
}

impl BenchSleep for time::Sleep {
    fn reset(self: Pin<&mut Self>, t: Instant) -> Result<(), Unsupported> {
        self.get_mut().reset(t.into());
        Ok(())
    }
}

/// `tickwheel_percpu::time` on the per-core bases (the fast path).
#[derive(Clone, Copy, Debug)]
pub struct Tickwheel;

impl Api for Tickwheel {
    fn name(self) -> &'static str {
        "tickwheel"
    }
    fn ours(self) -> bool {
        true
    }
    fn sleep(self, deadline: Instant, _now: Instant) -> impl BenchSleep {
        time::sleep_until(deadline.into())
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        time::timeout(d, f).await.map_err(|_| ())
    }
}

/// `tickwheel_percpu::time` on a runtime with no per-core setup: the fallback base, turned by a
/// thread of its own.
#[derive(Clone, Copy, Debug)]
pub struct TickwheelFallback;

impl Api for TickwheelFallback {
    fn name(self) -> &'static str {
        "tickwheel-fallback"
    }
    fn ours(self) -> bool {
        true
    }
    fn runtime(self) -> Runtime {
        Runtime::Bare
    }
    fn sleep(self, deadline: Instant, _now: Instant) -> impl BenchSleep {
        time::sleep_until(deadline.into())
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        time::timeout(d, f).await.map_err(|_| ())
    }
}

/// A sleep with no reset (pingora's `fast_sleep` is an `async fn` of a duration).
struct NoReset<F>(F);

impl<F: Future<Output = ()>> Future for NoReset<F> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        // SAFETY: the field is pinned structurally: `NoReset` never moves it out, has no `Drop`
        // and no `Unpin` impl of its own, so it stays in place as long as `self` does.
        unsafe { self.map_unchecked_mut(|s| &mut s.0) }.poll(cx)
    }
}

impl<F: Future<Output = ()> + Send + 'static> BenchSleep for NoReset<F> {
    fn reset(self: Pin<&mut Self>, _t: Instant) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
}

/// pingora-timeout's `fast_sleep` and `fast_timeout`: per-thread maps of 10 ms buckets, timers
/// registered at first poll, fired by a timer thread of its own.
#[derive(Clone, Copy, Debug)]
pub struct Pingora;

impl Api for Pingora {
    fn name(self) -> &'static str {
        "pingora"
    }
    fn sleep(self, deadline: Instant, now: Instant) -> impl BenchSleep {
        NoReset(pingora_timeout::fast_timeout::fast_sleep(
            deadline.saturating_duration_since(now),
        ))
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        pingora_timeout::fast_timeout::fast_timeout(d, f)
            .await
            .map_err(|_| ())
    }
}

/// Pending once (waking itself), then ready.
struct WaitOnce(bool);

impl Future for WaitOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Sleeps kept inline and pinned in place.
struct Pinned<S>(Vec<S>);

impl<S: BenchSleep> Pinned<S> {
    fn at(&mut self, i: usize) -> Pin<&mut S> {
        // SAFETY: the Vec is filled before any element is pinned and never grows, shrinks or
        // moves an element afterwards; the elements are dropped in place with the Vec.
        unsafe { Pin::new_unchecked(&mut self.0[i]) }
    }

    /// Polls each once with the task's waker (files the timers); returns how many were
    /// already complete.
    async fn file_all(&mut self) -> u64 {
        poll_fn(|cx| {
            let mut ready = 0;
            for i in 0..self.0.len() {
                ready += u64::from(self.at(i).poll(cx).is_ready());
            }
            Poll::Ready(ready)
        })
        .await
    }
}

async fn maybe_yield(i: usize, yield_every: Option<usize>) {
    if yield_every.is_some_and(|k| i % k == k - 1) {
        tokio::task::yield_now().await;
    }
}

/// What a workload's operations came to, counted on every run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Operations done.
    pub ops: u64,
    /// Sleeps that completed before their deadline.
    pub early: u64,
    /// Outcomes other than the workload's (a 30 s timeout that elapsed, a sleep 30 s out that
    /// was ready when filed, a sleep that did not fire).
    pub wrong: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.ops += o.ops;
        self.early += o.early;
        self.wrong += o.wrong;
    }
}

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// See the module doc.
    TimeoutReady,
    /// See the module doc.
    TimeoutWait1,
    /// See the module doc.
    Fire,
    /// See the module doc.
    Reset,
    /// See the module doc.
    Live,
}

impl Workload {
    /// Every workload, in the table's order.
    pub const ALL: [Self; 5] = [
        Self::TimeoutReady,
        Self::TimeoutWait1,
        Self::Fire,
        Self::Reset,
        Self::Live,
    ];

    /// Name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::TimeoutReady => "timeout_ready",
            Self::TimeoutWait1 => "timeout_wait1",
            Self::Fire => "fire",
            Self::Reset => "reset",
            Self::Live => "live",
        }
    }

    async fn run<A: Api>(
        self,
        api: A,
        n: usize,
        yield_every: Option<usize>,
    ) -> Result<Tally, Unsupported> {
        let mut t = Tally {
            ops: n as u64,
            ..Tally::default()
        };
        match self {
            Self::TimeoutReady => {
                let mut sum = 0usize;
                for i in 0..n {
                    let fut = std::future::ready(i);
                    match api.timeout(Duration::from_secs(30), fut).await {
                        Ok(v) => sum += v,
                        Err(()) => t.wrong += 1,
                    }
                    maybe_yield(i, yield_every).await;
                }
                black_box(sum);
            }
            Self::TimeoutWait1 => {
                for i in 0..n {
                    let out = api.timeout(Duration::from_secs(30), WaitOnce(false));
                    let mut out = std::pin::pin!(out);
                    // Both polls in one poll of the task: the first files the timer, the second
                    // finds the inner future ready; the runtime's wake-up round trip (the same
                    // for every API, and larger than any timer) stays out of the figure.
                    let ok = poll_fn(|cx| {
                        let first = out.as_mut().poll(cx);
                        let second = if first.is_pending() {
                            out.as_mut().poll(cx)
                        } else {
                            first
                        };
                        Poll::Ready(matches!(second, Poll::Ready(Ok(()))))
                    })
                    .await;
                    t.wrong += u64::from(!ok);
                    maybe_yield(i, yield_every).await;
                }
            }
            Self::Fire => {
                let start = Instant::now();
                let deadline = |i: usize| start + Duration::from_millis(1 + (i % 4) as u64);
                let mut sleeps = Pinned((0..n).map(|i| api.sleep(deadline(i), start)).collect());
                sleeps.file_all().await;
                for i in 0..n {
                    sleeps.at(i).await;
                    if Instant::now() < deadline(i) {
                        t.early += 1;
                    }
                    maybe_yield(i, yield_every).await;
                }
            }
            Self::Reset => {
                let pop = n.min(10_000);
                let now = Instant::now();
                let far = now + Duration::from_secs(30);
                let mut sleeps = Pinned((0..pop).map(|_| api.sleep(far, now)).collect());
                t.wrong += sleeps.file_all().await;
                for i in 0..n {
                    let to = Instant::now() + Duration::from_secs(30);
                    sleeps.at(i % pop).reset(to)?;
                    maybe_yield(i, yield_every).await;
                }
                t.wrong += sleeps.file_all().await;
            }
            Self::Live => {
                let now = Instant::now();
                let far = now + Duration::from_secs(30);
                let at = |i: usize| far + Duration::from_micros(i as u64 % 30_000_000);
                let mut sleeps = Pinned((0..n).map(|i| api.sleep(at(i), now)).collect());
                t.wrong += sleeps.file_all().await;
                // Dropping in the middle of a batch of yields lets the task move first.
                maybe_yield(n - 1, yield_every).await;
                drop(sleeps);
            }
        }
        Ok(t)
    }
}

/// Lateness with many sleeps in flight: `n` tasks each sleep until their own deadline, spread
/// evenly over `spread` from `lead` after the start, and record how late they woke.
async fn lateness_run<A: Api>(api: A, n: usize, lead: Duration, spread: Duration) -> LateRun {
    let late_ns: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let early = Arc::new(AtomicU64::new(0));
    let filed_late = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let first = start + lead;
    let jobs: Vec<_> = (0..n)
        .map(|i| {
            let (late_ns, early, filed_late) = (late_ns.clone(), early.clone(), filed_late.clone());
            let deadline = first + spread.mul_f64(i as f64 / n as f64);
            tokio::spawn(async move {
                // A fresh reading: the spawns take a while, and a duration from `start` would
                // push a duration-taking API's deadline later by as much.
                let now = Instant::now();
                let sleep = api.sleep(deadline, now);
                // The first poll files the timer: after the first deadline, not all n were
                // in flight together.
                if now >= first {
                    // Relaxed: a counter, read after every task was joined.
                    filed_late.fetch_add(1, Ordering::Relaxed);
                }
                sleep.await;
                let woke = Instant::now();
                if woke < deadline {
                    // Relaxed: as above.
                    early.fetch_add(1, Ordering::Relaxed);
                }
                let late = woke.saturating_duration_since(deadline).as_nanos() as u64;
                // Relaxed: each slot is written by one task and read after the joins.
                late_ns[i].store(late, Ordering::Relaxed);
            })
        })
        .collect();
    for j in jobs {
        j.await.expect("lateness task");
    }
    let mut samples: Vec<Duration> = late_ns
        .iter()
        .map(|l| Duration::from_nanos(l.load(Ordering::Relaxed)))
        .collect();
    LateRun {
        summary: summarize(&mut samples).expect("at least one sleep"),
        early: early.load(Ordering::Relaxed),
        filed_late: filed_late.load(Ordering::Relaxed),
    }
}

/// One lateness run of one API.
#[derive(Clone, Copy, Debug)]
struct LateRun {
    summary: LatenessSummary,
    early: u64,
    filed_late: u64,
}

/// The bases' wheel mode: Exact, the `time` module's default (`Timers::new`, tokio's timing), or
/// Coarse with `TICKWHEEL_ASYNC_MODE=coarse`.
fn bases_mode() -> tickwheel_percpu::Mode {
    match std::env::var("TICKWHEEL_ASYNC_MODE").as_deref() {
        Ok("coarse") => tickwheel_percpu::Mode::Coarse,
        _ => tickwheel_percpu::Mode::Exact,
    }
}

fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used are always available.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Which runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// One current-thread runtime.
    Current,
    /// A multi-thread runtime with two workers.
    Multi,
}

impl Flavor {
    /// Name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::Current => "current_thread",
            Self::Multi => "multi_thread(2)",
        }
    }

    /// Threads that run tasks.
    pub fn workers(self) -> usize {
        match self {
            Self::Current => 1,
            Self::Multi => 2,
        }
    }

    /// The regimes this flavour has distinct lines for (see the module doc).
    fn regimes(self) -> &'static [Regime] {
        match self {
            Self::Current => &[Regime::OneTask],
            Self::Multi => &[Regime::OneTask, Regime::TaskPerWorker],
        }
    }
}

/// How many tasks run a workload at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    /// One spawned task: the uncontended cost.
    OneTask,
    /// One task per worker, all at once.
    TaskPerWorker,
}

impl Regime {
    /// Name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::OneTask => "1 task",
            Self::TaskPerWorker => "1 task/worker",
        }
    }

    fn tasks(self, flavor: Flavor) -> usize {
        match self {
            Self::OneTask => 1,
            Self::TaskPerWorker => flavor.workers(),
        }
    }
}

/// The runtimes of one flavour: the shared one (tokio's default timer and the tickwheel bases)
/// and, on the multi-thread flavour with `--cfg tokio_unstable`, one with tokio's per-worker
/// timer.
struct Bench {
    flavor: Flavor,
    rt: tokio::runtime::Runtime,
    timers: Timers,
    /// The same flavour built without the bases (for the fallback column).
    bare: tokio::runtime::Runtime,
    #[cfg(tokio_unstable)]
    alt: Option<tokio::runtime::Runtime>,
}

impl Bench {
    fn new(flavor: Flavor) -> Self {
        let config = Config::default().mode(bases_mode());
        let timers = Timers::with_config(2, config).expect("bases");
        let mut b = match flavor {
            Flavor::Current => tokio::runtime::Builder::new_current_thread(),
            Flavor::Multi => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2)
                    .on_thread_start(timers.on_thread_start());
                b
            }
        };
        let rt = b.enable_io().enable_time().build().expect("runtime");
        let bare = match flavor {
            Flavor::Current => tokio::runtime::Builder::new_current_thread(),
            Flavor::Multi => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
        }
        .enable_io()
        .enable_time()
        .build()
        .expect("runtime without the bases");
        if flavor == Flavor::Multi {
            rt.block_on(async { timers.spawn_drivers().map(drop) })
                .expect("drivers");
        }
        #[cfg(tokio_unstable)]
        let alt = (flavor == Flavor::Multi).then(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_alt_timer()
                .build()
                .expect("runtime with the per-worker timer")
        });
        Self {
            flavor,
            rt,
            timers,
            bare,
            #[cfg(tokio_unstable)]
            alt,
        }
    }

    /// The runtime `r`, where this flavour has it.
    fn runtime(&self, r: Runtime) -> Option<&tokio::runtime::Runtime> {
        match r {
            Runtime::Shared => Some(&self.rt),
            Runtime::Bare => Some(&self.bare),
            #[cfg(tokio_unstable)]
            Runtime::AltTimer => self.alt.as_ref(),
        }
    }

    /// Runs `fut` to completion on runtime `r`: inside the bases' `block_on` on the shared
    /// current-thread runtime (so its thread has a tickwheel driver), a plain `block_on`
    /// otherwise.
    fn on<F: Future>(&self, r: Runtime, rt: &tokio::runtime::Runtime, fut: F) -> F::Output {
        match (self.flavor, r) {
            (Flavor::Current, Runtime::Shared) => self.timers.block_on(0, rt, fut).expect("driver"),
            _ => rt.block_on(fut),
        }
    }

    /// CPU ns per operation for `n` operations of `w` on `api` in `regime`, and their tally;
    /// `None` where this flavour lacks the API's runtime.
    fn measure<A: Api>(
        &self,
        api: A,
        w: Workload,
        n: usize,
        regime: Regime,
    ) -> Option<Result<(f64, Tally), Unsupported>> {
        let rt = self.runtime(api.runtime())?;
        let tasks = regime.tasks(self.flavor);
        let yield_every = (self.flavor == Flavor::Multi).then_some(64);
        let per_task = (n / tasks).max(1);
        let t0 = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
        let out = self.on(api.runtime(), rt, async move {
            // Spawned, even alone: on the multi-thread runtime `block_on`'s own thread is not a
            // worker.
            let jobs: Vec<_> = (0..tasks)
                .map(|_| tokio::spawn(w.run(api, per_task, yield_every)))
                .collect();
            let mut sum = Ok(Tally::default());
            for j in jobs {
                let one = j.await.expect("task");
                sum = sum.and_then(|mut s| {
                    s.add(one?);
                    Ok(s)
                });
            }
            sum
        });
        let spent = cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID) - t0;
        Some(out.map(|t| (spent as f64 / t.ops as f64, t)))
    }
}

/// One column whatever its [`Api`] type (the table holds a list of them).
trait Column {
    fn name(&self) -> &'static str;
    fn ours(&self) -> bool;
    fn measure(
        &self,
        b: &Bench,
        w: Workload,
        n: usize,
        regime: Regime,
    ) -> Option<Result<(f64, Tally), Unsupported>>;
    fn lateness(&self, b: &Bench, plan: LatePlan) -> Option<LateRun>;
}

impl<A: Api> Column for A {
    fn name(&self) -> &'static str {
        Api::name(*self)
    }
    fn ours(&self) -> bool {
        Api::ours(*self)
    }
    fn measure(
        &self,
        b: &Bench,
        w: Workload,
        n: usize,
        regime: Regime,
    ) -> Option<Result<(f64, Tally), Unsupported>> {
        b.measure(*self, w, n, regime)
    }
    fn lateness(&self, b: &Bench, plan: LatePlan) -> Option<LateRun> {
        let rt = b.runtime(self.runtime())?;
        Some(b.on(
            self.runtime(),
            rt,
            lateness_run(*self, plan.sleeps, plan.lead, plan.spread),
        ))
    }
}

/// The table's columns, in order: every timer API measured. A new one (say tickwheel's timers
/// without per-core setup) is one more [`Api`] impl pushed here; its ratios follow from
/// [`Api::ours`].
fn columns() -> Vec<Box<dyn Column>> {
    let mut c: Vec<Box<dyn Column>> = vec![Box::new(Tokio(Runtime::Shared))];
    #[cfg(tokio_unstable)]
    c.push(Box::new(Tokio(Runtime::AltTimer)));
    c.push(Box::new(Pingora));
    c.push(Box::new(Tickwheel));
    c.push(Box::new(TickwheelFallback));
    c
}

/// Median and range of the repetitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median (the upper one of an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Option<Self> {
        v.sort_by(f64::total_cmp);
        Some(Self {
            median: *v.get(v.len() / 2)?,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} ({:.1}-{:.1})", self.median, self.min, self.max)
    }
}

/// One API's figures in one line.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Column name.
    pub api: &'static str,
    /// One of tickwheel's own columns.
    pub ours: bool,
    /// CPU ns per operation over the repetitions; `None` ("n/a") where the API has no such
    /// operation (pingora's sleep has no reset) or the flavour no such runtime (tokio's
    /// per-worker timer on the current-thread runtime).
    pub ns: Option<Stats>,
    /// Outcomes over all repetitions.
    pub tally: Tally,
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Line {
    /// Runtime flavour.
    pub flavor: &'static str,
    /// Tasks at once (see [`Regime`]).
    pub regime: &'static str,
    /// Workload.
    pub workload: &'static str,
    /// Operations (or live sleeps, for `live`).
    pub n: usize,
    /// One per column, in column order.
    pub cells: Vec<Cell>,
}

impl Line {
    /// The cell of `api`.
    pub fn cell(&self, api: &str) -> Option<&Cell> {
        self.cells.iter().find(|c| c.api == api)
    }

    /// Every peer's median against each of ours (`peer/ours`, above 1 where ours is faster);
    /// `None` where either is n/a.
    pub fn ratios(&self) -> Vec<(String, Option<f64>)> {
        let mut out = Vec::new();
        for o in self.cells.iter().filter(|c| c.ours) {
            for p in self.cells.iter().filter(|c| !c.ours) {
                let r = p.ns.zip(o.ns).map(|(p, o)| p.median / o.median);
                out.push((format!("{}/{}", p.api, o.api), r));
            }
        }
        out
    }
}

/// One API's lateness line.
#[derive(Clone, Debug)]
pub struct LateLine {
    /// Runtime flavour.
    pub flavor: &'static str,
    /// Column name.
    pub api: &'static str,
    /// Sleeps in flight.
    pub sleeps: usize,
    /// Median lateness, µs, over the repetitions.
    pub p50: Stats,
    /// 99th percentile, µs.
    pub p99: Stats,
    /// Largest, µs.
    pub max: Stats,
    /// Sleeps that completed before their deadline (all repetitions).
    pub early: u64,
    /// Sleeps first polled after the first deadline (all repetitions): when not 0, fewer than
    /// `sleeps` were in flight together and the lead should grow.
    pub filed_late: u64,
}

/// The lateness run's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatePlan {
    /// Sleeps, one task each.
    pub sleeps: usize,
    /// From the start to the first deadline (time to spawn and file them all).
    pub lead: Duration,
    /// The deadlines are spread evenly over this.
    pub spread: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// CPU cost per operation.
    pub lines: Vec<Line>,
    /// Lateness with many sleeps in flight.
    pub lateness: Vec<LateLine>,
}

/// Runs every workload on both runtimes, `reps` times each, rotating the APIs' order.
/// `only`: workload names to run, `lateness` among them (all if empty).
pub fn run(reps: usize, quick: bool, only: &[String]) -> Report {
    let scale = if quick { 100 } else { 1 };
    let mut plan: Vec<(Workload, usize)> = vec![
        (Workload::TimeoutReady, 2_000_000 / scale),
        (Workload::TimeoutWait1, 200_000 / scale),
        (Workload::Fire, 100_000 / scale),
        (Workload::Reset, 1_000_000 / scale),
    ];
    for n in [1_000, 10_000, 100_000, 1_000_000] {
        if n / scale >= 100 {
            plan.push((Workload::Live, n / scale.min(10)));
        }
    }
    plan.retain(|(w, _)| only.is_empty() || only.iter().any(|o| o == w.name()));
    let late = (only.is_empty() || only.iter().any(|o| o == "lateness")).then_some(if quick {
        LatePlan {
            sleeps: 1_000,
            lead: Duration::from_millis(50),
            spread: Duration::from_millis(50),
        }
    } else {
        LatePlan {
            sleeps: 100_000,
            lead: Duration::from_millis(400),
            spread: Duration::from_millis(500),
        }
    });
    run_plan(reps, &plan, late)
}

/// Runs `plan` (workload, operations) and the lateness run `late` on both runtimes, `reps`
/// times each, rotating the APIs' order.
pub fn run_plan(reps: usize, plan: &[(Workload, usize)], late: Option<LatePlan>) -> Report {
    let cols = columns();
    let mut report = Report::default();
    for flavor in [Flavor::Current, Flavor::Multi] {
        let bench = Bench::new(flavor);
        let lines = plan
            .iter()
            .flat_map(|&(w, n)| flavor.regimes().iter().map(move |&r| (w, n, r)));
        for (w, n, regime) in lines {
            let mut ns = vec![Vec::new(); cols.len()];
            let mut tally = vec![Tally::default(); cols.len()];
            let mut unsupported = vec![false; cols.len()];
            for rep in 0..reps {
                // Rotate which goes first, so none always runs on a warmer cache.
                for k in 0..cols.len() {
                    let c = (rep + k) % cols.len();
                    match cols[c].measure(&bench, w, n, regime) {
                        Some(Ok((x, t))) => {
                            ns[c].push(x);
                            tally[c].add(t);
                        }
                        Some(Err(Unsupported)) => unsupported[c] = true,
                        None => {}
                    }
                }
            }
            let cells = (0..cols.len())
                .map(|c| Cell {
                    api: cols[c].name(),
                    ours: cols[c].ours(),
                    ns: if unsupported[c] {
                        None
                    } else {
                        Stats::of(std::mem::take(&mut ns[c]))
                    },
                    tally: tally[c],
                })
                .collect();
            let line = Line {
                flavor: flavor.name(),
                regime: regime.name(),
                workload: w.name(),
                n,
                cells,
            };
            eprintln!("  {}", progress(&line));
            report.lines.push(line);
        }
        let Some(plan) = late else { continue };
        let mut runs: Vec<Vec<LateRun>> = vec![Vec::new(); cols.len()];
        for rep in 0..reps {
            for k in 0..cols.len() {
                let c = (rep + k) % cols.len();
                runs[c].extend(cols[c].lateness(&bench, plan));
            }
        }
        for (c, runs) in runs.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let us = |f: fn(&LatenessSummary) -> Duration| {
                let v = runs.iter().map(|r| f(&r.summary).as_secs_f64() * 1e6);
                Stats::of(v.collect()).expect("at least one run")
            };
            let line = LateLine {
                flavor: flavor.name(),
                api: cols[c].name(),
                sleeps: plan.sleeps,
                p50: us(|s| s.p50),
                p99: us(|s| s.p99),
                max: us(|s| s.max),
                early: runs.iter().map(|r| r.early).sum(),
                filed_late: runs.iter().map(|r| r.filed_late).sum(),
            };
            eprintln!(
                "  {} lateness {} x{}: p99 {} µs, max {} µs, early {}, filed late {}",
                line.flavor, line.api, line.sleeps, line.p99, line.max, line.early, line.filed_late
            );
            report.lateness.push(line);
        }
    }
    report
}

/// `n` operations of the workload named `workload` on the column named `api`, in one task on
/// the runtime of flavour `flavor` (`current` or `multi`): CPU ns per operation and the tally.
/// Meant for an instruction counter: run it at two sizes and divide the difference.
pub fn run_one(api: &str, workload: &str, flavor: &str, n: usize) -> Result<(f64, Tally), String> {
    let w = Workload::ALL
        .into_iter()
        .find(|w| w.name() == workload)
        .ok_or_else(|| format!("unknown workload {workload:?}"))?;
    let flavor = match flavor {
        "current" => Flavor::Current,
        "multi" => Flavor::Multi,
        other => return Err(format!("unknown flavour {other:?}; use current or multi")),
    };
    let cols = columns();
    let col = cols.iter().find(|c| c.name() == api).ok_or_else(|| {
        let names: Vec<_> = cols.iter().map(|c| c.name()).collect();
        format!("unknown timer API {api:?}; use one of {}", names.join(", "))
    })?;
    let bench = Bench::new(flavor);
    match col.measure(&bench, w, n, Regime::OneTask) {
        Some(Ok(out)) => Ok(out),
        Some(Err(Unsupported)) => Err(format!("{api} has no {workload}")),
        None => Err(format!("{api} has no {} runtime", flavor.name())),
    }
}

fn progress(l: &Line) -> String {
    let mut s = format!("{} {} {} {}:", l.flavor, l.regime, l.workload, l.n);
    for c in &l.cells {
        match c.ns {
            Some(x) => s.push_str(&format!(" {} {:.1} ns", c.api, x.median)),
            None => s.push_str(&format!(" {} n/a", c.api)),
        }
    }
    for (name, r) in l.ratios() {
        if let Some(r) = r {
            s.push_str(&format!(", {name} {r:.2}x"));
        }
    }
    s.push_str(&format!(
        ", early {}, wrong {}",
        counts(l, |t| t.early),
        counts(l, |t| t.wrong)
    ));
    s
}

/// `0`, or the APIs with a non-zero count, e.g. `pingora 3`.
fn counts(l: &Line, f: fn(&Tally) -> u64) -> String {
    let nonzero: Vec<String> = l
        .cells
        .iter()
        .filter(|c| f(&c.tally) > 0)
        .map(|c| format!("{} {}", c.api, f(&c.tally)))
        .collect();
    if nonzero.is_empty() {
        "0".into()
    } else {
        nonzero.join(", ")
    }
}

/// The APIs whose memory per pending sleep the runner probes (each in a fresh process).
pub const MEMORY_APIS: [&str; 3] = ["tokio", "pingora", "tickwheel"];

/// Resident bytes per pending sleep for `api_name` (one of [`MEMORY_APIS`]) with `n` sleeps
/// filed on a current-thread runtime; run in a fresh process so earlier frees do not hide growth.
pub fn bytes_per_sleep(api_name: &str, n: usize) -> Result<f64, String> {
    let timers = Timers::new(1).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    async fn filed<A: Api>(api: A, n: usize) -> f64 {
        let before = crate::mem::rss_bytes().unwrap_or(0);
        let now = Instant::now();
        let far = now + Duration::from_secs(30);
        let at = |i: usize| far + Duration::from_micros(i as u64 % 30_000_000);
        let mut sleeps = Pinned((0..n).map(|i| api.sleep(at(i), now)).collect());
        sleeps.file_all().await;
        let after = crate::mem::rss_bytes().unwrap_or(0);
        black_box(&sleeps);
        after.saturating_sub(before) as f64 / n as f64
    }
    let out = match api_name {
        "tokio" => timers.block_on(0, &rt, filed(Tokio(Runtime::Shared), n)),
        "pingora" => timers.block_on(0, &rt, filed(Pingora, n)),
        "tickwheel" => timers.block_on(0, &rt, filed(Tickwheel, n)),
        other => {
            return Err(format!(
                "unknown timer API {other:?}; use one of {}",
                MEMORY_APIS.join(", ")
            ));
        }
    };
    out.map_err(|e| e.to_string())
}

/// Markdown tables of `report`, with memory per pending sleep if given: for each size, one
/// figure per API of [`MEMORY_APIS`], in that order.
pub fn markdown(report: &Report, mem: &[(usize, Vec<f64>)]) -> String {
    let mut out = String::new();
    if let Some(first) = report.lines.first() {
        out.push_str("| runtime | tasks | workload | n |");
        for c in &first.cells {
            out.push_str(&format!(" {} ns/op |", c.api));
        }
        for (name, _) in first.ratios() {
            out.push_str(&format!(" {name} |"));
        }
        out.push_str(" early | wrong |\n|---|---|---|---:|");
        let figures = first.cells.len() + first.ratios().len();
        out.push_str(&"---:|".repeat(figures));
        out.push_str("---|---|\n");
        for l in &report.lines {
            out.push_str(&format!(
                "| {} | {} | {} | {} |",
                l.flavor, l.regime, l.workload, l.n
            ));
            for c in &l.cells {
                match c.ns {
                    Some(x) => out.push_str(&format!(" {x} |")),
                    None => out.push_str(" n/a |"),
                }
            }
            for (_, r) in l.ratios() {
                match r {
                    Some(r) => out.push_str(&format!(" {r:.2}x |")),
                    None => out.push_str(" n/a |"),
                }
            }
            out.push_str(&format!(
                " {} | {} |\n",
                counts(l, |t| t.early),
                counts(l, |t| t.wrong)
            ));
        }
    }
    if !report.lateness.is_empty() {
        out.push_str(
            "\n| runtime | timer | sleeps in flight | p50 µs | p99 µs | max µs | early | filed late |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for l in &report.lateness {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                l.flavor, l.api, l.sleeps, l.p50, l.p99, l.max, l.early, l.filed_late
            ));
        }
    }
    if !mem.is_empty() {
        out.push_str("\n| pending sleeps |");
        for api in MEMORY_APIS {
            out.push_str(&format!(" {api} bytes/sleep |"));
        }
        out.push_str("\n|---:|");
        out.push_str(&"---:|".repeat(MEMORY_APIS.len()));
        out.push('\n');
        for (n, per) in mem {
            out.push_str(&format!("| {n} |"));
            for b in per {
                out.push_str(&format!(" {b:.1} |"));
            }
            out.push('\n');
        }
    }
    out
}

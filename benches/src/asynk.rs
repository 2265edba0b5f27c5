//! Async timers: tickwheel-percpu's `time` module against `tokio::time`, on the same runtime.
//!
//! # Model
//! One runtime (current-thread, or multi-thread with two workers) has both tokio's time driver
//! and a set of tickwheel bases (one per runtime thread, turned by their `AsyncFd` tasks). Each
//! workload is written once, generic over [`Api`], and runs for both APIs in alternation on that
//! runtime, repeated; the table reports medians and the ratio tokio / tickwheel from the same run.
//!
//! The cost is CPU time, not wall time: sleeps that fire spend most of their wall time waiting,
//! which neither timer can shorten. On the current-thread runtime it is the runtime thread's
//! CPU time (the timers' own turns run on it too); on the multi-thread runtime it is the
//! process's CPU time (both workers, their idle spinning included, which both APIs pay).
//!
//! Workloads (ns per operation):
//! - `timeout_ready`: `timeout(30 s, ready)` created, awaited and dropped; the per-request
//!   pattern where the request completes at once.
//! - `timeout_wait1`: the same around a future that is pending once (so the timer is filed and
//!   then cancelled); both polls happen inside one poll of the task, so the runtime's wake-up
//!   round trip (identical for both APIs, and larger than either timer) is not in the figure.
//! - `fire`: `n` sleeps 1-4 ms out are filed, then all awaited; per sleep fired. Early
//!   completions are counted and must be zero.
//! - `reset`: 10^4 filed sleeps, each re-armed in turn to now + 30 s (clock read per reset).
//! - `live`: `n` sleeps (30 s out) filed at once, then dropped; per sleep, at populations 10^3
//!   to 10^6.
//!
//! The bases run in Coarse mode (the default), or in Exact with `TICKWHEEL_ASYNC_MODE=exact`.
//!
//! On the multi-thread runtime each workload runs as 8 tasks with a yield every 64 operations,
//! so tasks move between the two workers between operations.
//!
//! # Given up
//! Sleeps are stored inline in a `Vec` for both APIs (tokio's are `!Unpin`, pinned in place), so
//! neither pays a `Box` per sleep; a server keeps them inside task futures, which is the same.

use std::future::{Future, poll_fn};
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tickwheel_percpu::Config;
use tickwheel_percpu::time::{self, Timers};

/// A timer API as a workload uses it.
pub trait Api: Copy + Send + Sync + 'static {
    /// Its sleep future.
    type Sleep: Future<Output = ()> + Send + 'static;
    /// Column name.
    const NAME: &'static str;
    /// A sleep until `t`.
    fn sleep_until(self, t: Instant) -> Self::Sleep;
    /// Moves a sleep's deadline in place.
    fn reset(self, s: Pin<&mut Self::Sleep>, t: Instant);
    /// `timeout(d, f)`, the error mapped to `()`.
    fn timeout<F: Future + Send>(
        self,
        d: Duration,
        f: F,
    ) -> impl Future<Output = Result<F::Output, ()>> + Send;
}

/// `tokio::time`.
#[derive(Clone, Copy, Debug)]
pub struct Tokio;

impl Api for Tokio {
    type Sleep = tokio::time::Sleep;
    const NAME: &'static str = "tokio";
    fn sleep_until(self, t: Instant) -> Self::Sleep {
        tokio::time::sleep_until(t.into())
    }
    fn reset(self, s: Pin<&mut Self::Sleep>, t: Instant) {
        s.reset(t.into());
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        tokio::time::timeout(d, f).await.map_err(|_| ())
    }
}

/// `tickwheel_percpu::time`.
#[derive(Clone, Copy, Debug)]
pub struct Tickwheel;

impl Api for Tickwheel {
    type Sleep = time::Sleep;
    const NAME: &'static str = "tickwheel";
    fn sleep_until(self, t: Instant) -> Self::Sleep {
        time::sleep_until(t.into())
    }
    fn reset(self, s: Pin<&mut Self::Sleep>, t: Instant) {
        s.get_mut().reset(t.into());
    }
    async fn timeout<F: Future + Send>(self, d: Duration, f: F) -> Result<F::Output, ()> {
        time::timeout(d, f).await.map_err(|_| ())
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

impl<S: Future<Output = ()>> Pinned<S> {
    fn at(&mut self, i: usize) -> Pin<&mut S> {
        // SAFETY: the Vec is filled before any element is pinned and never grows, shrinks or
        // moves an element afterwards; the elements are dropped in place with the Vec.
        unsafe { Pin::new_unchecked(&mut self.0[i]) }
    }

    /// Polls each once with the task's waker (files the timers).
    async fn file_all(&mut self) {
        poll_fn(|cx| {
            for i in 0..self.0.len() {
                let _ = self.at(i).poll(cx);
            }
            Poll::Ready(())
        })
        .await;
    }
}

async fn maybe_yield(i: usize, yield_every: Option<usize>) {
    if yield_every.is_some_and(|k| i % k == k - 1) {
        tokio::task::yield_now().await;
    }
}

/// The workloads; each returns the number of operations and of early completions.
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

    async fn run<A: Api>(self, api: A, n: usize, yield_every: Option<usize>) -> u64 {
        let mut early = 0;
        match self {
            Self::TimeoutReady => {
                let mut sum = 0usize;
                for i in 0..n {
                    let fut = std::future::ready(i);
                    sum += api.timeout(Duration::from_secs(30), fut).await.unwrap();
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
                    // for both APIs, and larger than either timer) stays out of the figure.
                    poll_fn(|cx| {
                        assert!(out.as_mut().poll(cx).is_pending());
                        match out.as_mut().poll(cx) {
                            Poll::Ready(r) => {
                                r.unwrap();
                                Poll::Ready(())
                            }
                            Poll::Pending => unreachable!("inner future is ready"),
                        }
                    })
                    .await;
                    maybe_yield(i, yield_every).await;
                }
            }
            Self::Fire => {
                let start = Instant::now();
                let deadline = |i: usize| start + Duration::from_millis(1 + (i % 4) as u64);
                let mut sleeps = Pinned((0..n).map(|i| api.sleep_until(deadline(i))).collect());
                sleeps.file_all().await;
                for i in 0..n {
                    sleeps.at(i).await;
                    if Instant::now() < deadline(i) {
                        early += 1;
                    }
                    maybe_yield(i, yield_every).await;
                }
            }
            Self::Reset => {
                let pop = n.min(10_000);
                let far = Instant::now() + Duration::from_secs(30);
                let mut sleeps = Pinned((0..pop).map(|_| api.sleep_until(far)).collect());
                sleeps.file_all().await;
                for i in 0..n {
                    let to = Instant::now() + Duration::from_secs(30);
                    api.reset(sleeps.at(i % pop), to);
                    maybe_yield(i, yield_every).await;
                }
            }
            Self::Live => {
                let far = Instant::now() + Duration::from_secs(30);
                let at = |i: usize| far + Duration::from_micros(i as u64 % 30_000_000);
                let mut sleeps = Pinned((0..n).map(|i| api.sleep_until(at(i))).collect());
                sleeps.file_all().await;
                // Dropping in the middle of a batch of yields lets the task move first.
                maybe_yield(n - 1, yield_every).await;
                drop(sleeps);
            }
        }
        early
    }
}

/// The bases' wheel mode: Coarse (the default), or Exact with `TICKWHEEL_ASYNC_MODE=exact`.
fn bases_mode() -> tickwheel_percpu::Mode {
    match std::env::var("TICKWHEEL_ASYNC_MODE").as_deref() {
        Ok("exact") => tickwheel_percpu::Mode::Exact,
        _ => tickwheel_percpu::Mode::Coarse,
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
}

/// A runtime with both timers.
struct Bench {
    flavor: Flavor,
    rt: tokio::runtime::Runtime,
    timers: Timers,
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
        if flavor == Flavor::Multi {
            rt.block_on(async { timers.spawn_drivers().map(drop) })
                .expect("drivers");
        }
        Self { flavor, rt, timers }
    }

    /// CPU ns per operation for `n` operations of `w` on `A`, and early completions.
    fn measure<A: Api>(&self, api: A, w: Workload, n: usize) -> (f64, u64) {
        let (clock, tasks, yield_every) = match self.flavor {
            Flavor::Current => (libc::CLOCK_THREAD_CPUTIME_ID, 1, None),
            Flavor::Multi => (libc::CLOCK_PROCESS_CPUTIME_ID, 8, Some(64)),
        };
        let early = Arc::new(AtomicU64::new(0));
        let per_task = (n / tasks).max(1);
        let t0 = cpu_ns(clock);
        match self.flavor {
            Flavor::Current => {
                let out = self
                    .timers
                    .block_on(0, &self.rt, w.run(api, per_task, None));
                early.fetch_add(out.expect("driver"), Ordering::Relaxed);
            }
            Flavor::Multi => self.rt.block_on(async {
                let jobs: Vec<_> = (0..tasks)
                    .map(|_| {
                        let early = early.clone();
                        tokio::spawn(async move {
                            let e = w.run(api, per_task, yield_every).await;
                            early.fetch_add(e, Ordering::Relaxed);
                        })
                    })
                    .collect();
                for j in jobs {
                    j.await.expect("task");
                }
            }),
        }
        let spent = cpu_ns(clock) - t0;
        let ops = (per_task * tasks) as f64;
        (spent as f64 / ops, early.load(Ordering::Relaxed))
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Line {
    /// Runtime flavour.
    pub flavor: &'static str,
    /// Workload.
    pub workload: &'static str,
    /// Operations (or live sleeps, for `live`).
    pub n: usize,
    /// Median CPU ns per operation, tokio.
    pub tokio: f64,
    /// Median CPU ns per operation, tickwheel.
    pub tickwheel: f64,
    /// Early completions seen (both APIs, all repetitions).
    pub early: u64,
}

impl Line {
    /// tokio / tickwheel.
    pub fn ratio(&self) -> f64 {
        self.tokio / self.tickwheel
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs every workload on both runtimes, `reps` times each, alternating the APIs.
/// `only`: workload names to run (all if empty).
pub fn run(reps: usize, quick: bool, only: &[String]) -> Vec<Line> {
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
    let mut lines = Vec::new();
    for flavor in [Flavor::Current, Flavor::Multi] {
        let bench = Bench::new(flavor);
        for &(w, n) in &plan {
            let (mut tk, mut tw, mut early) = (Vec::new(), Vec::new(), 0);
            for rep in 0..reps {
                // Alternate which goes first, so neither always runs on a warmer cache.
                let order = rep % 2 == 0;
                if order {
                    let (ns, e) = bench.measure(Tokio, w, n);
                    tk.push(ns);
                    early += e;
                }
                let (ns, e) = bench.measure(Tickwheel, w, n);
                tw.push(ns);
                early += e;
                if !order {
                    let (ns, e) = bench.measure(Tokio, w, n);
                    tk.push(ns);
                    early += e;
                }
            }
            let line = Line {
                flavor: flavor.name(),
                workload: w.name(),
                n,
                tokio: median(tk),
                tickwheel: median(tw),
                early,
            };
            eprintln!(
                "  {} {} {}: tokio {:.1} ns, tickwheel {:.1} ns, ratio {:.2}x, early {}",
                line.flavor,
                line.workload,
                line.n,
                line.tokio,
                line.tickwheel,
                line.ratio(),
                line.early
            );
            lines.push(line);
        }
    }
    lines
}

/// Resident bytes per pending sleep for `api_name` ("tokio" or "tickwheel") with `n` sleeps
/// filed on a current-thread runtime; run in a fresh process so earlier frees do not hide growth.
pub fn bytes_per_sleep(api_name: &str, n: usize) -> Result<f64, String> {
    let timers = Timers::with_config(1, Config::default()).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    async fn filed<A: Api>(api: A, n: usize) -> f64 {
        let before = crate::mem::rss_bytes().unwrap_or(0);
        let far = Instant::now() + Duration::from_secs(30);
        let at = |i: usize| far + Duration::from_micros(i as u64 % 30_000_000);
        let mut sleeps = Pinned((0..n).map(|i| api.sleep_until(at(i))).collect());
        sleeps.file_all().await;
        let after = crate::mem::rss_bytes().unwrap_or(0);
        black_box(&sleeps);
        after.saturating_sub(before) as f64 / n as f64
    }
    let out = match api_name {
        "tokio" => timers.block_on(0, &rt, filed(Tokio, n)),
        "tickwheel" => timers.block_on(0, &rt, filed(Tickwheel, n)),
        other => {
            return Err(format!(
                "unknown timer API {other:?}; use tokio or tickwheel"
            ));
        }
    };
    out.map_err(|e| e.to_string())
}

/// A markdown table of `lines`, with memory per pending sleep if given.
pub fn markdown(lines: &[Line], mem: &[(usize, f64, f64)]) -> String {
    let mut out = String::from(
        "| runtime | workload | n | tokio ns/op | tickwheel ns/op | ratio | ≥2x | early |\n\
         |---|---|---:|---:|---:|---:|---|---:|\n",
    );
    for l in lines {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.2}x | {} | {} |\n",
            l.flavor,
            l.workload,
            l.n,
            l.tokio,
            l.tickwheel,
            l.ratio(),
            if l.ratio() >= 2.0 { "yes" } else { "no" },
            l.early
        ));
    }
    if !mem.is_empty() {
        out.push_str(
            "\n| pending sleeps | tokio bytes/sleep | tickwheel bytes/sleep |\n|---:|---:|---:|\n",
        );
        for (n, tk, tw) in mem {
            out.push_str(&format!("| {n} | {tk:.1} | {tw:.1} |\n"));
        }
    }
    out
}

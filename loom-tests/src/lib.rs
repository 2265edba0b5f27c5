//! loom models of the tickwheel-percpu cross-core protocols, and the [`model`] helper that runs
//! the same test body natively (`cargo test`) or under loom.
//!
//! Run the suite under the model checker (2 cores: a few minutes):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p tickwheel-loom-tests --release
//! ```
//!
//! or `loom-tests/run.sh`. Natively, `cargo test -p tickwheel-loom-tests` runs each body many
//! times on real threads. Each model counts its executions and asserts there was more than one, so
//! a model that accidentally explores a single interleaving fails instead of passing vacuously.
//!
//! Models run the crate's real code: `Base`, `Remote`, the async cells, the slot table, the reserve and notice
//! stacks, the wake word and the real eventfd. The one thing a model must not do is block in the kernel (loom runs
//! all threads on one OS thread), so an owner "sleeps" by spinning with `yield_now` until its fd
//! polls readable: if a wake-up were lost it would spin forever and loom would report it.

#![deny(unsafe_op_in_unsafe_fn)]

use std::os::fd::RawFd;

/// Threads, atomics and `Arc` for test bodies: loom's under `cfg(loom)`, std's otherwise.
pub mod sync {
    #[cfg(loom)]
    pub use loom::sync::Arc;
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    #[cfg(loom)]
    pub use loom::thread::{spawn, yield_now};

    #[cfg(not(loom))]
    pub use std::sync::Arc;
    #[cfg(not(loom))]
    pub use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    #[cfg(not(loom))]
    pub use std::thread::{spawn, yield_now};
}

/// Native repetitions of a body (real threads, real scheduling noise).
#[cfg(not(loom))]
const NATIVE_RUNS: usize = 300;

/// Runs `body` under loom (every interleaving up to the preemption bound; `LOOM_MAX_PREEMPTIONS`,
/// default 2) or, natively, `NATIVE_RUNS` (300) times. Returns how many executions ran.
pub fn model<F>(body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    model_bounded(usize::MAX, body)
}

/// [`model`] with the preemption bound capped at `max_preemptions`, for a model whose owner
/// spins through many turns: each extra preemption multiplies its executions tenfold or more.
pub fn model_bounded<F>(max_preemptions: usize, body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    model_at(|bound| bound.min(max_preemptions), body)
}

/// [`model`] at the preemption bound `bound(LOOM_MAX_PREEMPTIONS or 2)`.
fn model_at<F>(bound: impl FnOnce(usize) -> usize, body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    #[cfg(loom)]
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let count = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(bound(builder.preemption_bound.unwrap_or(2)));
        builder.check(move || {
            // Relaxed: loom runs executions one after another on this thread.
            seen.fetch_add(1, Ordering::Relaxed);
            body();
        });
        count.load(Ordering::Relaxed)
    }
    #[cfg(not(loom))]
    {
        let _ = bound;
        for _ in 0..NATIVE_RUNS {
            body();
        }
        NATIVE_RUNS
    }
}

/// Runs [`model`] and asserts it explored more than one execution; returns the count.
pub fn check<F>(name: &str, body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    check_bounded(name, usize::MAX, body)
}

/// [`check`] with the preemption bound capped (see [`model_bounded`]).
pub fn check_bounded<F>(name: &str, max_preemptions: usize, body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    let runs = model_bounded(max_preemptions, body);
    eprintln!("{name}: {runs} executions");
    assert!(runs > 1, "{name}: explored only {runs} execution(s)");
    runs
}

/// [`check`] at a preemption bound of at least `min_preemptions`, whatever
/// `LOOM_MAX_PREEMPTIONS` says: for a small model whose failure needs that many switches (so the
/// debug-assertion pass, run at 2, still reaches it).
pub fn check_at_least<F>(name: &str, min_preemptions: usize, body: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    let runs = model_at(|bound| bound.max(min_preemptions), body);
    eprintln!("{name}: {runs} executions");
    assert!(runs > 1, "{name}: explored only {runs} execution(s)");
    runs
}

/// A waker that counts its wakes in a loom atomic (Release, so the woken side's Acquire load of
/// the count sees what the waker saw).
struct Counting(sync::Arc<sync::AtomicUsize>);

impl std::task::Wake for Counting {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        // Release: see the type's docs.
        self.0.fetch_add(1, sync::Ordering::Release);
    }
}

/// A waker and the count of its wakes.
pub fn counting() -> (std::task::Waker, sync::Arc<sync::AtomicUsize>) {
    let n = sync::Arc::new(sync::AtomicUsize::new(0));
    (
        std::task::Waker::from(std::sync::Arc::new(Counting(n.clone()))),
        n,
    )
}

/// True if `fd` polls readable right now (never blocks).
pub fn readable(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, length 1, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// Spins (yielding to the model checker) until `fd` is readable: the model's "sleep".
pub fn sleep_on(fd: RawFd) {
    while !readable(fd) {
        sync::yield_now();
    }
}

use std::time::{Duration, Instant};

use tickwheel_percpu::{Base, ClockSource, Config, Handle, ManualClock, Mode, Remote};

/// One base on a manual clock with a 1 ms tick, `slots` slots and `reserve` of them kept in reserve
/// for remote schedules: small, so the model checker has few objects to track.
pub fn one_base<T: Send + 'static>(
    slots: usize,
    reserve: usize,
) -> (Base<T>, Remote<T>, ManualClock) {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(slots)
        .reserve_capacity(reserve);
    let (mut bases, remote) = tickwheel_percpu::bases(1, config).expect("bases");
    (bases.pop().expect("one base"), remote, clock)
}

/// After a race: one more turn fires nothing, the wheel is empty, every slot is free again, and
/// the counters balance (`scheduled == fired + cancelled`).
pub fn assert_quiet_and_balanced<T: Send + 'static>(base: &mut Base<T>) {
    base.turn(|_| panic!("fired twice"));
    assert!(base.is_empty());
    assert_eq!(base.free_slots(), base.slot_capacity());
    let s = base.stats();
    assert_eq!(
        s.scheduled,
        s.fired + s.cancelled_local + s.cancelled_remote
    );
}

/// The final word of a race on one timer (1 ms ticks): re-arms `h` to `t0 + ticks.end` ms from
/// another thread, ordered after every other operation, then steps the clock
/// one tick at a time from `ticks.start` (where it stands) and asserts it fires at `ticks.end`
/// exactly, with `value`.
pub fn last_rearm_decides(
    base: &mut Base<u32>,
    remote: &Remote<u32>,
    clock: &ManualClock,
    t0: Instant,
    (h, value): (Handle, u32),
    ticks: std::ops::Range<u32>,
) {
    let (from, at) = (ticks.start, ticks.end);
    let r = remote.clone();
    assert!(
        sync::spawn(move || r.reset_at(h, t0 + at * Duration::from_millis(1)))
            .join()
            .unwrap(),
        "the timer is pending"
    );
    for t in from..at {
        assert_eq!(
            base.turn(|v| panic!("{v} fired at {t} ms, before its last deadline of {at} ms")),
            0
        );
        clock.advance(Duration::from_millis(1));
    }
    assert_eq!(
        base.turn(|v| assert_eq!(v, value)),
        1,
        "not fired at its last deadline of {at} ms"
    );
}

//! A ready-made runtime: one pinned thread per chosen core, each running the default loop.
//!
//! Each thread owns one [`Base`], pinned with `core_affinity` to its core, and loops
//! `turn(handler)` / `park(None)`. A panicking handler is caught, counted ([`Runtime::panics`]) and
//! reported by the process's panic hook; the base keeps running. [`Runtime::shutdown`] stops and
//! joins the threads; each drops its pending payloads on its own thread (a schedule racing the
//! shutdown may drop its payload on its own thread instead, or get it back with `Closed`).
//!
//! Code running on a runtime thread (a handler, typically) can schedule on its own core without
//! naming it: [`schedule_after`] and [`current_base`] use a thread-local set when the thread starts.
//! Such a schedule goes through the base's reserve and notice stack (the handler runs inside
//! `turn`, which holds the base): the same turn files it if the turn has not taken its notices
//! yet, and otherwise leaves the fd readable so the next turn files it at once. When the reserve
//! is empty the schedule is refused with `ReserveEmpty` and its value, until the end of the turn
//! refills it.
//!
//! With a [`crate::ManualClock`] there is no timerfd to wake a parked thread when time is moved
//! by hand: call `remote().wake(i)` after advancing the clock.
//!
//! Choosing the mode: `Mode::Coarse` (the default) suits keep-alive and request timeouts. Those are
//! nearly always cancelled or pushed back before they expire, so what matters is the cost of
//! arming and cancelling; Coarse never cascades, so a timer is touched once when armed and once
//! when cancelled, and when one does expire it fires up to 8/63 (12.7%) of its delay late, which a 60 s
//! idle timeout does not mind. `Mode::Exact` fires at the deadline tick and pays for it with
//! cascades; use it for short, precise timers.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};
use crate::{Base, BaseStats, Config, Handle, Remote, ScheduleError, bases};

struct Current<T> {
    index: usize,
    remote: Remote<T>,
}

thread_local! {
    /// The base this thread runs: its index and a type-erased `Current<T>`.
    static CURRENT: RefCell<Option<(usize, Box<dyn Any>)>> = const { RefCell::new(None) };
}

/// The index of the base the calling runtime thread runs, if any.
pub fn current_base() -> Option<usize> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(index, _)| *index))
}

fn set_current<T: Send + 'static>(index: usize, remote: Remote<T>) {
    let inner: Box<dyn Any> = Box::new(Current { index, remote });
    CURRENT.with(|c| *c.borrow_mut() = Some((index, inner)));
}

fn with_current<T: 'static, R>(f: impl FnOnce(Option<&Current<T>>) -> R) -> R {
    CURRENT.with(|c| {
        let borrow = c.borrow();
        f(borrow
            .as_ref()
            .and_then(|(_, inner)| inner.downcast_ref::<Current<T>>()))
    })
}

/// On a runtime thread: schedules `value` on this thread's base, `delay` from now.
/// Elsewhere (or for another payload type) returns `NoSuchBase(value)`.
pub fn schedule_after<T: Send + 'static>(
    delay: Duration,
    value: T,
) -> Result<Handle, ScheduleError<T>> {
    with_current::<T, _>(|current| match current {
        Some(c) => c.remote.schedule_after(c.index, delay, value),
        None => Err(ScheduleError::NoSuchBase(value)),
    })
}

/// Pinned threads, one base each, calling a handler per fired payload.
pub struct Runtime<T> {
    remote: Remote<T>,
    stop: Arc<AtomicBool>,
    panics: Arc<AtomicU64>,
    threads: Vec<JoinHandle<BaseStats>>,
}

impl<T> fmt::Debug for Runtime<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

fn not_found(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, msg)
}

impl<T: Send + 'static> Runtime<T> {
    /// Starts one thread per entry of `cores` (core ids as `core_affinity` numbers them); base
    /// `i` runs on `cores[i]`. Fails, naming the core, if a core does not exist or a thread could
    /// not be pinned; no thread is left running then.
    pub fn start<F>(cores: &[usize], config: Config, handler: F) -> io::Result<Self>
    where
        F: Fn(T) + Send + Sync + 'static,
    {
        let available = core_affinity::get_core_ids()
            .ok_or_else(|| not_found("cannot enumerate cores".into()))?;
        let chosen = cores
            .iter()
            .map(|&c| {
                available
                    .iter()
                    .copied()
                    .find(|id| id.id == c)
                    .ok_or_else(|| {
                        let ids: Vec<usize> = available.iter().map(|id| id.id).collect();
                        not_found(format!("core {c} does not exist (available: {ids:?})"))
                    })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let (all, remote) = bases::<T>(chosen.len(), config)?;
        let mut rt = Self {
            remote: remote.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            panics: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
        };
        let handler = Arc::new(handler);
        let (report, started) = std::sync::mpsc::channel::<io::Result<()>>();
        for (base, core) in all.into_iter().zip(chosen) {
            let ctx = Worker {
                stop: rt.stop.clone(),
                panics: rt.panics.clone(),
                handler: handler.clone(),
                remote: remote.clone(),
            };
            let report = report.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("tickwheel-{}", base.index()))
                .spawn(move || {
                    if !core_affinity::set_for_current(core) {
                        let _ = report.send(Err(io::Error::other(format!(
                            "could not pin to core {}",
                            core.id
                        ))));
                        return base.stats();
                    }
                    let _ = report.send(Ok(()));
                    ctx.run(base)
                });
            match spawned {
                Ok(t) => rt.threads.push(t),
                Err(e) => return Err(e), // `rt` drops: stops and joins what started
            }
        }
        drop(report);
        for _ in 0..rt.threads.len() {
            started
                .recv()
                .map_err(|_| io::Error::other("runtime thread died while starting"))??;
        }
        Ok(rt)
    }

    /// Schedules and cancels on the runtime's bases from any thread.
    pub fn remote(&self) -> &Remote<T> {
        &self.remote
    }

    /// Handler panics caught so far (each was reported by the panic hook).
    pub fn panics(&self) -> u64 {
        // Relaxed: a statistic.
        self.panics.load(Ordering::Relaxed)
    }

    /// Stops the threads, waits for them, and returns each base's final stats (by base index).
    /// Pending payloads are dropped on their base's thread.
    pub fn shutdown(mut self) -> Vec<BaseStats> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Vec<BaseStats> {
        // Release: pairs with the workers' Acquire load; the wake below makes them look.
        self.stop.store(true, Ordering::Release);
        for i in 0..self.remote.len() {
            self.remote.wake(i);
        }
        self.threads
            .drain(..)
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    }
}

impl<T> Drop for Runtime<T> {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            // Release: as in `stop_and_join`.
            self.stop.store(true, Ordering::Release);
            for shared in self.remote.group.bases.iter() {
                shared.wake_owner();
            }
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

/// The worker loop of a [`Runtime`] thread: turns `base`, calling `on_fire` for each due payload,
/// and sleeps with `wait` (which blocks until the base's fd is readable) until `stop` is set and
/// the base's owner is woken (`Remote::wake`). Public with feature `test-hooks` for the model
/// checker, which passes a `wait` that spins instead of blocking; not part of the stable API.
#[cfg(feature = "test-hooks")]
pub fn run_until_stopped<T: Send + 'static>(
    base: &mut Base<T>,
    stop: &AtomicBool,
    on_fire: impl FnMut(T),
    wait: impl FnMut(&mut Base<T>),
) {
    worker_loop(base, stop, on_fire, wait);
}

/// The loop itself (see `run_until_stopped`).
fn worker_loop<T: Send + 'static>(
    base: &mut Base<T>,
    stop: &AtomicBool,
    mut on_fire: impl FnMut(T),
    mut wait: impl FnMut(&mut Base<T>),
) {
    loop {
        base.turn(&mut on_fire);
        // The flag is read after the turn and before the sleep, never before the turn: a turn
        // consumes the wake-up that shutdown sends after setting the flag. That turn's `begin`
        // swap (AcqRel, see `protocol::wake`) then synchronises with shutdown's notify, so the
        // load below sees the flag; if the notify comes after this load instead, it finds the
        // owner parked and kicks the fd, so `wait` returns and the next turn looks again.
        // Acquire: pairs with the Release store in shutdown.
        if stop.load(Ordering::Acquire) {
            return;
        }
        wait(base);
    }
}

struct Worker<T, F> {
    stop: Arc<AtomicBool>,
    panics: Arc<AtomicU64>,
    handler: Arc<F>,
    remote: Remote<T>,
}

impl<T: Send + 'static, F: Fn(T)> Worker<T, F> {
    /// The default loop: turn, then sleep on the base's fd until there is work.
    fn run(self, mut base: Base<T>) -> BaseStats {
        set_current(base.index(), self.remote.clone());
        let on_fire = |value| {
            if catch_unwind(AssertUnwindSafe(|| (self.handler)(value))).is_err() {
                // Relaxed: a statistic.
                self.panics.fetch_add(1, Ordering::Relaxed);
            }
        };
        worker_loop(&mut base, &self.stop, on_fire, |base| {
            if let Err(e) = base.park(None) {
                // epoll_wait fails only on a bad fd or memory fault; back off instead of spinning.
                debug_assert!(false, "park failed: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let stats = base.stats();
        CURRENT.with(|c| c.borrow_mut().take());
        drop(base);
        stats
    }
}

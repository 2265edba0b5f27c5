//! One base inside a tokio runtime: who holds it, how it is turned, and which one a thread uses.
//!
//! A [`Driver`] wraps one [`Base`] with its cell table. The base (with its free cells and a
//! scratch list) sits behind a `busy` flag: a thread that wants to touch it swaps the flag, and a
//! thread that finds it set never waits; it takes the cross-core path (`Remote`) instead, or (to
//! register a new sleep, which needs a cell) asks to be polled again. On a current-thread runtime
//! the flag is only ever taken by that one thread and never found set; on a multi-thread runtime
//! it is found set only while a turn of that base runs on another worker.
//!
//! The turning task ([`drive`]) waits on the base's fd through `AsyncFd` (tokio's reactor sees the
//! fd readable when a timer is due or another thread sent a message), turns the base, and wakes
//! the tasks whose sleeps fired. Each payload is delivered to its cell as the base hands it out
//! (which keeps a cell at two armings; see `cell::turn`); wakers are woken after `Base::turn`
//! returns, so a waker that polls inline cannot re-enter the base.
//!
//! Each thread has a current driver (a thread-local set by [`super::Timers::enter`] or by the
//! thread-start hook of a multi-thread runtime): a sleep registers on it at its first poll. A
//! thread with none uses the [`fallback`]: one process-wide base (Exact mode, 1 ms tick), made at
//! its first use and turned by a thread of its own ("tickwheel-time") that waits on the base's fd.
//! Any thread may hold the fallback's base (the `busy` flag is what excludes), so every thread
//! takes the owner's path on it (`is_current`); the cost is that flag's swap, contended between
//! the threads that use it, and a wake that comes from the timer thread.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::protocol::cell::{self, Cells, MAX_CELLS, Returned};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Ordering, UnsafeCell};
use crate::{Base, Config, Handle, Mode, Remote, sys};

/// What a base's timer carries: `cell | seq << 32` (see `cell`).
pub(super) type Payload = u64;

/// What only the holder of the base touches.
pub(super) struct Owned {
    pub(super) base: Base<Payload>,
    /// Free cells, for this holder only.
    free: Vec<u32>,
    /// Cells at or above this were never handed out.
    next_cell: u32,
    /// Cells whose arming fired in the current turn, woken after it (kept for its allocation).
    woken: Vec<u32>,
}

/// One base and its cells, shared by the sleeps registered on it.
pub(super) struct Driver {
    pub(super) index: usize,
    pub(super) remote: Remote<Payload>,
    fd: RawFd,
    busy: AtomicBool,
    owned: UnsafeCell<Owned>,
    pub(super) cells: Cells,
    /// Cells freed by threads not holding the base, emptied by the holder.
    returned: Returned,
    /// The process-wide fallback: every thread takes the owner's path (see the module doc).
    any_thread: bool,
    /// What can still turn the base: 1 for the `Timers` set while a handle of it lives, plus
    /// one per turning task ([`drive`]). At 0 the base is closed for good: nothing will ever
    /// turn it again (a turning task is made only through a `Timers`), so its sleeps would pend
    /// for ever; they panic instead. (A paused runtime's base: 1 for its turning task alone.)
    keepers: AtomicUsize,
    /// The base of a paused runtime (see `paused`): the tokio timer its turning task keeps
    /// armed, which each release of the base checks.
    #[cfg(feature = "test-util")]
    pub(super) paused: Option<super::paused::Armed>,
}

// SAFETY: `owned` (the only field that is not Sync) is reached only through `Held`, which exists
// only while its creator has swapped `busy` from false to true; so at most one thread at a time
// touches it, and the Acquire swap / Release store order those accesses.
unsafe impl Sync for Driver {}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// Exclusive use of a driver's base, until dropped.
pub(super) struct Held<'a> {
    driver: &'a Driver,
    owned: *mut Owned,
}

impl Deref for Held<'_> {
    type Target = Owned;
    fn deref(&self) -> &Owned {
        // SAFETY: `busy` is ours while `self` lives (see `Driver::hold`).
        unsafe { &*self.owned }
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Owned {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
        unsafe { &mut *self.owned }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Still held: the wheel cannot change under this read.
        #[cfg(feature = "test-util")]
        let due = (self.driver.paused.as_ref()).is_some_and(|armed| armed.check(&self.base));
        // Release: our writes to the base happen before the next holder's Acquire swap.
        self.driver.busy.store(false, Ordering::Release);
        // A paused runtime's base fires what is due at once (see `paused`); that turn's own
        // release finds nothing due.
        #[cfg(feature = "test-util")]
        if due {
            self.driver.turn();
        }
    }
}

impl Driver {
    /// A driver for `base`, one of a `Timers` set.
    pub(super) fn new(base: Base<Payload>) -> Arc<Self> {
        Arc::new(Self::with_owners(base, false))
    }

    /// A driver that any thread may hold (the fallback's, a paused runtime's).
    pub(super) fn with_owners(base: Base<Payload>, any_thread: bool) -> Self {
        Self {
            index: base.index(),
            remote: base.remote(),
            fd: base.fd(),
            busy: AtomicBool::new(false),
            owned: UnsafeCell::new(Owned {
                base,
                free: Vec::new(),
                next_cell: 0,
                woken: Vec::new(),
            }),
            cells: Cells::new(MAX_CELLS),
            returned: Returned::new(),
            any_thread,
            keepers: AtomicUsize::new(1),
            #[cfg(feature = "test-util")]
            paused: None,
        }
    }

    /// One more thing that can turn the base; the caller holds a keeper already (as with
    /// `Arc::clone`).
    fn keep(&self) {
        // Relaxed: the caller's own keeper keeps the count above 0 meanwhile.
        self.keepers.fetch_add(1, Ordering::Relaxed);
    }

    /// A keeper is gone; the last one closes the base and wakes every sleep registered on it, so
    /// that its next poll reports the closed base instead of pending for ever.
    pub(super) fn let_go(&self) {
        // AcqRel: the last one out sees every other keeper's work; its 0 is what `is_closed`
        // reads.
        if self.keepers.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let held = loop {
            if let Some(held) = self.hold() {
                break held;
            }
            // A sleep on another thread is using the base for a moment.
            std::thread::yield_now();
        };
        // Taken under the base: the owner's thread drops a sleep under it with no waker
        // handshake (see `Cell::release_held`). Each take's RMW on the waker word comes after the
        // 0 above, so a poll that registers after it sees the base closed, and one that
        // registered before it is woken.
        let wakers: Vec<_> = (0..held.next_cell)
            .filter_map(|cell| self.cells.get(cell).take_waker())
            .collect();
        drop(held);
        // Woken without holding the base: a waker that polls inline must not find it taken.
        for waker in wakers {
            waker.wake();
        }
    }

    /// True once nothing can turn the base any more (see `keepers`).
    pub(super) fn is_closed(&self) -> bool {
        // Acquire: pairs with the last `let_go`.
        self.keepers.load(Ordering::Acquire) == 0
    }

    /// The base, if no other thread holds it now. Never waits.
    pub(super) fn hold(&self) -> Option<Held<'_>> {
        // Acquire: the previous holder's writes (Release in `Held::drop`) are visible to us.
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        let owned = self.owned.with_mut(|p| p);
        Some(Held {
            driver: self,
            owned,
        })
    }

    /// A cell for a new sleep. Panics when the base has handed out `MAX_CELLS` cells that are all
    /// still in use.
    pub(super) fn alloc_cell(&self, held: &mut Held<'_>) -> u32 {
        if let Some(cell) = held.free.pop() {
            return cell;
        }
        self.returned.take_all(&self.cells, &mut held.free);
        if let Some(cell) = held.free.pop() {
            return cell;
        }
        let cell = held.next_cell;
        assert!(
            (cell as usize) < self.cells.capacity(),
            "tickwheel base {}: {MAX_CELLS} sleeps registered at once",
            self.index
        );
        self.cells.grow(cell);
        held.next_cell += 1;
        cell
    }

    /// Frees a cell nobody holds any more (its waker slot is emptied first).
    pub(super) fn free_cell(&self, cell: u32, held: Option<&mut Held<'_>>) {
        match held {
            Some(held) => {
                self.cells.get(cell).clear();
                held.free.push(cell);
            }
            None => self.returned.push(&self.cells, cell),
        }
    }

    /// Frees a cell while holding the base, when the caller already emptied its waker slot.
    pub(super) fn free_held(&self, cell: u32, held: &mut Held<'_>) {
        held.free.push(cell);
    }

    /// Cells held by sleeps or armings (handed out and not freed).
    pub(super) fn cells_in_use(&self, held: &mut Held<'_>) -> usize {
        self.returned.take_all(&self.cells, &mut held.free);
        held.next_cell as usize - held.free.len()
    }

    /// Turns the base and wakes the sleeps that fired; false if another thread holds the base.
    /// Each payload is delivered to its cell inside the turn, the wakes come after it (see
    /// `cell::turn`).
    pub(super) fn turn(&self) -> bool {
        let Some(mut held) = self.hold() else {
            return false;
        };
        let Owned {
            base, free, woken, ..
        } = &mut *held;
        cell::turn(base, &self.cells, free, woken);
        for index in woken.drain(..) {
            // A waker that panics (an executor's bug) has been reported by the panic hook by the
            // time this returns; it must not cost the other sleeps of the turn their wakes, nor
            // stop the task or thread that turns the base. Its cell was marked fired before the
            // wake, so its sleep completes at its next poll.
            drop(catch_unwind(AssertUnwindSafe(|| {
                self.cells.get(index).wake()
            })));
        }
        true
    }

    /// The handle of this base's timer in `slot` at `generation` (a sleep keeps only those two).
    pub(super) fn handle(&self, slot: u32, generation: u32) -> Handle {
        self.remote.group.handle(self.index, slot, generation)
    }

    /// Schedules arming `seq` of `cell` on the held base, at `deadline_ns` on its clock.
    pub(super) fn schedule_held(
        &self,
        held: &mut Held<'_>,
        deadline_ns: u64,
        cell: u32,
        seq: u32,
    ) -> Handle {
        match held
            .base
            .schedule_at_ns(deadline_ns, cell::payload(cell, seq))
        {
            Ok(h) => {
                debug_assert_eq!(h, self.handle(h.slot, h.generation), "a foreign handle");
                h
            }
            Err(e) => panic!("tickwheel base {}: cannot add a timer: {e}", self.index),
        }
    }
}

/// The base's epoll fd, for `AsyncFd`, held by a turning task: holding the driver keeps the base
/// (and so the fd) alive, and it counts as one of the driver's keepers until dropped.
struct BaseFd(Arc<Driver>);

impl AsRawFd for BaseFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd
    }
}

impl Drop for BaseFd {
    fn drop(&mut self) {
        self.0.let_go();
    }
}

/// The task that turns `driver`'s base whenever its fd is readable, until the runtime drops it.
/// It is a keeper of the base from now on, polled or not.
pub(super) fn drive(driver: Arc<Driver>) -> impl Future<Output = io::Result<()>> + Send + 'static {
    driver.keep();
    turn_when_readable(BaseFd(driver))
}

async fn turn_when_readable(fd: BaseFd) -> io::Result<()> {
    // SAFETY: the fd is the base's epoll fd, owned by the base inside `driver`, which `BaseFd`
    // keeps alive for as long as the `AsyncFd` lives; `as_raw_fd` always returns that same fd.
    let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    let driver = &fd.get_ref().0;
    loop {
        let mut ready = fd.readable().await?;
        if driver.turn() {
            // The reactor reports the fd again at its next edge (a due timer or a message); an
            // edge during the turn is not lost, since it comes after this readiness was taken.
            ready.clear_ready();
        } else {
            // A worker is using the base for a moment; come back after other tasks.
            drop(ready);
            tokio::task::yield_now().await;
        }
    }
}

/// The process-wide base for threads with no driver of their own, and its timer thread, both
/// made at the first call. Panics if the base or the thread cannot be made (out of fds, memory
/// or threads): a sleep has no way to report it.
pub(super) fn fallback() -> &'static Arc<Driver> {
    // A std `OnceLock`, not the sync shim: made once per process, not cross-core protocol state.
    static FALLBACK: OnceLock<Arc<Driver>> = OnceLock::new();
    FALLBACK.get_or_init(|| {
        // tokio's timing, as `Timers::new`.
        let config = Config::default().mode(Mode::Exact);
        let base = crate::bases::<Payload>(1, config)
            .ok()
            .and_then(|(mut bases, _)| bases.pop())
            .unwrap_or_else(|| panic!("tickwheel time: cannot make the fallback base"));
        let driver = Arc::new(Driver::with_owners(base, true));
        let turning = driver.clone();
        std::thread::Builder::new()
            .name("tickwheel-time".into())
            .spawn(move || turn_forever(&turning))
            .unwrap_or_else(|e| panic!("tickwheel time: cannot start the timer thread: {e}"));
        driver
    })
}

/// The fallback's timer thread: waits until the base's fd is readable, turns it.
fn turn_forever(driver: &Driver) -> ! {
    // SAFETY: the fd is the base's epoll fd, owned by the base inside `driver`, which lives for
    // the rest of the process (the fallback is never dropped).
    let fd = unsafe { BorrowedFd::borrow_raw(driver.fd) };
    loop {
        // Only EINTR-free errors (a bad fd) fail, which the ownership above excludes.
        let waited = sys::epoll_wait(fd, -1);
        debug_assert!(
            waited.is_ok(),
            "epoll_wait on the fallback base: {waited:?}"
        );
        // A panicking waker costs nothing (see `Driver::turn`).
        if !driver.turn() {
            // Another thread holds the base for a moment (to file or reset a sleep).
            std::thread::yield_now();
        }
    }
}

thread_local! {
    /// The driver sleeps polled on this thread register on; `None`: the [`fallback`].
    static CURRENT: Current = const { Current(RefCell::new(None)) };
    /// `CURRENT`'s driver as a bare pointer (null for `None`, and once `CURRENT` is destroyed),
    /// for [`is_current`]: a type with no destructor, so reading it checks no thread-local state
    /// and borrows nothing.
    static CURRENT_PTR: Cell<*const Driver> = const { Cell::new(std::ptr::null()) };
}

/// The value of `CURRENT`; dropped at thread exit, when it clears `CURRENT_PTR`.
struct Current(RefCell<Option<Arc<Driver>>>);

impl Drop for Current {
    fn drop(&mut self) {
        // The driver may be freed from here on; no other driver may compare equal to it.
        CURRENT_PTR.with(|c| c.set(std::ptr::null()));
    }
}

/// Runs `f` with this thread's driver, or the fallback if it has none; with the `test-util`
/// feature, with the base of the thread's runtime while that runtime's clock is paused.
pub(super) fn with_current<R>(f: impl FnOnce(&Arc<Driver>) -> R) -> R {
    #[cfg(feature = "test-util")]
    if let Some(driver) = super::paused::current() {
        return f(&driver);
    }
    CURRENT.with(|c| match c.0.borrow().as_ref() {
        Some(driver) => f(driver),
        None => f(fallback()),
    })
}

/// True if this thread may take the owner's path on `driver`: it is this thread's, or the
/// fallback (which any thread may hold).
pub(super) fn is_current(driver: &Driver) -> bool {
    driver.any_thread || CURRENT_PTR.with(|c| std::ptr::eq(c.get(), driver))
}

/// Makes `driver` this thread's; returns the previous one.
pub(super) fn set_current(driver: Option<Arc<Driver>>) -> Option<Arc<Driver>> {
    let ptr = driver
        .as_deref()
        .map_or(std::ptr::null(), |d| d as *const Driver);
    CURRENT_PTR.with(|c| c.set(ptr));
    CURRENT.with(|c| std::mem::replace(&mut *c.0.borrow_mut(), driver))
}

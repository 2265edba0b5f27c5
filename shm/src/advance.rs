//! The owner's side: claim advancing, keep the private index, reconcile, fire, recover, sleep.
//!
//! The owner's index (`index`) says which armed slot comes due when; every decision is made by
//! a CAS on the slot's state word, so the index is thrown away with its owner and rebuilt by
//! scanning the slots at a takeover. An entry whose arming was cancelled (and whose slot may
//! have been armed again since) fails its fire CAS, made with the generation it was filed at:
//! it never fires a later arming early, even in a set whose memory was overwritten.

use std::fmt;
#[cfg(not(loom))]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use tickwheel::Wheel;

use super::hooks;
use super::index::Index;
use super::layout;
use super::table::{Freed, Tag, View, pack, split_holder, split_ident_word, unpack};
use super::{Client, Error};
use crate::sync::{Ordering, fence};

/// How often (of `CLOCK_MONOTONIC`) the owner looks for dead processes while it turns.
#[cfg(not(loom))]
const LIVENESS_NS: u64 = 100_000_000;

/// What a recovery found and repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovery {
    /// Slots scanned (every slot ever used).
    pub scanned: usize,
    /// Armed slots added to the index (found by the scan rather than by their dirty bit).
    pub indexed: usize,
    /// Lost slots freed: popped, held or half-freed by a dead process.
    pub reclaimed: usize,
    /// Fires a dead owner began (slots found `FIRING`); their payloads wait in
    /// [`Advancer::take_interrupted`], and their slots stay `FIRING` until then.
    pub interrupted: usize,
}

/// The one process that advances a set: applies schedules and cancels, fires due timers, and
/// repairs what dead processes left. Made by [`Client::advancer`]; dropping it gives advancing
/// up (another process may then claim it).
pub struct Advancer {
    client: Client,
    index: Index,
    /// `(slot, generation)` of `FIRING` slots whose payloads wait for `take_interrupted`: left by
    /// a dead owner, or by a handler of ours that panicked. They stay `FIRING` in the mapping
    /// until taken, so an owner that dies before taking them leaves them to the next.
    interrupted: Vec<(u32, u32)>,
    /// What the last look at the marks before sleeping found (see `publish_sleep`).
    marks_before_sleep: bool,
    /// Set by `crash`: drop as a killed owner would leave the set (still owned).
    crashed: bool,
    /// Reused buffers of a turn: the marked slots and their state words.
    marked: Vec<(u32, u64)>,
    #[cfg(not(loom))]
    waker: Option<Waker>,
    #[cfg(not(loom))]
    last_liveness: u64,
}

impl fmt::Debug for Advancer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Advancer")
            .field("pid", &self.client.me.pid)
            .field("indexed", &self.index.len())
            .finish_non_exhaustive()
    }
}

impl Advancer {
    pub(super) fn claim(client: Client) -> Result<Advancer, Error> {
        let me = client.me.word();
        let inner = &client.segment.inner;
        let v = client.view();
        loop {
            let cur = v.owner();
            if cur == 0 {
                if v.swap_owner(0, me).is_ok() {
                    break;
                }
                continue;
            }
            let (pid, start) = split_ident_word(cur);
            if cur == me || inner.liveness.alive(pid, start, 32) {
                return Err(Error::Busy { owner_pid: pid });
            }
            if v.swap_owner(cur, me).is_ok() {
                v.count(layout::W_TAKEOVERS, 1);
                break;
            }
        }
        let g = inner.geometry;
        let wheel = Wheel::builder(g.mode)
            .levels(g.levels)
            .start(client.now())
            .build()
            .map_err(|_| Error::BadHeader("wheel geometry rejected"))?;
        let mut advancer = Advancer {
            index: Index::new(wheel, g.capacity, client.now()),
            interrupted: Vec::new(),
            marks_before_sleep: false,
            crashed: false,
            marked: Vec::new(),
            #[cfg(not(loom))]
            waker: None,
            #[cfg(not(loom))]
            last_liveness: super::monotonic_ns(),
            client,
        };
        advancer.recover();
        Ok(advancer)
    }

    /// The client this advancer schedules and cancels through like any other process.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Moves a manual clock to `tick` (never back). False, and nothing done, on a set that
    /// follows `CLOCK_MONOTONIC`.
    pub fn advance_to(&mut self, tick: u64) -> bool {
        if self.client.segment.inner.geometry.tick.is_some() {
            return false;
        }
        hooks::store_point();
        // Relaxed: read back by this process's own turn; others only display it.
        self.client
            .view()
            .word(layout::W_CLOCK)
            .fetch_max(tick, Ordering::Relaxed);
        true
    }

    /// Applies every schedule and cancel made since the last turn, then hands each due payload
    /// to `handler` in fire order. Returns how many fired. A panic of `handler` passes through
    /// this call: the payload it was handling waits in
    /// [`take_interrupted`](Advancer::take_interrupted), what else was due stays for the next
    /// turn, and no slot is lost.
    pub fn turn(&mut self, mut handler: impl FnMut(u64)) -> usize {
        let v = self.client.view();
        hooks::store_point();
        // Relaxed: only a hint to schedulers that the owner is awake and will look at the marks;
        // publish_sleep orders the final value with a fence.
        v.word(layout::W_NEXT_WAKE).store(0, Ordering::Relaxed);
        #[cfg(not(loom))]
        if let Some(w) = &self.waker {
            w.drain();
        }
        self.check_liveness();
        let Advancer {
            client,
            index,
            marked,
            interrupted,
            ..
        } = self;
        let v = client.view();
        // Two passes: first every marked slot's state (independent loads, so their cache misses
        // overlap), then the reconciling, which finds each slot's line in the cache.
        marked.clear();
        v.take_marks(|s| marked.push((s, 0)));
        for (s, word) in marked.iter_mut() {
            // Acquire: pairs with the scheduler's Release store of PENDING (its deadline is
            // visible); a cancel that lands after this load sends its own mark.
            *word = v.state(*s).load(Ordering::Acquire);
        }
        for &(s, word) in marked.iter() {
            index.reconcile(&v, s, word);
        }
        let mut freed = Freed::default();
        let now = client.now();
        let mut fired = 0;
        let mut panicked = None;
        // Twice if the index looked at its far set (see `index`): what is due in the wheel first
        // (which moves the wheel's clock to `now`, so the far timers are then placed from `now`),
        // then the far timers the look filed, of which only those the clock passed are due.
        let mut looked = false;
        'fire: loop {
            while let Some((slot, generation)) = index.poll(now) {
                match fire(&v, slot, generation, &mut handler, &mut freed) {
                    Ok(true) => fired += 1,
                    Ok(false) => {}
                    Err(panic) => {
                        // The handler may or may not have done its work: the slot stays FIRING
                        // and its payload waits in `take_interrupted`. What is still due stays
                        // in the index for the next turn.
                        interrupted.push((slot, generation));
                        panicked = Some(panic);
                        break 'fire;
                    }
                }
            }
            if looked || !index.advance_horizon(&v, now, v.used()) {
                break;
            }
            looked = true;
        }
        v.push_freed(&mut freed);
        self.publish_sleep();
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
        fired
    }

    /// Scans every slot ever used and repairs what dead processes left (see the module table in
    /// `shm`): O(slots used + capacity / 64). Runs by itself at takeover and when a registered process is seen
    /// dead; call it after reaping a child you killed to repair at once.
    pub fn recover(&mut self) -> Recovery {
        let Advancer {
            client,
            index,
            interrupted,
            ..
        } = self;
        let v = client.view();
        let liveness = &client.segment.inner.liveness;
        v.sweep_marks();
        let mut r = Recovery {
            scanned: v.used(),
            ..Recovery::default()
        };
        let mut freed = Freed::default();
        // FREE words that may be on no stack: checked against the stack after the scan.
        let mut loose = Vec::new();
        for s in 0..r.scanned as u32 {
            // Acquire: see the contents the last writer of the state published.
            let word = v.state(s).load(Ordering::Acquire);
            let (_, tag, holder) = unpack(word);
            match tag {
                // FREE(g): on the stack, popped by a process that has yet to claim it (or died
                // first), or freed by a dead owner that did not push it. FREE(g, p): canceller p
                // is pushing it; once p is dead, pushed or not.
                Tag::Free if holder == 0 || !alive(liveness, holder) => loose.push((s, word)),
                Tag::Free => {}
                Tag::Held => {
                    if !alive(liveness, holder) && v.retire(s, word, &mut freed) {
                        r.reclaimed += 1;
                    }
                }
                Tag::Pending => {
                    if !index.holds(s) {
                        r.indexed += 1;
                    }
                    index.reconcile(&v, s, word);
                }
                Tag::Firing => {
                    // Left FIRING until `take_interrupted` frees it: an owner killed before
                    // taking it leaves it to the next.
                    let (g, _, _) = unpack(word);
                    if !interrupted.contains(&(s, g)) {
                        interrupted.push((s, g));
                        r.interrupted += 1;
                    }
                }
                Tag::Corrupt => {}
            }
        }
        // A word still as the scan saw it was pushed by nobody since: a FREE(g) word is pushed
        // before it reads so (by a canceller) or by this owner, and a FREE(g, p) word's p is
        // dead. So a loose slot missing from a walk made after the scan is on no stack; a live
        // popper's claim, expecting `g`, fails once it is re-issued at `g + 1`.
        let on_stack = v.walk_free();
        for (s, word) in loose {
            if on_stack[s as usize / 64] >> (s % 64) & 1 == 0 && v.retire(s, word, &mut freed) {
                r.reclaimed += 1;
            }
        }
        v.push_freed(&mut freed);
        v.count(layout::W_RECLAIMED, r.reclaimed as u64);
        r
    }

    /// Payloads whose fire was begun and not finished, by a dead owner or by a handler of this
    /// one that panicked: each may or may not have been handled. A handler that records
    /// idempotently can simply handle them again. Their slots stay `FIRING` (and reserved) until
    /// this call frees them, so an owner killed before calling it leaves them to the next owner.
    pub fn take_interrupted(&mut self) -> Vec<u64> {
        let v = self.client.view();
        let mut freed = Freed::default();
        let mut payloads = Vec::with_capacity(self.interrupted.len());
        for (s, g) in self.interrupted.drain(..) {
            let word = pack(g, Tag::Firing, 0);
            // Acquire: the payload the scheduler published before PENDING (then FIRING) is seen.
            if v.state(s).load(Ordering::Acquire) != word {
                // Only an overwritten set moves a FIRING word behind the owner's back.
                continue;
            }
            let (_, payload) = v.contents(s);
            if v.retire(s, word, &mut freed) {
                payloads.push(payload);
            }
        }
        v.push_freed(&mut freed);
        v.count(layout::W_INTERRUPTED, payloads.len() as u64);
        payloads
    }

    /// The earliest tick at which something may be due in the index, or at which the owner must
    /// look at its far set (the timers due 4096 ticks or more ahead: the crate doc's "advance");
    /// `None`: nothing indexed. An owner that turns at this tick never does a whole look at a
    /// large far set in one turn.
    pub fn next_expiry(&self) -> Option<u64> {
        self.index.next_expiry()
    }

    /// True if the last turn ended by finding marks that arrived after it took them (its fd is
    /// then left readable, so the loop turns again at once). For models of the wake protocol.
    #[cfg(feature = "test-hooks")]
    pub fn marks_before_sleep(&self) -> bool {
        self.marks_before_sleep
    }

    /// Drops the advancer as a killed owner would leave the set: the owner word still names
    /// this process. For tests and models only.
    #[cfg(feature = "test-hooks")]
    pub fn crash(mut self) {
        self.crashed = true;
        // A killed owner gives nothing back: the slot its client keeps waits for recovery.
        let _ = self.client.take_kept();
    }

    /// Entries in the owner's index (wheel entries and far bits): timers armed and applied, not
    /// yet fired, and cancelled ones whose entry waits for its deadline, the slot's next arming or
    /// (a far one) the owner's next look at the far set (at most one a slot).
    pub fn indexed(&self) -> usize {
        self.index.len()
    }

    /// An epoll fd that polls readable when [`turn`](Advancer::turn) has work: a timer is due, a
    /// schedule earlier than the next expiry arrived, a step of a look at the far set is due
    /// ([`next_expiry`](Advancer::next_expiry)), or it is time to look for dead processes.
    /// Register it (level-triggered) in any event loop and call `turn` when it is readable.
    /// The first call starts the helper thread that turns futex wakes into eventfd writes.
    #[cfg(not(loom))]
    pub fn fd(&mut self) -> Result<BorrowedFd<'_>, Error> {
        if self.waker.is_none() {
            self.waker = Some(Waker::new(&self.client)?);
            self.publish_sleep();
        }
        Ok(self.waker.as_ref().expect("just made").epoll.as_fd())
    }

    /// Blocks until the fd is readable or `timeout_ms` passes (-1: no limit). For loops that
    /// have nothing else to wait on.
    #[cfg(not(loom))]
    pub fn wait(&mut self, timeout_ms: i32) -> Result<(), Error> {
        self.fd()?;
        let epoll = self.waker.as_ref().expect("made by fd").epoll.as_fd();
        crate::sys::epoll_wait(epoll, timeout_ms)?;
        Ok(())
    }

    #[cfg(not(loom))]
    fn check_liveness(&mut self) {
        let now = super::monotonic_ns();
        if now.saturating_sub(self.last_liveness) < LIVENESS_NS {
            return;
        }
        self.last_liveness = now;
        let v = self.client.view();
        let liveness = &self.client.segment.inner.liveness;
        let mut dead = false;
        for (i, word) in v.registered() {
            let (pid, start) = split_ident_word(word);
            if !liveness.alive(pid, start, 32) && v.unregister(i, word) {
                dead = true;
            }
        }
        if dead {
            self.recover();
        }
    }

    /// Under loom, recovery is only run by hand (the clock is not part of the model).
    #[cfg(loom)]
    fn check_liveness(&mut self) {}

    /// Publishes the tick the owner sleeps until, then looks at the marks once more. Returns
    /// true (and leaves the fd readable) if a mark arrived meanwhile.
    fn publish_sleep(&mut self) -> bool {
        let v = self.client.view();
        let until = self.index.next_expiry().unwrap_or(u64::MAX);
        hooks::store_point();
        // Relaxed: ordered by the fence below.
        v.word(layout::W_NEXT_WAKE).store(until, Ordering::Relaxed);
        // SeqCst fence: with the scheduler's fence between its mark and its load of this word,
        // either it reads `until` (and wakes us if earlier) or we see its mark below.
        fence(Ordering::SeqCst);
        let pending = v.any_marks();
        self.marks_before_sleep = pending;
        #[cfg(not(loom))]
        if let Some(w) = &self.waker {
            let _ = if pending {
                crate::sys::eventfd_kick(w.event.as_fd())
            } else {
                w.arm(&self.client, until)
            };
        }
        pending
    }
}

impl Drop for Advancer {
    fn drop(&mut self) {
        if !self.client.in_maker() {
            // A copy inherited across `fork`: the owner is the parent, and the helper thread
            // exists only there. Leave both alone.
            #[cfg(not(loom))]
            std::mem::forget(self.waker.take());
            return;
        }
        #[cfg(not(loom))]
        drop(self.waker.take());
        if self.crashed {
            return;
        }
        let v = self.client.view();
        hooks::store_point();
        // Relaxed: no owner, nobody to wake; a new owner publishes its own value.
        v.word(layout::W_NEXT_WAKE).store(0, Ordering::Relaxed);
        let _ = v.swap_owner(self.client.me.word(), 0);
    }
}

/// Fires slot `s` at generation `g`, which the index says is due: true if the handler ran, false
/// if a cancel won; `Err` with the handler's panic, the slot left `FIRING`.
fn fire(
    v: &View<'_>,
    s: u32,
    g: u32,
    handler: &mut impl FnMut(u64),
    freed: &mut Freed,
) -> std::thread::Result<bool> {
    match v.start_fire(s, g) {
        Ok(payload) => {
            v.count(layout::W_FIRED, 1);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(payload)))?;
            v.retire(s, pack(g, Tag::Firing, 0), freed);
            Ok(true)
        }
        // Cancelled (and freed by its canceller, maybe armed again since): nothing to do.
        Err(_) => Ok(false),
    }
}

/// The owner's fd: epoll over a timerfd (next expiry) and an eventfd (wakes), and the helper
/// thread that turns futex wakes of the set's wake word into eventfd writes.
#[cfg(not(loom))]
struct Waker {
    epoll: OwnedFd,
    timer: OwnedFd,
    event: std::sync::Arc<OwnedFd>,
    stop: std::sync::Arc<crate::sync::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    segment: super::Segment,
}

#[cfg(not(loom))]
impl Waker {
    fn new(client: &Client) -> Result<Waker, Error> {
        use crate::sys;
        let epoll = sys::epoll_create()?;
        let timer = sys::timerfd_create(libc::CLOCK_MONOTONIC)?;
        let event = std::sync::Arc::new(sys::eventfd()?);
        sys::epoll_add(epoll.as_fd(), timer.as_raw_fd(), 0)?;
        sys::epoll_add(epoll.as_fd(), event.as_raw_fd(), 1)?;
        let stop = std::sync::Arc::new(crate::sync::AtomicBool::new(false));
        let segment = client.segment.clone();
        let (seg2, event2, stop2) = (segment.clone(), event.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("tickwheel-shm-wake".into())
            .spawn(move || forward_wakes(&seg2, &event2, &stop2))?;
        Ok(Waker {
            epoll,
            timer,
            event,
            stop,
            thread: Some(thread),
            segment,
        })
    }

    fn drain(&self) {
        let _ = crate::sys::eventfd_take(self.event.as_fd());
    }

    /// Arms the timerfd at tick `until`, or at the next liveness look if sooner.
    fn arm(&self, client: &Client, until: u64) -> std::io::Result<()> {
        let now = super::monotonic_ns();
        let cap = now.saturating_add(LIVENESS_NS);
        let at = match client.segment.inner.geometry.tick {
            Some(tick) => until.saturating_mul(tick.as_nanos() as u64).min(cap),
            None => cap,
        };
        crate::sys::timerfd_set_abs(self.timer.as_fd(), Some(at))?;
        // Setting the time already clears a pending expiration; reading (a timerfd reads like an
        // eventfd: one u64 counter, nothing to read is fine) makes sure of it.
        crate::sys::eventfd_take(self.timer.as_fd())?;
        Ok(())
    }
}

#[cfg(not(loom))]
fn forward_wakes(segment: &super::Segment, event: &OwnedFd, stop: &crate::sync::AtomicBool) {
    let word = segment.view().word(layout::W_WAKE);
    let addr = segment.inner.memory.futex_addr(layout::W_WAKE);
    // Acquire: pairs with the schedulers' Release increments.
    let mut seen = word.load(Ordering::Acquire);
    // Acquire: pairs with Drop's Release store.
    while !stop.load(Ordering::Acquire) {
        // SAFETY: the word is in the mapping `segment` keeps alive, 4-byte aligned. The 1 s
        // timeout only bounds how long a lost wake could go unnoticed; none is expected.
        unsafe { crate::sys::futex_wait(addr, seen as u32, Some(1_000_000_000)) };
        let now = word.load(Ordering::Acquire);
        if now != seen {
            seen = now;
            let _ = crate::sys::eventfd_kick(event.as_fd());
        }
    }
}

#[cfg(not(loom))]
impl Drop for Waker {
    fn drop(&mut self) {
        // Release: the helper's Acquire load sees it after the wake below.
        self.stop.store(true, Ordering::Release);
        let v = self.segment.view();
        hooks::store_point();
        // Release: moves the word so the helper's FUTEX_WAIT cannot sleep on the old value.
        v.word(layout::W_WAKE).fetch_add(1, Ordering::Release);
        // SAFETY: the word is in our live mapping, 4-byte aligned.
        unsafe {
            crate::sys::futex_wake(
                self.segment.inner.memory.futex_addr(layout::W_WAKE),
                i32::MAX,
            )
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the process a slot's holder field names is alive.
fn alive(liveness: &super::proc::Liveness, holder: u32) -> bool {
    let (pid, start) = split_holder(holder);
    liveness.alive(pid, start, 7)
}

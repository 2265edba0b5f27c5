//! Timers shared across processes: one timer set in shared memory that any process can schedule
//! into and cancel from, advanced by one process at a time, with no lock on any path.
//!
//! ```
//! use std::time::Duration;
//! use tickwheel_shm::{Config, Segment};
//!
//! // Anonymous shared memory survives `fork`; `Segment::memfd` and `Segment::create_file` reach
//! // unrelated processes. Here one process plays every part.
//! let segment = Segment::anonymous(&Config::new(1024).manual_clock()).unwrap();
//! let client = segment.attach().unwrap();
//! let h = client.schedule_at(10, 7).unwrap();
//! let _ = client.schedule_at(20, 8).unwrap();
//! assert!(client.cancel(h)); // true: 7 will never fire
//! let mut advancer = client.advancer().unwrap();
//! advancer.advance_to(25);
//! let mut fired = Vec::new();
//! advancer.turn(|payload| fired.push(payload));
//! assert_eq!(fired, [8]);
//! # let _ = Duration::ZERO;
//! ```
//!
//! # Model
//!
//! The authoritative state is in the mapping: a header, a registry of attached processes, and
//! one 32-byte record per timer slot (state word, deadline, payload, free-stack link). Every step
//! that crosses processes is one atomic operation on one word, so a process killed at any instant
//! leaves each word either before or after its step; nothing is ever half-written. The states,
//! who moves each and how are in the `table` module's doc; in short:
//!
//! - **schedule** (any process): take the slot the client kept from its last cancel, or pop a
//!   free slot (one CAS on a tagged head; slots never used come from a bump counter), claim it
//!   `FREE(g)` → `HELD(g, me)` (CAS), write deadline and payload, store `PENDING(g)`, set the
//!   slot's bit in a dirty bitmap. Returns `Handle(set, slot, g)`.
//! - **cancel** (any process): CAS `PENDING(g)` → `FREE(g+1, me)`. The CAS is the answer: true
//!   means the timer will never fire, with the same meaning as a cancel on a `tickwheel-percpu`
//!   base. The client then keeps the slot, named, for its own next schedule if it keeps none yet;
//!   otherwise it pushes the slot on the free stack and clears the name (`FREE(g+1)`), free for
//!   the next schedule of any process at once. No schedule waits for the owner. A kept slot is
//!   given back to the stack when its client is dropped; one left by a killed process is, to
//!   recovery, a cancel's slot not yet pushed, and is re-issued. Keeping it spares the two
//!   processes of a churning set the free stack's head: with two processes a schedule-and-cancel
//!   moved that line between their cores twice (BENCHMARKS.md, "Shared memory").
//! - **advance** (the owner only): take the dirty bits, index each marked `PENDING` slot
//!   privately (an entry of the slot's earlier, cancelled arming is replaced): in a
//!   [`tickwheel::Wheel`] if it is due within about 4096 ticks, otherwise as one bit of a *far*
//!   set that the owner looks at when its clock gets that close, so that a timer cancelled long
//!   before its deadline, as most are, never costs a wheel filing; then fire what is due: CAS
//!   `PENDING(g)` → `FIRING(g)`, hand the payload to the handler, CAS `FIRING(g)` → `FREE(g+1)`.
//!   The slots a turn frees are chained privately and pushed on the free stack with one CAS at
//!   its end. An entry whose arming was cancelled fails its CAS and is dropped. Exactly one CAS
//!   ends each arming, and its winner alone pushes the slot (a kept slot is claimed again before
//!   its client's drop pushes it), so a slot is never on the stack twice.
//!
//! Cancel against fire is `tickwheel-percpu`'s cross-core protocol unchanged, between processes:
//!
//! ```text
//!   process A (owner)                       process B (holds h = (set, s, g))
//!   turn(): wheel says slot s is due        Client::cancel(h)
//!   CAS word[s] PENDING(g) -> FIRING(g)     CAS word[s] PENDING(g) -> FREE(g+1, B)
//!          \____________ one of the two CASes comes first ____________/
//!   A first: handler(payload),              B's CAS fails: false ("fired or firing")
//!            FIRING(g) -> FREE(g+1)
//!   B first: A's CAS fails: drops its       true ("will never fire"); B pushes the slot on
//!            entry, nothing else to do      the free stack itself
//! ```
//!
//! # What a crash at each point does
//!
//! | killed process, between ...                  | left behind                        | repaired by |
//! |-----------------------------------------------|------------------------------------|-------------|
//! | scheduler: pop and claim                      | `FREE` slot on no stack            | recovery scan: re-issued at `g+1` (a live claimer's CAS then fails and it pops again) |
//! | scheduler: claim and `PENDING` store          | `HELD(g, dead pid)`                | recovery scan: freed |
//! | scheduler: `PENDING` store and dirty bit (or between bitmap levels) | armed slot not indexed (later marks, its word's included, each reach the top by themselves) | recovery: bitmap swept, slot indexed |
//! | canceller: CAS and push, or while its client keeps the slot | `FREE(g+1, canceller)` slot on no stack | recovery, once the canceller is seen dead: re-issued |
//! | canceller: push and clearing its name         | `FREE(g+1, canceller)` slot on the stack | nothing: a claim takes it as it is |
//! | owner: anywhere                               | owner word names a dead process    | takeover: one CAS, then a full scan rebuilds the index |
//! | owner: fire CAS and handler's end             | `FIRING(g)` slot                   | the next owner hands its payload over as *interrupted* ([`Advancer::take_interrupted`]): it may or may not have been handled |
//! | owner: found a `FIRING` slot, before `take_interrupted` freed it | `FIRING(g)` slot, still    | the same: the slot stays `FIRING` until a live owner's `take_interrupted` frees it, so the payload passes to each next owner until one takes it |
//! | (not a kill) a handler panics, the caller catches it | `FIRING(g)` slot             | the turn keeps the slot for its own `take_interrupted`, pushes the slots it freed, and re-raises the panic |
//! | owner: freeing CAS and the turn's stack push  | `FREE` slots on no stack           | recovery scan: re-issued |
//!
//! The crate's README names the test that reaches each row.
//!
//! Recovery runs when a process takes over advancing, when the owner sees a registered process
//! gone (it looks every 100 ms of `CLOCK_MONOTONIC` while it turns), and on demand
//! ([`Advancer::recover`]). It is O(slots ever used + capacity / 64): it sweeps the dirty bitmap, walks the free
//! stack, and reconciles every slot. Until it runs, a dead scheduler's in-flight timer is late,
//! never lost, and every other process carries on: nobody waits for anybody.
//!
//! Ownership: the owner word holds the owner's pid and start time. [`Client::advancer`] claims it
//! by CAS when it is zero, or when the process it names is gone (pid missing, every thread of it
//! exited, or a pid now running a process with another start time: see `proc` for how pid reuse
//! and unreadable `/proc` entries are handled).
//!
//! # A stopped process
//!
//! A process stopped (`SIGSTOP`, a debugger, a long preemption) between any two of its shared
//! writes holds up only its own operation, never another process's:
//!
//! - **A stopped scheduler or canceller**: every other process's timer that is due fires at the
//!   owner's first turn after its deadline and its schedule's return, as if the stopped process
//!   did not exist (the owner's fd wakes for it as [below](self#waking-the-owner)). Each marker
//!   takes its own mark to the top of the bitmap, so none waits for another to finish. The
//!   stopped one's own timer waits until it continues (or dies and a recovery indexes it).
//!   It holds at most the one slot of its operation and the one each of its clients keeps.
//! - **A stopped owner**: nothing fires until it continues, since a live owner is never taken
//!   over; the timers fire late, never lost, and other processes' schedules and cancels go on.
//!   It holds the slots its turn had fired and not yet pushed.
//! - **Full**: a schedule reports the set full only if, at one instant during the call, every
//!   slot was armed or held by an operation in flight (a schedule between its pop and its arm, a
//!   cancel between its CAS and its push, an owner's turn between a fire and its push), was kept
//!   by a client for its next schedule (one slot a client), was `FIRING` and not yet taken as
//!   interrupted, or was left by a dead process and not yet recovered. Cancelled slots need
//!   nobody else's progress to come back, but a kept one serves only its own client until that
//!   client is dropped.
//!
//! The `shm_stopped` test stops a scheduler-and-canceller and an owner before each of their
//! numbered shared writes in turn and checks the first and the last of these while the process
//! is stopped.
//!
//! # Waking the owner
//!
//! The owner publishes the tick it will sleep until (its next expiry) in the header; a scheduler
//! whose deadline is earlier bumps a futex word in the mapping and calls `FUTEX_WAKE` (shared,
//! not `FUTEX_PRIVATE_FLAG`), so most schedules make no system call. [`Advancer::fd`] is an epoll
//! fd to embed in any event loop: it holds a timerfd armed at the next expiry and an eventfd that
//! a helper thread of the owner's process writes when the futex word moves. Store-load on both
//! sides (publish then look at the bitmap; mark then read the published tick) is ordered by SeqCst
//! fences, so either the scheduler wakes the owner or the owner sees the mark before sleeping.
//!
//! # Clocks
//!
//! With [`Config::tick`] (default 1 ms) deadlines are ticks of `CLOCK_MONOTONIC`, which every
//! process on one machine shares: `now()` is the same in all of them, and a handle or deadline can
//! be passed between them. With [`Config::manual_clock`] the clock is a word in the mapping that
//! the owner moves ([`Advancer::advance_to`]), for tests and simulations.
//!
//! # Memory
//!
//! [`HEADER_BYTES`] (17,152) + [`SLOT_BYTES`] (32) per timer + 1/8 byte per timer of bitmap
//! ([`bytes_for`] gives the exact size); 2^24 timers take 514 MiB. Capacity goes up to 2^31.
//! Slot pages are touched only once used. The owner also keeps, privately, 8 bytes and 1 bit per
//! slot of index and the wheel's 32 bytes per entry of a timer due within its horizon: at most
//! one a slot (a cancelled timer's entry stays until its deadline or the slot's next arming).
//!
//! # Files and truncation
//!
//! Every process that maps a set trusts every process that can write its file or memfd. Random
//! bytes written into the mapping are checked where they could do harm: every index and link
//! read from it is checked before use and every walk over shared links is bounded, so an
//! overwritten set gives errors ([`ScheduleError::Corrupt`], [`Error::Corrupt`]) and late or
//! lost timers, never a panic, a hang, or a fire of a timer whose own record was untouched
//! before its deadline, twice, or after its cancel returned true. Shrinking the file is
//! another matter: a process that truncates it takes the pages from under every mapping, and
//! each mapped process dies of `SIGBUS` at its next touch of a lost page (the kernel has no
//! other answer). [`Segment::memfd`] seals its memfd against shrinking; a file cannot be
//! sealed, so give write access to a set's file only to processes you trust with it.
//!
//! # Given up
//!
//! - Deadlines are fixed once scheduled (no reset): a reset would need a second state per slot.
//! - All processes must share one pid namespace (liveness is judged by pid and start time).
//! - Generations are 32 bits: a handle kept across 2^32 re-uses of its slot could match again.
//! - A set in a file is shared memory, not a database: after a machine crash its contents are
//!   whatever pages reached the disk. `sync` narrows that window, nothing closes it.

#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "tickwheel-shm runs on Linux only: it is built on memfd, futexes and CLOCK_MONOTONIC shared across processes"
);

mod advance;
mod error;
#[cfg(feature = "test-hooks")]
pub mod hooks;
#[cfg(not(feature = "test-hooks"))]
mod hooks;
mod index;
mod layout;
mod map;
mod proc;
mod sync;
mod sys;
mod table;

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use advance::{Advancer, Recovery};
pub use error::{Error, ScheduleError};
pub use layout::{Geometry, HEADER_BYTES, MAX_CAPACITY, SLOT_BYTES, bytes_for};
pub use tickwheel::Mode;

use crate::sync::{Arc, AtomicU64, Ordering, fence};
use layout::Layout;
use map::Memory;
use proc::Liveness;
use table::{Ident, Pop, View};

/// The crate README's example, compiled and run as a doc-test so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// How a set is made: capacity, wheel geometry, clock, file permissions.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Most timers pending at once (1 to 2^31).
    pub capacity: usize,
    /// Wheel mode of the owner's index (default Coarse).
    pub mode: Mode,
    /// Wheel levels; `None`: the mode's default (Exact 6, Coarse 9).
    pub levels: Option<usize>,
    /// Tick of `CLOCK_MONOTONIC` (default 1 ms); `None`: a manual clock moved by the owner.
    pub tick: Option<Duration>,
    /// Permission bits of a backing file (default `0o600`, before the umask).
    pub file_mode: u32,
}

impl Config {
    /// `capacity` timers, Coarse, 1 ms ticks of `CLOCK_MONOTONIC`, files mode 0600.
    pub fn new(capacity: usize) -> Config {
        Config {
            capacity,
            mode: Mode::Coarse,
            levels: None,
            tick: Some(Duration::from_millis(1)),
            file_mode: 0o600,
        }
    }

    /// Sets the wheel mode.
    pub fn mode(mut self, mode: Mode) -> Config {
        self.mode = mode;
        self
    }

    /// Sets the wheel levels.
    pub fn levels(mut self, levels: usize) -> Config {
        self.levels = Some(levels);
        self
    }

    /// Follows `CLOCK_MONOTONIC` in ticks of `tick`.
    pub fn tick(mut self, tick: Duration) -> Config {
        self.tick = Some(tick);
        self
    }

    /// Uses a manual clock (a word in the mapping) instead of `CLOCK_MONOTONIC`.
    pub fn manual_clock(mut self) -> Config {
        self.tick = None;
        self
    }

    /// Sets the permission bits of a backing file.
    pub fn file_mode(mut self, mode: u32) -> Config {
        self.file_mode = mode;
        self
    }

    fn geometry(&self) -> Result<Geometry, Error> {
        let g = Geometry {
            mode: self.mode,
            levels: self.levels.unwrap_or(match self.mode {
                Mode::Exact => 6,
                Mode::Coarse => 9,
            }),
            tick: self.tick,
            capacity: self.capacity,
        };
        layout::check_geometry(&g).map_err(Error::InvalidConfig)?;
        Ok(g)
    }
}

/// A mapped timer set. Clones share the mapping; each process makes its own [`Client`] with
/// [`attach`](Segment::attach).
#[derive(Clone)]
pub struct Segment {
    inner: Arc<Inner>,
}

struct Inner {
    // Field order: the fd and path outlive nothing; the mapping is dropped first.
    memory: Memory,
    layout: Layout,
    geometry: Geometry,
    set: u64,
    fd: Option<OwnedFd>,
    path: Option<PathBuf>,
    liveness: Liveness,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("geometry", &self.inner.geometry)
            .field("bytes", &self.inner.memory.len())
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

fn random_set_id() -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    std::process::id().hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    h.finish() | 1
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidConfig("path contains a NUL byte"))
}

impl Segment {
    /// A set in anonymous shared memory: children made with `fork` after this call share it.
    pub fn anonymous(config: &Config) -> Result<Segment, Error> {
        Self::create(config, None, None)
    }

    /// A set in a new memfd; pass [`fd`](Segment::fd) to another process (`SCM_RIGHTS`, or
    /// inheritance across `exec` after clearing close-on-exec) and open it there with
    /// [`from_fd`](Segment::from_fd). The memfd is sealed against shrinking (`F_SEAL_SHRINK`):
    /// no holder of the fd can cut the mapping short (see [Files](self#files-and-truncation)).
    pub fn memfd(config: &Config, name: &str) -> Result<Segment, Error> {
        let name =
            CString::new(name).map_err(|_| Error::InvalidConfig("name contains a NUL byte"))?;
        let fd = crate::sys::memfd_create(&name)?;
        let segment = Self::create(config, Some(fd), None)?;
        crate::sys::seal_shrink(segment.fd().expect("a memfd set has its fd"))?;
        Ok(segment)
    }

    /// A set in a new file at `path`, created with `O_EXCL | O_NOFOLLOW` and
    /// [`Config::file_mode`]: fails if anything (a symlink included) is already there. As with
    /// [`open_file`](Segment::open_file), directories on the way are resolved as usual.
    pub fn create_file(path: impl AsRef<Path>, config: &Config) -> Result<Segment, Error> {
        let path = path.as_ref();
        config.geometry()?;
        let fd = crate::sys::open_create_excl(&c_path(path)?, config.file_mode)?;
        match Self::create(config, Some(fd), Some(path.to_path_buf())) {
            Ok(s) => Ok(s),
            Err(e) => {
                // Leave no half-made file behind.
                let _ = std::fs::remove_file(path);
                Err(e)
            }
        }
    }

    /// Opens the set in the file at `path` with `O_NOFOLLOW`: a symlink as the last component is
    /// refused, while directories on the way are resolved as usual (symlinks among them
    /// followed), as any `open` does. The geometry is the one stored in the file's header; see
    /// [`geometry`](Segment::geometry).
    pub fn open_file(path: impl AsRef<Path>) -> Result<Segment, Error> {
        let path = path.as_ref();
        let fd = crate::sys::open_existing(&c_path(path)?)?;
        Self::open(fd, Some(path.to_path_buf()))
    }

    /// Opens the file at `path` if it exists (its stored geometry wins over `config`'s),
    /// otherwise creates it with `config`.
    pub fn open_or_create_file(path: impl AsRef<Path>, config: &Config) -> Result<Segment, Error> {
        let path = path.as_ref();
        match Self::create_file(path, config) {
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::open_file(path)
            }
            other => other,
        }
    }

    /// Opens the set behind `fd` (a memfd or file another process created).
    pub fn from_fd(fd: OwnedFd) -> Result<Segment, Error> {
        Self::open(fd, None)
    }

    fn create(
        config: &Config,
        fd: Option<OwnedFd>,
        path: Option<PathBuf>,
    ) -> Result<Segment, Error> {
        let geometry = config.geometry()?;
        let layout = Layout::new(geometry.capacity);
        if let Some(fd) = &fd {
            crate::sys::ftruncate(fd.as_fd(), layout.bytes() as u64)?;
        }
        let memory = Memory::map(fd.as_ref(), layout.bytes())?;
        let set = random_set_id();
        let w = memory.words();
        // Relaxed: published by the Release store of the magic, which openers load with Acquire.
        w[layout::W_VERSION].store(layout::VERSION, Ordering::Relaxed);
        w[layout::W_GEOMETRY].store(layout::geometry_word(&geometry), Ordering::Relaxed);
        let tick_ns = geometry.tick.map_or(0, |t| t.as_nanos() as u64);
        w[layout::W_TICK_NS].store(tick_ns, Ordering::Relaxed);
        w[layout::W_CAPACITY].store(geometry.capacity as u64, Ordering::Relaxed);
        w[layout::W_SIZE].store(layout.bytes() as u64, Ordering::Relaxed);
        w[layout::W_SET].store(set, Ordering::Relaxed);
        w[layout::W_FREE_HEAD].store(u64::from(table::NIL), Ordering::Relaxed);
        w[layout::W_MAGIC].store(layout::MAGIC, Ordering::Release);
        Ok(Segment {
            inner: Arc::new(Inner {
                memory,
                layout,
                geometry,
                set,
                fd,
                path,
                liveness: Liveness::default(),
            }),
        })
    }

    fn open(fd: OwnedFd, path: Option<PathBuf>) -> Result<Segment, Error> {
        let size = crate::sys::file_size(fd.as_fd())?;
        if size < 8 {
            return Err(Error::NotATimerSet);
        }
        let len = usize::try_from(size).map_err(|_| Error::NotATimerSet)?;
        let memory = Memory::map(Some(&fd), len)?;
        let w = memory.words();
        // Acquire: pairs with the creator's Release store; the header below is then complete.
        if w[layout::W_MAGIC].load(Ordering::Acquire) != layout::MAGIC {
            return Err(Error::NotATimerSet);
        }
        if w.len() < 8 {
            return Err(Error::Truncated {
                expected: layout::HEADER_BYTES as u64,
                actual: size,
            });
        }
        let read = |at: usize| w[at].load(Ordering::Relaxed);
        let version = read(layout::W_VERSION);
        if version != layout::VERSION {
            return Err(Error::Version {
                found: version,
                supported: layout::VERSION,
            });
        }
        let stated = read(layout::W_SIZE);
        let geometry = layout::geometry_from(
            read(layout::W_GEOMETRY),
            read(layout::W_TICK_NS),
            read(layout::W_CAPACITY),
        )
        .map_err(Error::BadHeader)?;
        let layout = Layout::new(geometry.capacity);
        if layout.bytes() as u64 != stated {
            return Err(Error::SizeMismatch {
                expected: layout.bytes() as u64,
                actual: stated,
            });
        }
        if size < stated {
            return Err(Error::Truncated {
                expected: stated,
                actual: size,
            });
        }
        if size > stated {
            return Err(Error::SizeMismatch {
                expected: stated,
                actual: size,
            });
        }
        let free_head = read(layout::W_FREE_HEAD) as u32;
        if free_head != table::NIL && free_head as usize >= geometry.capacity {
            return Err(Error::Corrupt("the free-stack head names no slot"));
        }
        let set = read(layout::W_SET);
        Ok(Segment {
            inner: Arc::new(Inner {
                memory,
                layout,
                geometry,
                set,
                fd: Some(fd),
                path,
                liveness: Liveness::default(),
            }),
        })
    }

    /// The set's geometry (for an opened set, the one stored in its header).
    pub fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    /// Bytes of shared memory the set takes.
    pub fn bytes(&self) -> usize {
        self.inner.memory.len()
    }

    /// The memfd or file behind the set (`None` for anonymous memory).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.fd.as_ref().map(|f| f.as_fd())
    }

    /// The file's path, for sets made by `create_file` / `open_file`.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Writes the mapping back to its file and waits (`msync(MS_SYNC)`).
    pub fn sync(&self) -> Result<(), Error> {
        Ok(self.inner.memory.sync()?)
    }

    /// Removes the file's name (processes that have it mapped keep using it).
    pub fn unlink(&self) -> Result<(), Error> {
        match &self.inner.path {
            Some(p) => Ok(std::fs::remove_file(p)?),
            None => Err(Error::InvalidConfig("the set has no file to unlink")),
        }
    }

    /// Attaches the calling process: registers it (pid and start time) in the set so that the
    /// owner notices if it dies, and returns the handle through which it schedules and cancels.
    /// After `fork`, a child attaches for itself rather than use the parent's client (a copy
    /// dropped in the child leaves the parent's registration alone).
    pub fn attach(&self) -> Result<Client, Error> {
        self.attach_ident(proc::current()?)
    }

    /// Attaches as process `pid` (start time 0), for tests that stand threads in for processes;
    /// pair it with [`with_liveness_probe`](Segment::with_liveness_probe).
    #[cfg(feature = "test-hooks")]
    pub fn attach_as(&self, pid: u32) -> Result<Client, Error> {
        self.attach_ident(Ident { pid, start: 0 })
    }

    /// Judges liveness with `probe(pid)` instead of `/proc`, for tests that stand threads in for
    /// processes. Only on a segment not yet attached to (the segment must be the only clone).
    #[cfg(feature = "test-hooks")]
    pub fn with_liveness_probe(
        mut self,
        probe: std::sync::Arc<dyn Fn(u32) -> bool + Send + Sync>,
    ) -> Segment {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.liveness.probe = Some(probe),
            None => panic!("with_liveness_probe on a shared segment"),
        }
        self
    }

    /// How many times schedulers have woken the owner (the futex word), for models of the wake
    /// protocol.
    #[cfg(feature = "test-hooks")]
    pub fn wake_count(&self) -> u64 {
        // Acquire: as the owner's helper thread reads it.
        self.view().word(layout::W_WAKE).load(Ordering::Acquire)
    }

    fn attach_ident(&self, me: Ident) -> Result<Client, Error> {
        let forks = sys::watch_forks().then(sys::forks);
        let record = self.view().register(me.word()).ok_or(Error::RegistryFull)?;
        Ok(Client {
            segment: self.clone(),
            me,
            record: Some(record),
            stripe: record % layout::STRIPES,
            kept: Arc::new(AtomicU64::new(NO_SLOT)),
            forks,
            maker: std::process::id(),
        })
    }

    fn view(&self) -> View<'_> {
        View {
            words: self.inner.memory.words(),
            layout: &self.inner.layout,
        }
    }
}

/// Names one timer of one set: set id, slot, generation. Plain data: send it to any process
/// attached to the same set ([`to_u128`](Handle::to_u128)). A handle of another set, or of a
/// timer that fired or was cancelled, matches nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    set: u64,
    slot: u32,
    generation: u32,
}

impl Handle {
    /// The handle as one number, for pipes and messages.
    pub fn to_u128(self) -> u128 {
        u128::from(self.set) << 64 | u128::from(self.slot) << 32 | u128::from(self.generation)
    }

    /// The handle back from [`to_u128`](Handle::to_u128). Any value is accepted; one that names
    /// no timer of the set it is used with is rejected there.
    pub fn from_u128(bits: u128) -> Handle {
        Handle {
            set: (bits >> 64) as u64,
            slot: (bits >> 32) as u32,
            generation: bits as u32,
        }
    }
}

/// Counters of a set, summed over all processes. A process killed between its state change and
/// its counter update leaves a counter short by that one operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Successful schedules.
    pub scheduled: u64,
    /// Cancels that returned true.
    pub cancelled: u64,
    /// Timers whose fire CAS the owner won (handed to a handler, or interrupted).
    pub fired: u64,
    /// Schedules refused because every slot was in use.
    pub full: u64,
    /// Slots recovery found lost (popped or held by a dead process, or freed but not pushed by a
    /// dead owner) and freed.
    pub reclaimed: u64,
    /// Times a process took advancing over from a dead owner.
    pub takeovers: u64,
    /// Fires begun and not finished (by a dead owner, or a handler that panicked) whose payloads
    /// [`Advancer::take_interrupted`] handed over.
    pub interrupted: u64,
}

/// A process's access to a set: schedule, cancel, read the clock and counters. Made by
/// [`Segment::attach`]; dropping it removes the process from the registry.
pub struct Client {
    segment: Segment,
    me: Ident,
    record: Option<usize>,
    /// The counter stripe this client adds to (see `layout`).
    stripe: usize,
    /// The slot of this client's last winning cancel, kept for its next schedule: `FREE(g)`
    /// named by this process and on no stack, packed `g << 32 | slot`; [`NO_SLOT`] if none.
    /// Shared with the client of an advancer made from this one.
    kept: Arc<AtomicU64>,
    /// [`sys::forks`] when this client was made: a copy in a `fork` child sees another count,
    /// and keeps no slot (its memory, and the slot with it, would leave with the child). `None`
    /// where forks are not counted: then no client keeps a slot.
    forks: Option<u64>,
    /// The OS process that made this value: a copy left in a child by `fork` is not it, and its
    /// drop must not undo the parent's registration or ownership.
    maker: u32,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("pid", &self.me.pid)
            .field("segment", &self.segment)
            .finish_non_exhaustive()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.in_maker() {
            return;
        }
        if let Some((s, g)) = self.take_kept() {
            self.view().give_back(s, g, self.me.holder());
        }
        if let Some(i) = self.record {
            self.segment.view().unregister(i, self.me.word());
        }
    }
}

impl Client {
    /// The same process's access without a registry record of its own (the advancer's), keeping
    /// its cancelled slot with this client's.
    fn share(&self) -> Client {
        Client {
            segment: self.segment.clone(),
            me: self.me,
            record: None,
            stripe: self.stripe,
            kept: Arc::clone(&self.kept),
            forks: self.forks,
            maker: self.maker,
        }
    }

    /// False in a child made by `fork` that inherited this value.
    pub(crate) fn in_maker(&self) -> bool {
        std::process::id() == self.maker
    }

    fn view(&self) -> View<'_> {
        self.segment.view()
    }

    /// The set this client is attached to.
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// The current tick: of `CLOCK_MONOTONIC` (the same in every process), or the manual clock.
    pub fn now(&self) -> u64 {
        match self.segment.inner.geometry.tick {
            // Relaxed: the manual clock orders nothing; the owner's turn reads it itself.
            None => self.view().word(layout::W_CLOCK).load(Ordering::Relaxed),
            Some(tick) => monotonic_ns() / tick.as_nanos() as u64,
        }
    }

    /// Schedules `payload` to fire at tick `deadline` (one at or before `now()` fires at the
    /// owner's next turn). On a full set, or one whose free stack was overwritten, the payload
    /// comes back in the [`ScheduleError`].
    pub fn schedule_at(&self, deadline: u64, payload: u64) -> Result<Handle, ScheduleError> {
        let v = self.view();
        let holder = self.me.holder();
        // The slot of this client's last cancel, if it kept one and still holds it (a copy of
        // the client in a `fork` child may have taken it: the claim then fails).
        let kept = self.take_kept().filter(|&(s, g)| v.claim(s, g, holder));
        let (slot, generation) = match kept {
            Some(kept) => kept,
            None => self.pop_and_claim(&v, holder, payload)?,
        };
        v.arm(slot, generation, deadline, payload);
        v.mark(slot);
        v.count(layout::counter(self.stripe, layout::C_SCHEDULED), 1);
        self.wake_if_earlier(deadline);
        Ok(Handle {
            set: self.segment.inner.set,
            slot,
            generation,
        })
    }

    /// Pops a free slot and claims it; the set full (`payload` handed back) or its stack
    /// overwritten.
    fn pop_and_claim(
        &self,
        v: &View<'_>,
        holder: u32,
        payload: u64,
    ) -> Result<(u32, u32), ScheduleError> {
        let mut waits = 0;
        let mut lost = 0;
        loop {
            match v.pop_free() {
                Pop::Slot(s, g) if v.claim(s, g, holder) => return Ok((s, g)),
                // Re-issued by recovery, or taken by a claimer that popped it before recovery
                // re-issued it: this stack entry is spent, pop again. A re-issued slot reaches
                // the stack a moment after its generation moved: wait for it (a few times) before
                // calling the set full. Each lost claim needs a recovery between one pop and its
                // claim; a run of `LOST_CLAIMS` of them is a stack that loops.
                Pop::Slot(..) if lost < LOST_CLAIMS => {
                    lost += 1;
                    waits = 1;
                }
                Pop::Slot(..) | Pop::Corrupt => return Err(ScheduleError::Corrupt(payload)),
                Pop::Empty if (1..RECOVERY_WAITS).contains(&waits) => {
                    waits += 1;
                    crate::sync::yield_now();
                }
                Pop::Empty => {
                    v.count(layout::counter(self.stripe, layout::C_FULL), 1);
                    return Err(ScheduleError::Full(payload));
                }
            }
        }
    }

    /// The slot this client keeps, taken out (`(slot, generation)`), if any.
    fn take_kept(&self) -> Option<(u32, u32)> {
        // Acquire: pairs with `keep`'s Release, so the cancel CAS that freed the slot (another
        // thread's, through a shared client) comes before the taker's claim of it, which then
        // reads `FREE(g)`, not the `PENDING` word before it.
        let kept = self.kept.swap(NO_SLOT, Ordering::Acquire);
        (kept != NO_SLOT).then_some((kept as u32, (kept >> 32) as u32))
    }

    /// Keeps `(slot, generation)`, a slot this client's cancel just freed, for its next schedule;
    /// false if it keeps one already, if this is a copy of a client that a `fork` child
    /// inherited (whose kept slot would be lost with the child: the caller pushes it instead), or
    /// if forks are not counted (see [`sys::watch_forks`]).
    fn keep(&self, slot: u32, generation: u32) -> bool {
        if self.forks != Some(sys::forks()) {
            return false;
        }
        // Release: see `take_kept`.
        self.kept
            .compare_exchange(
                NO_SLOT,
                u64::from(generation) << 32 | u64::from(slot),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Schedules `payload` to fire `delay` from now, rounded up to a tick (never early). A manual
    /// clock's ticks have no length; there the delay counts milliseconds as ticks.
    pub fn schedule_after(&self, delay: Duration, payload: u64) -> Result<Handle, ScheduleError> {
        let deadline = match self.segment.inner.geometry.tick {
            None => self
                .now()
                .saturating_add(delay.as_millis().min(u128::from(u64::MAX)) as u64),
            Some(tick) => {
                let tick = tick.as_nanos() as u64;
                let at = monotonic_ns()
                    .saturating_add(delay.as_nanos().min(u128::from(u64::MAX)) as u64);
                at.div_ceil(tick)
            }
        };
        self.schedule_at(deadline, payload)
    }

    /// Cancels the timer `handle` names. True: it will never fire. False: it fired or is firing,
    /// was cancelled before, or the handle belongs to another set.
    pub fn cancel(&self, handle: Handle) -> bool {
        if handle.set != self.segment.inner.set
            || handle.slot as usize >= self.segment.inner.layout.capacity
        {
            return false;
        }
        let v = self.view();
        let holder = self.me.holder();
        if !v.cancel(handle.slot, handle.generation, holder) {
            return false;
        }
        // The slot is free at once, kept for this client's next schedule or back on the free
        // stack for any process's: no schedule waits for the owner, whose stale index entry only
        // fails its CAS.
        if !self.keep(handle.slot, handle.generation.wrapping_add(1)) {
            v.release(handle.slot, handle.generation, holder);
        }
        v.count(layout::counter(self.stripe, layout::C_CANCELLED), 1);
        true
    }

    /// Timers scheduled and neither fired nor cancelled, from the counters (see [`Stats`]).
    pub fn len(&self) -> usize {
        let s = self.stats();
        s.scheduled
            .saturating_sub(s.cancelled.saturating_add(s.fired)) as usize
    }

    /// True if [`len`](Client::len) is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The set's counters.
    pub fn stats(&self) -> Stats {
        let v = self.view();
        // Relaxed: counters are statistics, read without ordering against anything.
        let r = |at: usize| v.word(at).load(Ordering::Relaxed);
        let striped = |c: usize| {
            (0..layout::STRIPES).fold(0u64, |sum, k| sum.wrapping_add(r(layout::counter(k, c))))
        };
        Stats {
            scheduled: striped(layout::C_SCHEDULED),
            cancelled: striped(layout::C_CANCELLED),
            fired: r(layout::W_FIRED),
            full: striped(layout::C_FULL),
            reclaimed: r(layout::W_RECLAIMED),
            takeovers: r(layout::W_TAKEOVERS),
            interrupted: r(layout::W_INTERRUPTED),
        }
    }

    /// Becomes the process that advances the set: claims the owner word if it is free or names
    /// a dead process (then rebuilds the index by scanning the slots). [`Error::Busy`] if another
    /// live process advances it.
    pub fn advancer(&self) -> Result<Advancer, Error> {
        Advancer::claim(self.share())
    }

    /// Wakes the owner if `deadline` is earlier than the tick it sleeps until.
    fn wake_if_earlier(&self, deadline: u64) {
        let v = self.view();
        // SeqCst fence: orders the mark (above) before the load of the published tick, against
        // the owner's publish-then-look-at-marks (see `Advancer::publish_sleep`).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        if deadline < v.word(layout::W_NEXT_WAKE).load(Ordering::Relaxed) {
            hooks::store_point();
            // Release: the owner's helper thread loads the counter with Acquire.
            v.word(layout::W_WAKE).fetch_add(1, Ordering::Release);
            #[cfg(not(loom))]
            // SAFETY: the futex word lies in our live mapping and is 4-byte aligned.
            unsafe {
                crate::sys::futex_wake(self.segment.inner.memory.futex_addr(layout::W_WAKE), 1);
            }
        }
    }
}

/// Where a simulated crash stops a schedule: the state a process killed at that instant leaves.
/// For tests and models only.
#[cfg(feature = "test-hooks")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// The slot is off the free stack, not yet claimed.
    AfterPop,
    /// The slot is `HELD` by this process.
    AfterClaim,
    /// The slot is `PENDING`, not marked.
    AfterArm,
    /// Only the leaf level of the dirty bitmap is marked.
    AfterLeafMark,
}

impl Client {
    /// Runs a schedule up to `at` and stops there, as if the process were killed; the handle the
    /// operation would have returned, if it got that far. For tests and models only.
    #[cfg(feature = "test-hooks")]
    pub fn schedule_crashing(&self, at: CrashPoint, deadline: u64, payload: u64) -> Option<Handle> {
        let v = self.view();
        let Pop::Slot(slot, generation) = v.pop_free() else {
            return None;
        };
        let handle = Handle {
            set: self.segment.inner.set,
            slot,
            generation,
        };
        if at == CrashPoint::AfterPop || !v.claim(slot, generation, self.me.holder()) {
            return None;
        }
        if at == CrashPoint::AfterClaim {
            return None;
        }
        v.arm(slot, generation, deadline, payload);
        if at == CrashPoint::AfterLeafMark {
            v.mark_levels(slot, 1);
        }
        Some(handle)
    }

    /// Drops the client as a killed process would leave it: still in the registry. For tests and
    /// models only.
    #[cfg(feature = "test-hooks")]
    pub fn crash(mut self) {
        self.record = None;
        // A killed process gives nothing back: its kept slot waits for recovery.
        let _ = self.take_kept();
    }

    /// A cancel stopped right after its CAS (the slot not pushed, no count). For tests and
    /// models only.
    #[cfg(feature = "test-hooks")]
    pub fn cancel_crashing(&self, handle: Handle) -> bool {
        handle.set == self.segment.inner.set
            && (handle.slot as usize) < self.segment.inner.layout.capacity
            && self
                .view()
                .cancel(handle.slot, handle.generation, self.me.holder())
    }
}

/// How many times a schedule that lost a slot to recovery waits for the re-issued slot to reach
/// the free stack before it reports the set full.
const RECOVERY_WAITS: u32 = 64;

/// [`Client::kept`] when the client keeps no slot (no slot has index `u32::MAX`).
const NO_SLOT: u64 = u64::MAX;

/// Claims one schedule may lose in a row (each to a recovery that re-issued the slot it had
/// popped) before it calls the free stack corrupt: a few milliseconds of a looping stack.
const LOST_CLAIMS: u32 = 1 << 16;

/// `CLOCK_MONOTONIC` in nanoseconds.
fn monotonic_ns() -> u64 {
    crate::sys::clock_ns(libc::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable")
}

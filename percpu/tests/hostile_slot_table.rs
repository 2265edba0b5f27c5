//! Attacks on the slot table's storage from the public API: a table of 2 MiB or more lives in a
//! mapping of its own, a smaller one (or one whose records need more than a page's alignment) in
//! the global allocator. On both sides of that line, and for payloads that are page-aligned,
//! over-page-aligned, small, or zero-sized, every slot up to the very last one holds its payload
//! intact, `Full` hands the value back, every payload comes out or is dropped exactly once, and
//! bases made and dropped on many threads at once, with remote schedules racing the drops, leak
//! and double-drop nothing.

use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, Handle, MAX_SLOTS, ManualClock, Mode, bases};

/// Tables of at least this many bytes are a mapping of their own (the crate's `MAPPED_BYTES`).
const MAPPED_BYTES: usize = 2 << 20;

/// The shape of a slot record as the slot table's doc lays it out (word, deadline, payload, link,
/// three wheel links, `repr(C)`): only used to aim the capacities at the mapping threshold. If it
/// drifts from the real record the tests still check everything, just less sharply at the line.
#[repr(C)]
#[allow(dead_code, reason = "only its size is read")]
struct RecordShape<T> {
    word: u64,
    deadline: u64,
    cell: MaybeUninit<T>,
    link: u32,
    filing: [u32; 3],
}

/// The smallest capacity whose table is at least `MAPPED_BYTES` with payload `T`.
fn threshold<T>() -> usize {
    MAPPED_BYTES.div_ceil(std::mem::size_of::<RecordShape<T>>())
}

/// A payload under test: it carries a value (or not, if zero-sized), checks its own integrity,
/// and counts how many of its kind were made and dropped. Each kind is used by one test only, so
/// its counters are that test's alone even with tests running in parallel.
trait Payload: Send + 'static + Sized {
    fn make(value: u64) -> Self;
    /// The value it was made with (`None` for a zero-sized payload); panics if its bytes are not
    /// what `make` wrote, or if it is not at its type's alignment.
    fn value(&self) -> Option<u64>;
    fn made() -> &'static AtomicUsize;
    fn drops() -> &'static AtomicUsize;
}

fn assert_aligned<T>(v: &T) {
    let at = std::ptr::from_ref(v) as usize;
    assert_eq!(
        at % std::mem::align_of::<T>(),
        0,
        "a payload at {at:#x}, not aligned to {}",
        std::mem::align_of::<T>()
    );
}

/// A payload of `N` bytes at alignment `A` (a wrapper per alignment below): the value at both
/// ends, and every byte between derived from it, so an overlap of two records, or a payload read
/// from the wrong place, shows.
macro_rules! aligned_payload {
    ($name:ident, $align:literal, $made:ident, $drops:ident) => {
        static $made: AtomicUsize = AtomicUsize::new(0);
        static $drops: AtomicUsize = AtomicUsize::new(0);

        #[repr(C, align($align))]
        struct $name {
            bytes: [u8; $align],
        }

        impl Payload for $name {
            fn make(value: u64) -> Self {
                let mut bytes = [0u8; $align];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = (value as u8) ^ (i as u8).wrapping_mul(31);
                }
                bytes[..8].copy_from_slice(&value.to_le_bytes());
                bytes[$align - 8..].copy_from_slice(&(!value).to_le_bytes());
                $made.fetch_add(1, Ordering::Relaxed);
                Self { bytes }
            }

            fn value(&self) -> Option<u64> {
                assert_aligned(self);
                let value = u64::from_le_bytes(self.bytes[..8].try_into().unwrap());
                let tail = u64::from_le_bytes(self.bytes[$align - 8..].try_into().unwrap());
                assert_eq!(
                    tail, !value,
                    "payload {value}: its last bytes were overwritten"
                );
                for (i, &b) in self.bytes.iter().enumerate().take($align - 8).skip(8) {
                    assert_eq!(
                        b,
                        (value as u8) ^ (i as u8).wrapping_mul(31),
                        "payload {value}: byte {i} was overwritten"
                    );
                }
                Some(value)
            }

            fn made() -> &'static AtomicUsize {
                &$made
            }

            fn drops() -> &'static AtomicUsize {
                &$drops
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                assert_aligned(self);
                $drops.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
}

aligned_payload!(Page, 4096, PAGE_MADE, PAGE_DROPS);
aligned_payload!(TwoPages, 8192, TWO_PAGES_MADE, TWO_PAGES_DROPS);

static SMALL_MADE: AtomicUsize = AtomicUsize::new(0);
static SMALL_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A small payload that owns heap memory, so a double drop is also a double free.
struct Small {
    value: Box<u64>,
}

impl Payload for Small {
    fn make(value: u64) -> Self {
        SMALL_MADE.fetch_add(1, Ordering::Relaxed);
        Self {
            value: Box::new(value),
        }
    }

    fn value(&self) -> Option<u64> {
        Some(*self.value)
    }

    fn made() -> &'static AtomicUsize {
        &SMALL_MADE
    }

    fn drops() -> &'static AtomicUsize {
        &SMALL_DROPS
    }
}

impl Drop for Small {
    fn drop(&mut self) {
        SMALL_DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

static ZST_MADE: AtomicUsize = AtomicUsize::new(0);
static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A zero-sized payload with a drop of its own.
struct Nothing;

impl Payload for Nothing {
    fn make(_value: u64) -> Self {
        ZST_MADE.fetch_add(1, Ordering::Relaxed);
        Nothing
    }

    fn value(&self) -> Option<u64> {
        None
    }

    fn made() -> &'static AtomicUsize {
        &ZST_MADE
    }

    fn drops() -> &'static AtomicUsize {
        &ZST_DROPS
    }
}

impl Drop for Nothing {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

fn manual(clock: &ManualClock, capacity: usize) -> Config {
    Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(capacity)
}

/// One life of a set of two bases of `capacity` slots each, payload `P`:
/// - base 0 is filled locally to the last slot, the next schedule is refused `Full` with its
///   value back, a third of the timers are cancelled and their slots filled again (new
///   generations), the table is full again, then everything fires with its value;
/// - base 1 takes remote schedules until it refuses them, one turn files them, a remote re-arm
///   and a remote cancel go to some, the rest fire; then more remote schedules are left in
///   transit and some filed, and the set is dropped with them pending.
///
/// Checks the values that fire, and that every payload made is dropped exactly once.
fn one_life<P: Payload>(capacity: usize) {
    let made_before = P::made().load(Ordering::Relaxed);
    let drops_before = P::drops().load(Ordering::Relaxed);
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<P>(2, manual(&clock, capacity)).unwrap();
    assert_eq!(all[0].slot_capacity(), capacity);
    assert_eq!(all[0].free_slots(), capacity);

    // Fill base 0 to the last slot.
    let mut next = 0u64;
    let mut pending: Vec<(Handle, u64)> = Vec::with_capacity(capacity);
    loop {
        let value = next;
        next += 1;
        let delay = Duration::from_millis(1 + value % 97);
        match all[0].schedule_after(delay, P::make(value)) {
            Ok(h) => pending.push((h, value)),
            Err(e) => {
                assert!(e.is_full(), "capacity {capacity}: refused with {e}");
                assert_eq!(
                    e.into_inner().value().unwrap_or(value),
                    value,
                    "Full gives the refused value back"
                );
                break;
            }
        }
    }
    assert_eq!(
        pending.len(),
        capacity,
        "every slot, the last included, took a timer"
    );
    assert_eq!(all[0].free_slots(), 0);
    assert_eq!(all[0].len(), capacity);

    // Cancel every third (the last one too), then fill the freed slots again.
    let mut cancelled = 0;
    let mut kept = Vec::with_capacity(capacity);
    for (i, (h, value)) in pending.drain(..).enumerate() {
        if i % 3 == 0 || i == capacity - 1 {
            assert!(all[0].cancel(h), "timer {value} was pending");
            assert!(!all[0].cancel(h), "a second cancel of {value} must lose");
            cancelled += 1;
        } else {
            kept.push((h, value));
        }
    }
    for _ in 0..cancelled {
        let value = next;
        next += 1;
        let h = all[0]
            .schedule_after(Duration::from_millis(1 + value % 13), P::make(value))
            .unwrap_or_else(|e| panic!("a freed slot: {e}"));
        kept.push((h, value));
    }
    let e = all[0]
        .schedule_after(Duration::ZERO, P::make(next))
        .expect_err("the table is full again");
    assert!(e.is_full(), "{e}");
    assert_eq!(e.into_inner().value().unwrap_or(next), next);

    // Base 1, from afar: schedule until refused (the reserve runs dry, or the table fills).
    let mut remote_pending = Vec::new();
    loop {
        let value = next;
        next += 1;
        match remote.schedule_after(1, Duration::from_millis(1 + value % 50), P::make(value)) {
            Ok(h) => remote_pending.push((h, value)),
            Err(e) => {
                assert!(e.is_reserve_empty() || e.is_full(), "{e}");
                assert_eq!(e.into_inner().value().unwrap_or(value), value);
                break;
            }
        }
    }
    assert!(!remote_pending.is_empty(), "base 1 took remote schedules");
    assert_eq!(all[1].turn(|_| panic!("nothing is due yet")), 0);
    // A remote cancel of the first, a remote re-arm of the last to much later (one timer, on a
    // tiny table: only the re-arm).
    if remote_pending.len() > 1 {
        let (first, _) = remote_pending.remove(0);
        assert!(remote.cancel(first));
    }
    let (last, last_value) = remote_pending.pop().unwrap();
    assert!(remote.reset_after(last, Duration::from_secs(3600)));

    clock.advance(Duration::from_millis(200));
    let mut fired = Vec::with_capacity(kept.len());
    let n = all[0].turn(|p| fired.push(p.value()));
    assert_eq!(n, kept.len());
    let mut expected: Vec<Option<u64>> = kept
        .iter()
        .map(|&(_, v)| Some(v).filter(|_| std::mem::size_of::<P>() != 0))
        .collect();
    expected.sort_unstable();
    fired.sort_unstable();
    assert_eq!(
        fired, expected,
        "each uncancelled timer fired once with its value"
    );
    assert_eq!(
        all[0].free_slots(),
        capacity,
        "all slots free after the fire"
    );
    for &(h, value) in kept.iter().take(50) {
        assert!(!remote.cancel(h), "{value} fired: a stale handle misses");
    }

    let mut fired = Vec::new();
    all[1].turn(|p| fired.push(p.value()));
    let mut expected: Vec<Option<u64>> = remote_pending
        .iter()
        .map(|&(_, v)| Some(v).filter(|_| std::mem::size_of::<P>() != 0))
        .collect();
    expected.sort_unstable();
    fired.sort_unstable();
    assert_eq!(
        fired, expected,
        "base 1's remote timers fired with their values"
    );

    // Pending at the drop: the re-armed one, some filed by a turn, some still in transit.
    for i in 0..40 {
        let value = next;
        next += 1;
        let _ = remote.schedule_after(1, Duration::from_secs(60), P::make(value));
        if i == 20 {
            all[1].turn(|_| panic!("nothing is due"));
        }
        let _ = all[0].schedule_after(Duration::from_secs(60), P::make(next));
        next += 1;
    }
    drop(all);
    assert!(!remote.cancel(last), "{last_value}: its base is gone");
    drop(remote);

    let made = P::made().load(Ordering::Relaxed) - made_before;
    let drops = P::drops().load(Ordering::Relaxed) - drops_before;
    assert_eq!(
        drops, made,
        "capacity {capacity}: {made} payloads made, {drops} dropped"
    );
}

/// Capacities just below, at and just above the mapping threshold for payload `T`.
fn around_threshold<T>() -> [usize; 3] {
    let t = threshold::<T>();
    [t - 1, t, t + 1]
}

#[test]
fn page_aligned_payloads_fill_fire_and_drop_once_on_both_sides_of_the_mapping() {
    // A record with a 4096-aligned payload is itself 4096-aligned: the mapping (page-aligned) can
    // hold it, so the tables at and above the threshold are mapped.
    for capacity in around_threshold::<Page>() {
        one_life::<Page>(capacity);
    }
}

#[test]
fn over_page_aligned_payloads_fill_fire_and_drop_once_at_any_size() {
    // An 8192-aligned record cannot rely on a page-aligned mapping: whatever the table's size,
    // every payload must come back intact and aligned.
    // A mapping is only page-aligned: between rounds another table of an odd number of pages is
    // kept alive, so the next mappings land at the other parity of 4 KiB pages and an 8192-aligned
    // record put in one would be misaligned at least every other round (which debug builds catch).
    let clock = ManualClock::new();
    let spacer_pages = 515;
    let spacer_slots = spacer_pages * 4096 / std::mem::size_of::<RecordShape<u8>>();
    let mut spacers = Vec::new();
    for _ in 0..4 {
        for capacity in around_threshold::<TwoPages>() {
            one_life::<TwoPages>(capacity);
        }
        one_life::<TwoPages>(3 * threshold::<TwoPages>());
        spacers.push(bases::<u8>(1, manual(&clock, spacer_slots)).unwrap());
    }
}

#[test]
fn small_payloads_fill_fire_and_drop_once_on_both_sides_of_the_mapping() {
    for capacity in around_threshold::<Small>() {
        one_life::<Small>(capacity);
    }
}

#[test]
fn zero_sized_payloads_fill_fire_and_drop_once_on_both_sides_of_the_mapping() {
    assert_eq!(std::mem::size_of::<Nothing>(), 0);
    for capacity in around_threshold::<Nothing>() {
        one_life::<Nothing>(capacity);
    }
}

#[test]
fn a_tiny_table_still_works() {
    // One slot: the smallest table, never mapped, its only slot also its last.
    for capacity in [1, 2, 3] {
        one_life::<Small>(capacity);
    }
}

#[test]
fn a_table_too_large_to_describe_is_refused_not_wrapped() {
    // `wheel_capacity` at its maximum with a 4 GiB payload: the table's size overflows `isize`.
    // It must be refused (an error, or a panic before anything is allocated), never built from
    // a wrapped-around size that would then be written past its end.
    #[allow(dead_code, reason = "only its size matters; no value is ever made")]
    struct Huge([u8; 1 << 32]);
    let clock = ManualClock::new();
    let made = catch_unwind(AssertUnwindSafe(|| {
        bases::<Huge>(1, manual(&clock, MAX_SLOTS)).map(|(b, r)| (b.len(), r.len()))
    }));
    assert!(
        !matches!(made, Ok(Ok(_))),
        "a table of (2^32 - 2) * 4 GiB was built"
    );
}

static CHURN_MADE: AtomicUsize = AtomicUsize::new(0);
static CHURN_DROPS: AtomicUsize = AtomicUsize::new(0);

/// The churn test's payload: a flag of its own that its drop sets (a second drop finds it set),
/// and its round's token (the round's end finds it unshared unless a payload leaked).
struct Churned {
    dropped: Arc<AtomicBool>,
    _round: Arc<()>,
}

impl Churned {
    fn new(round: &Arc<()>) -> Self {
        CHURN_MADE.fetch_add(1, Ordering::Relaxed);
        Self {
            dropped: Arc::new(AtomicBool::new(false)),
            _round: round.clone(),
        }
    }
}

impl Drop for Churned {
    fn drop(&mut self) {
        CHURN_DROPS.fetch_add(1, Ordering::Relaxed);
        assert!(
            !self.dropped.swap(true, Ordering::Relaxed),
            "a payload dropped twice"
        );
    }
}

#[test]
fn bases_made_and_dropped_on_many_threads_with_remote_schedules_in_flight() {
    // Four owner threads, each making and dropping sets of two mapped tables (a capacity past
    // the threshold) while a thread of its own schedules, cancels and re-arms on them from afar
    // until both bases are gone; the two bases are dropped on two threads, the last two
    // `Remote`s (the tables' last owners) on two more, racing. Every payload must be dropped
    // exactly once, and none kept.
    const OWNERS: usize = 4;
    const ROUNDS: usize = 6;
    let capacity = threshold::<Churned>() + 17;
    let owners: Vec<_> = (0..OWNERS)
        .map(|owner| {
            thread::spawn(move || {
                for round in 0..ROUNDS {
                    let token = Arc::new(());
                    let clock = ManualClock::new();
                    let (mut all, remote) = bases::<Churned>(2, manual(&clock, capacity)).unwrap();
                    let started = Arc::new(AtomicBool::new(false));
                    let scheduler = {
                        let remote = remote.clone();
                        let token = token.clone();
                        let started = started.clone();
                        thread::spawn(move || {
                            let mut closed = [false; 2];
                            let mut i = 0usize;
                            let mut handles = Vec::new();
                            while !(closed[0] && closed[1]) {
                                let base = i % 2;
                                i += 1;
                                let delay = Duration::from_millis((i % 7) as u64);
                                match remote.schedule_after(base, delay, Churned::new(&token)) {
                                    Ok(h) => handles.push(h),
                                    Err(e) if e.is_closed() => closed[base] = true,
                                    Err(e) => {
                                        assert!(e.is_reserve_empty() || e.is_full(), "{e}");
                                        thread::yield_now();
                                    }
                                }
                                started.store(true, Ordering::Relaxed);
                                if let Some(&h) = handles.get(i % 64) {
                                    remote.cancel(h);
                                }
                                if let Some(&h) = handles.last() {
                                    remote.reset_after(h, Duration::from_millis(3));
                                }
                            }
                            remote
                        })
                    };
                    while !started.load(Ordering::Relaxed) {
                        thread::yield_now();
                    }
                    for turn in 0..(20 + round * 7 + owner) {
                        clock.advance(Duration::from_millis(1));
                        for b in all.iter_mut() {
                            b.turn(drop);
                            let delay = Duration::from_millis(turn as u64 % 5);
                            let _ = b.schedule_after(delay, Churned::new(&token));
                        }
                    }
                    let second = all.pop().unwrap();
                    let dropper = thread::spawn(move || drop(second));
                    drop(all);
                    dropper.join().unwrap();
                    let remote_back = scheduler.join().unwrap();
                    let a = thread::spawn(move || drop(remote));
                    let b = thread::spawn(move || drop(remote_back));
                    a.join().unwrap();
                    b.join().unwrap();
                    assert_eq!(
                        Arc::strong_count(&token),
                        1,
                        "owner {owner}, round {round}: payloads outlived their set"
                    );
                }
            })
        })
        .collect();
    for o in owners {
        o.join().unwrap();
    }
    assert_eq!(
        CHURN_DROPS.load(Ordering::Relaxed),
        CHURN_MADE.load(Ordering::Relaxed),
        "every payload made was dropped exactly once"
    );
}

//! `Wheel::reserve` from the outside, used the way a hostile caller would.
//!
//! What it promises (its doc comment, and `Slab::reserve`): room for `additional` timers beyond
//! those pending is created up front, so the inserts that use it allocate nothing; room past a
//! bounded wheel's capacity, or past the `2^32 - 2048` timers any wheel holds, is refused with
//! `Full(additional)` and nothing is created then; and the wheel behaves afterwards exactly as it
//! would have without the call.
//!
//! "Allocates nothing" is measured with a counting global allocator (counting per thread, so the
//! tests may run in parallel). "Behaves as without reserve" is checked against a twin wheel that
//! gets the same operations but no reserve calls, and against a naive model of the pending timers
//! (a map by value and a `BTreeSet` of `(expiry, value)`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tickwheel::{Full, Mode, Stats, TimerId, Wheel};

mod common;
use common::Rng;

const MODES: [Mode; 2] = [Mode::Exact, Mode::Coarse];

/// The most timers any wheel holds, `2^32 - 2048`, as `reserve`'s doc comment states it.
const MAX_TIMERS: usize = u32::MAX as usize - 2047;

// ---------------------------------------------------------------------------------------------
// A global allocator that counts, per thread, the allocations and reallocations made, and that
// refuses more than `BUDGET` bytes inside a measured call: a wheel that wrongly set out to create
// 2^32 entries then aborts at once ("memory allocation of N bytes failed") instead of pushing
// the machine out of memory.

struct Counting;

/// Bytes a measured call may allocate in all; the largest room these tests reserve is a few
/// hundred KiB.
const BUDGET: u64 = 1 << 30;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes the measured call on this thread may still allocate; `u64::MAX` outside one.
    static BYTES_LEFT: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// Counts an allocation of `bytes`; false if it is over the budget and must be refused.
fn note(bytes: usize) -> bool {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    BYTES_LEFT
        .try_with(|left| match left.get().checked_sub(bytes as u64) {
            Some(rest) => {
                left.set(rest);
                true
            }
            None => false,
        })
        .unwrap_or(true)
}

// SAFETY: every call is passed on unchanged to the system allocator, or refused with a null
// pointer as `GlobalAlloc` allows; counting touches only const-initialised thread-local `Cell`s,
// which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above; `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !note(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` within `BUDGET`; its result and the allocations (reallocations included) this thread
/// made in it.
fn counted<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let outer = BYTES_LEFT.with(|left| left.replace(BUDGET));
    let result = f();
    BYTES_LEFT.with(|left| left.set(outer));
    (result, ALLOCATIONS.with(Cell::get) - before)
}

// ---------------------------------------------------------------------------------------------
// Helpers.

fn build<T>(mode: Mode, capacity: Option<usize>) -> Wheel<T> {
    let builder = Wheel::builder(mode);
    match capacity {
        Some(capacity) => builder.capacity(capacity),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Everything the public API says about a wheel as a whole; a reserve must change none of it.
fn observe<T>(wheel: &Wheel<T>) -> (usize, u64, Option<u64>, Stats, Option<usize>) {
    (
        wheel.len(),
        wheel.now(),
        wheel.next_expiry(),
        wheel.stats(),
        wheel.capacity(),
    )
}

/// A deadline relative to the clock: in the past, near, far, beyond the top level, at the end of
/// time.
fn any_deadline(rng: &mut Rng, now: u64) -> u64 {
    match rng.below(10) {
        0 => now.saturating_sub(rng.below(100)),
        1 => now.saturating_add(rng.below(64)),
        2..=4 => now.saturating_add(rng.below(5_000)),
        5 => now.saturating_add(rng.below(1 << 24)),
        6 => now.saturating_add(1 << (30 + rng.below(33))),
        7 => u64::MAX - rng.below(1 << 10),
        8 => u64::MAX,
        _ => now.saturating_add(rng.below(1 << 12)),
    }
}

/// Fires everything and returns the values, sorted.
fn fire_all<T: Ord>(wheel: &mut Wheel<T>) -> Vec<T> {
    let mut out: Vec<T> = wheel.drain(u64::MAX).map(|(_, v)| v).collect();
    out.sort();
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiry(), None);
    wheel.check_invariants();
    out
}

// ---------------------------------------------------------------------------------------------
// The measure itself.

/// Without this the zero counts below would prove nothing: a wheel that grows must be seen to
/// allocate.
#[test]
fn the_counter_sees_a_wheel_grow() {
    let ((), n) = counted(|| drop(std::hint::black_box(vec![1u8; 10])));
    assert_eq!(n, 1, "one Vec, one allocation");
    for mode in MODES {
        let mut wheel: Wheel<u64> = Wheel::new(mode);
        let ((), n) = counted(|| {
            for i in 0..5_000 {
                wheel.insert(i, i).unwrap();
            }
        });
        assert!(
            n >= 3,
            "{mode:?}: 5000 timers need three chunks, allocated {n} times"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Small requests and the capacity bound.

#[test]
fn reserve_zero_is_granted_everywhere_and_changes_nothing() {
    for mode in MODES {
        let mut wheel: Wheel<u64> = Wheel::new(mode);
        let before = observe(&wheel);
        let (result, n) = counted(|| wheel.reserve(0));
        assert_eq!(result, Ok(()), "{mode:?}");
        assert_eq!(
            n, 0,
            "{mode:?}: room for no timer beyond none creates nothing"
        );
        assert_eq!(observe(&wheel), before);

        // A full bounded wheel still has room for zero more, and for no more than that.
        let mut wheel = build(mode, Some(3));
        for i in 0..3 {
            wheel.insert(10 + i, i).unwrap();
        }
        let before = observe(&wheel);
        assert_eq!(wheel.reserve(0), Ok(()));
        assert_eq!(wheel.reserve(1), Err(Full(1)));
        assert_eq!(observe(&wheel), before);
        assert_eq!(wheel.insert(99, 99), Err(Full(99)), "still full");
        assert_eq!(fire_all(&mut wheel), [0, 1, 2]);
        assert_eq!(
            wheel.reserve(3),
            Ok(()),
            "fired timers give their room back"
        );
        assert_eq!(wheel.reserve(4), Err(Full(4)));
    }
}

/// Capacities around the 2048-entry chunk, with cancelled and fired timers first (a free list
/// that is not empty): room up to the capacity exactly is granted, its inserts allocate nothing,
/// and the insert past it hands its value back.
#[test]
fn room_up_to_the_capacity_is_granted_and_the_insert_past_it_is_refused() {
    for mode in MODES {
        for capacity in [1, 2, 3, 2_047, 2_048, 2_049, 4_097, 5_000] {
            let mut wheel: Wheel<String> = build(mode, Some(capacity));
            let mut rng = Rng(capacity as u64);
            let mut expected = Vec::new();
            let mut ids = Vec::new();
            for i in 0..capacity / 2 {
                let value = format!("pre {i}");
                let deadline = 1 + rng.below(100);
                ids.push((wheel.insert(deadline, value.clone()).unwrap(), value));
            }
            for (k, (id, value)) in ids.into_iter().enumerate() {
                if k % 3 == 0 {
                    assert_eq!(wheel.cancel(id).as_ref(), Some(&value));
                } else {
                    expected.push(value);
                }
            }
            let fired: Vec<String> = wheel.drain(20).map(|(_, v)| v).collect();
            expected.retain(|v| !fired.contains(v));
            let len = wheel.len();
            assert_eq!(len, expected.len());

            let before = observe(&wheel);
            assert_eq!(wheel.reserve(capacity - len), Ok(()), "{mode:?} {capacity}");
            assert_eq!(observe(&wheel), before, "a granted reserve arms nothing");
            assert_eq!(
                wheel.reserve(capacity - len + 1),
                Err(Full(capacity - len + 1))
            );

            let values: Vec<String> = (0..capacity - len).map(|i| format!("new {i}")).collect();
            expected.extend(values.iter().cloned());
            let deadlines: Vec<u64> = (0..values.len()).map(|_| 1 + rng.below(10_000)).collect();
            let (inserted, n) = counted(|| {
                values
                    .into_iter()
                    .zip(&deadlines)
                    .all(|(v, &d)| wheel.insert(d, v).is_ok())
            });
            assert!(
                inserted,
                "{mode:?} {capacity}: the reserved room is all there"
            );
            assert_eq!(
                n, 0,
                "{mode:?} {capacity}: inserts into reserved room allocated"
            );
            assert_eq!(wheel.len(), capacity);

            let refused = wheel.insert(5, String::from("one too many")).unwrap_err();
            assert_eq!(
                refused.into_inner(),
                "one too many",
                "the value is handed back"
            );
            assert_eq!(wheel.reserve(1), Err(Full(1)));
            assert_eq!(wheel.reserve(0), Ok(()));
            wheel.check_invariants();

            expected.sort();
            assert_eq!(fire_all(&mut wheel), expected, "{mode:?} {capacity}");
        }
    }
}

/// A request one past the capacity is refused, hands its amount back, creates nothing, and the
/// wheel then takes exactly the inserts a twin that was never asked takes, with the same results.
#[test]
fn one_past_the_capacity_is_refused_and_the_same_inserts_still_fit() {
    for mode in MODES {
        for capacity in [1, 2_048, 2_049, 3_000] {
            let mut a: Wheel<u64> = build(mode, Some(capacity));
            let mut b: Wheel<u64> = build(mode, Some(capacity));
            let mut ids = Vec::new();
            for i in 0..(capacity as u64 * 2 / 3) {
                ids.push((a.insert(i * 3, i).unwrap(), b.insert(i * 3, i).unwrap()));
            }
            for &(ia, ib) in ids.iter().step_by(4) {
                assert_eq!(a.cancel(ia), b.cancel(ib));
            }
            let len = a.len();
            for additional in [
                capacity - len + 1,
                capacity + 1,
                usize::MAX - len,
                usize::MAX,
            ] {
                let (result, n) = counted(|| a.reserve(additional));
                assert_eq!(result, Err(Full(additional)), "{mode:?} {capacity}");
                assert_eq!(n, 0, "a refused reserve allocated");
                assert_eq!(
                    observe(&a),
                    observe(&b),
                    "a refused reserve changed the wheel"
                );
            }
            for i in 0..(capacity - len) as u64 {
                let ia = a.insert(7 * i, 1_000_000 + i).expect("room left as before");
                let ib = b.insert(7 * i, 1_000_000 + i).unwrap();
                assert_eq!(a.expiry(ia), b.expiry(ib));
            }
            assert_eq!(a.insert(1, 0), Err(Full(0)), "and no more");
            assert_eq!(b.insert(1, 0), Err(Full(0)));
            assert_eq!(observe(&a), observe(&b));
            a.check_invariants();
            assert_eq!(fire_all(&mut a), fire_all(&mut b));
        }
    }
}

/// Fired and cancelled timers give their room back: the bound counts pending timers only.
#[test]
fn fired_and_cancelled_timers_give_their_room_back() {
    for mode in MODES {
        let mut wheel: Wheel<u64> = build(mode, Some(100));
        let ids: Vec<TimerId> = (1..=100).map(|t| wheel.insert(t, t).unwrap()).collect();
        assert_eq!(wheel.reserve(1), Err(Full(1)));
        assert_eq!(wheel.drain(40).count(), 40);
        assert_eq!(wheel.reserve(40), Ok(()));
        assert_eq!(wheel.reserve(41), Err(Full(41)));
        for &id in &ids[90..] {
            assert!(wheel.cancel(id).is_some());
        }
        assert_eq!(wheel.reserve(50), Ok(()));
        assert_eq!(wheel.reserve(51), Err(Full(51)));
        for i in 0..50 {
            wheel.insert(200 + i, 200 + i).unwrap();
        }
        assert_eq!(wheel.insert(1, 1), Err(Full(1)));
        let mut expected: Vec<u64> = (41..=90).chain(200..250).collect();
        expected.sort();
        assert_eq!(fire_all(&mut wheel), expected);
    }
}

// ---------------------------------------------------------------------------------------------
// Requests no wheel can grant.

/// On an unbounded wheel, anything past `2^32 - 2048` timers in all is refused at once, with
/// nothing allocated (a wheel that tried would need 128 GiB and abort), and the wheel still works.
#[test]
fn requests_past_the_index_space_are_refused_without_allocating() {
    let started = Instant::now();
    for mode in MODES {
        for pending in [0usize, 1, 2_048, 3_000] {
            let mut wheel: Wheel<u64> = Wheel::new(mode);
            for i in 0..pending as u64 + 10 {
                wheel.insert(i, i).unwrap();
            }
            assert_eq!(wheel.drain(9).count(), 10);
            let len = wheel.len();
            assert_eq!(len, pending);
            let before = observe(&wheel);
            for additional in [
                MAX_TIMERS - len + 1,
                MAX_TIMERS - len + 2_048,
                MAX_TIMERS + 1,
                u32::MAX as usize - len + 1,
                u32::MAX as usize,
                1 << 32,
                1 << 33,
                usize::MAX / 2,
                usize::MAX - len,
                (usize::MAX - len).saturating_add(1),
                usize::MAX,
            ] {
                let (result, n) = counted(|| wheel.reserve(additional));
                assert_eq!(result, Err(Full(additional)), "{mode:?}, {len} pending");
                assert_eq!(
                    n, 0,
                    "{mode:?}: reserve({additional}) allocated before refusing"
                );
                assert_eq!(
                    observe(&wheel),
                    before,
                    "{mode:?}: a refusal changed the wheel"
                );
            }
            // Still a working wheel, and reserve still works on it.
            assert_eq!(wheel.reserve(100), Ok(()));
            let ((), n) = counted(|| {
                for i in 0..100 {
                    wheel.insert(50_000 + i, 50_000 + i).unwrap();
                }
            });
            assert_eq!(n, 0);
            assert_eq!(fire_all(&mut wheel).len(), len + 100);
        }
    }
    // Forty-four refusals and a few thousand timers: a refusal that did work in proportion to
    // the amount asked for would take minutes.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refusals took {:?}",
        started.elapsed()
    );
}

/// Bounded wheels larger than memory: `capacity(2^32 - 2048)` (whose one buffer of 128 GiB the
/// allocator may refuse, so that it keeps chunks instead) and `capacity(2^28)`. Past the bound is
/// refused without allocating, and room within it is real: its inserts allocate nothing.
#[test]
fn bounded_wheels_larger_than_memory_refuse_past_the_bound_and_grant_within_it() {
    for mode in MODES {
        for capacity in [MAX_TIMERS, 1 << 28] {
            let mut wheel: Wheel<u64> = build(mode, Some(capacity));
            assert_eq!(wheel.capacity(), Some(capacity));
            for i in 0..5 {
                wheel.insert(i, i).unwrap();
            }
            let len = wheel.len();
            let before = observe(&wheel);
            for additional in [
                capacity - len + 1,
                capacity + 1,
                u32::MAX as usize,
                usize::MAX,
            ] {
                let (result, n) = counted(|| wheel.reserve(additional));
                assert_eq!(result, Err(Full(additional)), "{mode:?} {capacity}");
                assert_eq!(n, 0, "{mode:?} {capacity}: reserve({additional}) allocated");
                assert_eq!(observe(&wheel), before);
            }
            assert_eq!(wheel.reserve(5_000), Ok(()));
            let ((), n) = counted(|| {
                for i in 0..5_000 {
                    wheel.insert(100 + i, 100 + i).unwrap();
                }
            });
            assert_eq!(
                n, 0,
                "{mode:?} {capacity}: inserts into reserved room allocated"
            );
            assert_eq!(fire_all(&mut wheel).len(), 5_005);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Room that is granted is real, once.

/// Inserts of every kind (due at once, near, far, beyond the top level, at `u64::MAX`, into a
/// Coarse bucket that a partial drain left frozen), after cancels and fires, allocate nothing
/// once reserve has made room for them.
#[test]
fn inserts_into_reserved_room_allocate_nothing() {
    for mode in MODES {
        for capacity in [None, Some(20_000)] {
            let mut rng = Rng(7 + mode as u64);
            let mut wheel: Wheel<u64> = build(mode, capacity);
            let mut insert_allocs = 0;
            assert_eq!(wheel.reserve(3_000), Ok(()));
            let mut ids = Vec::new();
            for v in 0..3_000 {
                let deadline = any_deadline(&mut rng, wheel.now());
                let (id, n) = counted(|| wheel.insert(deadline, v));
                insert_allocs += n;
                ids.push(id.unwrap());
            }
            // Cancel two thirds, fire some, and leave a bucket half handed out.
            for (k, &id) in ids.iter().enumerate() {
                if k % 3 != 0 {
                    assert!(wheel.cancel(id).is_some());
                }
            }
            ids.retain(|&id| wheel.expiry(id).is_some());
            let now = wheel.now() + 2_000;
            for v in 0..50 {
                wheel.insert(now, 100_000 + v).unwrap();
            }
            let handed = wheel.drain(now).take(10).count();
            assert_eq!(handed, 10);

            let len = wheel.len();
            assert_eq!(wheel.reserve(6_000), Ok(()));
            for v in 0..6_000 {
                // A quarter due at once: into `DUE`, or in Coarse mode into a frozen bucket.
                let deadline = if v % 4 == 0 {
                    wheel.now().saturating_sub(rng.below(3))
                } else {
                    any_deadline(&mut rng, wheel.now())
                };
                let (id, n) = counted(|| wheel.insert(deadline, 200_000 + v));
                insert_allocs += n;
                id.unwrap();
            }
            assert_eq!(
                insert_allocs, 0,
                "{mode:?} {capacity:?}: inserts into reserved room allocated"
            );
            assert_eq!(wheel.len(), len + 6_000);
            wheel.check_invariants();
            assert_eq!(fire_all(&mut wheel).len(), len + 6_000);
        }
    }
}

/// Room is made once: asking again for room that exists (the same amount, less, or room that
/// cancelled and fired timers left) creates nothing more, and all of it stays usable.
#[test]
fn asking_again_for_room_that_exists_creates_nothing() {
    for mode in MODES {
        let mut wheel: Wheel<u64> = Wheel::new(mode);
        let (result, n) = counted(|| wheel.reserve(5_000));
        assert_eq!(result, Ok(()));
        assert!(
            n > 0,
            "room for 5000 timers on an empty unbounded wheel is new memory"
        );
        let ((), n) = counted(|| {
            for k in 0..200 {
                assert_eq!(wheel.reserve(5_000 - k % 7), Ok(()));
                assert_eq!(wheel.reserve(0), Ok(()));
            }
        });
        assert_eq!(n, 0, "{mode:?}: repeated reserve created room again");

        let ids: Vec<TimerId> = (0..2_500).map(|i| wheel.insert(i, i).unwrap()).collect();
        let (result, n) = counted(|| wheel.reserve(2_500));
        assert_eq!(
            (result, n),
            (Ok(()), 0),
            "2500 pending + 2500 is the room made"
        );
        for &id in &ids[..1_000] {
            wheel.cancel(id).unwrap();
        }
        // Some fire too (how many depends on the mode's rounding); their room is free again.
        assert!(wheel.drain(1_499).count() > 0);
        let len = wheel.len();
        assert!(len < 1_500);
        let (result, n) = counted(|| wheel.reserve(5_000 - len));
        assert_eq!(
            (result, n),
            (Ok(()), 0),
            "{len} pending + {} fits the room made",
            5_000 - len
        );
        let ((), n) = counted(|| {
            for i in 0..(5_000 - len) as u64 {
                wheel.insert(10_000 + i, 10_000 + i).unwrap();
            }
        });
        assert_eq!(n, 0);
        assert_eq!(wheel.len(), 5_000);
        assert_eq!(fire_all(&mut wheel).len(), 5_000);
    }
}

// ---------------------------------------------------------------------------------------------
// Ids.

/// Ids handed out after a reserve are distinct, name their own timers, and equal no earlier id;
/// the ids of cancelled and fired timers stay stale after reserve created new entries and the
/// freed ones were used again.
#[test]
fn ids_after_reserve_are_fresh_and_stale_ids_stay_stale() {
    for mode in MODES {
        for capacity in [None, Some(9_000)] {
            let mut wheel: Wheel<u64> = build(mode, capacity);
            let old: Vec<TimerId> = (0..3_000)
                .map(|i| wheel.insert(100 + i, i).unwrap())
                .collect();
            let mut stale = HashSet::new();
            let mut live = HashMap::new();
            for (i, &id) in old.iter().enumerate() {
                if i % 3 == 0 {
                    assert_eq!(wheel.cancel(id), Some(i as u64));
                    stale.insert(id);
                } else {
                    live.insert(id, i as u64);
                }
            }
            for (id, v) in wheel.drain(1_100) {
                assert_eq!(live.remove(&id), Some(v));
                stale.insert(id);
            }
            let pending = wheel.len();
            assert_eq!(pending, live.len());

            assert_eq!(wheel.reserve(6_000), Ok(()));
            let mut fresh = HashMap::new();
            for i in 0..6_000 {
                let value = 10_000 + i;
                let id = wheel.insert(5_000 + i % 777, value).unwrap();
                assert!(
                    !stale.contains(&id),
                    "{mode:?}: a new id equals a stale one"
                );
                assert!(
                    !live.contains_key(&id),
                    "{mode:?}: a new id equals a pending one"
                );
                assert!(
                    fresh.insert(id, value).is_none(),
                    "{mode:?}: id handed out twice"
                );
            }
            assert_eq!(wheel.len(), pending + 6_000);
            for &id in &stale {
                for id in [id, TimerId::from_bits(id.to_bits())] {
                    assert_eq!(wheel.expiry(id), None, "{mode:?}: stale {id:?}");
                    assert_eq!(wheel.get(id), None);
                    assert_eq!(wheel.get_mut(id), None);
                    assert!(!wheel.reset(id, 1));
                    assert_eq!(wheel.cancel(id), None);
                }
            }
            assert_eq!(wheel.len(), pending + 6_000, "stale ids touched nothing");
            for (&id, &value) in fresh.iter().chain(&live) {
                assert_eq!(wheel.get(id), Some(&value));
            }
            for (id, value) in wheel.drain(u64::MAX) {
                let expected = fresh.remove(&id).or_else(|| live.remove(&id));
                assert_eq!(
                    expected,
                    Some(value),
                    "{mode:?}: fired once, with its value"
                );
            }
            assert!(fresh.is_empty() && live.is_empty(), "every timer fired");
            wheel.check_invariants();
        }
    }
}

/// After `clear`, every old id is stale, reserve makes room again, and the ids that follow are
/// new.
#[test]
fn reserve_after_clear_gives_fresh_room_and_fresh_ids() {
    for mode in MODES {
        for capacity in [None, Some(4_000)] {
            let mut wheel: Wheel<u64> = build(mode, capacity);
            assert_eq!(wheel.reserve(4_000), Ok(()));
            let old: HashSet<TimerId> = (0..4_000).map(|i| wheel.insert(i, i).unwrap()).collect();
            wheel.clear();
            assert!(wheel.is_empty());
            assert_eq!(wheel.reserve(4_000), Ok(()));
            if capacity.is_some() {
                assert_eq!(wheel.reserve(4_001), Err(Full(4_001)));
            }
            let (new, n) = counted(|| {
                let mut new = Vec::with_capacity(4_000);
                for i in 0..4_000 {
                    new.push(wheel.insert(i, 10_000 + i).unwrap());
                }
                new
            });
            assert_eq!(n, 1, "{mode:?}: only the Vec of ids allocates");
            for id in &new {
                assert!(
                    !old.contains(id),
                    "{mode:?}: an id from before clear came back"
                );
            }
            for &id in &old {
                assert_eq!(wheel.cancel(id), None);
            }
            assert_eq!(fire_all(&mut wheel), (10_000..14_000).collect::<Vec<_>>());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payloads.

/// Every entry layout (no payload, a byte, 32-byte entries stored aligned, 40-byte and 64-byte
/// entries, owned heap values) in both stores: reserved room takes exactly its inserts without
/// allocating, and every value comes back once.
#[test]
fn every_payload_layout_gets_its_room() {
    fn check<T: Clone + PartialEq + std::fmt::Debug>(make: impl Fn(u64) -> T) {
        for mode in MODES {
            for capacity in [None, Some(2_500)] {
                let mut wheel: Wheel<T> = build(mode, capacity);
                let pre: Vec<TimerId> =
                    (0..10).map(|i| wheel.insert(i, make(i)).unwrap()).collect();
                for &id in &pre[..5] {
                    assert_eq!(wheel.cancel(id), Some(make(id_value(&pre, id))));
                }
                let n = capacity.map_or(4_500, |c| c - wheel.len());
                assert_eq!(wheel.reserve(n), Ok(()));
                let values: Vec<T> = (0..n as u64).map(|i| make(1_000 + i)).collect();
                let mut ids = Vec::with_capacity(n);
                let ((), allocs) = counted(|| {
                    for (i, v) in values.into_iter().enumerate() {
                        ids.push(wheel.insert(3 * i as u64 % 5_000, v).unwrap());
                    }
                });
                assert_eq!(
                    allocs,
                    0,
                    "{mode:?} {capacity:?} {}",
                    std::any::type_name::<T>()
                );
                if capacity.is_some() {
                    assert_eq!(wheel.insert(1, make(7)).unwrap_err().into_inner(), make(7));
                }
                for (i, &id) in ids.iter().enumerate() {
                    assert_eq!(wheel.get(id), Some(&make(1_000 + i as u64)));
                }
                let mut left: HashMap<TimerId, T> = ids
                    .iter()
                    .enumerate()
                    .map(|(i, &id)| (id, make(1_000 + i as u64)))
                    .chain(pre[5..].iter().map(|&id| (id, make(id_value(&pre, id)))))
                    .collect();
                for (id, v) in wheel.drain(u64::MAX) {
                    assert_eq!(left.remove(&id), Some(v));
                }
                assert!(left.is_empty());
                wheel.check_invariants();
            }
        }
    }
    fn id_value(pre: &[TimerId], id: TimerId) -> u64 {
        pre.iter().position(|&p| p == id).unwrap() as u64
    }
    check(|_| ());
    check(|i| i as u8);
    check(|i| i);
    check(|i| (i as u32, i));
    check(|i| [i; 6]);
    check(|i| i.to_string());
    check(Box::new);
}

/// Reserve neither drops nor duplicates a payload: every pending `Rc` is held exactly once, and
/// dropping the wheel releases them all.
#[test]
fn reserve_neither_drops_nor_duplicates_payloads() {
    for mode in MODES {
        for capacity in [None, Some(3_000)] {
            let token = Rc::new(());
            let mut wheel: Wheel<Rc<()>> = build(mode, capacity);
            let ids: Vec<TimerId> = (0..1_000)
                .map(|i| wheel.insert(i, Rc::clone(&token)).unwrap())
                .collect();
            assert_eq!(wheel.reserve(1_500), Ok(()));
            for &id in ids.iter().step_by(3) {
                drop(wheel.cancel(id).unwrap());
            }
            assert!(wheel.reserve(usize::MAX).is_err());
            assert!(wheel.reserve(MAX_TIMERS).is_err());
            for i in 0..1_500 {
                wheel.insert(500 + i, Rc::clone(&token)).unwrap();
            }
            assert!(wheel.drain(400).count() > 0);
            assert_eq!(wheel.reserve(100), Ok(()));
            assert_eq!(
                Rc::strong_count(&token),
                1 + wheel.len(),
                "{mode:?} {capacity:?}"
            );
            wheel.check_invariants();
            drop(wheel);
            assert_eq!(
                Rc::strong_count(&token),
                1,
                "{mode:?}: every payload dropped once"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Long random sequences: reserve sprinkled in must change nothing.

/// A pending timer in the model.
struct Pending {
    /// Its id in the wheel that gets the reserve calls.
    a: TimerId,
    /// Its id in the twin, if there is one.
    b: Option<TimerId>,
    expiry: u64,
}

struct Harness {
    rng: Rng,
    /// The wheel that gets the reserve calls.
    a: Wheel<u64>,
    /// The same operations but no reserve; absent when drains stop early (which timers of a
    /// bucket a partial drain hands out depends on where they sit, which reserve may change).
    b: Option<Wheel<u64>>,
    /// Pending timers by value (values are unique).
    pending: HashMap<u64, Pending>,
    /// `(expiry, value)` of every pending timer.
    by_expiry: BTreeSet<(u64, u64)>,
    /// Every value ever inserted, with its ids in `a` and `b`, pending or not.
    handles: Vec<(TimerId, Option<TimerId>)>,
    /// Values that may still be pending (pruned lazily).
    live: Vec<u64>,
    /// Ids of `a` whose timers were cancelled or fired.
    stale: Vec<TimerId>,
    capacity: Option<usize>,
    /// The timers `a`'s reserve calls made room for: an insert while fewer are pending must not
    /// allocate (room is never given back).
    room: usize,
    partial: bool,
    granted: u64,
    refused: u64,
    /// Inserts made into reserved room (whose allocations were checked).
    into_room: u64,
}

impl Harness {
    fn new(seed: u64, mode: Mode, capacity: Option<usize>, partial: bool) -> Self {
        let mut rng = Rng(seed);
        let max_levels = if mode == Mode::Exact { 11 } else { 20 };
        let levels = match rng.below(4) {
            0 => 1 + rng.below(3) as usize,
            1 => 1 + rng.below(max_levels) as usize,
            _ => Wheel::<u64>::new(mode).levels(),
        };
        let start = match rng.below(5) {
            0 => rng.next(),
            1 => u64::MAX - rng.below(1 << 20),
            _ => rng.below(1 << 20),
        };
        let make = || {
            let builder = Wheel::builder(mode).levels(levels).start(start);
            match capacity {
                Some(c) => builder.capacity(c),
                None => builder,
            }
            .build::<u64>()
            .unwrap()
        };
        Harness {
            rng,
            a: make(),
            b: (!partial).then(make),
            pending: HashMap::new(),
            by_expiry: BTreeSet::new(),
            handles: Vec::new(),
            live: Vec::new(),
            stale: Vec::new(),
            capacity,
            room: 0,
            partial,
            granted: 0,
            refused: 0,
            into_room: 0,
        }
    }

    fn mode(&self) -> Mode {
        self.a.mode()
    }

    /// The most timers `a` may hold.
    fn limit(&self) -> usize {
        self.capacity.unwrap_or(usize::MAX).min(MAX_TIMERS)
    }

    /// Checks a new expiry the wheel chose for `deadline` at clock `now`.
    fn check_expiry(&self, value: u64, now: u64, deadline: u64) -> u64 {
        let p = &self.pending[&value];
        let expiry = self.a.expiry(p.a).expect("pending");
        if let (Some(b), Some(ib)) = (&self.b, p.b) {
            assert_eq!(b.expiry(ib), Some(expiry), "same expiry as without reserve");
        }
        if deadline <= now {
            assert_eq!(expiry, now, "a past deadline is due at once");
        } else if self.mode() == Mode::Exact {
            assert_eq!(expiry, deadline, "Exact fires on its deadline");
        } else {
            assert!(expiry >= deadline, "never early");
            // Within the top level, the slack is at most 8/63 of the delay.
            let delay = u128::from(deadline - now);
            let top = 63u128 << (3 * (self.a.levels() as u32 - 1));
            if delay < top {
                assert!(
                    u128::from(expiry - deadline) * 63 <= delay * 8,
                    "Coarse slack: deadline {deadline} at {now} expires at {expiry}"
                );
            }
        }
        expiry
    }

    fn insert_at(&mut self, deadline: u64) {
        let value = self.handles.len() as u64;
        let len = self.a.len();
        let now = self.a.now();
        let (ra, allocs) = counted(|| self.a.insert(deadline, value));
        if len < self.room {
            assert_eq!(
                allocs, 0,
                "insert into reserved room ({len} of {}) allocated",
                self.room
            );
            self.into_room += 1;
        }
        let rb = self.b.as_mut().map(|b| b.insert(deadline, value));
        let fits = len < self.capacity.unwrap_or(usize::MAX);
        match ra {
            Ok(ia) => {
                assert!(fits, "insert past the capacity accepted");
                let ib = rb.map(|r| r.expect("the twin took it too"));
                self.handles.push((ia, ib));
                self.pending.insert(
                    value,
                    Pending {
                        a: ia,
                        b: ib,
                        expiry: 0,
                    },
                );
                let expiry = self.check_expiry(value, now, deadline);
                self.pending.get_mut(&value).unwrap().expiry = expiry;
                self.by_expiry.insert((expiry, value));
                self.live.push(value);
            }
            Err(Full(v)) => {
                assert!(!fits, "insert with room refused ({len} pending)");
                assert_eq!(v, value, "the value is handed back");
                if let Some(rb) = rb {
                    assert_eq!(rb, Err(Full(value)), "the twin refused it too");
                }
            }
        }
    }

    fn insert(&mut self) {
        let deadline = any_deadline(&mut self.rng, self.a.now());
        self.insert_at(deadline);
    }

    /// A burst of inserts, so that pending timers cross chunk boundaries.
    fn burst(&mut self) {
        let now = self.a.now();
        let bits = 4 + self.rng.below(20);
        let spread = 1 + self.rng.below(1 << bits);
        for _ in 0..self.rng.below(3_000) {
            let deadline = now.saturating_add(self.rng.below(spread));
            self.insert_at(deadline);
        }
    }

    /// A value to act on: usually a pending one, sometimes any ever inserted.
    fn pick(&mut self) -> Option<u64> {
        if self.rng.chance(15) && !self.handles.is_empty() {
            return Some(self.rng.below(self.handles.len() as u64));
        }
        while !self.live.is_empty() {
            let i = self.rng.below(self.live.len() as u64) as usize;
            if self.pending.contains_key(&self.live[i]) {
                return Some(self.live[i]);
            }
            self.live.swap_remove(i);
        }
        None
    }

    fn cancel(&mut self) {
        let Some(value) = self.pick() else { return };
        let (ia, ib) = self.handles[value as usize];
        let expected = self.pending.remove(&value).map(|p| {
            self.by_expiry.remove(&(p.expiry, value));
            value
        });
        assert_eq!(self.a.cancel(ia), expected, "cancel {value}");
        if let (Some(b), Some(ib)) = (self.b.as_mut(), ib) {
            assert_eq!(b.cancel(ib), expected, "the twin's cancel");
        }
        self.stale.push(ia);
    }

    fn reset(&mut self) {
        let Some(value) = self.pick() else { return };
        let (ia, ib) = self.handles[value as usize];
        let now = self.a.now();
        let deadline = any_deadline(&mut self.rng, now);
        let live = self.pending.contains_key(&value);
        assert_eq!(self.a.reset(ia, deadline), live, "reset {value}");
        if let (Some(b), Some(ib)) = (self.b.as_mut(), ib) {
            assert_eq!(b.reset(ib, deadline), live, "the twin's reset");
        }
        if live {
            let old = self.pending[&value].expiry;
            self.by_expiry.remove(&(old, value));
            let expiry = self.check_expiry(value, now, deadline);
            self.pending.get_mut(&value).unwrap().expiry = expiry;
            self.by_expiry.insert((expiry, value));
        }
    }

    fn target(&mut self) -> u64 {
        let now = self.a.now();
        match self.rng.below(10) {
            0 => now.saturating_sub(self.rng.below(10)),
            1..=3 => now.saturating_add(1),
            4 | 5 => now.saturating_add(self.rng.below(600)),
            6 => now.saturating_add(1 << (20 + self.rng.below(30))),
            7 if self.rng.chance(5) => u64::MAX,
            _ => self.a.next_expiry().unwrap_or(now.saturating_add(1)),
        }
    }

    fn drain(&mut self) {
        let target = self.target();
        let before = self.a.now();
        let stop = (self.partial && self.rng.chance(60)).then(|| self.rng.below(6));
        let mut fired = Vec::new();
        let mut last = 0;
        loop {
            if stop.is_some_and(|k| fired.len() as u64 >= k) {
                break;
            }
            let Some((id, value)) = self.a.poll(target) else {
                break;
            };
            let p = self
                .pending
                .remove(&value)
                .unwrap_or_else(|| panic!("fired {value}, which is not pending: twice?"));
            assert_eq!(id, p.a, "fired under its own id");
            assert!(
                p.expiry <= target && p.expiry <= self.a.now(),
                "fired early: expiry {} at {}",
                p.expiry,
                self.a.now()
            );
            if self.mode() == Mode::Exact {
                assert!(p.expiry >= last, "Exact order within a drain");
                last = p.expiry;
            }
            self.by_expiry.remove(&(p.expiry, value));
            self.stale.push(id);
            fired.push(value);
        }
        // A drain to before the clock hands out nothing, due timers left by a partial drain
        // included ("the clock never goes back"); any other full drain leaves nothing due.
        if stop.is_none() && target >= before {
            assert_eq!(self.a.now(), target, "clock after the drain");
            if let Some(&(expiry, value)) = self.by_expiry.first() {
                assert!(
                    expiry > target,
                    "{value} with expiry {expiry} missed at {target}"
                );
            }
        }
        if target < before {
            assert!(
                fired.is_empty(),
                "a poll behind the clock handed out timers"
            );
            assert_eq!(self.a.now(), before, "the clock went back");
        }
        if let Some(b) = self.b.as_mut() {
            let mut twin: Vec<u64> = Vec::new();
            for (ib, value) in b.drain(target) {
                assert_eq!(Some(ib), self.handles[value as usize].1);
                twin.push(value);
            }
            fired.sort_unstable();
            twin.sort_unstable();
            assert_eq!(fired, twin, "the twin fired the same timers at {target}");
        }
    }

    fn reserve(&mut self) {
        let len = self.a.len();
        let limit = self.limit();
        let additional = match self.rng.below(9) {
            0 => 0,
            1 => self.rng.below(50) as usize,
            2 | 3 => self.rng.below(5_000) as usize,
            // Exactly to the bound, where the bound is small enough to fill.
            4 if limit - len <= 20_000 => limit - len,
            4 => self.rng.below(3_000) as usize,
            5 => limit - len + 1,
            6 => MAX_TIMERS - len + 1 + self.rng.below(1 << 20) as usize,
            7 => usize::MAX - self.rng.below(len as u64 + 1) as usize,
            _ => 1 << (33 + self.rng.below(30)),
        };
        let fits = len.checked_add(additional).is_some_and(|w| w <= limit);
        assert!(
            !fits || additional <= 20_000,
            "the test never asks for gigabytes it gets"
        );
        let before = observe(&self.a);
        let (result, allocs) = counted(|| self.a.reserve(additional));
        if fits {
            assert_eq!(
                result,
                Ok(()),
                "reserve({additional}) with {len} of {limit} refused"
            );
            self.room = self.room.max(len + additional);
            self.granted += 1;
        } else {
            assert_eq!(
                result,
                Err(Full(additional)),
                "{len} + {additional} past {limit}"
            );
            assert_eq!(allocs, 0, "refused reserve({additional}) allocated");
            self.refused += 1;
        }
        assert_eq!(
            observe(&self.a),
            before,
            "reserve changed what the wheel reports"
        );
    }

    fn stale_queries(&mut self) {
        if self.stale.is_empty() {
            return;
        }
        let id = self.stale[self.rng.below(self.stale.len() as u64) as usize];
        // A stale id's timer left the model; it must not name a pending timer.
        let len = self.a.len();
        assert_eq!(self.a.expiry(id), None, "stale {id:?}");
        assert_eq!(self.a.get(id), None);
        assert!(!self.a.reset(id, 0));
        assert_eq!(self.a.cancel(id), None);
        assert_eq!(self.a.len(), len);
    }

    fn compare(&self) {
        assert_eq!(self.a.len(), self.pending.len(), "len");
        if let Some(&(earliest, _)) = self.by_expiry.first() {
            let next = self
                .a
                .next_expiry()
                .expect("pending timers, so a next expiry");
            assert!(
                next <= earliest.max(self.a.now()),
                "next_expiry {next} after {earliest}"
            );
        } else {
            assert_eq!(self.a.next_expiry(), None);
        }
        if let Some(b) = &self.b {
            assert_eq!(observe(&self.a), observe(b), "the twin that never reserved");
        }
    }

    fn step(&mut self, op: u64) {
        match self.rng.below(100) {
            0..=29 => self.insert(),
            30 => self.burst(),
            31..=42 => self.cancel(),
            43..=57 => self.reset(),
            58..=74 => self.drain(),
            75..=91 => self.reserve(),
            _ => self.stale_queries(),
        }
        self.compare();
        if op % 150 == 0 {
            self.a.check_invariants();
            if let Some(b) = &self.b {
                b.check_invariants();
            }
        }
    }

    fn finish(mut self) -> (u64, u64, u64) {
        let left = self.pending.len();
        let mut fired = 0;
        while let Some((id, value)) = self.a.poll(u64::MAX) {
            let p = self.pending.remove(&value).expect("fired once");
            assert_eq!(id, p.a);
            fired += 1;
        }
        assert_eq!(fired, left, "every pending timer fires by u64::MAX");
        self.a.check_invariants();
        if let Some(b) = self.b.as_mut() {
            assert_eq!(b.drain(u64::MAX).count(), left);
            assert_eq!(self.a.stats(), b.stats());
        }
        (self.granted, self.refused, self.into_room)
    }
}

fn run(partial: bool) {
    for mode in MODES {
        for capacity in [None, Some(700), Some(5_000), Some(MAX_TIMERS)] {
            let mut totals = (0, 0, 0);
            for seed in 0..3u64 {
                let seed = 0x7e5e_0000 + seed * 31 + mode as u64 + partial as u64 * 7;
                let mut h = Harness::new(seed, mode, capacity, partial);
                for op in 0..1_200 {
                    h.step(op);
                }
                let (granted, refused, into_room) = h.finish();
                totals = (totals.0 + granted, totals.1 + refused, totals.2 + into_room);
            }
            assert!(
                totals.0 > 0 && totals.1 > 0 && totals.2 > 0,
                "{mode:?} {capacity:?}: reserves granted, refused and used, {totals:?}"
            );
            eprintln!(
                "{mode:?} {capacity:?} partial {partial}: (granted, refused, inserts into room) {totals:?}"
            );
        }
    }
}

/// Random inserts, cancels, resets, drains and stale ids with reserve calls of every size in
/// between (zero, small, exactly to the bound, one past it, past the index space, `usize::MAX`),
/// on unbounded and bounded wheels in both modes: every call answers as the twin's does, every
/// timer fires once, never early, not late, and inserts into reserved room allocate nothing.
#[test]
fn reserve_in_random_work_changes_nothing() {
    run(false);
}

/// The same with drains that stop early, so that reserve and inserts come while due timers (in
/// Coarse mode, a frozen bucket) are still waiting to be handed out: none is lost.
#[test]
fn reserve_between_partial_drains_loses_no_timer() {
    run(true);
}

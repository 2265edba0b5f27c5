//! Bad input gets a clear answer and loses nothing: stale and foreign ids, a full wheel, a clock
//! that goes back, deadlines in the past and at the end of time.

use tickwheel::{Mode, TimerId, Wheel};

const MODES: [Mode; 2] = [Mode::Exact, Mode::Coarse];

#[test]
fn stale_ids_do_nothing_and_never_touch_the_new_timer() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let fired = wheel.insert(5, 'f').unwrap();
        let cancelled = wheel.insert(500, 'c').unwrap();
        assert_eq!(wheel.cancel(cancelled), Some('c'));
        assert_eq!(wheel.poll(5), Some((fired, 'f')));
        // Both slab entries are reused by the next inserts.
        let a = wheel.insert(1_000, 'a').unwrap();
        let b = wheel.insert(1_000, 'b').unwrap();
        for stale in [fired, cancelled] {
            assert_eq!(wheel.cancel(stale), None, "{mode:?}");
            assert!(!wheel.reset(stale, 10));
            assert_eq!(wheel.expiry(stale), None);
            assert_eq!(wheel.get(stale), None);
        }
        assert_eq!(wheel.len(), 2);
        let mut out: Vec<_> = wheel.drain(u64::MAX).collect();
        out.sort_by_key(|(_, v)| *v);
        assert_eq!(out, vec![(a, 'a'), (b, 'b')]);
    }
}

#[test]
fn ids_from_another_wheel_are_rejected() {
    for mode in MODES {
        let mut mine = Wheel::new(mode);
        let mut other = Wheel::new(mode);
        let id = mine.insert(100, 1u64).unwrap();
        let foreign = other.insert(100, 2u64).unwrap();
        // Same slab index in both wheels; the per-wheel generation seed tells them apart.
        assert_ne!(id, foreign);
        assert_eq!(mine.cancel(foreign), None);
        assert!(!mine.reset(foreign, 5));
        assert_eq!(mine.expiry(foreign), None);
        assert_eq!(mine.len(), 1);
        assert_eq!(mine.cancel(id), Some(1));
    }
}

#[test]
fn arbitrary_bits_are_just_a_stale_id() {
    let mut wheel = Wheel::new(Mode::Coarse);
    let id = wheel.insert(10, ()).unwrap();
    assert_eq!(TimerId::from_bits(id.to_bits()), id);
    for bits in [0, u64::MAX, id.to_bits() ^ (1 << 40), id.to_bits() + 1] {
        assert_eq!(wheel.cancel(TimerId::from_bits(bits)), None);
    }
    assert_eq!(wheel.len(), 1);
}

#[test]
fn a_full_wheel_hands_the_value_back_and_recovers() {
    for mode in MODES {
        let mut wheel = Wheel::builder(mode).capacity(3).build().unwrap();
        let ids: Vec<_> = (0..3)
            .map(|i| wheel.insert(10 + i, vec![i]).unwrap())
            .collect();
        let err = wheel.insert(20, vec![99]).unwrap_err();
        assert_eq!(err.to_string(), "the timer wheel is at capacity");
        assert_eq!(err.into_inner(), vec![99]);
        assert_eq!(wheel.len(), 3);
        assert_eq!(wheel.cancel(ids[1]), Some(vec![1]));
        assert!(wheel.insert(20, vec![3]).is_ok());
        assert_eq!(wheel.drain(u64::MAX).count(), 3);
    }
}

#[test]
fn room_past_the_bound_or_the_index_space_is_refused_and_changes_nothing() {
    for mode in MODES {
        let mut wheel = Wheel::builder(mode).capacity(3).build().unwrap();
        let first = wheel.insert(10, 1).unwrap();
        assert_eq!(wheel.reserve(3).unwrap_err().into_inner(), 3);
        assert_eq!(
            wheel.reserve(usize::MAX).unwrap_err().into_inner(),
            usize::MAX
        );
        assert!(wheel.reserve(2).is_ok());
        assert_eq!(wheel.len(), 1);
        assert!(wheel.insert(11, 2).is_ok() && wheel.insert(12, 3).is_ok());
        assert!(wheel.insert(13, 4).is_err(), "the bound still holds");
        assert_eq!(wheel.cancel(first), Some(1));

        // Unbounded: more than any wheel holds is refused before anything is allocated (an
        // attempt would abort the process on allocation failure).
        let mut wheel = Wheel::new(mode);
        let id = wheel.insert(5, 5).unwrap();
        assert!(wheel.reserve(1 << 33).is_err());
        assert!(wheel.reserve(usize::MAX).is_err());
        assert!(wheel.reserve(5_000).is_ok());
        let ids: Vec<_> = (0..5_000)
            .map(|i| wheel.insert(6 + i, i).unwrap())
            .collect();
        assert_eq!(wheel.get(id), Some(&5));
        assert_eq!(wheel.cancel(ids[4_999]), Some(4_999));
        assert_eq!(wheel.drain(u64::MAX).count(), 5_000);
    }
}

#[test]
fn the_clock_never_goes_back() {
    for mode in MODES {
        let mut wheel = Wheel::builder(mode).start(1_000).build().unwrap();
        let id = wheel.insert(1_010, ()).unwrap();
        assert_eq!(wheel.poll(500), None);
        assert_eq!(wheel.now(), 1_000);
        assert_eq!(wheel.poll(1_005), None);
        assert_eq!(wheel.poll(2), None);
        assert_eq!(wheel.now(), 1_005);
        assert_eq!(wheel.expiry(id), Some(1_010));
        assert_eq!(wheel.poll(1_010), Some((id, ())));
    }
}

#[test]
fn past_deadlines_are_due_now_and_not_before_a_poll_that_reaches_now() {
    for mode in MODES {
        let mut wheel = Wheel::builder(mode).start(100).build().unwrap();
        let id = wheel.insert(3, 'p').unwrap();
        assert_eq!(wheel.expiry(id), Some(100));
        assert_eq!(wheel.next_expiry(), Some(100));
        assert_eq!(
            wheel.poll(99),
            None,
            "a poll below the clock changes nothing"
        );
        assert_eq!(wheel.poll(100), Some((id, 'p')));
    }
}

#[test]
fn the_end_of_time_works_in_both_modes() {
    for mode in MODES {
        let mut wheel = Wheel::builder(mode).start(u64::MAX - 10).build().unwrap();
        let max = wheel.insert(u64::MAX, "max").unwrap();
        let near = wheel.insert(u64::MAX - 1, "near").unwrap();
        assert_eq!(wheel.expiry(max), Some(u64::MAX));
        assert!(wheel.expiry(near).unwrap() >= u64::MAX - 1);
        assert_eq!(wheel.poll(u64::MAX - 2), None);
        let mut out: Vec<_> = wheel.drain(u64::MAX).map(|(_, v)| v).collect();
        out.sort();
        assert_eq!(out, ["max", "near"]);
        assert_eq!(wheel.now(), u64::MAX);
        // At the end of time everything is due at once.
        let late = wheel.insert(u64::MAX, "late").unwrap();
        assert_eq!(wheel.poll(u64::MAX), Some((late, "late")));
    }
}

#[test]
fn far_timers_wait_on_the_overflow_list_and_fire_on_time() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let far = wheel.insert(1 << 50, 'f').unwrap();
        let max = wheel.insert(u64::MAX, 'm').unwrap();
        let expiry = wheel.expiry(far).unwrap();
        assert!(expiry >= 1 << 50);
        assert!(wheel.next_expiry().unwrap() <= expiry);
        assert_eq!(wheel.poll(expiry - 1), None);
        assert_eq!(wheel.poll(expiry), Some((far, 'f')));
        assert_eq!(wheel.poll(u64::MAX - 1), None);
        assert_eq!(wheel.poll(u64::MAX), Some((max, 'm')));
    }
}

#[test]
fn an_overflow_timer_reset_earlier_on_the_overflow_list_is_not_missed() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let a = wheel.insert(1 << 62, 'a').unwrap();
        let b = wheel.insert(1 << 61, 'b').unwrap();
        // Still past the top level: `a` stays on the overflow list, now the earliest there.
        assert!(wheel.reset(a, 1 << 60));
        let expiry = wheel.expiry(a).unwrap();
        assert!(expiry < wheel.expiry(b).unwrap());
        let next = wheel.next_expiry().unwrap();
        assert!(
            next <= expiry,
            "{mode:?}: next_expiry {next} after {expiry}"
        );
        assert_eq!(wheel.poll(expiry - 1), None);
        assert_eq!(wheel.poll(expiry), Some((a, 'a')));
    }
}

#[test]
fn a_long_jump_moves_each_timer_at_most_levels_minus_one_times() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let levels = wheel.levels() as u64;
        let n = 10_000u64;
        for i in 0..n {
            wheel.insert(i * 7_919 % (1 << 40) + (i << 20), i).unwrap();
        }
        assert_eq!(wheel.drain(1 << 42).count() as u64, n);
        let stats = wheel.stats();
        assert_eq!(stats.fired, n);
        // Exact cascades a timer at most levels - 1 times plus one overflow placement; Coarse
        // never cascades, only places overflow timers once.
        let bound = if mode == Mode::Exact { n * levels } else { n };
        assert!(
            stats.cascades <= bound,
            "{mode:?}: {} moves for {n} timers",
            stats.cascades
        );
    }
}

#[test]
fn a_reset_within_the_bucket_only_rewrites_the_expiry() {
    let mut wheel = Wheel::new(Mode::Coarse);
    let id = wheel.insert(5_000, ()).unwrap();
    // Delay 5 000 lies on level 3 (granularity 512): these all round to 5 120.
    for deadline in [4_700, 4_800, 5_100, 5_120] {
        assert!(wheel.reset(id, deadline));
        assert_eq!(wheel.expiry(id), Some(5_120));
    }
    assert_eq!(wheel.stats().resets_in_place, 4);
    assert!(wheel.reset(id, 9_000));
    assert_eq!(wheel.stats().resets_in_place, 4);
}

#[test]
fn clear_drops_everything_and_stales_every_id() {
    let mut wheel = Wheel::new(Mode::Exact);
    let ids: Vec<_> = (0..100)
        .map(|i| wheel.insert(i * 1_000, i).unwrap())
        .collect();
    wheel.clear();
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiry(), None);
    assert!(ids.iter().all(|&id| wheel.cancel(id).is_none()));
    let id = wheel.insert(5, 5).unwrap();
    assert_eq!(wheel.drain(10).collect::<Vec<_>>(), vec![(id, 5)]);
}

#[test]
fn an_exact_reset_to_a_later_deadline_is_deferred_and_still_exact() {
    let mut wheel = Wheel::new(Mode::Exact);
    let id = wheel.insert(100, 'k').unwrap();
    // Keepalive refreshes: each pushes the deadline later and leaves the timer in its slot.
    for deadline in [150, 5_000, 300_000] {
        assert!(wheel.reset(id, deadline));
        assert_eq!(wheel.expiry(id), Some(deadline));
    }
    assert_eq!(wheel.stats().resets_deferred, 3);
    // The old slot comes due first and only moves the timer; it fires on its last deadline.
    assert!(wheel.next_expiry().unwrap() <= 100);
    assert_eq!(wheel.poll(299_999), None);
    assert!(wheel.stats().cascades >= 1);
    assert_eq!(wheel.poll(300_000), Some((id, 'k')));
    // An earlier deadline moves the timer at once.
    let id = wheel.insert(400_000, 'e').unwrap();
    assert!(wheel.reset(id, 300_010));
    assert_eq!(wheel.stats().resets_deferred, 3);
    assert_eq!(wheel.poll(300_010), Some((id, 'e')));
}

#[test]
fn a_timer_added_while_due_ones_are_handed_out_joins_the_same_drain() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let a = wheel.insert(0, 'a').unwrap();
        let later = wheel.insert(5_000, 'r').unwrap();
        let mut fired = Vec::new();
        while let Some((id, v)) = wheel.poll(100) {
            fired.push(v);
            if id == a {
                // The first poll handed out a timer that was already due; the clock must
                // still count as 100 for what is added now.
                wheel.insert(100, 'b').unwrap();
                assert!(wheel.reset(later, 99));
            }
        }
        fired.sort();
        assert_eq!(fired, ['a', 'b', 'r'], "{mode:?}");
    }
}

#[test]
fn the_counters_add_up_across_cancels_stale_cancels_fires_and_clear() {
    for mode in MODES {
        let mut wheel = Wheel::new(mode);
        let ids: Vec<TimerId> = (0..6).map(|i| wheel.insert(10 + i, i).unwrap()).collect();
        assert_eq!(wheel.cancel(ids[0]), Some(0));
        assert_eq!(wheel.cancel(ids[0]), None, "a stale cancel counts nothing");
        assert_eq!(wheel.poll(10), None, "the cancelled timer does not fire");
        assert_eq!(wheel.poll(11), Some((ids[1], 1)));
        wheel.clear();
        let id = wheel.insert(20, 9).unwrap();
        assert_eq!(wheel.cancel(id), Some(9));
        let stats = wheel.stats();
        assert_eq!(
            (stats.inserted, stats.fired, stats.cancelled),
            (7, 1, 2),
            "{mode:?}: the four cleared timers are not cancelled ones"
        );
        assert!(wheel.is_empty());
    }
}

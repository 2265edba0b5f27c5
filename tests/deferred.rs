//! A reset to a later expiry leaves the timer in its bucket (deferred); these cases check the
//! corners of placing it again: its bucket coming due, a new timer claiming the same bucket a lap
//! later while the old lap is still being handed out, and what `next_expiry` says meanwhile.

use tickwheel::{Mode, Wheel};

#[test]
fn a_deferred_timer_fires_at_its_new_expiry_not_its_old_bucket() {
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut wheel = Wheel::new(mode);
        let id = wheel.insert(10, "a").unwrap();
        assert!(wheel.reset(id, 40));
        assert_eq!(wheel.stats().resets_deferred, 1, "{mode:?}");
        assert_eq!(wheel.expiry(id), Some(40));
        // The old bucket may be reported and come due, but fires nothing.
        assert!(wheel.next_expiry().unwrap() <= 40);
        assert_eq!(wheel.poll(39), None, "{mode:?}");
        assert_eq!(
            wheel.stats().replaced,
            1,
            "placed again when its bucket came due"
        );
        assert_eq!(wheel.next_expiry(), Some(40), "{mode:?}");
        assert_eq!(wheel.poll(40), Some((id, "a")));
    }
}

#[test]
fn coarse_next_expiry_names_the_deferred_bucket_once() {
    let mut wheel = Wheel::new(Mode::Coarse);
    let id = wheel.insert(10, ()).unwrap();
    wheel.reset(id, 50);
    // The bucket of tick 10 still holds the timer: one wake-up there that fires nothing.
    assert_eq!(wheel.next_expiry(), Some(10));
    assert_eq!(wheel.poll(10), None);
    assert_eq!(wheel.next_expiry(), Some(50));
}

#[test]
fn a_new_timer_in_the_next_lap_of_a_bucket_being_drained_moves_deferred_timers_on() {
    let mut wheel = Wheel::new(Mode::Coarse);
    let due: Vec<_> = (0..8).map(|i| wheel.insert(10, i).unwrap()).collect();
    let deferred = wheel.insert(10, 100).unwrap();
    assert!(wheel.reset(deferred, 40));
    // A jump: the bucket of tick 10 is frozen with the clock at 20.
    let (first, _) = wheel.poll(20).unwrap();
    assert!(due.contains(&first));
    // Level 0 holds delays below 63; tick 74 is slot 10 again, the next lap of the bucket being
    // handed out, so inserting there moves that bucket's timers on first.
    let lap = wheel.insert(74, 200).unwrap();
    assert_eq!(wheel.expiry(lap), Some(74));
    let mut rest: Vec<u64> = std::iter::from_fn(|| wheel.poll(20).map(|(_, v)| v)).collect();
    rest.sort_unstable();
    assert_eq!(
        rest,
        (0..8)
            .filter(|&v| due[v as usize] != first)
            .collect::<Vec<_>>()
    );
    wheel.check_invariants();
    assert_eq!(wheel.expiry(deferred), Some(40));
    assert_eq!(wheel.poll(39), None);
    assert_eq!(wheel.poll(40), Some((deferred, 100)));
    assert_eq!(wheel.poll(73), None);
    assert_eq!(wheel.poll(74), Some((lap, 200)));
}

#[test]
fn a_deferred_timer_placed_again_into_its_own_bucket_a_lap_later() {
    let mut wheel = Wheel::new(Mode::Coarse);
    let id = wheel.insert(8, 'x').unwrap();
    let other = wheel.insert(8, 'y').unwrap();
    // From tick 0, 72 is 9 granules of 8 on level 1. Once the clock is at 20 it is 52 ticks
    // away, on level 0, slot 72 % 64 = 8: the bucket it waits in, one lap on.
    assert!(wheel.reset(id, 72));
    assert_eq!(wheel.expiry(id), Some(72));
    let mut fired = Vec::new();
    while let Some((got, _)) = wheel.poll(20) {
        fired.push(got);
    }
    assert_eq!(fired, [other]);
    wheel.check_invariants();
    assert_eq!(wheel.next_expiry(), Some(72));
    assert_eq!(wheel.poll(71), None);
    assert_eq!(wheel.poll(72), Some((id, 'x')));
}

#[test]
fn an_earlier_reset_still_moves_the_timer() {
    for mode in [Mode::Exact, Mode::Coarse] {
        let mut wheel = Wheel::new(mode);
        let id = wheel.insert(1_000, ()).unwrap();
        assert!(wheel.reset(id, 5));
        assert_eq!(wheel.stats().resets_deferred, 0);
        assert_eq!(wheel.next_expiry(), Some(5), "{mode:?}");
        assert_eq!(wheel.poll(5), Some((id, ())));
    }
}

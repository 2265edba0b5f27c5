//! A sleep polled away from its base (a work-stealing worker, or any thread while the fallback's
//! thread turns) resets itself to "now" on the cross-core path each time the owner's turn hands
//! out its arming, as a due sleep reset in a loop does (`Interval`'s burst catch-up). One turn
//! fires twice, before and after it takes the notices, so the second reset's arming fires in the
//! same turn as the first. Each reset runs on a thread of its own at the moment the base hands
//! out a payload, the worst moment for it; the cell must stay at two outstanding armings (a
//! third panics in a debug build), and every arming must end delivered. Delivering the payloads
//! only after the turn, as the async driver once did, reached the third arming here.

use std::task::Waker;
use std::time::Duration;

use tickwheel_percpu::protocol::cell::{self, Cells};
use tickwheel_percpu::{ClockSource, Config, Handle, ManualClock, Mode, Remote};

/// `Sleep::reset(now)` away from the base: in place if the timer is pending, else a new arming
/// on the cross-core path. Runs on a thread of its own.
fn reset_away(remote: &Remote<u64>, cells: &Cells, h: Handle) -> Handle {
    std::thread::scope(|s| {
        s.spawn(|| {
            if remote.reset_after(h, Duration::ZERO) {
                return h;
            }
            let seq = cells.get(0).arm();
            remote
                .schedule_after(0, Duration::ZERO, cell::payload(0, seq))
                .expect("the reserve has room")
        })
        .join()
        .unwrap()
    })
}

#[test]
fn resets_between_the_fires_of_one_turn_keep_two_armings() {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
        .wheel_capacity(8)
        .reserve_capacity(4);
    let (mut bases, remote) = tickwheel_percpu::bases::<u64>(1, config).unwrap();
    let base = &mut bases[0];
    let cells = Cells::new(cell::CHUNK);
    cells.grow(0);
    let seq = cells.get(0).start(Waker::noop());
    let mut h = base
        .schedule_after(Duration::from_millis(1), cell::payload(0, seq))
        .unwrap();
    clock.advance(Duration::from_millis(1));
    let (mut free, mut woken) = (Vec::new(), Vec::new());
    let mut resets = 0;
    // Each payload as the base hands it out: delivered as the driver delivers, then the sleep
    // on the other thread resets itself (two resets, so at most two armings are made).
    let fired = base.turn(|p| {
        cell::deliver(&cells, p, &mut free, &mut woken);
        if resets < 2 {
            h = reset_away(&remote, &cells, h);
            resets += 1;
        }
    });
    assert_eq!(
        (fired, resets),
        (2, 2),
        "the second arming fires in the same turn"
    );
    // The second reset's arming (due now) fires at the next turn and completes the sleep.
    assert_eq!(cell::turn(base, &cells, &mut free, &mut woken), 1);
    assert!(cells.get(0).is_fired(), "the last arming fired the sleep");
    assert!(free.is_empty(), "freed while the sleep holds it");
    assert!(
        cells
            .get(0)
            .release(|| unreachable!("nothing left to cancel")),
        "every arming was delivered: the sleep lets go last"
    );
}

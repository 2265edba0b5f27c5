//! Owner-side operations against a naive model, on the manual clock.
//!
//! The model keeps each pending payload's deadline tick. In Exact mode a turn must fire exactly
//! the payloads whose deadline tick has been reached; in Coarse mode it may fire later, but never
//! early, and no later than the mode's slack (8/63 of the delay, plus one tick of rounding).

use std::collections::HashMap;
use std::time::Duration;

use tickwheel_percpu::{Base, ClockSource, Config, Handle, ManualClock, Mode, bases};

const TICK_NS: u64 = 1_000_000;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

fn one(mode: Mode) -> (Base<u64>, ManualClock) {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(mode)
        .clock(ClockSource::Manual(clock.clone()));
    let (mut b, _) = bases(1, config).unwrap();
    (b.pop().unwrap(), clock)
}

/// (deadline ns, the time it was armed) per payload.
type Model = HashMap<u64, (u64, u64)>;

fn check_turn(base: &mut Base<u64>, clock: &ManualClock, model: &mut Model, mode: Mode) {
    let now = clock.elapsed().as_nanos() as u64;
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    for v in &fired {
        let (deadline, _) = model
            .remove(v)
            .unwrap_or_else(|| panic!("payload {v} fired but was not pending"));
        assert!(
            deadline <= now,
            "payload {v} fired early: deadline {deadline} now {now}"
        );
    }
    let now_tick = now / TICK_NS;
    for (v, &(deadline, armed)) in model.iter() {
        let due = deadline.div_ceil(TICK_NS) <= now_tick;
        match mode {
            Mode::Exact => assert!(!due, "payload {v} due at {deadline} but not fired at {now}"),
            Mode::Coarse => {
                let slack = (deadline - armed.min(deadline)) / 8 + 2 * TICK_NS;
                assert!(
                    deadline + slack > now,
                    "payload {v} overdue: deadline {deadline} now {now}"
                );
            }
        }
    }
}

fn against_model(mode: Mode, seed: u64) {
    let (mut base, clock) = one(mode);
    let mut rng = Rng(seed);
    let mut model: Model = HashMap::new();
    let mut handles: Vec<(Handle, u64)> = Vec::new();
    for value in 0..20_000u64 {
        let now = clock.elapsed().as_nanos() as u64;
        match rng.below(10) {
            0..=3 => {
                let delay = Duration::from_micros(rng.below(200_000));
                let h = base.schedule_after(delay, value).unwrap();
                model.insert(value, (now + delay.as_nanos() as u64, now));
                handles.push((h, value));
            }
            4..=5 if !handles.is_empty() => {
                let (h, v) = handles.swap_remove(rng.below(handles.len() as u64) as usize);
                assert_eq!(base.cancel(h), model.remove(&v).is_some(), "cancel of {v}");
            }
            6 if !handles.is_empty() => {
                let (h, v) = handles[rng.below(handles.len() as u64) as usize];
                let delay = Duration::from_micros(rng.below(200_000));
                let pending = model.contains_key(&v);
                assert_eq!(base.reset_after(h, delay), pending, "reset of {v}");
                if pending {
                    model.insert(v, (now + delay.as_nanos() as u64, now));
                }
            }
            _ => {
                clock.advance(Duration::from_micros(rng.below(3_000)));
                check_turn(&mut base, &clock, &mut model, mode);
            }
        }
    }
    // Run everything out.
    while !model.is_empty() {
        clock.advance(Duration::from_millis(5));
        check_turn(&mut base, &clock, &mut model, mode);
    }
    assert!(base.is_empty());
    assert_eq!(base.free_slots(), base.slot_capacity());
    let s = base.stats();
    assert_eq!(s.scheduled, s.fired + s.cancelled_local);
    assert_eq!(s.cancelled_remote, 0);
}

#[test]
fn exact_mode_matches_model() {
    against_model(Mode::Exact, 1);
    against_model(Mode::Exact, 2);
}

#[test]
fn coarse_mode_never_early_and_within_slack() {
    against_model(Mode::Coarse, 3);
    against_model(Mode::Coarse, 4);
}

#[test]
fn deadline_rounds_up_to_a_tick() {
    let (mut base, clock) = one(Mode::Exact);
    base.schedule_after(Duration::from_micros(1_500), 1)
        .unwrap();
    clock.advance(Duration::from_micros(1_999));
    assert_eq!(base.turn(|_| panic!("fired before its tick")), 0);
    clock.advance(Duration::from_micros(1));
    assert_eq!(base.turn(|v| assert_eq!(v, 1)), 1);
}

#[test]
fn past_and_far_deadlines() {
    let (mut base, clock) = one(Mode::Exact);
    clock.advance(Duration::from_secs(10));
    base.turn(|_| {});
    let past = base.now() - Duration::from_secs(5);
    base.schedule_at(past, 1).unwrap();
    let far = base.schedule_after(Duration::MAX, 2).unwrap();
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    assert_eq!(fired, [1]);
    assert!(base.cancel(far), "a far-future timer stays pending");
}

#[test]
fn fires_in_deadline_order() {
    let (mut base, clock) = one(Mode::Exact);
    for (v, ms) in [(3u64, 30u64), (1, 10), (2, 20), (4, 40)] {
        base.schedule_after(Duration::from_millis(ms), v).unwrap();
    }
    clock.advance(Duration::from_millis(50));
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    assert_eq!(fired, [1, 2, 3, 4]);
}

#[test]
fn coarse_slack_holds_after_a_quiet_stretch() {
    // The base has not turned for 10 s (its fd was quiet); a 2 s timer scheduled now must still
    // land within the mode's slack of 2 s (level 2, 64 ms buckets), not on the coarser level a
    // 12 s delay from the wheel's last clock would pick (512 ms buckets).
    let (mut base, clock) = one(Mode::Coarse);
    base.schedule_after(Duration::from_secs(3600), 0).unwrap();
    base.turn(|_| panic!("nothing due"));
    clock.advance(Duration::from_secs(10));
    base.schedule_after(Duration::from_secs(2), 1).unwrap();
    clock.advance(Duration::from_millis(2_000 + 250)); // 2 s plus 12.5%
    let mut got = Vec::new();
    base.turn(|v| got.push(v));
    assert_eq!(got, [1], "fired within 12.5% of its delay");
}

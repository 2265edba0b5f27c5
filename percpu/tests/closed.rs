//! A base that is gone: schedules on it are refused with the value back, cancels and re-arms of
//! its timers report false, and every payload is dropped exactly once, also when a payload holds
//! a `Remote` of its own set (a reference cycle through the set's shared state).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, Remote, Runtime, bases};

fn manual(clock: &ManualClock) -> Config {
    Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
}

/// A payload that holds a `Remote` of its own set and counts its drops.
struct Cyclic {
    _remote: Remote<Cyclic>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Cyclic {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn schedule_on_a_dropped_base_is_refused_with_the_value() {
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<String>(2, manual(&clock)).unwrap();
    let pending = all[1]
        .schedule_after(Duration::from_millis(5), "p".into())
        .unwrap();
    let from_afar = remote
        .schedule_after(1, Duration::from_millis(5), "r".into())
        .unwrap();
    drop(all.pop());
    let e = remote
        .schedule_after(1, Duration::from_millis(1), "late".into())
        .unwrap_err();
    assert!(e.is_closed(), "{e}");
    assert_eq!(e.into_inner(), "late");
    assert!(!remote.cancel(pending), "nothing pending on a dropped base");
    assert!(
        !remote.cancel(from_afar),
        "nothing pending on a dropped base"
    );
    assert!(!remote.reset_after(pending, Duration::from_millis(1)));
    // The other base is unaffected.
    assert!(all[0].schedule_after(Duration::ZERO, "ok".into()).is_ok());
    assert!(
        remote
            .schedule_after(0, Duration::ZERO, "ok".into())
            .is_ok()
    );
}

#[test]
fn a_payload_holding_its_remote_is_dropped_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let (mut all, remote) = bases::<Cyclic>(1, manual(&clock)).unwrap();
    let make = || Cyclic {
        _remote: remote.clone(),
        drops: drops.clone(),
    };
    // Pending in the wheel, and in transit (scheduled from afar, not yet filed), at the drop.
    all[0]
        .schedule_after(Duration::from_secs(1), make())
        .unwrap();
    remote
        .schedule_after(0, Duration::from_secs(1), make())
        .unwrap();
    drop(all);
    assert_eq!(drops.load(Ordering::Relaxed), 2, "dropped with the base");
    // After the drop: refused, handed back, and dropped by us.
    let e = remote
        .schedule_after(0, Duration::ZERO, make())
        .unwrap_err();
    assert!(e.is_closed());
    drop(e);
    assert_eq!(drops.load(Ordering::Relaxed), 3);
    drop(remote);
}

#[test]
fn schedule_after_runtime_shutdown_is_refused() {
    let core = core_affinity::get_core_ids().expect("cores")[0].id;
    let rt = Runtime::<u32>::start(&[core], Config::default(), |_| {}).unwrap();
    let remote = rt.remote().clone();
    let h = remote
        .schedule_after(0, Duration::from_secs(60), 1)
        .unwrap();
    rt.shutdown();
    let e = remote
        .schedule_after(0, Duration::from_millis(1), 2)
        .unwrap_err();
    assert!(e.is_closed(), "{e}");
    assert_eq!(e.into_inner(), 2);
    assert!(!remote.cancel(h));
}

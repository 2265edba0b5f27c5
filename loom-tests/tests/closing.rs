//! Model 9: a base dropped while other threads schedule on it and cancel its timers.
//!
//! A schedule racing the drop either succeeds (its payload is then dropped with the base) or is
//! refused with `Closed` and its value handed back; either way the payload is dropped exactly
//! once, and nothing stays behind in the shared state.

use std::time::Duration;

use tickwheel_loom_tests::one_base;
use tickwheel_loom_tests::sync::{Arc, AtomicUsize, Ordering, spawn};

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        // Relaxed: read after every thread is joined.
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn drop_races_remote_schedule_and_cancel() {
    tickwheel_loom_tests::check("drop_vs_schedule_and_cancel", || {
        let (mut base, remote, _clock) = one_base::<Counted>(3, 2);
        let drops = Arc::new(AtomicUsize::new(0));
        let local = base
            .schedule_after(Duration::from_millis(1), Counted(drops.clone()))
            .unwrap();
        let r2 = remote.clone();
        let d2 = drops.clone();
        let scheduler = spawn(
            move || match r2.schedule_after(0, Duration::ZERO, Counted(d2)) {
                Ok(_) => None,
                Err(e) => {
                    assert!(e.is_closed() || e.is_reserve_empty(), "unexpected {e:?}");
                    Some(e.into_inner())
                }
            },
        );
        let canceller = spawn(move || remote.cancel(local));
        drop(base);
        let handed_back = scheduler.join().unwrap();
        let cancelled = canceller.join().unwrap();
        let _ = cancelled; // either answer is right while the base is going away
        // Relaxed: every thread is joined.
        let before = drops.load(Ordering::Relaxed);
        let back = usize::from(handed_back.is_some());
        drop(handed_back);
        assert_eq!(
            before + back,
            2,
            "each payload dropped exactly once (before={before}, handed back={back})"
        );
        assert_eq!(drops.load(Ordering::Relaxed), 2);
    });
}

#[test]
fn drop_races_remote_rearm_and_schedule() {
    tickwheel_loom_tests::check_bounded("drop_vs_rearm_and_schedule", 2, || {
        let (mut base, remote, _clock) = one_base::<Counted>(3, 2);
        let drops = Arc::new(AtomicUsize::new(0));
        let h = base
            .schedule_after(Duration::from_millis(5), Counted(drops.clone()))
            .unwrap();
        let r2 = remote.clone();
        let d2 = drops.clone();
        let s = spawn(
            move || match r2.schedule_after(0, Duration::ZERO, Counted(d2)) {
                Ok(_) => None,
                Err(e) => Some(e.into_inner()),
            },
        );
        // An earlier deadline: the re-arm queues a notice, which may meet the closed base.
        let a = spawn(move || remote.reset_after(h, Duration::ZERO));
        drop(base);
        let back = s.join().unwrap();
        let _ = a.join().unwrap();
        // Relaxed: every thread is joined.
        let before = drops.load(Ordering::Relaxed);
        let b = usize::from(back.is_some());
        drop(back);
        assert_eq!(before + b, 2, "each payload dropped exactly once");
    });
}

//! Model 12: the owner keeps working after it shared a handle.
//!
//! The other models mostly have the owner schedule, share the handle, then turn. Here the owner's
//! own later operations race the remote ones: a handler inside `turn_with` re-arms a timer that
//! comes due later in the same firing loop, fires one timer and re-uses its slot while a remote
//! thread still holds the old handle, and schedules on its own base until its slots run out while
//! a remote scheduler pops the same reserve; and the reserve's ABA case (two remote pops while
//! the owner frees and pushes back the same slot).

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicUsize, Ordering, spawn};
use tickwheel_loom_tests::{assert_quiet_and_balanced, check, check_bounded, one_base, sleep_on};

const MS: Duration = Duration::from_millis(1);

#[test]
fn handler_pushes_a_timer_later_while_a_remote_pulls_it_in() {
    // Timer `a` (1 ms) fires first; its handler pushes `b` (2 ms) to 10 ms with a plain store, and
    // `b`'s old entry comes due in the same loop and is re-filed at 10 ms, while a remote re-arms
    // `b` to 5 ms. A last re-arm, ordered after both, to 7 ms must fire at 7 ms whichever of the
    // two racing re-arms landed last.
    check("handler_rearm_vs_remote_earlier", || {
        let (mut base, remote, clock) = one_base::<u32>(3, 1);
        let t0 = base.now();
        let _a = base.schedule_at(t0 + MS, 1).unwrap();
        let b = base.schedule_at(t0 + 2 * MS, 2).unwrap();
        let r = remote.clone();
        let rearmer = spawn(move || r.reset_at(b, t0 + 5 * MS));
        clock.advance(2 * MS);
        let fired = base.turn_with(|base, v| {
            assert_eq!(v, 1, "b fired before either new deadline");
            assert!(base.reset_at(b, t0 + 10 * MS), "b is pending");
        });
        assert_eq!(fired, 1);
        assert!(rearmer.join().unwrap(), "b is pending");
        assert!(remote.reset_at(b, t0 + 7 * MS));
        clock.advance(4 * MS);
        assert_eq!(base.turn(|_| panic!("b fired before 7 ms")), 0);
        clock.advance(MS);
        assert_eq!(base.turn(|v| assert_eq!(v, 2)), 1, "b not fired at 7 ms");
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn slot_reused_by_a_handler_is_safe_from_the_old_handle() {
    // The handler of `a` schedules `c`, which takes `a`'s freed slot (the owner reuses its most
    // recently freed slot first), and re-arms it, while a remote thread cancels `a` and then
    // re-arms it with the same, by then stale or cancelled, handle. The cancel wins or the fire
    // does; the re-arm after it always reports false; neither touches `c`.
    check("handler_reuse_vs_stale_handle", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        let a = base.schedule_after(MS, 1).unwrap();
        let stale = spawn(move || (remote.cancel(a), remote.reset_after(a, 9 * MS)));
        clock.advance(MS);
        let mut c = None;
        base.turn_with(|base, v| {
            assert_eq!(v, 1);
            let h = base.schedule_after(3 * MS, 3).unwrap();
            assert!(base.reset_after(h, 2 * MS), "c is pending");
            c = Some(h);
        });
        let (cancelled, rearmed) = stale.join().unwrap();
        assert!(!rearmed, "a re-arm after a cancel or a fire reported true");
        assert_eq!(
            cancelled,
            c.is_none(),
            "cancelled={cancelled} fired={}",
            c.is_some()
        );
        if let Some(c) = c {
            assert_ne!(a, c, "a new arming needs a new handle");
            clock.advance(2 * MS);
            assert_eq!(base.turn(|v| assert_eq!(v, 3)), 1, "c fired once at 3 ms");
        }
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn owner_and_remote_empty_the_reserve_together() {
    // Two slots, one kept in reserve: the owner's handler schedules on its own base until it is
    // refused, falling back to the reserve when its private slots run out, while a remote thread
    // schedules through the same reserve. No slot may be handed out twice, every refusal hands
    // its value back, and every accepted timer fires exactly once.
    check("handler_empties_the_reserve", || {
        let (mut base, remote, clock) = one_base::<u32>(2, 1);
        base.schedule_after(Duration::ZERO, 0).unwrap();
        let scheduler = spawn(move || match remote.schedule_after(0, MS, 100) {
            Ok(_) => true,
            Err(e) => {
                assert!(e.is_reserve_empty() || e.is_full(), "unexpected {e:?}");
                assert_eq!(e.into_inner(), 100, "value handed back");
                false
            }
        });
        let mut accepted_here = 0u32;
        base.turn_with(|base, v| {
            assert_eq!(v, 0);
            for n in 1..=3 {
                match base.schedule_after(MS, n) {
                    Ok(_) => accepted_here += 1,
                    Err(e) => {
                        assert!(e.is_full(), "unexpected {e:?}");
                        assert_eq!(e.into_inner(), n);
                        break;
                    }
                }
            }
        });
        let remote_ok = scheduler.join().unwrap();
        assert!(
            accepted_here + u32::from(remote_ok) <= 2,
            "more timers than slots: {accepted_here} here, remote {remote_ok}"
        );
        clock.advance(MS);
        let mut fired = Vec::new();
        base.turn(|v| fired.push(v));
        fired.sort_unstable();
        let mut expect: Vec<u32> = (1..=accepted_here).collect();
        if remote_ok {
            expect.push(100);
        }
        assert_eq!(fired, expect);
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn reserve_pop_survives_aba() {
    // Three slots, two in reserve. Remote A schedules once; remote B schedules and cancels its
    // own timer, twice, while the owner turns (freeing B's cancelled slot and pushing it back on
    // the reserve). A's pop may read the top slot, lose the CPU while B pops that slot and the
    // next one and the owner pushes the first one back: its CAS must fail, not install a stale
    // link. Every accepted timer fires or is cancelled exactly once and no slot is lost.
    check_bounded("reserve_aba", 2, || {
        let (mut base, remote, clock) = one_base::<u32>(3, 2);
        let fired = Arc::new(AtomicUsize::new(0));
        let rb = remote.clone();
        let a = spawn(move || remote.schedule_after(0, MS, 1).is_ok());
        let b = spawn(move || {
            let mut cancelled = 0;
            for v in [2, 3] {
                if let Ok(h) = rb.schedule_after(0, MS, v) {
                    assert!(rb.cancel(h), "nobody else touches B's timer");
                    cancelled += 1;
                }
            }
            cancelled
        });
        for _ in 0..2 {
            base.turn(|v| panic!("fired {v} before 1 ms"));
        }
        let a_ok = a.join().unwrap();
        let _b_cancelled = b.join().unwrap();
        clock.advance(MS);
        let f = fired.clone();
        base.turn(move |v| {
            assert_eq!(v, 1, "a cancelled timer fired");
            // Relaxed: single-threaded here.
            f.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(fired.load(Ordering::Relaxed), usize::from(a_ok));
        assert_quiet_and_balanced(&mut base);
    });
}

#[test]
fn runtime_style_handler_schedules_through_the_reserve_until_refused() {
    // What a `Runtime` handler's `runtime::schedule_after` does: a schedule on its own base from
    // inside the turn, through the `Remote` (the reserve and the notice stack), until refused,
    // while another thread schedules on the same reserve. Every refusal hands its value back,
    // every accepted schedule is filed by a turn or leaves the fd readable, and every accepted
    // timer fires exactly once.
    check("runtime_handler_until_refused", || {
        let (mut base, remote, clock) = one_base::<u32>(4, 2);
        base.schedule_after(Duration::ZERO, 0).unwrap();
        let r = remote.clone();
        let other = spawn(move || r.schedule_after(0, MS, 100).is_ok());
        let mut accepted = Vec::new();
        base.turn(|v| {
            assert_eq!(v, 0);
            for n in 1..=3 {
                match remote.schedule_after(0, MS, n) {
                    Ok(_) => accepted.push(n),
                    Err(e) => {
                        assert!(e.is_reserve_empty(), "unexpected {e:?}");
                        assert_eq!(e.into_inner(), n, "value handed back");
                        break;
                    }
                }
            }
        });
        assert!(!accepted.is_empty(), "the reserve had room for the handler");
        let other_ok = other.join().unwrap();
        // Every accepted schedule is filed by a turn, or its notice leaves the fd readable: an
        // owner that slept on the fd with a notice untaken would spin here for ever.
        let want = accepted.len() + usize::from(other_ok);
        while base.len() < want {
            sleep_on(base.fd());
            base.turn(|v| panic!("fired {v} before 1 ms"));
        }
        clock.advance(MS);
        let mut fired = Vec::new();
        for _ in 0..2 {
            base.turn(|v| fired.push(v));
        }
        fired.sort_unstable();
        if other_ok {
            accepted.push(100);
        }
        assert_eq!(fired, accepted);
        assert_quiet_and_balanced(&mut base);
    });
}

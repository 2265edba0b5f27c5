//! Bad input gets a clear answer and loses nothing.

use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ConfigError, ManualClock, Mode, Runtime, base, bases};

fn manual(clock: &ManualClock) -> Config {
    Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()))
}

#[test]
fn stale_handles_do_nothing_on_any_core() {
    let clock = ManualClock::new();
    let config = manual(&clock).wheel_capacity(1);
    let (mut all, remote) = bases::<u32>(1, config).unwrap();
    let base = &mut all[0];
    let old = base.schedule_after(Duration::ZERO, 1).unwrap();
    assert_eq!(base.turn(|_| {}), 1);
    // The only slot is re-used by a new timer.
    let new = base.schedule_after(Duration::from_millis(1), 2).unwrap();
    assert!(!base.cancel(old), "fired handle");
    assert!(!remote.cancel(old), "fired handle, from afar");
    assert!(
        !base.reset_after(old, Duration::from_secs(1)),
        "fired handle re-arm"
    );
    assert!(base.cancel(new));
    assert!(!base.cancel(new), "cancelled handle");
    let newer = base.schedule_after(Duration::from_millis(1), 3).unwrap();
    assert!(!remote.cancel(new), "cancelled handle after re-use");
    clock.advance(Duration::from_millis(1));
    let mut got = Vec::new();
    base.turn(|v| got.push(v));
    assert_eq!(got, [3], "the newest timer fires untouched");
    assert!(!remote.cancel(newer));
}

#[test]
fn foreign_handles_do_nothing() {
    let clock = ManualClock::new();
    let (mut a, remote_a) = bases::<u32>(1, manual(&clock)).unwrap();
    let (mut b, remote_b) = bases::<u32>(1, manual(&clock)).unwrap();
    let ha = a[0].schedule_after(Duration::from_millis(1), 1).unwrap();
    let hb = b[0].schedule_after(Duration::from_millis(1), 2).unwrap();
    assert_eq!(
        (ha.base(), ha == hb),
        (0, false),
        "same base, slot and generation, different sets"
    );
    assert!(!b[0].cancel(ha));
    assert!(!remote_b.cancel(ha));
    assert!(!b[0].reset_after(ha, Duration::from_secs(1)));
    assert!(!remote_a.cancel(hb));
    clock.advance(Duration::from_millis(1));
    assert_eq!(a[0].turn(|v| assert_eq!(v, 1)), 1);
    assert_eq!(b[0].turn(|v| assert_eq!(v, 2)), 1);
}

#[test]
fn empty_reserve_hands_the_value_back() {
    let clock = ManualClock::new();
    let config = manual(&clock).reserve_capacity(2);
    let (mut all, remote) = bases::<String>(1, config).unwrap();
    remote
        .schedule_after(0, Duration::ZERO, "a".into())
        .unwrap();
    remote
        .schedule_after(0, Duration::ZERO, "b".into())
        .unwrap();
    let e = remote
        .schedule_after(0, Duration::ZERO, "c".into())
        .unwrap_err();
    assert!(e.is_reserve_empty(), "{e}");
    assert_eq!(e.into_inner(), "c");
    assert_eq!(all[0].stats().reserve_empty, 1);
    let mut got = Vec::new();
    all[0].turn(|v| got.push(v));
    got.sort(); // same tick: the wheel does not promise an order among them
    assert_eq!(got, ["a", "b"]);
    remote
        .schedule_after(0, Duration::ZERO, "c".into())
        .unwrap();
    all[0].turn(|v| got.push(v));
    assert_eq!(got, ["a", "b", "c"]);
    assert_eq!(all[0].free_slots(), all[0].slot_capacity());
}

#[test]
fn full_table_hands_the_value_back() {
    let clock = ManualClock::new();
    let config = manual(&clock).wheel_capacity(4).reserve_capacity(2);
    let (mut all, remote) = bases::<u32>(1, config).unwrap();
    let base = &mut all[0];
    for v in 0..4 {
        base.schedule_after(Duration::from_millis(1), v).unwrap();
    }
    let e = base
        .schedule_after(Duration::from_millis(1), 9)
        .unwrap_err();
    assert!(e.is_full());
    assert_eq!(e.into_inner(), 9);
    base.turn(|_| {});
    let e = remote
        .schedule_after(0, Duration::from_millis(1), 10)
        .unwrap_err();
    assert!(e.is_full(), "remote sees the table exhausted: {e}");
    assert_eq!(e.into_inner(), 10);
    clock.advance(Duration::from_millis(1));
    assert_eq!(base.turn(|_| {}), 4);
    remote.schedule_after(0, Duration::ZERO, 11).unwrap();
}

#[test]
fn no_such_base() {
    let (_all, remote) = bases::<u32>(2, Config::default()).unwrap();
    let e = remote.schedule_after(2, Duration::ZERO, 5).unwrap_err();
    assert!(e.is_no_such_base());
    assert_eq!(e.into_inner(), 5);
    assert_eq!(remote.len(), 2);
    let e = tickwheel_percpu::runtime::schedule_after(Duration::ZERO, 6u32).unwrap_err();
    assert!(e.is_no_such_base(), "not a runtime thread");
}

#[test]
fn invalid_configs_are_errors() {
    assert!(bases::<u32>(0, Config::default()).is_err());
    let rejected = |config: Config| {
        let err = bases::<u32>(1, config).expect_err("must be refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    };
    rejected(Config::default().tick(Duration::ZERO));
    // Each of these used to panic, abort or try to allocate hundreds of gigabytes.
    for reserve in [0, 1 << 21, (1 << 32) + 1, usize::MAX / 2, usize::MAX] {
        rejected(Config::default().reserve_capacity(reserve));
    }
    for cap in [0, u32::MAX as usize, usize::MAX] {
        rejected(Config::default().wheel_capacity(cap));
    }
    // The same bounds for the runtime, before any thread starts.
    let err = Runtime::<u32>::start(
        &[first_core()],
        Config::default().reserve_capacity(usize::MAX),
        |_| {},
    )
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}

#[test]
fn core_that_does_not_exist_is_named() {
    let err = Runtime::<u32>::start(&[usize::MAX], Config::default(), |_| {}).unwrap_err();
    assert!(
        err.to_string().contains(&usize::MAX.to_string()),
        "error does not name the core: {err}"
    );
}

#[test]
fn clock_stepping_back_fires_nothing_early() {
    let clock = ManualClock::new();
    let (mut all, _) = bases::<u32>(1, manual(&clock)).unwrap();
    let base = &mut all[0];
    clock.set(Duration::from_millis(100));
    base.turn(|_| {});
    let before = base.now();
    base.schedule_after(Duration::from_millis(10), 1).unwrap(); // due at 110 ms
    clock.set(Duration::from_millis(50)); // steps back
    assert_eq!(base.turn(|_| panic!("fired on a step back")), 0);
    assert_eq!(base.now(), before, "the base's clock does not go back");
    let h = base.schedule_after(Duration::from_millis(5), 2).unwrap(); // from 100 ms (max seen), not 50
    clock.set(Duration::from_millis(104));
    assert_eq!(base.turn(|_| panic!("early")), 0);
    clock.set(Duration::from_millis(110));
    let mut got = Vec::new();
    base.turn(|v| got.push(v));
    assert_eq!(got, [2, 1]);
    assert!(!base.cancel(h));
}

#[test]
fn panicking_handler_is_counted_and_the_base_keeps_running() {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx); // test plumbing only; the runtime itself takes no lock
    let rt = Runtime::<u32>::start(&[first_core()], Config::default(), move |v| {
        if v == 0 {
            panic!("handler panics on purpose");
        }
        tx.lock().unwrap().send(v).unwrap();
    })
    .unwrap();
    rt.remote().schedule_after(0, Duration::ZERO, 0).unwrap();
    // The second timer is scheduled once the panic is counted, so it fires after it whatever the
    // load (two timers due in one turn fire in no particular order).
    let give_up = std::time::Instant::now() + Duration::from_secs(5);
    while rt.panics() == 0 {
        assert!(
            std::time::Instant::now() < give_up,
            "the panic was not counted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    rt.remote()
        .schedule_after(0, Duration::from_millis(2), 1)
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        1,
        "base stopped after a panic"
    );
    assert_eq!(rt.panics(), 1);
    let stats = rt.shutdown();
    assert_eq!(stats[0].fired, 2);
}

fn first_core() -> usize {
    core_affinity::get_core_ids().expect("core ids")[0].id
}

#[test]
fn config_errors_name_the_field() {
    let field = |err: std::io::Error| {
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        let source = err.get_ref().and_then(|e| e.downcast_ref::<ConfigError>());
        let field = source.expect("the source is a ConfigError").field();
        assert!(err.to_string().starts_with(field), "{err}");
        field
    };
    let refused = |n, config| field(bases::<u32>(n, config).map(drop).unwrap_err());
    assert_eq!(refused(0, Config::default()), "n");
    assert_eq!(refused(1 << 16, Config::default()), "n");
    let tick = Config::default().tick(Duration::ZERO);
    assert_eq!(refused(1, tick), "tick");
    let wheel = Config::default().wheel_capacity(0);
    assert_eq!(refused(1, wheel), "wheel_capacity");
    let no_reserve = Config::default().reserve_capacity(0);
    assert_eq!(refused(1, no_reserve.clone()), "reserve_capacity");
    assert_eq!(
        field(base::<u32>(no_reserve).unwrap_err()),
        "reserve_capacity"
    );
}

#[test]
fn one_base_for_one_loop() {
    let clock = ManualClock::new();
    let config = Config::default().clock(ClockSource::Manual(clock.clone()));
    let mut base = base::<&str>(config).unwrap();
    assert_eq!(base.index(), 0);
    base.schedule_after(Duration::from_millis(5), "local")
        .unwrap();
    let remote = base.remote();
    remote
        .schedule_after(0, Duration::from_millis(5), "remote")
        .unwrap();
    clock.advance(Duration::from_millis(10));
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    fired.sort_unstable();
    assert_eq!(fired, ["local", "remote"]);
}

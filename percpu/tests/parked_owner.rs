//! A parked owner is woken by every remote operation that gives it work, on the real clock and
//! with the owner really blocking: in `Base::park(None)`, or in an outer `poll` on `Base::fd`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tickwheel_percpu::{Config, Handle, Mode, Remote, bases};

mod support;
use support::poll_readable;

#[test]
fn a_fresh_base_fd_is_readable_after_a_remote_schedule() {
    // The README's loop: register `base.fd()`, call `turn` when it is readable. Before the first
    // turn a remote schedule due at once must make the fd readable, or that loop never turns.
    // Fails today: the wake word starts `EMPTY` (owner awake), so the first notice moves it to
    // `NOTIFIED` and writes no eventfd; only `turn` or `park` ever leaves it `PARKED`. The same
    // holds for a remote cancel, an earlier re-arm and `Remote::wake` on such a base.
    let (mut all, remote) = bases::<u32>(1, Config::default().mode(Mode::Exact)).unwrap();
    let base = &mut all[0];
    let r = remote.clone();
    std::thread::spawn(move || r.schedule_after(0, Duration::ZERO, 1).unwrap())
        .join()
        .unwrap();
    assert!(
        poll_readable(base.fd(), 2_000),
        "fd not readable 2 s after a remote schedule due at once (base never turned)"
    );
    let began = Instant::now();
    let mut fired = 0;
    while fired == 0 && began.elapsed() < Duration::from_secs(2) {
        fired += base.turn(|v| assert_eq!(v, 1));
    }
    assert_eq!(fired, 1);
}

const REMOTES: usize = 3;
const PER_REMOTE: usize = 40;
/// Timers the owner schedules and shares; the last `ALONE_LOCAL` of them are pulled in alone.
const LOCAL: usize = 32;
const ALONE_LOCAL: usize = 8;
/// Timers scheduled remotely by the main thread and pulled in alone.
const ALONE_REMOTE: usize = 8;
const TOTAL: usize = LOCAL + REMOTES * PER_REMOTE + ALONE_REMOTE;
/// How late a fire may be on a loaded machine. A lost wake-up leaves the timer at its old
/// deadline, seconds out, so this still tells the two apart.
const SLACK: Duration = Duration::from_millis(500);

/// Pushes `h` out to 5 s (a re-arm that sends nothing), then pulls it in to `within` from now;
/// returns the deadline and when the pull-in returned.
fn push_out_then_pull_in(
    remote: &Remote<usize>,
    id: usize,
    h: Handle,
    within: Duration,
) -> (Instant, Instant) {
    assert!(
        remote.reset_after(h, Duration::from_secs(5)),
        "{id} pending"
    );
    let at = Instant::now() + within;
    assert!(remote.reset_at(h, at), "{id} pending");
    (at, Instant::now())
}

#[test]
fn parked_owner_wakes_for_every_earlier_rearm() {
    // The owner blocks in `park(None)` between turns; its timerfd is armed seconds out. Remote
    // threads pull timers in from 10 s to a few ms from now: timers the owner scheduled itself
    // and shared, and timers scheduled remotely. First three threads at once, then one timer at a
    // time, each the only thing that could wake the owner. Each must fire once, no earlier than
    // its last deadline and at most `SLACK` after it.
    let config = Config::default().mode(Mode::Exact).wheel_capacity(1024);
    let (mut all, remote) = bases::<usize>(1, config).unwrap();
    let mut base = all.pop().unwrap();
    let far = Instant::now() + Duration::from_secs(10);
    let local: Vec<_> = (0..LOCAL)
        .map(|id| (id, base.schedule_at(far, id).unwrap()))
        .collect();
    let alone_remote: Vec<_> = (TOTAL - ALONE_REMOTE..TOTAL)
        .map(|id| (id, remote.schedule_at(0, far, id).unwrap()))
        .collect();
    let deadlines: Arc<Vec<OnceLock<(Instant, Instant)>>> =
        Arc::new((0..TOTAL).map(|_| OnceLock::new()).collect());
    let fired_flags: Arc<Vec<AtomicBool>> =
        Arc::new((0..TOTAL).map(|_| AtomicBool::new(false)).collect());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let flags = fired_flags.clone();
    let owner = std::thread::spawn(move || {
        let mut fired: Vec<Option<Instant>> = vec![None; TOTAL];
        let mut count = 0;
        while count < TOTAL {
            base.turn(|id| {
                assert!(fired[id].is_none(), "{id} fired twice");
                fired[id] = Some(Instant::now());
                // Release: the thread waiting for this fire reads it with Acquire.
                flags[id].store(true, Ordering::Release);
                count += 1;
            });
            if count < TOTAL {
                base.park(None).unwrap();
            }
        }
        base.turn(|id| panic!("{id} fired after all did"));
        assert!(base.is_empty());
        assert!(
            !poll_readable(base.fd(), 0),
            "fd readable with nothing to do"
        );
        done_tx.send(fired).unwrap();
    });
    let shared_local = &local[..LOCAL - ALONE_LOCAL];
    let threads: Vec<_> = (0..REMOTES)
        .map(|r| {
            let remote = remote.clone();
            let deadlines = deadlines.clone();
            let mine: Vec<_> = shared_local
                .iter()
                .copied()
                .skip(r)
                .step_by(REMOTES)
                .collect();
            std::thread::spawn(move || {
                let mut rng = support::Rng(0x51_7CC1_B727_220A ^ r as u64);
                let ids = (0..PER_REMOTE).map(|k| LOCAL + r * PER_REMOTE + k);
                let theirs: Vec<_> = ids
                    .map(|id| (id, remote.schedule_at(0, far, id).unwrap()))
                    .collect();
                for (id, h) in mine.into_iter().chain(theirs) {
                    std::thread::sleep(Duration::from_micros(rng.below(3_000)));
                    let within = Duration::from_millis(rng.below(20));
                    let set = push_out_then_pull_in(&remote, id, h, within);
                    deadlines[id].set(set).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // One at a time: nothing else is due for seconds, so only this pull-in's kick wakes the owner.
    let mut rng = support::Rng(0xA5A5_5A5A_0F0F_F0F0);
    for &(id, h) in local[LOCAL - ALONE_LOCAL..].iter().chain(&alone_remote) {
        let within = Duration::from_millis(rng.below(4));
        let (at, rearmed) = push_out_then_pull_in(&remote, id, h, within);
        deadlines[id].set((at, rearmed)).unwrap();
        // Acquire: pairs with the owner's Release.
        while !fired_flags[id].load(Ordering::Acquire) {
            assert!(
                Instant::now() < at.max(rearmed) + 4 * SLACK,
                "{id} not fired {:?} after its pull-in: the parked owner was not woken",
                4 * SLACK
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let fired = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the owner is still parked 20 s on: a wake-up was lost");
    owner.join().unwrap();
    let mut worst = Duration::ZERO;
    for (id, at) in fired.iter().enumerate() {
        let at = at.unwrap_or_else(|| panic!("{id} never fired"));
        let (deadline, rearmed) = *deadlines[id].get().unwrap();
        assert!(at >= deadline, "{id} fired {:?} early", deadline - at);
        let late = at.saturating_duration_since(deadline.max(rearmed));
        worst = worst.max(late);
        assert!(
            late <= SLACK,
            "{id} fired {late:?} after its deadline and its re-arm"
        );
    }
    eprintln!("{TOTAL} timers pulled in, latest fire {worst:?} after its deadline");
}

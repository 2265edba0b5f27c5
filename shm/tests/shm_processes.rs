//! Real processes sharing one timer set: this binary re-runs itself (`child_main`) as schedulers,
//! cancellers and advancers, and the parent checks that every payload was fired or cancelled
//! exactly once, including when processes are killed with SIGKILL at random points.

#![cfg(not(loom))]

mod shm_util;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use shm_util::*;
use tickwheel_shm::{Advancer, Config, Error, Handle, Segment};

const ROLE: &str = "TICKWHEEL_SHM_ROLE";

/// Entry point of the child processes; a no-op in a normal test run.
#[test]
fn child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let segment = match std::env::var("SHM_FD") {
        // SAFETY: the parent cleared close-on-exec on this fd for us; nothing else owns it here.
        Ok(fd) => Segment::from_fd(unsafe { OwnedFd::from_raw_fd(fd.parse().unwrap()) }).unwrap(),
        Err(_) => Segment::open_file(var("SHM_SET")).unwrap(),
    };
    let log = Log::open(Path::new(&var("SHM_LOG")));
    let client = segment.attach().unwrap();
    let child: u64 = var("SHM_CHILD").parse().unwrap();
    match role.as_str() {
        "scheduler" => {
            let ops: u64 = var("SHM_OPS").parse().unwrap();
            schedule_and_cancel(&client, &log, child, ops, &mut Rng::seeded());
        }
        "advancer" => {
            let mut adv = client.advancer().unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let t = client.now() + 1;
                adv.advance_to(t);
                adv.turn(|p| {
                    log.fired(p)
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        }
        "share" => {
            let n: u64 = var("SHM_OPS").parse().unwrap();
            for seq in 0..n {
                let p = child * STRIDE + seq;
                client.schedule_at(client.now() + 5, p).unwrap();
                log.state(p)
                    .store(SCHEDULED, std::sync::atomic::Ordering::SeqCst);
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// The body of a scheduling child: random schedules (60%) and cancels of its own live timers,
/// each logged before and after, so a kill at any point leaves at most one payload in doubt.
fn schedule_and_cancel(
    client: &tickwheel_shm::Client,
    log: &Log,
    child: u64,
    ops: u64,
    rng: &mut Rng,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut live: Vec<(u64, Handle)> = Vec::new();
    let mut seq = 0;
    for _ in 0..ops {
        if live.is_empty() || rng.below(100) < 60 {
            if seq == STRIDE {
                break;
            }
            let p = child * STRIDE + seq;
            seq += 1;
            log.state(p).store(INTENT, SeqCst);
            // A full set (the advancing parent is behind on a loaded machine) is waited out, as
            // a server would; a few seconds of it gives the payload up.
            let mut tries = 0;
            loop {
                let deadline = client.now() + 1 + rng.below(30);
                match client.schedule_at(deadline, p) {
                    Ok(h) => {
                        log.state(p).store(SCHEDULED, SeqCst);
                        live.push((p, h));
                        break;
                    }
                    Err(full) if tries < 10_000 => {
                        assert_eq!(full.into_inner(), p);
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    Err(_) => {
                        log.state(p).store(0, SeqCst);
                        break;
                    }
                }
            }
        } else {
            let (p, h) = live.swap_remove(rng.below(live.len() as u64) as usize);
            log.state(p).store(CANCELLING, SeqCst);
            let won = client.cancel(h);
            log.state(p)
                .store(if won { CANCELLED } else { NOT_CANCELLED }, SeqCst);
        }
    }
}

struct Setup {
    dir: PathBuf,
    set: PathBuf,
    log_path: PathBuf,
    log: Log,
    segment: Segment,
}

fn setup(name: &str, capacity: usize) -> Setup {
    let dir = scratch(name);
    let set = dir.join("timers");
    let log_path = dir.join("log");
    let log = Log::create(&log_path);
    let segment = Segment::create_file(&set, &Config::new(capacity).manual_clock()).unwrap();
    Setup {
        dir,
        set,
        log_path,
        log,
        segment,
    }
}

impl Setup {
    fn spawn(&self, role: &str, child: u64, ops: u64) -> Child {
        spawn_child(
            "child_main",
            &[
                (ROLE, role.to_string()),
                ("SHM_SET", self.set.display().to_string()),
                ("SHM_LOG", self.log_path.display().to_string()),
                ("SHM_CHILD", child.to_string()),
                ("SHM_OPS", ops.to_string()),
            ],
        )
    }

    /// Turns (one tick a turn) until every child has exited; returns their exit statuses.
    fn advance_until_exit(&self, adv: &mut Advancer, children: &mut [Child]) -> Vec<bool> {
        let mut done: Vec<Option<bool>> = vec![None; children.len()];
        let limit = Instant::now() + Duration::from_secs(120);
        while done.iter().any(Option::is_none) {
            assert!(Instant::now() < limit, "children did not finish");
            self.tick(adv, 1);
            for (c, d) in children.iter_mut().zip(&mut done) {
                if d.is_none()
                    && let Some(st) = c.try_wait().unwrap()
                {
                    *d = Some(st.success());
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        done.into_iter().map(Option::unwrap).collect()
    }

    fn tick(&self, adv: &mut Advancer, ticks: u64) {
        let t = adv.client().now() + ticks;
        adv.advance_to(t);
        adv.turn(|p| {
            self.log
                .fired(p)
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
    }

    /// Checks every payload of `children` children: fired or cancelled exactly once, except
    /// that a child in `killed` may leave one payload in doubt (the operation it was killed in).
    /// Returns how many payloads were accounted for.
    fn check(&self, children: u64, killed: &[u64]) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        let mut seen = 0;
        for c in 0..children {
            let mut in_doubt = 0;
            for seq in 0..STRIDE {
                let p = c * STRIDE + seq;
                let st = self.log.state(p).load(SeqCst);
                let fired = self.log.fired(p).load(SeqCst);
                let ok = match st {
                    0 => fired == 0,
                    SCHEDULED | NOT_CANCELLED => fired == 1,
                    CANCELLED => fired == 0,
                    INTENT | CANCELLING => {
                        in_doubt += 1;
                        fired <= 1
                    }
                    other => panic!("bad log state {other}"),
                };
                assert!(ok, "payload {p}: child state {st}, fired {fired} times");
                if st != 0 {
                    seen += 1;
                }
            }
            let allowed = u64::from(killed.contains(&c));
            assert!(
                in_doubt <= allowed,
                "child {c}: {in_doubt} payloads in doubt"
            );
        }
        seen
    }

    /// No slot leaked: every slot can be scheduled once more, then all are cancelled.
    fn check_no_leak(&self, adv: &mut Advancer) {
        self.tick(adv, 1_000);
        let client = adv.client();
        let cap = self.segment.geometry().capacity;
        let t = client.now() + 10_000;
        let handles: Vec<Handle> = (0..cap)
            .map(|i| {
                client
                    .schedule_at(t, u64::MAX - i as u64)
                    .unwrap_or_else(|_| panic!("slot leaked: only {i} of {cap} free"))
            })
            .collect();
        assert!(client.schedule_at(t, 0).is_err());
        for h in handles {
            assert!(client.cancel(h));
        }
        adv.turn(|p| panic!("cancelled {p} fired"));
        assert_eq!(adv.indexed(), 0);
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn exactly_once_with_three_schedulers_and_one_advancer() {
    let s = setup("exactly-once", 1 << 14);
    let client = s.segment.attach().unwrap();
    let mut adv = client.advancer().unwrap();
    let mut children: Vec<Child> = (0..3).map(|c| s.spawn("scheduler", c, 20_000)).collect();
    let ok = s.advance_until_exit(&mut adv, &mut children);
    assert!(ok.iter().all(|&b| b), "a child failed: {ok:?}");
    s.tick(&mut adv, 100);
    let seen = s.check(3, &[]);
    assert!(seen > 30_000, "only {seen} payloads");
    let st = client.stats();
    assert_eq!(st.scheduled, st.fired + st.cancelled, "{st:?}");
    assert_eq!(st.reclaimed, 0);
    s.check_no_leak(&mut adv);
}

#[test]
fn schedulers_killed_at_random_points() {
    let mut rng = Rng::seeded();
    for round in 0..2 {
        let s = setup(&format!("kill-sched-{round}"), 1 << 14);
        let client = s.segment.attach().unwrap();
        let mut adv = client.advancer().unwrap();
        let mut children: Vec<Child> = (0..3)
            .map(|c| s.spawn("scheduler", c, STRIDE * 4))
            .collect();
        let kill_at: Vec<Instant> = (0..3)
            .map(|_| Instant::now() + Duration::from_millis(150 + rng.below(250)))
            .collect();
        let mut alive = [true; 3];
        while alive.iter().any(|&a| a) {
            s.tick(&mut adv, 1);
            for c in 0..3 {
                if alive[c] && Instant::now() >= kill_at[c] {
                    children[c].kill().unwrap();
                    children[c].wait().unwrap();
                    alive[c] = false;
                }
            }
        }
        // Apply what the children did before dying, then repair what their deaths left.
        s.tick(&mut adv, 0);
        let r = adv.recover();
        eprintln!("round {round}: {r:?}");
        s.tick(&mut adv, 100);
        let seen = s.check(3, &[0, 1, 2]);
        assert!(
            seen > 100,
            "round {round}: children got only {seen} payloads in ({r:?})"
        );
        s.check_no_leak(&mut adv);
    }
}

#[test]
fn advancer_killed_then_taken_over() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut rng = Rng::seeded();
    let s = setup("kill-adv", 1 << 14);
    let client = s.segment.attach().unwrap();
    let mut owner = s.spawn("advancer", 3, 0);
    // Wait until the child owns advancing.
    let limit = Instant::now() + Duration::from_secs(30);
    loop {
        match client.advancer() {
            Err(Error::Busy { owner_pid }) => {
                assert_eq!(owner_pid, owner.id());
                break;
            }
            Ok(a) => drop(a),
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < limit, "the advancing child never started");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut children: Vec<Child> = (0..2).map(|c| s.spawn("scheduler", c, 30_000)).collect();
    std::thread::sleep(Duration::from_millis(100 + rng.below(200)));
    owner.kill().unwrap();
    owner.wait().unwrap();
    let mut adv = client.advancer().expect("takeover after the owner died");
    for p in adv.take_interrupted() {
        // The dead owner won the fire CAS; its handler may not have logged the payload.
        if s.log.fired(p).load(SeqCst) == 0 {
            s.log.fired(p).fetch_add(1, SeqCst);
        }
    }
    let ok = s.advance_until_exit(&mut adv, &mut children);
    assert!(ok.iter().all(|&b| b), "a scheduler failed: {ok:?}");
    s.tick(&mut adv, 100);
    let seen = s.check(2, &[]);
    assert!(seen > 20_000, "only {seen} payloads");
    let st = client.stats();
    assert_eq!(st.takeovers, 1, "{st:?}");
    s.check_no_leak(&mut adv);
}

#[test]
fn shared_by_path_and_by_memfd() {
    use std::sync::atomic::Ordering::SeqCst;
    // By path: the child opens the file the parent created.
    let s = setup("share", 4096);
    let client = s.segment.attach().unwrap();
    let mut adv = client.advancer().unwrap();
    let mut kids = vec![s.spawn("share", 0, 500)];

    // By memfd: the child inherits the fd (close-on-exec cleared) and opens the set from it.
    let memfd = Segment::memfd(&Config::new(4096).manual_clock(), "shm-test").unwrap();
    let fd = memfd.fd().unwrap().as_raw_fd();
    // SAFETY: clears FD_CLOEXEC on a live fd we own.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let mclient = memfd.attach().unwrap();
    let mut madv = mclient.advancer().unwrap();
    kids.push(spawn_child(
        "child_main",
        &[
            (ROLE, "share".to_string()),
            ("SHM_FD", fd.to_string()),
            ("SHM_LOG", s.log_path.display().to_string()),
            ("SHM_CHILD", "1".to_string()),
            ("SHM_OPS", "300".to_string()),
        ],
    ));
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
    s.tick(&mut adv, 10);
    let t = mclient.now() + 10;
    madv.advance_to(t);
    madv.turn(|p| {
        s.log.fired(p).fetch_add(1, SeqCst);
    });
    assert_eq!(s.check(2, &[]), 800);
    assert_eq!(client.stats().fired, 500);
    assert_eq!(mclient.stats().fired, 300);
}

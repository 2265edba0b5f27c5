//! Chaos against a shared timer set: schedulers, cancellers of other processes' timers and two
//! advancers (one owning, one standing by) run as real processes while the parent kills
//! (`SIGKILL`) and stops (`SIGSTOP`, then `SIGCONT`) random ones at random moments, not only at
//! numbered store points, and starts a fresh process for each one killed. Every process writes
//! what it does to one ledger, one `O_APPEND` write per record, so the file's order is an order
//! of the events. At the end the parent takes over and checks the ledger: every payload fired or
//! was cancelled exactly once (an operation a kill interrupted may go either way), no cancel that
//! returned true was followed by its fire, no cancel begun after a fire returned true, no timer
//! fired before its deadline, no (slot, generation) was handed out twice, and no slot leaked.
//! One test in this binary (the children re-run it as `chaos_child`).

#![cfg(not(loom))]

mod shm_util;

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use shm_util::{Rng, file_words, new_file, open_rw, scratch, spawn_child, steps};
use tickwheel_shm::{Client, Config, Error, Handle, ScheduleError, Segment, hooks};

const ROLE: &str = "TICKWHEEL_CHAOS_ROLE";
const CAPACITY: usize = 1024;
/// Handles published for the cancellers; one word each: payload (32) | slot (11) | generation
/// (21), 0 for none.
const BOARD: usize = 1024;
/// Word `BOARD`: the take-interrupted guard (see `Shared::guard`); `BOARD + 1`: stop;
/// `BOARD + 2`: the set id.
const WORDS: usize = BOARD + 3;
/// How long a fresh child is left alone (a re-run test binary takes a while to start).
const STARTUP: Duration = Duration::from_millis(150);
/// How long the parent runs the chaos.
const CHAOS: Duration = Duration::from_secs(5);

/// Words in a shared file: the handle board, the guard, the stop flag, the set id.
struct Shared {
    words: &'static [AtomicU64],
}

impl Shared {
    fn create(path: &Path) -> Shared {
        Shared {
            words: file_words(&new_file(path, WORDS * 8), WORDS),
        }
    }

    fn open(path: &Path) -> Shared {
        Shared {
            words: file_words(&open_rw(path), WORDS),
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }

    fn guard(&self) -> &AtomicU64 {
        self.word(BOARD)
    }

    fn stop(&self) -> &AtomicU64 {
        self.word(BOARD + 1)
    }

    fn set(&self) -> &AtomicU64 {
        self.word(BOARD + 2)
    }
}

/// The ledger: one `O_APPEND` write per record.
struct Ledger {
    fd: std::fs::File,
}

impl Ledger {
    fn open(path: &Path) -> Ledger {
        let fd = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap();
        Ledger { fd }
    }

    fn put(&self, line: String) {
        let line = line + "\n";
        // SAFETY: writes our own buffer to our own fd; one write so the record lands whole.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), line.as_ptr().cast(), line.len()) };
        assert_eq!(n, line.len() as isize, "short ledger write");
    }
}

fn pack(payload: u64, h: Handle) -> u64 {
    let bits = h.to_u128();
    let (slot, generation) = ((bits >> 32) as u32 as u64, bits as u32 as u64);
    assert!(payload < 1 << 32 && slot < 1 << 11 && generation < 1 << 21);
    payload << 32 | slot << 21 | generation
}

fn unpack(word: u64, set: u64) -> (u64, Handle) {
    let payload = word >> 32;
    let slot = (word >> 21) & 0x7ff;
    let generation = word & 0x1f_ffff;
    (
        payload,
        Handle::from_u128(u128::from(set) << 64 | u128::from(slot) << 32 | u128::from(generation)),
    )
}

fn slot_gen(h: Handle) -> (u32, u32) {
    let bits = h.to_u128();
    ((bits >> 32) as u32, bits as u32)
}

/// Entry point of the children; a no-op in a normal test run.
#[test]
fn chaos_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let segment = Segment::open_file(var("CHAOS_SET")).unwrap();
    let shared = Shared::open(Path::new(&var("CHAOS_BOARD")));
    let ledger = Ledger::open(Path::new(&var("CHAOS_LEDGER")));
    let id: u64 = var("CHAOS_ID").parse().unwrap();
    let client = segment.attach().unwrap();
    let me = std::process::id();
    let mut rng = Rng::seeded();
    // Half the children also kill themselves at a random store point far into their run, so
    // some deaths land inside the protocol's steps, not only between operations.
    let kill_at =
        (rng.below(2) == 0).then(|| 1 + rng.below(if role == "advancer" { 4_000 } else { 20_000 }));
    if let Some(n) = kill_at {
        hooks::kill_before_store(n);
    }
    match role.as_str() {
        "scheduler" => scheduler(&client, &shared, &ledger, id, me, &mut rng),
        "canceller" => canceller(&client, &shared, &ledger, me, &mut rng),
        "advancer" => advancer(&client, &shared, &ledger, me, kill_at),
        other => panic!("unknown role {other}"),
    }
}

/// Schedules (deadline 1..40 ticks on), publishes some handles for the cancellers, cancels some
/// of its own, and lets the rest fire.
fn scheduler(client: &Client, shared: &Shared, ledger: &Ledger, id: u64, me: u32, rng: &mut Rng) {
    let mut live: Vec<(u64, Handle)> = Vec::new();
    let mut k = 0u64;
    for seq in 0..1u64 << 20 {
        if shared.stop().load(SeqCst) != 0 {
            return;
        }
        let p = id << 20 | seq;
        let d = client.now() + 1 + rng.below(40);
        ledger.put(format!("I {me} {p} {d}"));
        match client.schedule_at(d, p) {
            Ok(h) => {
                let (s, g) = slot_gen(h);
                ledger.put(format!("S {me} {p} {s} {g}"));
                if rng.below(3) == 0 {
                    shared
                        .word(rng.below(BOARD as u64) as usize)
                        .store(pack(p, h), SeqCst);
                }
                live.push((p, h));
            }
            Err(ScheduleError::Full(back)) => {
                assert_eq!(back, p);
                ledger.put(format!("N {me} {p}"));
            }
            Err(e) => panic!("schedule: {e}"),
        }
        while live.len() > 64 || (!live.is_empty() && rng.below(100) < 35) {
            let (p, h) = live.swap_remove(rng.below(live.len() as u64) as usize);
            k += 1;
            ledger.put(format!("C {me} {p} {k}"));
            let won = client.cancel(h);
            ledger.put(format!("R {me} {p} {k} {}", if won { 'T' } else { 'F' }));
        }
        // Bursts of work between short sleeps, so kills and stops land inside operations too.
        if seq % 8 == 7 {
            std::thread::sleep(Duration::from_micros(100 + rng.below(200)));
        }
    }
}

/// Cancels handles other processes published, some of them fired or cancelled long since, some
/// whose slots were re-used (stale handles), some due right now (racing the fire).
fn canceller(client: &Client, shared: &Shared, ledger: &Ledger, me: u32, rng: &mut Rng) {
    let set = shared.set().load(SeqCst);
    let mut k = 0u64;
    while shared.stop().load(SeqCst) == 0 {
        let word = shared.word(rng.below(BOARD as u64) as usize).load(SeqCst);
        if word == 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let (p, h) = unpack(word, set);
        k += 1;
        ledger.put(format!("C {me} {p} {k}"));
        let won = client.cancel(h);
        ledger.put(format!("R {me} {p} {k} {}", if won { 'T' } else { 'F' }));
        std::thread::sleep(Duration::from_micros(50 + rng.below(150)));
    }
}

/// Waits to own the set (standing by while another live process does), then turns one tick at
/// a time, logging each fire with the clock it fired at.
fn advancer(client: &Client, shared: &Shared, ledger: &Ledger, me: u32, mut kill_at: Option<u64>) {
    let mut adv = loop {
        if shared.stop().load(SeqCst) != 0 {
            return;
        }
        match client.advancer() {
            Ok(adv) => break adv,
            Err(Error::Busy { .. }) => std::thread::sleep(Duration::from_micros(500)),
            Err(e) => panic!("advancer: {e}"),
        }
    };
    ledger.put(format!("A {me}"));
    loop {
        // The guard: no kill between freeing an interrupted slot and logging its payload (the
        // self-kill paused too).
        let passed = hooks::stores();
        hooks::kill_before_store(0);
        while shared
            .guard()
            .compare_exchange(0, u64::from(me), SeqCst, SeqCst)
            .is_err()
        {
            std::thread::yield_now();
        }
        for p in adv.take_interrupted() {
            ledger.put(format!("Y {me} {p}"));
        }
        shared.guard().store(0, SeqCst);
        if let Some(n) = kill_at {
            kill_at = Some(n - passed);
            hooks::kill_before_store(n - passed);
        }
        if shared.stop().load(SeqCst) != 0 {
            return;
        }
        let now = client.now() + 1;
        adv.advance_to(now);
        adv.turn(|p| ledger.put(format!("X {me} {p} {now}")));
        std::thread::sleep(Duration::from_micros(100));
    }
}

struct Kid {
    child: Child,
    role: &'static str,
    stopped_until: Option<Instant>,
    started: Instant,
}

struct Run {
    dir: PathBuf,
    set: PathBuf,
    board: PathBuf,
    ledger: PathBuf,
    next_id: u64,
}

impl Run {
    fn spawn(&mut self, role: &'static str) -> Kid {
        self.next_id += 1;
        let child = spawn_child(
            "chaos_child",
            &[
                (ROLE, role.to_string()),
                ("CHAOS_SET", self.set.display().to_string()),
                ("CHAOS_BOARD", self.board.display().to_string()),
                ("CHAOS_LEDGER", self.ledger.display().to_string()),
                ("CHAOS_ID", self.next_id.to_string()),
            ],
        );
        Kid {
            child,
            role,
            stopped_until: None,
            started: Instant::now(),
        }
    }
}

fn signal(kid: &Kid, sig: i32) {
    // SAFETY: signals our own child, which we have not reaped yet.
    assert_eq!(unsafe { libc::kill(kid.child.id() as i32, sig) }, 0);
}

#[test]
fn exactly_once_under_random_kills_and_stops() {
    let dir = scratch("chaos");
    let mut run = Run {
        set: dir.join("set"),
        board: dir.join("board"),
        ledger: dir.join("ledger"),
        dir,
        next_id: 0,
    };
    let segment = Segment::create_file(&run.set, &Config::new(CAPACITY).manual_clock()).unwrap();
    let shared = Shared::create(&run.board);
    // The set id, for the cancellers to rebuild handles from the board.
    let parent = segment.attach().unwrap();
    let probe = parent.schedule_at(1, u64::MAX).unwrap();
    assert!(parent.cancel(probe));
    shared.set().store((probe.to_u128() >> 64) as u64, SeqCst);
    drop(parent);
    let mut rng = Rng::seeded();
    let roles = [
        "scheduler",
        "scheduler",
        "scheduler",
        "canceller",
        "advancer",
        "advancer",
    ];
    let mut kids: Vec<Kid> = roles.iter().map(|r| run.spawn(r)).collect();
    let (mut kills, mut stops, mut owner_kills, mut self_kills) = (0, 0, 0, 0);
    let end = Instant::now() + CHAOS;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10 + rng.below(40)));
        let now = Instant::now();
        for kid in &mut kids {
            if let Some(st) = kid.child.try_wait().unwrap() {
                // Killed at its own store point (a signal), never failed.
                assert!(st.code().is_none(), "a {} child failed: {st}", kid.role);
                self_kills += 1;
                let role = kid.role;
                *kid = run.spawn(role);
                continue;
            }
            if kid.stopped_until.is_some_and(|t| t <= now) {
                signal(kid, libc::SIGCONT);
                kid.stopped_until = None;
            }
        }
        let i = rng.below(kids.len() as u64) as usize;
        // A fresh process spends its first moments starting up; signals then hit no operation.
        if kids[i].stopped_until.is_some() || now < kids[i].started + STARTUP {
            continue;
        }
        match rng.below(10) {
            0..=4 => {
                // An advancer is killed only outside its hand-over of interrupted payloads.
                let advancer = kids[i].role == "advancer";
                if advancer
                    && shared
                        .guard()
                        .compare_exchange(0, 1, SeqCst, SeqCst)
                        .is_err()
                {
                    continue;
                }
                kids[i].child.kill().unwrap();
                kids[i].child.wait().unwrap();
                if advancer {
                    shared.guard().store(0, SeqCst);
                    owner_kills += 1;
                }
                kills += 1;
                let role = kids[i].role;
                kids[i] = run.spawn(role);
            }
            5..=7 => {
                signal(&kids[i], libc::SIGSTOP);
                kids[i].stopped_until = Some(now + Duration::from_millis(5 + rng.below(60)));
                stops += 1;
            }
            _ => {}
        }
    }
    // Wind down: continue the stopped, ask everyone to stop, then kill what is left.
    for kid in &mut kids {
        if kid.stopped_until.take().is_some() {
            signal(kid, libc::SIGCONT);
        }
    }
    shared.stop().store(1, SeqCst);
    let limit = Instant::now() + Duration::from_secs(10);
    for kid in &mut kids {
        while kid.child.try_wait().unwrap().is_none() && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(2));
        }
        if kid.child.try_wait().unwrap().is_none() {
            let _ = kid.child.kill();
            kid.child.wait().unwrap();
        }
    }
    for kid in &mut kids {
        let st = kid.child.wait().unwrap();
        assert!(
            st.success() || st.code().is_none(),
            "a {} child failed: {st}",
            kid.role
        );
    }

    // Take over (the last owner exited or died) and fire everything that is left.
    let ledger = Ledger::open(&run.ledger);
    let client = segment.attach().unwrap();
    let me = std::process::id();
    let mut adv = client.advancer().expect("the parent takes over");
    adv.recover();
    for p in adv.take_interrupted() {
        ledger.put(format!("Y {me} {p}"));
    }
    let far = client.now() + 1_000;
    adv.advance_to(far);
    adv.turn(|p| ledger.put(format!("X {me} {p} {far}")));
    adv.turn(|p| panic!("{p} fired on a second turn at one tick"));

    let text = std::fs::read_to_string(&run.ledger).unwrap();
    let summary = check_ledger(&text);
    eprintln!(
        "chaos: {kills} kills ({owner_kills} of advancers), {self_kills} at store points, \
         {stops} stops; {summary}; {:?}",
        client.stats()
    );
    steps::assert_no_leak(&client, &mut adv, CAPACITY, "after the chaos");
    drop(adv);
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[derive(Default)]
struct Payload {
    deadline: Option<u64>,
    scheduled: bool,
    refused: bool,
    fired: Vec<u64>,
    interrupted: usize,
    /// Cancels in ledger order: (process, op, fires logged before it began).
    cancels: Vec<(u32, u64, usize)>,
    won: usize,
    lost: usize,
}

/// Checks the ledger; returns a summary line.
fn check_ledger(text: &str) -> String {
    let mut ps: HashMap<u64, Payload> = HashMap::new();
    let mut handed: HashMap<(u32, u32), u64> = HashMap::new();
    let mut results: HashMap<(u32, u64), char> = HashMap::new();
    let mut owners = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| {
            f[i].parse::<u64>()
                .unwrap_or_else(|_| panic!("bad line {line:?}"))
        };
        if f[0] == "A" {
            owners += 1;
            continue;
        }
        let pid = num(1) as u32;
        let p = num(2);
        let e = ps.entry(p).or_default();
        match f[0] {
            "I" => e.deadline = Some(num(3)),
            "S" => {
                e.scheduled = true;
                let sg = (num(3) as u32, num(4) as u32);
                if let Some(q) = handed.insert(sg, p) {
                    panic!("(slot, generation) {sg:?} handed out twice: to {q} and {p}");
                }
            }
            "N" => e.refused = true,
            "C" => e.cancels.push((pid, num(3), e.fired.len() + e.interrupted)),
            "R" => {
                results.insert((pid, num(3)), f[4].chars().next().unwrap());
                if f[4] == "T" {
                    e.won += 1;
                } else {
                    e.lost += 1;
                }
                assert!(
                    e.fired.is_empty() && e.interrupted == 0 || f[4] == "F",
                    "payload {p}: a cancel returned true after it fired: {line}"
                );
            }
            "X" => {
                assert!(e.won == 0, "payload {p} fired after a cancel returned true");
                e.fired.push(num(3));
            }
            "Y" => {
                assert!(
                    e.won == 0,
                    "payload {p} handed over after a cancel returned true"
                );
                e.interrupted += 1;
            }
            other => panic!("bad record {other}"),
        }
    }
    let (mut fired, mut cancelled, mut doubt) = (0, 0, 0);
    for (p, e) in &ps {
        let d = e
            .deadline
            .unwrap_or_else(|| panic!("payload {p} has no intent"));
        assert!(
            !(e.refused && e.scheduled),
            "payload {p} refused and scheduled"
        );
        for &at in &e.fired {
            assert!(at >= d, "payload {p} due at {d} fired at {at}");
        }
        assert!(e.fired.len() <= 1, "payload {p} fired {:?}", e.fired);
        assert!(e.interrupted <= 1, "payload {p} interrupted twice");
        assert!(e.won <= 1, "payload {p}: {} cancels returned true", e.won);
        // A cancel begun after a fire was logged must have returned false.
        for &(pid, k, fires_before) in &e.cancels {
            if fires_before > 0 {
                assert_ne!(
                    results.get(&(pid, k)),
                    Some(&'T'),
                    "payload {p}: cancel {pid}/{k} began after the fire and returned true"
                );
            }
        }
        let ended = e.fired.len() + e.interrupted;
        if e.won == 1 || e.refused {
            assert_eq!(ended, 0, "payload {p} cancelled or refused, and fired");
            cancelled += usize::from(e.won == 1);
        } else if e.scheduled {
            // A cancel a kill interrupted may have won.
            let unanswered = e.cancels.len() - e.won - e.lost;
            assert!(
                ended >= 1 || unanswered > 0,
                "payload {p} scheduled, not cancelled, never fired"
            );
            if ended == 0 {
                doubt += 1;
            }
            fired += usize::from(ended >= 1);
        } else {
            // The scheduler died inside the schedule: armed or not.
            assert!(ended <= 2 && e.fired.len() <= 1, "payload {p}");
            doubt += 1;
        }
    }
    assert!(owners >= 2, "only {owners} owners: no takeover exercised");
    let unanswered: usize = ps.values().map(|e| e.cancels.len() - e.won - e.lost).sum();
    let unfinished = ps.values().filter(|e| !e.scheduled && !e.refused).count();
    format!(
        "{} payloads: {fired} fired, {cancelled} cancelled, {doubt} in doubt; {unfinished} \
         schedules and {unanswered} cancels cut short; {owners} owners",
        ps.len()
    )
}

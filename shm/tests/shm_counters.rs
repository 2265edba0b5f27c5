//! The counters every process writes (`Stats::scheduled`, `cancelled` and `full`, and `len()`
//! made from them), attacked from the public API: they are summed over every client however many
//! share a counter stripe (more clients than stripes, threads sharing one client, real processes,
//! the advancer's own client), lose no operation of a live process, never go down (clients
//! leaving, records reused, a process killed and its record reclaimed), count every client's
//! refusals of a full set, account with `fired` for every schedule, and never panic on counter
//! words overwritten with random bytes. This binary re-runs itself (`child_main`) for the tests
//! that need real processes.

#![cfg(not(loom))]

mod shm_util;

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use shm_util::{Rng, file_words, new_file, open_rw, scratch, spawn_child};
use tickwheel_shm::{Client, Config, Error, HEADER_BYTES, Handle, ScheduleError, Segment, Stats};

/// Records in the registry (crate doc: 1024), and stripes (64: `record % 64`).
const REGISTRY: usize = 1024;
const STRIPES: usize = 64;
/// A deadline no test's manual clock reaches unless it fires everything.
const FAR: u64 = 1 << 40;

const ROLE: &str = "TICKWHEEL_SHM_COUNTERS_ROLE";
/// Words of the progress file per child: scheduled, cancelled, full, ops, done.
const PER_CHILD: usize = 8;

/// What one client did, as it saw its calls return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    scheduled: u64,
    cancelled: u64,
    full: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.scheduled += o.scheduled;
        self.cancelled += o.cancelled;
        self.full += o.full;
    }

    fn of(s: &Stats) -> Tally {
        Tally {
            scheduled: s.scheduled,
            cancelled: s.cancelled,
            full: s.full,
        }
    }

    fn ops(&self) -> u64 {
        self.scheduled + self.cancelled + self.full
    }
}

/// Every observation of a set's counters, each checked against the one before: none goes down.
struct Watch {
    last: Stats,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            last: Stats::default(),
        }
    }

    fn look(&mut self, c: &Client) -> Stats {
        let s = c.stats();
        let l = self.last;
        assert!(
            s.scheduled >= l.scheduled
                && s.cancelled >= l.cancelled
                && s.full >= l.full
                && s.fired >= l.fired,
            "counters went down: {l:?} then {s:?}"
        );
        self.last = s;
        s
    }

    /// Looks, and checks the three striped counters against what the clients saw.
    fn exact(&mut self, c: &Client, want: Tally, what: &str) -> Stats {
        let s = self.look(c);
        assert_eq!(Tally::of(&s), want, "{what}: {s:?}");
        s
    }
}

/// Random schedules (far deadlines, so nothing fires) and cancels of `client`'s own live
/// timers, at most `keep` live at once, with now and then a second cancel of a cancelled one
/// (false, and not counted). `report` sees the tally after each call returned. Returns the
/// tally and the timers left pending.
fn churn(
    client: &Client,
    rng: &mut Rng,
    ops: u64,
    keep: usize,
    mut report: impl FnMut(&Tally) -> bool,
) -> (Tally, Vec<Handle>) {
    let mut t = Tally::default();
    let mut live: Vec<Handle> = Vec::new();
    let mut dead: Option<Handle> = None;
    let mut i = 0;
    while i < ops {
        i += 1;
        let r = rng.below(100);
        if live.is_empty() || (r < 55 && live.len() < keep) {
            let payload = rng.next();
            match client.schedule_at(FAR + rng.below(1000), payload) {
                Ok(h) => {
                    live.push(h);
                    t.scheduled += 1;
                }
                Err(ScheduleError::Full(p)) => {
                    assert_eq!(p, payload);
                    t.full += 1;
                }
                Err(e) => panic!("schedule: {e}"),
            }
        } else if let (true, Some(h)) = (r >= 95, dead) {
            assert!(!client.cancel(h), "a second cancel returned true");
        } else {
            let h = live.swap_remove(rng.below(live.len() as u64) as usize);
            assert!(client.cancel(h), "the cancel of a pending timer failed");
            t.cancelled += 1;
            dead = Some(h);
        }
        if !report(&t) {
            break;
        }
    }
    (t, live)
}

/// A generator per seed: distinct seeds give distinct streams (`Rng::new` sets the low bit).
fn rng(seed: u64) -> Rng {
    Rng::new((seed << 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn churned(client: &Client, seed: u64, ops: u64, keep: usize) -> (Tally, Vec<Handle>) {
    churn(client, &mut rng(seed), ops, keep, |_| true)
}

/// Entry point of the child processes; a no-op in a normal test run. A child opens the set by
/// path, attaches for itself, churns, and reports its tally in the progress file after every
/// call; `SHM_OPS=0` churns until killed, `SHM_IDLE=1` waits to be killed once done.
#[test]
fn child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "churn");
    let var = |k: &str| std::env::var(k).unwrap();
    let child: usize = var("SHM_CHILD").parse().unwrap();
    let ops: u64 = var("SHM_OPS").parse().unwrap();
    let words = file_words(&open_rw(Path::new(&var("SHM_PROGRESS"))), 8 * PER_CHILD);
    let me = &words[child * PER_CHILD..(child + 1) * PER_CHILD];
    let segment = Segment::open_file(var("SHM_SET")).unwrap();
    let client = segment.attach().unwrap();
    // A child the parent forgot ends by itself.
    let limit = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let ops = if ops == 0 { u64::MAX } else { ops };
    churn(&client, &mut rng(0xc0de + child as u64), ops, 16, |t| {
        me[0].store(t.scheduled, SeqCst);
        me[1].store(t.cancelled, SeqCst);
        me[2].store(t.full, SeqCst);
        n += 1;
        me[3].store(n, SeqCst);
        n % 1024 != 0 || Instant::now() < limit
    });
    me[4].store(1, SeqCst);
    if var("SHM_IDLE") == "1" {
        while Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A file-backed set and a progress file for up to 8 children, removed at the end.
struct Procs {
    dir: std::path::PathBuf,
    set: std::path::PathBuf,
    progress_path: std::path::PathBuf,
    progress: &'static [AtomicU64],
    segment: Segment,
}

impl Procs {
    fn new(name: &str, capacity: usize) -> Procs {
        let dir = scratch(name);
        let set = dir.join("timers");
        let progress_path = dir.join("progress");
        let progress = file_words(&new_file(&progress_path, 8 * PER_CHILD * 8), 8 * PER_CHILD);
        let segment = Segment::create_file(&set, &Config::new(capacity).manual_clock()).unwrap();
        Procs {
            dir,
            set,
            progress_path,
            progress,
            segment,
        }
    }

    fn spawn(&self, child: usize, ops: u64, idle: bool) -> Child {
        spawn_child(
            "child_main",
            &[
                (ROLE, "churn".to_string()),
                ("SHM_SET", self.set.display().to_string()),
                ("SHM_PROGRESS", self.progress_path.display().to_string()),
                ("SHM_CHILD", child.to_string()),
                ("SHM_OPS", ops.to_string()),
                ("SHM_IDLE", if idle { "1" } else { "0" }.to_string()),
            ],
        )
    }

    fn word(&self, child: usize, w: usize) -> u64 {
        self.progress[child * PER_CHILD + w].load(SeqCst)
    }

    fn reported(&self, child: usize) -> Tally {
        Tally {
            scheduled: self.word(child, 0),
            cancelled: self.word(child, 1),
            full: self.word(child, 2),
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// Catches: `stats()` summing fewer than all 64 stripes (an off-by-one range, stripe 0 only);
// a client counting in `record` rather than `record % STRIPES` (records 64 and up then count
// outside the stripes, into slot memory, or panic); a shared stripe overwritten instead of added
// to (records k and k + 64); a stripe zeroed when its record is given up or taken again.
#[test]
fn more_clients_than_stripes_reused_records_and_a_full_registry_count_exactly() {
    let segment = Segment::anonymous(&Config::new(4096).manual_clock()).unwrap();
    let mut watch = Watch::new();
    let mut want = Tally::default();
    let mut pending: Vec<Handle> = Vec::new();
    let mut clients: Vec<Option<Client>> =
        (0..70).map(|_| Some(segment.attach().unwrap())).collect();
    let observer = segment.attach().unwrap(); // record 70
    for (i, c) in clients.iter().enumerate() {
        // A different number of operations per client, so no two stripes' counts are alike.
        let (t, live) = churned(c.as_ref().unwrap(), 1 + i as u64, 20 + 3 * i as u64, 8);
        want.add(t);
        pending.extend(live);
        let s = watch.exact(&observer, want, &format!("after client {i}"));
        assert_eq!(observer.len() as u64, s.scheduled - s.cancelled);
        assert_eq!(observer.len(), pending.len());
    }
    // Cancels of other clients' timers count where the canceller counts: still in the totals.
    for h in pending.drain(..40) {
        assert!(clients[69].as_ref().unwrap().cancel(h));
        want.cancelled += 1;
    }
    watch.exact(&observer, want, "after cross-client cancels");
    // Records 0, 5, 63, 64 and 69 given up: their stripes keep their counts.
    for i in [0, 5, 63, 64, 69] {
        clients[i] = None;
        watch.exact(&observer, want, &format!("after dropping client {i}"));
    }
    // New clients take those records again (lowest free first) and add to the same stripes.
    for k in 0..5 {
        let c = segment.attach().unwrap();
        let (t, live) = churned(&c, 100 + k, 37 + k, 8);
        want.add(t);
        pending.extend(live);
        watch.exact(&observer, want, &format!("after re-attached client {k}"));
        clients.push(Some(c));
    }
    // Every other record: 1024 clients, so each stripe is shared by 16.
    let mut fillers = Vec::new();
    loop {
        match segment.attach() {
            Ok(c) => fillers.push(c),
            Err(Error::RegistryFull) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(fillers.len(), REGISTRY - 71, "records taken");
    for (i, c) in fillers.iter().enumerate() {
        for _ in 0..1 + i % 3 {
            let h = c.schedule_at(FAR, i as u64).unwrap();
            want.scheduled += 1;
            if i % 2 == 0 {
                assert!(c.cancel(h));
                want.cancelled += 1;
            } else {
                pending.push(h);
            }
        }
    }
    let s = watch.exact(&observer, want, "with the registry full");
    assert_eq!(observer.len(), pending.len(), "{s:?}");
    drop(fillers);
    drop(clients);
    watch.exact(&observer, want, "after every other client left");
    // Everything still pending is a real timer: cancelling it all empties the set exactly.
    for h in pending.drain(..) {
        assert!(observer.cancel(h));
        want.cancelled += 1;
    }
    watch.exact(&observer, want, "after cancelling the rest");
    assert!(observer.is_empty());
}

// Catches: counting as a load and a store (not one atomic read-modify-write), which loses counts
// when threads share a client, or when clients on one stripe (records 0 and 64, and the
// advancer's client, which counts in the stripe of the client it was made from) count at once;
// `full` counted only sometimes, or the advancer's client counting somewhere `stats()` does not
// sum.
#[test]
fn threads_sharing_one_client_or_one_stripe_lose_no_count() {
    const THREADS: u64 = 4;
    const OPS: u64 = 50_000;
    // One client, four threads, 64 slots for up to 96 live timers: some schedules are refused.
    let segment = Segment::anonymous(&Config::new(64).manual_clock()).unwrap();
    let client = segment.attach().unwrap();
    let mut watch = Watch::new();
    let (want, left) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let client = &client;
                s.spawn(move || churned(client, 0x7e57 + t, OPS, 24))
            })
            .collect();
        while !workers.iter().all(|w| w.is_finished()) {
            watch.look(&client);
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut want = Tally::default();
        let mut left = 0;
        for w in workers {
            let (t, live) = w.join().unwrap();
            want.add(t);
            left += live.len();
        }
        (want, left)
    });
    assert!(want.full > 0, "the set never filled: {want:?}");
    let s = watch.exact(&client, want, "one client shared by threads");
    assert_eq!(client.len(), left, "{s:?}");

    // Records 0 and 64 share stripe 0, and so does the advancer made from record 0's client.
    let segment = Segment::anonymous(&Config::new(4096).manual_clock()).unwrap();
    let a = segment.attach().unwrap();
    let fillers: Vec<Client> = (1..STRIPES).map(|_| segment.attach().unwrap()).collect();
    let b = segment.attach().unwrap();
    let adv = a.advancer().unwrap();
    let mut watch = Watch::new();
    let want = std::thread::scope(|s| {
        let workers: Vec<_> = [&a, &b, adv.client(), &a, &b, adv.client()]
            .into_iter()
            .enumerate()
            .map(|(t, c)| s.spawn(move || churned(c, 0x5a3e + t as u64, OPS / 2, 16).0))
            .collect();
        while !workers.iter().all(|w| w.is_finished()) {
            watch.look(&b);
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut want = Tally::default();
        for w in workers {
            want.add(w.join().unwrap());
        }
        want
    });
    watch.exact(&fillers[0], want, "three clients on stripe 0");
}

// Catches: a killed process's counts dropped or zeroed (when it dies, when the owner recovers),
// counts a process never made (an operation counted twice, or in two stripes), and, with the
// parent's threads counting on the stripes of the children (records k and k + 64) at the same
// time, a shared stripe's counts lost between processes.
#[test]
fn processes_killed_or_exiting_keep_their_counts() {
    const KIDS: usize = 4;
    let p = Procs::new("counters-kill", 4096);
    // Records 0 to 63 here, so the children take records 64 and up: stripes 0 to 3 again.
    let parent: Vec<Client> = (0..STRIPES).map(|_| p.segment.attach().unwrap()).collect();
    let mut watch = Watch::new();
    // Children 0 and 1 run a fixed number of operations and exit; 2 and 3 run until killed.
    let mut kids: Vec<Child> = (0..KIDS)
        .map(|c| p.spawn(c, if c < 2 { 20_000 } else { 0 }, false))
        .collect();
    let mut exited = [false; KIDS];
    let started = Instant::now();
    let progress = p.progress;
    let mine = std::thread::scope(|s| {
        let workers: Vec<_> = parent[..KIDS]
            .iter()
            .enumerate()
            .map(|(t, c)| {
                s.spawn(move || {
                    // Start once every child counts, so that the stripes are written by both.
                    while (0..KIDS).any(|k| progress[k * PER_CHILD + 3].load(SeqCst) == 0) {
                        assert!(started.elapsed() < Duration::from_secs(20), "no child ran");
                        std::thread::yield_now();
                    }
                    churned(c, 0xfa7e + t as u64, 6000, 16).0
                })
            })
            .collect();
        while exited.iter().any(|e| !e) || !workers.iter().all(|w| w.is_finished()) {
            assert!(started.elapsed() < Duration::from_secs(30), "children hang");
            watch.look(&parent[KIDS]);
            std::thread::sleep(Duration::from_micros(200));
            for (c, kid) in kids.iter_mut().enumerate() {
                if exited[c] {
                    continue;
                }
                if c >= 2 && p.word(c, 3) >= 3000 && workers.iter().all(|w| w.is_finished()) {
                    kid.kill().unwrap();
                    kid.wait().unwrap();
                    exited[c] = true;
                } else if let Some(st) = kid.try_wait().unwrap() {
                    assert!(c < 2, "child {c} ended by itself: {st}");
                    assert!(st.success(), "child {c} failed: {st}");
                    exited[c] = true;
                }
            }
        }
        let mut mine = Tally::default();
        for w in workers {
            mine.add(w.join().unwrap());
        }
        mine
    });
    let mut exact = mine;
    for c in 0..2 {
        assert_eq!(p.word(c, 4), 1, "child {c} did not finish");
        exact.add(p.reported(c));
    }
    let mut least = exact;
    for c in 2..KIDS {
        least.add(p.reported(c));
    }
    let check = |s: &Stats, what: &str| {
        let got = Tally::of(s);
        // A killed child may have been killed after its call counted, before it reported.
        let slack = (KIDS - 2) as u64;
        assert!(
            got.scheduled >= least.scheduled
                && got.cancelled >= least.cancelled
                && got.full == least.full
                && got.ops() <= least.ops() + slack,
            "{what}: counters {got:?}, the processes reported {least:?}"
        );
    };
    let s = watch.look(&parent[KIDS]);
    eprintln!(
        "in {:?}: parent {mine:?}, children {:?}, counters {s:?}",
        started.elapsed(),
        (0..KIDS).map(|c| p.reported(c)).collect::<Vec<_>>()
    );
    check(&s, "after the children ended");
    // Repairing what the killed children left changes no striped counter.
    let mut adv = parent[KIDS + 1].advancer().unwrap();
    let r = adv.recover();
    let after = watch.look(&parent[KIDS]);
    check(&after, &format!("after recovery {r:?}"));
    assert_eq!(Tally::of(&after), Tally::of(&s), "recovery moved a counter");
}

// Catches: a record reclaimed from a dead process (the owner's liveness look and recovery) or
// taken again by a new client taking its stripe's counts with it (zeroed, or subtracted).
#[test]
fn a_killed_process_whose_record_is_reclaimed_keeps_its_counts() {
    let p = Procs::new("counters-reclaim", 2048);
    let owner = p.segment.attach().unwrap(); // record 0
    let (mut want, mut live) = churned(&owner, 0x0e1, 300, 8);
    let mut watch = Watch::new();
    watch.exact(&owner, want, "the owner's own");
    let mut kid = p.spawn(0, 2500, true); // record 1: stripe 1
    let limit = Instant::now() + Duration::from_secs(20);
    while p.word(0, 4) != 1 {
        assert!(Instant::now() < limit, "the child never finished");
        assert!(kid.try_wait().unwrap().is_none(), "the child ended early");
        watch.look(&owner);
        std::thread::sleep(Duration::from_millis(1));
    }
    let theirs = p.reported(0);
    assert!(theirs.scheduled > 0 && theirs.cancelled > 0, "{theirs:?}");
    want.add(theirs);
    watch.exact(&owner, want, "the child done");
    kid.kill().unwrap();
    kid.wait().unwrap();
    watch.exact(&owner, want, "the child killed");
    // The owner's liveness look (every 100 ms of its turns) frees the dead child's record and
    // recovers; an explicit recovery too.
    let mut adv = owner.advancer().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    adv.turn(|p| panic!("{p} fired"));
    adv.recover();
    watch.exact(&owner, want, "the child's record reclaimed");
    // The next client takes record 1 (the lowest free), the dead child's stripe.
    let next = p.segment.attach().unwrap();
    let (t, l) = churned(&next, 0x0e2, 400, 8);
    want.add(t);
    live.extend(l);
    watch.exact(&owner, want, "the dead child's record taken again");
    let mut fillers = Vec::new();
    while let Ok(c) = p.segment.attach() {
        fillers.push(c);
    }
    assert_eq!(
        fillers.len(),
        REGISTRY - 2,
        "the dead child's record was not reclaimed (or the next client did not take it)"
    );
    for (i, c) in fillers.iter().enumerate() {
        let h = c.schedule_at(FAR, i as u64).unwrap();
        assert!(c.cancel(h));
    }
    want.scheduled += fillers.len() as u64;
    want.cancelled += fillers.len() as u64;
    drop(fillers);
    let s = watch.exact(&owner, want, "every record used");
    // The child's pending timers are still counted, so len() is at least this process's.
    assert!(owner.len() >= live.len(), "{s:?}");
    assert_eq!(owner.len() as u64, s.scheduled - s.cancelled);
}

// Catches: refusals counted in one stripe only, or in a stripe `stats()` does not sum; a
// refusal counted as a schedule (the wrong word of the stripe); a refusal not counted at all
// for one of the clients or for the advancer's own client.
#[test]
fn full_refusals_of_every_client_are_counted() {
    let segment = Segment::anonymous(&Config::new(3).manual_clock()).unwrap();
    let a = segment.attach().unwrap(); // stripe 0
    let b = segment.attach().unwrap(); // stripe 1
    let adv = a.advancer().unwrap(); // stripe 0 again
    let mut watch = Watch::new();
    let ha: Vec<Handle> = (0..2).map(|i| a.schedule_at(FAR, i).unwrap()).collect();
    let hb = b.schedule_at(FAR, 2).unwrap();
    let mut want = Tally {
        scheduled: 3,
        ..Tally::default()
    };
    watch.exact(&b, want, "the set filled");
    for (c, n) in [(&a, 5), (&b, 7), (adv.client(), 2)] {
        for i in 0..n {
            match c.schedule_at(FAR, 100 + i) {
                Err(ScheduleError::Full(p)) => assert_eq!(p, 100 + i),
                other => panic!("a schedule into a full set: {other:?}"),
            }
            want.full += 1;
            watch.exact(&a, want, "refused");
        }
    }
    assert_eq!(a.len(), 3);
    assert!(b.cancel(hb));
    want.cancelled += 1;
    let hb = b.schedule_at(FAR, 3).unwrap();
    want.scheduled += 1;
    assert!(b.schedule_at(FAR, 4).is_err());
    want.full += 1;
    watch.exact(&a, want, "a slot freed and taken again");
    for h in ha.into_iter().chain([hb]) {
        assert!(adv.client().cancel(h));
        want.cancelled += 1;
    }
    let s = watch.exact(&b, want, "all cancelled");
    assert!(b.is_empty(), "{s:?}");
    assert_eq!(s.full, 15);
}

/// Byte ranges of a file-backed set holding counters: line 5 (stripe 0) and line 6 (the
/// owner's), and the 63 lines of stripes 1 and up between the registry's end (128 bytes x 7 +
/// 8 x 1024 = 9,088, the old header's size) and the first slot.
const COUNTER_BYTES: [std::ops::Range<usize>; 2] = [5 * 128..7 * 128, 9_088..HEADER_BYTES];

// Catches: a sum of the stripes, or `len()`, that overflows (a panic in a debug build) on
// counter words that hold any value; a sum that saturates (the counts of live processes are
// then lost: a schedule stops moving the total); a counter that stops counting once its word
// was overwritten.
#[test]
fn random_bytes_over_the_counter_words_never_panic_or_stop_the_counting() {
    assert_eq!(HEADER_BYTES, 17_152);
    let dir = scratch("counters-corrupt");
    let path = dir.join("timers");
    let segment = Segment::create_file(&path, &Config::new(512).manual_clock()).unwrap();
    let file = open_rw(&path);
    let a = segment.attach().unwrap();
    let b = segment.attach().unwrap();
    let mut adv = a.advancer().unwrap();
    let mut rng = rng(0xbad_c0de);
    let mut now = 0;
    let mut live: Vec<Handle> = Vec::new();
    for round in 0..300 {
        match round % 10 {
            // Every counter word all ones: every sum wraps.
            0 => {
                for r in &COUNTER_BYTES {
                    file.write_all_at(&vec![0xff; r.len()], r.start as u64)
                        .unwrap();
                }
            }
            // Every stripe's words just below 2^63 or 2^64.
            1 => {
                let v = if rng.below(2) == 0 {
                    u64::MAX - 3
                } else {
                    1 << 63
                };
                for at in (COUNTER_BYTES[1].start..COUNTER_BYTES[1].end).step_by(8) {
                    file.write_all_at(&v.to_le_bytes(), at as u64).unwrap();
                }
            }
            _ => {
                for _ in 0..1 + rng.below(6) {
                    let r = &COUNTER_BYTES[rng.below(2) as usize];
                    let at = r.start + rng.below(r.len() as u64) as usize;
                    let len = (1 + rng.below(8) as usize).min(r.end - at);
                    let bytes: Vec<u8> = (0..len)
                        .map(|_| match rng.below(3) {
                            0 => 0xff,
                            _ => rng.next() as u8,
                        })
                        .collect();
                    file.write_all_at(&bytes, at as u64).unwrap();
                }
            }
        }
        let before = a.stats();
        let _ = (a.len(), b.is_empty(), adv.client().len());
        let mut did = Tally::default();
        let mut fired = 0;
        for _ in 0..rng.below(12) {
            let c = if rng.below(2) == 0 { &a } else { &b };
            if live.is_empty() || rng.below(3) != 0 {
                live.push(c.schedule_at(now + 1 + rng.below(4), 0).unwrap());
                did.scheduled += 1;
            } else {
                let h = live.swap_remove(rng.below(live.len() as u64) as usize);
                if c.cancel(h) {
                    did.cancelled += 1;
                }
            }
        }
        now += rng.below(3);
        adv.advance_to(now);
        adv.turn(|_| fired += 1);
        let after = b.stats();
        let _ = (a.len(), b.len(), a.is_empty());
        let moved = Tally {
            scheduled: after.scheduled.wrapping_sub(before.scheduled),
            cancelled: after.cancelled.wrapping_sub(before.cancelled),
            full: after.full.wrapping_sub(before.full),
        };
        assert_eq!(moved, did, "round {round}: {before:?} then {after:?}");
        assert_eq!(
            after.fired.wrapping_sub(before.fired),
            fired,
            "round {round}"
        );
    }
    // Closed and opened again, with every counter word all ones.
    drop((adv, a, b, segment));
    for r in &COUNTER_BYTES {
        file.write_all_at(&vec![0xff; r.len()], r.start as u64)
            .unwrap();
    }
    let segment = Segment::open_file(&path).unwrap();
    let c = segment.attach().unwrap();
    let before = c.stats();
    let _ = (c.len(), c.is_empty());
    c.schedule_at(FAR, 1).unwrap();
    assert!(c.schedule_at(FAR, 2).is_ok_and(|h| c.cancel(h)));
    let after = c.stats();
    assert_eq!(after.scheduled.wrapping_sub(before.scheduled), 2);
    assert_eq!(after.cancelled.wrapping_sub(before.cancelled), 1);
    let _ = c.len();
    drop((c, segment));
    let _ = std::fs::remove_dir_all(&dir);
}

// Catches: `fired` counted for a fire whose CAS lost to a cancel (or not counted for one that
// won), `cancelled` counted for a cancel that returned false, `len()` made from the wrong words,
// and the advancer's own schedules and cancels counted nowhere `stats()` sums.
#[test]
fn fired_cancelled_and_pending_account_for_every_schedule() {
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum St {
        Pending,
        Fired,
        Cancelled,
    }
    let segment = Segment::anonymous(&Config::new(256).manual_clock()).unwrap();
    let a = segment.attach().unwrap();
    let b = segment.attach().unwrap();
    let mut adv = a.advancer().unwrap();
    let mut rng = rng(0xf12e);
    let mut watch = Watch::new();
    let mut ledger: HashMap<u64, (u64, St)> = HashMap::new();
    let mut handles: Vec<(u64, Handle)> = Vec::new();
    let (mut scheduled, mut cancelled, mut fired) = (0u64, 0u64, 0u64);
    let mut now = 0;
    let mut next = 0;
    for round in 0..200 {
        for _ in 0..rng.below(8) {
            let deadline = now + rng.below(10);
            next += 1;
            let c = match rng.below(3) {
                0 => &a,
                1 => &b,
                _ => adv.client(),
            };
            if let Ok(h) = c.schedule_at(deadline, next) {
                ledger.insert(next, (deadline, St::Pending));
                handles.push((next, h));
                scheduled += 1;
            }
        }
        // Cancels of random handles: pending ones (some already due, not yet fired), fired
        // ones and cancelled ones.
        for _ in 0..rng.below(4) {
            if handles.is_empty() {
                break;
            }
            let (p, h) = handles[rng.below(handles.len() as u64) as usize];
            let c = if rng.below(2) == 0 { &b } else { adv.client() };
            let won = c.cancel(h);
            let st = &mut ledger.get_mut(&p).unwrap().1;
            assert_eq!(won, *st == St::Pending, "cancel of {p} ({st:?})");
            if won {
                *st = St::Cancelled;
                cancelled += 1;
            }
        }
        now += rng.below(4);
        adv.advance_to(now);
        adv.turn(|p| {
            let (deadline, st) = ledger.get_mut(&p).expect("fired a payload never scheduled");
            assert!(
                *st == St::Pending && *deadline <= now,
                "{p}: {st:?}, due {deadline}"
            );
            *st = St::Fired;
            fired += 1;
        });
        let pending = ledger.values().filter(|(_, st)| *st == St::Pending).count();
        let s = watch.look(&b);
        assert_eq!(
            (s.scheduled, s.cancelled, s.fired),
            (scheduled, cancelled, fired),
            "round {round}"
        );
        assert_eq!(s.scheduled, s.fired + s.cancelled + a.len() as u64);
        assert_eq!(a.len(), pending, "round {round}: {s:?}");
        if round % 50 == 49 {
            handles.retain(|(p, _)| ledger[p].1 == St::Pending);
        }
    }
    adv.advance_to(now + 100);
    adv.turn(|p| {
        assert_eq!(
            ledger.insert(p, (0, St::Fired)).map(|x| x.1),
            Some(St::Pending)
        );
        fired += 1;
    });
    let s = watch.look(&a);
    assert_eq!(
        (s.scheduled, s.cancelled, s.fired),
        (scheduled, cancelled, fired)
    );
    assert_eq!(s.scheduled, s.fired + s.cancelled);
    assert!(
        a.is_empty() && b.is_empty() && adv.client().is_empty(),
        "{s:?}"
    );
    assert!(
        s.fired > 100 && s.cancelled > 30,
        "too little happened: {s:?}"
    );
}

//! Random bytes written into each region of a live and of a closed set (header, records, free
//! stack, bitmaps, owner word and registry), then every operation, each case in a child process
//! under a watchdog: errors are allowed; a panic, a hang or a wrong fire fails the test. A wrong
//! fire is a payload fired twice, fired after its cancel returned true, fired before its
//! deadline, or never scheduled, unless the bytes hit that timer's own record. One test in this
//! binary, so nothing else runs while it forks.

#![cfg(not(loom))]

mod shm_util;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shm_util::Rng;
use tickwheel_shm::{
    Advancer, Client, Config, HEADER_BYTES, Handle, SLOT_BYTES, Segment, bytes_for,
};

/// Two bitmap levels (16 leaf words under one top word): bits past a level's end are possible.
const CAPACITY: usize = 1000;
/// Cases per region and per state (live, closed).
const CASES: u64 = 300;
/// A case that takes longer hangs.
const WATCHDOG: Duration = Duration::from_secs(5);
/// Bytes of the header line, of the clock and counter lines, of the free-stack line, of the
/// owner line and of the registry (see the layout table in the crate's `shm::layout`).
const LINE: usize = 128;
/// The manual clock word, and the header's tick length (which turns a manual clock into
/// `CLOCK_MONOTONIC`): bytes there change what "before its deadline" means.
const CLOCK: std::ops::Range<usize> = 4 * LINE..4 * LINE + 8;
const TICK: std::ops::Range<usize> = 24..32;

#[derive(Clone, Copy, Debug)]
enum Region {
    Header,
    Records,
    FreeStack,
    Bitmaps,
    Owner,
}

const REGIONS: [Region; 5] = [
    Region::Header,
    Region::Records,
    Region::FreeStack,
    Region::Bitmaps,
    Region::Owner,
];

/// What the case knows about each payload it scheduled.
#[derive(Default)]
struct Ledger {
    /// payload -> (deadline, slot)
    scheduled: HashMap<u64, (u64, u32)>,
    cancelled: HashSet<u64>,
    fired: HashMap<u64, u32>,
    handles: Vec<(u64, Handle)>,
    /// Slots whose record (state, deadline, payload) the bytes hit.
    hit_slots: HashSet<u32>,
    /// Some record was hit: a fired payload nobody scheduled may come from its payload word.
    records_hit: bool,
    clock_hit: bool,
    /// The highest tick the case moved the clock to.
    now: u64,
    next_payload: u64,
    wrong: Vec<String>,
}

impl Ledger {
    fn exempt(&self, payload: u64) -> bool {
        self.scheduled
            .get(&payload)
            .is_some_and(|(_, s)| self.hit_slots.contains(s))
    }

    fn on_fire(&mut self, payload: u64) {
        let n = self.fired.entry(payload).or_insert(0);
        *n += 1;
        let n = *n;
        let Some(&(deadline, slot)) = self.scheduled.get(&payload) else {
            if !self.records_hit {
                self.wrong
                    .push(format!("fired {payload:#x}, never scheduled"));
            }
            return;
        };
        if self.hit_slots.contains(&slot) {
            return;
        }
        if n > 1 {
            self.wrong
                .push(format!("{payload:#x} (slot {slot}) fired {n} times"));
        }
        if self.cancelled.contains(&payload) {
            self.wrong.push(format!(
                "{payload:#x} (slot {slot}) fired after a true cancel"
            ));
        }
        if !self.clock_hit && deadline > self.now {
            self.wrong.push(format!(
                "{payload:#x} (slot {slot}) fired at {} before its deadline {deadline}",
                self.now
            ));
        }
    }

    fn schedule(&mut self, client: &Client, rng: &mut Rng) {
        self.next_payload += 1;
        // Payloads far apart, so that a few changed bytes do not turn one into another.
        let payload = self.next_payload.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1 << 63;
        let deadline = self.now + rng.below(40);
        if let Ok(h) = client.schedule_at(deadline, payload) {
            let slot = (h.to_u128() >> 32) as u32;
            self.scheduled.insert(payload, (deadline, slot));
            self.handles.push((payload, h));
        }
    }

    fn cancel(&mut self, client: &Client, rng: &mut Rng) {
        if self.handles.is_empty() {
            return;
        }
        let (payload, h) = self
            .handles
            .swap_remove(rng.below(self.handles.len() as u64) as usize);
        if client.cancel(h) {
            if !self.exempt(payload) && self.fired.contains_key(&payload) {
                self.wrong
                    .push(format!("cancel of fired {payload:#x} returned true"));
            }
            self.cancelled.insert(payload);
        }
    }

    fn turn(&mut self, adv: &mut Advancer, ticks: u64) {
        self.now += ticks;
        adv.advance_to(self.now);
        let mut got = Vec::new();
        adv.turn(|p| got.push(p));
        for p in adv.take_interrupted() {
            // A fire begun and not finished: counted once, as the handler would.
            got.push(p);
        }
        for p in got {
            self.on_fire(p);
        }
    }
}

/// Attaches as `pid`; segments judge liveness by a probe (pids 100 and 200 are alive).
fn probed(segment: Segment) -> Segment {
    segment.with_liveness_probe(Arc::new(|pid| pid == 100 || pid == 200))
}

/// Byte ranges of `region` in a set of `CAPACITY` slots, `used` of them ever used.
fn ranges(region: Region, used: usize) -> Vec<std::ops::Range<usize>> {
    let slots = HEADER_BYTES;
    let slot = |s: usize| slots + s * SLOT_BYTES;
    match region {
        Region::Header => vec![0..LINE, 3 * LINE..7 * LINE],
        Region::FreeStack => {
            let mut r: Vec<_> = std::iter::once(LINE..2 * LINE).collect();
            r.extend((0..used).map(|s| slot(s) + 24..slot(s) + 32));
            r
        }
        Region::Owner => vec![2 * LINE..3 * LINE, 7 * LINE..HEADER_BYTES],
        Region::Records => (0..used).map(|s| slot(s)..slot(s) + 24).collect(),
        Region::Bitmaps => std::iter::once(slot(CAPACITY)..bytes_for(CAPACITY)).collect(),
    }
}

/// Writes 1 to 6 runs of random bytes into `region`; records in `ledger` what they hit.
fn corrupt(file: &File, region: Region, used: usize, rng: &mut Rng, ledger: &mut Ledger) {
    let ranges = ranges(region, used.max(1));
    if matches!(region, Region::FreeStack) && rng.below(3) == 0 {
        // Links that close a loop: a slot to itself or to another used slot, and sometimes the
        // head onto it (random bytes seldom make one).
        let s = rng.below(used as u64);
        let to = if rng.below(2) == 0 {
            s
        } else {
            rng.below(used as u64)
        };
        let link = rng.below(4) << 32 | to;
        let at = HEADER_BYTES + s as usize * SLOT_BYTES + 24;
        file.write_all_at(&link.to_le_bytes(), at as u64).unwrap();
        if rng.below(2) == 0 {
            let head = rng.next() << 32 | s;
            file.write_all_at(&head.to_le_bytes(), LINE as u64).unwrap();
        }
        if rng.below(2) == 0 {
            return;
        }
    }
    for _ in 0..1 + rng.below(6) {
        let r = &ranges[rng.below(ranges.len() as u64) as usize];
        let at = r.start + rng.below((r.end - r.start) as u64) as usize;
        let len = (1 + rng.below(8) as usize).min(r.end - at);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(4) {
                0 => 0xff,
                1 => 0,
                _ => rng.next() as u8,
            })
            .collect();
        file.write_all_at(&bytes, at as u64).unwrap();
        if matches!(region, Region::Records) {
            ledger.records_hit = true;
            ledger
                .hit_slots
                .insert(((at - HEADER_BYTES) / SLOT_BYTES) as u32);
        }
        if [&CLOCK, &TICK]
            .iter()
            .any(|c| at < c.end && at + len > c.start)
        {
            ledger.clock_hit = true;
        }
    }
}

/// Random operations of two processes on the set: schedules, cancels (of real, stale and made-up
/// handles), turns, recoveries, a takeover attempt, counters.
fn operate(segment: &Segment, adv: Option<Advancer>, ledger: &mut Ledger, rng: &mut Rng) {
    let Ok(a) = segment.attach_as(100) else {
        return;
    };
    let Ok(b) = segment.attach_as(200) else {
        return;
    };
    let mut advs: Vec<Advancer> = adv.into_iter().collect();
    if advs.is_empty()
        && let Ok(adv) = a.advancer()
    {
        advs.push(adv);
    }
    for adv in &mut advs {
        ledger.turn(adv, 0);
    }
    for _ in 0..300 {
        match rng.below(20) {
            0..=7 => ledger.schedule(if rng.below(2) == 0 { &a } else { &b }, rng),
            8..=11 => ledger.cancel(&b, rng),
            12..=15 => {
                let ticks = rng.below(10);
                for adv in &mut advs {
                    ledger.turn(adv, ticks);
                }
            }
            16 => {
                for adv in &mut advs {
                    adv.recover();
                }
            }
            17 => {
                let _ = b.cancel(Handle::from_u128(
                    u128::from(rng.next()) << 64 | u128::from(rng.next()),
                ));
            }
            18 => {
                if let Ok(adv) = b.advancer() {
                    advs.push(adv);
                }
            }
            _ => {
                let _ = (a.stats(), a.len(), a.now());
            }
        }
    }
    for adv in &mut advs {
        adv.recover();
        ledger.turn(adv, 100);
    }
}

/// One case: build a set in a memfd, use it, corrupt it (live, or after every user went), use
/// it again. Runs in a forked child; returns what went wrong.
fn case(region: Region, live: bool, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ seed >> 29);
    let mut ledger = Ledger::default();
    let segment = probed(Segment::memfd(&Config::new(CAPACITY).manual_clock(), "corrupt").unwrap());
    let file = File::from(segment.fd().unwrap().try_clone_to_owned().unwrap());
    let a = segment.attach_as(100).unwrap();
    let b = segment.attach_as(200).unwrap();
    let mut adv = a.advancer().unwrap();
    for _ in 0..rng.below(400) {
        match rng.below(10) {
            0..=5 => ledger.schedule(&b, &mut rng),
            6..=7 => ledger.cancel(&b, &mut rng),
            _ => ledger.turn(&mut adv, rng.below(5)),
        }
    }
    assert!(
        ledger.wrong.is_empty(),
        "before corruption: {:?}",
        ledger.wrong
    );
    let used = ledger
        .scheduled
        .values()
        .map(|&(_, s)| s as usize + 1)
        .max()
        .unwrap_or(1);
    if live {
        corrupt(&file, region, used, &mut rng, &mut ledger);
        operate(&segment, Some(adv), &mut ledger, &mut rng);
    } else {
        drop((adv, a, b, segment));
        corrupt(&file, region, used, &mut rng, &mut ledger);
        if let Ok(segment) = Segment::from_fd(OwnedFd::from(file)) {
            operate(&probed(segment), None, &mut ledger, &mut rng);
        }
    }
    ledger.wrong
}

#[test]
fn random_bytes_in_every_region_never_panic_hang_or_fire_wrongly() {
    let started = Instant::now();
    let base = std::env::var("SHM_CORRUPT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c0de_u64);
    let mut failures = Vec::new();
    let mut cases = 0;
    for (r, &region) in REGIONS.iter().enumerate() {
        for live in [true, false] {
            for i in 0..CASES {
                let seed = base ^ (r as u64) << 48 ^ u64::from(live) << 40 ^ i;
                cases += 1;
                if let Some(f) = run_forked(region, live, seed) {
                    failures.push(format!("{region:?} live={live} seed={seed:#x}: {f}"));
                }
            }
        }
    }
    eprintln!("{cases} corrupt cases in {:?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs one case in a child; `None` if it passed, else why not.
fn run_forked(region: Region, live: bool, seed: u64) -> Option<String> {
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two fds.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: one test in this binary; the child runs the case and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        std::panic::set_hook(Box::new(|_| {}));
        let report = match catch_unwind(AssertUnwindSafe(|| case(region, live, seed))) {
            Ok(wrong) if wrong.is_empty() => String::new(),
            Ok(wrong) => format!("wrong fire: {}", wrong.join("; ")),
            Err(e) => format!(
                "panic: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        };
        // SAFETY: writes our own buffer to the pipe, then ends the child at once.
        unsafe {
            libc::write(pipe[1], report.as_ptr().cast(), report.len());
            libc::_exit(0);
        }
    }
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(pipe[1]) };
    let limit = Instant::now() + WATCHDOG;
    let mut status = 0;
    loop {
        // SAFETY: our own child; `status` is writable.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if Instant::now() > limit {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
                libc::close(pipe[0]);
            }
            return Some(format!("hang (killed after {WATCHDOG:?})"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut buf = vec![0u8; 1 << 16];
    // SAFETY: reads into our buffer from our end of the pipe.
    let n = unsafe { libc::read(pipe[0], buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: closes our own fd.
    unsafe { libc::close(pipe[0]) };
    let report = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
    if !libc::WIFEXITED(status) {
        return Some(format!("killed by signal {}", libc::WTERMSIG(status)));
    }
    (!report.is_empty()).then_some(report)
}

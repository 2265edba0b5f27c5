//! A job dispatcher and its worker processes sharing one timer set.
//!
//! ```text
//! cargo run --release -p tickwheel-shm --example dispatcher
//! ```
//!
//! The dispatcher creates the set in a memfd and starts three workers (this same program,
//! re-run with `worker N`), which inherit the fd and open the set from it. For each job a worker
//! schedules the job's timeout (a deadline on `CLOCK_MONOTONIC`, the same clock in every process),
//! does the work, and cancels the timeout. The dispatcher alone advances the set: it sleeps on
//! the set's fd and hears of every timeout that fires. Cancel settles the race with the fire: a
//! worker whose cancel returns false knows the dispatcher has already counted the job as timed
//! out, and drops its result. At the end every job is counted once, as done or as timed out.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tickwheel_shm::{Config, Segment};

/// A tiny xorshift64* generator that spreads the workers' job times.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    /// Uniform in `lo..=hi`, to the microsecond.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let span = hi.saturating_sub(lo).as_micros() as u64 + 1;
        lo + Duration::from_micros(self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % span)
    }
}

const WORKERS: u64 = 3;
const JOBS: u64 = 60;
const TIMEOUT: Duration = Duration::from_millis(25);
const FD_VAR: &str = "TICKWHEEL_SHM_FD";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let n: u64 = args[2].parse().expect("worker number");
        worker(n);
    } else {
        dispatcher();
    }
}

/// A job id: worker in the high bits, job number in the low ones.
fn job(worker: u64, i: u64) -> u64 {
    worker << 32 | i
}

fn worker(n: u64) {
    let fd: i32 = std::env::var(FD_VAR).expect(FD_VAR).parse().expect("fd");
    // SAFETY: the dispatcher passed us this fd (close-on-exec cleared); nothing else owns it here.
    let segment = Segment::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }).expect("open the set");
    let client = segment.attach().expect("attach");
    let (mut done, mut late) = (0, 0);
    let mut rng = Rng::new(n);
    for i in 0..JOBS {
        let id = job(n, i);
        let timeout = client
            .schedule_after(TIMEOUT, id)
            .expect("schedule the timeout");
        // The "work": 5 to 35 ms.
        std::thread::sleep(rng.between(Duration::from_millis(5), Duration::from_millis(35)));
        if client.cancel(timeout) {
            done += 1; // finished in time: the timeout will never fire
        } else {
            late += 1; // the dispatcher already saw this job time out
        }
    }
    println!("{done} {late}");
}

fn dispatcher() {
    let config = Config::new(1 << 16).tick(Duration::from_millis(1));
    let segment = Segment::memfd(&config, "jobs").expect("create the set");
    let fd = segment.fd().expect("memfd").as_raw_fd();
    // SAFETY: clears close-on-exec on our own live fd so the workers inherit it.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let client = segment.attach().expect("attach");
    let mut advancer = client.advancer().expect("advance the set");
    println!(
        "dispatcher {}: {} workers x {} jobs, timeout {:?}, set of {} timers in {} KiB of shared memory",
        std::process::id(),
        WORKERS,
        JOBS,
        TIMEOUT,
        segment.geometry().capacity,
        segment.bytes() / 1024
    );

    let exe = std::env::current_exe().expect("own path");
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(&exe)
                .args(["worker", &n.to_string()])
                .env(FD_VAR, fd.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();

    let mut timed_out = Vec::new();
    let mut running = workers.len();
    let started = Instant::now();
    while running > 0 {
        // Sleeps until a timeout is due or a worker schedules one earlier than the next expiry.
        advancer.wait(100).expect("wait");
        advancer.turn(|id| timed_out.push(id));
        running = workers
            .iter_mut()
            .map(|w| w.try_wait().expect("wait for a worker").is_none())
            .filter(|&alive| alive)
            .count();
    }
    // A timeout whose job is neither done nor late cannot exist; one more turn proves nothing is
    // left pending once the last deadline has passed.
    std::thread::sleep(TIMEOUT + Duration::from_millis(5));
    advancer.turn(|id| timed_out.push(id));

    let (mut done, mut late) = (0, 0);
    for w in &mut workers {
        let out = w.stdout.take().expect("piped");
        let line = BufReader::new(out)
            .lines()
            .next()
            .expect("a report")
            .expect("utf-8");
        let mut parts = line
            .split_whitespace()
            .map(|p| p.parse::<u64>().expect("count"));
        done += parts.next().expect("done");
        late += parts.next().expect("late");
    }
    let stats = client.stats();
    println!(
        "after {:?}: {done} jobs done in time, {} timed out (the workers saw {late} of them late)",
        started.elapsed(),
        timed_out.len()
    );
    println!(
        "set: {} scheduled, {} cancelled, {} fired, {} pending",
        stats.scheduled,
        stats.cancelled,
        stats.fired,
        client.len()
    );
    assert_eq!(
        done + timed_out.len() as u64,
        WORKERS * JOBS,
        "a job counted twice or lost"
    );
    assert_eq!(late, timed_out.len() as u64);
    assert!(client.is_empty());
    println!("every job counted exactly once");
}

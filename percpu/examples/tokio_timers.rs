//! Async timers on the per-core bases: `timeout_at`, `sleep`, `Sleep::reset` and `interval` in a
//! thread-per-core tokio app (feature `tokio`).
//!
//! Each core runs a current-thread runtime with its own base (`Timers::block_on`), so every
//! timer a task on that core files, re-arms or drops stays on that core. On each core the app:
//! - runs jobs of growing length under a per-job `timeout_at` (the short ones finish, the long
//!   ones are cut off, never before their limit);
//! - debounces a burst of events with one `Sleep` pushed back by `reset` on each event (one
//!   in-place re-arm, no new timer), which fires once, after the burst;
//! - keeps a heartbeat with `interval`, skipping ticks it missed.
//!
//! `cargo run -p tickwheel-percpu --features tokio --example tokio_timers` (about a second).

use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, MissedTickBehavior, Timers};
use tokio::sync::mpsc;

const JOB_LIMIT: Duration = Duration::from_millis(90);
const QUIET: Duration = Duration::from_millis(40);

/// `n` jobs, job `i` taking `i * 20` ms, each under `JOB_LIMIT`: returns (finished, cut off).
async fn jobs(n: u64) -> (u64, u64) {
    // Deadlines fixed now (`sleep_until`, `timeout_at`), so how late a task starts cannot change
    // which jobs finish.
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(async move {
                let work = time::sleep_until(start + Duration::from_millis(i * 20));
                let done = time::timeout_at(start + JOB_LIMIT, work).await.is_ok();
                assert!(
                    done || start.elapsed() >= JOB_LIMIT,
                    "job {i} cut off early"
                );
                done
            })
        })
        .collect();
    let mut finished = 0;
    for t in tasks {
        finished += u64::from(t.await.expect("job task"));
    }
    (finished, n - finished)
}

/// Fires once `QUIET` after the last event of a burst; returns the events seen and how long after
/// the last one it fired.
async fn debounce(mut events: mpsc::Receiver<()>) -> (u32, Duration) {
    let quiet = time::sleep(QUIET);
    tokio::pin!(quiet);
    let (mut seen, mut last) = (0, Instant::now());
    loop {
        tokio::select! {
            Some(()) = events.recv() => {
                seen += 1;
                last = Instant::now();
                quiet.as_mut().reset(last + QUIET); // in place: the same timer, re-armed
            }
            () = &mut quiet => return (seen, last.elapsed()),
        }
    }
}

async fn core_main(core: usize) {
    let (tx, rx) = mpsc::channel(16);
    let burst = tokio::spawn(async move {
        for _ in 0..10 {
            time::sleep(Duration::from_millis(10)).await; // well inside QUIET
            if tx.send(()).await.is_err() {
                break; // a stall of QUIET (a loaded machine) let the debouncer fire: fine
            }
        }
    });
    let heartbeat = tokio::spawn(async {
        let mut tick = time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let start = Instant::now();
        for _ in 0..8 {
            tick.tick().await;
        }
        start.elapsed()
    });
    let ((finished, cut_off), (events, after)) = tokio::join!(jobs(8), debounce(rx));
    burst.await.expect("burst task");
    let beats = heartbeat.await.expect("heartbeat task");
    println!(
        "core {core}: jobs {finished} finished, {cut_off} cut off at {JOB_LIMIT:?}; \
         {events} events debounced, fired {after:?} after the last; 8 beats in {beats:?}"
    );
    assert_eq!(
        (finished, cut_off),
        (5, 3),
        "jobs of 0-80 ms finish, 100-140 ms do not"
    );
    assert!(events >= 1 && after >= QUIET, "debounce fired early");
    assert!(
        beats >= Duration::from_millis(350),
        "first beat at once, then one per 50 ms"
    );
}

fn main() -> std::io::Result<()> {
    let cores = 2;
    let timers = Timers::new(cores)?;
    let threads: Vec<_> = (0..cores)
        .map(|core| {
            let timers = timers.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_io() // the base's fd is watched by the runtime's reactor
                    .build()?;
                timers.block_on(core, &rt, core_main(core))
            })
        })
        .collect();
    for t in threads {
        t.join().expect("core thread")?;
    }
    Ok(())
}

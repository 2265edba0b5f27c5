//! Drives one wheel through a keepalive day in miniature and prints what fired and what each
//! operation cost.
//!
//! 100 000 connections each hold an idle timeout of 5 000 ticks (5 s at 1 ms). Every tick a
//! thousand of them see a request and re-arm their timeout; every so often one closes and cancels
//! it. Timeouts that do fire are the connections that went quiet.
//!
//! Run: `cargo run --release --example drive [exact|coarse]`

use std::time::Instant;

use tickwheel::{Mode, TimerId, Wheel};

const CONNECTIONS: usize = 100_000;
const IDLE_TICKS: u64 = 5_000;
const TICKS: u64 = 20_000;
const REQUESTS_PER_TICK: usize = 1_000;

fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        None | Some("coarse") => Mode::Coarse,
        Some("exact") => Mode::Exact,
        Some(other) => {
            eprintln!("unknown mode {other:?}: expected `exact` or `coarse`");
            std::process::exit(2);
        }
    };
    let mut wheel: Wheel<u32> = Wheel::new(mode);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next_random = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };

    let start = Instant::now();
    let mut timers: Vec<Option<TimerId>> = (0..CONNECTIONS as u32)
        .map(|conn| Some(wheel.insert(IDLE_TICKS, conn).expect("unbounded")))
        .collect();
    let insert_ns = start.elapsed().as_nanos() as f64 / CONNECTIONS as f64;

    let (mut resets, mut cancels, mut fired, mut late_ticks) = (0u64, 0u64, 0u64, 0u64);
    // Ticks at which a loop sleeping until `next_expiry` would wake, and those that fire nothing.
    let (mut wakes, mut empty_wakes) = (0u64, 0u64);
    let mut first_fires = Vec::new();
    let run = Instant::now();
    for now in 1..=TICKS {
        for _ in 0..REQUESTS_PER_TICK {
            let conn = (next_random() % CONNECTIONS as u64) as usize;
            // A tenth of the traffic comes from a hot half of the connections; the rest idles out.
            if conn % 2 == 1 && next_random() % 10 != 0 {
                continue;
            }
            match timers[conn] {
                Some(id) if next_random() % 100 == 0 => {
                    wheel.cancel(id);
                    timers[conn] = None;
                    cancels += 1;
                }
                Some(id) if wheel.reset(id, now + IDLE_TICKS) => resets += 1,
                _ => {
                    timers[conn] = Some(
                        wheel
                            .insert(now + IDLE_TICKS, conn as u32)
                            .expect("unbounded"),
                    );
                }
            }
        }
        let wake = wheel.next_expiry().is_some_and(|tick| tick <= now);
        let fired_before = fired;
        while let Some((id, conn)) = wheel.poll(now) {
            timers[conn as usize] = None;
            fired += 1;
            late_ticks += now - wheel.expiry(id).unwrap_or(now);
            if first_fires.len() < 5 {
                first_fires.push((now, conn));
            }
        }
        if wake {
            wakes += 1;
            empty_wakes += u64::from(fired == fired_before);
        }
    }
    let elapsed = run.elapsed();
    let stats = wheel.stats();
    let ops = resets + cancels + fired + stats.inserted - CONNECTIONS as u64 + TICKS;

    println!(
        "tickwheel {mode:?} wheel, {CONNECTIONS} connections, idle timeout {IDLE_TICKS} ticks"
    );
    for (tick, conn) in &first_fires {
        println!("  tick {tick:>6}: connection {conn} timed out");
    }
    println!("  ...");
    println!("fired      {fired:>10}  (idle connections closed)");
    println!(
        "resets     {resets:>10}  ({} stayed in their bucket, {} deferred to a later one)",
        stats.resets_in_place, stats.resets_deferred
    );
    println!("cancels    {cancels:>10}");
    println!("cascades   {:>10}", stats.cascades);
    println!(
        "replaced   {:>10}  (deferred timers placed again when their old bucket came due)",
        stats.replaced
    );
    println!("wake-ups   {wakes:>10}  ({empty_wakes} fired nothing)");
    println!("pending    {:>10}  at tick {}", wheel.len(), wheel.now());
    println!("lateness   {late_ticks:>10}  ticks in total (a poll every tick fires on time)");
    println!("insert     {insert_ns:>10.1}  ns each (fresh wheel)");
    println!(
        "mixed op   {:>10.1}  ns each over {ops} resets, cancels, inserts, fires and polls",
        elapsed.as_nanos() as f64 / ops as f64
    );
}

//! A base's slot table is a mapping of its own (huge pages asked): from the public API, its
//! timers fire with their values from anywhere in the used part of the table, every payload is
//! dropped exactly once when the bases go, and a dropped base gives its table's address space
//! back (a leaked mapping of the default table is 160 MiB of address space each time).
//!
//! One test in this binary, so no other test maps or unmaps memory while it counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tickwheel_percpu::{ClockSource, Config, ManualClock, Mode, bases};

/// A payload that counts its drops.
struct Counted {
    value: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// The process's address space, from `/proc/self/status`, in KiB.
fn vm_size_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .expect("VmSize in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

const LOCAL: u64 = 3_000;
const REMOTE: u64 = 50;

/// Two bases: `LOCAL` timers on base 0 (every third one cancelled, the rest fired and their
/// values checked), `REMOTE` scheduled on base 1 from afar and left pending when the bases are
/// dropped. Returns the payloads made.
fn cycle(drops: &Arc<AtomicUsize>) -> usize {
    let clock = ManualClock::new();
    let config = Config::default()
        .mode(Mode::Exact)
        .clock(ClockSource::Manual(clock.clone()));
    let (mut all, remote) = bases::<Counted>(2, config).unwrap();
    let mut ids = Vec::new();
    for value in 0..LOCAL {
        let payload = Counted {
            value,
            drops: drops.clone(),
        };
        let after = Duration::from_millis(1 + value % 500);
        let id = all[0]
            .schedule_after(after, payload)
            .unwrap_or_else(|_| panic!("room"));
        ids.push(id);
    }
    for (value, id) in ids.iter().enumerate() {
        if value % 3 == 0 {
            assert!(all[0].cancel(*id), "timer {value} pending");
        }
    }
    for value in 0..REMOTE {
        let payload = Counted {
            value,
            drops: drops.clone(),
        };
        remote
            .schedule_after(1, Duration::from_secs(60), payload)
            .unwrap_or_else(|_| panic!("room"));
    }
    clock.advance(Duration::from_millis(600));
    let mut fired = Vec::new();
    all[0].turn(|c| fired.push(c.value));
    fired.sort_unstable();
    let expected: Vec<u64> = (0..LOCAL).filter(|v| v % 3 != 0).collect();
    assert_eq!(
        fired, expected,
        "each uncancelled timer fired once, with its value"
    );
    drop(remote);
    drop(all);
    (LOCAL + REMOTE) as usize
}

#[test]
fn dropped_bases_give_their_tables_back_and_drop_every_payload() {
    let drops = Arc::new(AtomicUsize::new(0));
    // The first cycle makes whatever the process keeps (thread stacks, allocator arenas).
    let mut made = cycle(&drops);
    let before = vm_size_kib();
    for _ in 0..20 {
        made += cycle(&drops);
    }
    let after = vm_size_kib();
    assert_eq!(
        drops.load(Ordering::Relaxed),
        made,
        "every payload dropped once"
    );
    // Twenty leaked tables of the default size would be 3.2 GiB; allow one table's worth.
    assert!(
        after < before + 160 * 1024,
        "address space grew from {before} KiB to {after} KiB over 20 bases' lifetimes"
    );
}

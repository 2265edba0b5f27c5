//! The ready-made runtime: pinned threads, handler, thread-local scheduling, clean shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

use tickwheel_percpu::{Config, Mode, Runtime, runtime};

fn cores() -> Vec<usize> {
    let ids = core_affinity::get_core_ids().expect("core ids");
    ids.iter().take(2).map(|c| c.id).collect()
}

#[test]
fn handler_runs_on_the_base_thread_and_can_reschedule_locally() {
    let cores = cores();
    let (tx, rx) = channel::<(u32, Option<usize>, String)>();
    let tx = std::sync::Mutex::new(tx); // test plumbing only
    let rt = Runtime::<u32>::start(&cores, Config::default().mode(Mode::Exact), move |v| {
        let here = runtime::current_base();
        let name = std::thread::current().name().unwrap_or("").to_string();
        tx.lock().unwrap().send((v, here, name)).unwrap();
        if v < 3 {
            // Re-arm on our own core without naming it.
            runtime::schedule_after(Duration::from_millis(1), v + 1).unwrap();
        }
    })
    .unwrap();
    let last = cores.len() - 1;
    rt.remote()
        .schedule_after(last, Duration::from_millis(1), 0)
        .unwrap();
    for expect in 0..=3 {
        let (v, here, name) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("handler did not run");
        assert_eq!(v, expect);
        assert_eq!(here, Some(last), "handler runs on the base's own thread");
        assert_eq!(name, format!("tickwheel-{last}"));
    }
    let stats = rt.shutdown();
    assert_eq!(stats.len(), cores.len());
    assert_eq!(stats[last].fired, 4);
}

struct DropRecorder {
    drops: Arc<AtomicUsize>,
    on_thread: Sender<String>,
}

impl Drop for DropRecorder {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        let name = std::thread::current().name().unwrap_or("").to_string();
        let _ = self.on_thread.send(name);
    }
}

#[test]
fn shutdown_drops_pending_payloads_on_their_own_thread() {
    let cores = cores();
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = channel();
    let rt = Runtime::<DropRecorder>::start(&cores, Config::default(), |_| {
        panic!("nothing should fire")
    })
    .unwrap();
    for base in 0..cores.len() {
        let payload = DropRecorder {
            drops: drops.clone(),
            on_thread: tx.clone(),
        };
        rt.remote()
            .schedule_after(base, Duration::from_secs(3600), payload)
            .unwrap();
    }
    // Let the owners file them (a turn) before shutting down.
    std::thread::sleep(Duration::from_millis(50));
    let stats = rt.shutdown();
    assert_eq!(drops.load(Ordering::SeqCst), cores.len());
    assert_eq!(
        stats.iter().map(|s| s.scheduled).sum::<u64>(),
        cores.len() as u64
    );
    drop(tx);
    let mut threads: Vec<String> = rx.iter().collect();
    threads.sort();
    let mut expect: Vec<String> = (0..cores.len()).map(|i| format!("tickwheel-{i}")).collect();
    expect.sort();
    assert_eq!(threads, expect);
}

#[test]
fn dropping_a_runtime_stops_its_threads() {
    let rt = Runtime::<u32>::start(&cores(), Config::default(), |_| {}).unwrap();
    rt.remote()
        .schedule_after(0, Duration::from_secs(3600), 1)
        .unwrap();
    drop(rt); // joins; a hang here would fail the test by timeout
}

//! The async section runs end to end on both runtimes, and no sleep completes early.

use tickwheel_benches::asynk;

#[test]
fn async_section_runs_and_nothing_is_early() {
    let only = ["timeout_ready", "timeout_wait1", "fire", "reset"].map(String::from);
    let lines = asynk::run(1, true, &only);
    assert_eq!(lines.len(), 2 * only.len());
    for l in &lines {
        assert_eq!(l.early, 0, "{l:?}");
        assert!(l.tokio > 0.0 && l.tickwheel > 0.0, "{l:?}");
    }
    let md = asynk::markdown(&lines, &[(10, 1.0, 2.0)]);
    assert!(md.contains("| current_thread | fire |"));
    assert!(md.contains("| 10 | 1.0 | 2.0 |"));
}

#[test]
fn memory_probe_rejects_an_unknown_api() {
    assert!(asynk::bytes_per_sleep("std", 10).is_err());
    assert!(asynk::bytes_per_sleep("tickwheel", 1000).unwrap() > 0.0);
}

//! The runner's `shm` section end to end on a tiny load: both designs run in forked worker
//! processes and the table comes out. Nothing here looks at the figures.

use std::process::Command;

#[test]
fn shm_section_runs_both_designs() {
    let run = Command::new(env!("CARGO_BIN_EXE_tickwheel-benches"))
        .args(["shm", "--pairs", "20000", "--live", "100", "--reps", "1"])
        .output()
        .expect("the runner starts");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    if stderr.contains("needs two cores") || stderr.contains("pinning") {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert!(run.status.success(), "shm section failed: {stderr}");
    assert!(stdout.contains("tickwheel shm (lock-free)"), "{stdout}");
    assert!(stdout.contains("pthread_mutex"), "{stdout}");
    assert!(stdout.contains("ratio lock-free / mutex"), "{stdout}");
    let bad = Command::new(env!("CARGO_BIN_EXE_tickwheel-benches"))
        .args(["shm", "--pairs", "many"])
        .output()
        .expect("the runner starts");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--pairs many"));
}

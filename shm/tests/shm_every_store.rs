//! A process killed before each store it makes to the mapping, one number after another (the
//! `test-hooks` store points): a scheduler-and-canceller, and an owner in the middle of a turn.
//! After each kill the parent takes over and checks that every payload fired or was cancelled
//! exactly once (the one operation the kill interrupted may go either way) and that no slot
//! leaked. One test in this binary, so nothing else runs while it forks.

#![cfg(not(loom))]

mod shm_util;

use shm_util::steps::{self, ForkLog, Role};
use tickwheel_shm::{Config, Segment, hooks};

const CAPACITY: usize = 8;

/// Runs `role` in a child killed before its `n`-th store; true if it was killed (false: it
/// finished, so `n` is past its last store).
fn run(role: Role, n: u64, segment: &Segment, log: &ForkLog) -> bool {
    let pid = steps::fork_child(role, segment, log, || hooks::kill_before_store(n));
    let status = steps::wait(pid, 0);
    if libc::WIFSIGNALED(status) {
        assert_eq!(libc::WTERMSIG(status), libc::SIGKILL);
        return true;
    }
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "{role:?}: the child failed (n = {n})"
    );
    false
}

/// Kills `role` before store 1, 2, ... until it runs to the end; returns how many store points
/// its run has.
fn every_store(role: Role) -> u64 {
    for n in 1.. {
        let what = format!("{role:?} killed before store {n}");
        let segment = Segment::anonymous(&Config::new(CAPACITY).manual_clock()).unwrap();
        let log = ForkLog::new();
        let parent = segment.attach().unwrap();
        if let Role::Owner = role {
            steps::prepare_owner_run(&parent);
        }
        let killed = run(role, n, &segment, &log);
        let mut adv = parent.advancer().expect("takeover after the child's death");
        adv.recover();
        steps::assert_exactly_once(role, &mut adv, &log, &what);
        steps::assert_no_leak(&parent, &mut adv, CAPACITY, &what);
        if !killed {
            return n - 1;
        }
    }
    unreachable!()
}

#[test]
fn a_kill_before_any_store_loses_nothing() {
    let scheduler = every_store(Role::Scheduler);
    let owner = every_store(Role::Owner);
    eprintln!("store points: scheduler {scheduler}, owner {owner}");
    // Far more than the named crash points: every claim, arm, mark, cancel, fire and free.
    assert!(scheduler >= 20 && owner >= 15, "{scheduler} / {owner}");
}

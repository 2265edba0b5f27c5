//! Liveness is judged by the thread group: a process whose main thread has exited while another
//! of its threads goes on advancing is alive, and nobody takes its set over. One test in this
//! binary, so nothing else runs while it forks.

#![cfg(not(loom))]

use std::time::{Duration, Instant};

use tickwheel_shm::{Config, Error, Segment};

/// The state letter of `/proc/<pid>/stat` (the leader's, for a process).
fn state_letter(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[test]
fn an_owner_whose_main_thread_exited_is_not_taken_over() {
    let segment = Segment::anonymous(&Config::new(256).manual_clock()).unwrap();
    let parent = segment.attach().unwrap();
    // SAFETY: the child only builds its own advancer, starts one thread and ends its main thread;
    // glibc's fork handlers keep malloc usable there.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let me = segment.attach().unwrap();
        let mut adv = me.advancer().unwrap();
        std::thread::spawn(move || {
            loop {
                let t = adv.client().now() + 1;
                adv.advance_to(t);
                adv.turn(|_| {});
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // SAFETY: `SYS_exit` ends only this thread (not `exit_group`): the leader turns into a
        // zombie while the advancing thread lives on.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
        unreachable!("SYS_exit returned");
    }
    let limit = Instant::now() + Duration::from_secs(20);
    // The child owns the set once its main thread is gone (it claimed before exiting).
    while state_letter(pid) != Some('Z') {
        assert!(
            Instant::now() < limit,
            "the child's leader never became a zombie"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let verdict = parent.advancer();
    let busy = matches!(verdict, Err(Error::Busy { owner_pid }) if owner_pid == pid as u32);
    drop(verdict);
    // The child's thread still advances: due timers fire there.
    let now = parent.now();
    for p in 0..10 {
        parent.schedule_at(now, p).unwrap();
    }
    while parent.stats().fired < 10 && Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(2));
    }
    let fired = parent.stats().fired;
    // SAFETY: our own child; SIGKILL ends the whole thread group, then we reap it.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert!(
        busy,
        "a live owner (leader a zombie, one thread advancing) was taken over"
    );
    assert_eq!(
        fired, 10,
        "the owner's live thread fired only {fired} of 10"
    );
    let adv = parent
        .advancer()
        .expect("takeover once the whole process is gone");
    assert_eq!(parent.stats().takeovers, 1);
    drop(adv);
}

//! Anonymous shared memory inherited across `fork`: children schedule and cancel, the parent
//! advances. One test in this binary, so the process is single-threaded when it forks.

#![cfg(not(loom))]

use tickwheel_shm::{Config, Segment};

#[test]
fn children_made_by_fork_share_an_anonymous_set() {
    let segment = Segment::anonymous(&Config::new(1024).manual_clock()).unwrap();
    let parent = segment.attach().unwrap();
    let mut adv = Some(parent.advancer().unwrap());
    adv.as_mut().unwrap().fd().unwrap(); // a helper thread, which children do not have
    let mut pids = Vec::new();
    for child in 0..3u64 {
        // SAFETY: this test binary runs one test, so no other thread exists to hold a lock the
        // child would need; the child only touches the set and then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut inherited = adv.take();
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let me = segment.attach().unwrap();
                let handles: Vec<_> = (0..100)
                    .map(|i| me.schedule_at(5, child * 1000 + i).unwrap())
                    .collect();
                // Cancel the odd ones.
                for (i, h) in handles.iter().enumerate() {
                    if i % 2 == 1 {
                        assert!(me.cancel(*h));
                    }
                }
                // The advancer belongs to the parent, which is alive; dropping the copies of
                // the parent's client and advancer that fork left here changes nothing there.
                assert!(me.advancer().unwrap_err().is_busy());
                drop(std::mem::take(&mut inherited));
            }))
            .map_or(1, |()| 0);
            // SAFETY: ends the child without running the parent's test harness teardown.
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    for pid in pids {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is writable.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed"
        );
    }
    let mut adv = adv.unwrap();
    assert!(parent.advancer().unwrap_err().is_busy(), "still the owner");
    adv.advance_to(5);
    let mut fired = Vec::new();
    adv.turn(|p| fired.push(p));
    fired.sort_unstable();
    let expect: Vec<u64> = (0..3)
        .flat_map(|c| (0..100).filter(|i| i % 2 == 0).map(move |i| c * 1000 + i))
        .collect();
    assert_eq!(fired, expect);
    let st = parent.stats();
    assert_eq!((st.scheduled, st.cancelled, st.fired), (300, 150, 150));
}

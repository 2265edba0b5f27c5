//! A handler that panics in the first drain of a user's own `Base::turn` leaves the notices
//! untaken and the reserve unfilled. The fd stays readable (the timerfd's expiry is cleared only
//! by the re-arm the panic skipped, and a handler's own schedules only arm it earlier), so the
//! user's next park returns at once and the next turn takes the notices.

use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use tickwheel_percpu::Config;

fn readable(fd: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, length 1, zero timeout.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
}

#[test]
fn a_panicking_handler_leaves_the_fd_readable_for_the_notices() {
    let (mut bases, remote) = tickwheel_percpu::bases::<u32>(1, Config::default()).unwrap();
    let base = &mut bases[0];
    base.schedule_after(Duration::ZERO, 0).unwrap();
    std::thread::sleep(Duration::from_millis(3));
    let r = remote.clone();
    std::thread::spawn(move || r.schedule_after(0, Duration::ZERO, 7).unwrap())
        .join()
        .unwrap();
    let turned = catch_unwind(AssertUnwindSafe(|| {
        base.turn_with(|base, _| {
            // Schedules and re-arms later than now: none may leave the fd quiet.
            let h = base.schedule_after(Duration::from_secs(60), 1).unwrap();
            base.reset_after(h, Duration::from_secs(120));
            panic!("handler");
        })
    }));
    assert!(turned.is_err());
    assert!(
        readable(base.as_raw_fd()),
        "a park would sleep with a notice waiting"
    );
    base.park(Some(Duration::from_secs(5))).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    let mut fired = Vec::new();
    base.turn(|v| fired.push(v));
    assert_eq!(fired, [7], "the notice's timer fires at the next turn");
}

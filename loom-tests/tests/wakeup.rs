//! Model 6: a remote schedule while the owner is about to park always wakes it.
//!
//! The owner turns, then "sleeps" until its real fd (epoll of eventfd) polls readable. If the
//! producer's message was missed by the turn and the kick were lost, the owner would spin forever.
//! A second model checks the wake word alone against a simulated eventfd; a third checks the kick
//! accounting over several parks: once everything is done, the fd is not left readable.

use std::time::Duration;

use tickwheel_loom_tests::sync::{Arc, AtomicUsize, Ordering, spawn, yield_now};
use tickwheel_loom_tests::{check, one_base, sleep_on};
use tickwheel_percpu::protocol::wake::{Notify, Wake};

#[test]
fn remote_schedule_wakes_parking_owner() {
    check("wakeup_base", || {
        let (mut base, remote, _clock) = one_base::<u32>(2, 2);
        let producer = spawn(move || {
            remote.schedule_after(0, Duration::ZERO, 9).unwrap();
        });
        let mut got = false;
        loop {
            base.turn(|v| {
                assert_eq!(v, 9);
                got = true;
            });
            if got {
                break;
            }
            sleep_on(base.fd());
        }
        producer.join().unwrap();
    });
}

#[test]
fn wake_word_never_loses_a_message() {
    check("wakeup_word", || {
        let sent = Arc::new(AtomicUsize::new(0)); // the messages
        let wake = Arc::new(Wake::new());
        let kicks = Arc::new(AtomicUsize::new(0)); // the eventfd
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (sent, wake, kicks) = (sent.clone(), wake.clone(), kicks.clone());
                spawn(move || {
                    // Relaxed: the message is published by the notify's Release, as a pushed
                    // notice is.
                    sent.fetch_add(1, Ordering::Relaxed);
                    if wake.notify() == Notify::Kick {
                        // Release: the kick is observed after the message, like an eventfd write.
                        kicks.fetch_add(1, Ordering::Release);
                    }
                })
            })
            .collect();
        let mut consumed_kicks = 0;
        loop {
            wake.begin();
            // Relaxed: `begin`'s Acquire made every announced message visible.
            if sent.load(Ordering::Relaxed) == 2 {
                break;
            }
            if wake.park() {
                // Blocked until kicked: a lost wake-up spins here forever.
                // Acquire: pairs with the producer's Release kick.
                while kicks.load(Ordering::Acquire) == consumed_kicks {
                    yield_now();
                }
                consumed_kicks = kicks.load(Ordering::Acquire);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        // At most one kick per park, and never more kicks than messages.
        assert!(kicks.load(Ordering::Relaxed) <= 2);
    });
}

#[test]
fn no_kick_is_left_over_after_several_parks() {
    check("wakeup_kick_accounting", || {
        let (mut base, remote, _clock) = one_base::<u32>(3, 2);
        let producer = spawn(move || {
            for v in 0..2 {
                remote.schedule_after(0, Duration::ZERO, v).unwrap();
                yield_now();
            }
        });
        let mut got = 0;
        while got < 2 {
            got += base.turn(|_| {});
            if got < 2 {
                sleep_on(base.fd());
            }
        }
        producer.join().unwrap();
        // Every kick made was owed and is read back by the turns that follow: a loop that now
        // waits on the fd must block (here: the fd must not poll readable after a quiet turn).
        base.turn(|_| panic!("nothing left to fire"));
        base.turn(|_| panic!("nothing left to fire"));
        assert!(
            !tickwheel_loom_tests::readable(base.fd()),
            "fd readable with nothing to do"
        );
    });
}

/// An outer epoll set holding the base's fd, as a server loop has it (level-triggered).
fn outer_epoll(fd: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscalls on fds we own; the new fd is checked before it is wrapped.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0, "epoll_create1");
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 1,
        };
        assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
        std::os::fd::OwnedFd::from_raw_fd(ep)
    }
}

#[test]
fn remote_wake_under_an_outer_epoll_loop() {
    // `Remote::wake` carries no notice: the owner only has to turn once more. A remote thread
    // raises a flag and wakes the base twice while the owner loops "turn, check the flag, sleep on
    // the outer epoll fd". A lost wake-up spins forever; after the loop the kicks are all read
    // back, so the outer set does not stay readable with nothing to do.
    check("wake_under_outer_epoll", || {
        use std::os::fd::AsRawFd;
        let (mut base, remote, _clock) = one_base::<u32>(2, 1);
        let outer = outer_epoll(base.fd());
        let flag = Arc::new(AtomicUsize::new(0));
        let f = flag.clone();
        let waker = spawn(move || {
            for _ in 0..2 {
                // Release: seen by the owner's Acquire load after the wake-up it causes.
                f.fetch_add(1, Ordering::Release);
                remote.wake(0);
            }
        });
        loop {
            base.turn(|_| panic!("nothing scheduled"));
            // Acquire: pairs with the waker's Release.
            if flag.load(Ordering::Acquire) == 2 {
                break;
            }
            sleep_on(outer.as_raw_fd());
        }
        waker.join().unwrap();
        base.turn(|_| panic!("nothing scheduled"));
        base.turn(|_| panic!("nothing scheduled"));
        assert!(
            !tickwheel_loom_tests::readable(outer.as_raw_fd()),
            "outer epoll readable with nothing to do"
        );
    });
}

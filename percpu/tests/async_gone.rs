//! A sleep whose base can never be turned again (its `Timers` and every task turning it are gone)
//! panics with a clear message when polled, like tokio's sleeps on a runtime that was shut down,
//! instead of pending for ever; a sleep waiting at that moment is woken to do so.
#![cfg(feature = "tokio")]
#![allow(
    clippy::async_yields_async,
    reason = "sleeps are filed inside a runtime and handed out of it"
)]

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};

fn noop_poll(s: &mut time::Sleep) -> Poll<()> {
    Pin::new(s).poll(&mut Context::from_waker(Waker::noop()))
}

/// A sleep filed on a base whose runtime and `Timers` are then dropped.
fn orphaned_sleep(delay: Duration) -> time::Sleep {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let s = timers
        .block_on(0, &rt, async move {
            let mut s = time::sleep(delay);
            assert!(noop_poll(&mut s).is_pending());
            s
        })
        .unwrap();
    drop((rt, timers));
    s
}

fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn polled_after_its_driver_is_gone_it_panics() {
    let mut s = orphaned_sleep(Duration::from_secs(3600));
    let polled = catch_unwind(AssertUnwindSafe(|| noop_poll(&mut s)));
    let message = panic_message(polled.expect_err("a sleep on a gone driver pended"));
    assert!(message.contains("is gone"), "unclear panic: {message}");
    drop(s);

    // On another runtime too, as a task's panic.
    let s = orphaned_sleep(Duration::from_secs(3600));
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let out = timers.block_on(0, &rt, async move {
        let job = tokio::spawn(s);
        job.await
    });
    assert!(out.unwrap().unwrap_err().is_panic());
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

#[test]
fn waiting_when_its_driver_goes_it_is_woken_and_panics() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let s = timers
        .block_on(0, &rt, async {
            let mut s = time::sleep(Duration::from_secs(3600));
            assert!(noop_poll(&mut s).is_pending());
            s
        })
        .unwrap();
    let (polled, seen) = mpsc::channel();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = s;
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let out = catch_unwind(AssertUnwindSafe(|| {
            let mut first = true;
            while Pin::new(&mut s).poll(&mut cx).is_pending() {
                if std::mem::take(&mut first) {
                    polled.send(()).unwrap();
                }
                std::thread::park();
            }
        }));
        let _ = done.send(out.map_err(panic_message));
    });
    seen.recv().unwrap();
    drop((rt, timers));
    let out = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("a sleep waiting on a gone driver was never woken");
    let message = out.expect_err("completed without firing");
    assert!(message.contains("is gone"), "unclear panic: {message}");
}

#[test]
fn reset_after_its_driver_is_gone_files_it_on_a_live_base() {
    let mut s = orphaned_sleep(Duration::from_secs(3600));
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let deadline = Instant::now() + Duration::from_millis(10);
    s.reset(deadline);
    timers
        .block_on(0, &rt, async {
            (&mut s).await;
            assert!(Instant::now() >= deadline);
            assert!(s.is_elapsed());
        })
        .unwrap();
    drop(s);
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

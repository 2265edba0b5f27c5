//! With no per-core setup, sleeps run on the process-wide fallback base: under a runtime's
//! `block_on` (both flavors, no I/O driver needed), in its tasks, in `spawn_blocking` and on a
//! plain thread with no runtime at all; never early, reset and dropped from any thread.
#![cfg(feature = "tokio")]

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tickwheel_percpu::time::{self, Duration, Instant};

const D: Duration = Duration::from_millis(5);

async fn sleeps_never_early() -> Duration {
    let start = Instant::now();
    time::sleep(D).await;
    let elapsed = start.elapsed();
    assert!(elapsed >= D, "early: {elapsed:?}");
    assert!(
        time::timeout(D, std::future::pending::<()>())
            .await
            .is_err()
    );
    assert!(start.elapsed() >= D * 2);
    elapsed
}

#[test]
fn block_on_a_current_thread_runtime_without_io() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(sleeps_never_early());
}

#[test]
fn block_on_and_tasks_of_a_multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        sleeps_never_early().await;
        let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(sleeps_never_early())).collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn inside_spawn_blocking() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::task::spawn_blocking(|| {
            tokio::runtime::Handle::current().block_on(sleeps_never_early())
        })
        .await
        .unwrap();
    });
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The smallest executor: polls on this thread, parks in between.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn on_a_plain_thread_with_no_runtime() {
    std::thread::spawn(|| block_on(sleeps_never_early()))
        .join()
        .unwrap();
}

#[test]
fn reset_and_drop_from_other_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut s = time::sleep(Duration::from_secs(60));
        // Filed by this thread's poll, then moved earlier from another thread and awaited there.
        assert!(futures_poll_once(&mut s).is_pending());
        let done = std::thread::spawn(move || {
            let deadline = Instant::now() + D;
            s.reset(deadline);
            block_on(&mut s);
            assert!(Instant::now() >= deadline);
            assert!(s.is_elapsed());
        });
        let dropped = std::thread::spawn(|| {
            let mut s = time::sleep(Duration::from_secs(60));
            assert!(futures_poll_once(&mut s).is_pending());
            drop(s);
        });
        done.join().unwrap();
        dropped.join().unwrap();
    });
}

fn futures_poll_once(s: &mut time::Sleep) -> Poll<()> {
    let mut cx = Context::from_waker(Waker::noop());
    std::pin::Pin::new(s).poll(&mut cx)
}

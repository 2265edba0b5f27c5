//! A runtime shut down with sleeps pending: every task's state dropped once, nothing hangs, and
//! the bases are left empty.
#![cfg(feature = "tokio")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tickwheel_percpu::time::{self, Timers};

struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

const TASKS: usize = 1000;

#[test]
fn current_thread_runtime_dropped_with_sleeps_pending() {
    let timers = Timers::new(1).unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    {
        let _on = timers.enter(0).unwrap();
        rt.block_on(async {
            timers.spawn_drivers().unwrap();
            for i in 0..TASKS {
                let payload = Dropped(dropped.clone());
                tokio::spawn(async move {
                    let _keep = payload;
                    time::sleep(Duration::from_secs(3600 + i as u64)).await;
                    unreachable!("fired after an hour");
                });
            }
            // Let every task register its sleep.
            time::sleep(Duration::from_millis(5)).await;
            assert_eq!(timers.occupancy(0), Some((TASKS, TASKS)));
        });
        drop(rt);
    }
    assert_eq!(dropped.load(Ordering::SeqCst), TASKS);
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

#[test]
fn multi_thread_runtime_dropped_with_sleeps_pending() {
    let timers = Timers::new(2).unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let rt = common::multi_thread(&timers, 2);
    rt.block_on(async {
        timers.spawn_drivers().unwrap();
        let mut started = Vec::new();
        for i in 0..TASKS {
            let payload = Dropped(dropped.clone());
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(async move {
                let _keep = payload;
                let mut s = time::sleep(Duration::from_secs(3600 + i as u64));
                let _ = futures_poll_once(&mut s).await;
                let _ = tx.send(());
                s.await;
                unreachable!("fired after an hour");
            });
            started.push(rx);
        }
        for rx in started {
            rx.await.unwrap();
        }
    });
    rt.shutdown_timeout(Duration::from_secs(10));
    assert_eq!(dropped.load(Ordering::SeqCst), TASKS);
    for i in 0..2 {
        // Cancel notices from the other worker are not read after the runtime is gone, so only
        // the cells are checked here.
        assert_eq!(timers.occupancy(i).unwrap().1, 0, "base {i}");
    }
}

/// Polls once (registering the sleep), then returns.
async fn futures_poll_once(s: &mut time::Sleep) -> std::task::Poll<()> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *s).poll(cx))).await
}

use std::future::Future;

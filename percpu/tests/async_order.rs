//! Sleeps complete in deadline order, never before their deadline.
#![cfg(feature = "tokio")]

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};
use tickwheel_percpu::{Config, Mode};

#[test]
fn sleeps_complete_in_deadline_order_and_never_early() {
    let config = Config::default().mode(Mode::Exact);
    let timers = Timers::with_config(1, config).unwrap();
    let rt = common::current_thread();
    let order = Rc::new(RefCell::new(Vec::new()));
    let local = tokio::task::LocalSet::new();
    let start = Instant::now();
    // Deadlines 2 ms apart, spawned in a shuffled order (a fixed permutation of 0..40).
    let delays: Vec<u64> = (0..40u64).map(|i| (i * 17) % 40).collect();
    for &d in &delays {
        let order = order.clone();
        let deadline = start + Duration::from_millis(2 + 2 * d);
        local.spawn_local(async move {
            time::sleep_until(deadline).await;
            let now = Instant::now();
            assert!(now >= deadline, "early by {:?}", deadline - now);
            order.borrow_mut().push(d);
        });
    }
    timers.block_on(0, &rt, local).unwrap();
    let order = order.borrow();
    assert_eq!(order.len(), 40);
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "out of deadline order: {order:?}"
    );
    assert_eq!(timers.occupancy(0), Some((0, 0)), "cells or timers left");
}

#[test]
fn a_past_deadline_completes_at_once() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    let t = Instant::now();
    timers
        .block_on(0, &rt, async {
            time::sleep(Duration::ZERO).await;
            time::sleep_until(Instant::now() - Duration::from_millis(5)).await;
        })
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn many_sleeps_reuse_cells() {
    let timers = Timers::new(1).unwrap();
    let rt = common::current_thread();
    timers
        .block_on(0, &rt, async {
            for round in 0..20 {
                // 1,000 sleeps registered then dropped before they fire.
                let mut sleeps: Vec<_> = (0..1000)
                    .map(|i| time::sleep(Duration::from_secs(60 + i)))
                    .collect();
                for s in &mut sleeps {
                    let _ = futures_poll(s);
                }
                drop(sleeps);
                let (pending, cells) = timers.occupancy(0).unwrap();
                assert_eq!((pending, cells), (0, 0), "round {round}");
            }
            // One that fires, then is dropped.
            time::sleep(Duration::from_millis(1)).await;
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

/// Polls once with a no-op waker.
fn futures_poll(s: &mut time::Sleep) -> std::task::Poll<()> {
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(s).poll(&mut cx)
}

//! Once the cell table has grown to the population, filing, resetting and dropping sleeps and
//! timeouts on the owner's thread allocates nothing.
#![cfg(feature = "tokio")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use tickwheel_percpu::time::{Duration, Instant};

use tickwheel_percpu::time::{self, Timers};

/// Counts allocations (this file has one test, so nothing else allocates meanwhile but the
/// runtime's own thread, which is this one).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One request's worth of timer work: a timeout that waits once (filed, then cancelled), a sleep
/// reset a few times, then dropped before it fires.
async fn one_round(i: u64) {
    let mut waited = false;
    let once = poll_fn(|cx| {
        if waited {
            return Poll::Ready(i);
        }
        waited = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    });
    let mut t = pin!(time::timeout(Duration::from_secs(30), once));
    poll_fn(|cx| {
        assert!(t.as_mut().poll(cx).is_pending());
        assert_eq!(t.as_mut().poll(cx), Poll::Ready(Ok(i)));
        Poll::Ready(())
    })
    .await;
    let mut s = time::sleep(Duration::from_secs(60));
    poll_fn(|cx| {
        assert!(std::pin::Pin::new(&mut s).poll(cx).is_pending());
        Poll::Ready(())
    })
    .await;
    for k in 0..4 {
        s.reset(Instant::now() + Duration::from_secs(30 + k));
    }
    drop(s);
}

#[test]
fn steady_state_timer_work_does_not_allocate() {
    let timers = Timers::new(1).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    timers
        .block_on(0, &rt, async {
            for i in 0..2_000 {
                one_round(i).await; // grows the base's and the cells' tables
            }
            let before = ALLOCS.load(Ordering::Relaxed);
            for i in 0..10_000 {
                one_round(i).await;
            }
            let allocs = ALLOCS.load(Ordering::Relaxed) - before;
            assert_eq!(allocs, 0, "{allocs} allocations in 10,000 rounds");
        })
        .unwrap();
    assert_eq!(timers.occupancy(0), Some((0, 0)));
}

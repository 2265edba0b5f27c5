//! tokio-util's `DelayQueue` (tokio's own hierarchical wheel over a slab) on a paused runtime.
//!
//! The queue needs a tokio timer to exist (it arms a `Sleep` for its next deadline), so the adapter
//! owns a current-thread runtime with time paused; tick `t` is `start + t` milliseconds. Moving the
//! clock costs nothing until something may be due: the queue's wheel only turns when polled, as in
//! a real task that its `Sleep` wakes. The adapter keeps a lower bound on the earliest deadline
//! (lowered by every arm; after a drain, the next tick if the drain fired anything, else `peek`)
//! in place of the `Sleep`, because the public `peek` walks a whole wheel slot and would dominate
//! the run. When something is due the adapter advances tokio's
//! paused clock and drains `poll_expired` inside `tokio::task::unconstrained`, since tokio's
//! cooperative budget would otherwise stop the drain after about 128 items.

use super::Timers;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

/// `DelayQueue<u64>` with its runtime.
#[derive(Debug)]
pub struct TokioDelayQueue {
    rt: Rc<Runtime>,
    queue: DelayQueue<u64>,
    start: Instant,
    now: u64,
    /// No armed timer is due before this tick.
    due_from: u64,
}

impl Default for TokioDelayQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl TokioDelayQueue {
    /// An empty queue at tick 0 on a fresh paused runtime.
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime builds");
        let (queue, start) = {
            let _ctx = rt.enter();
            (DelayQueue::new(), Instant::now())
        };
        Self {
            rt: Rc::new(rt),
            queue,
            start,
            now: 0,
            due_from: u64::MAX,
        }
    }

    fn instant_of(&self, tick: u64) -> Instant {
        self.start + Duration::from_millis(tick)
    }

    fn tick_of(&self, at: Instant) -> u64 {
        (at - self.start).as_millis() as u64
    }
}

impl Timers for TokioDelayQueue {
    type Id = Key;

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> Key {
        self.due_from = self.due_from.min(deadline);
        self.queue.insert_at(value, self.instant_of(deadline))
    }

    #[inline]
    fn cancel(&mut self, id: Key) -> Option<u64> {
        self.queue.try_remove(&id).map(|e| e.into_inner())
    }

    #[inline]
    fn reset(&mut self, id: &mut Key, deadline: u64) -> bool {
        // `reset_at` panics on a vacant key; the workloads only re-arm armed timers, and a slab key
        // has no generation to tell a reused one apart, so this check is all DelayQueue offers.
        self.due_from = self.due_from.min(deadline);
        self.queue.reset_at(id, self.instant_of(deadline));
        true
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        self.now = self.now.max(now);
        if self.due_from > self.now {
            return;
        }
        let target = self.instant_of(self.now);
        let queue = &mut self.queue;
        let mut any = false;
        let fired_any = &mut any;
        self.rt.block_on(tokio::task::unconstrained(async move {
            let behind = target.saturating_duration_since(Instant::now());
            if !behind.is_zero() {
                tokio::time::advance(behind).await;
            }
            poll_fn(|cx| {
                while let Poll::Ready(Some(expired)) = queue.poll_expired(cx) {
                    *fired_any = true;
                    fired(expired.into_inner());
                }
                Poll::Ready(())
            })
            .await;
        }));
        self.due_from = if self.queue.is_empty() {
            u64::MAX
        } else if any {
            // Timers are due in bursts: try the next tick rather than pay for a `peek`.
            self.now + 1
        } else {
            self.queue
                .peek()
                .map_or(u64::MAX, |key| self.tick_of(self.queue.deadline(&key)))
        };
    }

    fn next_expiry(&mut self) -> Option<u64> {
        let key = self.queue.peek()?;
        Some(self.tick_of(self.queue.deadline(&key)).max(self.now + 1))
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn scope<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let rt = Rc::clone(&self.rt);
        let _ctx = rt.enter();
        f(self)
    }
}

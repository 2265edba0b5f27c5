//! The test clock: [`pause`], [`advance`] and [`resume`], as tokio's `test-util` has them.
//!
//! One clock for the whole process (the crate's `clock::test_clock`): [`super::Instant::now`]
//! and every base of this module (the fallback and every [`super::Timers`] set on the default
//! monotonic clock) follow it. While paused it stands still; [`advance`] moves it forward and
//! turns every base at once, so the sleeps that came due fire and their tasks are woken before
//! the returned future completes; [`resume`] lets it run on from where it stands. A base's
//! timerfd is disarmed while the clock is paused and re-armed for the new kernel time after each
//! change (the base sees the clock's generation move).
//!
//! Given up, against tokio's: the clock is process-wide, not per runtime, so tests that pause it
//! belong in a test binary of their own (or must not run alongside tests that sleep for real);
//! a paused clock is never advanced by itself when the runtime is idle (tokio's auto-advance), so
//! a test moves it with [`advance`]; a pause rounds the time up to a whole millisecond.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Duration;
use super::driver::turn_all;
use crate::clock::test_clock;

/// Freezes the time module's clock: [`super::Instant::now`] stands still and sleeps complete only
/// when [`advance`] moves it past their deadlines. Panics if it is already paused.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant};
///
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// rt.block_on(async {
///     time::pause();
///     let start = Instant::now();
///     let hour = tokio::spawn(time::sleep(Duration::from_secs(3600)));
///     time::advance(Duration::from_secs(3600)).await;
///     hour.await.unwrap();
///     assert_eq!(start.elapsed(), Duration::from_secs(3600));
///     time::resume();
/// });
/// ```
#[track_caller]
pub fn pause() {
    if let Err(e) = test_clock::pause() {
        panic!("{e}");
    }
    turn_all();
}

/// Lets the paused clock run again, on from the time it stands at. Panics if it is not paused.
#[track_caller]
pub fn resume() {
    if let Err(e) = test_clock::resume() {
        panic!("{e}");
    }
    turn_all();
}

/// Moves the paused clock forward by `duration` (at the call) and fires every sleep that comes
/// due, waking its task; the future yields once, so that on a current-thread runtime those tasks
/// run before it completes. Panics if the clock is not paused.
#[track_caller]
pub fn advance(duration: Duration) -> impl Future<Output = ()> + Send + 'static {
    if let Err(e) = test_clock::advance(duration) {
        panic!("{e}");
    }
    turn_all();
    YieldOnce(false)
}

/// Pending once (waking itself), then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

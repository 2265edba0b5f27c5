//! The test clock (feature `test-util`): [`pause`], [`advance`] and [`resume`] are tokio's, so
//! that `#[tokio::test(start_paused = true)]`, `tokio::time::pause()` and these move one clock,
//! the clock of the runtime they are called in; [`super::Instant::now`] reads it. While it is
//! paused, the runtime's sleeps are filed on a base of its own that follows it (see `paused`),
//! including tokio's auto-advance.

use std::future::{Future, poll_fn};
use std::pin::pin;

use super::Duration;
use super::paused;

/// Pauses the clock of the current runtime: [`super::Instant::now`] stands still, and sleeps
/// complete when [`advance`] moves it past their deadlines or, once the runtime has nothing else
/// to do, when it jumps to the next deadline by itself (tokio's auto-advance). tokio's
/// `pause`: panics outside a current-thread runtime or if the clock is paused already.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant};
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// rt.block_on(async {
///     time::pause();
///     let start = Instant::now();
///     // Nothing else to do: the clock jumps to the deadline (on tokio's 1 ms tick).
///     time::sleep(Duration::from_secs(3600)).await;
///     let hour = Duration::from_secs(3600);
///     assert!(start.elapsed() >= hour && start.elapsed() <= hour + Duration::from_millis(1));
/// });
/// ```
#[track_caller]
pub fn pause() {
    tokio::time::pause();
}

/// Lets the paused clock of the current runtime run again, on from the time it stands at (tokio's
/// `resume`). Panics if it is not paused or outside a runtime.
#[track_caller]
pub fn resume() {
    tokio::time::resume();
}

/// Moves the paused clock of the current runtime forward by `duration` (at the first poll, as
/// tokio's) and wakes every sleep that comes due; the future yields once, so that the woken tasks
/// run before it completes. Panics at its first poll if the clock is not paused.
pub async fn advance(duration: Duration) {
    let mut tokio_advance = pin!(tokio::time::advance(duration));
    let mut moved = false;
    poll_fn(|cx| {
        let out = tokio_advance.as_mut().poll(cx);
        if !moved {
            // tokio's first poll moved the clock and yields; the sleeps that came due are woken
            // now, ahead of this task (as tokio's own timers are).
            moved = true;
            paused::turn_this_runtime();
        }
        out
    })
    .await;
}

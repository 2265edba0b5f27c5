//! [`timeout`]: a future with a time limit, filing its timer only if the future has to wait.

use std::error::Error;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::sleep::{Sleep, sleep, sleep_until};
use super::{Duration, Instant};

/// Runs `future` with a time limit of `duration`.
///
/// The limit counts from the first poll at which `future` is not ready: a future that completes
/// at its first poll (a request answered at once) costs no clock read and no timer at all. Use
/// [`timeout_at`] for a limit fixed when the `Timeout` is made.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// timers.block_on(0, &rt, async {
///     assert_eq!(time::timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
///     let never = std::future::pending::<()>();
///     assert!(time::timeout(Duration::from_millis(2), never).await.is_err());
/// }).unwrap();
/// ```
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        limit: Limit::After(duration),
        sleep: None,
    }
}

/// Runs `future` until `deadline`.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration, Instant, Timers};
///
/// let timers = Timers::new(1).unwrap();
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// let deadline = Instant::now() + Duration::from_millis(2);
/// let out = timers.block_on(0, &rt, time::timeout_at(deadline, std::future::pending::<()>()));
/// assert!(out.unwrap().is_err() && Instant::now() >= deadline);
/// ```
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        limit: Limit::At(deadline),
        sleep: None,
    }
}

#[derive(Clone, Copy, Debug)]
enum Limit {
    After(Duration),
    At(Instant),
}

/// The future of [`timeout`] and [`timeout_at`]: the inner output, or [`Elapsed`].
#[must_use = "futures do nothing unless polled"]
pub struct Timeout<F> {
    future: F,
    limit: Limit,
    /// Made at the first poll that finds `future` pending.
    sleep: Option<Sleep>,
}

impl<F: fmt::Debug> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("future", &self.future)
            .field("limit", &self.limit)
            .field("sleep", &self.sleep)
            .finish()
    }
}

impl<F> Timeout<F> {
    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The inner future, mutably.
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The inner future, consuming the `Timeout` (its timer, if filed, is cancelled).
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of a pinned `Timeout`
        // (only `into_inner`, which takes `self` by value and so needs `Timeout: Unpin` once
        // pinned), and `Timeout` has no `Drop` impl. The other fields are not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(v) = future.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        let limit = this.limit;
        let sleep = this.sleep.get_or_insert_with(|| match limit {
            Limit::After(d) => sleep(d),
            Limit::At(t) => sleep_until(t),
        });
        match Pin::new(sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The time limit of a [`Timeout`] passed before its future completed. Converts into an
/// `io::Error` of kind `TimedOut`, so `?` on a timeout works in a function returning
/// `io::Result`.
///
/// ```
/// use tickwheel_percpu::time::{self, Duration};
///
/// async fn read_within_a_second() -> std::io::Result<u32> {
///     let value = time::timeout(Duration::from_secs(1), async { 7 }).await?;
///     Ok(value)
/// }
/// # let _ = read_within_a_second();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(_: Elapsed) -> io::Error {
        io::ErrorKind::TimedOut.into()
    }
}

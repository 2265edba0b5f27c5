//! hyper 1.x's [`hyper::rt::Timer`] on the per-core bases.

use std::pin::Pin;
use std::time::{Duration, Instant};

use super::sleep::{Sleep, sleep, sleep_until};

/// hyper's timer on the bases: give it to `http1::Builder::timer` and the header-read timeout and
/// keep-alive timers of each connection run on the base of the thread that polls the connection.
/// Resets of hyper's timers happen in place ([`Sleep::reset`]).
///
/// ```
/// use std::time::Duration;
/// use tickwheel_percpu::time::HyperTimer;
///
/// let mut http = hyper::server::conn::http1::Builder::new();
/// http.timer(HyperTimer::new()).header_read_timeout(Duration::from_secs(5));
/// ```
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct HyperTimer;

impl HyperTimer {
    /// The timer (it uses whichever thread's base polls the sleeps it makes).
    pub fn new() -> Self {
        Self
    }
}

impl hyper::rt::Sleep for Sleep {}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep_until(deadline.into()))
    }

    /// The time module's clock, so hyper's deadlines follow the test clock (`pause`/`advance`)
    /// as the sleeps do.
    fn now(&self) -> Instant {
        super::Instant::now().into_std()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(ours) => ours.get_mut().reset(new_deadline.into()),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

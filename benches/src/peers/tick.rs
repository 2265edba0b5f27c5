//! tickwheel itself, in either mode, through the same trait as its peers.

use super::Timers;
use tickwheel::{Mode, TimerId, Wheel};

/// `tickwheel::Wheel<u64>`.
#[derive(Debug)]
pub struct TickWheel {
    wheel: Wheel<u64>,
}

impl TickWheel {
    /// An empty, unbounded wheel at tick 0 in `mode`.
    pub fn new(mode: Mode) -> Self {
        Self {
            wheel: Wheel::new(mode),
        }
    }

    /// An empty wheel in `mode` bounded to [`BOUND`] timers, as a server that knows its
    /// connection limit builds it (and as C's `timeout.c` harness allocates its nodes up front):
    /// its entries are reserved as one buffer, touched when [`Timers::prepare`] creates them.
    pub fn bounded(mode: Mode) -> Self {
        let wheel = Wheel::builder(mode).capacity(BOUND).build();
        Self {
            wheel: wheel.expect("a valid capacity"),
        }
    }
}

/// The bound of [`TickWheel::bounded`]: above the largest size the runner measures (10^7).
pub(super) const BOUND: usize = 1 << 24;

impl Timers for TickWheel {
    type Id = TimerId;

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> TimerId {
        match self.wheel.insert(deadline, value) {
            Ok(id) => id,
            Err(_) => unreachable!("no workload holds more than BOUND timers"),
        }
    }

    #[inline]
    fn cancel(&mut self, id: TimerId) -> Option<u64> {
        self.wheel.cancel(id)
    }

    #[inline]
    fn reset(&mut self, id: &mut TimerId, deadline: u64) -> bool {
        self.wheel.reset(*id, deadline)
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        for (_, value) in self.wheel.drain(now) {
            fired(value);
        }
    }

    fn prepare(&mut self, n: usize) {
        if self.wheel.reserve(n).is_err() {
            unreachable!("no workload holds more than BOUND timers");
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        self.wheel.next_expiry()
    }

    fn len(&self) -> usize {
        self.wheel.len()
    }
}

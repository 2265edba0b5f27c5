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
}

impl Timers for TickWheel {
    type Id = TimerId;

    fn insert(&mut self, deadline: u64, value: u64) -> TimerId {
        match self.wheel.insert(deadline, value) {
            Ok(id) => id,
            Err(_) => unreachable!("an unbounded wheel is never full"),
        }
    }

    fn cancel(&mut self, id: TimerId) -> Option<u64> {
        self.wheel.cancel(id)
    }

    fn reset(&mut self, id: &mut TimerId, deadline: u64) -> bool {
        self.wheel.reset(*id, deadline)
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        for (_, value) in self.wheel.drain(now) {
            fired(value);
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        self.wheel.next_expiry()
    }

    fn len(&self) -> usize {
        self.wheel.len()
    }
}

//! Kompact's timer: `hierarchical_hash_wheel_timer`'s cancellable four-level byte wheel.
//!
//! Entries are `Rc`s held in an id-keyed hash map; the wheel holds `Weak`s. Cancel removes the map
//! entry and leaves the dead `Weak` in the wheel until its slot comes round (and the allocation
//! lives as long as that `Weak`). The crate has no re-arm, so a re-arm is cancel plus insert. The
//! wheel counts delays relative to its own position and moves one millisecond per `tick()`; the
//! adapter skips empty stretches with `can_skip()`.

use super::Timers;
use hierarchical_hash_wheel_timer::TimerError;
use hierarchical_hash_wheel_timer::wheels::cancellable::{
    CancellableTimerEntry, QuadWheelWithOverflow,
};
use hierarchical_hash_wheel_timer::wheels::{Skip, TimerEntryWithDelay};
use std::time::Duration;

/// One armed timer as the crate wants it: an id, a delay and our value.
#[derive(Debug)]
pub(crate) struct Entry {
    id: u64,
    delay: Duration,
    value: u64,
}

impl CancellableTimerEntry for Entry {
    type Id = u64;
    fn id(&self) -> &u64 {
        &self.id
    }
}

impl TimerEntryWithDelay for Entry {
    fn delay(&self) -> Duration {
        self.delay
    }
}

/// Id of a Kompact timer. The crate's cancel hands nothing back, so the id carries the value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KompactId {
    id: u64,
    value: u64,
}

/// The cancellable quad wheel with a tick counter.
pub struct KompactWheel {
    wheel: QuadWheelWithOverflow<Entry>,
    /// Ticks the wheel has moved since creation.
    now: u64,
    next_id: u64,
    len: usize,
    /// Timers armed with a deadline not after now, handed out at the next advance.
    overdue: Vec<u64>,
}

impl std::fmt::Debug for KompactWheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KompactWheel")
            .field("now", &self.now)
            .field("len", &self.len)
            .finish()
    }
}

impl Default for KompactWheel {
    fn default() -> Self {
        Self::new()
    }
}

impl KompactWheel {
    /// An empty wheel at tick 0.
    pub fn new() -> Self {
        Self {
            wheel: QuadWheelWithOverflow::new(),
            now: 0,
            next_id: 0,
            len: 0,
            overdue: Vec::new(),
        }
    }

    fn arm(&mut self, id: u64, deadline: u64, value: u64) {
        let delay = Duration::from_millis(deadline.saturating_sub(self.now));
        match self.wheel.insert(Entry { id, delay, value }) {
            Ok(()) => {}
            Err(TimerError::Expired(e)) => self.overdue.push(e.value),
            Err(TimerError::NotFound) => unreachable!("insert never reports NotFound"),
        }
    }
}

impl Timers for KompactWheel {
    type Id = KompactId;

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> KompactId {
        self.next_id += 1;
        let id = self.next_id;
        self.arm(id, deadline, value);
        self.len += 1;
        KompactId { id, value }
    }

    #[inline]
    fn cancel(&mut self, id: KompactId) -> Option<u64> {
        self.wheel.cancel(&id.id).ok()?;
        self.len -= 1;
        Some(id.value)
    }

    #[inline]
    fn reset(&mut self, id: &mut KompactId, deadline: u64) -> bool {
        if self.wheel.cancel(&id.id).is_err() {
            return false;
        }
        self.len -= 1;
        *id = self.insert(deadline, id.value);
        true
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        for value in self.overdue.drain(..) {
            self.len -= 1;
            fired(value);
        }
        while self.now < now {
            let left = now - self.now;
            match self.wheel.can_skip() {
                Skip::Empty => {
                    self.wheel.skip(left.min(u64::from(u32::MAX)) as u32);
                    self.now += left.min(u64::from(u32::MAX));
                }
                Skip::Millis(ms) if u64::from(ms) < left => {
                    self.wheel.skip(ms);
                    self.now += u64::from(ms);
                }
                Skip::Millis(_) => {
                    self.wheel.skip(left as u32);
                    self.now = now;
                }
                Skip::None => {
                    self.now += 1;
                    for entry in self.wheel.tick() {
                        self.len -= 1;
                        fired(entry.value);
                    }
                }
            }
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        if self.len == 0 {
            // Only dead `Weak`s (cancelled timers) may be left in the wheel.
            return None;
        }
        if !self.overdue.is_empty() {
            return Some(self.now + 1);
        }
        match self.wheel.can_skip() {
            Skip::Empty => None,
            Skip::Millis(ms) => Some(self.now + u64::from(ms) + 1),
            Skip::None => Some(self.now + 1),
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

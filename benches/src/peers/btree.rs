//! Ordered-map timers with exact removal, as async-io, glommio and compio keep them.
//!
//! Keys are (deadline, sequence) so equal deadlines stay distinct and fire in arming order. Every
//! operation is O(log n) and the map holds exactly the armed timers: memory never grows with
//! cancels or re-arms, at the price of a tree walk on each.

use super::Timers;
use std::collections::BTreeMap;

/// `BTreeMap<(deadline, sequence), value>`.
#[derive(Debug, Default)]
pub struct BTreeTimers {
    map: BTreeMap<(u64, u64), u64>,
    seq: u64,
    now: u64,
}

impl BTreeTimers {
    /// An empty map at tick 0.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Timers for BTreeTimers {
    type Id = (u64, u64);

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> (u64, u64) {
        self.seq += 1;
        let key = (deadline, self.seq);
        self.map.insert(key, value);
        key
    }

    #[inline]
    fn cancel(&mut self, id: (u64, u64)) -> Option<u64> {
        self.map.remove(&id)
    }

    #[inline]
    fn reset(&mut self, id: &mut (u64, u64), deadline: u64) -> bool {
        match self.map.remove(id) {
            Some(value) => {
                *id = self.insert(deadline, value);
                true
            }
            None => false,
        }
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        self.now = self.now.max(now);
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            fired(entry.remove());
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        self.map
            .first_key_value()
            .map(|(&(deadline, _), _)| deadline)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

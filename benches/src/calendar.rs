//! A calendar queue (R. Brown, "Calendar queues", CACM 31(10), 1988), with resizing buckets.
//!
//! # Model
//! Time is cut into days of `width` ticks; day `d` lives in bucket `d mod buckets`, so one bucket
//! holds events of the same day-of-year from many years. Each bucket is kept sorted, latest first,
//! so its earliest event is at the end. A cursor walks the buckets one day at a time: the minimum
//! is the first bucket whose earliest event falls inside the cursor's day. When a whole year passes
//! without a hit, a direct search over the bucket heads jumps the cursor to the minimum.
//!
//! # Invariants
//! - No pending event is earlier than the start of the cursor's day (`cursor_end - width`). An
//!   insert earlier than that moves the cursor back (timers may be armed before the last popped
//!   minimum, unlike Brown's simulation events).
//! - The bucket count doubles when events exceed twice the buckets and halves when they fall
//!   below half, so buckets hold O(1) events on average; each resize re-estimates `width` as three
//!   times the mean gap between the earliest events (ignoring gaps over twice the mean), as Brown
//!   prescribes, which costs O(n) and is amortised over the n/2 operations between resizes.
//!
//! # What was given up
//! Worst cases: a skewed distribution puts many events in one bucket (O(n) insert), and resizes are
//! O(n) pauses. Events are removed exactly, so memory tracks the live count.

/// One pending event.
#[derive(Clone, Debug)]
struct Event<V> {
    deadline: u64,
    seq: u64,
    value: V,
}

impl<V> Event<V> {
    fn key(&self) -> (u64, u64) {
        (self.deadline, self.seq)
    }
}

/// Id of a calendar event: its deadline and arming sequence number.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CalendarId {
    deadline: u64,
    seq: u64,
}

const MIN_BUCKETS: usize = 16;
/// Brown samples this many of the earliest events to estimate the day width.
const WIDTH_SAMPLE: usize = 25;

/// A calendar queue of values `V` keyed by `u64` deadlines.
#[derive(Debug)]
pub struct CalendarQueue<V> {
    buckets: Vec<Vec<Event<V>>>,
    width: u64,
    /// Bucket of the cursor's day.
    cursor: usize,
    /// End (exclusive) of the cursor's day.
    cursor_end: u64,
    len: usize,
    seq: u64,
    now: u64,
}

impl<V> Default for CalendarQueue<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> CalendarQueue<V> {
    /// An empty queue at tick 0.
    pub fn new() -> Self {
        Self {
            buckets: (0..MIN_BUCKETS).map(|_| Vec::new()).collect(),
            width: 1,
            cursor: 0,
            cursor_end: 1,
            len: 0,
            seq: 0,
            now: 0,
        }
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    fn day_of(&self, deadline: u64) -> u64 {
        deadline / self.width
    }

    fn bucket_of(&self, deadline: u64) -> usize {
        self.day_of(deadline) as usize & self.mask()
    }

    fn cursor_start(&self) -> u64 {
        self.cursor_end.saturating_sub(self.width)
    }

    /// Puts the cursor on the day holding `deadline`.
    fn aim_cursor_at(&mut self, deadline: u64) {
        self.cursor = self.bucket_of(deadline);
        self.cursor_end = (self.day_of(deadline) + 1).saturating_mul(self.width);
    }

    /// Inserts into the right bucket, keeping it sorted latest-first; no resize.
    fn place(&mut self, event: Event<V>) {
        if event.deadline < self.cursor_start() {
            self.aim_cursor_at(event.deadline);
        }
        let bucket = self.bucket_of(event.deadline);
        let list = &mut self.buckets[bucket];
        let key = event.key();
        let at = list.partition_point(|e| e.key() > key);
        list.insert(at, event);
    }

    /// Arms `value` at `deadline`.
    pub fn insert(&mut self, deadline: u64, value: V) -> CalendarId {
        self.seq += 1;
        let id = CalendarId {
            deadline,
            seq: self.seq,
        };
        self.place(Event {
            deadline,
            seq: self.seq,
            value,
        });
        self.len += 1;
        if self.len > 2 * self.buckets.len() {
            self.resize(2 * self.buckets.len());
        }
        id
    }

    /// Removes event `id`, returning its value.
    pub fn remove(&mut self, id: CalendarId) -> Option<V> {
        let bucket = self.bucket_of(id.deadline);
        let list = &mut self.buckets[bucket];
        let key = (id.deadline, id.seq);
        let at = list.partition_point(|e| e.key() > key);
        if list.get(at).is_none_or(|e| e.key() != key) {
            return None;
        }
        let event = list.remove(at);
        self.len -= 1;
        self.maybe_shrink();
        Some(event.value)
    }

    fn maybe_shrink(&mut self) {
        if self.buckets.len() > MIN_BUCKETS && self.len < self.buckets.len() / 2 {
            self.resize(self.buckets.len() / 2);
        }
    }

    /// Bucket holding the earliest event, moving the cursor onto its day.
    fn seek_min(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        for _ in 0..self.buckets.len() {
            if let Some(e) = self.buckets[self.cursor].last()
                && e.deadline < self.cursor_end
            {
                return Some(self.cursor);
            }
            self.cursor = (self.cursor + 1) & self.mask();
            self.cursor_end = self.cursor_end.saturating_add(self.width);
        }
        // A whole year without an event in its own day: search the bucket heads directly.
        let earliest = self
            .buckets
            .iter()
            .filter_map(|b| b.last())
            .map(|e| e.deadline)
            .min()?;
        self.aim_cursor_at(earliest);
        Some(self.cursor)
    }

    /// Deadline of the earliest event.
    pub fn peek_deadline(&mut self) -> Option<u64> {
        let bucket = self.seek_min()?;
        self.buckets[bucket].last().map(|e| e.deadline)
    }

    /// Removes and returns the earliest event if its deadline is at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, V)> {
        let bucket = self.seek_min()?;
        if self.buckets[bucket].last()?.deadline > now {
            return None;
        }
        let event = self.buckets[bucket].pop()?;
        self.len -= 1;
        self.maybe_shrink();
        Some((event.deadline, event.value))
    }

    /// Rebuilds with `count` buckets and a width re-estimated from the earliest events.
    fn resize(&mut self, count: usize) {
        let mut events: Vec<Event<V>> = self.buckets.iter_mut().flat_map(std::mem::take).collect();
        // With nothing pending the cursor stays where it is (its day start under the old width).
        let start = events
            .iter()
            .map(|e| e.deadline)
            .min()
            .unwrap_or(self.cursor_start());
        self.width = estimate_width(&mut events).unwrap_or(self.width);
        self.buckets = (0..count).map(|_| Vec::new()).collect();
        self.aim_cursor_at(start);
        for event in events {
            self.place(event);
        }
    }
}

/// Brown's day width: three times the mean gap between the earliest events, after dropping gaps
/// larger than twice the first mean. `None` with fewer than two events. Reorders `events`.
fn estimate_width<V>(events: &mut [Event<V>]) -> Option<u64> {
    if events.len() < 2 {
        return None;
    }
    let k = events.len().min(WIDTH_SAMPLE);
    if k < events.len() {
        events.select_nth_unstable_by_key(k - 1, |e| e.deadline);
    }
    let mut sample: Vec<u64> = events[..k].iter().map(|e| e.deadline).collect();
    sample.sort_unstable();
    let gaps: Vec<u64> = sample.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
    let kept: Vec<u64> = gaps
        .iter()
        .copied()
        .filter(|&g| g as f64 <= 2.0 * mean)
        .collect();
    let mean = if kept.is_empty() {
        mean
    } else {
        kept.iter().sum::<u64>() as f64 / kept.len() as f64
    };
    Some(((3.0 * mean).ceil() as u64).max(1))
}

impl crate::Timers for CalendarQueue<u64> {
    type Id = CalendarId;

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> CalendarId {
        CalendarQueue::insert(self, deadline, value)
    }

    #[inline]
    fn cancel(&mut self, id: CalendarId) -> Option<u64> {
        self.remove(id)
    }

    #[inline]
    fn reset(&mut self, id: &mut CalendarId, deadline: u64) -> bool {
        match self.remove(*id) {
            Some(value) => {
                *id = CalendarQueue::insert(self, deadline, value);
                true
            }
            None => false,
        }
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        self.now = self.now.max(now);
        while let Some((_, value)) = self.pop_due(self.now) {
            fired(value);
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        self.peek_deadline()
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use std::collections::BTreeMap;

    /// Random arms, removals and pops, checked against a `BTreeMap` keyed the same way; the
    /// calendar must pop in exactly (deadline, sequence) order.
    fn against_btreemap(seed: u64, spread: u64) {
        let mut rng = SplitMix64::new(seed);
        let mut cal = CalendarQueue::new();
        let mut model: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut ids = Vec::new();
        let mut now = 0;
        for step in 0..50_000u64 {
            match rng.below(8) {
                0..=3 => {
                    let deadline = now + rng.below(spread);
                    let id = cal.insert(deadline, step);
                    model.insert((id.deadline, id.seq), step);
                    ids.push(id);
                }
                4 if !ids.is_empty() => {
                    let id = ids.swap_remove(rng.below(ids.len() as u64) as usize);
                    assert_eq!(cal.remove(id), model.remove(&(id.deadline, id.seq)));
                }
                _ => {
                    now += rng.below(spread / 4 + 1);
                    while let Some((deadline, value)) = cal.pop_due(now) {
                        let ((d, _), v) = model.pop_first().expect("model has it");
                        assert_eq!((deadline, value), (d, v));
                    }
                    assert!(model.first_key_value().is_none_or(|((d, _), _)| *d > now));
                }
            }
            assert_eq!(cal.len(), model.len());
            assert_eq!(
                cal.peek_deadline(),
                model.first_key_value().map(|((d, _), _)| *d)
            );
        }
    }

    #[test]
    fn matches_btreemap_with_dense_deadlines() {
        against_btreemap(1, 50);
    }

    #[test]
    fn matches_btreemap_with_sparse_deadlines() {
        against_btreemap(2, 1 << 20);
    }

    #[test]
    fn width_is_three_mean_gaps() {
        let mut events: Vec<Event<()>> = (0..10)
            .map(|i| Event {
                deadline: i * 4,
                seq: i,
                value: (),
            })
            .collect();
        assert_eq!(estimate_width(&mut events), Some(12));
        let mut one = vec![Event {
            deadline: 5,
            seq: 0,
            value: (),
        }];
        assert_eq!(estimate_width(&mut one), None);
    }

    #[test]
    fn removing_an_unknown_id_is_none() {
        let mut cal = CalendarQueue::new();
        let id = cal.insert(10, 1u32);
        assert_eq!(cal.remove(id), Some(1));
        assert_eq!(cal.remove(id), None);
    }
}

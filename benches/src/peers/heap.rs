//! The usual event-loop timer: a binary min-heap of (deadline, slot, generation) with lazy cancel.
//!
//! Values live in a slab of slots; each slot carries a generation that is bumped whenever its timer
//! is cancelled, re-armed or fired. A heap entry whose generation no longer matches its slot is dead
//! and is skipped when it reaches the top. Cancel is O(1), re-arm is a push (O(log n)), and dead
//! entries pile up until they surface; when they outnumber live ones two to one the heap is rebuilt
//! in O(n), which bounds memory at about three entries per live timer.

use super::Timers;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Heap entry; ordered by deadline first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    deadline: u64,
    slot: u32,
    generation: u32,
}

#[derive(Copy, Clone, Debug)]
struct Slot {
    generation: u32,
    armed: bool,
    value: u64,
}

/// Id of a heap timer: its slot and the generation it was armed under.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HeapId {
    slot: u32,
    generation: u32,
}

/// `BinaryHeap` with a generation array for lazy cancel.
#[derive(Debug, Default)]
pub struct LazyHeap {
    heap: BinaryHeap<Reverse<Entry>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    now: u64,
}

impl LazyHeap {
    /// An empty heap at tick 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn is_current(&self, id: HeapId) -> bool {
        self.slots
            .get(id.slot as usize)
            .is_some_and(|s| s.armed && s.generation == id.generation)
    }

    fn is_live(&self, e: &Entry) -> bool {
        self.is_current(HeapId {
            slot: e.slot,
            generation: e.generation,
        })
    }

    /// Marks the slot free and returns its value; every heap entry naming it becomes dead.
    fn retire(&mut self, slot: u32) -> u64 {
        let s = &mut self.slots[slot as usize];
        s.generation = s.generation.wrapping_add(1);
        s.armed = false;
        self.free.push(slot);
        self.live -= 1;
        s.value
    }

    fn push(&mut self, deadline: u64, slot: u32, generation: u32) {
        self.heap.push(Reverse(Entry {
            deadline,
            slot,
            generation,
        }));
        if self.heap.len() > 3 * self.live + 64 {
            let slots = &self.slots;
            self.heap.retain(|Reverse(e)| {
                let s = &slots[e.slot as usize];
                s.armed && s.generation == e.generation
            });
        }
    }

    /// Drops dead entries sitting at the top.
    fn skim(&mut self) {
        while let Some(Reverse(top)) = self.heap.peek() {
            if self.is_live(top) {
                break;
            }
            self.heap.pop();
        }
    }
}

impl Timers for LazyHeap {
    type Id = HeapId;

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> HeapId {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    armed: false,
                    value: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.armed = true;
        s.value = value;
        let generation = s.generation;
        self.live += 1;
        self.push(deadline, slot, generation);
        HeapId { slot, generation }
    }

    fn prepare(&mut self, n: usize) {
        self.heap.reserve(n);
        self.slots.reserve(n);
    }

    #[inline]
    fn cancel(&mut self, id: HeapId) -> Option<u64> {
        self.is_current(id).then(|| self.retire(id.slot))
    }

    #[inline]
    fn reset(&mut self, id: &mut HeapId, deadline: u64) -> bool {
        if !self.is_current(*id) {
            return false;
        }
        let s = &mut self.slots[id.slot as usize];
        s.generation = s.generation.wrapping_add(1);
        id.generation = s.generation;
        self.push(deadline, id.slot, id.generation);
        true
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        self.now = self.now.max(now);
        while let Some(&Reverse(top)) = self.heap.peek() {
            if top.deadline > self.now {
                break;
            }
            self.heap.pop();
            if self.is_live(&top) {
                fired(self.retire(top.slot));
            }
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        self.skim();
        self.heap.peek().map(|Reverse(e)| e.deadline)
    }

    fn len(&self) -> usize {
        self.live
    }
}

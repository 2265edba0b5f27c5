//! The two per-base stacks of slots, linked through the slot records' `link` words.
//!
//! # Model
//! - The *reserve* holds free slots the owner set aside for remote schedulers. The owner pushes;
//!   remote schedulers (and the owner, when its own slots run out) pop. Its head word packs the
//!   top slot with a count of pops, so a pop whose view of the top is stale (the slot was popped
//!   and pushed back meanwhile, the ABA case) fails its CAS; the count also gives the owner the
//!   stack's length (`pushes - pops`) from one load.
//! - The *notice* stack holds slots the owner must look at: remote schedules, remote cancels,
//!   remote re-arms to an earlier deadline. Any thread pushes (each slot at most once: only the
//!   thread that set the slot's `QUEUED` flag pushes it); the owner takes the whole stack with one
//!   swap. A stack that is only pushed to and swapped empty has no ABA problem.
//!
//! Neither stack can be full: a slot is on at most one stack at a time (a free slot on the
//! reserve, an armed or cancelled one on the notice stack), so pushing never fails and nobody
//! ever has to wait to give a slot back.
//!
//! # Orderings
//! A push stores the slot's link, then CASes the head with Release; a pop or take loads (or
//! swaps) the head with Acquire, which makes the link and everything the pusher wrote before the
//! push (a slot's record) visible. Pushes by several threads form a release sequence on the head
//! (each CAS is a read-modify-write), so one take synchronises with every push it collects.

use super::slots::SlotTable;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// No slot.
pub const NIL: u32 = u32::MAX;

fn head_slot(head: u64) -> u32 {
    head as u32
}

fn head_pops(head: u64) -> u32 {
    (head >> 32) as u32
}

fn pack_head(pops: u32, slot: u32) -> u64 {
    (u64::from(pops) << 32) | u64::from(slot)
}

/// Free slots for remote schedulers. Pushed by the owner only.
#[derive(Debug)]
pub struct Reserve {
    head: AtomicU64,
}

impl Default for Reserve {
    fn default() -> Self {
        Self::new()
    }
}

impl Reserve {
    /// An empty reserve.
    pub fn new() -> Self {
        Self {
            head: AtomicU64::new(pack_head(0, NIL)),
        }
    }

    /// Owner: pushes a free slot it holds.
    pub fn push<T>(&self, table: &SlotTable<T>, slot: u32) {
        let link = &table.record(slot).link;
        // Relaxed: a starting guess; the CAS checks it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            link.store(head_slot(head), Ordering::Relaxed);
            let to = pack_head(head_pops(head), slot);
            // Release: the popper sees the link and the slot's FREE word.
            match self
                .head
                .compare_exchange_weak(head, to, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Any thread: takes a free slot, if there is one.
    pub fn pop<T>(&self, table: &SlotTable<T>) -> Option<u32> {
        // Acquire: pairs with the push that put this head here, so its link is visible.
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let slot = head_slot(head);
            if slot == NIL {
                return None;
            }
            // Relaxed: may be stale if the slot was popped and re-pushed meanwhile; then the pop
            // count in the head has moved on and the CAS below fails.
            let next = table.record(slot).link.load(Ordering::Relaxed);
            let to = pack_head(head_pops(head).wrapping_add(1), next);
            // Acquire on both paths: the next attempt (or the slot's use) needs the pusher's writes.
            match self
                .head
                .compare_exchange_weak(head, to, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => return Some(slot),
                Err(now) => head = now,
            }
        }
    }

    /// Owner: how many slots are on the reserve, given how many it has pushed in all (wrapping).
    pub fn len_after(&self, pushes: u32) -> usize {
        // Relaxed: an estimate that only decides how many to push.
        let pops = head_pops(self.head.load(Ordering::Relaxed));
        pushes.wrapping_sub(pops) as usize
    }
}

/// Slots the owner must look at. Pushed by anyone, taken whole by the owner.
#[derive(Debug)]
pub struct Notices {
    head: AtomicU32,
}

impl Default for Notices {
    fn default() -> Self {
        Self::new()
    }
}

impl Notices {
    /// An empty stack.
    pub fn new() -> Self {
        Self {
            head: AtomicU32::new(NIL),
        }
    }

    /// Pushes `slot` (whose `QUEUED` flag the caller set). True if the stack was empty: the
    /// caller then notifies the owner; a push onto a non-empty stack joins a batch whose first
    /// pusher notifies, so it needs no wake-up of its own.
    pub fn push<T>(&self, table: &SlotTable<T>, slot: u32) -> bool {
        let link = &table.record(slot).link;
        // Relaxed: a starting guess; the CAS checks it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            link.store(head, Ordering::Relaxed);
            // Release: the taker sees the link and the slot's record as this thread left it.
            match self
                .head
                .compare_exchange_weak(head, slot, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return head == NIL,
                Err(now) => head = now,
            }
        }
    }

    /// True if nothing is pushed (Relaxed: a hint; the wake word decides whether to sleep).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == NIL
    }

    /// Takes every slot pushed so far; walk it with [`Notices::next`].
    pub fn take(&self) -> u32 {
        // Relaxed load first: an empty stack (the common case) costs no RMW on a shared line.
        if self.head.load(Ordering::Relaxed) == NIL {
            return NIL;
        }
        // Acquire: synchronises with every push collected (they form a release sequence).
        self.head.swap(NIL, Ordering::Acquire)
    }

    /// The slot after `slot` in a taken list. Read it before clearing `slot`'s `QUEUED` flag: from
    /// then on `slot` may be pushed again, which rewrites its link.
    pub fn next<T>(table: &SlotTable<T>, slot: u32) -> u32 {
        // Relaxed: the take's Acquire made the link visible.
        table.record(slot).link.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_lifo_and_counts() {
        let t = SlotTable::<u8>::new(4);
        let r = Reserve::new();
        assert_eq!(r.pop(&t), None);
        for s in 0..3 {
            r.push(&t, s);
        }
        assert_eq!(r.len_after(3), 3);
        assert_eq!(r.pop(&t), Some(2));
        assert_eq!(r.len_after(3), 2);
        r.push(&t, 2);
        assert_eq!(r.len_after(4), 3);
        assert_eq!(
            [r.pop(&t), r.pop(&t), r.pop(&t), r.pop(&t)],
            [Some(2), Some(1), Some(0), None]
        );
    }

    #[test]
    fn notices_take_everything_and_report_first_push() {
        let t = SlotTable::<u8>::new(4);
        let n = Notices::new();
        assert_eq!(n.take(), NIL);
        assert!(n.push(&t, 1));
        assert!(!n.push(&t, 3));
        let mut got = Vec::new();
        let mut s = n.take();
        while s != NIL {
            got.push(s);
            s = Notices::next(&t, s);
        }
        assert_eq!(got, [3, 1]);
        assert_eq!(n.take(), NIL);
        assert!(n.push(&t, 3), "empty again after a take");
    }
}

//! The cross-process protocol: every step one atomic operation on one shared word.
//!
//! A [`View`] is a slice of the set's words plus its [`Layout`]. In a normal build the slice is
//! the mapping itself; under `cfg(loom)` it is a `Vec` of loom atomics, so the model checker runs
//! exactly this code.
//!
//! # Slot state word
//!
//! `generation (32) | holder (29) | tag (3)`. The holder names a process (22 bits of pid, 7 bits
//! of its start time): in `HELD`, the one that claimed the slot; in `FREE`, a canceller that has
//! yet to finish pushing the slot (0 once it has).
//!
//! | transition                     | by                              | op    |
//! |--------------------------------|---------------------------------|-------|
//! | `FREE(g)` or `FREE(g, c)` → `HELD(g, p)` | process `p`, after popping `(s, g)` | CAS |
//! | `HELD(g, p)` → `PENDING(g)`    | `p` (deadline and payload written first) | store |
//! | `PENDING(g)` → `FREE(g+1, c)`  | process `c` holding the handle (cancel), then it pushes the slot or its client keeps it | CAS |
//! | `FREE(g+1, c)` → `FREE(g+1)`   | `c`, once the slot is on the stack | CAS |
//! | `PENDING(g)` → `FIRING(g)`     | owner, when the wheel says due  | CAS   |
//! | `FIRING(g)` → `FREE(g+1)`      | owner, after the handler returned | CAS |
//! | `HELD(g, p)` → `FREE(g+1, p)`  | `p` giving back a kept slot it claimed, then it pushes the slot | store |
//! | `HELD(g, p)` → `FREE(g+1)`     | owner in recovery, `p` dead     | CAS   |
//! | `FREE(g)` / `FREE(g, c)` → `FREE(g+1)` | owner in recovery, slot on no stack (`c` dead) | CAS |
//!
//! Each arming is ended by exactly one CAS that wins (a cancel's, or the owner's fire), and the
//! winner alone puts the slot back on the free stack: the canceller at once (or its client keeps
//! the slot, and only a claim of it, by CAS, takes it from there: the client's next schedule, or
//! its drop, which claims it before pushing), the owner with the rest of its turn's freed slots
//! as one chain (one CAS). Recovery re-issues only a slot it knows to be on no stack (see
//! `Advancer::recover`). So a slot is on the free stack at most once. A handle carries `g`; its
//! CAS can only match the arming it was made for.
//!
//! # Free stack: pop and push are one CAS each
//!
//! The head packs `tag (32) | index (32)`; every successful head CAS bumps the tag, so a pop that
//! read the head, stalled while the node left and came back, fails its CAS (ABA). A node's link
//! word packs `generation at push (32) | next (32)`: the popper claims `FREE(g)` with exactly
//! that generation, so if recovery meanwhile decided the node was lost and re-issued it at
//! `g + 1`, the stale claim fails and the node is on the stack only once. Slots never used yet
//! come from a bump counter instead, so a new set touches no slot memory.
//!
//! # Dirty bitmap: submissions in one idempotent mark
//!
//! After arming, a process sets the slot's leaf bit (`fetch_or`), then at each level up looks at
//! the bit for the word below and sets it if clear, up to the top: every marker makes its own
//! way to the top, so none depends on another one finishing (a marker stopped between levels
//! delays only its own mark). The owner swaps the top words to zero, then the marked words
//! below, and indexes each marked slot that is `PENDING` (replacing the entry of an earlier
//! arming of the slot). A mark is a hint, never an obligation: a stale one finds nothing to do,
//! and one lost to a process killed between levels is found by recovery's full scan. A cancel
//! marks nothing: the owner's entry for the cancelled arming fails its fire CAS at its deadline,
//! or is replaced when the slot is armed again.
//!
//! Orderings: the slot fields (deadline, payload) are written Relaxed before the Release store of
//! `PENDING`, which precedes the marking RMWs (AcqRel, so each level's release sequence carries
//! everything before it). The owner's swaps are AcqRel and its state loads Acquire, so it reads
//! the fields the marker wrote. The free stack's pushes are Release and pops Acquire, so a popper
//! sees the link the pusher wrote. Claims are Acquire: after a fire, the owner read the slot's
//! old payload before its Release free, so the new holder's writes come after that read; after a
//! cancel nobody reads the old payload again (an owner still reading the old deadline may see the
//! new one, and its entry, made with the old generation, only fails its fire CAS).

use crate::sync::{AtomicU64, Ordering};

use super::hooks;
use super::layout::{self, Layout, MARK_BITS};

/// End of a list, and "no slot".
pub(crate) const NIL: u32 = u32::MAX;

/// The state part of a slot word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// On the free stack, or popped and about to be claimed.
    Free,
    /// Claimed by a process that is writing deadline and payload.
    Held,
    /// Armed: fires unless a cancel wins.
    Pending,
    /// The owner won the fire CAS and is running the handler.
    Firing,
    /// A tag no version of this code writes: the word was overwritten.
    Corrupt,
}

const TAG_MASK: u64 = 0b111;
const HOLDER_BITS: u32 = 29;
/// Bits of pid kept in a holder code (Linux pids are below 2^22).
const HOLDER_PID_BITS: u32 = 22;

fn tag_code(tag: Tag) -> u64 {
    match tag {
        Tag::Free => 0,
        Tag::Held => 1,
        Tag::Pending => 2,
        Tag::Firing => 4,
        Tag::Corrupt => 7,
    }
}

/// Packs a slot word.
pub(crate) fn pack(generation: u32, tag: Tag, holder: u32) -> u64 {
    debug_assert!(u64::from(holder) < 1 << HOLDER_BITS);
    u64::from(generation) << 32 | u64::from(holder) << 3 | tag_code(tag)
}

/// Splits a slot word into (generation, tag, holder).
pub(crate) fn unpack(word: u64) -> (u32, Tag, u32) {
    let tag = match word & TAG_MASK {
        0 => Tag::Free,
        1 => Tag::Held,
        2 => Tag::Pending,
        4 => Tag::Firing,
        _ => Tag::Corrupt,
    };
    (
        (word >> 32) as u32,
        tag,
        ((word >> 3) as u32) & ((1 << HOLDER_BITS) - 1),
    )
}

/// A process as the protocol names it: pid and start time (clock ticks since boot), which
/// together never repeat on one machine while it is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Ident {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Ident {
    /// The owner / registry word: pid in the low half, 32 bits of start time in the high half.
    /// Never 0, since no process has pid 0.
    pub(crate) fn word(self) -> u64 {
        u64::from(self.pid) | (self.start & 0xffff_ffff) << 32
    }

    /// 22 bits of pid and 7 of start time, for a slot's holder field.
    pub(crate) fn holder(self) -> u32 {
        (self.pid & ((1 << HOLDER_PID_BITS) - 1)) | ((self.start & 0x7f) as u32) << HOLDER_PID_BITS
    }
}

/// Splits an owner / registry word into (pid, low 32 bits of start time).
pub(crate) fn split_ident_word(word: u64) -> (u32, u64) {
    (word as u32, word >> 32)
}

/// Splits a holder field into (pid, low 7 bits of start time).
pub(crate) fn split_holder(holder: u32) -> (u32, u64) {
    (
        holder & ((1 << HOLDER_PID_BITS) - 1),
        u64::from(holder >> HOLDER_PID_BITS),
    )
}

fn head(tag: u32, index: u32) -> u64 {
    u64::from(tag) << 32 | u64::from(index)
}

/// What [`View::pop_free`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pop {
    /// A slot and the generation it was pushed with.
    Slot(u32, u32),
    /// Every slot is in use.
    Empty,
    /// The stack names no slot: the set's memory was overwritten.
    Corrupt,
}

/// Slots the owner has retired (made `FREE`) and not yet pushed: a chain through their links.
#[derive(Debug)]
pub(crate) struct Freed {
    first: u32,
    last: u32,
}

impl Default for Freed {
    fn default() -> Self {
        Freed {
            first: NIL,
            last: NIL,
        }
    }
}

/// The set's words seen through its layout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a> {
    pub(crate) words: &'a [AtomicU64],
    pub(crate) layout: &'a Layout,
}

impl<'a> View<'a> {
    #[inline]
    pub(crate) fn word(&self, at: usize) -> &'a AtomicU64 {
        &self.words[at]
    }

    #[inline]
    pub(crate) fn state(&self, s: u32) -> &'a AtomicU64 {
        self.word(self.layout.slot(s, 0))
    }

    #[inline]
    fn field(&self, s: u32, f: usize) -> &'a AtomicU64 {
        self.word(self.layout.slot(s, f))
    }

    pub(crate) fn capacity(&self) -> usize {
        self.layout.capacity
    }

    /// Adds to a statistics counter. Relaxed: counters order nothing.
    #[inline]
    pub(crate) fn count(&self, at: usize, n: u64) {
        hooks::store_point();
        self.word(at).fetch_add(n, Ordering::Relaxed);
    }

    // ---- allocation ----

    /// Takes a free slot: `(slot, generation it was pushed with)`, from the stack or, once that
    /// is empty, from the never-used range. [`Pop::Corrupt`] if the head or the link it would
    /// install names no slot (no correct process writes one).
    pub(crate) fn pop_free(&self) -> Pop {
        let top = self.word(layout::W_FREE_HEAD);
        let bump = self.word(layout::W_BUMP);
        let mut bumped_out = false;
        loop {
            // Acquire: pairs with the pushers' Release CAS, so the node's link is visible.
            let cur = top.load(Ordering::Acquire);
            let index = cur as u32;
            if index == NIL {
                // Empty only if the stack is still empty after the never-used range was found
                // spent: a stack seen empty before a slow bump may have filled meanwhile.
                if bumped_out {
                    return Pop::Empty;
                }
                // Relaxed: the counter only hands out indices; the slot's own word (zero:
                // FREE(0)) is then claimed by CAS. A spent counter is not written again.
                if bump.load(Ordering::Relaxed) < self.capacity() as u64 {
                    hooks::store_point();
                    // Relaxed: as above. Fetch-add past capacity is harmless: only compared.
                    let fresh = bump.fetch_add(1, Ordering::Relaxed);
                    if fresh < self.capacity() as u64 {
                        return Pop::Slot(fresh as u32, 0);
                    }
                }
                bumped_out = true;
                continue;
            }
            if !self.is_slot(index) {
                return Pop::Corrupt;
            }
            // Relaxed: ordered by the Acquire load of the head that named this node. If the node
            // was popped and pushed again since, the tag moved on and the CAS below fails.
            let link = self.field(index, 3).load(Ordering::Relaxed);
            if link as u32 != NIL && !self.is_slot(link as u32) {
                // Checked before it becomes the head. Every link a correct pusher writes names a
                // slot or NIL, so even a stale read (the node popped and pushed again meanwhile,
                // and the CAS below then fails) passes this check.
                return Pop::Corrupt;
            }
            let next = head(((cur >> 32) as u32).wrapping_add(1), link as u32);
            hooks::store_point();
            // Relaxed: the next round's Acquire load orders what it reads.
            if top
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Pop::Slot(index, (link >> 32) as u32);
            }
        }
    }

    /// True if `s` names a slot of this set.
    #[inline]
    pub(crate) fn is_slot(&self, s: u32) -> bool {
        (s as usize) < self.capacity()
    }

    /// Slots ever handed out by the bump counter (recovery scans these).
    pub(crate) fn used(&self) -> usize {
        (self.word(layout::W_BUMP).load(Ordering::Acquire) as usize).min(self.capacity())
    }

    /// `FREE(g)` → `HELD(g, holder)`, also from `FREE(g, p)` (a canceller `p` that pushed the
    /// slot and has yet to clear its name). False if the slot was re-issued or taken meanwhile.
    pub(crate) fn claim(&self, s: u32, g: u32, holder: u32) -> bool {
        let mut expected = pack(g, Tag::Free, 0);
        // A correct word moves from FREE(g, p) to FREE(g) at most once; a few rounds more only
        // bound a word some other process keeps overwriting.
        for _ in 0..4 {
            hooks::store_point();
            // Acquire: see the module doc (the new holder's writes follow the freer's reads).
            match self.state(s).compare_exchange(
                expected,
                pack(g, Tag::Held, holder),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) if now != expected && unpack(now).0 == g && unpack(now).1 == Tag::Free => {
                    expected = now;
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// Writes deadline and payload of a held slot and publishes it as `PENDING(g)`.
    pub(crate) fn arm(&self, s: u32, g: u32, deadline: u64, payload: u64) {
        hooks::store_point();
        // Relaxed: published by the Release store of the state word just below.
        self.field(s, 1).store(deadline, Ordering::Relaxed);
        hooks::store_point();
        self.field(s, 2).store(payload, Ordering::Relaxed);
        hooks::store_point();
        // Release: the owner's Acquire load of the state then sees deadline and payload. A store,
        // not a CAS: only the holder writes a HELD word, and recovery frees it only once the
        // holder is dead.
        self.state(s)
            .store(pack(g, Tag::Pending, 0), Ordering::Release);
    }

    /// `PENDING(g)` → `FREE(g+1, holder)`: the canceller's half of a cancel that won. True: the
    /// timer will never fire, and the caller owes the slot's push ([`release`](View::release)).
    pub(crate) fn cancel(&self, s: u32, g: u32, holder: u32) -> bool {
        hooks::store_point();
        // Relaxed: the race with the fire CAS is decided by this word's modification order alone.
        // The next holder needs nothing from the canceller (the free stack's Release push and
        // Acquire pop carry the link); an owner still reading this arming's deadline may read
        // the next one's, and its entry, made with generation `g`, then only fails its CAS.
        self.state(s)
            .compare_exchange(
                pack(g, Tag::Pending, 0),
                pack(g.wrapping_add(1), Tag::Free, holder),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// After a winning [`cancel`](View::cancel) of `(s, g)` by `holder`: pushes the slot on the
    /// free stack, then clears the holder's name from its word (`FREE(g+1, holder)` →
    /// `FREE(g+1)`; a claimer may have taken it first). Until that last step recovery leaves the
    /// slot alone while `holder` lives: it may not have been pushed yet.
    pub(crate) fn release(&self, s: u32, g: u32, holder: u32) {
        let next = g.wrapping_add(1);
        let mut one = Freed::default();
        self.chain(s, next, &mut one);
        self.push_freed(&mut one);
        hooks::store_point();
        // Release: recovery reads a FREE(g) word with Acquire and then walks the stack, and must
        // then see this push (see `Advancer::recover`).
        let _ = self.state(s).compare_exchange(
            pack(next, Tag::Free, holder),
            pack(next, Tag::Free, 0),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// A slot `(s, g)` that a client of `holder` kept from its cancel (`FREE(g, holder)`, on no
    /// stack), back on the free stack as its client is dropped. Claimed first, so that if a copy
    /// of the client left in a `fork` child took the slot meanwhile, the claim fails and nothing
    /// is pushed; then moved to the next generation while held, so that no copy of `(s, g)` can
    /// claim it between here and the push; then released as a cancel's slot is.
    pub(crate) fn give_back(&self, s: u32, g: u32, holder: u32) {
        if !self.claim(s, g, holder) {
            return;
        }
        hooks::store_point();
        // Release: as `release`'s last step (recovery reads a FREE word with Acquire). A store,
        // not a CAS: only the holder writes a HELD word (see `arm`).
        self.state(s).store(
            pack(g.wrapping_add(1), Tag::Free, holder),
            Ordering::Release,
        );
        self.release(s, g, holder);
    }

    /// Owner: `PENDING(g)` → `FIRING(g)`. `Err(word)` if a cancel won (or the word moved).
    pub(crate) fn start_fire(&self, s: u32, g: u32) -> Result<u64, u64> {
        hooks::store_point();
        // Acquire: reads the payload the scheduler published with its Release store.
        self.state(s)
            .compare_exchange(
                pack(g, Tag::Pending, 0),
                pack(g, Tag::Firing, 0),
                Ordering::Acquire,
                Ordering::Acquire,
            )
            .map(|_| self.field(s, 2).load(Ordering::Relaxed))
    }

    /// Deadline and payload of a slot the caller has seen `PENDING` or `FIRING` with Acquire.
    pub(crate) fn contents(&self, s: u32) -> (u64, u64) {
        // Relaxed: ordered by the caller's Acquire load of the state word.
        (
            self.field(s, 1).load(Ordering::Relaxed),
            self.field(s, 2).load(Ordering::Relaxed),
        )
    }

    /// Owner: `word` → `FREE(g+1)`, then onto the free stack. False (and nothing pushed) if the
    /// word was not `word` any more.
    #[cfg(test)]
    pub(crate) fn free(&self, s: u32, word: u64) -> bool {
        let mut one = Freed::default();
        let ok = self.retire(s, word, &mut one);
        self.push_freed(&mut one);
        ok
    }

    /// Owner: `word` → `FREE(g+1)`, chained into `batch` for [`push_freed`](View::push_freed).
    /// False (and nothing chained) if the word was not `word` any more. A slot retired and never
    /// pushed (the owner died in between) is free and on no stack: recovery re-issues it.
    pub(crate) fn retire(&self, s: u32, word: u64, batch: &mut Freed) -> bool {
        let (g, _, _) = unpack(word);
        let next = g.wrapping_add(1);
        hooks::store_point();
        // Release: the next holder's Acquire claim follows our reads of the old contents.
        let ok = self
            .state(s)
            .compare_exchange(
                word,
                pack(next, Tag::Free, 0),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok();
        if ok {
            self.chain(s, next, batch);
        }
        ok
    }

    /// Links free slot `s` (generation `g`) in front of `batch`.
    fn chain(&self, s: u32, g: u32, batch: &mut Freed) {
        hooks::store_point();
        // Relaxed: published by the Release CAS of `push_freed`.
        self.field(s, 3).store(
            u64::from(g) << 32 | u64::from(batch.first),
            Ordering::Relaxed,
        );
        if batch.first == NIL {
            batch.last = s;
        }
        batch.first = s;
    }

    /// Pushes a chain of free slots with one CAS on the head (the owner's batch: one cache-line
    /// transfer for the whole turn instead of one a slot; a canceller's: one slot).
    pub(crate) fn push_freed(&self, batch: &mut Freed) {
        if batch.first == NIL {
            return;
        }
        let top = self.word(layout::W_FREE_HEAD);
        let last = self.field(batch.last, 3);
        // Relaxed: the owner wrote this link itself in `retire`.
        let generation = last.load(Ordering::Relaxed) & !0xffff_ffff;
        // Relaxed: the head's value only feeds the CAS; nothing is read through it here.
        let mut cur = top.load(Ordering::Relaxed);
        loop {
            hooks::store_point();
            // Relaxed: published by the Release CAS below.
            last.store(generation | (cur & 0xffff_ffff), Ordering::Relaxed);
            let new = head(((cur >> 32) as u32).wrapping_add(1), batch.first);
            hooks::store_point();
            // Release: a popper that reads this head also reads every link of the chain.
            match top.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        *batch = Freed::default();
    }

    /// Owner only: the slots the free stack holds, as a bitset: every slot that is on the stack
    /// from the walk's start to its end is in it. Other processes pop and push meanwhile: a
    /// node popped before its link is read leads down the stack as it was (or, pushed again,
    /// from a later head), so the walk only ever steps onto nodes that were above such a slot at
    /// some moment of the walk, and reaches it. A node can so come twice; a chain that names no
    /// slot, or a walk longer than four steps a used slot (a loop, which only an overwritten set
    /// has), is cut: the head is set to empty and an empty bitset returned, so recovery re-issues
    /// every free slot (a popper of the old chain then fails its claim).
    pub(crate) fn walk_free(&self) -> Vec<u64> {
        let mut seen = vec![0u64; self.capacity().div_ceil(64)];
        let top = self.word(layout::W_FREE_HEAD);
        let bound = 4 * self.used() + 64;
        // Acquire: the links of the nodes on the stack are visible.
        let mut cur = top.load(Ordering::Acquire);
        let mut at = cur as u32;
        let mut steps = 0;
        while at != NIL {
            if !self.is_slot(at) || steps == bound {
                seen.iter_mut().for_each(|w| *w = 0);
                loop {
                    let empty = head(((cur >> 32) as u32).wrapping_add(1), NIL);
                    hooks::store_point();
                    // Acquire: as the load above (a racing pop moved the head).
                    match top.compare_exchange(cur, empty, Ordering::Acquire, Ordering::Acquire) {
                        Ok(_) => return seen,
                        Err(now) => cur = now,
                    }
                }
            }
            steps += 1;
            seen[at as usize / 64] |= 1u64 << (at % 64);
            // Acquire: a link another pusher wrote before its Release CAS put the node on.
            at = self.field(at, 3).load(Ordering::Acquire) as u32;
        }
        seen
    }

    // ---- the dirty bitmap ----

    /// Marks slot `s` for the owner's next reconcile.
    pub(crate) fn mark(&self, s: u32) {
        self.mark_levels(s, usize::MAX);
    }

    /// [`mark`](View::mark) stopped after `levels` levels (a crash between levels, for tests).
    ///
    /// The leaf bit is set by `fetch_or`; at each level above, the marker looks (a load) and sets
    /// the bit for the word below if it is clear. It never leaves a level to another marker, so a
    /// marker stopped between two levels hides only its own mark: whoever marks after it finds
    /// the bit missing above and sets it.
    pub(crate) fn mark_levels(&self, s: u32, levels: usize) {
        let mut index = s as usize;
        for (level, &(start, _)) in self.layout.levels.iter().enumerate().take(levels) {
            let bit = 1u64 << (index % MARK_BITS);
            let word = &self.words[start + index / MARK_BITS];
            // Acquire: with the RMW below it, part of the chain that orders each level's look
            // after the owner's swap of the level above (the owner swaps top-down, AcqRel): a
            // marker whose RMW below follows the owner's swap of that word sees the owner's
            // earlier swap of this one, so a bit it sees set here is one the owner has yet to
            // take, and taking it takes the word below after our bit.
            if level == 0 || word.load(Ordering::Acquire) & bit == 0 {
                hooks::store_point();
                // AcqRel: Release carries the state store (and every level below) to the owner's
                // swap; Acquire reads the owner's swaps and the other markers' writes, as above.
                word.fetch_or(bit, Ordering::AcqRel);
            }
            index /= MARK_BITS;
        }
    }

    /// Owner: takes every mark, calling `f` for each marked slot (possibly stale).
    pub(crate) fn take_marks(&self, mut f: impl FnMut(u32)) {
        let top = self.layout.levels.len() - 1;
        let (start, words) = self.layout.levels[top];
        for w in 0..words {
            // Relaxed pre-check: a word seen zero is looked at again next turn.
            if self.words[start + w].load(Ordering::Relaxed) != 0 {
                self.take_word(top, w, &mut f);
            }
        }
    }

    fn take_word(&self, level: usize, w: usize, f: &mut impl FnMut(u32)) {
        let (start, _) = self.layout.levels[level];
        hooks::store_point();
        // AcqRel: Acquire pairs with the markers' Release; Release keeps the swaps below after it.
        let mut bits = self.words[start + w].swap(0, Ordering::AcqRel);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let child = w * MARK_BITS + b;
            // Bits past the end of a level are written by no correct process: skipped.
            if level == 0 {
                if child < self.capacity() {
                    f(child as u32);
                }
            } else if child < self.layout.levels[level - 1].1 {
                self.take_word(level - 1, child, f);
            }
        }
    }

    /// Owner, in recovery: clears every word of every level, top level first, without looking
    /// at the bits (the full scan that follows looks at every slot). Top-down and every word by
    /// a swap (an RMW even where the word is zero), so a marker racing the sweep either has its
    /// leaf bit swept (and the scan's Acquire loads see its slot's state) or, its leaf RMW
    /// coming after the sweep's, sees the swept levels above clear and marks them afresh.
    pub(crate) fn sweep_marks(&self) {
        for &(start, words) in self.layout.levels.iter().rev() {
            for w in start..start + words {
                hooks::store_point();
                // AcqRel: as in `take_word`; the scan's Acquire loads then see the marked states.
                self.words[w].swap(0, Ordering::AcqRel);
            }
        }
    }

    /// True if any top-level mark is set (the owner checks before sleeping).
    pub(crate) fn any_marks(&self) -> bool {
        let (start, words) = *self.layout.levels.last().expect("one level at least");
        // Relaxed: the caller's SeqCst fence orders this load (see `Advancer::publish_sleep`).
        (0..words).any(|w| self.words[start + w].load(Ordering::Relaxed) != 0)
    }

    // ---- ownership and the registry ----

    /// Current owner word (0: none).
    pub(crate) fn owner(&self) -> u64 {
        // Acquire: a new owner reads the old owner's last shared writes after this.
        self.word(layout::W_OWNER).load(Ordering::Acquire)
    }

    /// Owner word `expected` → `me`. One CAS: two claimers cannot both win.
    pub(crate) fn swap_owner(&self, expected: u64, me: u64) -> Result<(), u64> {
        hooks::store_point();
        // AcqRel: Acquire as in `owner`; Release so a later claimer sees our state.
        self.word(layout::W_OWNER)
            .compare_exchange(expected, me, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }

    /// Puts `me` into a free registry record; its index, or `None` if all are taken.
    pub(crate) fn register(&self, me: u64) -> Option<usize> {
        (0..layout::REGISTRY).find(|&i| {
            hooks::store_point();
            // Relaxed: the record is only ever read for liveness checks; no data hangs on it.
            self.word(layout::W_REGISTRY + i)
                .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Clears record `i` if it still holds `word`.
    pub(crate) fn unregister(&self, i: usize, word: u64) -> bool {
        hooks::store_point();
        // Relaxed: as in `register`.
        self.word(layout::W_REGISTRY + i)
            .compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The non-empty registry records as (index, word).
    #[cfg_attr(loom, allow(dead_code, reason = "loom models run recovery by hand"))]
    pub(crate) fn registered(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (0..layout::REGISTRY).filter_map(|i| {
            // Relaxed: as in `register`.
            let w = self.word(layout::W_REGISTRY + i).load(Ordering::Relaxed);
            (w != 0).then_some((i, w))
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn words(layout: &Layout) -> Vec<AtomicU64> {
        let w: Vec<AtomicU64> = (0..layout.total_words).map(|_| AtomicU64::new(0)).collect();
        w[layout::W_FREE_HEAD].store(u64::from(NIL), Ordering::Relaxed);
        w
    }

    #[test]
    fn pack_round_trips() {
        for (g, t, h) in [
            (0, Tag::Free, 0),
            (u32::MAX, Tag::Held, (1 << 29) - 1),
            (7, Tag::Pending, 0),
            (8, Tag::Free, 77),
            (9, Tag::Firing, 0),
        ] {
            assert_eq!(unpack(pack(g, t, h)), (g, t, h));
        }
        assert_eq!(unpack(6).1, Tag::Corrupt);
        assert_eq!(unpack(3).1, Tag::Corrupt, "the retired CANCELLED code");
    }

    #[test]
    fn holder_keeps_pid_and_seven_bits_of_start() {
        let id = Ident {
            pid: 4_194_303,
            start: 0x1_2345_67ff,
        };
        assert_eq!(split_holder(id.holder()), (4_194_303, 0x7f));
        assert_eq!(split_ident_word(id.word()), (4_194_303, 0x2345_67ff));
    }

    #[test]
    fn pops_bump_then_reuse_with_the_next_generation() {
        let l = Layout::new(3);
        let w = words(&l);
        let v = View {
            words: &w,
            layout: &l,
        };
        let got: Vec<_> = (0..3).map(|_| v.pop_free()).collect();
        assert_eq!(got, [Pop::Slot(0, 0), Pop::Slot(1, 0), Pop::Slot(2, 0)]);
        assert_eq!(v.pop_free(), Pop::Empty);
        assert!(v.claim(1, 0, 5));
        assert!(!v.claim(1, 0, 5), "a claim is one CAS");
        v.arm(1, 0, 10, 99);
        assert!(v.cancel(1, 0, 6));
        assert!(!v.cancel(1, 0, 6));
        // The canceller frees the slot itself: reusable at once, with no owner.
        v.release(1, 0, 6);
        assert_eq!(v.state(1).load(Ordering::Relaxed), pack(1, Tag::Free, 0));
        assert_eq!(v.pop_free(), Pop::Slot(1, 1));
        assert!(!v.claim(1, 0, 5), "stale generation");
        assert!(v.claim(1, 1, 5));
        // A claim also takes a slot whose canceller has not yet cleared its name.
        v.arm(1, 1, 10, 99);
        assert!(v.cancel(1, 1, 6));
        let mut one = Freed::default();
        v.chain(1, 2, &mut one);
        v.push_freed(&mut one);
        assert_eq!(v.pop_free(), Pop::Slot(1, 2));
        assert!(v.claim(1, 2, 5));
    }

    #[test]
    fn walk_sees_exactly_the_stack() {
        let l = Layout::new(130);
        let w = words(&l);
        let v = View {
            words: &w,
            layout: &l,
        };
        for _ in 0..130 {
            assert!(matches!(v.pop_free(), Pop::Slot(..)));
        }
        for s in [3, 70, 129] {
            assert!(v.free(s, 0));
        }
        let seen = v.walk_free();
        let listed: Vec<u32> = (0..130)
            .filter(|&s| seen[s as usize / 64] >> (s % 64) & 1 == 1)
            .collect();
        assert_eq!(listed, [3, 70, 129]);
    }

    #[test]
    fn marks_come_back_once_through_every_level() {
        let cap = 64 * 64 * 9 + 5;
        let l = Layout::new(cap);
        assert!(l.levels.len() >= 3);
        let w = words(&l);
        let v = View {
            words: &w,
            layout: &l,
        };
        let picks = [0u32, 1, 63, 64, 4095, 4096, cap as u32 - 1];
        for &s in &picks {
            v.mark(s);
            v.mark(s);
        }
        assert!(v.any_marks());
        let mut got = Vec::new();
        v.take_marks(|s| got.push(s));
        got.sort_unstable();
        assert_eq!(got, picks);
        assert!(!v.any_marks());
        v.take_marks(|s| panic!("mark {s} came back twice"));
    }

    #[test]
    fn owner_and_registry_words() {
        let l = Layout::new(1);
        let w = words(&l);
        let v = View {
            words: &w,
            layout: &l,
        };
        assert_eq!(v.owner(), 0);
        assert!(v.swap_owner(0, 42).is_ok());
        assert_eq!(v.swap_owner(0, 43), Err(42));
        let i = v.register(7).unwrap();
        let j = v.register(8).unwrap();
        assert_ne!(i, j);
        assert_eq!(v.registered().collect::<Vec<_>>(), [(i, 7), (j, 8)]);
        assert!(v.unregister(i, 7));
        assert!(!v.unregister(i, 7));
    }
}

//! The owner's private index over the shared slots: which armed slot comes due when.
//!
//! # Model
//! The index is never the truth: it holds slot numbers, and every decision is made by a CAS on
//! the slot's state word, so it can be thrown away at any time (the owner's death throws it away)
//! and rebuilt by scanning the slots, which is what a takeover does. It has two parts:
//!
//! - a [`Wheel`] of `(generation, slot)` entries for armings due before the *horizon*, with
//!   `ids[s]` the wheel id of slot `s`'s entry plus one (0: none);
//! - the *far* set, one bit a slot, for armings due at or after the horizon, which are not in
//!   the wheel at all. Filing one is setting its bit; a cancel leaves it (the slot's word says
//!   so when the bit is looked at), and so does the slot's next arming if it is far too.
//!
//! A *look* at the far set moves the horizon [`SPAN`] ticks on: it files each far arming due
//! before the new horizon in the wheel, clears the bits of slots no longer armed, and leaves the
//! rest. A look at a large far set is spread over the turns of the `LEAD` ticks before the
//! horizon, a share of the set's words a turn in proportion to the ticks gone by (the owner wakes
//! every `STEP` ticks for it); armings applied meanwhile are filed against the new horizon, so the
//! words already looked at need no second look. The turn at the horizon finishes the look. Most
//! timers a server holds are cancelled or re-armed long before they are due, so most far armings
//! are never filed in the wheel at all; a filing in the wheel, with the unlinking of the slot's
//! earlier arming, took more time than the rest of a schedule and cancel together
//! (BENCHMARKS.md, "Shared memory").
//!
//! # Invariants
//! - Every applied arming of a slot that is still armed (`PENDING(g)`, its mark taken and
//!   reconciled, or found by a scan) is either the wheel entry `ids[s]` names, with generation
//!   `g`, or has the slot's far bit set and a deadline at or after the horizon. So nothing due at
//!   or before the clock is in the far set once a turn has moved the horizon, which it does
//!   before its last poll of the wheel: a far arming is filed before it is due, never fires
//!   early, and is never lost.
//! - A slot has at most one wheel entry (reconciling an arming cancels the entry of the earlier
//!   one) and at most one far bit, and not both for one arming: [`Index::len`] is at most the
//!   slots ever used.
//! - The horizon only moves forward; at `u64::MAX` nothing is far. While a look is under way an
//!   arming is far only if due at or after the horizon the look moves to.
//! - An entry or bit may be stale (its arming cancelled, the slot maybe armed again since): a
//!   stale entry's fire CAS, made with its own generation, fails; a stale bit is cleared, or
//!   taken for the slot's current arming, when it is looked at.
//!
//! A turn polls the wheel, then (at the horizon) looks at the far bits, then polls again: the
//! far armings are placed in the wheel from the clock of this turn, not the last one, which a
//! Coarse wheel's rounding (a fraction of the delay it is filed with) would otherwise make late.
//!
//! # Given up
//! - A look costs O(slots used / 64 + far timers), one load of each far slot's word and deadline,
//!   every `SPAN` ticks. Spread, it costs a turn a 1/64 share or so; an owner that does not turn
//!   during the lead (it slept past it, or its loop turns only when told) does the rest in the
//!   turn at the horizon, and timers due in that turn wait for it (BENCHMARKS.md gives the
//!   lengths at 10^6 timers). An owner with 2^14 or more far timers wakes every `STEP` ticks
//!   during the lead.
//! - A far timer the clock has already passed when its turn looks (the owner slept or was
//!   stopped past the horizon) fires after that turn's other due timers, not in deadline order.

use tickwheel::{TimerId, Wheel};

use super::table::{Tag, View, unpack};
use crate::sync::Ordering;

/// How far past the clock a turn that reaches the horizon moves it, in ticks: armings due within
/// about this of the clock when they are applied go to the wheel, later ones to the far set. A
/// larger span looks at the far bits less often and files more timers in the wheel.
pub(crate) const SPAN: u64 = 1 << 12;

/// How many ticks before the horizon a look at a large far set begins, spread over the turns of
/// those ticks.
const LEAD: u64 = SPAN / 2;

/// The owner wakes at least this often (in ticks) while a look is spread over the lead.
const STEP: u64 = LEAD / 64;

/// A far set of fewer bits than this is looked at in one turn, at the horizon (a look at 2^14
/// far timers takes well under a millisecond), sparing the owner the wakes of a spread look.
const WHOLE: usize = 1 << 14;

/// The owner's index (see the module doc).
pub(crate) struct Index {
    wheel: Wheel<u64>,
    /// Per slot: the wheel id of its entry plus one, 0 if none.
    ids: Vec<u64>,
    /// One bit per slot: the slot may hold a far arming.
    far: Vec<u64>,
    /// Bits set in `far`.
    far_len: usize,
    /// Every far arming is due at or after this tick (none is far when it is `u64::MAX`).
    horizon: u64,
    /// A look at the far set under way, towards the next horizon.
    look: Option<Look>,
}

/// A look at the far set spread over the turns before the horizon.
#[derive(Clone, Copy)]
struct Look {
    /// The horizon the look moves to: armings applied meanwhile are far only if due at or after
    /// it, so the words already looked at need no second look.
    to: u64,
    /// The next word of the far set to look at.
    cursor: usize,
    /// The clock of the look's last step.
    at: u64,
}

impl Index {
    /// An empty index of `capacity` slots over `wheel`, whose clock is `now`.
    pub(crate) fn new(wheel: Wheel<u64>, capacity: usize, now: u64) -> Index {
        Index {
            wheel,
            ids: vec![0; capacity],
            far: vec![0; capacity.div_ceil(64)],
            far_len: 0,
            horizon: now.saturating_add(SPAN),
            look: None,
        }
    }

    /// Wheel entries and far bits: timers armed and applied, not yet fired, and cancelled ones
    /// whose entry or bit is still there (at most one a slot).
    pub(crate) fn len(&self) -> usize {
        self.wheel.len() + self.far_len
    }

    /// True if slot `s` has an entry or a far bit.
    pub(crate) fn holds(&self, s: u32) -> bool {
        self.ids[s as usize] != 0 || self.is_far(s)
    }

    /// The earliest tick at which something may be due, or the owner must look at the far set:
    /// the wheel's next expiry, the horizon, or the next step of a look (`None`: nothing indexed).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        let far = (self.far_len > 0).then(|| match self.look {
            Some(look) => self.horizon.min(look.at.saturating_add(STEP)),
            None if self.far_len < WHOLE => self.horizon,
            None => self.horizon.saturating_sub(LEAD),
        });
        match (self.wheel.next_expiry(), far) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Files slot `s`, whose state word was just loaded (Acquire) as `word`: an arming not yet
    /// in the index is filed by its deadline; anything else is left as it is.
    pub(crate) fn reconcile(&mut self, v: &View<'_>, s: u32, word: u64) {
        let (g, tag, _) = unpack(word);
        if tag != Tag::Pending {
            return;
        }
        let entry = u64::from(g) << 32 | u64::from(s);
        let id = self.ids[s as usize];
        if id != 0 {
            let id = TimerId::from_bits(id - 1);
            if self.wheel.get(id) == Some(&entry) {
                return;
            }
            self.wheel.cancel(id);
            self.ids[s as usize] = 0;
        }
        let (deadline, _) = v.contents(s);
        if self.files_far(deadline) {
            self.set_far(s);
            return;
        }
        self.clear_far(s);
        let Ok(id) = self.wheel.insert(deadline, entry) else {
            unreachable!("the owner's wheel is unbounded");
        };
        self.ids[s as usize] = id.to_bits() + 1;
    }

    /// After polling at `now`: takes the look at the far set a step further, or begins it (in the
    /// lead before the horizon, or at the horizon for a small far set), and once the clock has
    /// reached the horizon finishes it: every far arming due before the next horizon is then in
    /// the wheel (to be polled again), and the bits of slots no longer armed are cleared. `used`
    /// bounds the slots to look at. False if it looked at nothing.
    pub(crate) fn advance_horizon(&mut self, v: &View<'_>, now: u64, used: usize) -> bool {
        if self.far_len == 0 {
            // Nothing far: every arming due before any later horizon is in the wheel.
            let to = self.look.take().map_or(self.horizon, |look| look.to);
            if now >= to {
                self.horizon = now.saturating_add(SPAN);
            } else {
                self.horizon = to;
            }
            return false;
        }
        let lead_from = self.horizon.saturating_sub(LEAD);
        let mut look = match self.look {
            Some(look) => look,
            None if now >= self.horizon || (now >= lead_from && self.far_len >= WHOLE) => Look {
                to: self.horizon.max(now).saturating_add(SPAN),
                cursor: 0,
                at: now,
            },
            None => return false,
        };
        if now >= look.to {
            // The clock passed the horizon this look was moving to (it jumped, or the owner slept
            // through the lead): what it looked at was filed against too early a horizon, so it
            // looks at everything again, against one past the clock.
            look = Look {
                to: now.saturating_add(SPAN),
                cursor: 0,
                at: now,
            };
        }
        // Stored before the words are looked at: their armings are filed against `look.to`.
        self.look = Some(look);
        let words = used.div_ceil(64).min(self.far.len());
        let end = if now >= self.horizon {
            words
        } else {
            share_of(
                words,
                now.saturating_sub(lead_from) + 1,
                self.horizon - lead_from,
            )
        };
        for w in look.cursor..end {
            self.look_at_word(v, w);
        }
        look.cursor = look.cursor.max(end);
        look.at = now;
        if now >= self.horizon {
            self.horizon = look.to;
            self.look = None;
        } else {
            self.look = Some(look);
        }
        true
    }

    /// Looks at the far bits of word `w`: each slot's arming is filed by its deadline against the
    /// look's horizon (in the wheel, or left far), or its bit cleared if it is no longer armed.
    fn look_at_word(&mut self, v: &View<'_>, w: usize) {
        let mut bits = self.far[w];
        while bits != 0 {
            let s = (w * 64) as u32 + bits.trailing_zeros();
            bits &= bits - 1;
            // Acquire: as the turn's load of a marked slot (the deadline is the arming's).
            let word = v.state(s).load(Ordering::Acquire);
            if unpack(word).1 == Tag::Pending {
                self.reconcile(v, s, word);
            } else {
                self.clear_far(s);
            }
        }
    }

    /// The next entry due at `now`, `(slot, generation)`, its slot's entry forgotten.
    pub(crate) fn poll(&mut self, now: u64) -> Option<(u32, u32)> {
        let (_, entry) = self.wheel.poll(now)?;
        let (slot, generation) = (entry as u32, (entry >> 32) as u32);
        self.ids[slot as usize] = 0;
        Some((slot, generation))
    }

    /// Armings due at or after this are far: the horizon, or the one a look under way moves to.
    fn far_horizon(&self) -> u64 {
        self.look.map_or(self.horizon, |look| look.to)
    }

    fn files_far(&self, deadline: u64) -> bool {
        let horizon = self.far_horizon();
        horizon != u64::MAX && deadline >= horizon
    }

    fn is_far(&self, s: u32) -> bool {
        self.far[s as usize / 64] >> (s % 64) & 1 != 0
    }

    fn set_far(&mut self, s: u32) {
        let word = &mut self.far[s as usize / 64];
        let bit = 1u64 << (s % 64);
        if *word & bit == 0 {
            *word |= bit;
            self.far_len += 1;
        }
    }

    fn clear_far(&mut self, s: u32) {
        let word = &mut self.far[s as usize / 64];
        let bit = 1u64 << (s % 64);
        if *word & bit != 0 {
            *word &= !bit;
            self.far_len -= 1;
        }
    }
}

/// The first `part / whole` of `words`, rounded up (`part <= whole`, `whole > 0`).
fn share_of(words: usize, part: u64, whole: u64) -> usize {
    let share = (words as u128 * u128::from(part.min(whole))).div_ceil(u128::from(whole.max(1)));
    share as usize
}

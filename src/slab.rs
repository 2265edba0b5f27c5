//! Timer storage: a slab of entries, one per pending timer, that the bucket lists (`lists.rs`)
//! link through.
//!
//! Each entry is 32 bytes for a `u64` payload: the `next` and `prev` links (4 + 4 bytes) and the
//! expiry (8) sit outside an enum that holds either the pending timer (value, generation, list)
//! or, once vacant, only the generation. The enum needs no tag of its own: it lives in the list
//! field's niche (a `NonZeroU32`), and the vacant variant fits beside it. A walk of a list reads
//! `next` and the expiry without matching the enum. A vacant entry reuses
//! `next` as the free-list link, so freed memory is reused by the very next insert: there are no
//! tombstones, and a reset-heavy load never grows the slab.
//!
//! An entry whose size is a multiple of 32 bytes (a `u64` payload's) is stored 32-byte aligned,
//! so it sits in one cache line: each access to it is one miss, not two. Other sizes are stored
//! unpadded (a 40-byte entry stays 40 bytes, where aligning every entry to 32 would make it 64).
//! The choice is a constant per payload type. An unbounded wheel's entries live in chunks of
//! 2048 that never move ([`Chunks`]): growing adds a chunk (its entries go on the free list in
//! index order) and copies nothing, where a `Vec` of 32-aligned entries would copy them all on
//! each doubling. A bounded wheel's live in one buffer reserved for its capacity ([`Flat`]),
//! which never grows and so never moves either: an entry is one bounds check away, without the
//! chunk table's load (a cancel at 10^6 timers runs 57 instructions instead of 67). The slab is
//! generic over the two ([`Store`]); the wheel picks one when it is built.
//!
//! The links are outside the enum so that an unlink writes the neighbours' links blind. Were
//! they inside, safe Rust would have to read each neighbour's tag first, a second cache miss
//! that the cancel waits for; as it is, a cancel waits for its own entry only, and the two
//! neighbour writes drain from the store buffer.
//!
//! Invariants:
//! - an entry is occupied iff its timer is pending: on the list its `list` field names, or
//!   detached by the wheel, to be linked again or freed before the wheel's call returns;
//! - an entry is vacant iff it is on the free list.
//!
//! Given up: indices are `u32`, so one wheel holds at most `2^32 - 2048` timers. An entry of
//! another size (40 bytes, with a 16-byte payload) straddles two lines at some indices: padding
//! it would cost more memory than the misses it saves. A 64-byte entry is only 32-aligned, so
//! half of them straddle. A wheel's memory grows a chunk (64 KiB with a `u64` payload) at a time.

use std::num::NonZeroU32;

use crate::lists::{Links, NIL};

/// One slab entry, at its natural size and alignment: the chunk it lives in is what is aligned
/// (see [`Chunks`]).
#[derive(Debug)]
pub(crate) struct Entry<T> {
    /// Next entry on the timer's chain (occupied) or on the free list (vacant).
    next: u32,
    /// Previous entry on the chain (`NIL` on a chain's head); stale on a vacant entry.
    prev: u32,
    /// The tick the timer fires at (its deadline in Exact mode, rounded up in Coarse mode);
    /// stale on a vacant entry.
    expiry: u64,
    slot: Slot<T>,
}

/// What an entry holds.
#[derive(Debug)]
enum Slot<T> {
    Occupied(Timer<T>),
    /// The generation the next timer stored here gets.
    Vacant {
        generation: u32,
    },
}

/// A pending timer.
#[derive(Debug)]
pub(crate) struct Timer<T> {
    pub(crate) value: T,
    /// Bumped every time the entry is freed; a `TimerId` must match it.
    generation: u32,
    /// `list + 1`: its niche is the tag of `Slot`.
    list_plus_one: NonZeroU32,
}

impl<T> Timer<T> {
    /// The list the timer is on.
    pub(crate) fn list(&self) -> u32 {
        self.list_plus_one.get() - 1
    }

    /// Records that the timer is on `list` (its links the caller keeps).
    #[inline(always)]
    pub(crate) fn set_list(&mut self, list: u32) {
        self.list_plus_one = plus_one(list);
    }
}

/// Where the entries live: [`Chunks`] for a wheel that grows, [`Flat`] for one whose capacity
/// was given up front. The wheel picks one when it is built and is compiled once per store, so
/// no access tests which it has.
pub(crate) trait Store<T>:
    std::ops::Index<u32, Output = Entry<T>> + std::ops::IndexMut<u32, Output = Entry<T>>
{
    /// Entries created, all of them vacant or occupied.
    fn len(&self) -> u32;
    /// Entry `index`, if it has been created.
    fn get(&self, index: u32) -> Option<&Entry<T>>;
    /// Entry `index`, if it has been created.
    fn get_mut(&mut self, index: u32) -> Option<&mut Entry<T>>;
    /// Creates up to a chunk of vacant entries with `generation`, linked in index order into a
    /// free list that ends in `NIL`; returns its first index. `None` once no more fit.
    fn grow(&mut self, generation: u32) -> Option<u32>;
}

/// The entries and their free list.
#[derive(Debug)]
pub(crate) struct Slab<T, S = Chunks<T>> {
    entries: S,
    free_head: u32,
    /// Generation given to entries created by this slab; random per wheel.
    generation_seed: u32,
    _entries: std::marker::PhantomData<T>,
}

impl<T, S: Store<T>> Slab<T, S> {
    pub(crate) fn new(entries: S, generation_seed: u32) -> Self {
        Slab {
            entries,
            free_head: NIL,
            generation_seed,
            _entries: std::marker::PhantomData,
        }
    }

    /// The occupied entries, counted one by one (the wheel keeps the length); for checks.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn occupied(&self) -> usize {
        (0..self.entries.len())
            .filter(|&index| matches!(self.entries[index].slot, Slot::Occupied(_)))
            .count()
    }

    /// Checks that every entry is on the free list iff it is vacant (walking the list once);
    /// for checks.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn check_free_list(&self) {
        let created = self.entries.len() as usize;
        let mut on_list = 0;
        let mut index = self.free_head;
        while index != NIL {
            let entry = &self.entries[index];
            assert!(
                matches!(entry.slot, Slot::Vacant { .. }),
                "entry {index} on the free list is occupied"
            );
            on_list += 1;
            assert!(on_list <= created, "the free list loops");
            index = entry.next;
        }
        assert_eq!(
            on_list + self.occupied(),
            created,
            "every vacant entry is on the free list"
        );
    }

    /// The expiry and the pending timer at `index` if `generation` matches.
    #[inline]
    pub(crate) fn get(&self, index: u32, generation: u32) -> Option<(u64, &Timer<T>)> {
        let entry = self.entries.get(index)?;
        match &entry.slot {
            Slot::Occupied(timer) if timer.generation == generation => Some((entry.expiry, timer)),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(
        &mut self,
        index: u32,
        generation: u32,
    ) -> Option<(&mut u64, &mut Timer<T>)> {
        let entry = self.entries.get_mut(index)?;
        match &mut entry.slot {
            Slot::Occupied(timer) if timer.generation == generation => {
                Some((&mut entry.expiry, timer))
            }
            _ => None,
        }
    }

    /// The pending timer at `index`, which the caller knows is occupied.
    #[inline]
    pub(crate) fn timer(&self, index: u32) -> &Timer<T> {
        match &self.entries[index].slot {
            Slot::Occupied(timer) => timer,
            Slot::Vacant { .. } => panic!("entry {index} is vacant"),
        }
    }

    /// The expiry of the pending timer at `index`, which the caller knows is occupied.
    #[cfg(debug_assertions)]
    #[inline]
    pub(crate) fn expiry_of(&self, index: u32) -> u64 {
        self.entries[index].expiry
    }

    #[inline]
    pub(crate) fn timer_mut(&mut self, index: u32) -> &mut Timer<T> {
        match &mut self.entries[index].slot {
            Slot::Occupied(timer) => timer,
            Slot::Vacant { .. } => panic!("entry {index} is vacant"),
        }
    }

    /// The index the next insert takes, after adding a chunk if none is free. The caller has
    /// checked capacity; `None` only when `u32` indices are exhausted.
    #[inline]
    pub(crate) fn vacant(&mut self) -> Option<u32> {
        if self.free_head == NIL {
            self.free_head = self.entries.grow(self.generation_seed)?;
        }
        Some(self.free_head)
    }

    /// Creates vacant entries until `wanted` exist, put in front of the free list in index order
    /// (so the inserts that use them take them in the order a growing slab would); false, with
    /// the entries made so far kept, if the store runs out of room first.
    pub(crate) fn reserve(&mut self, wanted: usize) -> bool {
        let mut made: Option<(u32, u32)> = None;
        let mut room = true;
        while (self.entries.len() as usize) < wanted {
            let Some(first) = self.entries.grow(self.generation_seed) else {
                room = false;
                break;
            };
            let last = self.entries.len() - 1;
            made = match made {
                Some((head, tail)) => {
                    self.entries[tail].next = first;
                    Some((head, last))
                }
                None => Some((first, last)),
            };
        }
        if let Some((head, tail)) = made {
            self.entries[tail].next = self.free_head;
            self.free_head = head;
        }
        room
    }

    /// Stores a new timer at `index`, the one [`vacant`](Self::vacant) named, as the head of a
    /// chain of `list` in front of `next`: the entry is written whole, once, with the links
    /// [`Links::set_head`] would give it; the caller joins `next` and the chain's head to it.
    /// Returns the timer's generation.
    #[inline]
    pub(crate) fn insert_head(
        &mut self,
        index: u32,
        (next, list, expiry): (u32, u32, u64),
        value: T,
    ) -> u32 {
        debug_assert_eq!(index, self.free_head, "the vacant entry");
        let entry = &mut self.entries[index];
        let Slot::Vacant { generation } = entry.slot else {
            unreachable!("entry {index} on the free list is occupied");
        };
        self.free_head = entry.next;
        *entry = Entry {
            next,
            prev: NIL,
            expiry,
            slot: Slot::Occupied(Timer {
                value,
                generation,
                list_plus_one: plus_one(list),
            }),
        };
        generation
    }

    /// Moves the occupied entry `index` to the head of a chain of `list` in front of `next`, with
    /// `expiry`, writing it once as [`Links::set_head`] would; returns its old `next`, `prev` and
    /// `list` for the caller to join its old neighbours. If it is on `list` already, only the
    /// expiry is set and `None` returned.
    #[inline]
    pub(crate) fn move_head(
        &mut self,
        index: u32,
        (next, list, expiry): (u32, u32, u64),
    ) -> Option<(u32, u32, u32)> {
        let entry = &mut self.entries[index];
        let Slot::Occupied(timer) = &mut entry.slot else {
            panic!("entry {index} is vacant");
        };
        entry.expiry = expiry;
        let old_list = timer.list();
        if old_list == list {
            return None;
        }
        timer.list_plus_one = plus_one(list);
        let old = (entry.next, entry.prev, old_list);
        entry.next = next;
        entry.prev = NIL;
        Some(old)
    }

    /// Frees an occupied entry that is on no list; returns the generation its id had, and its
    /// value.
    #[inline]
    pub(crate) fn free(&mut self, index: u32) -> (u32, T) {
        let entry = &mut self.entries[index];
        // The generation is read before the slot is replaced: `Vacant` keeps the next one.
        let Slot::Occupied(Timer { generation, .. }) = entry.slot else {
            panic!("entry {index} is vacant");
        };
        // Wrapping is deliberate: an id aliases a new timer only after exactly 2^32 reuses of
        // the same entry while the stale id is still held.
        let vacant = Slot::Vacant {
            generation: generation.wrapping_add(1),
        };
        let Slot::Occupied(timer) = std::mem::replace(&mut entry.slot, vacant) else {
            unreachable!("checked above");
        };
        entry.next = self.free_head;
        self.free_head = index;
        (generation, timer.value)
    }

    /// Frees the pending timer at `index` if `generation` matches, in one lookup; returns its
    /// value and its `next`, `prev` and `list`, for the caller to unlink it from its neighbours.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32, generation: u32) -> Option<(T, (u32, u32, u32))> {
        let free_head = self.free_head;
        let entry = self.entries.get_mut(index)?;
        match &entry.slot {
            Slot::Occupied(timer) if timer.generation == generation => {}
            _ => return None,
        }
        let vacant = Slot::Vacant {
            generation: generation.wrapping_add(1),
        };
        let Slot::Occupied(timer) = std::mem::replace(&mut entry.slot, vacant) else {
            unreachable!("checked above");
        };
        let fields = (entry.next, entry.prev, timer.list());
        entry.next = free_head;
        self.free_head = index;
        Some((timer.value, fields))
    }

    /// Drops every timer and forgets every entry; generations are bumped so old ids stay stale.
    pub(crate) fn clear(&mut self) {
        self.free_head = NIL;
        for index in (0..self.entries.len()).rev() {
            let entry = &mut self.entries[index];
            if let Slot::Occupied(timer) = &entry.slot {
                entry.slot = Slot::Vacant {
                    generation: timer.generation.wrapping_add(1),
                };
            }
            entry.next = self.free_head;
            self.free_head = index;
        }
    }
}

/// The wheel's links live in the entries: `next` and `prev` beside the slot, the list and the
/// expiry in the pending timer.
impl<T, S: Store<T>> Links for Slab<T, S> {
    #[inline(always)]
    fn prefetch(&self, index: u32) {
        if let Some(entry) = self.entries.get(index) {
            crate::prefetch::prefetch_read(entry);
        }
    }

    #[inline(always)]
    fn next(&self, index: u32) -> u32 {
        self.entries[index].next
    }

    #[inline(always)]
    fn set_next(&mut self, index: u32, next: u32) {
        self.entries[index].next = next;
    }

    #[inline(always)]
    fn prev(&self, index: u32) -> u32 {
        self.entries[index].prev
    }

    #[inline(always)]
    fn set_prev(&mut self, index: u32, prev: u32) {
        self.entries[index].prev = prev;
    }

    #[inline(always)]
    fn set_prev_unless_nil(&mut self, index: u32, prev: u32) {
        // `NIL` is past every chunk (see `MAX_CHUNKS`), so the lookup is the test.
        let entry = self.entries.get_mut(index);
        debug_assert!(entry.is_some() || index == NIL, "entry {index} exists");
        if let Some(entry) = entry {
            entry.prev = prev;
        }
    }

    #[inline(always)]
    fn list(&self, index: u32) -> u32 {
        self.timer(index).list()
    }

    #[inline(always)]
    fn is_on(&self, index: u32, list: u32) -> bool {
        // A cancelled timer's entry is vacant, or holds a newer timer on its own list.
        matches!(&self.entries[index].slot, Slot::Occupied(timer) if timer.list() == list)
    }

    #[inline(always)]
    fn set_list(&mut self, index: u32, list: u32) {
        self.timer_mut(index).list_plus_one = plus_one(list);
    }

    #[inline(always)]
    fn expiry(&self, index: u32) -> u64 {
        self.entries[index].expiry
    }

    #[inline(always)]
    fn set_expiry(&mut self, index: u32, expiry: u64) {
        self.entries[index].expiry = expiry;
    }

    #[inline(always)]
    fn unlink_fields(&self, index: u32) -> (u32, u32, u32) {
        let entry = &self.entries[index];
        let Slot::Occupied(timer) = &entry.slot else {
            panic!("entry {index} is vacant");
        };
        (entry.next, entry.prev, timer.list())
    }

    #[inline(always)]
    fn next_and_expiry(&self, index: u32) -> (u32, u64) {
        let entry = &self.entries[index];
        (entry.next, entry.expiry)
    }

    #[inline(always)]
    fn set_head(&mut self, index: u32, next: u32, list: u32, expiry: u64) {
        let entry = &mut self.entries[index];
        entry.next = next;
        entry.prev = NIL;
        entry.expiry = expiry;
        let Slot::Occupied(timer) = &mut entry.slot else {
            panic!("entry {index} is vacant");
        };
        timer.list_plus_one = plus_one(list);
    }
}

#[inline]
fn plus_one(list: u32) -> NonZeroU32 {
    NonZeroU32::new(list.wrapping_add(1)).expect("list index below u32::MAX")
}

/// log2 of the entries in one chunk of [`Chunks`].
const CHUNK_BITS: u32 = 11;
/// Entries in one chunk: 2048, 64 KiB for a `u64` payload.
const CHUNK: usize = 1 << CHUNK_BITS;
/// Most chunks a slab has: the last index of one more would be `NIL`.
const MAX_CHUNKS: usize = (u32::MAX >> CHUNK_BITS) as usize;
/// Most entries a slab has, `2^32 - 2048`: every index stays below `NIL`.
pub(crate) const MAX_ENTRIES: usize = MAX_CHUNKS << CHUNK_BITS;

/// The entries, in fixed chunks that never move. Growing allocates one more chunk and copies
/// nothing: a `Vec` of 32-aligned entries would copy every entry on each doubling, as the
/// allocator grows only 16-aligned blocks in place. A chunk is an array, so the index within it
/// needs no bounds check; the price against one `Vec` is one load from a table of one pointer
/// per 2048 entries, which stays in cache.
///
/// Entries whose size is a multiple of 32 bytes ([`Chunks::ALIGNED`], the 32 bytes of a `u64`
/// payload among them) are stored 32-aligned, so each sits in one cache line (at 8-byte
/// alignment, in a buffer the allocator hands out 16 bytes past a line, every other 32-byte
/// entry would straddle two, and an access to it would cost two misses); other sizes are stored
/// as they are, since aligning them would pad them (40 bytes to 64). The choice is a constant
/// per payload type, so each access compiles to one of the two tables and nothing else; the
/// other table stays empty.
#[derive(Debug)]
pub(crate) struct Chunks<T> {
    aligned: Vec<Box<[Aligned<T>; CHUNK]>>,
    plain: Vec<Box<[Entry<T>; CHUNK]>>,
}

/// An entry in a 32-aligned chunk; its size is a multiple of 32, so the alignment pads nothing.
#[derive(Debug)]
#[repr(align(32))]
struct Aligned<T>(Entry<T>);

/// True if entries with a payload of type `T` are stored 32-aligned, false if as they are.
const fn aligned<T>() -> bool {
    size_of::<Entry<T>>() % 32 == 0
}

impl<T> Chunks<T> {
    /// True if the entries are stored 32-aligned (in `aligned`), false if as they are (in
    /// `plain`).
    const ALIGNED: bool = aligned::<T>();

    /// No entries, with room in the table for the chunks of `capacity` entries.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let chunks = capacity.div_ceil(CHUNK);
        let (aligned, plain) = if Self::ALIGNED {
            (chunks, 0)
        } else {
            (0, chunks)
        };
        Chunks {
            aligned: Vec::with_capacity(aligned),
            plain: Vec::with_capacity(plain),
        }
    }
}

impl<T> Store<T> for Chunks<T> {
    fn len(&self) -> u32 {
        // At most `MAX_CHUNKS` chunks (see `grow`), so this fits.
        ((self.aligned.len() + self.plain.len()) << CHUNK_BITS) as u32
    }

    #[inline]
    fn get(&self, index: u32) -> Option<&Entry<T>> {
        let (chunk, k) = split(index);
        if Self::ALIGNED {
            Some(&self.aligned.get(chunk)?[k].0)
        } else {
            Some(&self.plain.get(chunk)?[k])
        }
    }

    #[inline]
    fn get_mut(&mut self, index: u32) -> Option<&mut Entry<T>> {
        let (chunk, k) = split(index);
        if Self::ALIGNED {
            Some(&mut self.aligned.get_mut(chunk)?[k].0)
        } else {
            Some(&mut self.plain.get_mut(chunk)?[k])
        }
    }

    /// Adds a chunk; `None` once a chunk would reach index `NIL`.
    #[cold]
    fn grow(&mut self, generation: u32) -> Option<u32> {
        let first = self.len();
        if self.aligned.len() + self.plain.len() >= MAX_CHUNKS {
            return None;
        }
        let vacant = vacant_run(first, CHUNK as u32, generation);
        // Collected into a buffer of exactly one chunk, so no chunk-sized value is ever on the
        // stack.
        let ks = 0..CHUNK as u32;
        if Self::ALIGNED {
            self.aligned
                .push(boxed_chunk(ks.map(|k| Aligned(vacant(k))).collect()));
        } else {
            self.plain.push(boxed_chunk(ks.map(vacant).collect()));
        }
        Some(first)
    }
}

/// The vacant entry `first + k` of a run of `count` new ones with `generation`, linked to the
/// next of the run, the last to `NIL`.
fn vacant_run<T>(first: u32, count: u32, generation: u32) -> impl Fn(u32) -> Entry<T> {
    move |k| Entry {
        next: if k + 1 < count { first + k + 1 } else { NIL },
        prev: NIL,
        expiry: 0,
        slot: Slot::Vacant { generation },
    }
}

/// The chunk and the place in it of entry `index`.
#[inline(always)]
fn split(index: u32) -> (usize, usize) {
    ((index >> CHUNK_BITS) as usize, index as usize & (CHUNK - 1))
}

/// The `CHUNK` entries of `entries` as a chunk.
fn boxed_chunk<E>(entries: Vec<E>) -> Box<[E; CHUNK]> {
    let Ok(chunk) = entries.into_boxed_slice().try_into() else {
        unreachable!("a chunk has CHUNK entries");
    };
    chunk
}

impl<T> std::ops::Index<u32> for Chunks<T> {
    type Output = Entry<T>;

    #[inline]
    fn index(&self, index: u32) -> &Entry<T> {
        let (chunk, k) = split(index);
        if Self::ALIGNED {
            &self.aligned[chunk][k].0
        } else {
            &self.plain[chunk][k]
        }
    }
}

impl<T> std::ops::IndexMut<u32> for Chunks<T> {
    #[inline]
    fn index_mut(&mut self, index: u32) -> &mut Entry<T> {
        let (chunk, k) = split(index);
        if Self::ALIGNED {
            &mut self.aligned[chunk][k].0
        } else {
            &mut self.plain[chunk][k]
        }
    }
}

/// The entries of a wheel whose capacity was given up front, in one allocation of exactly that
/// many, reserved when the wheel is built and filled a chunk at a time as inserts need them (the
/// pages are touched then, not before). It never grows past its capacity, so it never moves, and
/// an entry is found with one bounds check against one buffer: no chunk table.
///
/// Entries whose size is a multiple of 32 bytes are stored 32-aligned, as in [`Chunks`].
#[derive(Debug)]
pub(crate) struct Flat<T> {
    aligned: Vec<Aligned<T>>,
    plain: Vec<Entry<T>>,
}

impl<T> Flat<T> {
    const ALIGNED: bool = aligned::<T>();

    /// No entries, with room reserved for `capacity` (at most [`MAX_ENTRIES`]); the reservation
    /// handed back if the allocator refuses it.
    pub(crate) fn with_capacity(capacity: usize) -> Result<Self, usize> {
        debug_assert!(capacity <= MAX_ENTRIES, "capacity {capacity}");
        let mut flat = Flat {
            aligned: Vec::new(),
            plain: Vec::new(),
        };
        let reserved = if Self::ALIGNED {
            flat.aligned.try_reserve_exact(capacity)
        } else {
            flat.plain.try_reserve_exact(capacity)
        };
        reserved.map(|()| flat).map_err(|_| capacity)
    }

    /// Entries the buffer holds without moving.
    fn capacity(&self) -> usize {
        if Self::ALIGNED {
            self.aligned.capacity()
        } else {
            self.plain.capacity()
        }
    }
}

impl<T> Store<T> for Flat<T> {
    fn len(&self) -> u32 {
        // At most the capacity, at most `MAX_ENTRIES`.
        (self.aligned.len() + self.plain.len()) as u32
    }

    #[inline(always)]
    fn get(&self, index: u32) -> Option<&Entry<T>> {
        if Self::ALIGNED {
            self.aligned.get(index as usize).map(|a| &a.0)
        } else {
            self.plain.get(index as usize)
        }
    }

    #[inline(always)]
    fn get_mut(&mut self, index: u32) -> Option<&mut Entry<T>> {
        if Self::ALIGNED {
            self.aligned.get_mut(index as usize).map(|a| &mut a.0)
        } else {
            self.plain.get_mut(index as usize)
        }
    }

    /// Adds up to a chunk within the reserved capacity; `None` once it is full.
    #[cold]
    fn grow(&mut self, generation: u32) -> Option<u32> {
        let first = self.len();
        let room = self.capacity() - first as usize;
        if room == 0 {
            return None;
        }
        let count = room.min(CHUNK) as u32;
        let vacant = vacant_run(first, count, generation);
        let before = self.capacity();
        if Self::ALIGNED {
            self.aligned.extend((0..count).map(|k| Aligned(vacant(k))));
        } else {
            self.plain.extend((0..count).map(vacant));
        }
        debug_assert_eq!(self.capacity(), before, "a flat store never moves");
        Some(first)
    }
}

impl<T> std::ops::Index<u32> for Flat<T> {
    type Output = Entry<T>;

    #[inline(always)]
    fn index(&self, index: u32) -> &Entry<T> {
        if Self::ALIGNED {
            &self.aligned[index as usize].0
        } else {
            &self.plain[index as usize]
        }
    }
}

impl<T> std::ops::IndexMut<u32> for Flat<T> {
    #[inline(always)]
    fn index_mut(&mut self, index: u32) -> &mut Entry<T> {
        if Self::ALIGNED {
            &mut self.aligned[index as usize].0
        } else {
            &mut self.plain[index as usize]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_is_32_bytes_for_a_u64_payload() {
        assert_eq!(size_of::<Entry<u64>>(), 32);
        assert_eq!(
            align_of::<Entry<u64>>(),
            8,
            "the entry itself is not padded"
        );
    }

    /// Stores a timer on list 0 at expiry 1; returns its index.
    fn store<T, S: Store<T>>(slab: &mut Slab<T, S>, value: T) -> u32 {
        let index = slab.vacant().unwrap();
        slab.insert_head(index, (NIL, 0, 1), value);
        index
    }

    /// The address of entry `index`.
    fn address<T, S: Store<T>>(slab: &Slab<T, S>, index: u32) -> usize {
        std::ptr::from_ref(&slab.entries[index]) as usize
    }

    #[test]
    fn every_32_byte_entry_of_every_chunk_is_in_one_cache_line() {
        let mut slab = Slab::new(Chunks::with_capacity(0), 0);
        for i in 0..3 * CHUNK as u64 {
            store(&mut slab, i);
        }
        assert_eq!(slab.entries.len(), 3 * CHUNK as u32);
        const { assert!(Chunks::<u64>::ALIGNED) };
        for index in 0..slab.entries.len() {
            assert_eq!(address(&slab, index) % 32, 0, "entry {index}");
        }
    }

    #[test]
    fn a_40_byte_entry_is_not_padded() {
        // A 16-byte payload.
        assert_eq!(size_of::<Entry<(u32, u64)>>(), 40);
        let mut slab = Slab::new(Chunks::with_capacity(0), 0);
        for i in 0..CHUNK as u64 + 1 {
            store(&mut slab, (0, i));
        }
        // Consecutive entries, to a chunk's last, are 40 bytes apart.
        for index in [0, 7, CHUNK as u32 - 2] {
            assert_eq!(address(&slab, index + 1) - address(&slab, index), 40);
        }
        const { assert!(!Chunks::<(u32, u64)>::ALIGNED) };
    }

    #[test]
    fn chunks_grow_without_moving_and_stop_below_nil() {
        let mut slab = Slab::new(Chunks::with_capacity(0), 5);
        let first = store(&mut slab, 0u64);
        let at = std::ptr::from_ref(&slab.entries[first]);
        for i in 1..=CHUNK as u64 {
            store(&mut slab, i);
        }
        assert_eq!(slab.entries.len(), 2 * CHUNK as u32, "a second chunk");
        assert_eq!(
            std::ptr::from_ref(&slab.entries[first]),
            at,
            "the first did not move"
        );
        assert_eq!(MAX_ENTRIES, (1 << 32) - CHUNK);
        assert!(
            (MAX_ENTRIES as u64) <= u64::from(NIL),
            "every index is below NIL"
        );
    }

    #[test]
    fn a_flat_store_fills_its_one_buffer_and_stops_at_its_capacity() {
        let capacity = 2 * CHUNK + 5;
        let mut slab = Slab::new(Flat::<u64>::with_capacity(capacity).unwrap(), 0);
        let first = store(&mut slab, 0);
        let at = std::ptr::from_ref(&slab.entries[first]);
        for i in 1..capacity as u64 {
            store(&mut slab, i);
        }
        assert_eq!(
            slab.entries.len(),
            capacity as u32,
            "filled to its capacity"
        );
        assert_eq!(std::ptr::from_ref(&slab.entries[first]), at, "never moved");
        for index in 0..slab.entries.len() {
            assert_eq!(address(&slab, index) % 32, 0, "entry {index} in one line");
        }
        assert_eq!(slab.vacant(), None, "full");
        // A freed entry is reused.
        slab.free(7);
        assert_eq!(slab.vacant(), Some(7));
        assert!(slab.entries.get(capacity as u32).is_none());
        assert!(slab.entries.get(NIL).is_none(), "NIL is past every entry");
    }
}

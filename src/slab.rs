//! Timer storage: a slab of entries threaded onto intrusive, index-linked lists.
//!
//! Each entry is 32 bytes for a `u64` payload: the `next` and `prev` links (4 + 4 bytes) sit
//! outside an enum that holds either the pending timer (expiry, value, generation, bucket) or,
//! once vacant, only the generation. The enum needs no tag of its own: it lives in the bucket
//! field's niche (a `NonZeroU32`), and the vacant variant fits beside it. A vacant entry reuses
//! `next` as the free-list link, so freed memory is reused by the very next insert: there are no
//! tombstones, and a reset-heavy load never grows the slab.
//!
//! An entry whose size is a multiple of 32 bytes (a `u64` payload's) is stored 32-byte aligned,
//! so it sits in one cache line: each access to it is one miss, not two. Other sizes are stored
//! unpadded (the per-core crate's 40-byte entry stays 40 bytes, where aligning every entry to 32
//! made it 64). The choice is a constant per payload type. Entries live in chunks of 2048 that
//! never move: growing adds a chunk (its entries go on the free list in index order) and copies
//! nothing, where a `Vec` of 32-aligned entries would copy them all on each doubling.
//!
//! The links are outside the enum so that an unlink writes the neighbours' links blind. Were
//! they inside, safe Rust would have to read each neighbour's tag first, a second cache miss
//! that the cancel waits for; as it is, a cancel waits for its own entry only, and the two
//! neighbour writes drain from the store buffer.
//!
//! Lists are doubly linked through `next`/`prev` indices with `NIL` as the end marker; only the
//! head of each list is stored, so linking is a push-front and unlinking is O(1) given the entry,
//! which records the bucket it is on. An entry is a head iff its chain's head names it, so a
//! head's `prev` is left stale: taking the head off (the drain's [`Slab::pop_front`]) writes
//! nothing into the next entry, which keeps the firing walk to one dependent load per timer.
//!
//! Each bucket is `CHAINS` lists, an entry going on chain `index % CHAINS`. A list walk is a chain
//! of dependent loads, one cache miss per timer once the slab outgrows the cache; walking the
//! chains of a bucket in turn keeps `CHAINS` of those misses in flight at once, which is what
//! makes firing and cascading a large bucket several times faster. The cost is `CHAINS` heads a
//! bucket (16 bytes, one array per bucket, so a chain's head is found with one bounds check), and
//! a look at all of them when an unlink or a pop empties a chain, to tell whether the bucket is
//! now empty.
//!
//! Invariants:
//! - an entry is occupied iff it is on exactly one bucket list, the one named by its `bucket`,
//!   or detached (taken off by `take_list` or `pop_front`, to be pushed again or freed before
//!   the wheel's call returns);
//! - `prev` is the previous entry of the chain, except on the chain's head;
//! - an entry is vacant iff it is on the free list;
//! - a bucket's bit is set in `occupied` (per level) iff its list is non-empty (`buckets.rs` keeps
//!   the bitmaps, this file reports when a list becomes empty or non-empty).
//!
//! Given up: indices are `u32`, so one wheel holds at most `2^32 - 2048` timers. An entry of
//! another size (40 bytes, with a 16-byte payload) straddles two lines at some indices: padding
//! it would cost more memory than the misses it saves. A 64-byte entry is only 32-aligned, so
//! half of them straddle. A wheel's memory grows a chunk (64 KiB with a `u64` payload) at a time.

use std::num::NonZeroU32;

use crate::buckets::Bucket;

/// End of a list, and "no entry".
pub(crate) const NIL: u32 = u32::MAX;

/// Lists per bucket; a power of two.
const CHAINS: usize = 4;

/// The chain of its bucket that entry `index` goes on.
#[inline]
fn chain_of(index: u32) -> usize {
    index as usize & (CHAINS - 1)
}

/// The heads of one bucket's chains.
type Heads = [u32; CHAINS];

/// The heads of an empty bucket.
const EMPTY: Heads = [NIL; CHAINS];

/// A bucket's lists after [`Slab::take_list`]: its entries, walked chain by chain in turn.
#[derive(Debug)]
pub(crate) struct Detached {
    chains: [u32; CHAINS],
    turn: usize,
}

/// One slab entry, at its natural size and alignment: the chunk it lives in is what is aligned
/// (see [`Chunks`]).
#[derive(Debug)]
struct Entry<T> {
    /// Next entry on the bucket chain (occupied) or on the free list (vacant).
    next: u32,
    /// Previous entry on the bucket chain; stale on a chain's head and on a vacant entry.
    prev: u32,
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
    /// The tick the timer fires at (its deadline in Exact mode, rounded up in Coarse mode).
    pub(crate) expiry: u64,
    pub(crate) value: T,
    /// Bumped every time the entry is freed; a `TimerId` must match it.
    generation: u32,
    /// `bucket + 1`: its niche is the tag of `Slot`.
    bucket_plus_one: NonZeroU32,
}

impl<T> Timer<T> {
    pub(crate) fn bucket(&self) -> Bucket {
        self.bucket_plus_one.get() - 1
    }
}

/// Entries, the free list and the heads of all bucket lists.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Chunks<T>,
    /// The chain heads of each bucket.
    heads: Vec<Heads>,
    free_head: u32,
    /// Rotates the chain that `pop_front` takes from next.
    cursor: usize,
    len: usize,
    /// Generation given to entries created by this slab; random per wheel.
    generation_seed: u32,
}

impl<T> Slab<T> {
    pub(crate) fn new(buckets: usize, capacity: usize, generation_seed: u32) -> Self {
        Slab {
            entries: Chunks::with_capacity(capacity),
            heads: vec![EMPTY; buckets],
            free_head: NIL,
            cursor: 0,
            len: 0,
            generation_seed,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True if no timer is on `bucket` (for the invariant checker).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn is_empty(&self, bucket: Bucket) -> bool {
        self.heads[bucket as usize] == EMPTY
    }

    /// The pending timer at `index` if `generation` matches.
    #[inline]
    pub(crate) fn get(&self, index: u32, generation: u32) -> Option<&Timer<T>> {
        match &self.entries.get(index)?.slot {
            Slot::Occupied(timer) if timer.generation == generation => Some(timer),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut Timer<T>> {
        match &mut self.entries.get_mut(index)?.slot {
            Slot::Occupied(timer) if timer.generation == generation => Some(timer),
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

    #[inline]
    pub(crate) fn timer_mut(&mut self, index: u32) -> &mut Timer<T> {
        match &mut self.entries[index].slot {
            Slot::Occupied(timer) => timer,
            Slot::Vacant { .. } => panic!("entry {index} is vacant"),
        }
    }

    /// Stores a new timer on `bucket`; returns (index, generation). The caller has checked
    /// capacity; `None` only when `u32` indices are exhausted.
    #[inline]
    pub(crate) fn insert(&mut self, bucket: Bucket, expiry: u64, value: T) -> Option<(u32, u32)> {
        let mut timer = Timer {
            expiry,
            value,
            generation: self.generation_seed,
            bucket_plus_one: plus_one(bucket),
        };
        if self.free_head == NIL {
            self.free_head = self.entries.grow(self.generation_seed)?;
        }
        let index = self.free_head;
        let entry = &mut self.entries[index];
        self.free_head = entry.next;
        let Slot::Vacant { generation } = entry.slot else {
            unreachable!("entry {index} on the free list is occupied");
        };
        timer.generation = generation;
        entry.slot = Slot::Occupied(timer);
        let id = (index, generation);
        self.len += 1;
        self.push_front(bucket, index);
        Some(id)
    }

    /// Takes the timer at `index` off its list and frees the entry, if `generation` matches.
    /// Returns the timer's value, its bucket and whether that list became empty.
    #[inline]
    pub(crate) fn remove(&mut self, index: u32, generation: u32) -> Option<(T, Bucket, bool)> {
        // The entry is looked up once: read, freed, then the neighbours are written.
        let free_head = self.free_head;
        let entry = self.entries.get_mut(index)?;
        match &entry.slot {
            Slot::Occupied(timer) if timer.generation == generation => {}
            _ => return None,
        }
        let (next, prev) = (entry.next, entry.prev);
        let vacant = Slot::Vacant {
            generation: generation.wrapping_add(1),
        };
        let Slot::Occupied(timer) = std::mem::replace(&mut entry.slot, vacant) else {
            unreachable!("checked above");
        };
        entry.next = free_head;
        self.free_head = index;
        self.len -= 1;
        let bucket = timer.bucket();
        let now_empty = self.unlink_links(index, bucket, next, prev);
        Some((timer.value, bucket, now_empty))
    }

    /// Frees a detached entry; returns the generation its id had, and its value.
    #[inline]
    pub(crate) fn free_detached(&mut self, index: u32) -> (u32, T) {
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
        self.len -= 1;
        (generation, timer.value)
    }

    /// Detaches the head of the next non-empty chain of `bucket` (the chains in turn); returns
    /// it and whether the bucket is now empty, or `None` if it was empty. The entry's `bucket`
    /// is stale until it is pushed again ([`push_detached`](Self::push_detached)) or freed
    /// ([`free_detached`](Self::free_detached)).
    #[inline]
    pub(crate) fn pop_front(&mut self, bucket: Bucket) -> Option<(u32, bool)> {
        let heads = &mut self.heads[bucket as usize];
        for _ in 0..CHAINS {
            self.cursor = self.cursor.wrapping_add(1);
            let chain = self.cursor & (CHAINS - 1);
            let head = heads[chain];
            if head != NIL {
                // The new head's `prev` stays stale: heads are known by `heads`, not by `prev`.
                let next = self.entries[head].next;
                heads[chain] = next;
                return Some((head, next == NIL && *heads == EMPTY));
            }
        }
        None
    }

    /// Moves the occupied entry `index` to `bucket` with a new expiry. Returns (old bucket, old
    /// list became empty).
    #[inline]
    pub(crate) fn relink(&mut self, index: u32, bucket: Bucket, expiry: u64) -> (Bucket, bool) {
        let (old, now_empty) = self.unlink(index);
        let timer = self.timer_mut(index);
        timer.expiry = expiry;
        timer.bucket_plus_one = plus_one(bucket);
        self.push_front(bucket, index);
        (old, now_empty)
    }

    /// Detaches every list of a bucket; the entries keep their links to each other but their
    /// `bucket` fields are stale until each is relinked or removed. Walk them with
    /// [`pop_detached`](Self::pop_detached).
    pub(crate) fn take_list(&mut self, bucket: Bucket) -> Detached {
        let chains = std::mem::replace(&mut self.heads[bucket as usize], EMPTY);
        Detached { chains, turn: 0 }
    }

    /// The next detached entry, from the chains in turn; the caller relinks or removes it before
    /// asking for another.
    #[inline]
    pub(crate) fn pop_detached(&self, detached: &mut Detached) -> Option<u32> {
        for _ in 0..CHAINS {
            detached.turn = (detached.turn + 1) & (CHAINS - 1);
            let index = detached.chains[detached.turn];
            if index != NIL {
                detached.chains[detached.turn] = self.entries[index].next;
                return Some(index);
            }
        }
        None
    }

    #[cfg(any(test, feature = "test-hooks"))]
    /// Every entry on `bucket`, chain by chain, checking the `prev` links; for checks in tests.
    pub(crate) fn members(&self, bucket: Bucket) -> Vec<u32> {
        let mut out = Vec::new();
        for chain in 0..CHAINS {
            let mut index = self.heads[bucket as usize][chain];
            let mut prev = NIL;
            while index != NIL {
                out.push(index);
                if prev != NIL {
                    let link = self.entries[index].prev;
                    assert_eq!(link, prev, "prev link of entry {index}");
                }
                prev = index;
                index = self.entries[index].next;
            }
        }
        out
    }

    /// Links an entry that was detached by `take_list` onto `bucket`.
    #[inline]
    pub(crate) fn push_detached(&mut self, bucket: Bucket, index: u32, expiry: u64) {
        let timer = self.timer_mut(index);
        timer.expiry = expiry;
        timer.bucket_plus_one = plus_one(bucket);
        self.push_front(bucket, index);
    }

    /// Drops every timer and forgets every entry; generations are bumped so old ids stay stale.
    pub(crate) fn clear(&mut self) {
        self.heads.fill(EMPTY);
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
        self.len = 0;
    }

    /// Links `index` at the front of its chain of `bucket`.
    #[inline]
    fn push_front(&mut self, bucket: Bucket, index: u32) {
        let chain = &mut self.heads[bucket as usize][chain_of(index)];
        let head = *chain;
        let entry = &mut self.entries[index];
        entry.next = head;
        entry.prev = NIL;
        if head != NIL {
            // A blind write: `prev` is outside the slot, so the old head is not read.
            self.entries[head].prev = index;
        }
        *chain = index;
    }

    /// Takes the occupied entry `index` off its chain; returns its bucket and whether the bucket
    /// became empty.
    #[inline(always)]
    fn unlink(&mut self, index: u32) -> (Bucket, bool) {
        let entry = &self.entries[index];
        let (next, prev) = (entry.next, entry.prev);
        let Slot::Occupied(timer) = &entry.slot else {
            panic!("entry {index} is vacant");
        };
        let bucket = timer.bucket();
        (bucket, self.unlink_links(index, bucket, next, prev))
    }

    /// The list half of an unlink: joins `index`'s neighbours `prev` and `next` on its chain of
    /// `bucket`, without reading or writing `index` itself; returns whether the bucket became
    /// empty (only possible when the entry was its chain's head and last entry).
    #[inline(always)]
    fn unlink_links(&mut self, index: u32, bucket: Bucket, next: u32, prev: u32) -> bool {
        let heads = &mut self.heads[bucket as usize];
        let chain = &mut heads[chain_of(index)];
        let mut now_empty = false;
        if *chain == index {
            *chain = next;
            now_empty = next == NIL && *heads == EMPTY;
        } else {
            debug_assert_ne!(prev, NIL, "a middle entry has a previous one");
            self.entries[prev].next = next;
        }
        if next != NIL {
            // Blind, like the write above; stale if `next` just became the head, as allowed.
            self.entries[next].prev = prev;
        }
        now_empty
    }
}

#[inline]
fn plus_one(bucket: Bucket) -> NonZeroU32 {
    NonZeroU32::new(bucket + 1).expect("bucket index below u32::MAX")
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
struct Chunks<T> {
    aligned: Vec<Box<[Aligned<T>; CHUNK]>>,
    plain: Vec<Box<[Entry<T>; CHUNK]>>,
}

/// An entry in a 32-aligned chunk; its size is a multiple of 32, so the alignment pads nothing.
#[derive(Debug)]
#[repr(align(32))]
struct Aligned<T>(Entry<T>);

impl<T> Chunks<T> {
    /// True if the entries are stored 32-aligned (in `aligned`), false if as they are (in
    /// `plain`).
    const ALIGNED: bool = size_of::<Entry<T>>() % 32 == 0;

    fn with_capacity(capacity: usize) -> Self {
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

    /// Entries created, all of them vacant or occupied.
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

    /// Adds a chunk of vacant entries with `generation`, linked in index order into a free list
    /// that ends in `NIL`; returns its first index. `None` once a chunk would reach index `NIL`.
    #[cold]
    fn grow(&mut self, generation: u32) -> Option<u32> {
        let first = self.len();
        if self.aligned.len() + self.plain.len() >= MAX_CHUNKS {
            return None;
        }
        let vacant = |k: u32| Entry {
            next: if k + 1 < CHUNK as u32 {
                first + k + 1
            } else {
                NIL
            },
            prev: NIL,
            slot: Slot::Vacant { generation },
        };
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

    /// The address of entry `index`.
    fn address<T>(slab: &Slab<T>, index: u32) -> usize {
        std::ptr::from_ref(&slab.entries[index]) as usize
    }

    #[test]
    fn every_32_byte_entry_of_every_chunk_is_in_one_cache_line() {
        let mut slab = Slab::new(1, 0, 0);
        for i in 0..3 * CHUNK as u64 {
            slab.insert(0, 1, i).unwrap();
        }
        assert_eq!(slab.entries.len(), 3 * CHUNK as u32);
        const { assert!(Chunks::<u64>::ALIGNED) };
        for index in 0..slab.entries.len() {
            assert_eq!(address(&slab, index) % 32, 0, "entry {index}");
        }
    }

    #[test]
    fn a_40_byte_entry_is_not_padded() {
        // The per-core crate's payload: a slot number and a `u64`.
        assert_eq!(size_of::<Entry<(u32, u64)>>(), 40);
        let mut slab = Slab::new(1, 0, 0);
        for i in 0..CHUNK as u64 + 1 {
            slab.insert(0, 1, (0, i)).unwrap();
        }
        // Consecutive entries, to a chunk's last, are 40 bytes apart.
        for index in [0, 7, CHUNK as u32 - 2] {
            assert_eq!(address(&slab, index + 1) - address(&slab, index), 40);
        }
        const { assert!(!Chunks::<(u32, u64)>::ALIGNED) };
    }

    #[test]
    fn chunks_grow_without_moving_and_stop_below_nil() {
        let mut slab = Slab::new(1, 0, 5);
        let (first, _) = slab.insert(0, 1, 0u64).unwrap();
        let at = std::ptr::from_ref(&slab.entries[first]);
        for i in 1..=CHUNK as u64 {
            slab.insert(0, 1, i).unwrap();
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
    fn lists_link_and_unlink_in_o1() {
        let mut slab = Slab::new(2, 0, 7);
        let (a, ga) = slab.insert(0, 1, 'a').unwrap();
        let (b, _) = slab.insert(0, 2, 'b').unwrap();
        let (c, _) = slab.insert(0, 3, 'c').unwrap();
        let (e, _) = slab.insert(0, 3, 'e').unwrap();
        let (f, _) = slab.insert(0, 3, 'f').unwrap();
        assert_eq!(ga, 7);
        assert_eq!(slab.members(0), [f, a, b, c, e]);
        assert_eq!(
            slab.remove(b, 6),
            None,
            "a wrong generation removes nothing"
        );
        assert_eq!(slab.remove(b, 7), Some(('b', 0, false)));
        assert_eq!(slab.remove(b, 7), None, "stale once removed");
        assert_eq!(slab.remove(f, 7), Some(('f', 0, false)));
        assert_eq!(slab.remove(e, 7), Some(('e', 0, false)));
        assert_eq!(slab.members(0), [a, c]);
        assert_eq!(slab.relink(a, 1, 9), (0, false));
        assert_eq!(slab.remove(c, 7), Some(('c', 0, true)));
        assert_eq!(slab.len(), 1);
        // The freed entries are reused, newest first, with a bumped generation.
        let (d, gd) = slab.insert(1, 4, 'd').unwrap();
        assert_eq!((d, gd), (c, 8));
        assert_eq!(slab.members(1), [a, d]);
        assert!(slab.get(c, 7).is_none());
        assert_eq!(slab.get(d, 8).map(|t| t.expiry), Some(4));
    }

    #[test]
    fn detached_chains_are_walked_in_turn() {
        let mut slab = Slab::new(2, 0, 0);
        let ids: Vec<u32> = (0..9).map(|i| slab.insert(0, i, i).unwrap().0).collect();
        let mut detached = slab.take_list(0);
        assert!(slab.is_empty(0));
        let mut order = Vec::new();
        while let Some(index) = slab.pop_detached(&mut detached) {
            order.push(index);
            slab.push_detached(1, index, 0);
        }
        assert_eq!(order, [5, 6, 7, 8, 1, 2, 3, 4, 0]);
        let mut members = slab.members(1);
        members.sort();
        assert_eq!(members, ids);
    }
}

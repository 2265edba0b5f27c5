//! C's `timeout.c` (github.com/wahern/timeout), compiled from a checkout named by
//! `TICKWHEEL_TIMEOUT_C` (see `build.rs`), through the adapter in `c/timeout_peer.c`: its nodes in
//! one array reserved up front, an id being a node's index and generation.
//!
//! Each operation is one call into C, as a C program's call into the library would be (nothing
//! inlines across the boundary in either); a fired timer is one call to take it, as
//! `timeouts_get` hands them out one at a time.

use super::Timers;
use std::ptr::NonNull;

#[repr(C)]
struct Peer {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn tp_open() -> *mut Peer;
    fn tp_prepare(peer: *mut Peer, n: u64);
    fn tp_close(peer: *mut Peer);
    fn tp_insert(peer: *mut Peer, deadline: u64, value: u64) -> u64;
    fn tp_cancel(peer: *mut Peer, id: u64, value: *mut u64) -> i32;
    fn tp_reset(peer: *mut Peer, id: u64, deadline: u64) -> i32;
    fn tp_update(peer: *mut Peer, now: u64);
    fn tp_next_fired(peer: *mut Peer, value: *mut u64) -> i32;
    fn tp_next_expiry(peer: *mut Peer) -> u64;
    fn tp_len(peer: *const Peer) -> u64;
}

/// A `timeout.c` wheel and its node array, owned.
#[derive(Debug)]
pub struct TimeoutC {
    peer: NonNull<Peer>,
}

impl TimeoutC {
    /// An empty wheel at tick 0 with room for 2^24 timers.
    pub fn new() -> Self {
        // SAFETY: `tp_open` takes nothing and returns a fresh peer or NULL.
        let peer = unsafe { tp_open() };
        Self {
            peer: NonNull::new(peer).expect("timeout.c: out of memory"),
        }
    }
}

impl Default for TimeoutC {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TimeoutC {
    fn drop(&mut self) {
        // SAFETY: the peer came from `tp_open`, and is closed once, here.
        unsafe { tp_close(self.peer.as_ptr()) }
    }
}

// Every call below passes the peer this value owns (alive until `drop`; `&mut self` or `&self`
// rules out a second caller) and, where it writes a value, a pointer to a local `u64`. The C side
// checks every id it is given against the node's generation and armed state, so no id, stale or
// made up, reaches memory it does not own.
impl Timers for TimeoutC {
    type Id = u64;

    fn prepare(&mut self, n: usize) {
        // SAFETY: see above the impl.
        unsafe { tp_prepare(self.peer.as_ptr(), n as u64) }
    }

    #[inline]
    fn insert(&mut self, deadline: u64, value: u64) -> u64 {
        // SAFETY: see above the impl.
        unsafe { tp_insert(self.peer.as_ptr(), deadline, value) }
    }

    #[inline]
    fn cancel(&mut self, id: u64) -> Option<u64> {
        let mut value = 0;
        // SAFETY: see above the impl.
        (unsafe { tp_cancel(self.peer.as_ptr(), id, &mut value) } != 0).then_some(value)
    }

    #[inline]
    fn reset(&mut self, id: &mut u64, deadline: u64) -> bool {
        // SAFETY: see above the impl.
        unsafe { tp_reset(self.peer.as_ptr(), *id, deadline) != 0 }
    }

    fn advance(&mut self, now: u64, fired: &mut impl FnMut(u64)) {
        let peer = self.peer.as_ptr();
        // SAFETY: see above the impl.
        unsafe { tp_update(peer, now) };
        let mut value = 0;
        // SAFETY: see above the impl.
        while unsafe { tp_next_fired(peer, &mut value) } != 0 {
            fired(value);
        }
    }

    fn next_expiry(&mut self) -> Option<u64> {
        // SAFETY: see above the impl.
        let at = unsafe { tp_next_expiry(self.peer.as_ptr()) };
        (at != 0).then_some(at)
    }

    fn len(&self) -> usize {
        // SAFETY: see above the impl.
        unsafe { tp_len(self.peer.as_ptr()) as usize }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_are_refused_after_cancel_fire_and_reuse() {
        let mut q = TimeoutC::new();
        let a = q.insert(10, 1);
        assert_eq!(q.cancel(a), Some(1));
        assert_eq!(q.cancel(a), None, "cancelled twice");
        let b = q.insert(10, 2); // reuses a's node under a new generation
        assert_ne!(a, b);
        assert_eq!(q.cancel(a), None, "a's id must not reach b");
        let mut stale = a;
        assert!(!q.reset(&mut stale, 20));
        let mut fired = Vec::new();
        q.advance(10, &mut |v| fired.push(v));
        assert_eq!(fired, [2]);
        assert_eq!(q.cancel(b), None, "fired");
        assert_eq!(q.cancel(u64::MAX), None, "made up");
        assert_eq!(q.len(), 0);
        assert_eq!(q.next_expiry(), None);
    }
}

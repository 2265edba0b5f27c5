//! Connections and the slab that holds them.
//!
//! Model: a core's connections live in a [`Slab`]: a vector of slots plus a free list, so a
//! connection is found by index in O(1) and slots are reused. Each slot has a generation that
//! changes whenever its connection is removed, and a [`Key`] names (index, generation). Keys go
//! into the epoll token and into every timer payload, so an event or a timer that outlives its
//! connection finds a different generation and is ignored instead of acting on a newcomer.
//!
//! Invariants: a key is live iff its slot holds a connection and the generations match.
//! Generations use 31 bits, so every key token is below 2^63 and the tokens above are free for
//! the listener, the timer fd and the stop flag.
//!
//! Given up: slots are never returned to the allocator; the slab keeps its high-water mark.

use std::net::TcpStream;
use std::time::Instant;

use tickwheel_percpu::Handle;

/// Names a connection slot at one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

const GENERATION_MASK: u32 = (1 << 31) - 1;

impl Key {
    /// Packs the key into an epoll token (always below 2^63).
    pub(crate) fn token(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// Unpacks a token made by [`Key::token`]; `None` for tokens at or above 2^63.
    pub(crate) fn from_token(token: u64) -> Option<Key> {
        (token < 1 << 63).then_some(Key {
            index: token as u32,
            generation: (token >> 32) as u32,
        })
    }
}

/// What a timer payload says: which connection, and which of its timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerToken {
    /// The connection the timer belongs to.
    pub(crate) key: Key,
    /// Which timer fired.
    pub(crate) kind: TimerKind,
}

/// The timers a connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerKind {
    /// Keep-alive idle timeout: reset on every request.
    Idle,
    /// Header-read timeout: runs while a request head is incomplete.
    Header,
    /// Bound on a lingering close (takes the idle timer's place once the last response is out).
    Linger,
}

/// One armed timer: its handle and the base's clock when it was (re)armed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Armed {
    /// The handle on the core's base.
    pub(crate) handle: Handle,
    /// `Base::now()` when armed or last reset: the timeout counts from here.
    pub(crate) since: Instant,
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct Conn {
    /// The socket (non-blocking).
    pub(crate) stream: TcpStream,
    /// Received bytes of a request not yet complete.
    pub(crate) input: Vec<u8>,
    /// Response bytes not yet written.
    pub(crate) output: Vec<u8>,
    /// How much of `output` has been written.
    pub(crate) written: usize,
    /// The idle timer (or, while lingering, the linger timer), when armed.
    pub(crate) idle: Option<Armed>,
    /// The header timer, when armed.
    pub(crate) header: Option<Armed>,
    /// Close once `output` is flushed.
    pub(crate) close_after_flush: bool,
    /// Currently registered for writability instead of readability.
    pub(crate) waiting_to_write: bool,
    /// The last response is out and the write side shut: reading only to discard until the
    /// peer closes or the linger timer fires.
    pub(crate) lingering: bool,
}

impl Conn {
    /// A fresh connection with no timers and empty buffers.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Conn {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            written: 0,
            idle: None,
            header: None,
            close_after_flush: false,
            waiting_to_write: false,
            lingering: false,
        }
    }

    /// The slot that holds timer `kind`.
    pub(crate) fn timer_mut(&mut self, kind: TimerKind) -> &mut Option<Armed> {
        match kind {
            TimerKind::Idle | TimerKind::Linger => &mut self.idle,
            TimerKind::Header => &mut self.header,
        }
    }

    /// Response bytes still to write.
    pub(crate) fn pending_output(&self) -> &[u8] {
        &self.output[self.written..]
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

/// Connections indexed by [`Key`], with slot reuse.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Slab {
    /// Stores `conn` and returns its key.
    pub(crate) fn insert(&mut self, conn: Conn) -> Key {
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            debug_assert!(slot.conn.is_none(), "free slot {index} is occupied");
            slot.conn = Some(conn);
            return Key {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len()).expect("more than 2^32 connections on a core");
        self.slots.push(Slot {
            generation: 0,
            conn: Some(conn),
        });
        Key {
            index,
            generation: 0,
        }
    }

    /// The connection named by `key`, if it is still live.
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut Conn> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        slot.conn.as_mut()
    }

    /// Removes and returns the connection named by `key`, if it is still live.
    pub(crate) fn remove(&mut self, key: Key) -> Option<Conn> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        let conn = slot.conn.take()?;
        slot.generation = (slot.generation + 1) & GENERATION_MASK;
        self.free.push(key.index);
        Some(conn)
    }

    /// Keys of every live connection.
    pub(crate) fn keys(&self) -> Vec<Key> {
        let live = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.conn.is_some());
        live.map(|(i, s)| Key {
            index: i as u32,
            generation: s.generation,
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn conn() -> Conn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Conn::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap())
    }

    #[test]
    fn token_round_trip_and_reserved_range() {
        let key = Key {
            index: 7,
            generation: GENERATION_MASK,
        };
        assert!(key.token() < 1 << 63);
        assert_eq!(Key::from_token(key.token()), Some(key));
        assert_eq!(Key::from_token(u64::MAX), None);
    }

    #[test]
    fn removed_key_goes_stale_and_slot_is_reused() {
        let mut slab = Slab::default();
        let a = slab.insert(conn());
        assert!(slab.remove(a).is_some());
        let b = slab.insert(conn());
        assert_eq!(a.index, b.index, "slot reused");
        assert!(
            slab.get_mut(a).is_none(),
            "stale key must not reach the newcomer"
        );
        assert!(slab.remove(a).is_none());
        assert!(slab.get_mut(b).is_some());
        assert_eq!(slab.keys(), vec![b]);
    }
}

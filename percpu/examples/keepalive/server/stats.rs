//! Per-core counters, readable live from other threads, and the report a core hands back.
//!
//! Model: each core owns one [`Counters`] and is its only writer; a status thread reads it once a
//! second. Every field is a relaxed atomic: the reader wants a recent value of each counter, not
//! a consistent cut across counters, so no ordering between fields is needed. Being the only
//! writer, the core adds with a relaxed load and store instead of a read-modify-write.
//!
//! Lateness samples (how long after its timeout a connection was really closed) stay in the core
//! and are handed back once, when the core stops.

use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tickwheel_percpu::BaseStats;

/// Live counters of one core. Aligned to its own cache lines so cores never share one.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Counters {
    accepted: AtomicU64,
    closed: AtomicU64,
    served: AtomicU64,
    rejected: AtomicU64,
    idle_closes: AtomicU64,
    header_closes: AtomicU64,
    peer_closes: AtomicU64,
    resets: AtomicU64,
    early_closes: AtomicU64,
    stale_timers: AtomicU64,
    timer_failures: AtomicU64,
    accept_errors: AtomicU64,
}

/// Which counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A connection was accepted.
    Accepted,
    /// A connection was closed (any reason).
    Closed,
    /// A request was answered 200.
    Served,
    /// A request was answered 400, 405 or 431.
    Rejected,
    /// A connection was closed by its idle timer.
    IdleClose,
    /// A connection was closed by its header timer.
    HeaderClose,
    /// The peer closed or reset the connection.
    PeerClose,
    /// A timer was re-armed with `reset_after`.
    Reset,
    /// A timer fired before its timeout had elapsed (must stay 0).
    EarlyClose,
    /// A timer fired for a connection or timer that no longer exists (must stay 0).
    StaleTimer,
    /// A timer could not be armed, so its connection was closed (must stay 0).
    TimerFailure,
    /// `accept` failed (e.g. out of descriptors).
    AcceptError,
}

impl Counters {
    fn cell(&self, what: Count) -> &AtomicU64 {
        match what {
            Count::Accepted => &self.accepted,
            Count::Closed => &self.closed,
            Count::Served => &self.served,
            Count::Rejected => &self.rejected,
            Count::IdleClose => &self.idle_closes,
            Count::HeaderClose => &self.header_closes,
            Count::PeerClose => &self.peer_closes,
            Count::Reset => &self.resets,
            Count::EarlyClose => &self.early_closes,
            Count::StaleTimer => &self.stale_timers,
            Count::TimerFailure => &self.timer_failures,
            Count::AcceptError => &self.accept_errors,
        }
    }

    /// Adds `n`. Only the owning core calls this.
    pub(crate) fn add(&self, what: Count, n: u64) {
        let cell = self.cell(what);
        // Relaxed: this core is the only writer, so load-then-store cannot lose an update, and
        // readers need no ordering with other memory.
        cell.store(cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// A copy of every counter.
    pub(crate) fn snapshot(&self) -> Snapshot {
        // Relaxed: a recent value of each counter is all a reader needs (see the module doc).
        let get = |what| self.cell(what).load(Ordering::Relaxed);
        Snapshot {
            accepted: get(Count::Accepted),
            closed: get(Count::Closed),
            served: get(Count::Served),
            rejected: get(Count::Rejected),
            idle_closes: get(Count::IdleClose),
            header_closes: get(Count::HeaderClose),
            peer_closes: get(Count::PeerClose),
            resets: get(Count::Reset),
            early_closes: get(Count::EarlyClose),
            stale_timers: get(Count::StaleTimer),
            timer_failures: get(Count::TimerFailure),
            accept_errors: get(Count::AcceptError),
        }
    }
}

/// Plain copy of [`Counters`]; subtract two to get a rate over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Connections accepted.
    pub(crate) accepted: u64,
    /// Connections closed, any reason.
    pub(crate) closed: u64,
    /// Requests answered 200.
    pub(crate) served: u64,
    /// Requests answered 400, 405 or 431.
    pub(crate) rejected: u64,
    /// Connections closed by the idle timer.
    pub(crate) idle_closes: u64,
    /// Connections closed by the header timer.
    pub(crate) header_closes: u64,
    /// Connections closed or reset by the peer.
    pub(crate) peer_closes: u64,
    /// Timer re-arms with `reset_after`.
    pub(crate) resets: u64,
    /// Timers that fired before their timeout (must be 0).
    pub(crate) early_closes: u64,
    /// Timers that fired for a dead connection or timer (must be 0).
    pub(crate) stale_timers: u64,
    /// Timers that could not be armed (must be 0).
    pub(crate) timer_failures: u64,
    /// Failed `accept` calls.
    pub(crate) accept_errors: u64,
}

impl Snapshot {
    /// Connections open now.
    pub(crate) fn open(&self) -> u64 {
        self.accepted.saturating_sub(self.closed)
    }

    /// The sum of several snapshots.
    pub(crate) fn total<'a>(all: impl IntoIterator<Item = &'a Snapshot>) -> Snapshot {
        all.into_iter()
            .fold(Snapshot::default(), |acc, s| Snapshot {
                accepted: acc.accepted + s.accepted,
                closed: acc.closed + s.closed,
                served: acc.served + s.served,
                rejected: acc.rejected + s.rejected,
                idle_closes: acc.idle_closes + s.idle_closes,
                header_closes: acc.header_closes + s.header_closes,
                peer_closes: acc.peer_closes + s.peer_closes,
                resets: acc.resets + s.resets,
                early_closes: acc.early_closes + s.early_closes,
                stale_timers: acc.stale_timers + s.stale_timers,
                timer_failures: acc.timer_failures + s.timer_failures,
                accept_errors: acc.accept_errors + s.accept_errors,
            })
    }
}

impl Sub for Snapshot {
    type Output = Snapshot;

    fn sub(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            accepted: self.accepted - earlier.accepted,
            closed: self.closed - earlier.closed,
            served: self.served - earlier.served,
            rejected: self.rejected - earlier.rejected,
            idle_closes: self.idle_closes - earlier.idle_closes,
            header_closes: self.header_closes - earlier.header_closes,
            peer_closes: self.peer_closes - earlier.peer_closes,
            resets: self.resets - earlier.resets,
            early_closes: self.early_closes - earlier.early_closes,
            stale_timers: self.stale_timers - earlier.stale_timers,
            timer_failures: self.timer_failures - earlier.timer_failures,
            accept_errors: self.accept_errors - earlier.accept_errors,
        }
    }
}

/// What one core hands back when it stops.
#[derive(Debug, Clone)]
pub(crate) struct CoreReport {
    /// Worker index (also the base index).
    pub(crate) index: usize,
    /// The CPU the worker was pinned to.
    pub(crate) cpu: usize,
    /// Final counters.
    pub(crate) counters: Snapshot,
    /// The base's own statistics.
    pub(crate) base: BaseStats,
    /// For each idle close: time past the idle timeout (measured from the base's clock at the
    /// last reset to the moment of closing).
    pub(crate) idle_lateness: Vec<Duration>,
    /// For each header-timeout close: time past the header timeout.
    pub(crate) header_lateness: Vec<Duration>,
    /// Connections still open at shutdown, closed by it.
    pub(crate) closed_at_shutdown: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_subtract() {
        let c = Counters::default();
        c.add(Count::Accepted, 3);
        c.add(Count::Closed, 1);
        let a = c.snapshot();
        c.add(Count::Served, 5);
        let d = c.snapshot() - a;
        assert_eq!((a.open(), d.served, d.accepted), (2, 5, 0));
        assert_eq!(Snapshot::total([&a, &a]).accepted, 6);
    }
}

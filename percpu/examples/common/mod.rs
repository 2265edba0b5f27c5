//! Helpers every example shares, each written once: the listening socket, the seeded generator
//! that spreads the load generators' intervals, and percentiles of measured samples.
//!
//! Each example includes this file with `#[path]` and uses what it needs.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// A non-blocking, close-on-exec listening socket on `addr` with `SO_REUSEADDR` and
/// `SO_REUSEPORT`, so several listeners (one per core) can share one port and the kernel spreads
/// the connections.
pub(crate) fn listen_reuseport(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// A tiny xorshift64* generator: fast, seedable, good enough to spread intervals.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for stream `seed`; distinct seeds give unrelated streams.
    pub(crate) fn new(seed: u64) -> Self {
        Rng(0x9E37_79B9_7F4A_7C15 ^ (seed + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`, to the microsecond.
    pub(crate) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros() as u64 + 1;
        lo + Duration::from_micros(self.next() % span)
    }

    /// Uniform in `1..=n`.
    pub(crate) fn upto(&mut self, n: u32) -> u32 {
        1 + (self.next() % u64::from(n)) as u32
    }
}

/// The p50, p99 and maximum of `samples` (nearest rank below); `None` when empty.
pub(crate) fn percentiles<T: Copy + Ord>(samples: &[T]) -> Option<[T; 3]> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let last = sorted.len().checked_sub(1)?;
    let at = |p: usize| sorted[last * p / 100];
    Some([at(50), at(99), sorted[last]])
}

/// What the serving banner says of the build: `test-util` makes every sleep's first poll read the
/// clock three times (to find a paused tokio clock), a cost no production build has, so a load
/// run against such a build measures the test clock. `examples/axum_service/bench.sh` refuses it.
#[allow(dead_code, reason = "the keep-alive server files no sleeps")]
pub(crate) fn build_note() -> &'static str {
    if cfg!(feature = "test-util") {
        "; built with test-util (not for load runs)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_samples() {
        let ms = Duration::from_millis;
        assert_eq!(percentiles::<Duration>(&[]), None);
        let v: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentiles(&v), Some([ms(50), ms(99), ms(100)]));
        assert_eq!(percentiles(&[ms(7)]), Some([ms(7); 3]));
    }

    #[test]
    fn listeners_share_a_port() {
        let first = listen_reuseport("127.0.0.1:0".parse().unwrap(), 8).unwrap();
        let addr = first.local_addr().unwrap();
        let second = listen_reuseport(addr, 8).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
    }
}

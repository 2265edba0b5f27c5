//! Helpers shared by the threaded tests of the bases: a small random number generator and a
//! readiness probe for a base's fd.

#![allow(dead_code, reason = "each test binary uses a different part")]
#![allow(
    unreachable_pub,
    reason = "a module of each test binary, shared by path"
)]

use std::os::fd::RawFd;

/// xorshift64*: seeded by hand, so a test's choices are the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// True if `fd` becomes readable within `timeout_ms` (0: now, without blocking).
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, length 1.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

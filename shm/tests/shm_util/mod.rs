//! Helpers shared by the shared-memory tests: a log file that several processes map, re-running
//! this test binary as a child process, and a small random number generator.

#![allow(dead_code, reason = "each test binary uses a different part")]
#![allow(
    unreachable_pub,
    reason = "a module of each test binary, shared by path"
)]

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, AtomicU64};

pub mod steps;
pub mod world;

/// Ops a child may log; payload = child * STRIDE + sequence number.
pub const STRIDE: u64 = 1 << 18;
/// Children at most.
pub const CHILDREN: u64 = 4;

/// What a child did with a payload (the `state` array of the log).
pub const INTENT: u32 = 1; // about to schedule
pub const SCHEDULED: u32 = 2; // schedule returned a handle
pub const CANCELLING: u32 = 3; // about to cancel
pub const CANCELLED: u32 = 4; // cancel returned true
pub const NOT_CANCELLED: u32 = 5; // cancel returned false (fired or firing)

/// Two arrays of `CHILDREN * STRIDE` counters in one shared file: `state[p]` written by the
/// scheduling child, `fired[p]` incremented by whichever process fires `p`.
pub struct Log {
    ptr: *mut AtomicU32,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Log {}
// SAFETY: as above.
unsafe impl Sync for Log {}

impl Log {
    const WORDS: usize = (2 * CHILDREN * STRIDE) as usize;

    pub fn create(path: &Path) -> Log {
        Self::map(&new_file(path, Self::WORDS * 4))
    }

    pub fn open(path: &Path) -> Log {
        Self::map(&open_rw(path))
    }

    fn map(f: &std::fs::File) -> Log {
        let len = Self::WORDS * 4;
        // SAFETY: a new shared mapping of the whole file; accessed only as atomics.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Log {
            ptr: ptr.cast(),
            len,
        }
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i < Self::WORDS);
        // SAFETY: in bounds of the live mapping; page-aligned base, so every u32 is aligned.
        unsafe { &*self.ptr.add(i) }
    }

    pub fn state(&self, p: u64) -> &AtomicU32 {
        self.word(p as usize)
    }

    pub fn fired(&self, p: u64) -> &AtomicU32 {
        self.word((CHILDREN * STRIDE + p) as usize)
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A fresh directory under the target dir's temp space, removed by the caller at the end.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tickwheel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the test `entry` of this same binary as a child process with `vars` in its environment.
pub fn spawn_child(entry: &str, vars: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::null());
    cmd.spawn().unwrap()
}

/// xorshift64*: enough randomness for choosing operations and kill times.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng::new(t ^ u64::from(std::process::id()) << 32)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A new file of `bytes` zero bytes at `path`, open for reading and writing.
pub fn new_file(path: &Path, bytes: usize) -> std::fs::File {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap();
    f.set_len(bytes as u64).unwrap();
    f
}

/// The existing file at `path`, open for reading and writing.
pub fn open_rw(path: &Path) -> std::fs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// `n` zeroed words in anonymous shared memory, inherited by children made with `fork`. Never
/// unmapped (the test process ends soon after), hence `'static`.
pub fn anonymous_words(n: usize) -> &'static [AtomicU64] {
    map_words(-1, libc::MAP_ANONYMOUS, n)
}

/// The first `n` words of `f` (at least `n * 8` bytes long), mapped shared; never unmapped.
pub fn file_words(f: &std::fs::File, n: usize) -> &'static [AtomicU64] {
    map_words(f.as_raw_fd(), 0, n)
}

fn map_words(fd: i32, flags: i32, n: usize) -> &'static [AtomicU64] {
    // SAFETY: a new shared mapping (of `fd`, or anonymous), accessed only as atomics.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            n * 8,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | flags,
            fd,
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    // SAFETY: `n * 8` bytes of page-aligned shared memory are valid AtomicU64s, and the mapping
    // lives as long as the process.
    unsafe { std::slice::from_raw_parts(ptr.cast(), n) }
}

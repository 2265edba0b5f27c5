//! The memory a set lives in: a shared mapping (anonymous, memfd or file), or under `cfg(loom)`
//! a vector of model-checked atomics.

use std::io;
use std::os::fd::OwnedFd;

use crate::sync::AtomicU64;

/// Zeroed words shared by every process that maps the same object.
#[derive(Debug)]
pub(crate) struct Memory {
    #[cfg(not(loom))]
    ptr: *mut u8,
    #[cfg(not(loom))]
    len: usize,
    #[cfg(loom)]
    words: Box<[AtomicU64]>,
}

// SAFETY: the memory is only ever accessed as atomics (`words` hands out `&[AtomicU64]`), which
// are Sync; the pointer itself is owned by this value until Drop unmaps it.
#[cfg(not(loom))]
unsafe impl Send for Memory {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for Memory {}

impl Memory {
    /// Maps `len` bytes of `fd` (or anonymous shared memory for `None`).
    #[cfg(not(loom))]
    pub(crate) fn map(fd: Option<&OwnedFd>, len: usize) -> io::Result<Memory> {
        use std::os::fd::AsFd;
        let ptr = crate::sys::mmap_shared(fd.map(|f| f.as_fd()), len)?;
        Ok(Memory { ptr, len })
    }

    /// Under loom there is no kernel: the words are a vector, and `fd` must be `None`.
    #[cfg(loom)]
    pub(crate) fn map(fd: Option<&OwnedFd>, len: usize) -> io::Result<Memory> {
        if fd.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "loom builds have anonymous sets only",
            ));
        }
        Ok(Memory {
            words: (0..len / 8).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// The mapping as words.
    #[cfg(not(loom))]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` is page-aligned (so 8-byte aligned), valid for `len` bytes while `self`
        // lives, and only ever accessed atomically by any process (AtomicU64 has u64's size and
        // alignment). Memory shared with other processes may change at any time, which atomics
        // allow. The kernel zero-fills new objects, and zero is a valid AtomicU64.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.len / 8) }
    }

    #[cfg(loom)]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// Bytes mapped.
    #[cfg(not(loom))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(loom)]
    pub(crate) fn len(&self) -> usize {
        self.words.len() * 8
    }

    /// Writes dirty pages back to the file (no-op for anonymous memory).
    #[cfg(not(loom))]
    pub(crate) fn sync(&self) -> io::Result<()> {
        // SAFETY: exactly our live mapping.
        unsafe { crate::sys::msync(self.ptr, self.len) }
    }

    #[cfg(loom)]
    pub(crate) fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    /// Address of the 32-bit half of word `at` that a futex watches (the low half: the counter
    /// kept in that word is only ever compared modulo 2^32).
    #[cfg(not(loom))]
    pub(crate) fn futex_addr(&self, at: usize) -> *const u32 {
        let word = &self.words()[at] as *const AtomicU64 as *const u32;
        if cfg!(target_endian = "little") {
            word
        } else {
            word.wrapping_add(1)
        }
    }
}

#[cfg(not(loom))]
impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the one mapping made in `map`; every `&[AtomicU64]` borrowed
        // from `self` has ended, since they borrow `self`.
        let _ = unsafe { crate::sys::munmap(self.ptr, self.len) };
    }
}

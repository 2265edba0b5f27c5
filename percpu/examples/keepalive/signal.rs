//! Waiting for Ctrl-C (SIGINT) or SIGTERM without a signal handler.
//!
//! Model: [`Shutdown::install`] blocks both signals in the calling thread before any worker is
//! spawned, so every thread inherits the mask and none is interrupted; the signals then queue on
//! a signalfd, and [`Shutdown::wait`] reads it. No async-signal-safety rules apply because no
//! code runs in signal context.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::server::sys::{cvt, owned};

/// A signalfd for SIGINT and SIGTERM.
#[derive(Debug)]
pub(crate) struct Shutdown {
    fd: OwnedFd,
}

fn stop_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
    let mut set: libc::sigset_t = unsafe { mem::zeroed() };
    // SAFETY: `set` is a live sigset_t; the signal numbers are valid constants.
    unsafe {
        cvt(libc::sigemptyset(&mut set))?;
        cvt(libc::sigaddset(&mut set, libc::SIGINT))?;
        cvt(libc::sigaddset(&mut set, libc::SIGTERM))?;
    }
    Ok(set)
}

impl Shutdown {
    /// Blocks SIGINT and SIGTERM in this thread (and the threads it spawns later) and opens a
    /// signalfd for them. Call before starting the server.
    pub(crate) fn install() -> io::Result<Shutdown> {
        let set = stop_signals()?;
        // SAFETY: `set` is initialised; the old mask is not wanted (null).
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) })?;
        Ok(Shutdown { fd: owned(fd) })
    }

    /// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
    pub(crate) fn wait(&self) -> io::Result<i32> {
        loop {
            // SAFETY: signalfd_siginfo is plain data; the kernel fills it.
            let mut info: libc::signalfd_siginfo = unsafe { mem::zeroed() };
            let size = mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: reads at most `size` bytes into the live `info`.
            let ret = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&raw mut info).cast::<libc::c_void>(),
                    size,
                )
            };
            match cvt(ret) {
                Ok(n) if n as usize == size => return Ok(info.ssi_signo as i32),
                Ok(_) => return Err(io::Error::other("short read from signalfd")),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

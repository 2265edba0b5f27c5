//! What the async test files share.
#![allow(dead_code, reason = "not every test file uses every helper")]

/// A current-thread tokio runtime with the I/O driver the bases' fds need.
pub(crate) fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap()
}

/// A multi-thread tokio runtime with `workers` workers, each given one of `timers`' bases.
pub(crate) fn multi_thread(
    timers: &tickwheel_percpu::time::Timers,
    workers: usize,
) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .on_thread_start(timers.on_thread_start())
        .enable_io()
        .build()
        .unwrap()
}

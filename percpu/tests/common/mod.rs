//! What the async test files share.

/// A current-thread tokio runtime with the I/O driver the bases' fds need.
pub(crate) fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap()
}

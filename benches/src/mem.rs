//! Resident memory of the running process, read from `/proc/self/status`.
//!
//! Bytes per timer are measured in a fresh process per structure (the runner re-executes itself),
//! as the growth of resident memory across a phase, so allocator slack and the structure's spare
//! capacity count, as they do in production.

/// Resident set size of this process in bytes (`VmRSS`), or `None` off Linux.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss_kib(&status).map(|kib| kib * 1024)
}

/// The `VmRSS:` line of a `/proc/<pid>/status` text, in KiB.
pub fn parse_vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rss_line() {
        let text = "Name:\tx\nVmPeak:\t  10 kB\nVmRSS:\t    2048 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss_kib(text), Some(2048));
        assert_eq!(parse_vm_rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_some_rss() {
        assert!(rss_bytes().is_some_and(|b| b > 0));
    }
}

//! Who a process is, and whether it is still alive, on one Linux machine.
//!
//! A pid alone is not an identity: once a process dies its pid is given to the next one that
//! asks. The kernel's start time of a process (field 22 of `/proc/<pid>/stat`, clock ticks since
//! boot) is fixed for its life, and no two processes with one pid share it while the machine is
//! up. A process is alive when `kill(pid, 0)` finds it, it has the recorded start time, and
//! some thread of its group has not exited: the leader's state letter is not enough, since it
//! reads zombie (`Z`) once the main thread has exited while other threads run on, so then every
//! `/proc/<pid>/task/<tid>/stat` is read. Whatever cannot be read (a `hidepid` mount, another
//! user's process) counts as alive: that only delays recovery, while the other answer would take
//! over a live owner or free a live holder's slot. Words that cannot hold all of it keep fewer bits: the owner
//! and registry words keep 32 bits of start time; a slot's holder field keeps 7. A pid reused by
//! a process whose start time agrees in those bits passes for the dead one: for the owner word
//! that takes a reuse in the same tick modulo 2^32 ticks (about 497 days at 100 Hz); for a holder
//! one in 128 reuses, and then one slot stays held until the impostor exits. Never the reverse:
//! a live process is never taken for dead.

use std::io;
use std::path::Path;

use super::table::Ident;

/// The identity of the calling process.
pub(crate) fn current() -> io::Result<Ident> {
    let pid = std::process::id();
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (_, start) = parse_stat(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc/self/stat"))?;
    Ok(Ident { pid, start })
}

/// `(state letter, start time)` from the text of `/proc/<pid>/stat`. The command name (field 2)
/// is in parentheses and may itself contain spaces and parentheses, so fields are counted from
/// the last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 was the state; starttime is field 22, 18 fields further on.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Alive, with a start time whose low `bits` bits are `start`.
pub(crate) fn alive_on_proc(pid: u32, start: u64, bits: u32) -> bool {
    alive_in(Path::new("/proc"), pid, start, bits)
}

/// [`alive_on_proc`] reading `root` as `/proc` (tests point it at a directory of their own).
fn alive_in(root: &Path, pid: u32, start: u64, bits: u32) -> bool {
    if pid == 0 || !crate::sys::process_exists(pid) {
        return false;
    }
    let dir = root.join(pid.to_string());
    // Unreadable (hidepid, another user's process) or unparsable: alive is the safe answer (it
    // only delays recovery); a process that really went is found gone by `kill` next time.
    let Some((state, now)) = std::fs::read_to_string(dir.join("stat"))
        .ok()
        .and_then(|stat| parse_stat(&stat))
    else {
        return true;
    };
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    if now & mask != start & mask {
        return false;
    }
    // The leader's letter speaks for the leader thread only: once the main thread has exited it
    // reads `Z` while other threads of the group run on.
    !exited(state) || any_thread_runs(&dir)
}

/// A zombie or dead task.
fn exited(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// True if some thread of the group in `dir` (a `/proc/<pid>` directory) has not exited, or if
/// that cannot be read (the safe answer again).
fn any_thread_runs(dir: &Path) -> bool {
    let Ok(tasks) = std::fs::read_dir(dir.join("task")) else {
        return true;
    };
    for task in tasks {
        let Ok(task) = task else { return true };
        match std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| parse_stat(&stat))
        {
            Some((state, _)) if exited(state) => {}
            // Running, or unreadable: alive.
            _ => return true,
        }
    }
    false
}

/// A test's own answer to "is `pid` alive?" (threads standing in for processes).
pub(crate) type Probe = std::sync::Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// How liveness is decided for a set: `/proc` (always, outside tests) or a probe.
#[derive(Clone, Default)]
pub(crate) struct Liveness {
    pub(crate) probe: Option<Probe>,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.probe.is_some() {
            "probe"
        } else {
            "/proc"
        })
    }
}

impl Liveness {
    /// Alive, given `bits` low bits of the start time.
    pub(crate) fn alive(&self, pid: u32, start: u64, bits: u32) -> bool {
        if let Some(p) = &self.probe {
            return p(pid);
        }
        alive_on_proc(pid, start, bits)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn parses_a_name_with_spaces_and_parens() {
        let line = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_stat(line), Some(('S', 987_654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_is_not() {
        let me = current().unwrap();
        assert!(alive_on_proc(me.pid, me.start, 64));
        assert!(alive_on_proc(me.pid, me.start & 0x7f, 7));
        assert!(!alive_on_proc(me.pid, me.start + 1, 64));
        assert!(!alive_on_proc(0, 0, 64));
    }

    #[test]
    fn an_unreadable_stat_of_a_live_pid_is_alive() {
        // A `/proc` whose stat cannot be read (hidepid, another user): here a directory where
        // the file should be, which even root cannot read as a file.
        let root = std::env::temp_dir().join(format!("tickwheel-proc-{}", std::process::id()));
        let me = current().unwrap();
        std::fs::create_dir_all(root.join(me.pid.to_string()).join("stat")).unwrap();
        let alive = alive_in(&root, me.pid, me.start, 64);
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            alive,
            "a live process whose stat is unreadable was judged dead"
        );
    }

    #[test]
    fn a_reaped_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive_on_proc(pid, 0, 0) || !alive_on_proc(pid, u64::MAX, 64));
    }
}

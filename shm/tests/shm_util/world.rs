//! Threads standing in for processes: a set whose liveness probe says which pids are dead, so a
//! test can "kill" a process (its client dropped as a killed one would be) without one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tickwheel_shm::{Advancer, Client, Config, Segment};

/// A set on a manual clock whose processes are the pids a test attaches as; pids put in `dead`
/// are dead to the set's liveness checks.
pub struct World {
    pub segment: Segment,
    pub dead: Arc<Mutex<HashSet<u32>>>,
}

impl World {
    pub fn new(capacity: usize) -> World {
        let dead = Arc::new(Mutex::new(HashSet::new()));
        let d = dead.clone();
        let segment = Segment::anonymous(&Config::new(capacity).manual_clock())
            .unwrap()
            .with_liveness_probe(Arc::new(move |pid| !d.lock().unwrap().contains(&pid)));
        World { segment, dead }
    }

    pub fn attach(&self, pid: u32) -> Client {
        self.segment.attach_as(pid).unwrap()
    }

    /// The process dies: a killed process gives back and unregisters nothing.
    pub fn kill(&self, pid: u32, client: Client) {
        client.crash();
        self.dead.lock().unwrap().insert(pid);
    }
}

/// Moves the clock to `to`, turns once, and returns what fired, sorted.
pub fn fire_all(adv: &mut Advancer, to: u64) -> Vec<u64> {
    adv.advance_to(to);
    let mut fired = Vec::new();
    adv.turn(|p| fired.push(p));
    fired.sort_unstable();
    fired
}

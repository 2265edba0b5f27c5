//! A process stopped (`SIGSTOP`) before each store it makes to the mapping, one number after
//! another (the `test-hooks` store points): a scheduler-and-canceller, and an owner in the middle
//! of a turn. While it is stopped the parent, another process, checks what the module doc
//! promises of a stalled process: the parent's due timers fire at the owner's next turn (a stopped
//! scheduler or canceller hides nobody's marks), and the parent's schedules never find the set full
//! while it holds fewer live timers than its capacity, without any owner turn (cancelled slots are
//! reused at once). Then the child is continued and everything is checked exactly once, with no
//! slot leaked. One test in this binary, so nothing else runs while it forks.

#![cfg(not(loom))]

mod shm_util;

use shm_util::steps::{self, ForkLog, Role};
use tickwheel_shm::{Advancer, Client, Config, Segment, hooks};

/// Two bitmap levels (16 leaf words under one top word), so marks go through a summary level.
const CAPACITY: usize = 1024;
/// Slots the stopped child may hold: its live timers and the one operation it is in.
const CHILD_SLOTS: usize = 4;

/// The parent's due timers fire at the next turn although the child stopped mid-mark: five in
/// the leaf word the child marks into, five in the next one.
fn others_fire_at_the_next_turn(parent: &Client, adv: &mut Advancer) -> Result<(), String> {
    let far = 1 << 40;
    let mut due = Vec::new();
    let mut handles = Vec::new();
    for i in 0..80u64 {
        let is_due = i < 5 || (70..75).contains(&i);
        let p = 100 + i;
        handles.push(parent.schedule_at(if is_due { 0 } else { far }, p).unwrap());
        if is_due {
            due.push(p);
        }
    }
    let mut fired = Vec::new();
    adv.turn(|p| {
        if p >= 100 {
            fired.push(p);
        }
    });
    fired.sort_unstable();
    for h in handles {
        parent.cancel(h);
    }
    // Cancelled timers that fired anyway would show here too.
    adv.turn(|p| fired.push(p));
    if fired == due {
        Ok(())
    } else {
        Err(format!(
            "{} of another process's {} due timers fired at the next turn",
            fired.len(),
            due.len()
        ))
    }
}

/// Without any turn: fill every slot the child cannot hold, cancel them all, fill them again.
fn cancelled_slots_come_back_without_a_turn(parent: &Client, live: usize) -> Result<(), String> {
    let room = CAPACITY - live - CHILD_SLOTS;
    for round in 0..2 {
        let mut hs = Vec::new();
        for i in 0..room {
            match parent.schedule_at(1 << 40, 200 + i as u64) {
                Ok(h) => hs.push(h),
                Err(e) => {
                    for h in hs {
                        parent.cancel(h);
                    }
                    return Err(format!(
                        "round {round}: {e} with {} of {CAPACITY} slots live",
                        live + i
                    ));
                }
            }
        }
        for h in hs {
            assert!(parent.cancel(h));
        }
    }
    Ok(())
}

/// A stopped child: [`resume`](Stopped::resume) continues and reaps it; dropped without that
/// (a check panicked) it is killed, so that no stopped process outlives the test.
struct Stopped(i32);

impl Stopped {
    /// Continues the child and waits for it: true if it ran to its end.
    fn resume(self) -> bool {
        // SAFETY: our own stopped child.
        assert_eq!(unsafe { libc::kill(self.0, libc::SIGCONT) }, 0);
        let status = steps::wait(self.0, 0);
        std::mem::forget(self);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
        steps::wait(self.0, 0);
    }
}

/// Stops `role` before store 1, 2, ... until it runs to the end; returns its store points and
/// each failed promise (at which store point, and what).
fn every_stop(role: Role) -> (u64, Vec<String>) {
    let mut broken = Vec::new();
    for n in 1.. {
        let what = format!("{role:?} stopped before store {n}");
        let segment = Segment::anonymous(&Config::new(CAPACITY).manual_clock()).unwrap();
        let log = ForkLog::new();
        let parent = segment.attach().unwrap();
        let mut adv = match role {
            Role::Scheduler => Some(parent.advancer().unwrap()),
            Role::Owner => {
                steps::prepare_owner_run(&parent);
                None
            }
        };
        let pid = steps::fork_child(role, &segment, &log, || hooks::stop_before_store(n));
        let status = steps::wait(pid, libc::WUNTRACED);
        let stopped = libc::WIFSTOPPED(status);
        if stopped {
            let child = Stopped(pid);
            let checks = match adv.as_mut() {
                Some(adv) => vec![
                    others_fire_at_the_next_turn(&parent, adv),
                    cancelled_slots_come_back_without_a_turn(&parent, 0),
                ],
                // The owner is stopped: nothing fires, but schedules and cancels go on.
                None => vec![cancelled_slots_come_back_without_a_turn(&parent, 4)],
            };
            // Frees what the checks cancelled, for a protocol whose cancelled slots wait for the
            // owner, so that the child can finish its own schedules once continued.
            if let Some(adv) = adv.as_mut() {
                adv.turn(|p| assert!(p >= 100, "{what}: {p} fired early"));
            }
            let resumed = child
                .resume()
                .then_some(())
                .ok_or_else(|| "the child's own operations failed once continued".to_string());
            broken.extend(
                checks
                    .into_iter()
                    .chain([resumed])
                    .filter_map(|r| r.err().map(|e| format!("{what}: {e}"))),
            );
        } else {
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "{what}: the child failed"
            );
        }
        let mut adv = match adv {
            Some(adv) => adv,
            None => parent
                .advancer()
                .expect("the owner child gave advancing up"),
        };
        steps::assert_exactly_once(role, &mut adv, &log, &what);
        steps::assert_no_leak(&parent, &mut adv, CAPACITY, &what);
        if !stopped {
            return (n - 1, broken);
        }
    }
    unreachable!()
}

#[test]
fn a_stop_before_any_store_holds_up_nobody_else() {
    let (scheduler, mut broken) = every_stop(Role::Scheduler);
    let (owner, more) = every_stop(Role::Owner);
    broken.extend(more);
    eprintln!("store points: scheduler {scheduler}, owner {owner}");
    for b in &broken {
        eprintln!("{b}");
    }
    assert!(
        broken.is_empty(),
        "{} broken promises, first ones:\n{}",
        broken.len(),
        broken[..broken.len().min(8)].join("\n")
    );
    assert!(scheduler >= 20 && owner >= 15, "{scheduler} / {owner}");
}

//! Shared timer sets, model 2: schedulers mark the dirty bitmap while the owner takes it. The
//! owner spins until it has fired both timers, so a lost mark would spin it forever. A marker
//! stopped between two levels must not hide the others' marks.

use tickwheel_loom_tests::check;
use tickwheel_loom_tests::sync::{spawn, yield_now};
use tickwheel_shm::{Advancer, Client, Config, CrashPoint, Segment};

fn spin_until_fired(adv: &mut Advancer, want: &[u64]) {
    let mut fired = Vec::new();
    while fired.len() < want.len() {
        adv.turn(|p| fired.push(p));
        yield_now();
    }
    fired.sort_unstable();
    assert_eq!(fired, want);
}

fn race(seg: &Segment, owner: &Client, mut adv: Advancer) {
    let (a, b) = (seg.attach_as(2).unwrap(), seg.attach_as(3).unwrap());
    let now = owner.now();
    let ta = spawn(move || {
        a.schedule_at(now, 1).unwrap();
    });
    let tb = spawn(move || {
        b.schedule_at(now, 2).unwrap();
    });
    spin_until_fired(&mut adv, &[1, 2]);
    ta.join().unwrap();
    tb.join().unwrap();
    adv.turn(|p| panic!("{p} fired twice"));
}

#[test]
fn marks_in_one_leaf_word_race_the_take() {
    check("shm_mark_vs_take_same_word", || {
        let seg = Segment::anonymous(&Config::new(2).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let adv = owner.advancer().unwrap();
        race(&seg, &owner, adv);
    });
}

#[test]
fn marks_under_different_upper_words_race_the_take() {
    // Loom layouts have two slots a bitmap word: 5 slots make three levels (3, 2 and 1 words).
    check("shm_mark_vs_take_three_levels", || {
        let seg = Segment::anonymous(&Config::new(5).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let mut adv = owner.advancer().unwrap();
        // Use slots 0..4, then free slot 0: the racers get slot 0 (free stack) and slot 4
        // (bump), whose marks meet only at the top word. A client keeps the slot of its cancel
        // for its own next schedule, so the cancelling client is dropped, which gives slot 0
        // back to the stack.
        let setup = seg.attach_as(5).unwrap();
        let hs: Vec<_> = (0..4).map(|p| setup.schedule_at(100, p).unwrap()).collect();
        assert!(setup.cancel(hs[0]));
        drop(setup);
        adv.turn(|_| {});
        race(&seg, &owner, adv);
    });
}

#[test]
fn a_marker_stopped_between_levels_hides_no_other_mark() {
    // A process stopped after its leaf mark (slot 0, leaf word 0; never resumed in the model):
    // the racers' slots 1 (the same leaf word) and 2 (the next leaf word, under the same middle
    // word) must still reach the owner. Its own timer is far off, so only theirs fire.
    check("shm_mark_past_a_stopped_marker", || {
        let seg = Segment::anonymous(&Config::new(5).manual_clock()).unwrap();
        let owner = seg.attach_as(1).unwrap();
        let adv = owner.advancer().unwrap();
        let stopped = seg.attach_as(4).unwrap();
        let h = stopped.schedule_crashing(CrashPoint::AfterLeafMark, 100, 20);
        assert_eq!(h.map(|h| (h.to_u128() >> 32) as u32), Some(0));
        race(&seg, &owner, adv);
    });
}

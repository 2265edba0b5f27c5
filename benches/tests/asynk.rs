//! The async section runs end to end on both runtimes for every timer API, counts every
//! outcome, and no sleep of an API that promises never to be early completes early.

use std::time::Duration;

use tickwheel_benches::asynk::{self, LatePlan, Workload};

/// pingora-timeout rounds a deadline to its 10 ms buckets after truncating it to whole
/// milliseconds, so a sleep can end up to 1 ms before its deadline: its early count is reported,
/// not required to be 0.
const MAY_BE_EARLY: &str = "pingora";

fn columns() -> Vec<&'static str> {
    let mut c = vec!["tokio"];
    if cfg!(tokio_unstable) {
        c.push("tokio-alt");
    }
    c.extend(["pingora", "tickwheel", "tickwheel-fallback"]);
    c
}

#[test]
fn async_section_runs_and_nothing_is_early() {
    let only = ["timeout_ready", "timeout_wait1", "fire", "reset"].map(String::from);
    let report = asynk::run(1, true, &only);
    // current_thread has one line a workload, multi_thread one per regime.
    assert_eq!(report.lines.len(), 3 * only.len());
    let regimes: Vec<_> = report.lines.iter().map(|l| (l.flavor, l.regime)).collect();
    assert!(
        regimes.contains(&("current_thread", "1 task")),
        "{regimes:?}"
    );
    assert!(
        regimes.contains(&("multi_thread(2)", "1 task")),
        "{regimes:?}"
    );
    assert!(
        regimes.contains(&("multi_thread(2)", "1 task/worker")),
        "{regimes:?}"
    );
    assert!(report.lateness.is_empty(), "lateness was not asked for");
    for l in &report.lines {
        for c in &l.cells {
            assert_eq!(c.tally.wrong, 0, "{l:?}");
            if c.api != MAY_BE_EARLY {
                assert_eq!(c.tally.early, 0, "{l:?}");
            }
        }
        let tokio = l.cell("tokio").and_then(|c| c.ns).expect("tokio measured");
        let ours = l
            .cell("tickwheel")
            .and_then(|c| c.ns)
            .expect("tickwheel measured");
        assert!(tokio.median > 0.0 && ours.median > 0.0, "{l:?}");
        assert!(
            tokio.min <= tokio.median && tokio.median <= tokio.max,
            "{l:?}"
        );
    }
    let md = asynk::markdown(&report, &[(10, vec![1.0, 2.0, 3.0])]);
    assert!(md.contains("| current_thread | 1 task | fire |"), "{md}");
    assert!(
        md.contains("| multi_thread(2) | 1 task/worker | fire |"),
        "{md}"
    );
    assert!(md.contains("| tokio/tickwheel |"));
    assert!(md.contains("| pingora/tickwheel |"));
    assert!(md.contains("| 10 | 1.0 | 2.0 | 3.0 |"));
}

/// Every peer, every workload and the lateness run once at tiny sizes: each cell is measured
/// and its outcomes are right, or it is n/a for the one reason it may be.
#[test]
fn every_peer_runs_each_workload_once_at_tiny_sizes() {
    let n = 64; // a multiple of the multi-thread runtime's tasks
    let plan = [
        Workload::TimeoutReady,
        Workload::TimeoutWait1,
        Workload::Fire,
        Workload::Reset,
        Workload::Live,
    ]
    .map(|w| (w, n));
    let late = LatePlan {
        sleeps: 200,
        lead: Duration::from_millis(100),
        spread: Duration::from_millis(20),
    };
    let report = asynk::run_plan(1, &plan, Some(late));
    assert_eq!(report.lines.len(), 3 * plan.len());
    for l in &report.lines {
        let names: Vec<_> = l.cells.iter().map(|c| c.api).collect();
        assert_eq!(names, columns(), "{l:?}");
        for c in &l.cells {
            let alt_on_current = c.api == "tokio-alt" && l.flavor == "current_thread";
            let no_reset = c.api == "pingora" && l.workload == "reset";
            if alt_on_current || no_reset {
                assert!(c.ns.is_none(), "{l:?}");
                continue;
            }
            let ns =
                c.ns.unwrap_or_else(|| panic!("{} not measured: {l:?}", c.api));
            assert!(ns.median > 0.0, "{l:?}");
            assert_eq!(c.tally.ops, n as u64, "{l:?}");
            assert_eq!(c.tally.wrong, 0, "{l:?}");
            if c.api != MAY_BE_EARLY {
                assert_eq!(c.tally.early, 0, "{l:?}");
            }
        }
    }
    // tokio-alt only on the multi-thread runtime.
    let late_apis = 2 * columns().len() - usize::from(cfg!(tokio_unstable));
    assert_eq!(report.lateness.len(), late_apis, "{:?}", report.lateness);
    for l in &report.lateness {
        assert_eq!(l.sleeps, 200);
        assert!(
            l.p50.median <= l.p99.median && l.p99.median <= l.max.median,
            "{l:?}"
        );
        if l.api != MAY_BE_EARLY {
            assert_eq!(l.early, 0, "{l:?}");
        }
    }
    let md = asynk::markdown(&report, &[]);
    assert!(
        md.contains("| multi_thread(2) | 1 task | reset | 64 |"),
        "{md}"
    );
    assert!(md.contains("n/a"), "{md}");
    assert!(md.contains("| sleeps in flight |"), "{md}");
}

#[test]
fn memory_probe_rejects_an_unknown_api() {
    assert!(asynk::bytes_per_sleep("std", 10).is_err());
    for api in asynk::MEMORY_APIS {
        assert!(asynk::bytes_per_sleep(api, 1000).is_ok(), "{api}");
    }
    // The base's slot table takes huge pages: the probe, which starts counting once the base
    // exists, misses the first 2 MiB, so it needs more sleeps than fit there (40 bytes a record).
    assert!(asynk::bytes_per_sleep("tickwheel", 200_000).unwrap() > 0.0);
}

#[test]
fn one_workload_runs_alone_and_bad_names_are_refused() {
    let (ns, tally) = asynk::run_one("tickwheel", "reset", "current", 100).expect("runs");
    assert!(ns > 0.0);
    assert_eq!((tally.ops, tally.wrong, tally.early), (100, 0, 0));
    let (_, tally) = asynk::run_one("tokio", "timeout_wait1", "multi", 64).expect("runs");
    assert_eq!((tally.ops, tally.wrong), (64, 0));
    assert!(asynk::run_one("pingora", "reset", "current", 10).is_err());
    assert!(asynk::run_one("std", "reset", "current", 10).is_err());
    assert!(asynk::run_one("tokio", "nap", "current", 10).is_err());
    assert!(asynk::run_one("tokio", "reset", "sideways", 10).is_err());
}

//! The runner's `--quick` mode end to end: it must build, run every section and write its
//! outputs. Nothing here looks at the figures; speed is judged only from full runs.

use std::process::Command;

#[test]
fn quick_run_writes_tables_csv_and_charts() {
    let out = std::env::temp_dir().join(format!("tickwheel-bench-quick-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_tickwheel-benches"))
        .args(["--quick", "--out"])
        .arg(&out)
        .output()
        .expect("the runner starts");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "runner failed: {stderr}");
    let csv = std::fs::read_to_string(out.join("summary.csv")).expect("summary.csv written");
    for section in [
        "insert",
        "cancel",
        "reset",
        "fire",
        "next_expiry",
        "catch_up",
        "bytes_armed",
    ] {
        assert!(
            csv.lines().any(|l| l.starts_with(&format!("{section},"))),
            "no {section} rows"
        );
        assert!(
            csv.contains(&format!("{section},tickwheel-exact,")),
            "no tickwheel row in {section}"
        );
    }
    for section in [
        "percore_refresh",
        "percore_peers",
        "percore_ns_per_op",
        "percore_reserve_empty",
        "lateness_p99",
    ] {
        assert!(csv.contains(&format!("\n{section},")), "no {section} rows");
    }
    for design in [
        "percpu",
        "wheel per core + std Mutex",
        "wheel per core + parking_lot Mutex",
        "global std Mutex<Wheel>",
        "bare Wheel",
    ] {
        assert!(
            csv.contains(&format!("\npercore_peers,{design}, remote 0%,")),
            "no {design} keepalive rows"
        );
    }
    let svg = std::fs::read_to_string(out.join("reset.svg")).expect("reset.svg written");
    assert!(svg.contains("<svg") && svg.contains("tickwheel-exact"));
    let tables = std::fs::read_to_string(out.join("tables.md")).expect("tables.md written");
    assert!(tables.contains("### targets"));
    assert!(tables.contains("### per-core keepalive against locks"));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bad_arguments_are_refused() {
    let run = Command::new(env!("CARGO_BIN_EXE_tickwheel-benches"))
        .arg("--frobnicate")
        .output()
        .expect("the runner starts");
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown argument"));
}

#[test]
fn help_lists_every_subcommand_and_each_has_its_own() {
    let help = |args: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_tickwheel-benches"))
            .args(args)
            .output()
            .expect("the runner starts");
        assert!(run.status.success(), "{args:?} failed");
        String::from_utf8_lossy(&run.stdout).into_owned()
    };
    let top = help(&["--help"]);
    for option in [
        "--quick",
        "--sizes",
        "--only",
        "--per-core",
        "--scaling-only",
    ] {
        assert!(top.contains(option), "no {option} in --help");
    }
    for sub in ["async", "keepalive", "shm", "mem", "async-mem"] {
        assert!(top.contains(&format!("\n  {sub} ")), "no {sub} in --help");
        let own = help(&[sub, "--help"]);
        assert!(
            own.starts_with(&format!("usage: tickwheel-benches {sub} ")),
            "{own}"
        );
    }
}

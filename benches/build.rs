//! Declares the cfgs this crate reads, so the check-cfg lint knows them (the workspace's lint table
//! is shared by every crate; these concern this one alone):
//! - `tokio_unstable`, set by `RUSTFLAGS="--cfg tokio_unstable"`, under which the async section
//!   adds tokio's per-worker timer;
//! - `timeout_c`, set here when `TICKWHEEL_TIMEOUT_C` names a checkout of C's `timeout.c`
//!   (github.com/wahern/timeout): its `timeout.c` and the adapter in `c/timeout_peer.c` are
//!   compiled with the system C compiler (`CC`, else `cc`) into a static library, and the runner
//!   gains the `timeout-c` structure. The source is not kept in this repository; without the
//!   variable the structure is absent and nothing else changes. `TICKWHEEL_TIMEOUT_C_MARCH`
//!   replaces the `native` of `-march=native` (`x86-64` for a build valgrind can run).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tokio_unstable)");
    println!("cargo::rustc-check-cfg=cfg(timeout_c)");
    println!("cargo::rerun-if-env-changed=TICKWHEEL_TIMEOUT_C");
    println!("cargo::rerun-if-env-changed=TICKWHEEL_TIMEOUT_C_MARCH");
    println!("cargo::rerun-if-env-changed=CC");
    println!("cargo::rerun-if-changed=c/timeout_peer.c");
    let Some(source) = env::var_os("TICKWHEEL_TIMEOUT_C") else {
        return;
    };
    let source = PathBuf::from(source);
    if !source.join("timeout.c").is_file() || !source.join("timeout.h").is_file() {
        panic!(
            "TICKWHEEL_TIMEOUT_C={} holds no timeout.c and timeout.h (a checkout of github.com/wahern/timeout)",
            source.display()
        );
    }
    println!(
        "cargo::rerun-if-changed={}",
        source.join("timeout.c").display()
    );
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let objects = [
        compile(&source, &source.join("timeout.c"), &out),
        compile(&source, Path::new("c/timeout_peer.c"), &out),
    ];
    let library = out.join("libtimeout_peer.a");
    let _ = fs::remove_file(&library);
    run(Command::new("ar").arg("rcs").arg(&library).args(&objects));
    println!("cargo::rustc-link-search=native={}", out.display());
    println!("cargo::rustc-link-lib=static=timeout_peer");
    println!("cargo::rustc-cfg=timeout_c");
}

/// Compiles `file` as timeout.c's own Makefile does (`-O2 -march=native`, 64 slots a level, four
/// levels; the architecture from `TICKWHEEL_TIMEOUT_C_MARCH` if set), without the callback,
/// interval and back-pointer fields the runner does not use.
fn compile(include: &Path, file: &Path, out: &Path) -> PathBuf {
    let object = out
        .join(file.file_name().expect("a file"))
        .with_extension("o");
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let arch = env::var("TICKWHEEL_TIMEOUT_C_MARCH").unwrap_or_else(|_| "native".into());
    run(Command::new(cc)
        .arg(format!("-march={arch}"))
        .args(["-O2", "-fPIC", "-std=gnu99", "-Wall", "-Wextra"])
        .args(["-Wno-unused-parameter", "-Wno-unused-function"])
        .args(["-DWHEEL_BIT=6", "-DWHEEL_NUM=4"])
        .args(["-DTIMEOUT_DISABLE_CALLBACKS", "-DTIMEOUT_DISABLE_INTERVALS"])
        .arg("-DTIMEOUT_DISABLE_RELATIVE_ACCESS")
        .arg("-I")
        .arg(include)
        .arg("-c")
        .arg(file)
        .arg("-o")
        .arg(&object));
    object
}

fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed: {status}");
}

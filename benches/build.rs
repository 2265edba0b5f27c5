//! Declares `tokio_unstable`, under which the async section adds tokio's per-worker timer
//! (`RUSTFLAGS="--cfg tokio_unstable"`), so the check-cfg lint knows it. The workspace's lint
//! table is shared by every crate; this cfg concerns this one alone.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(tokio_unstable)");
}

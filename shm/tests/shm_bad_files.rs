//! Files that are not timer sets of this version are refused with a clear error and left as
//! they were; creation refuses to replace anything; the stored geometry wins.

#![cfg(not(loom))]

use std::fs;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;
use std::time::Duration;

use tickwheel_shm::{Config, Error, HEADER_BYTES, Mode, Segment, bytes_for};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("tickwheel-bad-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn made(dir: &Dir, name: &str, capacity: usize) -> PathBuf {
    let p = dir.0.join(name);
    let s = Segment::create_file(&p, &Config::new(capacity).manual_clock()).unwrap();
    s.sync().unwrap();
    p
}

fn patch_word(path: &PathBuf, word: usize, value: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[word * 8..word * 8 + 8].copy_from_slice(&value.to_le_bytes());
    fs::write(path, bytes).unwrap();
}

#[test]
fn not_a_timer_set() {
    let d = Dir::new("magic");
    for (name, content) in [
        ("empty", Vec::new()),
        ("short", b"TICK".to_vec()),
        ("text", vec![b'x'; 100_000]),
    ] {
        let p = d.0.join(name);
        fs::write(&p, &content).unwrap();
        let e = Segment::open_file(&p).unwrap_err();
        assert!(matches!(e, Error::NotATimerSet), "{name}: {e}");
        assert!(e.is_bad_file());
        assert!(e.to_string().contains("not a tickwheel"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), content, "{name} was modified");
    }
}

#[test]
fn truncated_and_oversized() {
    let d = Dir::new("size");
    let p = made(&d, "set", 1000);
    let full = fs::read(&p).unwrap();
    assert_eq!(full.len(), bytes_for(1000));

    let t = d.0.join("truncated");
    fs::write(&t, &full[..full.len() - 8]).unwrap();
    match Segment::open_file(&t).unwrap_err() {
        Error::Truncated { expected, actual } => {
            assert_eq!(
                (expected, actual),
                (full.len() as u64, full.len() as u64 - 8)
            );
        }
        e => panic!("{e}"),
    }
    let t = d.0.join("header-only");
    fs::write(&t, &full[..HEADER_BYTES / 2]).unwrap();
    assert!(matches!(
        Segment::open_file(&t).unwrap_err(),
        Error::Truncated { .. }
    ));
    let t = d.0.join("magic-only");
    fs::write(&t, &full[..8]).unwrap();
    assert!(matches!(
        Segment::open_file(&t).unwrap_err(),
        Error::Truncated { .. }
    ));

    let o = d.0.join("oversized");
    let mut f = fs::File::create(&o).unwrap();
    f.write_all(&full).unwrap();
    f.write_all(&[0; 4096]).unwrap();
    drop(f);
    assert!(matches!(
        Segment::open_file(&o).unwrap_err(),
        Error::SizeMismatch { .. }
    ));
}

#[test]
fn other_version_and_inconsistent_header() {
    let d = Dir::new("header");
    let p = made(&d, "v", 1000);
    patch_word(&p, 1, 99);
    match Segment::open_file(&p).unwrap_err() {
        Error::Version { found, supported } => assert_eq!((found, supported), (99, 3)),
        e => panic!("{e}"),
    }
    // A file of the layout before striped counters (version 2) is refused, not misread.
    let p = made(&d, "v2", 1000);
    patch_word(&p, 1, 2);
    match Segment::open_file(&p).unwrap_err() {
        Error::Version { found, supported } => assert_eq!((found, supported), (2, 3)),
        e => panic!("{e}"),
    }
    // A capacity that does not match the stated size.
    let p = made(&d, "cap", 1000);
    patch_word(&p, 4, 5000);
    assert!(matches!(
        Segment::open_file(&p).unwrap_err(),
        Error::SizeMismatch { .. }
    ));
    // Geometry fields out of range.
    for (word, value) in [(2, 0x0909), (2, 2 | 40 << 8), (4, 0)] {
        let p = made(&d, &format!("geo-{word}-{value}"), 1000);
        patch_word(&p, word, value);
        let e = Segment::open_file(&p).unwrap_err();
        assert!(
            matches!(e, Error::BadHeader(_)),
            "word {word} = {value}: {e}"
        );
    }
}

#[test]
fn creation_never_replaces_or_follows() {
    let d = Dir::new("create");
    let p = made(&d, "set", 10);
    let e = Segment::create_file(&p, &Config::new(10)).unwrap_err();
    assert!(matches!(&e, Error::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists));
    let target = d.0.join("target");
    fs::write(&target, b"keep").unwrap();
    let link = d.0.join("link");
    symlink(&target, &link).unwrap();
    assert!(Segment::create_file(&link, &Config::new(10)).is_err());
    assert!(Segment::open_file(&link).is_err(), "O_NOFOLLOW");
    assert_eq!(fs::read(&target).unwrap(), b"keep");
    let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let q = d.0.join("mode");
    Segment::create_file(&q, &Config::new(10).file_mode(0o640)).unwrap();
    assert_eq!(
        fs::metadata(&q).unwrap().permissions().mode() & 0o077 & !0o640,
        0
    );
}

#[test]
fn bad_configurations_are_refused_before_anything_is_made() {
    let d = Dir::new("config");
    for cfg in [
        Config::new(0),
        Config::new(usize::MAX),
        Config::new(10).levels(0),
        Config::new(10).mode(Mode::Exact).levels(12),
        Config::new(10).tick(Duration::ZERO),
    ] {
        let p = d.0.join("x");
        let e = Segment::create_file(&p, &cfg).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig(_)), "{cfg:?}: {e}");
        assert!(!p.exists());
    }
}

#[test]
fn stored_geometry_wins_and_state_survives_reopening() {
    let d = Dir::new("reopen");
    let p = d.0.join("set");
    let cfg = Config::new(100).mode(Mode::Exact).levels(4).manual_clock();
    let a = Segment::open_or_create_file(&p, &cfg).unwrap();
    let client = a.attach().unwrap();
    let h = client.schedule_at(7, 77).unwrap();
    let b = Segment::open_or_create_file(&p, &Config::new(5_000).tick(Duration::from_millis(3)))
        .unwrap();
    assert_eq!(b.geometry(), a.geometry());
    assert_eq!(b.geometry().capacity, 100);
    assert_eq!(b.geometry().tick, None);
    let other = b.attach().unwrap();
    assert!(
        other.cancel(h),
        "the handle is valid in every mapping of the set"
    );
    a.sync().unwrap();
    b.unlink().unwrap();
    assert!(!p.exists());
    assert!(
        Segment::anonymous(&Config::new(1))
            .unwrap()
            .unlink()
            .is_err()
    );
}

#[test]
fn a_memfd_set_cannot_be_shrunk() {
    use std::os::fd::AsRawFd;
    let s = Segment::memfd(&Config::new(64).manual_clock(), "sealed").unwrap();
    let fd = s.fd().unwrap().as_raw_fd();
    // SAFETY: plain syscall on a live fd we own.
    let r = unsafe { libc::ftruncate(fd, 4096) };
    assert_eq!(
        r, -1,
        "the memfd was shrunk: every mapping would die of SIGBUS"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );
    // The set still works.
    let c = s.attach().unwrap();
    c.schedule_at(1, 1).unwrap();
}

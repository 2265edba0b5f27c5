#!/usr/bin/env bash
# Makes tests/ from tokio's own time tests, as shipped in the tokio crate that cargo fetched, with
# only the path `tokio::time` replaced by `tickwheel_percpu::time`. Nothing else is edited: the
# runtimes (`#[tokio::test]`, tokio's builders) and tokio_test's macros stay tokio's.
set -euo pipefail
cd "$(dirname "$0")"

version=1.54.1
files="time_sleep time_timeout time_interval time_pause time_rt time_panic"

cargo fetch --quiet
src=""
for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tokio-"$version"; do
    [ -f "$dir/tests/time_sleep.rs" ] && src=$dir
done
if [ -z "$src" ]; then
    echo "port.sh: tokio-$version's sources are not in cargo's registry" >&2
    exit 1
fi

rm -rf tests
mkdir -p tests/support
# time_panic.rs declares `mod support { pub mod panic; }`.
cp "$src/tests/support/panic.rs" tests/support/panic.rs
for f in $files; do
    sed 's/\btokio::time\b/tickwheel_percpu::time/g' "$src/tests/$f.rs" >"tests/$f.rs"
    if grep -q 'tokio::time' "tests/$f.rs"; then
        echo "port.sh: tests/$f.rs still names tokio::time" >&2
        exit 1
    fi
done
echo "port.sh: tests/ made from $src"

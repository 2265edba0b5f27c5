#!/bin/sh
# Model-checks the cross-core protocols. Separate target dir so loom's build does not evict the
# normal one. LOOM_MAX_PREEMPTIONS=3 is affordable for the smaller models; 2 is the CI setting.
set -eu
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" CARGO_TARGET_DIR=target/loom \
    cargo test -p tickwheel-loom-tests --release -- --test-threads=2 --nocapture "$@"

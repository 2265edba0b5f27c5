#!/bin/sh
# Model-checks the cross-core protocols. Separate target dir so loom's build does not evict the
# normal one. CI runs LOOM_MAX_PREEMPTIONS=3 (about 5 minutes on 2 cores); the heaviest models cap
# themselves at 2 (`check_bounded`).
set -eu
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" CARGO_TARGET_DIR=target/loom \
    cargo test -p tickwheel-loom-tests --release -- --test-threads=2 --nocapture "$@"

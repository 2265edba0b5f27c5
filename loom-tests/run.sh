#!/bin/sh
# Model-checks the cross-core protocols. Separate target dir so loom's build does not evict the
# normal one. CI runs LOOM_MAX_PREEMPTIONS=3 (about 5 minutes on 2 cores); the heaviest models cap
# themselves at 2 (`check_bounded`).
set -eu
cd "$(dirname "$0")/.."
# LOOM_DEBUG_ASSERTIONS=1: the release build with debug assertions on (its own target dir), so
# that a debug_assert the models reach fails the run at release speed.
target=target/loom
if [ "${LOOM_DEBUG_ASSERTIONS:-0}" = 1 ]; then
    export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
    target=target/loom-debug
fi
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" CARGO_TARGET_DIR="$target" \
    cargo test -p tickwheel-loom-tests --release -- --test-threads=2 --nocapture "$@"

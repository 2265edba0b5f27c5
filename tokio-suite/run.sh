#!/usr/bin/env bash
# Runs tokio's time tests (made by port.sh) against tickwheel_percpu::time, two ways: each file as
# one binary with its tests in parallel threads (as `cargo test` runs it), and each test alone in a
# process of its own. Prints, per file, how many pass each way; fails if any test but the three
# named in `lifted` fails either way. A test that hangs is stopped by `timeout` and counts as failed.
#
#   tokio-suite/run.sh            both ways
#   tokio-suite/run.sh parallel   files only
set -uo pipefail
cd "$(dirname "$0")"

files="time_sleep time_timeout time_interval time_pause time_rt time_panic"
# A limit of tokio's that tickwheel_percpu::time lifts on purpose (see its module docs): a timer
# made with no time driver panics in tokio; the fallback base serves it instead. (tokio's other
# such limit, no pause on a multi-thread runtime, is kept: the pause is tokio's, and
# `pause_time_in_main_threads` and `pause_time_in_spawn_threads` pass.)
lifted="creating_sleep_outside_of_context
timeout_panic_caller
timeout_at_panic_caller"
mode=${1:-both}
# Seconds one file, or one test, may run before it counts as hung.
file_limit=${FILE_LIMIT:-120}
test_limit=${TEST_LIMIT:-20}

is_lifted() { grep -qx "$1" <<<"$lifted"; }

cargo test -p tickwheel-tokio-suite --features full --tests --no-run --quiet || exit 1

status=0
total_par=0 total_alone=0 total_n=0
printf '%-14s %10s %10s\n' file parallel alone
for f in $files; do
    names=$(cargo test -q -p tickwheel-tokio-suite --features full --test "$f" -- --list 2>/dev/null | sed -n 's/: test$//p')
    n=0
    for t in $names; do is_lifted "$t" || n=$((n + 1)); done
    skips=()
    for t in $lifted; do skips+=(--skip "$t"); done

    out=$(timeout "$file_limit" cargo test -p tickwheel-tokio-suite --features full --test "$f" -- --exact "${skips[@]}" 2>&1)
    par=$(grep -c '^test .* \.\.\. ok$' <<<"$out")
    [ "$par" = "$n" ] || { status=1; echo "$out" | grep -E 'FAILED|panicked|failures:' | head -20 >&2; }

    alone=-
    if [ "$mode" != parallel ]; then
        alone=0
        for t in $names; do
            is_lifted "$t" && continue
            if timeout "$test_limit" cargo test -q -p tickwheel-tokio-suite --features full --test "$f" -- --exact "$t" --test-threads=1 >/dev/null 2>&1; then
                alone=$((alone + 1))
            else
                echo "alone: $f::$t failed" >&2
                status=1
            fi
        done
        total_alone=$((total_alone + alone))
    fi
    total_par=$((total_par + par)) total_n=$((total_n + n))
    printf '%-14s %6s/%-3s %6s/%-3s\n' "$f" "$par" "$n" "$alone" "$n"
done
printf '%-14s %6s/%-3s %6s/%-3s\n' total "$total_par" "$total_n" "$total_alone" "$total_n"
exit $status

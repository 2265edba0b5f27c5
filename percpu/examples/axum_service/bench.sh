#!/usr/bin/env bash
# Loads examples/axum_service.rs with wrk on loopback, once per timer: requests/s, p99 latency and
# the server's CPU time per request at 100, 1000 and 10000 connections, then an idle check (K
# kept-alive connections, none closed before the keep-alive timeout, all closed after it, measured
# by the hyper_server example's --idle-against client). Prints a markdown table.
#
# REPS repetitions, each running every timer once, in an order rotated each repetition (so no
# timer always runs first or last); then the medians and ranges over the repetitions, and the
# ratios of the medians.
#
#   bash percpu/examples/axum_service/bench.sh                # full run, about 1 minute a timer a rep
#   REPS=1 SECS=2 CONNS="100" IDLE=200 bash percpu/examples/axum_service/bench.sh   # a smoke run
#
# Environment: TIMERS (default "tickwheel tokio"; add tokio-alt in a RUSTFLAGS="--cfg
# tokio_unstable" build), REPS (default 3), CONNS, SECS (wrk -d), WORKERS, IDLE (idle
# connections), KEEPALIVE_MS, PORT. Needs wrk (Debian: apt-get install -y wrk). Only 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../../.."

TIMERS=${TIMERS:-tickwheel tokio}
REPS=${REPS:-3}
CONNS=${CONNS:-100 1000 10000}
SECS=${SECS:-10}
WORKERS=${WORKERS:-2}
IDLE=${IDLE:-4000}
KEEPALIVE_MS=${KEEPALIVE_MS:-2000}
PORT=${PORT:-18080}
ADDR=127.0.0.1:$PORT

command -v wrk >/dev/null || { echo "bench.sh: wrk not found (apt-get install -y wrk)" >&2; exit 2; }
# 10000 connections need as many descriptors in wrk and in the server, and a long accept queue.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
need=$(printf '%s\n' $CONNS "$IDLE" | sort -n | tail -n 1)
if [ "$(ulimit -n)" -lt $((need + 256)) ]; then
    echo "bench.sh: ulimit -n is $(ulimit -n), below the $((need + 256)) that $need connections need" >&2
    exit 2
fi
if [ "$(cat /proc/sys/net/core/somaxconn)" -lt 65535 ]; then
    sysctl -qw net.core.somaxconn=65535 2>/dev/null ||
        echo "bench.sh: net.core.somaxconn stays $(cat /proc/sys/net/core/somaxconn) (not root?)" >&2
fi

cargo build --release -q -p tickwheel-percpu --features hyper --example axum_service --example hyper_server
BIN=${CARGO_TARGET_DIR:-target}/release/examples
TCK=$(getconf CLK_TCK)

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # utime + stime, in clock ticks

rows=$(mktemp)
echo "| rep | timer | conns | req/s | p99 | CPU µs/request | wrk errors |"
echo "|---|---|---:|---:|---:|---:|---|"
serve() { # serve TIMER REP
    local timer=$1 rep=$2
    "$BIN/axum_service" --listen "$ADDR" --workers "$WORKERS" --timer "$timer" \
        --keepalive-ms "$KEEPALIVE_MS" >"/tmp/axum_service.$timer.out" 2>&1 &
    pid=$!
    # Its banner comes after the socket is bound: wait for the banner, which says how it was built.
    for _ in $(seq 50); do
        grep -q "^serving on" "/tmp/axum_service.$timer.out" 2>/dev/null && break
        sleep 0.1
    done
    if grep -q "built with test-util" "/tmp/axum_service.$timer.out"; then
        echo "bench.sh: axum_service was built with the test-util feature (every sleep looks for a paused tokio clock); build it without" >&2
        kill "$pid"
        exit 2
    fi
    for c in $CONNS; do
        before=$(cpu_ticks "$pid")
        out=$(wrk -t2 -c"$c" -d"${SECS}s" --latency "http://$ADDR/")
        after=$(cpu_ticks "$pid")
        total=$(echo "$out" | awk '/requests in/ { print $1 }')
        rps=$(echo "$out" | awk '/^Requests\/sec/ { print $2 }')
        p99=$(echo "$out" | awk '$1 == "99%" { v = $2; if (v ~ /us$/) v /= 1000; else if (v ~ /ms$/) v += 0; else if (v ~ /s$/) v *= 1000; printf "%.2f", v }')
        errors=$(echo "$out" | awk '/Socket errors|Non-2xx/ { $1 = $1; printf "%s; ", $0 }')
        us=$(awk -v t="$((after - before))" -v hz="$TCK" -v n="$total" \
            'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')
        echo "| $rep | $timer | $c | $rps | ${p99}ms | $us | ${errors:-none} |"
        echo "$timer $c $rps $p99 $us" >>"$rows"
        # Let the keep-alive timer close wrk's connections before the next step.
        sleep "$(awk -v ms="$KEEPALIVE_MS" 'BEGIN { print ms / 1000 + 1 }')"
    done
    # --header-ms is unused by --idle-against; it only has to be above --idle-ms.
    idle=$("$BIN/hyper_server" --idle-against "$ADDR" --idle-conns "$IDLE" \
        --idle-ms "$KEEPALIVE_MS" --header-ms "$((KEEPALIVE_MS + 1))") || idle="FAILED: $idle"
    echo "| $rep | $timer | idle check: $idle |"
    kill -TERM "$pid"
    wait "$pid" || true
    echo "| $rep | $timer | server: $(tail -n 1 "/tmp/axum_service.$timer.out") |"
}
read -r -a order <<<"$TIMERS"
for rep in $(seq "$REPS"); do
    for timer in "${order[@]}"; do
        serve "$timer" "$rep"
    done
    order=("${order[@]:1}" "${order[0]}") # rotate
done

# Medians (and ranges) over the repetitions, then each timer's median req/s against the first
# timer's at each connection count.
echo
echo "| timer | conns | req/s median (min-max) | p99 ms median (min-max) | CPU µs/request median (min-max) |"
echo "|---|---:|---:|---:|---:|"
med() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); printf "%s (%s-%s)", m, v[1], v[NR] }'; }
first=${TIMERS%% *}
for timer in $TIMERS; do
    for c in $CONNS; do
        sel() { awk -v t="$timer" -v c="$c" -v f="$1" '$1 == t && $2 == c { print $f }' "$rows"; }
        echo "| $timer | $c | $(sel 3 | med) | $(sel 4 | med) | $(sel 5 | med) |"
    done
done
echo
echo "| conns | req/s median, $first / each timer |"
echo "|---:|---|"
for c in $CONNS; do
    line=""
    base=$(awk -v t="$first" -v c="$c" '$1 == t && $2 == c { print $3 }' "$rows" | med | cut -d' ' -f1)
    for timer in $TIMERS; do
        [ "$timer" = "$first" ] && continue
        m=$(awk -v t="$timer" -v c="$c" '$1 == t && $2 == c { print $3 }' "$rows" | med | cut -d' ' -f1)
        line="$line${line:+; }$first/$timer $(awk -v a="$base" -v b="$m" 'BEGIN { printf "%.2fx", a / b }')"
    done
    echo "| $c | $line |"
done
rm -f "$rows"

#!/usr/bin/env bash
# The cost/latency sweep of issue 9: open-loop `bench write --rate R` for each offered
# rate R and each `min_object_interval`, one run at a time, at 20 ms PUT latency and
# 10 ms GET latency, 100 regions, 1 KiB entries. Each run's JSON line is appended to
# $OUT; plot it with scripts/plot_latency.py.
#
#   scripts/latency_sweep.sh                          # defaults below
#   SECONDS_PER_RUN=5 OUT=/tmp/sweep.jsonl scripts/latency_sweep.sh --hedge off
#   python3 scripts/plot_latency.py /tmp/sweep.jsonl docs/latency.svg
#
# Arguments are passed to every run (e.g. --put-tail 0.01:200 --hedge fixed:40).
#
# RATES            offered loads, appends/s        (default "250 500 1000 2000 4000 8000")
# INTERVALS        min_object_interval values, ms  (default "5 10 20")
# SECONDS_PER_RUN  seconds of arrivals per run     (default 10)
# PUT_MS, GET_MS   store latencies, ms             (default 20, 10)
# OUT              JSON lines file, appended to    (default latency_sweep.jsonl)
# BENCH            the bench binary; unset: built with `cargo build --release --example
#                  bench` (CARGO_TARGET_DIR honoured, CARGO_BUILD_JOBS for -j)
# Progress goes to stderr.
set -euo pipefail

RATES=${RATES:-"250 500 1000 2000 4000 8000"}
INTERVALS=${INTERVALS:-"5 10 20"}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
PUT_MS=${PUT_MS:-20}
GET_MS=${GET_MS:-10}
OUT=${OUT:-latency_sweep.jsonl}

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z "${BENCH:-}" ]]; then
    (cd "$root" && cargo build --quiet --release --example bench)
    BENCH="${CARGO_TARGET_DIR:-$root/target}/release/examples/bench"
fi
[[ -x "$BENCH" ]] || { echo "latency_sweep: no bench binary at $BENCH" >&2; exit 1; }

err=$(mktemp)
trap 'rm -f "$err"' EXIT
for interval in $INTERVALS; do
    for rate in $RATES; do
        echo "latency_sweep: rate $rate/s, min_object_interval $interval ms" >&2
        if ! line=$("$BENCH" write --store memory --rate "$rate" --seconds "$SECONDS_PER_RUN" \
            --put-latency-ms "$PUT_MS" --get-latency-ms "$GET_MS" \
            --regions 100 --entry-bytes 1024 --min-object-interval-ms "$interval" \
            "$@" 2>"$err"); then
            cat "$err" >&2
            exit 1
        fi
        echo "$line" >>"$OUT"
    done
done
echo "latency_sweep: $OUT" >&2

#!/usr/bin/env bash
# docs/COSTS.md ("What it costs"): request counts at idle, light, moderate and saturating
# load for several `min_object_interval` values, 20 ms PUT / 10 ms GET latency, 100
# regions, 1 KiB entries, regions truncating 8 objects behind (so the reclaimer lists
# and deletes as a node's would). Writes docs/cost_sweep.jsonl (one `bench write` line
# per run) and prints the table: USD per node-month per price table.
#
#   scripts/cost_sweep.sh            # SECONDS_PER_RUN=10 by default
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/bench}
[ -x "$B" ] || cargo build --release --all-features --example bench
S=${SECONDS_PER_RUN:-10}
OUT=docs/cost_sweep.jsonl
: >"$OUT"
W="--store memory --put-latency-ms 20 --get-latency-ms 10 --regions 100 --entry-bytes 1024 --seconds $S --obsolete-lag 8 --reclaim-grace-ms 2000 --max-create-duration-ms 1000"
for interval in 0 10 20 50 100; do
  for load in "--rate 100" "--rate 2000" "--appenders 1024"; do
    # shellcheck disable=SC2086
    "$B" write $W --min-object-interval-ms "$interval" $load 2>/dev/null | tail -1 >>"$OUT"
  done
done
# Idle: the keep-alive object every half link window, measured with a 15 s window
# (reclaim_grace 20 s − max_create_duration 5 s) over 60 idle seconds.
"$B" write --store memory --put-latency-ms 20 --regions 100 --seconds 1 --rate 10 \
  --reclaim-grace-ms 20000 --max-create-duration-ms 5000 --idle-seconds 60 2>/dev/null | tail -1 >>"$OUT"
python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tables = ["s3_standard", "s3_express_one_zone", "gcs_standard", "azure_blob_hot"]
print("| min_object_interval | load | appends/s | PUT/h | GET/h | LIST/h | DELETE/h | " + " | ".join(tables) + " |")
print("|---|---|---|---|---|---|---|" + "---|" * len(tables))
for r in rows:
    if "idle_requests_per_hour" in r:
        continue
    load = f"open {r['offered_rate']:.0f}/s" if r["mode"] == "open" else f"closed {r['appenders']}"
    q = r["requests_per_hour"]
    usd = r["usd_per_month"]
    print(f"| {r['min_object_interval_ms']} ms | {load} | {r['appends_per_s']:.0f} | {q['put']:.0f} | {q['get']:.0f} | {q['list']:.0f} | {q['delete']:.0f} | "
          + " | ".join(f"${usd[t]:,.2f}" for t in tables) + " |")
for r in rows:
    if "idle_requests_per_hour" in r:
        q = r["idle_requests_per_hour"]
        print(f"\nidle, 15 s link window: {q} requests/hour over {r['idle_seconds']} s")
EOF

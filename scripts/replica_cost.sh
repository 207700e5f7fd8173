#!/usr/bin/env bash
# docs/COSTS.md's cost rows for one log over three stores: three S3 Express One Zone
# buckets (6 ms PUT / 4 ms GET each, `--replicas 3`) beside one S3 Standard bucket
# (20 ms PUT / 10 ms GET), at the same `min_object_interval` (20 ms) and loads as
# scripts/cost_sweep.sh. Requests and bytes are summed over the stores, so the per-GB
# charges of S3 Express are counted three times. Writes docs/replica_cost.jsonl.
#
#   scripts/replica_cost.sh            # SECONDS_PER_RUN=10 by default
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/bench}
[ -x "$B" ] || cargo build --release --all-features --example bench
S=${SECONDS_PER_RUN:-10}
OUT=docs/replica_cost.jsonl
: >"$OUT"
W="--store memory --regions 100 --entry-bytes 1024 --seconds $S --obsolete-lag 8 --reclaim-grace-ms 2000 --max-create-duration-ms 1000 --min-object-interval-ms 20"
for load in "--rate 100" "--rate 2000" "--appenders 1024"; do
  # shellcheck disable=SC2086
  "$B" write $W --put-latency-ms 20 --get-latency-ms 10 $load 2>/dev/null | tail -1 >>"$OUT"
  # shellcheck disable=SC2086
  "$B" write $W --replicas 3 --put-latency-ms 6 --get-latency-ms 4 $load 2>/dev/null | tail -1 >>"$OUT"
done
python3 - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| stores | load | appends/s | p50 ms | p99 ms | PUT/h | GET/h | LIST/h | USD/month |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    load = f"open {r['offered_rate']:.0f}/s" if r["mode"] == "open" else f"closed {r['appenders']}"
    q = r["requests_per_hour"]
    usd = r["usd_per_month"]
    if r.get("replicas", 1) > 1:
        stores, price = f"{r['replicas']} × S3 Express One Zone", usd["s3_express_one_zone"]
    else:
        stores, price = "1 × S3 Standard", usd["s3_standard"]
    print(f"| {stores} | {load} | {r['appends_per_s']:.0f} | {r['p50_ms']} | {r['p99_ms']} | {q['put']:.0f} | {q['get']:.0f} | {q['list']:.0f} | ${price:,.2f} |")
EOF

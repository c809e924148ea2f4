#!/usr/bin/env bash
# run.sh [OUTDIR] — the fleet-sharded decoded cache on one 2-core host: 4 feedd
# on 127.0.0.1 (1 worker thread each), each with a decoded-sample cache of 30%
# of the dataset's cached bytes, one feed-bench client (simulated step of
# 1 us/image: the loader's throughput), owner routing on against off (off:
# each server caches whatever balancing sends it). Per run and mode, one
# feed-bench invocation warms up over epoch 1 (31 batches of 32 = the whole
# 1000-image sample with drop_last) and measures epoch 2; a second one
# measures epoch 3 (warm-up over epochs 1 and 2). Modes alternate within a run
# so that both see the same machine. The budget comes from a probe: one server
# with room for everything, one epoch, its feedd_cache_bytes.
# Environment: DATA (default $FEED_SAMPLE_DIR or the shared ImageNet sample),
# RUNS (5), SIZE (224), SIDE (256, cache=SIDE), BIN (default ../../../build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/raw-size${SIZE:-224}}
bin=${BIN:-$here/../../../build}
bench=$bin/bench/e2e/feed-bench
data=${DATA:-${FEED_SAMPLE_DIR:-/work/wt/shared/datasets/imagenet-sample}}
runs=${RUNS:-5} size=${SIZE:-224} side=${SIDE:-256}
mkdir -p "$out"
common=(--source remote --data "$data" --device none --us-per-image 1 --batch 32
        --size "$size" --server-threads 1 --server-cache-side "$side" --window 4 --prefetch 4)
"$bench" "${common[@]}" --spawn-servers 1 --warmup 0 --steps 31 \
    --server-cache-bytes 4000000000 --out "$out/probe" > "$out/probe.txt" 2>&1
full=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(int(r["server_caches"][0]["bytes"]))' "$out/probe/summary.json")
budget=$((full * 30 / 100))
echo "dataset cached at side $side: $full bytes; budget per server $budget" | tee "$out/budget.txt"
for r in $(seq 1 "$runs"); do
    for epoch in 2 3; do
        warm=$((31 * (epoch - 1)))
        for mode in on off; do
            d=$out/run$r-epoch$epoch-$mode
            "$bench" "${common[@]}" --spawn-servers 4 --warmup "$warm" --steps 31 \
                --server-cache-bytes "$budget" --owner-routing "$mode" --out "$d" > "$d.txt" 2>&1
            grep -E '^remote ' "$d.txt" | sed "s/^/run $r epoch $epoch $mode: /"
        done
    done
done
python3 "$here/summarize.py" "$out" | tee "$out/summary.txt"

#!/usr/bin/env bash
# run.sh OUTDIR — the fleet-sharded decoded cache at 224x224 on the GPU
# machine's 16 cores, so that the client no longer shares the servers' cores
# (bench/results/fleet-2core-2026-12-03 measured the same on 2 cores, where
# the client bounded the routed rate at 224). From the GPU bundle:
#   BIN=bundle/bin DATA=bundle/data/tree run.sh OUT
# 4 feedd, 3 worker threads each, pinned to CPUs 4-6, 7-9, 10-12, 13-15, each
# with a decoded-sample cache (cache=256) of 30% of the dataset's cached
# bytes (the four hold 120% between them); one feed-bench client on CPUs 0-3
# with a simulated step of 1 us/image (images/s is the loader's delivery
# rate), batch 32, window 4, prefetch 4. Data: the bundle's original ImageNet
# JPEGs, each listed REPEAT times (symbolic links: distinct samples to the
# cache), so an epoch has N x REPEAT samples. Owner routing on against off
# (off: each server caches whatever balancing sends it, about a random 30%).
# Per run and mode one invocation warms over epoch 1 and measures epoch 2,
# another warms over epochs 1-2 and measures epoch 3; the modes alternate
# within each run. Summary by ../fleet-2core-2026-12-03/summarize.py.
# Environment: RUNS (5), REPEAT (16), SERVER_THREADS (3), CLIENT_CPUS (0-3),
# SERVER_CPUS (4-6:7-9:10-12:13-15), PROBE_CPUS (4-15: the one server of the budget probe).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUTDIR}
bin=${BIN:?BIN: the bin folder of the GPU bundle}
tree=${DATA:?DATA: an ImageFolder tree}
runs=${RUNS:-5} repeat=${REPEAT:-16}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$work/tree
for d in "$tree"/*/; do
  c=$(basename "$d")
  mkdir -p "$data/$c"
  for f in "$d"*; do
    b=$(basename "$f")
    for k in $(seq "$repeat"); do ln -s "$(cd "$(dirname "$f")" && pwd)/$b" "$data/$c/r$k-$b"; done
  done
done
n=$(find "$data" -type l | wc -l)
batches=$((n / 32))
echo "samples $n, batches per epoch $batches" | tee "$out/data.txt"
client=(taskset -c "${CLIENT_CPUS:-0-3}")
common=(--source remote --data "$data" --device none --us-per-image 1 --batch 32 --size 224
        --server-threads "${SERVER_THREADS:-3}" --server-cache-side 256 --window 4 --prefetch 4
        --feedd "$bin/feedd")
"${client[@]}" "$bin/feed-bench" "${common[@]}" --spawn-servers 1 --server-cpus "${PROBE_CPUS:-4-15}" --warmup 0 \
    --steps "$batches" --server-cache-bytes 40000000000 --out "$out/probe" > "$out/probe.txt" 2>&1
full=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(int(r["server_caches"][0]["bytes"]))' "$out/probe/summary.json")
budget=$((full * 30 / 100))
echo "dataset cached at side 256: $full bytes; budget per server $budget" | tee "$out/budget.txt"
for r in $(seq 1 "$runs"); do
  for epoch in 2 3; do
    warm=$((batches * (epoch - 1)))
    for mode in on off; do
      d=$out/run$r-epoch$epoch-$mode
      "${client[@]}" "$bin/feed-bench" "${common[@]}" --spawn-servers 4 \
          --server-cpus "${SERVER_CPUS:-4-6:7-9:10-12:13-15}" --warmup "$warm" --steps "$batches" \
          --server-cache-bytes "$budget" --owner-routing "$mode" --out "$d" > "$d.txt" 2>&1
      grep -E '^remote ' "$d.txt" | sed "s/^/run $r epoch $epoch $mode: /"
    done
  done
done
python3 "$here/../fleet-2core-2026-12-03/summarize.py" "$out" | tee "$out/summary.txt"

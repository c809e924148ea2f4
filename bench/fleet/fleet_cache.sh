#!/usr/bin/env bash
# fleet_cache.sh OUTDIR: the fleet-sharded decoded cache, owner routing on
# against off. 4 feedd on 127.0.0.1 (SERVER_THREADS worker threads each), each
# with a decoded-sample cache (cache=SIDE) of 30% of the dataset's cached
# bytes (the four hold 120% between them), one feed-bench client with a
# simulated step of 1 us/image (images/s is the loader's delivery rate), batch
# 32, window 4, prefetch 4. Off: each server caches whatever balancing sends it
# (about a random 30%). The budget comes from a probe: one server with room for
# everything, one epoch, its feedd_cache_bytes. Per run and mode one
# invocation warms over epoch 1 and measures epoch 2, another warms over
# epochs 1-2 and measures epoch 3; the modes alternate within each run so that
# both see the same machine. fleet_cache_summary.py writes OUTDIR/summary.txt.
# DATA's files are listed REPEAT times (symbolic links: distinct samples to the
# cache), so an epoch has N x REPEAT samples.
#   2-core host:  fleet_cache.sh OUT             (SIZE=64 for 64x64 output)
#   GPU bundle:   BIN=bundle/bin DATA=bundle/data/tree REPEAT=16 SERVER_THREADS=3 \
#                 CLIENT_CPUS=0-3 SERVER_CPUS=4-6:7-9:10-12:13-15 PROBE_CPUS=4-15 fleet_cache.sh OUT
# Environment: BIN (build/ of this checkout, or a folder holding feed-bench and
# feedd), DATA ($FEED_SAMPLE_DIR or the shared ImageNet sample), RUNS (5),
# SIZE (224), SIDE (256), REPEAT (1), SERVER_THREADS (1); CLIENT_CPUS,
# SERVER_CPUS (':'-separated, one list per server), PROBE_CPUS: unpinned when
# empty.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: fleet_cache.sh OUTDIR}
bin=${BIN:-$here/../../build}
bench=$bin/feed-bench feedd=$bin/feedd
[ -x "$bench" ] || bench=$bin/bench/e2e/feed-bench
[ -x "$feedd" ] || feedd=$bin/server/feedd
tree=${DATA:-${FEED_SAMPLE_DIR:-/work/shared/datasets/imagenet-sample}}
runs=${RUNS:-5} size=${SIZE:-224} side=${SIDE:-256} repeat=${REPEAT:-1}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
data=$tree
if [ "$repeat" -gt 1 ]; then
  data=$work/tree
  for d in "$tree"/*/; do
    c=$(basename "$d")
    mkdir -p "$data/$c"
    for f in "$d"*; do
      b=$(basename "$f")
      for k in $(seq "$repeat"); do ln -s "$(cd "$(dirname "$f")" && pwd)/$b" "$data/$c/r$k-$b"; done
    done
  done
fi
n=$(find -L "$data" -mindepth 2 -type f | wc -l)
batches=$((n / 32))
echo "samples $n, batches per epoch $batches" | tee "$out/data.txt"
pin() { # CPUS -> the taskset prefix, or nothing
  [ -n "$1" ] && echo "taskset -c $1"
  true
}
client=($(pin "${CLIENT_CPUS:-}"))
common=(--source remote --data "$data" --device none --us-per-image 1 --batch 32 --size "$size"
        --server-threads "${SERVER_THREADS:-1}" --server-cache-side "$side" --window 4 --prefetch 4
        --feedd "$feedd")
probe_cpus=() server_cpus=()
[ -n "${PROBE_CPUS:-}" ] && probe_cpus=(--server-cpus "$PROBE_CPUS")
[ -n "${SERVER_CPUS:-}" ] && server_cpus=(--server-cpus "$SERVER_CPUS")
${client[@]+"${client[@]}"} "$bench" "${common[@]}" --spawn-servers 1 ${probe_cpus[@]+"${probe_cpus[@]}"} \
    --warmup 0 --steps "$batches" --server-cache-bytes 40000000000 --out "$out/probe" > "$out/probe.txt" 2>&1
full=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(int(r["server_caches"][0]["bytes"]))' "$out/probe/summary.json")
budget=$((full * 30 / 100))
echo "dataset cached at side $side: $full bytes; budget per server $budget" | tee "$out/budget.txt"
for r in $(seq 1 "$runs"); do
  for epoch in 2 3; do
    warm=$((batches * (epoch - 1)))
    for mode in on off; do
      d=$out/run$r-epoch$epoch-$mode
      ${client[@]+"${client[@]}"} "$bench" "${common[@]}" --spawn-servers 4 ${server_cpus[@]+"${server_cpus[@]}"} \
          --warmup "$warm" --steps "$batches" --server-cache-bytes "$budget" --owner-routing "$mode" \
          --out "$d" > "$d.txt" 2>&1
      grep -E '^remote ' "$d.txt" | sed "s/^/run $r epoch $epoch $mode: /"
    done
  done
done
python3 "$here/fleet_cache_summary.py" "$out" | tee "$out/summary.txt"

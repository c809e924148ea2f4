#!/usr/bin/env bash
# stat_cost.sh [BUILD] [DATA]: the decoded cache's staleness check (one stat()
# per hit) against what a hit costs. Times stat() over DATA's JPEGs
# (stat_cost.c), then serves DATA from feedd's cache at side 64 (1 worker,
# feed-client-probe, 64x64 u8, the first epoch fills the cache) and reads
# feedd's resize stage (a hit's crop and resize) per sample from /metrics.
# Writes stat_cost.txt beside itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
data=${2:-/work/shared/datasets/imagenet-sample}
out=$here/stat_cost.txt
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cc -O2 -o "$d/stat_cost" "$here/stat_cost.c"
"$d/stat_cost" "$data" | tee "$out"
"$build/server/feedd" --listen 127.0.0.1:0 --port-file "$d/port" --threads 1 \
  --metrics-listen 127.0.0.1:0 --metrics-port-file "$d/mport" \
  --dataset "imagenet=$data,cache=64" --cache-bytes 512M > "$d/log" 2>&1 &
pid=$!
while [ ! -s "$d/port" ] || [ ! -s "$d/mport" ]; do sleep 0.1; done
"$build/client/feed-client-probe" --target "127.0.0.1:$(cat "$d/port")" --dataset imagenet \
  --size 64 --dtype u8 --batches 200 --same-epoch 2>&1 | grep "img/s" | tee -a "$out"
curl -s "http://127.0.0.1:$(cat "$d/mport")/metrics" | grep -E '^feedd_(stage_(seconds|ops)_total\{stage="resize"\}|cache_(hits|misses|stale)_total) ' | tee -a "$out"
kill "$pid"; wait "$pid" || true

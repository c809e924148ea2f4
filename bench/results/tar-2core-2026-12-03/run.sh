#!/usr/bin/env bash
# Tar shards on local disk against the same images' ImageFolder tree, per
# server, on the 2-core machine (shared with other jobs): feed-preproc-bench
# (feedd's read + decode + crop/resize path, no network) on the ImageNet
# sample as a tree and as 10 shards of 100 samples written by feed-pack, both
# in the page cache. Five rounds; within each round both data sets run one
# after the other, the order alternating by round (ABBA), so drift in the
# machine's load falls on both. Reports (table.py) img/s on 1 thread and on
# 2, images per CPU-second (thread CPU time: what a server's cores buy, and
# far less moved by the other jobs than wall time), the read time per sample,
# and the shards/tree ratio per round: median and range.
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
data=${DATA:-/work/shared/datasets/imagenet-sample}
out=bench/results/tar-2core-2026-12-03
tmp=${TMPDIR:-/tmp}/tar-bench
rm -rf "$tmp"
mkdir -p "$tmp"
"$b/server/tools/feed-pack" "$data" "$tmp/shard" --format tar --shard-samples 100 > "$out/pack.txt"
shards="$tmp/shard-{000000..000009}.tar"
{ du -sb "$data"; du -cb "$tmp"/shard-*.tar | tail -1; } > "$out/sizes.txt"
cat "$tmp"/shard-*.tar > /dev/null
find "$data" -type f -exec cat {} + > /dev/null
rm -f "$out/preproc.jsonl" "$out/preproc.txt"
cat /proc/loadavg > "$out/loadavg.txt"
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 1 ]; then order=("$data" "$shards"); else order=("$shards" "$data"); fi
  for d in "${order[@]}"; do
    "$b/bench/preproc/feed-preproc-bench" "$d" --threads 2 --seconds 5 --warmup 1 \
      --no-reference --json "$out/preproc.jsonl" >> "$out/preproc.txt"
  done
done
cat /proc/loadavg >> "$out/loadavg.txt"
python3 "$out/table.py" "$out/preproc.jsonl" > "$out/table.md"
cat "$out/sizes.txt" "$out/table.md"

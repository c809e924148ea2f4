#!/usr/bin/env bash
# The decoded-sample cache on the 2-core CI machine (shared with other jobs):
# five runs with the whole ImageNet sample in the cache (512M), then five
# with a cache of about half of it (160M, cache/dataset ~0.5), train 224,
# cache side 256. Raw lines in full.jsonl / half.jsonl, tables in *.txt.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bench=${BENCH:-build/bench/preproc/feed-preproc-bench}
data=${DATA:-/work/shared/datasets/imagenet-sample}
out=bench/results/cache-2core-2026-12-01
for i in 1 2 3 4 5; do
  nice -n 10 "$bench" "$data" --threads 2 --seconds 5 --decoded-cache 512M --no-reference \
    --json "$out/full.jsonl" >> "$out/full.txt"
done
for i in 1 2 3 4 5; do
  nice -n 10 "$bench" "$data" --threads 2 --seconds 5 --decoded-cache 160M --no-reference \
    --json "$out/half.jsonl" >> "$out/half.txt"
done

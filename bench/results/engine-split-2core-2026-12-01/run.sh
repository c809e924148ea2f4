#!/usr/bin/env bash
# The engine's time split on the 2-core CI machine (shared with other jobs):
# feed-engine-split (bench/preproc/feed_engine_split.c) over the ImageNet
# sample, 3 passes a run, 5 runs.
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
out=bench/results/engine-split-2core-2026-12-01
{ grep -m1 'model name' /proc/cpuinfo; grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > "$out/cpu.txt"
rm -f "$out/runs.txt"
for i in 1 2 3 4 5; do
  "$b/bench/preproc/feed-engine-split" "${DATA:-/work/shared/datasets/imagenet-sample}" 3 >> "$out/runs.txt"
done
cat "$out/cpu.txt" "$out/runs.txt"

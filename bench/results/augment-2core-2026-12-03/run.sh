#!/usr/bin/env bash
# The per-sample augmentations on one core of the 2-core CI machine (shared
# with other jobs, so both sides count their thread's CPU time): the full
# recipe (RandomResizedCrop 176 + flip + TrivialAugmentWide + RandomErasing
# p=0.1) in feedd's engine (bench/preproc/feed_augment_bench.c) against
# torchvision's same pipeline (bench/preproc/torchvision_augment_bench.py) on
# the same 1,000 ImageNet originals, and the recipe's cost over
# RandomResizedCrop + flip alone on each side. 5 runs, each one pass of each
# side, back to back; summary.txt has the medians and ranges.
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
data=${DATA:-/work/wt/shared/datasets/imagenet-sample}
out=bench/results/augment-2core-2026-12-03
{ grep -m1 'model name' /proc/cpuinfo; nproc; /usr/bin/python3 -c 'import torch, torchvision, PIL; print("torch", torch.__version__, "torchvision", torchvision.__version__, "Pillow", PIL.__version__)'; } > "$out/cpu.txt"
rm -f "$out/feed_runs.txt" "$out/torchvision_runs.txt"
for i in 1 2 3 4 5; do
  "$b/bench/preproc/feed-augment-bench" "$data" 1 176 torchvision-v2-recipe | sed 1d >> "$out/feed_runs.txt"
  /usr/bin/python3 bench/preproc/torchvision_augment_bench.py "$data" --size 176 | sed 1d >> "$out/torchvision_runs.txt"
done
/usr/bin/python3 - "$out" > "$out/summary.txt" <<'PY'
import statistics, sys
out = sys.argv[1]
feed = [list(map(float, l.split())) for l in open(f"{out}/feed_runs.txt")]
tv = [list(map(float, l.split())) for l in open(f"{out}/torchvision_runs.txt")]
def row(name, xs, unit=""):
    return f"{name:44s} median {statistics.median(xs):8.2f}{unit}  range {min(xs):.2f} .. {max(xs):.2f}"
print("5 runs; images per CPU-second of one thread, 1,000 ImageNet originals, crop 176")
print(row("feedd plain (RRC + flip), img/s", [r[2] for r in feed]))
print(row("feedd recipe, img/s", [r[3] for r in feed]))
print(row("feedd recipe / plain time (goal <= 1.3)", [r[4] for r in feed]))
print(row("feedd augmentation alone, us/image", [r[5] for r in feed]))
print(row("torchvision plain, img/s", [r[2] for r in tv]))
print(row("torchvision recipe, img/s", [r[3] for r in tv]))
print(row("torchvision recipe / plain time", [r[2] / r[3] for r in tv]))
print(row("recipe: feedd / torchvision, same run (goal >= 2)", [f[3] / t[3] for f, t in zip(feed, tv)]))
PY
cat "$out/cpu.txt" "$out/summary.txt"

#!/usr/bin/env bash
# Re-encoded packs against the original JPEGs on the 2-core CI machine
# (shared with other jobs): sizes, engine images/s per core (one thread; the
# three data sets in turn within each of 5 rounds, so side by side), and the
# PSNR of each pack's samples against the originals' (psnr_pack.c).
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
data=${DATA:-/work/shared/datasets/imagenet-sample}
out=bench/results/reencode-2core-2026-12-01
tmp=${TMPDIR:-/tmp}/reencode-packs
mkdir -p "$tmp"
"$b/server/tools/feed-pack" "$data" "$tmp/ms400.pack" --max-side 400 --quality 90 --subsample 420 > /dev/null
"$b/server/tools/feed-pack" "$data" "$tmp/ms320.pack" --max-side 320 --quality 90 --subsample 420 > /dev/null
{ du -sb "$data"; ls -l "$tmp"/ms400.pack "$tmp"/ms320.pack; } > "$out/sizes.txt"
rm -f "$out/preproc.jsonl"
for round in 1 2 3 4 5; do
  for d in "$data" "$tmp/ms400.pack" "$tmp/ms320.pack"; do
    nice -n 5 "$b/bench/preproc/feed-preproc-bench" "$d" --threads 1 --seconds 3 --no-reference \
      --json "$out/preproc.jsonl" > /dev/null
  done
done
gcc -O2 -o "$tmp/psnr_pack" "$out/psnr_pack.c" -Iserver/engine -Icommon/include \
  "$b/server/engine/libfeedengine.a" "$b/common/libfeedcommon.a" -ljpeg -lm -lpthread
for p in ms400 ms320; do
  echo "$p $("$tmp/psnr_pack" "$data" "$tmp/$p.pack")"
done > "$out/psnr.txt"
python3 - "$out/preproc.jsonl" > "$out/table.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["data"].rsplit("/", 1)[-1], []).append(r["fast_img_per_s_1t"])
base = by[next(iter(by))]
print("| data | img/s per core, median (range) of 5 | vs originals, median (range) |")
print("| --- | ---: | ---: |")
for k, v in by.items():
    ratios = [x / y for x, y in zip(v, base)]
    print(f"| {k} | {statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f}) | "
          f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
PY
cat "$out/sizes.txt" "$out/table.md" "$out/psnr.txt"

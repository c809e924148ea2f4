#!/usr/bin/env bash
# make.sh: this folder's table and plots from the passes' raw files, run from
# the repository root: the fourth pass's ceilings and DataLoader rows beside
# feedclient's 5 x 60 s rows of the third pass (c) and, for resnet18 on the
# original JPEGs without a cache, the second (b).
set -eu
r=bench/results
here=$r/h200-2026-12-01d/vs-feedclient
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pick() { grep "\"label\": \"$2\"" "$1"; }
{
  pick $r/h200-2026-12-01d/combined.jsonl r18-synth
  pick $r/h200-2026-12-01d/combined.jsonl r18-dl-orig
  pick $r/h200-2026-12-01b-torch/combined.jsonl r18-feed-orig
  pick $r/h200-2026-12-01c/combined.jsonl r18-feed-orig-cache
  pick $r/h200-2026-12-01d/combined.jsonl r18-dl-reenc
  pick $r/h200-2026-12-01c/combined.jsonl r18-feed-reenc
  pick $r/h200-2026-12-01d/combined.jsonl r50-synth
  pick $r/h200-2026-12-01d/combined.jsonl r50-dl-orig
  pick $r/h200-2026-12-01c/combined.jsonl r50-feed-orig
} > "$t/h2h.jsonl"
for s in h200-2026-12-01d/r18-synth/series-r18-synth h200-2026-12-01d/r18-dl-orig/series-r18-dl-orig \
         h200-2026-12-01b-torch/call2/h2h/series-r18-feed-orig \
         h200-2026-12-01c/c1/cache4/series-r18-feed-orig-cache \
         h200-2026-12-01d/r18-dl-reenc/series-r18-dl-reenc h200-2026-12-01c/c1/reenc4/series-r18-feed-reenc; do
  ln -s "$PWD/$r/$s.json.gz" "$t/"
done
python3 bench/torch/h2h_report.py "$t" > "$here/table.md"
cp "$t/h2h.jsonl" "$t/h2h_throughput.png" "$t/h2h_util_and_wait.png" "$here/"
